//! Decoder for OpenAI Responses API streaming events (one SSE `data:` JSON per event, each
//! with a `type`).
//!
//! Function calls arrive as an output item: `response.output_item.added` (item type
//! `function_call`, with `id`, `call_id`, `name`), argument deltas keyed by `item_id`
//! (`response.function_call_arguments.delta`), then `response.function_call_arguments.done`
//! and/or `response.output_item.done`, either of which ends the call (a stream with only
//! `output_item.done` works). The consumer-facing id is `call_id`; the item id is kept in
//! `item_id` and in the call's metadata. An item that ends with `status: "incomplete"` ends
//! its call as cut ([`Finish::Truncated`]: `invalid`, `truncated`), never `completed`.
//!
//! Other call items, each a call of its own [`CallKind`]:
//! - `custom_tool_call` (`custom`): free-form `input` streamed as
//!   `response.custom_tool_call_input.delta` / `.done` (whole text in `input`), never JSON;
//!   consumer id `call_id`;
//! - `mcp_call` (`mcp`): arguments streamed as `response.mcp_call_arguments.delta` / `.done`;
//!   it has no `call_id`, so the consumer id is the item `id`; `server_label` is kept in the
//!   metadata, and the `output` (or `error`) on its `output_item.done` is the call's result;
//! - `mcp_approval_request` (`mcp_approval_request`): a whole item with `arguments`; consumer
//!   id the item `id` (the one an `mcp_approval_response` names).
//!
//! Reasoning and message items, text deltas and every other event type decode to nothing. `response.completed` / `response.incomplete` end the
//! message; `response.failed` and `error` report a provider error.
//!
//! One struct reads every handled event type, so its fields are read without failing and
//! checked only where needed: `output_index` (a number, or one written as a string) and
//! `item_id`/`delta` on function-call events, the `id`/`call_id`/`name` of `function_call`
//! items. A reasoning or message item, a `response` object's `usage`, `incomplete_details`
//! or any other member of whatever shape never fails a chunk.

use crate::call::{CallKind, ResultInput, ToolResult};
use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::lenient::{opt_object, FinishReason, Loose, SoftIndex};
use crate::decode::text::{provider_message, JsonText, Text};
use crate::decode::typed::parse_typed_event;
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The event types this decoder reads; all others are ignored whatever their fields hold.
fn handled(ty: &str) -> bool {
    matches!(
        ty,
        "response.output_item.added"
            | "response.output_item.done"
            | "response.function_call_arguments.delta"
            | "response.function_call_arguments.done"
            | "response.custom_tool_call_input.delta"
            | "response.custom_tool_call_input.done"
            | "response.mcp_call_arguments.delta"
            | "response.mcp_call_arguments.done"
            | "response.completed"
            | "response.incomplete"
            | "response.failed"
            | "error"
    )
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    ty: Text<'a>,
    #[serde(default)]
    output_index: Option<SoftIndex>,
    #[serde(borrow, default)]
    item_id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    delta: Option<Loose<'a>>,
    #[serde(default)]
    arguments: Option<JsonText>,
    /// The whole input of a custom tool call (`custom_tool_call_input.done`).
    #[serde(default)]
    input: Option<JsonText>,
    #[serde(borrow, default)]
    name: Option<Loose<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    item: Option<Item<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    response: Option<Response<'a>>,
    /// Error message (`error` events): a string, but any JSON is reported.
    #[serde(default)]
    message: Option<JsonText>,
    /// Error code: a string in OpenAI's docs, but any JSON is accepted (some proxies send
    /// numbers) since the event is reported either way.
    #[serde(default)]
    code: Option<JsonText>,
}

#[derive(Deserialize, Default)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Loose<'a>>,
    #[serde(borrow, default)]
    id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Loose<'a>>,
    #[serde(borrow, default)]
    name: Option<Loose<'a>>,
    #[serde(default)]
    arguments: Option<JsonText>,
    /// A custom tool call's free-form input.
    #[serde(default)]
    input: Option<JsonText>,
    /// `in_progress`, `completed`, `incomplete` (`failed` on `mcp_call`): read only for
    /// `incomplete`, any other value or shape is a normal end.
    #[serde(borrow, default)]
    status: Option<Loose<'a>>,
    /// The MCP server of `mcp_call` / `mcp_approval_request` items (kept as metadata).
    #[serde(borrow, default)]
    server_label: Option<Loose<'a>>,
    /// An `mcp_call`'s output (its result).
    #[serde(default)]
    output: Option<JsonText>,
    /// An `mcp_call`'s error (its result, failed).
    #[serde(default)]
    error: Option<JsonText>,
}

#[derive(Deserialize, Default)]
struct Response<'a> {
    #[serde(default)]
    error: Option<JsonText>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    incomplete_details: Option<IncompleteDetails<'a>>,
}

#[derive(Deserialize, Default)]
struct IncompleteDetails<'a> {
    #[serde(borrow, default)]
    reason: Option<FinishReason<'a>>,
}

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let Some(event) = parse_typed_event::<Event<'_>>(Provider::OpenaiResponses, chunk, handled)?
    else {
        return Ok(Vec::new());
    };
    let index = |value: &Option<SoftIndex>| match value.as_ref().map(SoftIndex::get) {
        None => Ok(None),
        Some(Ok(i)) => Ok(i),
        Some(Err(problem)) => Err(DecodeError::bad_field(
            Provider::OpenaiResponses,
            "output_index",
            problem,
            chunk,
        )),
    };
    let out = match event.ty.as_str() {
        "response.output_item.added" => match call_item(event.item, chunk)? {
            Some(call) => vec![ChunkEvent::CallFragment(CallFragment {
                metadata: call.metadata,
                at: CallRef {
                    index: index(&event.output_index)?,
                    wire_id: call.call_id,
                    item_id: call.item_id,
                },
                name: call.name,
                kind: call.kind,
                arguments: call.arguments.filter(|a| !a.is_empty()),
                ..CallFragment::default()
            })],
            None => Vec::new(),
        },
        "response.output_item.done" => match call_item(event.item, chunk)? {
            Some(call) => {
                let mut out = vec![ChunkEvent::CallEnd(CallEnd {
                    metadata: call.metadata,
                    at: CallRef {
                        index: index(&event.output_index)?,
                        wire_id: call.call_id.clone(),
                        item_id: call.item_id,
                    },
                    name: call.name,
                    kind: call.kind,
                    arguments: call.arguments,
                    finish: call.incomplete.then_some(Finish::Truncated),
                })];
                if let (Some(id), Some(result)) = (call.call_id, call.result) {
                    out.push(ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
                        tool_call_id: id,
                        output: result.0,
                        is_error: result.1,
                    })));
                }
                out
            }
            None => Vec::new(),
        },
        "response.function_call_arguments.delta"
        | "response.custom_tool_call_input.delta"
        | "response.mcp_call_arguments.delta" => {
            let delta = match event.delta {
                None | Some(Loose::Null) => None,
                Some(Loose::Str(d)) => Some(d.into_owned()).filter(|d| !d.is_empty()),
                Some(other) => {
                    return Err(DecodeError::bad_field(
                        Provider::OpenaiResponses,
                        "delta",
                        other.not_a_string(),
                        chunk,
                    ))
                }
            };
            match delta {
                Some(delta) => vec![ChunkEvent::CallFragment(CallFragment {
                    at: CallRef {
                        index: index(&event.output_index)?,
                        wire_id: None,
                        item_id: need_text(event.item_id, "item_id", chunk)?,
                    },
                    arguments: Some(delta),
                    ..CallFragment::default()
                })],
                None => Vec::new(),
            }
        }
        "response.function_call_arguments.done"
        | "response.custom_tool_call_input.done"
        | "response.mcp_call_arguments.done" => vec![ChunkEvent::CallEnd(CallEnd {
            at: CallRef {
                index: index(&event.output_index)?,
                wire_id: None,
                item_id: need_text(event.item_id, "item_id", chunk)?,
            },
            // The name was stated by `output_item.added`; here it is optional, so a name
            // that is not a string is simply not read.
            name: event
                .name
                .and_then(Loose::into_text)
                .filter(|n| !n.trim().is_empty())
                .map(|n| n.into_owned()),
            kind: match event.ty.as_str() {
                "response.custom_tool_call_input.done" => Some(CallKind::Custom),
                "response.mcp_call_arguments.done" => Some(CallKind::Mcp),
                _ => None,
            },
            // (a custom call's whole text is `input`; the others' is `arguments`)
            arguments: event.input.or(event.arguments).map(|a| a.text),
            metadata: Map::new(),
            finish: None,
        })],
        "response.completed" => vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".to_string(),
        }],
        "response.incomplete" => {
            let reason = event
                .response
                .and_then(|r| r.incomplete_details)
                .and_then(|d| d.reason)
                .and_then(|r| r.read(incomplete_finish))
                .map(|(_, reason)| reason)
                .unwrap_or_else(|| "incomplete".to_string());
            vec![ChunkEvent::MessageEnd {
                finish: incomplete_finish(&reason),
                reason,
            }]
        }
        "response.failed" => {
            let message = event
                .response
                .and_then(|r| r.error)
                .map(|e| provider_message(&e))
                .unwrap_or_else(|| "response failed".to_string());
            vec![ChunkEvent::ProviderError { message }]
        }
        "error" => {
            let code = event.code.map(|c| c.text).filter(|c| !c.trim().is_empty());
            let message = event
                .message
                .map(|m| m.text)
                .filter(|m| !m.trim().is_empty());
            let message = match (code, message) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (None, Some(message)) => message,
                (Some(code), None) => code,
                (None, None) => "error".to_string(),
            };
            vec![ChunkEvent::ProviderError {
                message: crate::decode::text::shorten(&message),
            }]
        }
        _ => Vec::new(),
    };
    Ok(out)
}

/// The parts of a call output item the call events need.
struct CallItem {
    item_id: Option<String>,
    /// The consumer-facing id: `call_id`, or the item id for MCP items (they have none).
    call_id: Option<String>,
    name: Option<String>,
    /// `None` for a `function_call` (the default kind).
    kind: Option<CallKind>,
    arguments: Option<String>,
    /// The item says `status: "incomplete"`.
    incomplete: bool,
    metadata: Map<String, Value>,
    /// An `mcp_call`'s result: its output (or error) text and whether it failed.
    result: Option<(String, bool)>,
}

/// The item, if it is a call item (`function_call`, `custom_tool_call`, `mcp_call`,
/// `mcp_approval_request`; reasoning, message and other items are `None`, whatever their
/// fields hold). A call item's ids and name must be strings.
fn call_item(item: Option<Item<'_>>, chunk: &[u8]) -> Result<Option<CallItem>, DecodeError> {
    let Some(item) = item else {
        return Ok(None);
    };
    let kind = match item.ty.and_then(Loose::into_text).as_deref() {
        Some("function_call") => None,
        Some("custom_tool_call") => Some(CallKind::Custom),
        Some("mcp_call") => Some(CallKind::Mcp),
        Some("mcp_approval_request") => Some(CallKind::McpApprovalRequest),
        _ => return Ok(None),
    };
    let item_id = need_text(item.id, "item.id", chunk)?;
    let mcp = matches!(kind, Some(CallKind::Mcp | CallKind::McpApprovalRequest));
    let call_id = if mcp {
        item_id.clone()
    } else {
        need_text(item.call_id, "item.call_id", chunk)?
    };
    let mut metadata = item_metadata(item_id.as_deref());
    if mcp {
        // (only kept, never needed: a label of another shape is not read)
        if let Some(label) = item.server_label.and_then(Loose::into_text) {
            metadata.insert("server_label".into(), Value::String(label.into_owned()));
        }
    }
    let arguments = match kind {
        Some(CallKind::Custom) => item.input,
        _ => item.arguments,
    };
    let incomplete = item.status.and_then(Loose::into_text).as_deref() == Some("incomplete");
    let result = match (kind, item.error, item.output) {
        (Some(CallKind::Mcp), Some(e), _) if !e.text.trim().is_empty() => Some((e.text, true)),
        (Some(CallKind::Mcp), _, Some(o)) => Some((o.text, false)),
        _ => None,
    };
    Ok(Some(CallItem {
        item_id,
        call_id,
        name: need_text(item.name, "item.name", chunk)?,
        kind,
        arguments: arguments.map(|a| a.text),
        incomplete,
        metadata,
        result,
    }))
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
        Some(v) => v.need_text().map_err(|problem| {
            DecodeError::bad_field(Provider::OpenaiResponses, field, problem, chunk)
        }),
    }
}

/// `response.incomplete` is a truncation unless a filter cut it.
fn incomplete_finish(reason: &str) -> Finish {
    if reason == "content_filter" {
        Finish::Filtered
    } else {
        Finish::Truncated
    }
}

fn item_metadata(item_id: Option<&str>) -> Map<String, Value> {
    let mut map = Map::new();
    if let Some(id) = item_id {
        map.insert("item_id".to_string(), Value::String(id.to_string()));
    }
    map
}
