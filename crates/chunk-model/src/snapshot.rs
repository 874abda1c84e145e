//! What is stored for one message, as a UI shows it after a refresh and as history rendering
//! reads it. Returned by `toolstream.query.message.<conv>.<msg>`.

use crate::call::{CallOutcome, ToolResult};
use crate::chunk::ReasoningKind;
use crate::provider::Provider;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Key of [`MessageSnapshot::provider_metadata`] holding the message's reasoning blocks, in
/// order: a JSON array of [`ReasoningBlock`]s.
pub const META_REASONING: &str = "reasoning";

/// One reasoning block the provider wants back, unmodified, before the tool calls it preceded
/// (Anthropic `thinking` / `redacted_thinking`, Bedrock `reasoningContent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningBlock {
    /// `thinking` or `redacted_thinking`.
    #[serde(rename = "type")]
    pub kind: ReasoningKind,
    /// The reasoning text (`thinking`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    /// Its signature (`thinking`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    /// The encrypted reasoning (`redacted_thinking`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
    /// How many of the message's calls came before it: it goes back before call
    /// `before_call` (by index), after the ones before.
    pub before_call: u32,
}

impl MessageSnapshot {
    /// The message's reasoning blocks (none when absent or unreadable), in order.
    pub fn reasoning(&self) -> Vec<ReasoningBlock> {
        self.provider_metadata
            .get(META_REASONING)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }
}

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
    /// The message's own provider metadata (**added**, absent when empty): its reasoning
    /// blocks under [`META_REASONING`].
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub provider_metadata: Map<String, Value>,
}
