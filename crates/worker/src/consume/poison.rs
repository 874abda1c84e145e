//! A message delivered before (after a crash, a lost ack, a nak) is applied alone behind a
//! durable note, and dead-lettered as `poison` once the worker has stopped `max_deliver - 1`
//! times while applying it ([`apply_alone`]).

use super::apply::{apply_with_retry, BatchResult};
use super::inputs::OwnedInput;
use assembler::Store;
use chunk_model::wire::DeadLetterCode;
use std::time::Instant;

/// Applies one input that was delivered before, alone, behind a durable note (see
/// [`super::ConsumeLoop::process`]); dead-letters it as `poison` once the process has stopped
/// `give_up_after` times while applying it. Flushes. Blocking.
pub(super) fn apply_alone(store: &Store, input: &OwnedInput, give_up_after: u32) -> BatchResult {
    let started = Instant::now();
    let seq = input.origin.stream_seq;
    let outcome = match store.begin_attempt(seq) {
        Err(e) => Err(e),
        Ok(stops) if stops >= give_up_after => {
            let reason = DeadLetterCode::Poison.with(format_args!(
                "the worker stopped {stops} times while applying this input alone"
            ));
            store.reject(&input.as_input(), &reason, input.published_ms)
        }
        Ok(_) => apply_with_retry(store, input),
    };
    // the process is still here: whatever happened, this input did not stop it
    let ended = store.end_attempt(seq);
    let apply_time = started.elapsed();
    let flush_started = Instant::now();
    let flushed = match ended.and_then(|()| store.flush()) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "flush failed; input will be redelivered");
            false
        }
    };
    BatchResult {
        outcomes: vec![outcome],
        flushed,
        apply_time,
        flush_time: flush_started.elapsed(),
    }
}
