//! Decoder for Ollama's native `/api/chat` NDJSON stream.
//!
//! Ollama delivers each tool call whole (`message.tool_calls[k].function{name, arguments}`,
//! arguments as a JSON object), so every call becomes a [`ChunkEvent::CallEnd`] that starts
//! and ends it at once, keyed by `function.index` (or its position `k`) and the call's `id`
//! when the server sends one. `done: true` ends the message: `done_reason` `stop` is a normal
//! end, `length` a truncation, and no reason at all a plain [`ChunkEvent::StreamEnd`]. A line
//! `{"error": "..."}` is a provider error. Content, thinking and timing fields are ignored.
//!
//! `done` may also be `"true"`/`"false"` and `function.index` a number written as a string;
//! a `done_reason` that is not a string reads as no reason (a plain stream end).

use crate::chunk::{CallEnd, CallRef, ChunkEvent, Finish};
use crate::decode::lenient::{opt_flag, opt_index, FinishReason};
use crate::decode::text::{non_blank_text, provider_message, JsonText, Text};
use crate::decode::typed::parse;
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(default, deserialize_with = "opt_flag")]
    done: Option<bool>,
    #[serde(borrow, default)]
    done_reason: Option<FinishReason<'a>>,
    #[serde(default)]
    error: Option<JsonText>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(default, deserialize_with = "opt_index")]
    index: Option<u32>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(default)]
    arguments: Option<JsonText>,
}

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let line: Line<'_> = parse(Provider::Ollama, chunk)?;
    let mut out = Vec::new();
    let calls = line.message.and_then(|m| m.tool_calls).unwrap_or_default();
    for (k, call) in calls.into_iter().enumerate() {
        let Some(function) = call.function else {
            continue;
        };
        let position = u32::try_from(k).unwrap_or(u32::MAX);
        out.push(ChunkEvent::CallEnd(CallEnd {
            at: CallRef {
                index: Some(function.index.unwrap_or(position)),
                wire_id: non_blank_text(call.id),
                item_id: None,
            },
            name: non_blank_text(function.name),
            // A whole call: no arguments at all means an empty object.
            arguments: Some(
                function
                    .arguments
                    .map_or_else(|| "{}".to_string(), |a| a.text),
            ),
            ..CallEnd::default()
        }));
    }
    if let Some(error) = line.error {
        out.push(ChunkEvent::ProviderError {
            message: provider_message(&error),
        });
    }
    if line.done == Some(true) {
        out.push(match line.done_reason.and_then(|r| r.read(finish_of)) {
            Some((finish, reason)) => ChunkEvent::MessageEnd { finish, reason },
            None => ChunkEvent::StreamEnd,
        });
    }
    Ok(out)
}

/// Normalizes `done_reason`: `length` is a truncation, anything else (`stop`, `load`,
/// `unload`, reasons added later) a normal end.
fn finish_of(reason: &str) -> Finish {
    if reason == "length" {
        Finish::Truncated
    } else {
        Finish::Complete
    }
}
