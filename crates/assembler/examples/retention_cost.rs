//! Measures what retention costs: the time one `Store::tick` takes to delete a full batch
//! (`EXPIRE_PER_TICK`) of completed messages, per message, on sled and in memory, plus the
//! flush that makes the deletions durable on sled. Each message has one call assembled from
//! 8 fragments, a matched result, and its chunk and result streams.
//!
//! Run: `cargo run --release -p assembler --example retention_cost`

use assembler::store::EXPIRE_PER_TICK;
use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::Provider;
use std::time::Instant;

const RETENTION: u64 = 1_000_000;
const ROUNDS: usize = 5;

fn delta(id: Option<&str>, args: &str) -> Vec<u8> {
    let mut call = serde_json::json!({"index": 0, "type": "function",
        "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["function"]["name"] = "lookup".into();
    }
    serde_json::to_vec(
        &serde_json::json!({"id": "c", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]}),
    )
    .unwrap_or_default()
}

fn input<'a>(kind: InputKind, msg: &'a str, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        kind,
        conversation_id: "conv",
        message_id: msg,
        provider: Some(Provider::OpenaiChat),
        seq: Seq::Producer(seq),
        control: None,
        body,
        origin: None,
    }
}

/// Fills `n` completed messages at `now` (round `r` names them apart).
fn fill(store: &Store, r: usize, n: usize, now: u64) -> Result<(), Box<dyn std::error::Error>> {
    for i in 0..n {
        let msg = format!("m{r}-{i}");
        let id = format!("call_{msg}");
        let mut bodies = vec![delta(Some(&id), "{\"q\":\"")];
        bodies.extend((0..6).map(|_| delta(None, "abcdefgh")));
        bodies.push(delta(None, "\"}"));
        bodies.push(br#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_vec());
        bodies.push(b"[DONE]".to_vec());
        for (seq, body) in bodies.iter().enumerate() {
            let _ = store.apply(&input(InputKind::Chunk, &msg, seq as u64, body), now)?;
        }
        let result = format!(r#"{{"tool_call_id":"{id}","output":"ok"}}"#);
        let _ = store.apply(&input(InputKind::Result, &msg, 0, result.as_bytes()), now)?;
    }
    store.flush()?;
    Ok(())
}

fn measure(name: &str, store: &Store, sled: bool) -> Result<(), Box<dyn std::error::Error>> {
    let n = EXPIRE_PER_TICK;
    for r in 0..ROUNDS {
        let t0 = (r as u64) * 10 * RETENTION;
        // The previous round's stream tombstones are due now: drop them first, so this
        // round's tick spends its whole budget on messages.
        let start = Instant::now();
        store.tick(t0)?;
        if r > 0 {
            println!(
                "{name} round {r}: dropping {n} tombstone pairs took {:.1} ms",
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        fill(store, r, n, t0)?;
        let left_before = store.conversation("conv")?.len();
        let start = Instant::now();
        store.tick(t0 + RETENTION)?;
        let tick = start.elapsed();
        let start = Instant::now();
        if sled {
            store.flush()?;
        }
        let flush = start.elapsed();
        let left_after = store.conversation("conv")?.len();
        println!(
            "{name} round {r}: tick deleted {} messages in {:.1} ms ({:.1} µs/message), \
             flush {:.1} ms",
            left_before - left_after,
            tick.as_secs_f64() * 1e3,
            tick.as_secs_f64() * 1e6 / n as f64,
            flush.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        retention_ms: RETENTION,
        ..Config::default()
    };
    let dir = tempfile::tempdir()?;
    let sled = Store::open(&dir.path().join("db"), config.clone())?;
    measure("sled", &sled, true)?;
    let memory = Store::open_memory(config)?;
    measure("memory", &memory, false)?;
    Ok(())
}
