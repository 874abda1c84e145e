//! Anthropic Messages history.
//!
//! ```json
//! {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather",
//!   "input":{"city":"Paris"}}]}
//! {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18°C",
//!   "is_error":false}]}
//! ```
//!
//! All results of one assistant turn go in ONE user message, in call order, right after it
//! (the API requires every `tool_use` to be answered in the next message). Text is always a
//! block list so that consecutive same-role messages merge (see
//! [`super::merge_roles`]). `input` must be an object: see [`EncCall::arguments_object`].
//! An empty result omits `content` (optional in the API) rather than risk an empty text
//! block, which the API rejects ("text content blocks must be non-empty").
//! The message's reasoning blocks go back in place (`thinking` with its `signature`,
//! `redacted_thinking` with its `data`: see [`super::insert_reasoning`]).
//! Lossy by nature: other provider metadata; the `{"value": v}` wrapping of non-object
//! arguments.

use super::parse::{content_text, str_at, Builder, HistoryParseError};
use super::{EncCall, EncResult, HistoryFormat, Role};
use crate::call::ToolResult;
use crate::chunk::ReasoningKind;
use crate::snapshot::{MessageSnapshot, ReasoningBlock};
use serde_json::{json, Map, Value};

const FORMAT: HistoryFormat = HistoryFormat::Anthropic;

/// The assistant message: an optional text block, then one `tool_use` block per call.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>]) -> Vec<Value> {
    let mut content = Vec::with_capacity(calls.len() + 1);
    if let Some(t) = text {
        content.push(json!({"type": "text", "text": t}));
    }
    for c in calls {
        content.push(json!({
            "type": "tool_use",
            "id": c.id,
            "name": c.name,
            "input": c.arguments_object(),
        }));
    }
    vec![json!({"role": "assistant", "content": content})]
}

/// A reasoning block as Anthropic takes it back: `thinking` with its signature, or
/// `redacted_thinking` with its data (`None` without them: the API rejects such a block).
pub fn reasoning_block(b: &ReasoningBlock) -> Option<Value> {
    match b.kind {
        ReasoningKind::Thinking if !b.signature.is_empty() => Some(json!({
            "type": "thinking",
            "thinking": b.thinking,
            "signature": b.signature,
        })),
        ReasoningKind::RedactedThinking if !b.data.is_empty() => {
            Some(json!({"type": "redacted_thinking", "data": b.data}))
        }
        _ => None,
    }
}

/// One user message holding every `tool_result` block of the turn (none if no results).
pub fn results(results: &[EncResult<'_>]) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    let content: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": r.id,
                "is_error": r.is_error,
            });
            if let (false, Some(obj)) = (r.output.is_empty(), block.as_object_mut()) {
                obj.insert("content".to_string(), Value::String(r.output.clone()));
            }
            block
        })
        .collect();
    vec![json!({"role": "user", "content": content})]
}

/// A plain text message, as a one-block list.
pub fn text(role: Role, text: &str) -> Value {
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"role": role, "content": [{"type": "text", "text": text}]})
}

/// Parses messages back into snapshots.
pub fn parse(messages: &[Value]) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(FORMAT);
    for (i, m) in messages.iter().enumerate() {
        let Some(blocks) = m.get("content").and_then(Value::as_array) else {
            continue;
        };
        match str_at(m, "role") {
            Some("assistant") => {
                let mut started = false;
                for block in blocks {
                    if str_at(block, "type") != Some("tool_use") {
                        continue;
                    }
                    if !started {
                        b.start_turn();
                        started = true;
                    }
                    let id = str_at(block, "id").map(str::to_string);
                    let name = str_at(block, "name").ok_or_else(|| {
                        HistoryParseError::bad_field(FORMAT, i, "content[].name", m)
                    })?;
                    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                    b.push_call_value(id, name.to_string(), input, Map::new());
                }
            }
            Some("user") => {
                for block in blocks {
                    if str_at(block, "type") != Some("tool_result") {
                        continue;
                    }
                    let id = str_at(block, "tool_use_id").ok_or_else(|| {
                        HistoryParseError::bad_field(FORMAT, i, "content[].tool_use_id", m)
                    })?;
                    b.push_result(
                        i,
                        ToolResult {
                            tool_call_id: id.to_string(),
                            output: content_text(block.get("content").unwrap_or(&Value::Null)),
                            is_error: block.get("is_error") == Some(&Value::Bool(true)),
                        },
                    )?;
                }
            }
            _ => {}
        }
    }
    Ok(b.finish())
}
