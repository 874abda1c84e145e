//! What the decode bench (`benches/decode.rs`) and the decode cost driver
//! (`examples/decode_cost.rs`) decode: one typical tool-call chunk per provider, exactly as the
//! provider sends it, and the chunk bodies of the recorded streams under `tests/recordings/`.
//! Kept in one place so both measure the same inputs.

use chunk_model::Provider;
use std::path::PathBuf;

/// One representative tool-call chunk per provider, as the provider sends it. For OpenAI chat:
/// an argument-delta chunk with the full envelope OpenAI sends, the shape that dominates real
/// streams.
pub const TYPICAL: &[(Provider, &str)] = &[
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

/// The directory of recorded streams (`tests/recordings/`).
pub fn recordings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/recordings")
}

/// The chunk bodies of one recording (`rel`: a path under `tests/recordings/`), split by
/// [`chunk_model::framing::split`] as `toolstream replay` does. `None` when it cannot be read.
pub fn bodies(rel: &str) -> Option<Vec<Vec<u8>>> {
    let bytes = std::fs::read(recordings_dir().join(rel)).ok()?;
    let frames = chunk_model::framing::split(&bytes).ok()?;
    Some(frames.into_iter().map(|f| f.data).collect())
}

/// Every chunk body of every recording of `provider` (the files of its directory, in name
/// order).
pub fn recorded(provider: Provider) -> Vec<Vec<u8>> {
    let dir = recordings_dir().join(provider.as_str());
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| bodies(&format!("{}/{f}", provider.as_str())))
        .flatten()
        .collect()
}
