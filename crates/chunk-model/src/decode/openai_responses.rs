//! Decoder for OpenAI Responses API streaming events (one SSE `data:` JSON per event, each
//! with a `type`).
//!
//! Function calls arrive as an output item: `response.output_item.added` (item type
//! `function_call`, with `id`, `call_id`, `name`), argument deltas keyed by `item_id`
//! (`response.function_call_arguments.delta`), then `response.function_call_arguments.done`
//! and/or `response.output_item.done`, either of which ends the call (a stream with only
//! `output_item.done` works). The consumer-facing id is `call_id`; the item id is kept in
//! `item_id` and in the call's metadata. Reasoning and message items, text deltas and every
//! other event type decode to nothing. `response.completed` / `response.incomplete` end the
//! message; `response.failed` and `error` report a provider error.
//!
//! One struct reads every handled event type, so its fields are read without failing and
//! checked only where needed: `output_index` (a number, or one written as a string) and
//! `item_id`/`delta` on function-call events, the `id`/`call_id`/`name` of `function_call`
//! items. A reasoning or message item, a `response` object's `usage`, `incomplete_details`
//! or any other member of whatever shape never fails a chunk.

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
        "response.output_item.added" => match function_call(event.item, chunk)? {
            Some(call) => vec![ChunkEvent::CallFragment(CallFragment {
                metadata: item_metadata(call.item_id.as_deref()),
                at: CallRef {
                    index: index(&event.output_index)?,
                    wire_id: call.call_id,
                    item_id: call.item_id,
                },
                name: call.name,
                arguments: call.arguments.filter(|a| !a.is_empty()),
                ..CallFragment::default()
            })],
            None => Vec::new(),
        },
        "response.output_item.done" => match function_call(event.item, chunk)? {
            Some(call) => vec![ChunkEvent::CallEnd(CallEnd {
                metadata: item_metadata(call.item_id.as_deref()),
                at: CallRef {
                    index: index(&event.output_index)?,
                    wire_id: call.call_id,
                    item_id: call.item_id,
                },
                name: call.name,
                arguments: call.arguments,
                ..CallEnd::default()
            })],
            None => Vec::new(),
        },
        "response.function_call_arguments.delta" => {
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
        "response.function_call_arguments.done" => vec![ChunkEvent::CallEnd(CallEnd {
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
            arguments: event.arguments.map(|a| a.text),
            metadata: Map::new(),
            ..CallEnd::default()
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

/// The parts of a `function_call` output item the call events need.
struct FunctionCallItem {
    item_id: Option<String>,
    call_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
}

/// The item, if it is a `function_call` (reasoning, message and other items are `None`,
/// whatever their fields hold). A `function_call` item's ids and name must be strings.
fn function_call(
    item: Option<Item<'_>>,
    chunk: &[u8],
) -> Result<Option<FunctionCallItem>, DecodeError> {
    let Some(item) = item else {
        return Ok(None);
    };
    if item.ty.and_then(Loose::into_text).as_deref() != Some("function_call") {
        return Ok(None);
    }
    Ok(Some(FunctionCallItem {
        item_id: need_text(item.id, "item.id", chunk)?,
        call_id: need_text(item.call_id, "item.call_id", chunk)?,
        name: need_text(item.name, "item.name", chunk)?,
        arguments: item.arguments.map(|a| a.text),
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
