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

use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::text::{non_blank_text, provider_message, JsonText, Text};
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
    output_index: Option<u32>,
    #[serde(borrow, default)]
    item_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    #[serde(borrow, default)]
    arguments: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    item: Option<Item<'a>>,
    #[serde(borrow, default)]
    response: Option<Response<'a>>,
    #[serde(borrow, default)]
    message: Option<Text<'a>>,
    /// Error code: a string in OpenAI's docs, but any JSON is accepted (some proxies send
    /// numbers) since the event is reported either way.
    #[serde(default)]
    code: Option<JsonText>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Text<'a>>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(default)]
    arguments: Option<JsonText>,
}

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(default)]
    error: Option<JsonText>,
    #[serde(borrow, default)]
    incomplete_details: Option<IncompleteDetails<'a>>,
}

#[derive(Deserialize)]
struct IncompleteDetails<'a> {
    #[serde(borrow, default)]
    reason: Option<Text<'a>>,
}

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let Some(event) = parse_typed_event::<Event<'_>>(Provider::OpenaiResponses, chunk, handled)?
    else {
        return Ok(Vec::new());
    };
    let out = match event.ty.as_str() {
        "response.output_item.added" => match function_call(event.item) {
            Some(call) => vec![ChunkEvent::CallFragment(CallFragment {
                metadata: item_metadata(call.item_id.as_deref()),
                at: CallRef {
                    index: event.output_index,
                    wire_id: call.call_id,
                    item_id: call.item_id,
                },
                name: call.name,
                arguments: call.arguments.filter(|a| !a.is_empty()),
                ..CallFragment::default()
            })],
            None => Vec::new(),
        },
        "response.output_item.done" => match function_call(event.item) {
            Some(call) => vec![ChunkEvent::CallEnd(CallEnd {
                metadata: item_metadata(call.item_id.as_deref()),
                at: CallRef {
                    index: event.output_index,
                    wire_id: call.call_id,
                    item_id: call.item_id,
                },
                name: call.name,
                arguments: call.arguments,
            })],
            None => Vec::new(),
        },
        "response.function_call_arguments.delta" => {
            match event.delta.map(Text::into_string).filter(|d| !d.is_empty()) {
                Some(delta) => vec![ChunkEvent::CallFragment(CallFragment {
                    at: CallRef {
                        index: event.output_index,
                        wire_id: None,
                        item_id: non_blank_text(event.item_id),
                    },
                    arguments: Some(delta),
                    ..CallFragment::default()
                })],
                None => Vec::new(),
            }
        }
        "response.function_call_arguments.done" => vec![ChunkEvent::CallEnd(CallEnd {
            at: CallRef {
                index: event.output_index,
                wire_id: None,
                item_id: non_blank_text(event.item_id),
            },
            name: non_blank_text(event.name),
            arguments: event.arguments.map(Text::into_string),
            metadata: Map::new(),
        })],
        "response.completed" => vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".to_string(),
        }],
        "response.incomplete" => {
            let reason = event
                .response
                .and_then(|r| r.incomplete_details)
                .and_then(|d| non_blank_text(d.reason))
                .unwrap_or_else(|| "incomplete".to_string());
            let finish = if reason == "content_filter" {
                Finish::Filtered
            } else {
                Finish::Truncated
            };
            vec![ChunkEvent::MessageEnd { finish, reason }]
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
            let message = match (code, non_blank_text(event.message)) {
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

/// The item, if it is a `function_call` (reasoning, message and other items are `None`).
fn function_call(item: Option<Item<'_>>) -> Option<FunctionCallItem> {
    let item = item?;
    if item.ty.as_ref().map(Text::as_str) != Some("function_call") {
        return None;
    }
    Some(FunctionCallItem {
        item_id: non_blank_text(item.id),
        call_id: non_blank_text(item.call_id),
        name: non_blank_text(item.name),
        arguments: item.arguments.map(|a| a.text),
    })
}

fn item_metadata(item_id: Option<&str>) -> Map<String, Value> {
    let mut map = Map::new();
    if let Some(id) = item_id {
        map.insert("item_id".to_string(), Value::String(id.to_string()));
    }
    map
}
