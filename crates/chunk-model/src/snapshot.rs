//! What is stored for one message, as a UI shows it after a refresh and as history rendering
//! reads it. Returned by `toolstream.query.message.<conv>.<msg>`.

use crate::call::{CallOutcome, ToolResult};
use crate::provider::Provider;
use serde::{Deserialize, Serialize};

/// Whether a message's stream is still open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    /// Chunks may still arrive; some call is not terminal.
    Streaming,
    /// Every call is terminal and `message.completed` was emitted.
    Completed,
}

/// The stored calls and results of one message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageSnapshot {
    /// From the subject.
    pub conversation_id: String,
    /// From the subject.
    pub message_id: String,
    /// The message's stream format, once known.
    pub provider: Option<Provider>,
    /// Open or completed.
    pub status: MessageStatus,
    /// The provider's finish reason (or toolstream's: `timeout`, `gap`, ...), once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Every call, in index order, with its status.
    pub calls: Vec<CallOutcome>,
    /// Completed results matched to this message's calls, in arrival order.
    pub tool_results: Vec<ToolResult>,
    /// Results that arrived on this message's results subject and never matched a call
    /// within the grace period (`tool_result.orphaned`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaned_results: Vec<ToolResult>,
}
