//! OpenAI Responses API history (`input` items).
//!
//! ```json
//! {"type":"function_call","call_id":"call_1","name":"get_weather",
//!  "arguments":"{\"city\":\"Paris\"}","id":"fc_1"}
//! {"type":"function_call_output","call_id":"call_1","output":"18°C"}
//! {"type":"custom_tool_call","call_id":"call_2","name":"apply_patch","input":"*** Begin Patch…"}
//! {"type":"custom_tool_call_output","call_id":"call_2","output":"Done!"}
//! ```
//!
//! A `custom` call (free-form input) goes back as the `custom_tool_call` item it came as, its
//! input the text itself, and its result as a `custom_tool_call_output`; every other kind is a
//! `function_call`.
//!
//! The consumer id is `call_id`; the item `id` is sent only when asked
//! ([`EncCall::send_item_id`]) and the stored `provider_metadata.item_id` fits (an `fc_…` id of
//! word characters), and parsed back into the same metadata key. Why not by default: the API
//! answers 400 to an `fc_` item id it did not store (`store: false`) or whose `reasoning` item
//! is not in the input ("Item … was provided without its required 'reasoning' item"), and
//! toolstream does not keep reasoning items. Parallel calls are consecutive `function_call` items; a new run of them
//! starts a new turn on parse. Lossy by nature: `is_error` (no flag on `function_call_output`),
//! other metadata.

use super::parse::{content_text, str_at, Builder, HistoryParseError};
use super::{EncCall, EncResult, HistoryFormat, Role, META_ITEM_ID};
use crate::call::{CallKind, ToolResult};
use crate::snapshot::MessageSnapshot;
use serde_json::{json, Map, Value};

const FORMAT: HistoryFormat = HistoryFormat::OpenaiResponses;

/// The stored item id, if it can be sent back as a `function_call` item id.
fn fitting_item_id(call: &EncCall<'_>) -> Option<String> {
    if !call.send_item_id {
        return None;
    }
    let id = call.metadata.get(META_ITEM_ID)?.as_str()?;
    let fits = id.starts_with("fc_")
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    fits.then(|| id.to_string())
}

/// An optional assistant text item, then one `function_call` item per call.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>]) -> Vec<Value> {
    let mut out = Vec::with_capacity(calls.len() + 1);
    if let Some(t) = text {
        out.push(self::text(Role::Assistant, t));
    }
    for c in calls {
        if c.kind == CallKind::Custom {
            // free-form input, sent back as the text it was (never JSON-quoted)
            let input = match c.arguments {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            out.push(json!({
                "type": "custom_tool_call",
                "call_id": c.id,
                "name": c.name,
                "input": input,
            }));
            continue;
        }
        let mut item = json!({
            "type": "function_call",
            "call_id": c.id,
            "name": c.name,
            "arguments": c.arguments.to_string(),
        });
        if let (Some(item_id), Some(obj)) = (fitting_item_id(c), item.as_object_mut()) {
            obj.insert("id".to_string(), Value::String(item_id));
        }
        out.push(item);
    }
    out
}

/// One `function_call_output` item per result (`custom_tool_call_output` for a custom call's),
/// in call order.
pub fn results(results: &[EncResult<'_>]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let ty = match r.kind {
                CallKind::Custom => "custom_tool_call_output",
                _ => "function_call_output",
            };
            json!({"type": ty, "call_id": r.id, "output": r.output})
        })
        .collect()
}

/// A plain text message item.
pub fn text(role: Role, text: &str) -> Value {
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"type": "message", "role": role, "content": text})
}

/// Parses `input` items back into snapshots.
pub fn parse(items: &[Value]) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(FORMAT);
    let mut previous_was_call = false;
    for (i, item) in items.iter().enumerate() {
        let kind = str_at(item, "type");
        match kind {
            Some("function_call") => {
                if !previous_was_call {
                    b.start_turn();
                }
                let call_id = str_at(item, "call_id")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "call_id", item))?;
                let name = str_at(item, "name")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "name", item))?;
                let raw = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                let mut meta = Map::new();
                if let Some(id) = str_at(item, "id") {
                    meta.insert(META_ITEM_ID.to_string(), Value::String(id.to_string()));
                }
                b.push_call_raw(Some(call_id.to_string()), name.to_string(), raw, meta);
            }
            Some("custom_tool_call") => {
                if !previous_was_call {
                    b.start_turn();
                }
                let call_id = str_at(item, "call_id")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "call_id", item))?;
                let name = str_at(item, "name")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "name", item))?;
                let input = str_at(item, "input")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "input", item))?;
                b.push_call_custom(
                    Some(call_id.to_string()),
                    name.to_string(),
                    input.to_string(),
                    Map::new(),
                );
            }
            Some("function_call_output") | Some("custom_tool_call_output") => {
                let call_id = str_at(item, "call_id")
                    .ok_or_else(|| HistoryParseError::bad_field(FORMAT, i, "call_id", item))?;
                let output = content_text(item.get("output").unwrap_or(&Value::Null));
                b.push_result(
                    i,
                    ToolResult {
                        tool_call_id: call_id.to_string(),
                        output,
                        is_error: false,
                    },
                )?;
            }
            _ => {}
        }
        previous_was_call = matches!(kind, Some("function_call" | "custom_tool_call"));
    }
    Ok(b.finish())
}
