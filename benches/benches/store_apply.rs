//! Criterion bench: durable apply with group commit, in chunks per second. Each measured
//! batch applies 256 raw OpenAI chat chunks (decode + one sled transaction each: state,
//! argument piece, outbox rows, watermark) and then ONE flush (fsync), as the worker does per
//! fetched batch. Target: ≥ 100,000 chunks/s. The outbox is drained between batches, outside
//! the measurement (that is the relay's work). A `memory` variant shows the cost without
//! sled. Run: `cargo bench -p toolstream-benches --bench store_apply`.

use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::Provider;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::{Duration, Instant};
use toolstream_testkit::openai;

const BATCH: usize = 256;

/// One message's chunks: two calls of 14 argument fragments each, finish, `[DONE]` (32).
fn message() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for call in 0..2u32 {
        out.push(openai::call_start(
            call,
            &format!("call_{call}xyz"),
            "get_weather",
        ));
        out.push(openai::args_chunk(call, "{\"location\":"));
        for i in 0..12 {
            out.push(openai::args_chunk(call, &format!(" \"city {i}\",")));
        }
        out.push(openai::args_chunk(call, "\"unit\":\"c\"}"));
    }
    out.push(openai::finish_chunk("tool_calls"));
    out.push(openai::DONE.to_vec());
    out
}

/// Applies `batches` batches of 256 chunks (8 messages of 32, interleaved like concurrent
/// streams) with one flush each; returns the time spent in apply + flush only.
fn run(store: &Store, bodies: &[Vec<u8>], next_msg: &mut u64, batches: u64) -> Duration {
    let per_msg = bodies.len();
    let msgs_per_batch = BATCH / per_msg;
    let mut spent = Duration::ZERO;
    for _ in 0..batches {
        let ids: Vec<String> = (0..msgs_per_batch)
            .map(|k| format!("msg_{}", *next_msg + k as u64))
            .collect();
        *next_msg += msgs_per_batch as u64;
        let start = Instant::now();
        for (seq, body) in bodies.iter().enumerate() {
            for id in &ids {
                let input = Input {
                    kind: InputKind::Chunk,
                    conversation_id: "conv_bench",
                    message_id: id,
                    provider: Some(Provider::OpenaiChat),
                    seq: Seq::Producer(seq as u64),
                    control: None,
                    body,
                    origin: None,
                };
                let _ = store.apply(&input, 0);
            }
        }
        let _ = store.flush();
        spent += start.elapsed();
        while let Ok(rows) = store.outbox_peek(1024) {
            if rows.is_empty() {
                break;
            }
            for r in rows {
                let _ = store.outbox_remove(r.key);
            }
        }
    }
    spent
}

fn bench(c: &mut Criterion) {
    let bodies = message();
    assert_eq!(BATCH % bodies.len(), 0);
    let mut group = c.benchmark_group("store_apply");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(10));

    let dir = tempfile::tempdir().ok();
    let sled = match &dir {
        Some(d) => Store::open(d.path(), Config::default()),
        None => Store::open_temporary(Config::default()),
    };
    if let Ok(store) = sled {
        let mut next = 0u64;
        group.bench_function("sled_batch_256_one_flush", |b| {
            b.iter_custom(|iters| run(&store, &bodies, &mut next, iters))
        });
    }
    if let Ok(store) = Store::open_memory(Config::default()) {
        let mut next = 0u64;
        group.bench_function("memory_batch_256", |b| {
            b.iter_custom(|iters| run(&store, &bodies, &mut next, iters))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
