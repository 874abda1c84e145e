//! Decoders: one raw provider chunk (bytes) → normalized [`ChunkEvent`]s.
//!
//! Every decoder is a pure function `fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError>`
//! in its own file. They are tolerant of what real streams contain (unknown fields, prelude and
//! usage-only chunks, pings, padding) and strict about what matters (ids, names, indices, end
//! signals). `[DONE]` is handled here for every provider.
//!
//! The rule, enforced with the readers in [`lenient`]: a field the assembler does not strictly
//! need (usage, logprobs, metadata, timestamps, ids of non-tool things, fields of event types
//! that do not need them) never fails a chunk, whatever it holds; a field it needs is read in
//! every shape the provider has shipped (finish reasons as strings and as the AI SDK v6
//! `{unified, raw}` object, indices and flags written as strings).
//!
//! How a chunk is read: most decoders deserialize it with serde into borrowed structs
//! ([`typed`]). The OpenAI chat decoder, the hot path (a stream is mostly argument
//! fragments), walks it once with the crate's own JSON reader (`reader`), which accepts,
//! reads and refuses exactly what the serde path did, errors word for word included.

pub mod ai_sdk;
pub mod anthropic;
pub mod bedrock;
pub mod gemini;
pub mod lenient;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
mod reader;
pub mod result;
pub mod text;
pub mod typed;

use crate::chunk::ChunkEvent;
use crate::error::DecodeError;
use crate::provider::Provider;

pub use result::decode_result;

/// Decodes one chunk of `provider`'s stream: the JSON of one SSE `data:` line, one NDJSON
/// line, or the literal `[DONE]`. An empty (all-whitespace) chunk decodes to nothing.
pub fn decode(provider: Provider, chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let trimmed = chunk.trim_ascii();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    if trimmed == b"[DONE]" {
        return Ok(vec![ChunkEvent::StreamEnd]);
    }
    match provider {
        Provider::OpenaiChat => openai_chat::decode(trimmed),
        Provider::OpenaiResponses => openai_responses::decode(trimmed),
        Provider::Anthropic => anthropic::decode(trimmed),
        Provider::Gemini => gemini::decode(trimmed),
        Provider::Bedrock => bedrock::decode(trimmed),
        Provider::Ollama => ollama::decode(trimmed),
        Provider::AiSdk => ai_sdk::decode(trimmed),
    }
}

pub use openai_chat::Route;

/// Decodes one chunk like [`decode`], each event with the choice it belongs to: OpenAI chat
/// with `n > 1` streams several alternative completions, each its own message (see
/// [`openai_chat::choice_message`]); every other format has one (`Route::Choice(0)`), and an
/// end of stream (`[DONE]`) concerns every choice (`Route::All`).
pub fn decode_routed(
    provider: Provider,
    chunk: &[u8],
) -> Result<Vec<(Route, ChunkEvent)>, DecodeError> {
    let trimmed = chunk.trim_ascii();
    if provider == Provider::OpenaiChat && !trimmed.is_empty() && trimmed != b"[DONE]" {
        return openai_chat::decode_by_choice(trimmed);
    }
    Ok(decode(provider, chunk)?
        .into_iter()
        .map(|ev| match ev {
            ChunkEvent::StreamEnd => (Route::All, ev),
            other => (Route::Choice(0), other),
        })
        .collect())
}

/// Guesses the provider format from one chunk, or `None` when the chunk does not say
/// (`[DONE]`, a `ping`, a chunk that is not JSON). Used by `toolstream replay` when
/// `--provider` is omitted: it tries each chunk until one answers.
pub fn detect_provider(chunk: &[u8]) -> Option<Provider> {
    if ai_sdk::data_stream_code(chunk.trim_ascii()).is_some() {
        return Some(Provider::AiSdk);
    }
    let value: serde_json::Value = serde_json::from_slice(chunk.trim_ascii()).ok()?;
    let obj = value.as_object()?;
    if obj.contains_key("choices")
        || obj.get("object").and_then(|o| o.as_str()) == Some("chat.completion.chunk")
    {
        return Some(Provider::OpenaiChat);
    }
    if obj.contains_key("candidates") || obj.contains_key("usageMetadata") {
        return Some(Provider::Gemini);
    }
    const BEDROCK_KEYS: [&str; 6] = [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ];
    if obj.len() == 1 && BEDROCK_KEYS.iter().any(|k| obj.contains_key(*k)) {
        return Some(Provider::Bedrock);
    }
    if obj.contains_key("message") && obj.contains_key("done") && obj.contains_key("model") {
        return Some(Provider::Ollama);
    }
    let ty = obj.get("type").and_then(|t| t.as_str())?;
    if ty.starts_with("response.") {
        return Some(Provider::OpenaiResponses);
    }
    match ty {
        "message_start"
        | "content_block_start"
        | "content_block_delta"
        | "content_block_stop"
        | "message_delta"
        | "message_stop" => Some(Provider::Anthropic),
        "tool-input-start"
        | "tool-input-delta"
        | "tool-input-end"
        | "tool-input-available"
        | "tool-output-available"
        | "tool-call"
        | "tool-result"
        | "tool-call-streaming-start"
        | "tool-call-delta"
        | "start-step"
        | "finish-step"
        | "text-delta"
        | "text-start"
        | "text-end"
        | "reasoning-delta"
        | "tool-input-error"
        | "tool-output-denied"
        | "tool-approval-request" => Some(Provider::AiSdk),
        _ => None,
    }
}
