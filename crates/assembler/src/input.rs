//! What the caller hands to [`crate::Store::apply`] for one JetStream message, and what it
//! gets back.

use chunk_model::Provider;
use serde::{Deserialize, Serialize};

/// Which input subject a message came from (defined with the subjects, in the wire contract).
pub use chunk_model::wire::InputKind;

/// The sequence number that orders and dedupes a stream's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seq {
    /// The producer's `Toolstream-Seq` header: contiguous from 0 within (kind, conv, msg).
    /// Gaps are waited for (inputs ahead of a gap are parked).
    Producer(u64),
    /// The JetStream stream sequence, used when no `Toolstream-Seq` is given: increasing but
    /// not contiguous, so it only dedupes.
    Transport(u64),
}

/// An explicit end of a stream (`Toolstream-Control` header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// `end`: the producer has nothing more. Calls still open are `abandoned` (`stream_ended`).
    End,
    /// `error`: the producer's stream broke (the body is the reason). Open calls `abandoned`.
    Error(String),
}

/// Where a message came from, kept on dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The original subject.
    pub subject: String,
    /// The JetStream stream sequence of the message.
    pub stream_seq: u64,
}

/// One input message, borrowed from the caller.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// Chunk or result, from the subject.
    pub kind: InputKind,
    /// The `<conv>` subject token.
    pub conversation_id: &'a str,
    /// The `<msg>` subject token.
    pub message_id: &'a str,
    /// The `Toolstream-Provider` header, parsed by the caller. When absent, the provider
    /// named by an earlier chunk of the same message is used.
    pub provider: Option<Provider>,
    /// Orders and dedupes.
    pub seq: Seq,
    /// The `Toolstream-Control` header, if any (the body is then not decoded).
    pub control: Option<Control>,
    /// The raw provider chunk or result message.
    pub body: &'a [u8],
    /// Original subject and stream sequence, copied onto a dead letter (borrowed: only a
    /// dead letter or a parked or pending input keeps a copy).
    pub origin: Option<&'a Origin>,
}

/// What [`crate::Store::apply`] did with an input. Every variant is final for that input:
/// the caller acks after the next flush.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Applied; `events` outbox rows were written.
    Accepted {
        /// How many events it caused (including those of parked inputs it released).
        events: usize,
    },
    /// Already applied or already parked: nothing changed.
    Duplicate,
    /// Ahead of a sequence gap: stored durably, applied when the gap fills.
    Parked,
    /// Malformed (undecodable, no provider, over a limit): its sequence number is consumed
    /// and the raw input is written to the dead-letter outbox with `reason`.
    DeadLettered {
        /// Why, short and stable (`decode_error: …`, `no_provider`, `open_stream_limit`).
        reason: String,
    },
}
