//! Tool results as they arrive: assembled (whole or streamed) and waiting for their call.
//!
//! A streamed result's pieces are stored as their own records (see
//! [`PendingResult::absorb`]), so a result assembled from many deltas is never rewritten
//! whole per delta.

use crate::input::{Origin, Seq};
use chunk_model::{ResultInput, ToolResult};
use serde::{Deserialize, Serialize};

/// Where a tool result came from. It decides which result of a call stands
/// ([`crate::core::matching`]): the provider's own result, carried in the call's stream, wins
/// over a producer-published one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultSource {
    /// Published by a tool executor on the results subject.
    #[default]
    Producer,
    /// Carried in the call stream by the provider itself (Anthropic server tool result
    /// blocks, a Responses `mcp_call`'s output, AI SDK `tool-result` parts).
    Stream,
}

impl ResultSource {
    fn is_producer(&self) -> bool {
        *self == ResultSource::Producer
    }
}

/// A result not yet matched to a call, or not yet complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingResult {
    /// The message of the results subject it arrived on.
    pub message_id: String,
    /// The output of a whole result (`{"tool_call_id", "output"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<String>,
    /// Streamed output absorbed by this value in memory (the store keeps the pieces as
    /// records instead; not stored here).
    #[serde(skip)]
    pub streamed: String,
    /// Number of streamed pieces absorbed so far.
    #[serde(default)]
    pub pieces: u32,
    /// Whether the result is complete (whole, or its `done` arrived).
    pub done: bool,
    /// Whether the tool reported failure.
    pub is_error: bool,
    /// When the first piece arrived (starts the orphan grace period).
    pub received_ms: u64,
    /// Where it came from (stored records without it are producer results).
    #[serde(default, skip_serializing_if = "ResultSource::is_producer")]
    pub source: ResultSource,
    /// The input its first piece arrived in (subject and stream sequence), for the dead
    /// letter it becomes if it does not stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The sequence number of that input (for the dead letter's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// That input's body, when it held this result only (a producer's): the body of the dead
    /// letter it becomes if the provider's own result displaces it, as if it had arrived
    /// after that result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_body: Option<String>,
}

impl PendingResult {
    /// An empty pending result that arrived on `message_id` at `now_ms`.
    pub fn new(message_id: &str, now_ms: u64) -> PendingResult {
        PendingResult {
            message_id: message_id.to_string(),
            whole: None,
            streamed: String::new(),
            pieces: 0,
            done: false,
            is_error: false,
            received_ms: now_ms,
            source: ResultSource::Producer,
            origin: None,
            seq: None,
            input_body: None,
        }
    }

    /// Adds one result input: a whole result sets the output, a delta is appended (and
    /// returned with its piece number, for the caller to store), `done` completes. A
    /// complete result changes nothing further.
    #[must_use]
    pub fn absorb(&mut self, input: ResultInput) -> Option<(u32, String)> {
        if self.done {
            return None;
        }
        match input {
            ResultInput::Complete(r) => {
                self.whole = Some(r.output);
                self.is_error = r.is_error;
                self.done = true;
                None
            }
            ResultInput::Delta { delta, .. } => {
                let piece = self.pieces;
                self.pieces += 1;
                self.streamed.push_str(&delta);
                Some((piece, delta))
            }
            ResultInput::Done { is_error, .. } => {
                self.is_error = is_error;
                self.done = true;
                None
            }
        }
    }

    /// The canonical result for the call `tool_call_id`, with `streamed` as the streamed
    /// output (ignored for a whole result).
    pub fn to_result_with(&self, tool_call_id: &str, streamed: &str) -> ToolResult {
        ToolResult {
            tool_call_id: tool_call_id.to_string(),
            output: self.whole.clone().unwrap_or_else(|| streamed.to_string()),
            is_error: self.is_error,
        }
    }

    /// The canonical result, from what this value absorbed in memory.
    pub fn to_result(&self, tool_call_id: &str) -> ToolResult {
        self.to_result_with(tool_call_id, &self.streamed)
    }

    /// Whether the grace period for finding its call has run out at `now_ms`.
    pub fn orphan_expired(&self, now_ms: u64, grace_ms: u64) -> bool {
        now_ms.saturating_sub(self.received_ms) >= grace_ms
    }
}
