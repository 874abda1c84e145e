//! The output contract: events that toolstream publishes and `toolstream replay` prints.
//!
//! JSON form (schema version 1, JSON Schema in `schema/event.v1.schema.json`, golden files in
//! `tests/golden/`):
//!
//! ```json
//! {"schema_version":1,"type":"tool_call.completed","event_id":"ev_…",
//!  "conversation_id":"c1","message_id":"m1","provider":"openai-chat",
//!  "tool_call":{"id":"call_1","name":"get_weather","arguments":{"city":"Paris"},
//!               "raw_arguments":"{\"city\":\"Paris\"}","index":0}}
//! ```
//!
//! Fields that do not apply to a type are omitted, never `null` (except `provider`, which is
//! `null` only on a `tool_result.orphaned` whose conversation never named one).
//!
//! A `tool_call.delta` (an argument preview, off by default) carries the call's identity in
//! `tool_call` (`arguments` `null`, `raw_arguments` `""`), the text appended since the call's
//! previous delta in `arguments_delta`, where that text starts in the call's argument text
//! (bytes) in `arguments_offset`, and, when the text so far is small enough, a best-effort
//! parse of it in `partial_arguments`. A delta is never a completion.

use crate::call::{CallOutcome, ToolCall, ToolResult};
use crate::provider::Provider;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Version of the event JSON form. Bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The kind of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    /// The call's name is known (emitted once, before any terminal event of the call).
    #[serde(rename = "tool_call.started")]
    ToolCallStarted,
    /// Throttled partial-argument preview (optional, off by default).
    #[serde(rename = "tool_call.delta")]
    ToolCallDelta,
    /// Ended authoritatively; `arguments` is valid JSON.
    #[serde(rename = "tool_call.completed")]
    ToolCallCompleted,
    /// Ended, but the arguments are not valid JSON or were cut; `raw_arguments` kept.
    #[serde(rename = "tool_call.invalid")]
    ToolCallInvalid,
    /// The stream ended, errored, broke or timed out before the call finished.
    #[serde(rename = "tool_call.abandoned")]
    ToolCallAbandoned,
    /// A tool result matched to its call.
    #[serde(rename = "tool_result.completed")]
    ToolResultCompleted,
    /// A tool result whose call never appeared within the grace period.
    #[serde(rename = "tool_result.orphaned")]
    ToolResultOrphaned,
    /// Every call of the message is terminal: the full, consistent list.
    #[serde(rename = "message.completed")]
    MessageCompleted,
}

impl EventType {
    /// The wire name (`tool_call.completed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::ToolCallStarted => "tool_call.started",
            EventType::ToolCallDelta => "tool_call.delta",
            EventType::ToolCallCompleted => "tool_call.completed",
            EventType::ToolCallInvalid => "tool_call.invalid",
            EventType::ToolCallAbandoned => "tool_call.abandoned",
            EventType::ToolResultCompleted => "tool_result.completed",
            EventType::ToolResultOrphaned => "tool_result.orphaned",
            EventType::MessageCompleted => "message.completed",
        }
    }
}

/// One published event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Deterministic id (also the `Nats-Msg-Id`), see [`event_id`].
    pub event_id: String,
    /// From the subject.
    pub conversation_id: String,
    /// From the subject (for results: the message of the call they answer; for orphans: the
    /// result's own message).
    pub message_id: String,
    /// The stream format of the message.
    pub provider: Option<Provider>,
    /// The call, on `tool_call.*` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    /// The result, on `tool_result.*` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolResult>,
    /// Why a call is `invalid`/`abandoned` or a result `orphaned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `message.completed`: the provider's finish reason (`tool_calls`, `max_tokens`, ...), or
    /// a toolstream reason (`timeout`, `gap`, `control_end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// `message.completed`: every call of the message, in index order, with its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<CallOutcome>>,
    /// `message.completed`: the results already matched to those calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<Vec<ToolResult>>,
    /// `tool_call.delta`: the argument text appended since the call's previous delta (the
    /// concatenation of a call's deltas, in `arguments_offset` order, is a prefix of the text
    /// the call assembled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_delta: Option<String>,
    /// `tool_call.delta`: the byte offset of `arguments_delta` in the call's argument text
    /// (the total length of the call's earlier deltas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_offset: Option<u64>,
    /// `tool_call.delta`: best effort, the JSON value of the argument text so far with its
    /// open strings, arrays and objects closed; omitted when that is not valid JSON, when the
    /// text so far is larger than the preview bound, or for a free-text (`custom`) call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_arguments: Option<serde_json::Value>,
    /// Set only on an event too large for the server's `max_payload`: the whole event, exactly
    /// as it would have been published, is the object named here, and this event carries its
    /// large fields emptied (see [`Event::offloaded`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_ref: Option<PayloadRef>,
}

/// Where the full form of an offloaded event (or query reply, or dead-letter body) is stored:
/// a JetStream object store bucket and object. `size` and `sha256` (lowercase hex) are those of
/// the stored bytes, so a reader can check what it fetched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadRef {
    /// The object store bucket (`TOOLSTREAM_PAYLOADS`).
    pub bucket: String,
    /// The object's name (for an event: its `event_id`).
    pub object: String,
    /// Size of the object in bytes.
    pub size: u64,
    /// SHA-256 of the object, 64 lowercase hex digits.
    pub sha256: String,
}

impl PayloadRef {
    /// The reference to `bytes` stored as `object` in `bucket`.
    pub fn for_bytes(bucket: &str, object: &str, bytes: &[u8]) -> PayloadRef {
        PayloadRef {
            bucket: bucket.to_string(),
            object: object.to_string(),
            size: bytes.len() as u64,
            sha256: hex(&sha256(bytes)),
        }
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// How much of an event [`Event::offloaded`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// Every field, with the large ones emptied: `arguments` `null` and `raw_arguments` `""`
    /// on `tool_call` and every `calls[].tool_call`, `output` `""` on `tool_result` and every
    /// `tool_results[]`, `arguments_delta` `""` and no `partial_arguments` on a delta.
    Slim,
    /// Only the common fields, `reason`, `finish_reason` and `payload_ref` (when even the slim
    /// form is too large, e.g. a message with thousands of calls).
    Bare,
}

impl Event {
    /// An event with the common fields set and everything else empty.
    pub fn new(
        event_type: EventType,
        event_id: String,
        conversation_id: &str,
        message_id: &str,
        provider: Option<Provider>,
    ) -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            event_type,
            event_id,
            conversation_id: conversation_id.to_string(),
            message_id: message_id.to_string(),
            provider,
            tool_call: None,
            tool_result: None,
            reason: None,
            finish_reason: None,
            calls: None,
            tool_results: None,
            arguments_delta: None,
            arguments_offset: None,
            partial_arguments: None,
            payload_ref: None,
        }
    }

    /// The small form of an event too large to publish: its full JSON is stored as the object
    /// `payload_ref` names, and this form carries the same type, ids and reasons with the large
    /// fields emptied ([`Offload`]). A subscriber seeing `payload_ref` fetches the object for
    /// the whole event.
    pub fn offloaded(&self, payload_ref: PayloadRef, level: Offload) -> Event {
        let mut e = self.clone();
        match level {
            Offload::Slim => {
                let slim_call = |c: &mut ToolCall| {
                    c.arguments = serde_json::Value::Null;
                    c.raw_arguments.clear();
                };
                if let Some(c) = e.tool_call.as_mut() {
                    slim_call(c);
                }
                if let Some(r) = e.tool_result.as_mut() {
                    r.output.clear();
                }
                for c in e.calls.iter_mut().flatten() {
                    slim_call(&mut c.tool_call);
                }
                for r in e.tool_results.iter_mut().flatten() {
                    r.output.clear();
                }
                if let Some(d) = e.arguments_delta.as_mut() {
                    d.clear();
                }
                e.partial_arguments = None;
            }
            Offload::Bare => {
                e.tool_call = None;
                e.tool_result = None;
                e.calls = None;
                e.tool_results = None;
                e.arguments_delta = None;
                e.arguments_offset = None;
                e.partial_arguments = None;
            }
        }
        e.payload_ref = Some(payload_ref);
        e
    }
}

/// What an event is about, for [`event_id`].
#[derive(Debug, Clone, Copy)]
pub enum EventSubject<'a> {
    /// A call, by its 0-based position in the message (the internal assembly key).
    Call(u32),
    /// A result, by the id of the call it answers.
    Result(&'a str),
    /// The message itself.
    Message,
    /// One argument preview (`tool_call.delta`) of a call, by the call's 0-based position and
    /// the byte offset where the preview's text starts: a call never has two previews starting
    /// at the same offset, so the id names one preview, and a re-emission after a redelivery
    /// or restart (which makes the same decisions from the same durable state) has the same.
    CallDelta(u32, u64),
}

/// The deterministic event id: `ev_` + 32 hex digits of SHA-256 over (conversation, message,
/// subject, type). The same fact always gets the same id, so JetStream's duplicate window
/// (`Nats-Msg-Id`) drops a re-publish after a crash.
pub fn event_id(conv: &str, msg: &str, subject: EventSubject<'_>, ty: EventType) -> String {
    let mut h = Sha256::new();
    for part in [conv.as_bytes(), msg.as_bytes()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    match subject {
        EventSubject::Call(i) => {
            h.update(b"c");
            h.update(i.to_be_bytes());
        }
        EventSubject::Result(id) => {
            h.update(b"r");
            h.update((id.len() as u64).to_be_bytes());
            h.update(id.as_bytes());
        }
        EventSubject::Message => h.update(b"m"),
        EventSubject::CallDelta(i, offset) => {
            h.update(b"d");
            h.update(i.to_be_bytes());
            h.update(offset.to_be_bytes());
        }
    }
    h.update(ty.as_str().as_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(35);
    out.push_str("ev_");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A deterministic synthetic call id for providers that give none (Gemini, Ollama):
/// `call_` + 24 hex digits over (conversation, message, index). Valid for every provider's id
/// rules (alphanumeric and `_`, under 40 characters).
pub fn synthetic_call_id(conv: &str, msg: &str, index: u32) -> String {
    let mut h = Sha256::new();
    for part in [conv.as_bytes(), msg.as_bytes()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.update(index.to_be_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(29);
    out.push_str("call_");
    for b in &digest[..12] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_deterministic_and_distinct_per_fact() {
        let a = event_id(
            "c",
            "m",
            EventSubject::Call(0),
            EventType::ToolCallCompleted,
        );
        assert_eq!(
            a,
            event_id(
                "c",
                "m",
                EventSubject::Call(0),
                EventType::ToolCallCompleted
            )
        );
        assert_ne!(
            a,
            event_id(
                "c",
                "m",
                EventSubject::Call(1),
                EventType::ToolCallCompleted
            )
        );
        assert_ne!(
            a,
            event_id("c", "m", EventSubject::Call(0), EventType::ToolCallStarted)
        );
        // length-prefixing keeps ("ab","c") and ("a","bc") apart
        assert_ne!(
            event_id(
                "ab",
                "c",
                EventSubject::Message,
                EventType::MessageCompleted
            ),
            event_id(
                "a",
                "bc",
                EventSubject::Message,
                EventType::MessageCompleted
            )
        );
        assert_eq!(a.len(), 35);
    }

    #[test]
    fn synthetic_ids_fit_every_provider() {
        let id = synthetic_call_id("conv", "msg", 3);
        assert!(id.len() <= 40);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        assert_ne!(id, synthetic_call_id("conv", "msg", 4));
    }
}
