//! Bedrock Converse history.
//!
//! ```json
//! {"role":"assistant","content":[{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather",
//!   "input":{"city":"Paris"}}}]}
//! {"role":"user","content":[{"toolResult":{"toolUseId":"tooluse_1",
//!   "content":[{"text":"18°C"}],"status":"success"}}]}
//! ```
//!
//! Like Anthropic: all results of a turn in one user message, roles merged so they alternate.
//! `status` carries the error flag (`success` / `error`). Converse rejects blank text blocks
//! ("text content blocks must be non-empty"), so a blank result is sent as
//! [`EMPTY_RESULT_TEXT`]. Lossy by nature: that substitution; provider metadata; the
//! `{"value": v}` wrapping of non-object arguments. (The request must also carry `toolConfig`
//! when its history holds `toolUse`/`toolResult` blocks: the history answer gives one, see
//! [`crate::history::RenderedHistory::tool_config`].)

use super::parse::{content_text, str_at, Builder, HistoryParseError};
use super::{EncCall, EncResult, HistoryFormat, Role};
use crate::call::ToolResult;
use crate::chunk::ReasoningKind;
use crate::snapshot::{MessageSnapshot, ReasoningBlock};
use serde_json::{json, Map, Value};

const FORMAT: HistoryFormat = HistoryFormat::Bedrock;

/// The text sent for a blank (empty or whitespace-only) result.
pub const EMPTY_RESULT_TEXT: &str = "[empty result]";

/// The assistant message: an optional text block, then one `toolUse` block per call.
pub fn calls(text: Option<&str>, calls: &[EncCall<'_>]) -> Vec<Value> {
    let mut content = Vec::with_capacity(calls.len() + 1);
    if let Some(t) = text {
        content.push(json!({ "text": t }));
    }
    for c in calls {
        content.push(json!({"toolUse": {
            "toolUseId": c.id,
            "name": c.name,
            "input": c.arguments_object(),
        }}));
    }
    vec![json!({"role": "assistant", "content": content})]
}

/// A reasoning block as Converse takes it back: `reasoningContent` with `reasoningText`
/// (`text` and `signature`) or `redactedContent` (`None` without them).
pub fn reasoning_block(b: &ReasoningBlock) -> Option<Value> {
    match b.kind {
        ReasoningKind::Thinking if !b.signature.is_empty() => Some(json!({"reasoningContent": {
            "reasoningText": {"text": b.thinking, "signature": b.signature}
        }})),
        ReasoningKind::RedactedThinking if !b.data.is_empty() => {
            Some(json!({"reasoningContent": {"redactedContent": b.data}}))
        }
        _ => None,
    }
}

/// One user message holding every `toolResult` block of the turn (none if no results).
pub fn results(results: &[EncResult<'_>]) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    let content: Vec<Value> = results
        .iter()
        .map(|r| {
            let text = if r.output.trim().is_empty() {
                EMPTY_RESULT_TEXT
            } else {
                r.output.as_str()
            };
            json!({"toolResult": {
                "toolUseId": r.id,
                "content": [{ "text": text }],
                "status": if r.is_error { "error" } else { "success" },
            }})
        })
        .collect();
    vec![json!({"role": "user", "content": content})]
}

/// A plain text message.
pub fn text(role: Role, text: &str) -> Value {
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"role": role, "content": [{ "text": text }]})
}

/// Parses messages back into snapshots.
pub fn parse(messages: &[Value]) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    let mut b = Builder::new(FORMAT);
    for (i, m) in messages.iter().enumerate() {
        let Some(blocks) = m.get("content").and_then(Value::as_array) else {
            continue;
        };
        let mut started = false;
        for block in blocks {
            if let Some(tu) = block.get("toolUse") {
                if !started {
                    b.start_turn();
                    started = true;
                }
                let id = str_at(tu, "toolUseId").map(str::to_string);
                let name = str_at(tu, "name").ok_or_else(|| {
                    HistoryParseError::bad_field(FORMAT, i, "content[].toolUse.name", m)
                })?;
                let input = tu.get("input").cloned().unwrap_or_else(|| json!({}));
                b.push_call_value(id, name.to_string(), input, Map::new());
            } else if let Some(tr) = block.get("toolResult") {
                let id = str_at(tr, "toolUseId").ok_or_else(|| {
                    HistoryParseError::bad_field(FORMAT, i, "content[].toolResult.toolUseId", m)
                })?;
                b.push_result(
                    i,
                    ToolResult {
                        tool_call_id: id.to_string(),
                        output: content_text(tr.get("content").unwrap_or(&Value::Null)),
                        is_error: str_at(tr, "status") == Some("error"),
                    },
                )?;
            }
        }
    }
    Ok(b.finish())
}
