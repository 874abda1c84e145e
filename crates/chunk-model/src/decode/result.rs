//! Decoder for tool-result messages on `toolstream.results.<conv>.<msg>`.
//!
//! Accepted shapes (one message may hold several results):
//! - toolstream's own: `{"tool_call_id", "output", "is_error"}` (whole), streamed
//!   `{"tool_call_id", "delta"}` pieces and `{"tool_call_id", "done": true[, "is_error"]}`;
//! - OpenAI: `{"role": "tool", "tool_call_id", "content"}`, content a string or an array of
//!   text parts;
//! - Anthropic: a `{"type": "tool_result", "tool_use_id", "content", "is_error"}` block, or a
//!   user message (`{"role": "user", "content": [...]}`) holding several such blocks;
//! - AI SDK: `{"type": "tool-result", "toolCallId", "output" | "result"}` (v5 typed outputs
//!   `{"type": "text" | "json" | "error-text" | "error-json", "value"}` are unwrapped);
//! - a JSON array of any of these.
//!
//! Output text: a string is kept as it is; an array of only text parts/blocks becomes their
//! texts joined by a newline; any other JSON becomes its compact text. A result without a
//! usable call id is [`DecodeError::BadResult`]. Flags (`is_error`, `isError`, `done`) may
//! also be `"true"`/`"false"`; unknown fields are ignored. Results are rare next to chunks, so this
//! decoder works on a parsed `serde_json::Value` for clarity rather than speed.

use crate::call::{ResultInput, ToolResult};
use crate::decode::lenient::Loose;
use crate::depth::{json_deeper_than, MAX_JSON_DEPTH};
use crate::error::{excerpt, json_problem, DecodeError, JsonProblem};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Decodes one message from `toolstream.results.<conv>.<msg>`.
///
/// A body that is not a usable JSON message is [`DecodeError::BadResult`] saying why: `empty
/// body`, `not valid JSON (not UTF-8: …)`, `not valid JSON (truncated: …)`, `JSON nested
/// deeper than 127 levels (recursion limit)` ([`MAX_JSON_DEPTH`]), `expected a JSON object
/// (or an array of objects), found a number`.
pub fn decode_result(body: &[u8]) -> Result<Vec<ResultInput>, DecodeError> {
    let trimmed = body.trim_ascii();
    if trimmed.is_empty() {
        return Err(bad(body, "empty body: expected a tool result JSON object"));
    }
    if json_deeper_than(trimmed, MAX_JSON_DEPTH) {
        return Err(bad(body, too_deep()));
    }
    let value: Value =
        serde_json::from_slice(trimmed).map_err(|e| match json_problem(&e, trimmed) {
            JsonProblem::TooDeep => bad(body, too_deep()),
            JsonProblem::Other(detail) => bad(body, format!("not valid JSON ({detail})")),
        })?;
    let mut out = Vec::new();
    match &value {
        Value::Array(items) => {
            for item in items {
                decode_one(item, body, &mut out)?;
            }
        }
        other => decode_one(other, body, &mut out)?,
    }
    if out.is_empty() {
        return Err(bad(body, "no tool result in the message"));
    }
    Ok(out)
}

fn too_deep() -> String {
    format!("JSON nested deeper than {MAX_JSON_DEPTH} levels (recursion limit)")
}

fn bad(body: &[u8], problem: impl Into<String>) -> DecodeError {
    DecodeError::BadResult {
        problem: problem.into(),
        excerpt: excerpt(body),
    }
}

fn decode_one(value: &Value, body: &[u8], out: &mut Vec<ResultInput>) -> Result<(), DecodeError> {
    let Some(obj) = value.as_object() else {
        return Err(bad(
            body,
            format!(
                "expected a JSON object (or an array of objects), found {}",
                value_kind(value)
            ),
        ));
    };
    let role = obj.get("role").and_then(Value::as_str);
    let ty = obj.get("type").and_then(Value::as_str);
    match (role, ty) {
        (Some("tool"), _) => {
            let id = call_id(obj, "tool_call_id", body)?;
            let output = content_text(obj.get("content"));
            out.push(complete(id, output, is_error(obj, "is_error", body)?));
        }
        (Some("user"), _) => {
            let Some(Value::Array(blocks)) = obj.get("content") else {
                return Err(bad(
                    body,
                    "a user message needs a `content` array of tool_result blocks",
                ));
            };
            let before = out.len();
            for block in blocks {
                if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                    decode_one(block, body, out)?;
                }
            }
            if out.len() == before {
                return Err(bad(body, "the user message holds no tool_result block"));
            }
        }
        (_, Some("tool_result")) => {
            let id = call_id(obj, "tool_use_id", body)?;
            let output = content_text(obj.get("content"));
            out.push(complete(id, output, is_error(obj, "is_error", body)?));
        }
        (_, Some("tool-result")) => {
            let id = call_id(obj, "toolCallId", body)?;
            let (output, typed_error) =
                ai_sdk_output(obj.get("output").or_else(|| obj.get("result")));
            let flagged = is_error(obj, "isError", body)?;
            out.push(complete(id, output, flagged || typed_error));
        }
        _ if obj.contains_key("tool_call_id") => {
            let id = call_id(obj, "tool_call_id", body)?;
            let error = is_error(obj, "is_error", body)?;
            if let Some(output) = obj.get("output") {
                out.push(complete(id, value_text(output), error));
            } else if let Some(delta) = obj.get("delta") {
                let Some(delta) = delta.as_str() else {
                    return Err(bad(body, "`delta` must be a string"));
                };
                out.push(ResultInput::Delta {
                    tool_call_id: id,
                    delta: delta.to_string(),
                });
            } else if obj.get("done").and_then(flag_of) == Some(true) {
                out.push(ResultInput::Done {
                    tool_call_id: id,
                    is_error: error,
                });
            } else {
                return Err(bad(
                    body,
                    "a result needs `output`, `delta` or `done: true`",
                ));
            }
        }
        _ => {
            return Err(bad(
                body,
                "unrecognised shape: expected {tool_call_id, output|delta|done}, an OpenAI \
                 role:tool message, an Anthropic tool_result block or an AI SDK tool-result part",
            ))
        }
    }
    Ok(())
}

fn complete(tool_call_id: String, output: String, is_error: bool) -> ResultInput {
    ResultInput::Complete(ToolResult {
        tool_call_id,
        output,
        is_error,
    })
}

fn call_id(obj: &Map<String, Value>, key: &str, body: &[u8]) -> Result<String, DecodeError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(bad(body, format!("`{key}` is blank"))),
        Some(_) => Err(bad(body, format!("`{key}` must be a string"))),
        None => Err(bad(body, format!("`{key}` is missing"))),
    }
}

fn is_error(obj: &Map<String, Value>, key: &str, body: &[u8]) -> Result<bool, DecodeError> {
    match obj
        .get(key)
        .map(|v| Loose::deserialize(v).map(|l| l.flag()))
    {
        None => Ok(false),
        Some(Ok(Ok(flag))) => Ok(flag.unwrap_or(false)),
        Some(_) => Err(bad(body, format!("`{key}` must be a boolean"))),
    }
}

fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A flag as a boolean, `"true"`/`"false"` or `0`/`1`; `None` for anything else.
fn flag_of(value: &Value) -> Option<bool> {
    Loose::deserialize(value).ok()?.flag().ok()?
}

/// A JSON value as result text: a string as it is, `null` as nothing, else compact JSON.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// OpenAI/Anthropic `content`: a string, an array of text parts (joined by newlines), or
/// anything else as compact JSON (images and other media are kept, not dropped).
fn content_text(content: Option<&Value>) -> String {
    match content {
        None => String::new(),
        Some(Value::Array(parts)) => {
            let texts: Option<Vec<&str>> = parts
                .iter()
                .map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("text") => p.get("text").and_then(Value::as_str),
                    _ => None,
                })
                .collect();
            match texts {
                Some(texts) => texts.join("\n"),
                None => Value::Array(parts.clone()).to_string(),
            }
        }
        Some(other) => value_text(other),
    }
}

/// AI SDK output: v5 typed outputs are unwrapped (`error-*` types flag an error); any other
/// value is taken as the raw tool output.
fn ai_sdk_output(output: Option<&Value>) -> (String, bool) {
    let Some(output) = output else {
        return (String::new(), false);
    };
    if let Some(obj) = output.as_object() {
        let ty = obj.get("type").and_then(Value::as_str);
        if let (Some(ty), Some(value), 2) = (ty, obj.get("value"), obj.len()) {
            match ty {
                "text" | "json" => return (value_text(value), false),
                "error-text" | "error-json" => return (value_text(value), true),
                "content" => return (content_text(Some(value)), false),
                _ => {}
            }
        }
    }
    (value_text(output), false)
}
