//! Builders of stored snapshots for the history and encoder tests.
#![allow(dead_code)]

use chunk_model::{
    CallOutcome, CallStatus, MessageSnapshot, MessageStatus, Provider, ToolCall, ToolResult,
};
use serde_json::{Map, Value};

/// A completed call with parsed arguments.
pub fn call(id: &str, name: &str, index: u32, args: Value) -> CallOutcome {
    CallOutcome {
        status: CallStatus::Completed,
        reason: None,
        tool_call: ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            raw_arguments: args.to_string(),
            arguments: args,
            index,
            kind: Default::default(),
            provider_metadata: Map::new(),
        },
    }
}

/// A call with the given status and raw text (arguments `null`).
pub fn cut_call(id: &str, name: &str, index: u32, status: CallStatus, raw: &str) -> CallOutcome {
    CallOutcome {
        status,
        reason: Some("truncated".to_string()),
        tool_call: ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            arguments: Value::Null,
            raw_arguments: raw.to_string(),
            index,
            kind: Default::default(),
            provider_metadata: Map::new(),
        },
    }
}

/// A result.
pub fn result(id: &str, output: &str) -> ToolResult {
    ToolResult {
        tool_call_id: id.to_string(),
        output: output.to_string(),
        is_error: false,
    }
}

/// A completed message.
pub fn snapshot(msg: &str, calls: Vec<CallOutcome>, results: Vec<ToolResult>) -> MessageSnapshot {
    MessageSnapshot {
        conversation_id: "c1".to_string(),
        message_id: msg.to_string(),
        provider: Some(Provider::OpenaiChat),
        status: MessageStatus::Completed,
        finish_reason: Some("tool_calls".to_string()),
        calls,
        tool_results: results,
        orphaned_results: Vec::new(),
        provider_metadata: Map::new(),
    }
}
