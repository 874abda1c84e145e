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
        let headers = self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        encode_row(
            self.kind,
            [&self.conversation_id, &self.message_id, &self.msg_id],
            headers,
            &self.payload,
        )
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

/// The stored form of a row ([`OutboxEntry::encode`]) from its parts: `ids` are the
/// conversation, message and `Nats-Msg-Id`. Sized exactly: a row is written once, and its
/// payload (an event can hold a whole argument) is copied once, not again by a growing buffer.
pub fn encode_row<'h>(
    kind: OutboxKind,
    ids: [&str; 3],
    headers: impl Iterator<Item = (&'h str, &'h str)> + Clone,
    payload: &[u8],
) -> Vec<u8> {
    let len = 1
        + ids.iter().map(|s| 4 + s.len()).sum::<usize>()
        + 4
        + headers
            .clone()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum::<usize>()
        + payload.len();
    let mut out = Vec::with_capacity(len);
    out.push(match kind {
        OutboxKind::Event => b'e',
        OutboxKind::DeadLetter => b'd',
    });
    for id in ids {
        crate::keys::push_str(&mut out, id);
    }
    let count = headers.clone().count();
    out.extend_from_slice(&(count as u32).to_be_bytes());
    for (k, v) in headers {
        crate::keys::push_str(&mut out, k);
        crate::keys::push_str(&mut out, v);
    }
    out.extend_from_slice(payload);
    debug_assert_eq!(out.len(), len, "the row's size as computed");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: OutboxKind, headers: Vec<(String, String)>, payload: &[u8]) -> OutboxEntry {
        OutboxEntry {
            key: 41,
            kind,
            conversation_id: "conv-é".into(),
            message_id: "m.1".into(),
            msg_id: "ev:conv-é:m.1:7".into(),
            headers,
            payload: payload.to_vec(),
        }
    }

    /// A row built from its parts (as `Txn::emit` does) is the row an entry encodes to, it
    /// reads back whole, and its buffer was sized exactly (no growth, no slack).
    #[test]
    fn a_row_from_its_parts_is_the_entry_s_encoding_and_reads_back() {
        let big = vec![b'x'; 300_000];
        let cases = [
            row(
                OutboxKind::Event,
                vec![("Toolstream-Event-Type".into(), "tool_call.completed".into())],
                br#"{"a":1}"#,
            ),
            row(
                OutboxKind::DeadLetter,
                vec![("A".into(), "1".into()), ("B".into(), String::new())],
                &big,
            ),
            row(OutboxKind::Event, Vec::new(), b""),
        ];
        for entry in cases {
            let parts = encode_row(
                entry.kind,
                [&entry.conversation_id, &entry.message_id, &entry.msg_id],
                entry.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                &entry.payload,
            );
            assert_eq!(parts.len(), parts.capacity(), "sized exactly");
            assert_eq!(parts, entry.encode());
            assert_eq!(OutboxEntry::decode(entry.key, &parts), Some(entry));
        }
    }

    /// The stored form, byte for byte (rows written by earlier releases are read back by
    /// this one): kind, the three ids and each header as u32 BE length and bytes, the header
    /// count as u32 BE, then the payload.
    #[test]
    fn a_row_s_stored_form_is_pinned_byte_for_byte() {
        let entry = OutboxEntry {
            key: 3,
            kind: OutboxKind::DeadLetter,
            conversation_id: "c".into(),
            message_id: "mm".into(),
            msg_id: "x".into(),
            headers: vec![("H".into(), "vv".into())],
            payload: b"{}".to_vec(),
        };
        let expected: &[u8] = &[
            b'd', 0, 0, 0, 1, b'c', 0, 0, 0, 2, b'm', b'm', 0, 0, 0, 1, b'x', 0, 0, 0, 1, 0, 0, 0,
            1, b'H', 0, 0, 0, 2, b'v', b'v', b'{', b'}',
        ];
        assert_eq!(entry.encode(), expected);
        assert_eq!(OutboxEntry::decode(3, expected), Some(entry));
    }
}
