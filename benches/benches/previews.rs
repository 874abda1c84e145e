//! Criterion bench: the cost of argument previews (`tool_call.delta`, `Config::previews`) on
//! one large argument streamed in small fragments through the durable store, against previews
//! off, to show that previews stay linear (each byte is buffered and carried by one delta at
//! most; `partial_arguments` only while the text is at most `partial_max_bytes`).
//!
//! Cases: 256 KiB and 1 MiB of argument text in 16-byte fragments (raw OpenAI chat chunks
//! through `Store::apply` on sled, one flush per 256 chunks like the worker's group commit,
//! chunk `i` published at `i` ms), with
//! - `off`: previews off (the default);
//! - `default_throttle`: on with the default throttle (64 bytes, 250 ms: here a delta every
//!   250 chunks, 4 KiB);
//! - `every_chunk`: on with no throttle (a delta, i.e. an outbox row, after every chunk; the
//!   first 16 KiB each with `partial_arguments`), the worst case.
//!
//! Throughput is in bytes of argument text: linear previews show as the same bytes/s at 256 KiB
//! and 1 MiB within a case (a rescan of the text per delta would make 1 MiB ~4× slower per
//! byte). Run: `cargo bench -p toolstream-benches --bench previews`. Under `cargo test` the
//! cases are 16 KiB (criterion's test mode: each runs once).

mod support;

use assembler::{Config, Previews, Store};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use support::{chunk_input, drain_outbox, time_messages};
use toolstream_testkit::openai;

const FRAGMENT: usize = 16;
const FLUSH_EVERY: usize = 256;

/// Chunks carrying `total` bytes of argument text in [`FRAGMENT`]-byte pieces, then a finish.
fn chunks(total: usize) -> Vec<Vec<u8>> {
    let body = "abcdefghij \\\"klmnop\\\" 0123456789".repeat(total / 30 + 1);
    let mut text = format!("{{\"content\":\"{}", &body[..total - 14]);
    // (cut only where no escape is split, then close)
    while text.ends_with('\\') {
        text.pop();
    }
    text.push_str("\"}");
    let mut out = vec![openai::tool_call_chunk(
        0,
        Some("call_big"),
        Some("write_file"),
        "",
    )];
    let mut at = 0;
    while at < text.len() {
        let n = FRAGMENT.min(text.len() - at);
        out.push(openai::args_chunk(0, &text[at..at + n]));
        at += n;
    }
    out.push(openai::finish_chunk("tool_calls"));
    out
}

fn assemble(store: &Store, msg: &str, bodies: &[Vec<u8>]) {
    for (seq, body) in bodies.iter().enumerate() {
        let input = chunk_input(msg, seq, body);
        let _ = store.apply(&input, seq as u64);
        if seq % FLUSH_EVERY == FLUSH_EVERY - 1 {
            let _ = store.flush();
        }
    }
    let _ = store.flush();
}

fn bench(c: &mut Criterion) {
    let totals: &[usize] = if std::env::args().any(|a| a == "--bench") {
        &[256 * 1024, 1024 * 1024]
    } else {
        &[16 * 1024]
    };
    let on = Previews {
        enabled: true,
        ..Previews::default()
    };
    let cases = [
        ("off", Previews::default()),
        ("default_throttle", on),
        (
            "every_chunk",
            Previews {
                min_bytes: 1,
                min_interval_ms: 0,
                ..on
            },
        ),
    ];
    let mut group = c.benchmark_group("previews");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    let mut n = 0u64;
    for (label, previews) in cases {
        let config = Config {
            previews,
            ..Config::default()
        };
        let Ok(store) = Store::open_temporary(config) else {
            return;
        };
        for &total in totals {
            let bodies = chunks(total);
            group.throughput(Throughput::Bytes(total as u64));
            let id = BenchmarkId::new(label, format!("{}KiB_{}chunks", total / 1024, bodies.len()));
            let mut deltas = 0;
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    time_messages(
                        iters,
                        &mut n,
                        |msg| assemble(&store, msg, &bodies),
                        || deltas = drain_outbox(&store, 256),
                    )
                })
            });
            eprintln!(
                "previews/{label}/{}KiB: {deltas} deltas per run",
                total / 1024
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
