//! Anthropic Messages streaming: one SSE `data:` JSON event (each with a `type`) → chunk events.
//!
//! What each event type means here:
//! - `content_block_start` with a `tool_use` / `server_tool_use` block → a fragment with the
//!   block `index`, the call `id` and `name`. The block's `input` is ignored: Anthropic always
//!   sends `{}` there and streams the real input as `input_json_delta`s; a tool that takes no
//!   input gets no deltas and its empty text means `{}` downstream, so nothing is lost.
//! - `content_block_delta` with `input_json_delta` → `partial_json` appended at `index` (the
//!   first one is often `""`); text, thinking, signature and citation deltas → nothing.
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

use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish};
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
        "content_block_start" => match event.content_block {
            Some(block)
                if block
                    .kind
                    .as_ref()
                    .is_some_and(|k| matches!(k, Loose::Str(k) if is_tool_block(k))) =>
            {
                let index = at_index(event.index)?;
                let text = |value: Option<Loose<'_>>, field: &str| match value {
                    None => Ok(None),
                    Some(v) => v.need_text().map_err(|problem| bad(field, problem)),
                };
                vec![ChunkEvent::CallFragment(CallFragment {
                    at: CallRef {
                        index: Some(index),
                        wire_id: text(block.id, "content_block.id")?,
                        item_id: None,
                    },
                    name: text(block.name, "content_block.name")?,
                    ..CallFragment::default()
                })]
            }
            _ => Vec::new(),
        },
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

/// Blocks that are tool calls: client tools and server tools (web search, code execution).
fn is_tool_block(kind: &str) -> bool {
    matches!(kind, "tool_use" | "server_tool_use")
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
