//! Criterion bench: decoding typical chunks of each provider, in chunks per second.
//!
//! Two views per provider: `typical/<provider>` decodes one representative tool-call chunk
//! (for OpenAI chat: an argument-delta chunk with the full envelope OpenAI sends, the shape
//! that dominates real streams; target ≥ 1,000,000/s on one core), and `stream/<recording>`
//! decodes every chunk of a recorded stream under `tests/recordings/` (throughput counted
//! per chunk). Run: `cargo bench -p toolstream-benches --bench decode`.

use chunk_model::{decode, Provider};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::path::PathBuf;

/// One representative tool-call chunk per provider, as the provider sends it.
const TYPICAL: &[(Provider, &str)] = &[
    (
        Provider::OpenaiChat,
        r#"{"id":"chatcmpl-AZ3kq7Yx9VbNqZx8Kd2","object":"chat.completion.chunk","created":1732198400,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f7d56a8a2c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ocation\": \"San"}}]},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k3Xb9"}"#,
    ),
    (
        Provider::OpenaiResponses,
        r#"{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_67ccd2c1a0f08190a1b2c3d4","output_index":0,"delta":"ocation\": \"San","obfuscation":"aB3"}"#,
    ),
    (
        Provider::Anthropic,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ocation\": \"San"}}"#,
    ),
    (
        Provider::Gemini,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"location":"San Francisco, CA","unit":"celsius"}},"thoughtSignature":"CtUBAVSoXO4x"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":52,"candidatesTokenCount":12,"totalTokenCount":64},"modelVersion":"gemini-2.5-flash","responseId":"mNpjaK2bH"}"#,
    ),
    (
        Provider::Bedrock,
        r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"toolUse":{"input":"ocation\": \"San"}}}}"#,
    ),
    (
        Provider::Ollama,
        r#"{"model":"qwen3:8b","created_at":"2025-05-27T22:54:57.644317Z","message":{"role":"assistant","content":"","tool_calls":[{"id":"call_hy6pzfs1","function":{"index":0,"name":"get_current_weather","arguments":{"location":"Toronto","format":"celsius"}}}]},"done":false}"#,
    ),
    (
        Provider::AiSdk,
        r#"{"type":"tool-input-delta","id":"call_Yf2mQ8xA1","delta":"ocation\": \"San"}"#,
    ),
];

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

/// The chunk bodies of a recording: `data:` payloads of SSE, else non-blank lines.
fn bodies(rel: &str) -> Option<Vec<Vec<u8>>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/recordings")
        .join(rel);
    let text = std::fs::read_to_string(path).ok()?;
    let sse = rel.ends_with(".sse");
    Some(
        text.lines()
            .filter_map(|l| {
                let l = l.trim();
                if sse {
                    l.strip_prefix("data:").map(str::trim)
                } else {
                    Some(l).filter(|l| !l.is_empty())
                }
            })
            .map(|l| l.as_bytes().to_vec())
            .collect(),
    )
}

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
