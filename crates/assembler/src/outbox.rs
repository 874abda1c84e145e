//! Outbox rows: events and dead letters waiting to be published by the relay.

use serde::{Deserialize, Serialize};

/// What an outbox row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxKind {
    /// An event: publish to `<prefix>.events.<conv>.<msg>`.
    Event,
    /// A dead letter: publish to `<prefix>.dlq.<conv>.<msg>`.
    DeadLetter,
}

/// One row of the outbox. Deleted with [`crate::Store::outbox_remove`] after the PubAck.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// Monotonic key (increases across restarts); oldest rows have the smallest keys.
    pub key: u64,
    /// Event or dead letter.
    pub kind: OutboxKind,
    /// Subject token.
    pub conversation_id: String,
    /// Subject token.
    pub message_id: String,
    /// The `Nats-Msg-Id` to publish with: the event id, or `dlq:<conv>:<msg>:<seq>`.
    pub msg_id: String,
    /// Headers to publish with.
    pub headers: Vec<(String, String)>,
    /// The event JSON, or the raw dead chunk.
    pub payload: Vec<u8>,
}

impl OutboxEntry {
    /// The stored form (binary: kind, length-prefixed strings, headers, then the payload),
    /// without the key (which is the row's key).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.payload.len() + self.msg_id.len());
        out.push(match self.kind {
            OutboxKind::Event => b'e',
            OutboxKind::DeadLetter => b'd',
        });
        crate::keys::push_str(&mut out, &self.conversation_id);
        crate::keys::push_str(&mut out, &self.message_id);
        crate::keys::push_str(&mut out, &self.msg_id);
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        for (k, v) in &self.headers {
            crate::keys::push_str(&mut out, k);
            crate::keys::push_str(&mut out, v);
        }
        out.extend_from_slice(&self.payload);
        out
    }

    /// Reads the stored form back; `None` when it is corrupt.
    pub fn decode(key: u64, bytes: &[u8]) -> Option<OutboxEntry> {
        use crate::keys::read_str;
        let kind = match bytes.first()? {
            b'e' => OutboxKind::Event,
            b'd' => OutboxKind::DeadLetter,
            _ => return None,
        };
        let mut at = 1;
        let conversation_id = read_str(bytes, &mut at)?.to_string();
        let message_id = read_str(bytes, &mut at)?.to_string();
        let msg_id = read_str(bytes, &mut at)?.to_string();
        let n: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        let n = u32::from_be_bytes(n) as usize;
        let mut headers = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            let k = read_str(bytes, &mut at)?.to_string();
            let v = read_str(bytes, &mut at)?.to_string();
            headers.push((k, v));
        }
        Some(OutboxEntry {
            key,
            kind,
            conversation_id,
            message_id,
            msg_id,
            headers,
            payload: bytes.get(at..)?.to_vec(),
        })
    }
}
