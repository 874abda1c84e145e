//! Criterion bench: decoding typical chunks of each provider, in chunks per second.
//!
//! Two views per provider: `typical/<provider>` decodes one representative tool-call chunk
//! (for OpenAI chat: an argument-delta chunk with the full envelope OpenAI sends, the shape
//! that dominates real streams; target ≥ 1,000,000/s on one core), and `stream/<recording>`
//! decodes every chunk of a recorded stream under `tests/recordings/` (throughput counted
//! per chunk). The chunks are `toolstream_benches::decode_inputs`' (shared with the
//! instruction-count driver `examples/decode_cost.rs`). Run: `cargo bench -p
//! toolstream-benches --bench decode`.

use chunk_model::{decode, Provider};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use toolstream_benches::decode_inputs::{bodies, TYPICAL};

/// Recorded streams decoded whole: (provider, path under `tests/recordings/`).
const STREAMS: &[(Provider, &str)] = &[
    (Provider::OpenaiChat, "openai-chat/parallel_calls.sse"),
    (
        Provider::OpenaiResponses,
        "openai-responses/parallel_calls.sse",
    ),
    (Provider::Ollama, "ollama/parallel_calls.ndjson"),
    (Provider::AiSdk, "ai-sdk/v5_full_stream_parallel.sse"),
];

fn typical(c: &mut Criterion) {
    let mut group = c.benchmark_group("typical");
    group.throughput(Throughput::Elements(1));
    for (provider, chunk) in TYPICAL {
        match decode(*provider, chunk.as_bytes()) {
            Ok(events) if !events.is_empty() => {}
            other => {
                eprintln!("skipping typical/{provider}: decoder gave {other:?}");
                continue;
            }
        }
        group.bench_function(provider.as_str(), |b| {
            b.iter(|| decode(*provider, black_box(chunk.as_bytes())))
        });
    }
    group.finish();
}

fn streams(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream");
    for (provider, rel) in STREAMS {
        let Some(chunks) = bodies(rel) else {
            eprintln!("skipping stream/{rel}: recording not found");
            continue;
        };
        group.throughput(Throughput::Elements(chunks.len() as u64));
        group.bench_function(*rel, |b| {
            b.iter(|| {
                for chunk in &chunks {
                    let _ = black_box(decode(*provider, black_box(chunk)));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, typical, streams);
criterion_main!(benches);
