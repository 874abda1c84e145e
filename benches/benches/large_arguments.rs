//! Criterion bench: assembling one large argument through the durable store, to show that
//! appending stays linear (argument text is stored as pieces, never rewritten).
//!
//! Cases: 256 KiB and 1 MiB of argument text, from 1–4 byte fragments (cycling 1,2,3,4) and
//! from 4 KiB fragments, each as raw OpenAI chat chunks through `Store::apply` on sled, then
//! a finish chunk and one flush. Throughput is in bytes of argument text, so linear
//! assembly shows as the same bytes/s at 256 KiB and 1 MiB for a given fragment size (a
//! quadratic rewrite would be ~4× slower per byte at 1 MiB). Between fragment sizes the
//! per-byte cost differs by the fixed per-chunk cost (decode + one transaction). The
//! `baseline_empty` cases measure that fixed cost alone: the same number of chunks as the
//! 1–4 byte cases, each with an empty argument fragment. (T(frag_1to4) − T(baseline_empty))
//! / bytes is what appending the text itself costs per byte, comparable with the 4 KiB case.
//! Run: `cargo bench -p toolstream-benches --bench large_arguments`.
//!
//! Under `cargo test` / `cargo nextest` (criterion's test mode: every case run once, in the
//! unoptimized test build, without `--bench`) the cases are 16 KiB: the 1 MiB ones took about
//! two minutes each there and only show that the bench still runs.

mod support;

use assembler::{Config, Store};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use support::{chunk_input, drain_outbox, time_messages};
use toolstream_testkit::openai;

/// The call's first chunk (id and name, no text) or a piece of its argument text.
fn delta(args: &str, first: bool) -> Vec<u8> {
    if first {
        openai::tool_call_chunk(0, Some("call_big"), Some("write_file"), args)
    } else {
        openai::args_chunk(0, args)
    }
}

/// Chunks carrying `total` bytes of argument text (a JSON object with one long string),
/// cut into fragments of `sizes` (cycled), then a finish chunk.
fn chunks(total: usize, sizes: &[usize]) -> Vec<Vec<u8>> {
    let body = "abcdefghijklmnopqrstuvwxyz0123456789".repeat(total / 36 + 1);
    let text = format!("{{\"content\":\"{}\"}}", &body[..total - 14]);
    let mut out = vec![delta("", true)];
    let mut at = 0;
    let mut k = 0;
    while at < text.len() {
        let n = sizes[k % sizes.len()].min(text.len() - at);
        out.push(delta(&text[at..at + n], false));
        at += n;
        k += 1;
    }
    out.push(openai::finish_chunk("tool_calls"));
    out
}

/// `count` argument fragments that carry no text (the per-chunk cost without appending),
/// framed like [`chunks`]: a first delta with id and name, then a finish chunk.
fn empty_chunks(count: usize) -> Vec<Vec<u8>> {
    let mut out = vec![delta("", true)];
    out.extend((0..count).map(|_| delta("", false)));
    out.push(openai::finish_chunk("tool_calls"));
    out
}

fn assemble(store: &Store, msg: &str, bodies: &[Vec<u8>]) {
    for (seq, body) in bodies.iter().enumerate() {
        let input = chunk_input(msg, seq, body);
        let _ = store.apply(&input, 0);
    }
    let _ = store.flush();
}

fn bench(c: &mut Criterion) {
    let config = Config::default();
    let Ok(store) = Store::open_temporary(config) else {
        return;
    };
    let mut group = c.benchmark_group("large_arguments");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    let mut n = 0u64;
    let mut cases = Vec::new();
    let totals: &[usize] = if std::env::args().any(|a| a == "--bench") {
        &[256 * 1024, 1024 * 1024]
    } else {
        &[16 * 1024]
    };
    for (label, sizes) in [("frag_1to4", vec![1, 2, 3, 4]), ("frag_4k", vec![4096])] {
        for &total in totals {
            let bodies = chunks(total, &sizes);
            let id = format!("{}KiB_{}chunks", total / 1024, bodies.len());
            if label == "frag_1to4" {
                let empty = empty_chunks(bodies.len() - 2);
                cases.push(("baseline_empty", id.clone(), total, empty));
            }
            cases.push((label, id, total, bodies));
        }
    }
    for (label, id, total, bodies) in cases {
        {
            group.throughput(Throughput::Bytes(total as u64));
            let id = BenchmarkId::new(label, id);
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    time_messages(
                        iters,
                        &mut n,
                        |msg| assemble(&store, msg, &bodies),
                        || {
                            drain_outbox(&store, 64);
                        },
                    )
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
