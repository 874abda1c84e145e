//! Gemini / Vertex `contents` history.
//!
//! ```json
//! {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},
//!   "thoughtSignature":"CiQB…"}]}
//! {"role":"user","parts":[{"functionResponse":{"name":"get_weather",
//!   "response":{"output":"18°C"}}}]}
//! ```
//!
//! The stored `thoughtSignature` goes back on the same part as its `functionCall` (Gemini 3
//! rejects a history whose call parts lost it); a signature that came through Gemini's
//! OpenAI-compatible endpoint (`extra_content.google.thought_signature`, the same model's
//! token) goes there too. Only the calls that carried one get one: of parallel calls Gemini
//! signs the first only, and the others are sent without (a signed call that is not sent
//! gives its signature to the first sent call of its turn: see `history::plan`, rule 5). `functionCall.id` / `functionResponse.id` are
//! sent only for ids the provider gave: a synthetic id (`synthetic_id: true`) is never sent
//! upstream. The result text goes in `response.output`, or `response.error` when the tool
//! failed. Lossy by nature: a call without a wire id comes back with a new synthetic id
//! (results are then matched by position, as Gemini itself does); non-object arguments are
//! wrapped as `{"value": v}`; metadata other than `thoughtSignature`.

use super::parse::{str_at, Builder, HistoryParseError};
use super::{thought_signature, EncCall, EncResult, HistoryFormat, Role, META_THOUGHT_SIGNATURE};
use crate::call::ToolResult;
use crate::snapshot::MessageSnapshot;
use serde_json::{json, Map, Value};

const FORMAT: HistoryFormat = HistoryFormat::Gemini;

/// The `model` content: an optional text part, then one `functionCall` part per call.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>]) -> Vec<Value> {
    let mut parts = Vec::with_capacity(calls.len() + 1);
    if let Some(t) = text {
        parts.push(json!({"text": t}));
    }
    for c in calls {
        let mut fc = Map::new();
        fc.insert("name".to_string(), Value::String(c.name.to_string()));
        fc.insert("args".to_string(), c.arguments_object());
        if !c.synthetic() {
            fc.insert("id".to_string(), Value::String(c.id.clone()));
        }
        let mut part = Map::new();
        part.insert("functionCall".to_string(), Value::Object(fc));
        if let Some(sig) = thought_signature(c.metadata) {
            part.insert(META_THOUGHT_SIGNATURE.to_string(), sig.clone());
        }
        parts.push(Value::Object(part));
    }
    vec![json!({"role": "model", "parts": parts})]
}

/// One `user` content with a `functionResponse` part per result (none if no results).
pub fn results(results: &[EncResult<'_>]) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    let parts: Vec<Value> = results
        .iter()
        .map(|r| {
            let key = if r.is_error { "error" } else { "output" };
            let mut fr = Map::new();
            fr.insert("name".to_string(), Value::String(r.name.to_string()));
            if r.id_sent {
                fr.insert("id".to_string(), Value::String(r.id.clone()));
            }
            fr.insert("response".to_string(), json!({ key: r.output }));
            json!({ "functionResponse": fr })
        })
        .collect();
    vec![json!({"role": "user", "parts": parts})]
}

/// A plain text content.
pub fn text(role: Role, text: &str) -> Value {
    let role = match role {
        Role::User => "user",
        Role::Assistant => "model",
    };
    json!({"role": role, "parts": [{"text": text}]})
}

/// The result text and error flag of a `functionResponse.response`.
fn response_output(response: Option<&Value>) -> (String, bool) {
    match response {
        Some(Value::Object(m)) if m.len() == 1 => match (m.get("output"), m.get("error")) {
            (Some(Value::String(s)), _) => (s.clone(), false),
            (_, Some(Value::String(s))) => (s.clone(), true),
            _ => (Value::Object(m.clone()).to_string(), false),
        },
        Some(other) => (other.to_string(), false),
        None => (String::new(), false),
    }
}

/// Parses contents back into snapshots.
pub fn parse(contents: &[Value]) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(FORMAT);
    let mut answered = 0usize;
    for (i, content) in contents.iter().enumerate() {
        let Some(parts) = content.get("parts").and_then(Value::as_array) else {
            continue;
        };
        match str_at(content, "role") {
            Some("model") => {
                let mut started = false;
                for part in parts {
                    let Some(fc) = part.get("functionCall") else {
                        continue;
                    };
                    if !started {
                        b.start_turn();
                        answered = 0;
                        started = true;
                    }
                    let name = str_at(fc, "name").ok_or_else(|| {
                        HistoryParseError::bad_field(
                            FORMAT,
                            i,
                            "parts[].functionCall.name",
                            content,
                        )
                    })?;
                    let args = fc.get("args").cloned().unwrap_or_else(|| json!({}));
                    let mut meta = Map::new();
                    if let Some(sig) = part.get(META_THOUGHT_SIGNATURE) {
                        meta.insert(META_THOUGHT_SIGNATURE.to_string(), sig.clone());
                    }
                    let id = str_at(fc, "id").map(str::to_string);
                    b.push_call_value(id, name.to_string(), args, meta);
                }
            }
            Some("user") | Some("function") => {
                for part in parts {
                    let Some(fr) = part.get("functionResponse") else {
                        continue;
                    };
                    let name = str_at(fr, "name").unwrap_or_default();
                    let id = match str_at(fr, "id") {
                        Some(id) => id.to_string(),
                        None => positional_id(b.current(), answered, name),
                    };
                    answered += 1;
                    let (output, is_error) = response_output(fr.get("response"));
                    b.push_result(
                        i,
                        ToolResult {
                            tool_call_id: id,
                            output,
                            is_error,
                        },
                    )?;
                }
            }
            _ => {}
        }
    }
    Ok(b.finish())
}

/// The id of the call a response without id answers: the `answered`-th call of the turn if
/// its name matches, else the first call with that name, else the name itself (an orphan).
fn positional_id(turn: Option<&MessageSnapshot>, answered: usize, name: &str) -> String {
    let Some(turn) = turn else {
        return name.to_string();
    };
    let by_position = turn
        .calls
        .get(answered)
        .filter(|c| c.tool_call.name == name);
    by_position
        .or_else(|| turn.calls.iter().find(|c| c.tool_call.name == name))
        .map(|c| c.tool_call.id.clone())
        .unwrap_or_else(|| name.to_string())
}
