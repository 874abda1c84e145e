//! Tool results as they arrive: assembled (whole or streamed) and waiting for their call.

use chunk_model::{ResultInput, ToolResult};
use serde::{Deserialize, Serialize};

/// A result not yet matched to a call, or not yet complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingResult {
    /// The message of the results subject it arrived on.
    pub message_id: String,
    /// The output assembled so far.
    pub output: String,
    /// Whether the result is complete (whole, or its `done` arrived).
    pub done: bool,
    /// Whether the tool reported failure.
    pub is_error: bool,
    /// When the first piece arrived (starts the orphan grace period).
    pub received_ms: u64,
}

impl PendingResult {
    /// An empty pending result that arrived on `message_id` at `now_ms`.
    pub fn new(message_id: &str, now_ms: u64) -> PendingResult {
        PendingResult {
            message_id: message_id.to_string(),
            output: String::new(),
            done: false,
            is_error: false,
            received_ms: now_ms,
        }
    }

    /// Adds one result input (whole results replace, deltas append, `done` completes). A
    /// complete result changes nothing further.
    pub fn absorb(&mut self, input: ResultInput) {
        if self.done {
            return;
        }
        match input {
            ResultInput::Complete(r) => {
                self.output = r.output;
                self.is_error = r.is_error;
                self.done = true;
            }
            ResultInput::Delta { delta, .. } => self.output.push_str(&delta),
            ResultInput::Done { is_error, .. } => {
                self.is_error = is_error;
                self.done = true;
            }
        }
    }

    /// The canonical result for the call `tool_call_id`.
    pub fn to_result(&self, tool_call_id: &str) -> ToolResult {
        ToolResult {
            tool_call_id: tool_call_id.to_string(),
            output: self.output.clone(),
            is_error: self.is_error,
        }
    }

    /// Whether the grace period for finding its call has run out at `now_ms`.
    pub fn orphan_expired(&self, now_ms: u64, grace_ms: u64) -> bool {
        now_ms.saturating_sub(self.received_ms) >= grace_ms
    }
}
