//! OpenAI Chat Completions history (also Mistral, which differs only in ids and details).
//!
//! ```json
//! {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
//!   "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}
//! {"role":"tool","tool_call_id":"call_1","content":"18°C"}
//! ```
//!
//! `arguments` is always a JSON *string* (the compact text of the parsed arguments). Mistral:
//! `content: ""` instead of `null` and the function `name` on each tool message.
//! A call made through Gemini's OpenAI-compatible endpoint carries its thought signature back
//! as `extra_content: {"google":{"thought_signature":…}}` on its `tool_calls` entry (not for
//! Mistral); parse reads it into the same metadata key.
//! Lossy by nature: `is_error` (a tool message has no error flag; it is rendered only as text by
//! the history policy) and other provider metadata.

use super::parse::{content_text, str_at, Builder, HistoryParseError};
use super::{compat_extra_content, EncCall, EncResult, HistoryFormat, Role, META_EXTRA_CONTENT};
use crate::call::ToolResult;
use crate::snapshot::MessageSnapshot;
use serde_json::{json, Map, Value};

/// The assistant message carrying `calls`.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>], mistral: bool) -> Vec<Value> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            let mut tc = json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            });
            let extra = compat_extra_content(c.metadata).filter(|_| !mistral);
            if let (Some(extra), Some(obj)) = (extra, tc.as_object_mut()) {
                obj.insert(META_EXTRA_CONTENT.to_string(), extra.clone());
            }
            tc
        })
        .collect();
    let content = match (text, mistral) {
        (Some(t), _) => Value::String(t.to_string()),
        (None, true) => Value::String(String::new()),
        (None, false) => Value::Null,
    };
    vec![json!({"role": "assistant", "content": content, "tool_calls": tool_calls})]
}

/// One `role: tool` message per result, in call order.
pub fn results(results: &[EncResult<'_>], mistral: bool) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let mut m = json!({"role": "tool", "tool_call_id": r.id, "content": r.output});
            if mistral {
                if let Some(obj) = m.as_object_mut() {
                    obj.insert("name".to_string(), Value::String(r.name.to_string()));
                }
            }
            m
        })
        .collect()
}

/// A plain text message (also used by Ollama, whose text messages have the same shape).
pub fn text(role: Role, text: &str) -> Value {
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"role": role, "content": text})
}

/// Parses `messages` (chat or Mistral) back into snapshots.
pub fn parse(
    format: HistoryFormat,
    messages: &[Value],
) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(format);
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
                for tc in tool_calls {
                    let id = str_at(tc, "id").map(str::to_string);
                    let f = tc.get("function");
                    let name = f.and_then(|f| str_at(f, "name")).ok_or_else(|| {
                        HistoryParseError::bad_field(format, i, "tool_calls[].function.name", m)
                    })?;
                    let raw = match f.and_then(|f| f.get("arguments")) {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Null) | None => String::new(),
                        Some(other) => other.to_string(),
                    };
                    let mut meta = Map::new();
                    if let Some(extra) = tc.get(META_EXTRA_CONTENT) {
                        meta.insert(META_EXTRA_CONTENT.to_string(), extra.clone());
                    }
                    b.push_call_raw(id, name.to_string(), raw, meta);
                }
            }
            Some("tool") => {
                let id = str_at(m, "tool_call_id")
                    .ok_or_else(|| HistoryParseError::bad_field(format, i, "tool_call_id", m))?;
                let output = content_text(m.get("content").unwrap_or(&Value::Null));
                b.push_result(
                    i,
                    ToolResult {
                        tool_call_id: id.to_string(),
                        output,
                        is_error: false,
                    },
                )?;
            }
            _ => {}
        }
    }
    Ok(b.finish())
}
