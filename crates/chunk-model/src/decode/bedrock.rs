//! AWS Bedrock ConverseStream: one event as JSON, keyed by its event name (the shape the AWS
//! SDKs yield and proxies re-wrap the binary event-stream frames into:
//! `{"contentBlockDelta": {...}}`) → chunk events.
//!
//! - `contentBlockStart` with `start.toolUse` → a fragment with the block index, the
//!   `toolUseId` and the `name`, and kind `server_tool` when its `type` is `server_tool_use`
//!   (a system tool Bedrock runs itself, e.g. Nova's web grounding).
//! - `contentBlockStart` with `start.toolResult` (`toolUseId`, `type`, `status`: the result of
//!   a server tool, streamed by Bedrock in its own block) → a [`ResultBlockPiece`] naming the
//!   call; `contentBlockDelta` with `delta.toolResult` (a list of `{text}` / `{json}` pieces)
//!   → its output appended at the block index (JSON as compact JSON text); the block's
//!   `contentBlockStop` ends it, and the assembler takes it as the provider's own result. A
//!   result block without a usable `toolUseId` or index is skipped, never an error.
//! - `start.image`, `delta.image` and `delta.citation` (citations of a text block) → nothing.
//! - `contentBlockDelta` with `delta.toolUse.input` (a string fragment of the input JSON) →
//!   argument text at the block index; text deltas → nothing (text blocks often have no start
//!   at all).
//! - `contentBlockDelta` with `delta.reasoningContent` (`text`, `signature` or
//!   `redactedContent`, base64) → a [`ReasoningPiece`] at the block index (reasoning blocks
//!   have no start: the first piece states the kind). Not a call, not needed: a piece whose
//!   index or text cannot be read is skipped.
//! - `contentBlockStop` → an end for that index, for every block (the assembler ignores ends
//!   of indexes that hold no call).
//! - `messageStop.stopReason` → message end (`malformed_tool_use` and
//!   `malformed_model_output` end open calls as a provider error, never completed);
//!   `messageStop.additionalModelResponseFields`, `messageStart` and `metadata` (usage,
//!   metrics, trace, `performanceConfig`, `serviceTier`; sent after `messageStop`) → nothing.
//! - `internalServerException`, `modelStreamErrorException`, `validationException`,
//!   `throttlingException`, `serviceUnavailableException` → provider error.
//!
//! The event must be keyed by its name. A bare payload (the binary frame's JSON, whose event
//! name travels in the `:event-type` header) carries no name and decodes to nothing; no
//! producer was found that puts the name in a `"type"` field, so that form is not accepted.
//! The `p` padding field AWS adds to every event is ignored like any unknown field.
//!
//! Fields toolstream does not need never fail a chunk: the `contentBlockIndex` of a text or
//! reasoning delta, a `stopReason` of another shape (read as no reason), an exception that is
//! not an object or whose `message` is not a string, `metadata` usage and metrics, a tool
//! block's `type` that is not a string (read as a client tool), a result block's `status`
//! and pieces of other shapes. The block
//! index of tool events may be a number or a number written as a string.

use serde::Deserialize;

use crate::call::CallKind;
use crate::chunk::{
    CallEnd, CallFragment, CallRef, ChunkEvent, Finish, ReasoningKind, ReasoningPiece,
    ResultBlockPiece,
};
use crate::decode::lenient::{opt_object, FinishReason, Loose, SoftIndex};
use crate::decode::text::{non_blank_text, shorten, JsonText, Text};
use crate::decode::typed::parse;
use crate::error::DecodeError;
use crate::provider::Provider;

/// One ConverseStream event; normally exactly one member is present.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    #[serde(borrow, default)]
    content_block_start: Option<BlockStart<'a>>,
    #[serde(borrow, default)]
    content_block_delta: Option<BlockDelta<'a>>,
    #[serde(default)]
    content_block_stop: Option<BlockStop>,
    #[serde(borrow, default)]
    message_stop: Option<MessageStop<'a>>,
    #[serde(default, deserialize_with = "opt_object")]
    internal_server_exception: Option<Box<Exception>>,
    #[serde(default, deserialize_with = "opt_object")]
    model_stream_error_exception: Option<Box<Exception>>,
    #[serde(default, deserialize_with = "opt_object")]
    validation_exception: Option<Box<Exception>>,
    #[serde(default, deserialize_with = "opt_object")]
    throttling_exception: Option<Box<Exception>>,
    #[serde(default, deserialize_with = "opt_object")]
    service_unavailable_exception: Option<Box<Exception>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(default)]
    content_block_index: Option<SoftIndex>,
    #[serde(borrow, default)]
    start: Option<Start<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start<'a> {
    #[serde(borrow, default)]
    tool_use: Option<ToolUseStart<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    tool_result: Option<ToolResultStart<'a>>,
}

/// `start.toolResult`: the start of a server tool's result block. Not needed for calls, so
/// read leniently.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ToolResultStart<'a> {
    #[serde(borrow, default)]
    tool_use_id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    status: Option<Loose<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart<'a> {
    #[serde(borrow, default)]
    tool_use_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    /// `server_tool_use` for a system tool; absent for a client tool.
    #[serde(borrow, default, rename = "type")]
    kind: Option<Loose<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta<'a> {
    #[serde(default)]
    content_block_index: Option<SoftIndex>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(borrow, default)]
    tool_use: Option<ToolUseDelta<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    reasoning_content: Option<ReasoningDelta<'a>>,
    /// `delta.toolResult`: pieces of a result block's output, each `{text}` or `{json}`.
    #[serde(default)]
    tool_result: Option<serde_json::Value>,
}

/// `delta.reasoningContent`: one of its members (a union).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Loose<'a>>,
    #[serde(borrow, default)]
    signature: Option<Loose<'a>>,
    #[serde(borrow, default)]
    redacted_content: Option<Loose<'a>>,
}

#[derive(Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(borrow, default)]
    input: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    #[serde(default)]
    content_block_index: Option<SoftIndex>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop<'a> {
    #[serde(borrow, default)]
    stop_reason: Option<FinishReason<'a>>,
}

#[derive(Deserialize, Default)]
struct Exception {
    /// The message: a string, but any JSON is reported.
    #[serde(default, alias = "Message")]
    message: Option<JsonText>,
}

/// Decodes one Bedrock chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let event: Event<'_> = parse(Provider::Bedrock, chunk)?;
    let index_of = |index: Option<SoftIndex>, field: &str| {
        let problem = match index.as_ref().map(SoftIndex::get) {
            Some(Ok(Some(i))) => return Ok(i),
            Some(Err(problem)) => problem,
            Some(Ok(None)) | None => "missing: a block event needs its index".to_string(),
        };
        Err(DecodeError::bad_field(
            Provider::Bedrock,
            field,
            problem,
            chunk,
        ))
    };
    let mut out = Vec::new();
    if let Some(start) = event.content_block_start {
        let (tool_use, tool_result) = match start.start {
            Some(s) => (s.tool_use, s.tool_result),
            None => (None, None),
        };
        if let Some(tool) = tool_use {
            let index = index_of(
                start.content_block_index,
                "contentBlockStart.contentBlockIndex",
            )?;
            let server = matches!(&tool.kind, Some(Loose::Str(k)) if k == "server_tool_use");
            out.push(ChunkEvent::CallFragment(CallFragment {
                at: CallRef {
                    index: Some(index),
                    wire_id: non_blank_text(tool.tool_use_id),
                    item_id: None,
                },
                name: non_blank_text(tool.name),
                kind: server.then_some(CallKind::ServerTool),
                ..CallFragment::default()
            }));
        } else if let Some(result) = tool_result {
            let index = start
                .content_block_index
                .and_then(|i| i.get().ok().flatten());
            let id = result
                .tool_use_id
                .and_then(Loose::into_text)
                .filter(|id| !id.trim().is_empty());
            if let (Some(index), Some(id)) = (index, id) {
                out.push(ChunkEvent::ResultBlock(ResultBlockPiece {
                    index,
                    tool_call_id: Some(id.into_owned()),
                    is_error: matches!(&result.status, Some(Loose::Str(s)) if s == "error"),
                    text: None,
                }));
            }
        }
    }
    if let Some(delta) = event.content_block_delta {
        let (tool_use, reasoning, result) = match delta.delta {
            Some(d) => (d.tool_use, d.reasoning_content, d.tool_result),
            None => (None, None, None),
        };
        if let Some(tool) = tool_use {
            let index = index_of(
                delta.content_block_index,
                "contentBlockDelta.contentBlockIndex",
            )?;
            let text = tool.input.map(Text::into_string).unwrap_or_default();
            out.push(ChunkEvent::args_at(index, text));
        } else if let Some(r) = reasoning {
            let index = delta
                .content_block_index
                .and_then(|i| i.get().ok().flatten());
            let text = |v: Option<Loose<'_>>| {
                v.and_then(Loose::into_text)
                    .filter(|t| !t.is_empty())
                    .map(|t| t.into_owned())
            };
            let (t, signature, data) = (text(r.text), text(r.signature), text(r.redacted_content));
            let kind = match (&t, &data) {
                (Some(_), _) => Some(ReasoningKind::Thinking),
                (None, Some(_)) => Some(ReasoningKind::RedactedThinking),
                (None, None) => None,
            };
            if let (Some(index), true) =
                (index, t.is_some() || signature.is_some() || data.is_some())
            {
                out.push(ChunkEvent::Reasoning(ReasoningPiece {
                    index,
                    kind,
                    text: t,
                    signature,
                    data,
                }));
            }
        } else if let Some(pieces) = result {
            let index = delta
                .content_block_index
                .and_then(|i| i.get().ok().flatten());
            let text = result_text(&pieces);
            if let (Some(index), false) = (index, text.is_empty()) {
                out.push(ChunkEvent::ResultBlock(ResultBlockPiece {
                    index,
                    text: Some(text),
                    ..ResultBlockPiece::default()
                }));
            }
        }
    }
    if let Some(stop) = event.content_block_stop {
        let index = index_of(
            stop.content_block_index,
            "contentBlockStop.contentBlockIndex",
        )?;
        out.push(ChunkEvent::CallEnd(CallEnd {
            at: CallRef {
                index: Some(index),
                ..CallRef::default()
            },
            ..CallEnd::default()
        }));
    }
    if let Some(stop) = event.message_stop {
        out.push(match stop.stop_reason.and_then(|r| r.read(finish_of)) {
            Some((finish, reason)) => ChunkEvent::MessageEnd { finish, reason },
            None => ChunkEvent::StreamEnd,
        });
    }
    let exceptions = [
        ("internalServerException", event.internal_server_exception),
        (
            "modelStreamErrorException",
            event.model_stream_error_exception,
        ),
        ("validationException", event.validation_exception),
        ("throttlingException", event.throttling_exception),
        (
            "serviceUnavailableException",
            event.service_unavailable_exception,
        ),
    ];
    for (name, exception) in exceptions {
        if let Some(exception) = exception {
            let message = match exception.message.filter(|m| !m.text.trim().is_empty()) {
                Some(m) => format!("{name}: {}", m.text),
                None => name.to_string(),
            };
            out.push(ChunkEvent::ProviderError {
                message: shorten(&message),
            });
        }
    }
    Ok(out)
}

/// The output text of `delta.toolResult` pieces (a list of `{text}` / `{json}` members; a
/// lone piece object is read too): text as is, JSON as its compact text, anything else
/// skipped.
fn result_text(pieces: &serde_json::Value) -> String {
    use serde_json::Value;
    let one = |piece: &Value| match (piece.get("text"), piece.get("json")) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(json)) if !json.is_null() => json.to_string(),
        _ => String::new(),
    };
    match pieces {
        Value::Array(items) => items.iter().map(one).collect(),
        Value::Object(_) => one(pieces),
        _ => String::new(),
    }
}

/// Normalizes `stopReason`.
fn finish_of(reason: &str) -> Finish {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => Finish::Truncated,
        "guardrail_intervened" | "content_filtered" => Finish::Filtered,
        // the model's tool use or output could not be read: no call of it is complete
        "malformed_tool_use" | "malformed_model_output" => Finish::Error,
        // tool_use, end_turn, stop_sequence, reasons added later.
        _ => Finish::Complete,
    }
}
