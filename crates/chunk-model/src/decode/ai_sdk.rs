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
//! a later final result replaces them. `finish` ends the message: `finishReason` is a string
//! in v4/v5 and in v6 `streamText` parts, and the object `{"unified": "tool-calls", "raw":
//! "tool_calls"}` in v6 `LanguageModelV3` stream parts (the `unified` word is kept); no reason,
//! as in the UI stream, is a plain [`ChunkEvent::StreamEnd`]. `error` and `abort` are
//! provider errors. Text, reasoning, source, start/step and every other part decode to nothing.
//!
//! One struct reads every handled part type, so each field is read without failing
//! ([`Loose`], [`JsonText`], [`FinishReason`]) and checked only by the part types that need
//! it: a `finish` part's `usage` or a `tool-call` part's `providerExecuted` of any shape never
//! fails a chunk; a non-string `toolCallId` on a tool part still does, naming the field.
//! `providerMetadata` nested deeper than [`MAX_ARGUMENT_DEPTH`] levels is not kept.
//!
//! Every shipped major version:
//! - **v4** `fullStream` parts (above) and its **data stream protocol**, the wire format of
//!   `toDataStreamResponse`: one `<code>:<json>` line per part (`b:` tool call streaming start,
//!   `c:` tool call delta, `9:` tool call, `a:` tool result, `d:` finish message, `3:` error;
//!   text, data, step, reasoning, source and file codes decode to nothing);
//! - **v5** `fullStream` and UI message stream parts;
//! - **v6** adds `finishReason` as the `LanguageModelV3` object `{unified, raw}` (and
//!   `rawFinishReason` beside the string in `streamText` parts), tool approval parts
//!   (`tool-approval-request`: the call it names was already stated by its `tool-call` /
//!   `tool-input-available`, so it adds nothing; `tool-approval-response` likewise),
//!   `tool-output-denied` (the tool was not run: the call's result, an error whose output is
//!   the AI SDK's own `{"type":"execution-denied"}`), and the UI stream's `tool-input-error`
//!   (an end of the call with the input the SDK refused: judged like any end, its
//!   `tool-output-error` follows as the result);
//! - **v7** parts (`custom`, `reasoning-file`, `toolMetadata` on `tool-input-start`) change
//!   nothing for calls and decode to nothing or are ignored.

use crate::call::{ResultInput, ToolResult};
use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::gemini::THOUGHT_SIGNATURE;
use crate::decode::lenient::{FinishReason, Loose};
use crate::decode::text::{provider_message, shorten, JsonText, Text};
use crate::decode::typed::parse_typed_event;
use crate::depth::{value_depth, MAX_ARGUMENT_DEPTH};
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The output of a call whose tool was not run because its approval was denied
/// (`tool-output-denied`): the AI SDK's own `execution-denied` output.
pub const EXECUTION_DENIED: &str = r#"{"type":"execution-denied"}"#;

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
            | "tool-input-error"
            | "tool-output-denied"
            | "tool-approval-request"
            | "tool-approval-response"
            | "finish"
            | "error"
            | "abort"
    )
}

/// The part type a line of the AI SDK v4 data stream protocol (`<code>:<json>`) carries, if
/// `chunk` is one such line: `None` for anything else (a JSON part, `[DONE]`).
pub fn data_stream_code(chunk: &[u8]) -> Option<&'static str> {
    let (code, rest) = match chunk {
        [code, b':', rest @ ..] => (*code, rest),
        _ => return None,
    };
    // (the JSON value follows at once: an object, a string, an array, a number or a literal)
    if !matches!(
        rest.first(),
        Some(b'{' | b'"' | b'[' | b'0'..=b'9' | b'-' | b't' | b'f' | b'n')
    ) {
        return None;
    }
    Some(match code {
        b'0' => "text",
        b'2' => "data",
        b'3' => "error",
        b'8' => "message-annotations",
        b'9' => "tool-call",
        b'a' => "tool-result",
        b'b' => "tool-call-streaming-start",
        b'c' => "tool-call-delta",
        b'd' => "finish",
        b'e' => "finish-step",
        b'f' => "start-step",
        b'g' => "reasoning",
        b'h' => "source",
        b'i' => "redacted-reasoning",
        b'j' => "reasoning-signature",
        b'k' => "file",
        _ => return None,
    })
}

/// A v4 data stream line as the JSON part it stands for (its object with the `type`), or, for
/// an `error` line (a JSON string), that part with the string as `errorText`. `None` when the
/// rest of the line is not JSON of the expected shape (then the line is decoded as it is, and
/// fails as JSON).
fn data_stream_part(chunk: &[u8]) -> Option<Vec<u8>> {
    let ty = data_stream_code(chunk)?;
    let value: Value = serde_json::from_slice(chunk.get(2..)?).ok()?;
    let mut part = match (ty, value) {
        (_, Value::Object(map)) => map,
        ("error", Value::String(text)) => {
            let mut map = Map::new();
            map.insert("errorText".into(), Value::String(text));
            map
        }
        // text, data and annotation lines hold strings and arrays: nothing for calls
        (_, _) => Map::new(),
    };
    part.insert("type".into(), Value::String(ty.to_string()));
    serde_json::to_vec(&Value::Object(part)).ok()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    ty: Text<'a>,
    #[serde(borrow, default)]
    id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    tool_call_id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    tool_name: Option<Loose<'a>>,
    #[serde(borrow, default)]
    delta: Option<Loose<'a>>,
    #[serde(borrow, default)]
    input_text_delta: Option<Loose<'a>>,
    #[serde(borrow, default)]
    args_text_delta: Option<Loose<'a>>,
    #[serde(default)]
    input: Option<JsonText>,
    #[serde(default)]
    args: Option<JsonText>,
    #[serde(default)]
    output: Option<JsonText>,
    #[serde(default)]
    result: Option<JsonText>,
    #[serde(borrow, default)]
    preliminary: Option<Loose<'a>>,
    #[serde(borrow, default)]
    is_error: Option<Loose<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<FinishReason<'a>>,
    #[serde(default)]
    error: Option<JsonText>,
    #[serde(default)]
    error_text: Option<JsonText>,
    #[serde(default)]
    provider_metadata: Option<Value>,
}

impl Part<'_> {
    /// The call id: v5 `fullStream` says `id`, everything else `toolCallId`. Either must be a
    /// string when present (blank is absent).
    fn wire_id(&mut self, chunk: &[u8]) -> Result<Option<String>, DecodeError> {
        match need_text(self.tool_call_id.take(), "toolCallId", chunk)? {
            Some(id) => Ok(Some(id)),
            None => need_text(self.id.take(), "id", chunk),
        }
    }

    /// The tool name (a string when present; blank is absent).
    fn tool_name(&mut self, chunk: &[u8]) -> Result<Option<String>, DecodeError> {
        need_text(self.tool_name.take(), "toolName", chunk)
    }

    /// A flag of a result part (`preliminary`, `isError`): a boolean or `"true"`/`"false"`.
    fn flag(value: Option<&Loose<'_>>, field: &str, chunk: &[u8]) -> Result<bool, DecodeError> {
        match value.map(Loose::flag) {
            None => Ok(false),
            Some(Ok(b)) => Ok(b.unwrap_or(false)),
            Some(Err(problem)) => Err(DecodeError::bad_field(
                Provider::AiSdk,
                field,
                problem,
                chunk,
            )),
        }
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
            // Not needed, so never an error: metadata deeper than the bound for kept values
            // is not kept (it could not be republished in events and records readable back).
            if value_depth(&meta) <= MAX_ARGUMENT_DEPTH {
                map.insert("providerMetadata".to_string(), meta);
            }
        }
        map
    }
}

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    if let Some(part) = data_stream_part(chunk) {
        return decode_part(&part);
    }
    decode_part(chunk)
}

/// Decodes one JSON stream part.
fn decode_part(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let Some(mut part) = parse_typed_event::<Part<'_>>(Provider::AiSdk, chunk, handled)? else {
        return Ok(Vec::new());
    };
    let ty = part.ty.0.clone();
    let event = match ty.as_ref() {
        "tool-input-start" | "tool-call-streaming-start" => {
            let wire_id = part.wire_id(chunk)?;
            let name = part.tool_name(chunk)?;
            let metadata = part.metadata();
            ChunkEvent::CallFragment(CallFragment {
                at: by_wire_id(wire_id),
                name,
                metadata,
                ..CallFragment::default()
            })
        }
        "tool-input-delta" | "tool-call-delta" => {
            let wire_id = part.wire_id(chunk)?;
            let name = part.tool_name(chunk)?;
            let text = [
                ("delta", part.delta),
                ("inputTextDelta", part.input_text_delta),
                ("argsTextDelta", part.args_text_delta),
            ]
            .into_iter()
            .find_map(|(field, value)| value.map(|v| (field, v)));
            let text = match text {
                Some((_, Loose::Str(t))) if !t.is_empty() => t.into_owned(),
                Some((_, Loose::Str(_) | Loose::Null)) | None => return Ok(Vec::new()),
                Some((field, other)) => {
                    return Err(DecodeError::bad_field(
                        Provider::AiSdk,
                        field,
                        other.not_a_string(),
                        chunk,
                    ))
                }
            };
            ChunkEvent::CallFragment(CallFragment {
                at: by_wire_id(wire_id),
                name,
                arguments: Some(text),
                ..CallFragment::default()
            })
        }
        // Only the input text ends here: the AI SDK follows with `tool-call` (the parsed
        // input and provider metadata such as Gemini's `thoughtSignature`) or `tool-error`.
        // The call ends on `tool-call`, else on the step's `finish`.
        "tool-input-end" => return Ok(Vec::new()),
        "tool-call" | "tool-input-available" | "tool-input-error" => {
            let wire_id = part.wire_id(chunk)?;
            let name = part.tool_name(chunk)?;
            let metadata = part.metadata();
            let arguments = part.input.or(part.args).map(|a| a.text);
            ChunkEvent::CallEnd(CallEnd {
                at: by_wire_id(wire_id),
                name,
                // A whole call without input: the tool takes no arguments.
                arguments: Some(arguments.unwrap_or_default()),
                metadata,
                ..CallEnd::default()
            })
        }
        "tool-result" | "tool-output-available" => {
            if Part::flag(part.preliminary.as_ref(), "preliminary", chunk)? {
                return Ok(Vec::new());
            }
            let is_error = Part::flag(part.is_error.as_ref(), "isError", chunk)?;
            let tool_call_id = part.wire_id(chunk)?.ok_or_else(|| missing_id(&ty, chunk))?;
            let output = part
                .output
                .or(part.result)
                .map(|o| o.text)
                .unwrap_or_default();
            ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                tool_call_id,
                output,
                is_error,
            }))
        }
        "tool-output-denied" => {
            let tool_call_id = part.wire_id(chunk)?.ok_or_else(|| missing_id(&ty, chunk))?;
            ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                tool_call_id,
                output: EXECUTION_DENIED.to_string(),
                is_error: true,
            }))
        }
        // The call it names was stated whole before it (`tool-call`, `tool-input-available`).
        "tool-approval-request" | "tool-approval-response" => return Ok(Vec::new()),
        "tool-error" | "tool-output-error" => {
            let tool_call_id = part.wire_id(chunk)?.ok_or_else(|| missing_id(&ty, chunk))?;
            let output = match (part.error_text, part.error) {
                (Some(text), _) => text.text,
                (None, Some(error)) => error.text,
                (None, None) => String::new(),
            };
            ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                tool_call_id,
                output,
                is_error: true,
            }))
        }
        "finish" => match part.finish_reason.and_then(|r| r.read(finish_of)) {
            Some((finish, reason)) => ChunkEvent::MessageEnd { finish, reason },
            None => ChunkEvent::StreamEnd,
        },
        "error" => {
            let message = match (part.error_text, part.error) {
                (Some(text), _) => shorten(&text.text),
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

/// A field that must be a string when present: its text (blank is absent), or a `BadField`
/// naming it.
fn need_text(
    value: Option<Loose<'_>>,
    field: &str,
    chunk: &[u8],
) -> Result<Option<String>, DecodeError> {
    match value {
        None => Ok(None),
        Some(v) => v
            .need_text()
            .map_err(|problem| DecodeError::bad_field(Provider::AiSdk, field, problem, chunk)),
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
