//! Decoder for Vercel AI SDK stream parts: the `fullStream` parts of `streamText` (v4 and
//! v5) and the UI message stream parts (`toUIMessageStream`), one JSON object with a `type`
//! per chunk.
//!
//! Tool calls: v5 `tool-input-start` / `tool-input-delta` (ids in `id` or `toolCallId`, text
//! in `delta` or `inputTextDelta`; `tool-input-end` ends only the text, the `tool-call` after
//! it ends the call and carries its provider metadata), v4 `tool-call-streaming-start` /
//! `tool-call-delta` (`argsTextDelta`), and the whole call `tool-call` / `tool-input-available`
//! (`input` or `args`: an object becomes compact JSON text, a string is kept as it is). The
//! AI SDK gives no index: calls are keyed by wire id only. Results (`tool-result`,
//! `tool-output-available`, `tool-error`, `tool-output-error`) become
//! [`ChunkEvent::ToolResult`]; preliminary results (`preliminary: true`) are skipped because
//! a later final result replaces them. `finish` ends the message (no `finishReason`, as in
//! the UI stream, is a plain [`ChunkEvent::StreamEnd`]); `error` and `abort` are provider
//! errors. Text, reasoning, source, start/step and every other part decode to nothing.

use crate::call::{ResultInput, ToolResult};
use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::gemini::THOUGHT_SIGNATURE;
use crate::decode::text::{non_blank_text, provider_message, shorten, JsonText, Text};
use crate::decode::typed::parse_typed_event;
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The part types this decoder reads; all others are ignored whatever their fields hold.
fn handled(ty: &str) -> bool {
    matches!(
        ty,
        "tool-input-start"
            | "tool-call-streaming-start"
            | "tool-input-delta"
            | "tool-call-delta"
            | "tool-input-end"
            | "tool-call"
            | "tool-input-available"
            | "tool-result"
            | "tool-output-available"
            | "tool-error"
            | "tool-output-error"
            | "finish"
            | "error"
            | "abort"
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    ty: Text<'a>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    tool_call_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    tool_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    #[serde(borrow, default)]
    input_text_delta: Option<Text<'a>>,
    #[serde(borrow, default)]
    args_text_delta: Option<Text<'a>>,
    #[serde(default)]
    input: Option<JsonText>,
    #[serde(default)]
    args: Option<JsonText>,
    #[serde(default)]
    output: Option<JsonText>,
    #[serde(default)]
    result: Option<JsonText>,
    #[serde(default)]
    preliminary: Option<bool>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
    #[serde(default)]
    error: Option<JsonText>,
    #[serde(borrow, default)]
    error_text: Option<Text<'a>>,
    #[serde(default)]
    provider_metadata: Option<Value>,
}

impl Part<'_> {
    /// The call id: v5 `fullStream` says `id`, everything else `toolCallId`.
    fn wire_id(&mut self) -> Option<String> {
        non_blank_text(self.tool_call_id.take()).or_else(|| non_blank_text(self.id.take()))
    }

    /// Provider metadata worth keeping on the call (Gemini `thoughtSignature` travels here).
    /// `providerMetadata` kept as it is, plus Gemini's thought signature (which the AI SDK
    /// nests under `providerMetadata.google` or `.vertex`) lifted to the canonical
    /// `thoughtSignature` key that history rendering reads, as the Gemini decoder stores it.
    fn metadata(&mut self) -> Map<String, Value> {
        let mut map = Map::new();
        if let Some(meta) = self.provider_metadata.take().filter(|m| !m.is_null()) {
            let signature = ["google", "vertex"].iter().find_map(|vendor| {
                meta.get(vendor)
                    .and_then(|v| v.get(THOUGHT_SIGNATURE))
                    .filter(|s| s.as_str().is_some_and(|t| !t.is_empty()))
                    .cloned()
            });
            if let Some(sig) = signature {
                map.insert(THOUGHT_SIGNATURE.to_string(), sig);
            }
            map.insert("providerMetadata".to_string(), meta);
        }
        map
    }
}

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let Some(mut part) = parse_typed_event::<Part<'_>>(Provider::AiSdk, chunk, handled)? else {
        return Ok(Vec::new());
    };
    let ty = part.ty.0.clone();
    let event = match ty.as_ref() {
        "tool-input-start" | "tool-call-streaming-start" => {
            let wire_id = part.wire_id();
            let metadata = part.metadata();
            ChunkEvent::CallFragment(CallFragment {
                at: by_wire_id(wire_id),
                name: non_blank_text(part.tool_name),
                metadata,
                ..CallFragment::default()
            })
        }
        "tool-input-delta" | "tool-call-delta" => {
            let wire_id = part.wire_id();
            let text = part
                .delta
                .or(part.input_text_delta)
                .or(part.args_text_delta)
                .map(Text::into_string)
                .filter(|t| !t.is_empty());
            if text.is_none() {
                return Ok(Vec::new());
            }
            ChunkEvent::CallFragment(CallFragment {
                at: by_wire_id(wire_id),
                name: non_blank_text(part.tool_name),
                arguments: text,
                ..CallFragment::default()
            })
        }
        // Only the input text ends here: the AI SDK follows with `tool-call` (the parsed
        // input and provider metadata such as Gemini's `thoughtSignature`) or `tool-error`.
        // The call ends on `tool-call`, else on the step's `finish`.
        "tool-input-end" => return Ok(Vec::new()),
        "tool-call" | "tool-input-available" => {
            let wire_id = part.wire_id();
            let metadata = part.metadata();
            let arguments = part.input.or(part.args).map(|a| a.text);
            ChunkEvent::CallEnd(CallEnd {
                at: by_wire_id(wire_id),
                name: non_blank_text(part.tool_name),
                // A whole call without input: the tool takes no arguments.
                arguments: Some(arguments.unwrap_or_default()),
                metadata,
            })
        }
        "tool-result" | "tool-output-available" => {
            if part.preliminary == Some(true) {
                return Ok(Vec::new());
            }
            let tool_call_id = part.wire_id().ok_or_else(|| missing_id(&ty, chunk))?;
            let output = part
                .output
                .or(part.result)
                .map(|o| o.text)
                .unwrap_or_default();
            ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                tool_call_id,
                output,
                is_error: part.is_error.unwrap_or(false),
            }))
        }
        "tool-error" | "tool-output-error" => {
            let tool_call_id = part.wire_id().ok_or_else(|| missing_id(&ty, chunk))?;
            let output = match (part.error_text, part.error) {
                (Some(text), _) => text.into_string(),
                (None, Some(error)) => error.text,
                (None, None) => String::new(),
            };
            ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                tool_call_id,
                output,
                is_error: true,
            }))
        }
        "finish" => match non_blank_text(part.finish_reason) {
            Some(reason) => ChunkEvent::MessageEnd {
                finish: finish_of(&reason),
                reason,
            },
            None => ChunkEvent::StreamEnd,
        },
        "error" => {
            let message = match (part.error_text, part.error) {
                (Some(text), _) => shorten(text.as_str()),
                (None, Some(error)) => provider_message(&error),
                (None, None) => "error".to_string(),
            };
            ChunkEvent::ProviderError { message }
        }
        "abort" => ChunkEvent::ProviderError {
            message: "aborted".to_string(),
        },
        _ => return Ok(Vec::new()),
    };
    Ok(vec![event])
}

fn by_wire_id(wire_id: Option<String>) -> CallRef {
    CallRef {
        index: None,
        wire_id,
        item_id: None,
    }
}

fn missing_id(ty: &str, chunk: &[u8]) -> DecodeError {
    DecodeError::bad_field(
        Provider::AiSdk,
        "toolCallId",
        format!("is missing or blank on a `{ty}` part"),
        chunk,
    )
}

/// Normalizes an AI SDK `finishReason`.
#[must_use]
pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "length" => Finish::Truncated,
        "content-filter" => Finish::Filtered,
        "error" => Finish::Error,
        _ => Finish::Complete,
    }
}
