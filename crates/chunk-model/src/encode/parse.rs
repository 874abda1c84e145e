//! What the inverse (history → canonical) parsers share: their typed error and a builder that
//! groups calls and results into [`MessageSnapshot`]s, one per assistant turn with calls.
//!
//! Parsed snapshots get `conversation_id` [`PARSED_CONVERSATION`], `message_id` `m<turn>`,
//! status `completed`; a call whose id is absent on the wire gets
//! [`crate::synthetic_call_id`] over those and `synthetic_id: true` metadata.

use super::{HistoryFormat, META_SYNTHETIC_ID};
use crate::call::{parse_arguments, CallOutcome, CallStatus, ToolCall, ToolResult, ARGUMENT_DEPTH};
use crate::depth::{drop_deep, value_depth, MAX_ARGUMENT_DEPTH, MAX_JSON_DEPTH};
use crate::error::excerpt;
use crate::event::synthetic_call_id;
use crate::snapshot::{MessageSnapshot, MessageStatus};
use serde_json::{Map, Value};

/// The conversation id given to parsed snapshots.
pub const PARSED_CONVERSATION: &str = "history";

/// Why a history could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryParseError {
    /// A field the format requires is missing or has the wrong type.
    #[error(
        "{format} history, message {index}: field `{field}` missing or malformed in {excerpt}"
    )]
    BadField {
        /// The history format.
        format: HistoryFormat,
        /// Position of the message (or item) in the history.
        index: usize,
        /// The field, as a path (`tool_calls[].function.name`).
        field: &'static str,
        /// A short excerpt of the message.
        excerpt: String,
    },
    /// A tool result appears before any assistant turn with calls (the provider's 400).
    #[error("{format} history, message {index}: tool result for {id:?} has no preceding call")]
    ResultWithoutCall {
        /// The history format.
        format: HistoryFormat,
        /// Position of the message in the history.
        index: usize,
        /// The id (or function name) the result names.
        id: String,
    },
}

impl HistoryParseError {
    /// A [`HistoryParseError::BadField`] with an excerpt of `message`.
    pub fn bad_field(
        format: HistoryFormat,
        index: usize,
        field: &'static str,
        message: &Value,
    ) -> HistoryParseError {
        let text = serde_json::to_string(message).unwrap_or_default();
        HistoryParseError::BadField {
            format,
            index,
            field,
            excerpt: excerpt(text.as_bytes()),
        }
    }
}

/// Groups parsed calls and results into snapshots.
#[derive(Debug)]
pub struct Builder {
    format: HistoryFormat,
    turns: Vec<MessageSnapshot>,
}

impl Builder {
    /// An empty history.
    pub fn new(format: HistoryFormat) -> Builder {
        Builder {
            format,
            turns: Vec::new(),
        }
    }

    /// Starts a new assistant turn.
    pub fn start_turn(&mut self) {
        self.turns.push(MessageSnapshot {
            conversation_id: PARSED_CONVERSATION.to_string(),
            message_id: format!("m{}", self.turns.len()),
            provider: Some(self.format.provider()),
            status: MessageStatus::Completed,
            finish_reason: None,
            calls: Vec::new(),
            tool_results: Vec::new(),
            orphaned_results: Vec::new(),
            provider_metadata: serde_json::Map::new(),
        });
    }

    /// The current turn, if any.
    pub fn current(&self) -> Option<&MessageSnapshot> {
        self.turns.last()
    }

    /// Adds a call with argument text as sent (string-argument formats); text that is not
    /// valid JSON makes the call `invalid`, as the assembler would.
    pub fn push_call_raw(
        &mut self,
        id: Option<String>,
        name: String,
        raw: String,
        metadata: Map<String, Value>,
    ) {
        let (status, reason, arguments) = match parse_arguments(&raw) {
            Ok(v) => (CallStatus::Completed, None, v),
            Err(e) => (
                CallStatus::Invalid,
                Some(e.reason().to_string()),
                Value::Null,
            ),
        };
        self.push(id, name, arguments, raw, metadata, status, reason);
    }

    /// Adds a custom tool call (free-form input, never parsed: its arguments are the text as a
    /// JSON string, as the assembler keeps a completed custom call).
    pub fn push_call_custom(
        &mut self,
        id: Option<String>,
        name: String,
        input: String,
        metadata: Map<String, Value>,
    ) {
        self.push(
            id,
            name,
            Value::String(input.clone()),
            input,
            metadata,
            CallStatus::Completed,
            None,
        );
        if let Some(call) = self.turns.last_mut().and_then(|t| t.calls.last_mut()) {
            call.tool_call.kind = crate::call::CallKind::Custom;
        }
    }

    /// Adds a call with object arguments (object-argument formats).
    pub fn push_call_value(
        &mut self,
        id: Option<String>,
        name: String,
        arguments: Value,
        metadata: Map<String, Value>,
    ) {
        let depth = value_depth(&arguments);
        if depth > MAX_ARGUMENT_DEPTH {
            // As the assembler would judge the same text: `invalid`, the text kept when it can
            // be rendered without recursing deeper than serde_json parses.
            let raw = if depth <= MAX_JSON_DEPTH {
                arguments.to_string()
            } else {
                String::new()
            };
            drop_deep(arguments);
            let reason = Some(ARGUMENT_DEPTH.to_string());
            self.push(
                id,
                name,
                Value::Null,
                raw,
                metadata,
                CallStatus::Invalid,
                reason,
            );
            return;
        }
        let raw = arguments.to_string();
        self.push(
            id,
            name,
            arguments,
            raw,
            metadata,
            CallStatus::Completed,
            None,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        id: Option<String>,
        name: String,
        arguments: Value,
        raw_arguments: String,
        mut metadata: Map<String, Value>,
        status: CallStatus,
        reason: Option<String>,
    ) {
        if self.turns.is_empty() {
            self.start_turn();
        }
        let Some(turn) = self.turns.last_mut() else {
            return;
        };
        let index = u32::try_from(turn.calls.len()).unwrap_or(u32::MAX);
        let id = match id.filter(|s| !s.trim().is_empty()) {
            Some(id) => id,
            None => {
                metadata.insert(META_SYNTHETIC_ID.to_string(), Value::Bool(true));
                synthetic_call_id(&turn.conversation_id, &turn.message_id, index)
            }
        };
        turn.calls.push(CallOutcome {
            status,
            reason,
            tool_call: ToolCall {
                id,
                name,
                arguments,
                raw_arguments,
                index,
                kind: Default::default(),
                provider_metadata: metadata,
            },
        });
    }

    /// Adds a result to the current turn: matched if a call of the turn has its id, orphaned
    /// otherwise; an error if there is no turn yet.
    pub fn push_result(
        &mut self,
        index: usize,
        result: ToolResult,
    ) -> Result<(), HistoryParseError> {
        let format = self.format;
        let Some(turn) = self.turns.last_mut() else {
            return Err(HistoryParseError::ResultWithoutCall {
                format,
                index,
                id: result.tool_call_id,
            });
        };
        if turn
            .calls
            .iter()
            .any(|c| c.tool_call.id == result.tool_call_id)
        {
            turn.tool_results.push(result);
        } else {
            turn.orphaned_results.push(result);
        }
        Ok(())
    }

    /// The snapshots, in history order.
    pub fn finish(self) -> Vec<MessageSnapshot> {
        self.turns
    }
}

/// The text of a content value: a string as is, an array of text parts/blocks joined, any
/// other JSON as its compact text.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) if parts.iter().all(|p| p.get("text").is_some()) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The string at `key` of `v`, if present and a string.
pub fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::parse_history;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = Value::Array(vec![v]);
        }
        v
    }

    fn anthropic_call(input: Value) -> Vec<Value> {
        vec![json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": input}}
        ]})]
    }

    #[test]
    fn history_arguments_deeper_than_64_levels_parse_as_invalid_argument_depth() {
        // `{"x": <levels>}`: one level more than `levels`
        for (levels, want) in [
            (63, None),
            (64, Some(ARGUMENT_DEPTH)),
            (120, Some(ARGUMENT_DEPTH)),
        ] {
            let snaps =
                parse_history(HistoryFormat::Anthropic, &anthropic_call(nested(levels))).unwrap();
            let call = &snaps[0].calls[0];
            assert_eq!(call.reason.as_deref(), want, "{levels} levels");
            let status = if want.is_some() {
                CallStatus::Invalid
            } else {
                CallStatus::Completed
            };
            assert_eq!(call.status, status);
            assert!(!call.tool_call.raw_arguments.is_empty());
        }
    }
}
