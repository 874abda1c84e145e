//! Shared by the benches that feed raw OpenAI chat chunks of one message through the durable
//! store (`large_arguments`, `previews`).

use assembler::{Input, InputKind, Seq, Store};
use chunk_model::Provider;
use std::time::{Duration, Instant};

/// Chunk `seq` of message `msg` of conversation `conv_big`: a raw OpenAI chat chunk.
pub fn chunk_input<'a>(msg: &'a str, seq: usize, body: &'a [u8]) -> Input<'a> {
    Input {
        kind: InputKind::Chunk,
        conversation_id: "conv_big",
        message_id: msg,
        provider: Some(Provider::OpenaiChat),
        seq: Seq::Producer(seq as u64),
        control: None,
        body,
        origin: None,
    }
}

/// `iters` runs for criterion's `iter_custom`, each on a new message `big_<n>` (`n` counts on
/// across runs and cases): the time spent in `timed(message)`; `untimed()` runs after each,
/// outside the timing.
pub fn time_messages(
    iters: u64,
    n: &mut u64,
    mut timed: impl FnMut(&str),
    mut untimed: impl FnMut(),
) -> Duration {
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        *n += 1;
        let msg = format!("big_{n}");
        let start = Instant::now();
        timed(&msg);
        spent += start.elapsed();
        untimed();
    }
    spent
}

/// Removes every outbox row, `batch` rows a peek (outside the timing); returns how many were
/// `tool_call.delta` events.
pub fn drain_outbox(store: &Store, batch: usize) -> usize {
    let mut deltas = 0;
    while let Ok(rows) = store.outbox_peek(batch) {
        if rows.is_empty() {
            break;
        }
        for r in rows {
            deltas += usize::from(r.headers.iter().any(|(_, v)| v == "tool_call.delta"));
            let _ = store.outbox_remove(r.key);
        }
    }
    deltas
}
