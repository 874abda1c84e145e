//! Ollama native `/api/chat` history.
//!
//! ```json
//! {"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather",
//!   "arguments":{"city":"Paris"}}}]}
//! {"role":"tool","content":"18°C","tool_name":"get_weather"}
//! ```
//!
//! Arguments are an object (not a string); there are no call ids, results name the function
//! (`tool_name`) and follow in call order. Lossy by nature: ids (parsed calls get synthetic
//! ids; results are matched by position, then by name), `is_error`, metadata, the
//! `{"value": v}` wrapping of non-object arguments.

use super::parse::{content_text, str_at, Builder, HistoryParseError};
use super::{EncCall, EncResult, HistoryFormat};
use crate::call::ToolResult;
use crate::snapshot::MessageSnapshot;
use serde_json::{json, Map, Value};

const FORMAT: HistoryFormat = HistoryFormat::Ollama;

/// The assistant message carrying `calls`.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>]) -> Vec<Value> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments_object()}}))
        .collect();
    vec![json!({"role": "assistant", "content": text.unwrap_or(""), "tool_calls": tool_calls})]
}

/// One `role: tool` message per result, in call order.
pub fn results(results: &[EncResult<'_>]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"role": "tool", "content": r.output, "tool_name": r.name}))
        .collect()
}

/// Parses messages back into snapshots.
pub fn parse(messages: &[Value]) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(FORMAT);
    let mut answered: Vec<bool> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match str_at(m, "role") {
            Some("assistant") => {
                let Some(tool_calls) = m.get("tool_calls").and_then(Value::as_array) else {
                    continue;
                };
                if tool_calls.is_empty() {
                    continue;
                }
                b.start_turn();
                answered = vec![false; tool_calls.len()];
                for tc in tool_calls {
                    let f = tc.get("function");
                    let name = f.and_then(|f| str_at(f, "name")).ok_or_else(|| {
                        HistoryParseError::bad_field(FORMAT, i, "tool_calls[].function.name", m)
                    })?;
                    match f.and_then(|f| f.get("arguments")) {
                        Some(Value::String(raw)) => {
                            b.push_call_raw(None, name.to_string(), raw.clone(), Map::new())
                        }
                        Some(v) => b.push_call_value(None, name.to_string(), v.clone(), Map::new()),
                        None => b.push_call_value(None, name.to_string(), json!({}), Map::new()),
                    }
                }
            }
            Some("tool") => {
                let name = str_at(m, "tool_name").or_else(|| str_at(m, "name"));
                let id = match_call(b.current(), &mut answered, name).ok_or_else(|| {
                    HistoryParseError::ResultWithoutCall {
                        format: FORMAT,
                        index: i,
                        id: name.unwrap_or_default().to_string(),
                    }
                })?;
                b.push_result(
                    i,
                    ToolResult {
                        tool_call_id: id,
                        output: content_text(m.get("content").unwrap_or(&Value::Null)),
                        is_error: false,
                    },
                )?;
            }
            _ => {}
        }
    }
    Ok(b.finish())
}

/// The id of the call a tool message answers: the first unanswered call with its name (or
/// the first unanswered call when it names none), marked answered.
fn match_call(
    turn: Option<&MessageSnapshot>,
    answered: &mut [bool],
    name: Option<&str>,
) -> Option<String> {
    let turn = turn?;
    let pos = turn.calls.iter().enumerate().position(|(k, c)| {
        !answered.get(k).copied().unwrap_or(true)
            && name.is_none_or(|n| n.is_empty() || c.tool_call.name == n)
    })?;
    if let Some(slot) = answered.get_mut(pos) {
        *slot = true;
    }
    turn.calls.get(pos).map(|c| c.tool_call.id.clone())
}
