//! Anthropic Messages streaming: one SSE `data:` JSON event (each with a `type`) → chunk events.
//!
//! What each event type means here:
//! - `content_block_start` with a `tool_use` / `server_tool_use` / `mcp_tool_use` block → a
//!   fragment with the block `index`, the call `id` and `name`, and the call's kind
//!   (`function`, `server_tool`, `mcp`; an MCP block's `server_name` is kept as metadata). The
//!   block's `input` is ignored: Anthropic always sends `{}` there and streams the real input
//!   as `input_json_delta`s; a tool that takes no input gets no deltas and its empty text
//!   means `{}` downstream, so nothing is lost.
//! - `content_block_start` with a server tool's result block (`web_search_tool_result`,
//!   `mcp_tool_result`, `code_execution_tool_result`, any `*_tool_result` with a
//!   `tool_use_id`) → a whole tool result for that call: the `content` as its text (a string
//!   as is, text blocks joined, anything else as compact JSON), `is_error` from the block's
//!   `is_error` or an error content (`*_error` type). A result block without a `tool_use_id`
//!   is skipped, never an error.
//! - `content_block_start` with a `thinking` block (its `thinking` and `signature`, usually
//!   `""`) or a `redacted_thinking` block (its `data`) → a [`ReasoningPiece`] of that kind at
//!   `index`; a `thinking_delta` → its `thinking` appended, a `signature_delta` → its
//!   `signature` appended. Reasoning is not a call: the assembler keeps the blocks as the
//!   message's provider metadata, for history to send back before the `tool_use` they
//!   preceded. Not needed for calls, so a reasoning block or delta whose index or text cannot
//!   be read is skipped, never an error.
//! - `content_block_delta` with `input_json_delta` → `partial_json` appended at `index` (the
//!   first one is often `""`); text and citation deltas → nothing.
//! - `content_block_stop` → an end for that `index`, for every block: the assembler ignores
//!   ends of indexes that hold no call (text and thinking blocks stop too).
//! - `message_delta` with a `stop_reason` → the message end; `message_stop` → stream end.
//! - `error` → a provider error; `ping`, `message_start` and unknown types → nothing.
//!
//! One struct reads every handled event type, so its fields are read without failing and
//! checked only where needed: the block `index` (a number, or one written as a string) on
//! block events, a tool block's `id`/`name`, an `input_json_delta`'s `partial_json`. The
//! `usage` of `message_delta`, text/thinking/citation blocks and deltas, `stop_sequence` and
//! any other member of whatever shape never fail a chunk; a `stop_reason` that is not a
//! string is read as no reason.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::call::{CallKind, ResultInput, ToolResult};
use crate::chunk::{
    CallEnd, CallFragment, CallRef, ChunkEvent, Finish, ReasoningKind, ReasoningPiece,
};
use crate::decode::lenient::{opt_object, FinishReason, Loose, SoftIndex};
use crate::decode::text::{provider_message, JsonText, Text};
use crate::decode::typed::parse_typed_event;
use crate::error::DecodeError;
use crate::provider::Provider;

/// One Anthropic stream event; only the fields toolstream reads.
#[derive(Deserialize)]
struct Event<'a> {
    /// Event type (`content_block_start`, `ping`, ...).
    #[serde(rename = "type", borrow)]
    kind: Text<'a>,
    /// Content block index (block events).
    #[serde(default)]
    index: Option<SoftIndex>,
    /// The block that starts (`content_block_start`).
    #[serde(default, borrow, deserialize_with = "opt_object")]
    content_block: Option<Block<'a>>,
    /// The delta (`content_block_delta`, `message_delta`).
    #[serde(default, borrow, deserialize_with = "opt_object")]
    delta: Option<Delta<'a>>,
    /// The error (`error`).
    #[serde(default)]
    error: Option<JsonText>,
}

/// `content_block` of `content_block_start`.
#[derive(Deserialize, Default)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Loose<'a>>,
    #[serde(borrow, default)]
    id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    name: Option<Loose<'a>>,
    /// The MCP server of an `mcp_tool_use` block (kept as metadata, never needed).
    #[serde(borrow, default)]
    server_name: Option<Loose<'a>>,
    /// The call a result block answers.
    #[serde(borrow, default)]
    tool_use_id: Option<Loose<'a>>,
    /// A result block's content (any JSON).
    #[serde(default)]
    content: Option<serde_json::Value>,
    /// A result block's error flag (`mcp_tool_result`); only `true` counts.
    #[serde(default)]
    is_error: Option<serde_json::Value>,
    /// A `thinking` block's text so far (usually `""`).
    #[serde(borrow, default)]
    thinking: Option<Loose<'a>>,
    /// A `thinking` block's signature so far (usually `""`).
    #[serde(borrow, default)]
    signature: Option<Loose<'a>>,
    /// A `redacted_thinking` block's encrypted reasoning.
    #[serde(borrow, default)]
    data: Option<Loose<'a>>,
}

/// `delta` of `content_block_delta` or `message_delta`.
#[derive(Deserialize, Default)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Loose<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<Loose<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<FinishReason<'a>>,
    /// A `thinking_delta`'s text.
    #[serde(borrow, default)]
    thinking: Option<Loose<'a>>,
    /// A `signature_delta`'s signature.
    #[serde(borrow, default)]
    signature: Option<Loose<'a>>,
}

/// The event types this decoder reads; any other type is ignored whatever its fields.
fn handled(kind: &str) -> bool {
    matches!(
        kind,
        "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
            | "error"
    )
}

/// Decodes one Anthropic chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let Some(event) = parse_typed_event::<Event<'_>>(Provider::Anthropic, chunk, handled)? else {
        return Ok(Vec::new());
    };
    let bad = |field: &str, problem: String| {
        DecodeError::bad_field(Provider::Anthropic, field, problem, chunk)
    };
    let at_index = |index: Option<SoftIndex>| match index.as_ref().map(SoftIndex::get) {
        Some(Ok(Some(i))) => Ok(i),
        Some(Err(problem)) => Err(bad("index", problem)),
        Some(Ok(None)) | None => Err(bad(
            "index",
            "missing: a block event needs its index".to_string(),
        )),
    };
    let out = match event.kind.as_str() {
        "content_block_start" => {
            let Some(block) = event.content_block else {
                return Ok(Vec::new());
            };
            let block_kind = match &block.kind {
                Some(Loose::Str(k)) => k.to_string(),
                _ => return Ok(Vec::new()),
            };
            if let Some(kind) = tool_block_kind(&block_kind) {
                let index = at_index(event.index)?;
                let text = |value: Option<Loose<'_>>, field: &str| match value {
                    None => Ok(None),
                    Some(v) => v.need_text().map_err(|problem| bad(field, problem)),
                };
                let mut metadata = Map::new();
                if let Some(server) = block.server_name.and_then(Loose::into_text) {
                    metadata.insert("server_name".into(), Value::String(server.into_owned()));
                }
                vec![ChunkEvent::CallFragment(CallFragment {
                    at: CallRef {
                        index: Some(index),
                        wire_id: text(block.id, "content_block.id")?,
                        item_id: None,
                    },
                    name: text(block.name, "content_block.name")?,
                    kind: (kind != CallKind::Function).then_some(kind),
                    metadata,
                    ..CallFragment::default()
                })]
            } else if block_kind.ends_with("_tool_result") {
                result_block(block).into_iter().collect()
            } else if let Some(kind) = reasoning_kind(&block_kind) {
                let Some(index) = soft_index(event.index) else {
                    return Ok(Vec::new());
                };
                vec![ChunkEvent::Reasoning(ReasoningPiece {
                    index,
                    kind: Some(kind),
                    text: some_text(block.thinking),
                    signature: some_text(block.signature),
                    data: some_text(block.data),
                })]
            } else {
                Vec::new()
            }
        }
        "content_block_delta" => match event.delta {
            Some(delta) if matches!(&delta.kind, Some(Loose::Str(k)) if k == "input_json_delta") => {
                let index = at_index(event.index)?;
                let text = match delta.partial_json {
                    None | Some(Loose::Null) => String::new(),
                    Some(Loose::Str(t)) => t.into_owned(),
                    Some(other) => return Err(bad("delta.partial_json", other.not_a_string())),
                };
                vec![ChunkEvent::args_at(index, text)]
            }
            Some(delta) if matches!(&delta.kind, Some(Loose::Str(k)) if k == "thinking_delta" || k == "signature_delta") =>
            {
                let Some(index) = soft_index(event.index) else {
                    return Ok(Vec::new());
                };
                // (each delta type carries its own field only)
                let (text, signature) = match &delta.kind {
                    Some(Loose::Str(k)) if k == "thinking_delta" => {
                        (some_text(delta.thinking), None)
                    }
                    _ => (None, some_text(delta.signature)),
                };
                if text.is_none() && signature.is_none() {
                    return Ok(Vec::new());
                }
                vec![ChunkEvent::Reasoning(ReasoningPiece {
                    index,
                    text,
                    signature,
                    ..ReasoningPiece::default()
                })]
            }
            _ => Vec::new(),
        },
        "content_block_stop" => {
            let index = at_index(event.index)?;
            vec![ChunkEvent::CallEnd(CallEnd {
                at: CallRef {
                    index: Some(index),
                    ..CallRef::default()
                },
                ..CallEnd::default()
            })]
        }
        "message_delta" => match event
            .delta
            .and_then(|d| d.stop_reason)
            .and_then(|r| r.read(finish_of))
        {
            Some((finish, reason)) => vec![ChunkEvent::MessageEnd { finish, reason }],
            None => Vec::new(),
        },
        "message_stop" => vec![ChunkEvent::StreamEnd],
        "error" => vec![ChunkEvent::ProviderError {
            message: match event.error {
                Some(error) => provider_message(&error),
                None => "error event without an error object".to_string(),
            },
        }],
        _ => Vec::new(),
    };
    Ok(out)
}

/// The kind of reasoning block a block is, if it is one.
fn reasoning_kind(kind: &str) -> Option<ReasoningKind> {
    match kind {
        "thinking" => Some(ReasoningKind::Thinking),
        "redacted_thinking" => Some(ReasoningKind::RedactedThinking),
        _ => None,
    }
}

/// An index that is only wanted, not needed: `None` when it cannot be read.
fn soft_index(index: Option<SoftIndex>) -> Option<u32> {
    index.and_then(|i| i.get().ok().flatten())
}

/// A non-empty string, or `None` (any other value: not needed, not read).
fn some_text(value: Option<Loose<'_>>) -> Option<String> {
    value
        .and_then(Loose::into_text)
        .filter(|t| !t.is_empty())
        .map(|t| t.into_owned())
}

/// The kind of call a block is, if it is one: client tools, server tools (web search, code
/// execution, web fetch, ...) and MCP connector tools.
fn tool_block_kind(kind: &str) -> Option<CallKind> {
    match kind {
        "tool_use" => Some(CallKind::Function),
        "server_tool_use" => Some(CallKind::ServerTool),
        "mcp_tool_use" => Some(CallKind::Mcp),
        _ => None,
    }
}

/// A server tool's result block as a whole tool result for the call it names (`None`
/// without a usable `tool_use_id`: the block is skipped, the stream goes on).
fn result_block(block: Block<'_>) -> Option<ChunkEvent> {
    let tool_call_id = block
        .tool_use_id
        .and_then(Loose::into_text)
        .filter(|id| !id.trim().is_empty())?
        .into_owned();
    let content = block.content.unwrap_or(Value::Null);
    let error_content = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with("_error"))
    };
    let is_error = block.is_error == Some(Value::Bool(true)) || error_content(&content);
    let output = match &content {
        Value::String(s) => s.clone(),
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|b| b.get("type").and_then(Value::as_str) == Some("text")) =>
        {
            items
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        }
        Value::Null => String::new(),
        other => other.to_string(),
    };
    Some(ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
        tool_call_id,
        output,
        is_error,
    })))
}

/// Normalizes `stop_reason`.
fn finish_of(reason: &str) -> Finish {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => Finish::Truncated,
        "refusal" => Finish::Filtered,
        // end_turn, tool_use, stop_sequence, pause_turn, and reasons added later.
        _ => Finish::Complete,
    }
}
