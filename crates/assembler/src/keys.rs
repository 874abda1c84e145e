//! Byte keys for the keyspaces. Strings are length-prefixed (u32 big-endian), numbers are
//! big-endian, so byte order is (field by field) the natural order and no key is a prefix of
//! another field's bytes by accident.

use crate::input::InputKind;

/// Appends a length-prefixed string.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Prefix of every message key of a conversation.
pub fn conversation(conv: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + conv.len());
    push_str(&mut k, conv);
    k
}

/// Key of a message: (conversation, message).
pub fn message(conv: &str, msg: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + conv.len() + msg.len());
    push_str(&mut k, conv);
    push_str(&mut k, msg);
    k
}

/// Key of a stream: (kind, conversation, message).
pub fn stream(kind: InputKind, conv: &str, msg: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + conv.len() + msg.len());
    k.push(kind_byte(kind));
    push_str(&mut k, conv);
    push_str(&mut k, msg);
    k
}

/// The byte that stands for an input kind in keys.
pub fn kind_byte(kind: InputKind) -> u8 {
    match kind {
        InputKind::Chunk => b'c',
        InputKind::Result => b'r',
    }
}

/// Key of a parked input: (stream, seq).
pub fn parked(stream_key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(stream_key.len() + 8);
    k.extend_from_slice(stream_key);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Prefix of the argument pieces of one call: (message, call position).
pub fn args_prefix(message_key: &[u8], call: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(message_key.len() + 8);
    k.extend_from_slice(message_key);
    k.extend_from_slice(&call.to_be_bytes());
    k
}

/// Bit set on the call number of a call's *structured* argument pieces (Vertex
/// `partialArgs`), which are stored beside its text pieces.
pub const PATH_PIECES: u32 = 0x8000_0000;

/// Key of one argument piece: (message, call position, piece number).
pub fn args_piece(message_key: &[u8], call: u32, piece: u32) -> Vec<u8> {
    let mut k = args_prefix(message_key, call);
    k.extend_from_slice(&piece.to_be_bytes());
    k
}

/// Key of an outbox row.
pub fn outbox(key: u64) -> Vec<u8> {
    key.to_be_bytes().to_vec()
}

/// Reads an outbox row key back.
pub fn outbox_key(bytes: &[u8]) -> Option<u64> {
    let arr: [u8; 8] = bytes.try_into().ok()?;
    Some(u64::from_be_bytes(arr))
}

/// Tag of a record in the results keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultTag {
    /// A result waiting for its call (or for its end): `(conv, call id)`.
    Pending,
    /// A registered call, for matching: `(conv, call id)`.
    CallIndex,
    /// The conversation's provider: `(conv)`.
    ConversationProvider,
    /// Streamed pieces of a pending result: `(conv, call id)` + piece number.
    ResultPiece,
}

/// Key in the results keyspace: tag, conversation, and (except for the provider) call id.
pub fn result(tag: ResultTag, conv: &str, call_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + conv.len() + call_id.len());
    k.push(match tag {
        ResultTag::Pending => b'p',
        ResultTag::CallIndex => b'i',
        ResultTag::ConversationProvider => b'v',
        ResultTag::ResultPiece => b'q',
    });
    push_str(&mut k, conv);
    if tag != ResultTag::ConversationProvider {
        push_str(&mut k, call_id);
    }
    k
}

/// Key of one streamed piece of a pending result.
pub fn result_piece(conv: &str, call_id: &str, piece: u32) -> Vec<u8> {
    let mut k = result(ResultTag::ResultPiece, conv, call_id);
    k.extend_from_slice(&piece.to_be_bytes());
    k
}

/// What a retention-index entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneTag {
    /// The message completed at the entry's time: delete it once retention has passed.
    Message,
    /// The message was deleted at the entry's time, leaving stream tombstones: delete them
    /// once retention has passed again.
    Tombstone,
}

/// Key in the retention index: time (ms, big-endian), tag, message key. Byte order is time
/// order, so the oldest entries come first.
pub fn done(at_ms: u64, tag: DoneTag, conv: &str, msg: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(17 + conv.len() + msg.len());
    k.extend_from_slice(&at_ms.to_be_bytes());
    k.push(match tag {
        DoneTag::Message => b'm',
        DoneTag::Tombstone => b't',
    });
    push_str(&mut k, conv);
    push_str(&mut k, msg);
    k
}

/// Splits a retention-index key back into (time, tag, conversation, message).
pub fn parse_done(key: &[u8]) -> Option<(u64, DoneTag, String, String)> {
    let at: [u8; 8] = key.get(..8)?.try_into().ok()?;
    let tag = match key.get(8)? {
        b'm' => DoneTag::Message,
        b't' => DoneTag::Tombstone,
        _ => return None,
    };
    let mut pos = 9;
    let conv = read_str(key, &mut pos)?;
    let msg = read_str(key, &mut pos)?;
    Some((
        u64::from_be_bytes(at),
        tag,
        conv.to_string(),
        msg.to_string(),
    ))
}

/// Meta key: next outbox key.
pub const META_OUTBOX_NEXT: &[u8] = b"outbox_next";
/// Meta key: next message order number.
pub const META_ORDER_NEXT: &[u8] = b"order_next";

/// Reads a length-prefixed string at `*at`, advancing `*at`.
pub fn read_str<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a str> {
    let len_bytes: [u8; 4] = bytes.get(*at..*at + 4)?.try_into().ok()?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let start = *at + 4;
    let s = bytes.get(start..start + len)?;
    *at = start + len;
    std::str::from_utf8(s).ok()
}

/// Splits a pending-result key back into (conversation, call id).
pub fn parse_pending(key: &[u8]) -> Option<(String, String)> {
    if key.first() != Some(&b'p') {
        return None;
    }
    let mut at = 1;
    let conv = read_str(key, &mut at)?;
    let id = read_str(key, &mut at)?;
    Some((conv.to_string(), id.to_string()))
}

/// Splits a stream key back into (kind, conversation, message).
pub fn parse_stream(key: &[u8]) -> Option<(InputKind, String, String)> {
    let kind = match key.first()? {
        b'c' => InputKind::Chunk,
        b'r' => InputKind::Result,
        _ => return None,
    };
    let mut at = 1;
    let conv = read_str(key, &mut at)?;
    let msg = read_str(key, &mut at)?;
    Some((kind, conv.to_string(), msg.to_string()))
}
