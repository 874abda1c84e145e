//! The compact binary form of the two states every input rewrites: a stream's
//! [`StreamState`] and a message's [`MessageState`].
//!
//! Why: every commit writes the state of the stream and of the message it changed, and as JSON
//! that was a fifth of an argument fragment's cost (serde_json escapes every field name and
//! formats every number: ~9,500 instructions per fragment in `completion_cost`). This form is
//! varints and length-prefixed strings in a fixed field order, written and read field by field.
//!
//! Where it lives: the storage's layers of writes and its flush log (what commits and flushes
//! write).
//! What is at rest in sled's keyspaces, and what a checkpoint holds, stays JSON
//! ([`at_rest`]): a store settled by a clean stop is read by every earlier release as before,
//! and a checkpoint by every worker of a rolling upgrade. Readers take both forms
//! ([`decode_stream`], [`decode_message`]): a JSON record starts with `{`, a compact one with
//! its tag byte.
//!
//! Layout (v1): a tag byte ([`STREAM_V1`], [`MESSAGE_V1`]), then the fields in declaration
//! order. Integers are LEB128 varints; strings are a varint length and UTF-8 bytes; an
//! `Option` is a presence bit in a flags varint before the fields. The fields that are rare
//! and nested (call metadata and parsed arguments, reasoning blocks, result blocks) are their
//! JSON text, length-prefixed. A field added later goes at the end behind a new tag.

use crate::core::{Arguments, CallState, MessagePhase, MessageState, StreamState};
use crate::error::StoreError;
use crate::storage::Space;
use chunk_model::{CallKind, CallStatus, Provider, ToolResult};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Tag of a compact [`StreamState`] (never `{`, the first byte of a JSON record).
pub const STREAM_V1: u8 = 0xB1;
/// Tag of a compact [`MessageState`].
pub const MESSAGE_V1: u8 = 0xB2;

/// The compact form of a stream's state.
pub fn encode_stream(st: &StreamState) -> Vec<u8> {
    let mut w = Writer::with_capacity(24);
    w.u8(STREAM_V1);
    w.flags(&[
        st.open,
        st.closed,
        st.last_transport.is_some(),
        st.gap_since_ms.is_some(),
        st.provider.is_some(),
    ]);
    w.varint(st.next);
    w.varint(st.parked);
    w.varint(st.last_activity_ms);
    w.varint(u64::from(st.choices));
    if let Some(t) = st.last_transport {
        w.varint(t);
    }
    if let Some(t) = st.gap_since_ms {
        w.varint(t);
    }
    if let Some(p) = st.provider {
        w.str(p.as_str());
    }
    w.0
}

/// A stream's state from either stored form.
pub fn decode_stream(bytes: &[u8]) -> Result<StreamState, StoreError> {
    match bytes.first() {
        Some(&STREAM_V1) => read_stream(&mut Reader::new("streams", &bytes[1..])),
        _ => json("streams", bytes),
    }
}

fn read_stream(r: &mut Reader<'_>) -> Result<StreamState, StoreError> {
    let f = r.varint()?;
    let mut st = StreamState {
        open: bit(f, 0),
        closed: bit(f, 1),
        next: r.varint()?,
        parked: r.varint()?,
        last_activity_ms: r.varint()?,
        choices: r.u32()?,
        ..StreamState::default()
    };
    if bit(f, 2) {
        st.last_transport = Some(r.varint()?);
    }
    if bit(f, 3) {
        st.gap_since_ms = Some(r.varint()?);
    }
    if bit(f, 4) {
        st.provider = Some(r.provider()?);
    }
    r.end()?;
    Ok(st)
}

/// The compact form of a message's state (its calls without their argument text, which is
/// stored as pieces).
pub fn encode_message(m: &MessageState) -> Result<Vec<u8>, StoreError> {
    let mut w = Writer::with_capacity(message_size_hint(m));
    w.u8(MESSAGE_V1);
    w.flags(&[
        m.provider.is_some(),
        m.finish_reason.is_some(),
        !m.tool_results.is_empty(),
        !m.orphaned_results.is_empty(),
        !m.reasoning.is_empty(),
        !m.result_blocks.is_empty(),
    ]);
    w.str(&m.conversation_id);
    w.str(&m.message_id);
    if let Some(p) = m.provider {
        w.str(p.as_str());
    }
    w.varint(m.order);
    w.u8(match m.phase {
        MessagePhase::Open => 0,
        MessagePhase::Ended => 1,
        MessagePhase::Completed => 2,
    });
    if let Some(r) = &m.finish_reason {
        w.str(r);
    }
    w.varint(m.calls.len() as u64);
    for call in &m.calls {
        write_call(&mut w, call)?;
    }
    for results in [&m.tool_results, &m.orphaned_results] {
        if !results.is_empty() {
            w.varint(results.len() as u64);
            for r in results {
                w.str(&r.tool_call_id);
                w.str(&r.output);
                w.u8(u8::from(r.is_error));
            }
        }
    }
    if !m.reasoning.is_empty() {
        w.json(&m.reasoning)?;
    }
    if !m.result_blocks.is_empty() {
        w.json(&m.result_blocks)?;
    }
    Ok(w.0)
}

/// A message's state from either stored form.
pub fn decode_message(bytes: &[u8]) -> Result<MessageState, StoreError> {
    match bytes.first() {
        Some(&MESSAGE_V1) => read_message(&mut Reader::new("messages", &bytes[1..])),
        _ => json("messages", bytes),
    }
}

fn read_message(r: &mut Reader<'_>) -> Result<MessageState, StoreError> {
    let f = r.varint()?;
    let conversation_id = r.string()?;
    let message_id = r.string()?;
    let provider = match bit(f, 0) {
        true => Some(r.provider()?),
        false => None,
    };
    let order = r.varint()?;
    let phase = match r.u8()? {
        0 => MessagePhase::Open,
        1 => MessagePhase::Ended,
        2 => MessagePhase::Completed,
        _ => return Err(r.corrupt("an unknown message phase")),
    };
    let mut m = MessageState::new(&conversation_id, &message_id, provider, order);
    m.phase = phase;
    if bit(f, 1) {
        m.finish_reason = Some(r.string()?);
    }
    let calls = r.len()?;
    m.calls = Vec::with_capacity(calls.min(1024));
    for _ in 0..calls {
        m.calls.push(read_call(r)?);
    }
    for (present, results) in [
        (bit(f, 2), &mut m.tool_results),
        (bit(f, 3), &mut m.orphaned_results),
    ] {
        if present {
            let n = r.len()?;
            for _ in 0..n {
                results.push(ToolResult {
                    tool_call_id: r.string()?,
                    output: r.string()?,
                    is_error: r.u8()? != 0,
                });
            }
        }
    }
    if bit(f, 4) {
        m.reasoning = r.json()?;
    }
    if bit(f, 5) {
        m.result_blocks = r.json()?;
    }
    r.end()?;
    Ok(m)
}

/// About the size of a message's compact form (its metadata, reasoning and result blocks,
/// which are JSON, not counted; arguments counted when their JSON is kept): a message is
/// encoded at every commit that changes it, and a buffer growing from a guess copied what it
/// held at every doubling, completed calls' arguments and results' outputs included.
fn message_size_hint(m: &MessageState) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, |s| 5 + s.len());
    let calls: usize = m
        .calls
        .iter()
        .map(|c| {
            48 + text(&c.wire_id)
                + text(&c.item_id)
                + text(&c.id)
                + text(&c.name)
                + text(&c.reason)
                + c.arguments.json_len()
        })
        .sum();
    let results: usize = m
        .tool_results
        .iter()
        .chain(&m.orphaned_results)
        .map(|r| 11 + r.tool_call_id.len() + r.output.len())
        .sum();
    64 + m.conversation_id.len() + m.message_id.len() + calls + results
}

fn write_call(w: &mut Writer, c: &CallState) -> Result<(), StoreError> {
    w.flags(&[
        c.wire_id.is_some(),
        c.wire_index.is_some(),
        c.item_id.is_some(),
        c.id.is_some(),
        c.name.is_some(),
        c.kind_stated,
        c.reason.is_some(),
        c.started,
        !c.metadata.is_empty(),
        !c.arguments.is_null(),
        c.preview_at.is_some(),
    ]);
    for s in [&c.wire_id, &c.item_id, &c.id, &c.name, &c.reason]
        .into_iter()
        .flatten()
    {
        w.str(s);
    }
    if let Some(i) = c.wire_index {
        w.varint(u64::from(i));
    }
    w.u8(kind_code(c.kind));
    w.u8(status_code(c.status));
    w.varint(c.args_len as u64);
    w.varint(u64::from(c.pieces));
    w.varint(u64::from(c.path_pieces));
    w.varint(c.path_bytes as u64);
    w.varint(c.preview_bytes as u64);
    if let Some(t) = c.preview_at {
        w.varint(t);
    }
    if !c.metadata.is_empty() {
        w.json(&c.metadata)?;
    }
    if !c.arguments.is_null() {
        // kept from the first time (or as read): not serialized again at every commit
        let json = c.arguments.json().map_err(|e| StoreError::Encode {
            space: "compact",
            detail: e.to_string(),
        })?;
        w.varint(json.len() as u64);
        w.0.extend_from_slice(json);
    }
    Ok(())
}

fn read_call(r: &mut Reader<'_>) -> Result<CallState, StoreError> {
    let f = r.varint()?;
    let mut c = CallState::new();
    // as a stored JSON record reads: nothing of the text is held in memory
    c.args_held = false;
    c.paths_held = false;
    c.preview_held = false;
    let opt = |bit_no: u32, r: &mut Reader<'_>| -> Result<Option<String>, StoreError> {
        match bit(f, bit_no) {
            true => r.string().map(Some),
            false => Ok(None),
        }
    };
    c.wire_id = opt(0, r)?;
    c.item_id = opt(2, r)?;
    c.id = opt(3, r)?;
    c.name = opt(4, r)?;
    c.reason = opt(6, r)?;
    if bit(f, 1) {
        c.wire_index = Some(r.u32()?);
    }
    c.kind_stated = bit(f, 5);
    c.started = bit(f, 7);
    c.kind = kind_of(r.u8()?).ok_or_else(|| r.corrupt("an unknown call kind"))?;
    c.status = status_of(r.u8()?).ok_or_else(|| r.corrupt("an unknown call status"))?;
    c.args_len = r.usize()?;
    c.pieces = r.u32()?;
    c.path_pieces = r.u32()?;
    c.path_bytes = r.usize()?;
    c.preview_bytes = r.usize()?;
    if bit(f, 10) {
        c.preview_at = Some(r.varint()?);
    }
    if bit(f, 8) {
        c.metadata = r.json()?;
    }
    if bit(f, 9) {
        let bytes = r.bytes()?;
        // checked here, parsed only when the value is asked for (`Arguments::value`)
        json::<CheckedJson>(r.space, bytes)?;
        c.arguments = Arguments::with_json(bytes);
    }
    Ok(c)
}

fn kind_code(k: CallKind) -> u8 {
    match k {
        CallKind::Function => 0,
        CallKind::Custom => 1,
        CallKind::Mcp => 2,
        CallKind::McpApprovalRequest => 3,
        CallKind::ServerTool => 4,
    }
}

fn kind_of(code: u8) -> Option<CallKind> {
    CallKind::ALL.into_iter().find(|k| kind_code(*k) == code)
}

fn status_code(s: CallStatus) -> u8 {
    match s {
        CallStatus::Streaming => 0,
        CallStatus::Completed => 1,
        CallStatus::Invalid => 2,
        CallStatus::Abandoned => 3,
    }
}

fn status_of(code: u8) -> Option<CallStatus> {
    [
        CallStatus::Streaming,
        CallStatus::Completed,
        CallStatus::Invalid,
        CallStatus::Abandoned,
    ]
    .into_iter()
    .find(|s| status_code(*s) == code)
}

/// The form `value` of `space` takes at rest in sled and in checkpoints: compact states as
/// their JSON records (see the module docs); `None` when `value` is stored as it is.
pub fn at_rest(space: Space, value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
    match (space, value.first()) {
        (Space::Streams, Some(&STREAM_V1)) => to_json("streams", &decode_stream(value)?).map(Some),
        (Space::Messages, Some(&MESSAGE_V1)) => {
            to_json("messages", &decode_message(value)?).map(Some)
        }
        _ => Ok(None),
    }
}

fn to_json<T: Serialize>(space: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Encode {
        space,
        detail: e.to_string(),
    })
}

/// JSON that parses as a [`serde_json::Value`] would, checked without building one: every
/// string read (UTF-8, escapes, surrogates), every number in range, nested no deeper than
/// the parser allows. (`serde::de::IgnoredAny` skips strings and numbers unchecked: bytes it
/// passes can still fail the parse that [`Arguments::value`] does later.)
struct CheckedJson;

impl<'de> serde::Deserialize<'de> for CheckedJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CheckedJson, D::Error> {
        d.deserialize_any(CheckedJson)
    }
}

impl<'de> serde::de::Visitor<'de> for CheckedJson {
    type Value = CheckedJson;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_i64<E>(self, _: i64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_u64<E>(self, _: u64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_f64<E>(self, _: f64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_str<E>(self, _: &str) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_unit<E>(self) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<CheckedJson, A::Error> {
        while seq.next_element::<CheckedJson>()?.is_some() {}
        Ok(CheckedJson)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CheckedJson, A::Error> {
        while map.next_entry::<CheckedJson, CheckedJson>()?.is_some() {}
        Ok(CheckedJson)
    }
}

fn json<T: DeserializeOwned>(space: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        space,
        detail: e.to_string(),
    })
}

fn bit(flags: u64, n: u32) -> bool {
    flags & (1 << n) != 0
}

/// Appends fields to a record.
struct Writer(Vec<u8>);

impl Writer {
    fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }

    fn u8(&mut self, b: u8) {
        self.0.push(b);
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// Presence bits, the first one lowest.
    fn flags(&mut self, bits: &[bool]) {
        let v = bits
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, b)| acc | (u64::from(*b) << i));
        self.varint(v);
    }

    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn json<T: Serialize>(&mut self, value: &T) -> Result<(), StoreError> {
        let text = serde_json::to_vec(value).map_err(|e| StoreError::Encode {
            space: "compact",
            detail: e.to_string(),
        })?;
        self.varint(text.len() as u64);
        self.0.extend_from_slice(&text);
        Ok(())
    }
}

/// Reads fields off a record; every read checks what is left.
struct Reader<'a> {
    space: &'static str,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(space: &'static str, rest: &'a [u8]) -> Reader<'a> {
        Reader { space, rest }
    }

    fn corrupt(&self, what: &str) -> StoreError {
        StoreError::Corrupt {
            space: self.space,
            detail: format!("compact record: {what}"),
        }
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        let (b, rest) = self
            .rest
            .split_first()
            .ok_or_else(|| self.corrupt("cut short"))?;
        self.rest = rest;
        Ok(*b)
    }

    fn varint(&mut self) -> Result<u64, StoreError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt("a varint longer than 64 bits"))
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.corrupt("a number out of range"))
    }

    fn usize(&mut self) -> Result<usize, StoreError> {
        let v = self.varint()?;
        usize::try_from(v).map_err(|_| self.corrupt("a number out of range"))
    }

    /// A count of items that follow: never more than the bytes left (each takes one at least).
    fn len(&mut self) -> Result<usize, StoreError> {
        let n = self.usize()?;
        match n <= self.rest.len() {
            true => Ok(n),
            false => Err(self.corrupt("a count longer than the record")),
        }
    }

    fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let n = self.usize()?;
        if n > self.rest.len() {
            return Err(self.corrupt("a field longer than the record"));
        }
        let (field, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(field)
    }

    fn string(&mut self) -> Result<String, StoreError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt("a string that is not UTF-8"))
    }

    fn provider(&mut self) -> Result<Provider, StoreError> {
        let name = self.string()?;
        Provider::parse(&name).ok_or_else(|| self.corrupt("an unknown provider"))
    }

    fn json<T: DeserializeOwned>(&mut self) -> Result<T, StoreError> {
        let bytes = self.bytes()?;
        json(self.space, bytes)
    }

    fn end(&self) -> Result<(), StoreError> {
        match self.rest.is_empty() {
            true => Ok(()),
            false => Err(self.corrupt("bytes after the last field")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::ResultBlockState;
    use crate::core::ReasoningState;
    use chunk_model::ReasoningKind;
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    /// What a stored JSON record reads back as: the form every reader got before this one.
    fn via_json_message(m: &MessageState) -> MessageState {
        decode_message(&to_json("messages", m).unwrap()).unwrap()
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z_]{1,8}", "\\PC{0,12}"]
    }

    fn opt_text() -> impl Strategy<Value = Option<String>> {
        prop::option::of(text())
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(
                json!({"location": "Paris", "n": 3, "f": 1.5e-7, "deep": [true, null, {"a": "é"}]})
            ),
            any::<i64>().prop_map(Value::from),
            text().prop_map(Value::from),
        ]
    }

    fn metadata() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map("[a-z]{1,5}", value(), 0..3)
            .prop_map(|m| m.into_iter().collect())
    }

    fn call() -> impl Strategy<Value = CallState> {
        (
            (
                opt_text(),
                prop::option::of(any::<u32>()),
                opt_text(),
                opt_text(),
                opt_text(),
            ),
            (
                0usize..5,
                any::<bool>(),
                0usize..4,
                opt_text(),
                any::<bool>(),
            ),
            (
                any::<usize>(),
                any::<u32>(),
                any::<u32>(),
                any::<usize>(),
                any::<usize>(),
            ),
            (prop::option::of(any::<u64>()), metadata(), value()),
        )
            .prop_map(|(ids, facts, counts, rest)| {
                let mut c = CallState::new();
                (c.wire_id, c.wire_index, c.item_id, c.id, c.name) = ids;
                let (kind, kind_stated, status, reason, started) = facts;
                c.kind = CallKind::ALL[kind];
                c.kind_stated = kind_stated;
                c.status = status_of(status as u8).unwrap();
                c.reason = reason;
                c.started = started;
                (
                    c.args_len,
                    c.pieces,
                    c.path_pieces,
                    c.path_bytes,
                    c.preview_bytes,
                ) = counts;
                let arguments;
                (c.preview_at, c.metadata, arguments) = rest;
                c.arguments = arguments.into();
                c
            })
    }

    fn result() -> impl Strategy<Value = ToolResult> {
        (text(), text(), any::<bool>()).prop_map(|(tool_call_id, output, is_error)| ToolResult {
            tool_call_id,
            output,
            is_error,
        })
    }

    fn message() -> impl Strategy<Value = MessageState> {
        (
            (
                text(),
                text(),
                prop::option::of(0usize..7),
                any::<u64>(),
                0u8..3,
                opt_text(),
            ),
            prop::collection::vec(call(), 0..4),
            prop::collection::vec(result(), 0..3),
            prop::collection::vec(result(), 0..2),
            prop::collection::vec((any::<u32>(), any::<bool>(), text()), 0..2),
            prop::collection::vec((any::<u32>(), text(), text(), any::<bool>()), 0..2),
        )
            .prop_map(|(head, calls, results, orphaned, reasoning, blocks)| {
                let (conv, msg, provider, order, phase, finish) = head;
                let mut m =
                    MessageState::new(&conv, &msg, provider.map(|p| Provider::ALL[p]), order);
                m.phase = [
                    MessagePhase::Open,
                    MessagePhase::Ended,
                    MessagePhase::Completed,
                ][usize::from(phase)];
                m.finish_reason = finish;
                m.calls = calls;
                m.tool_results = results;
                m.orphaned_results = orphaned;
                m.reasoning = reasoning
                    .into_iter()
                    .map(|(index, redacted, signature)| ReasoningState {
                        index,
                        kind: match redacted {
                            true => ReasoningKind::RedactedThinking,
                            false => ReasoningKind::Thinking,
                        },
                        before_call: index / 2,
                        pieces: index % 5,
                        text: String::new(),
                        signature,
                        data: String::new(),
                    })
                    .collect();
                m.result_blocks = blocks
                    .into_iter()
                    .map(|(index, tool_call_id, output, is_error)| ResultBlockState {
                        index,
                        tool_call_id,
                        is_error,
                        output,
                        over_limit: index % 2 == 0,
                    })
                    .collect();
                m
            })
    }

    fn stream() -> impl Strategy<Value = StreamState> {
        (
            (any::<u64>(), prop::option::of(any::<u64>()), any::<u64>()),
            (
                prop::option::of(any::<u64>()),
                any::<u64>(),
                prop::option::of(0usize..7),
            ),
            (any::<bool>(), any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |((next, last_transport, parked), (gap, activity, provider), flags)| StreamState {
                    next,
                    last_transport,
                    parked,
                    gap_since_ms: gap,
                    last_activity_ms: activity,
                    provider: provider.map(|p| Provider::ALL[p]),
                    open: flags.0,
                    closed: flags.1,
                    choices: flags.2,
                },
            )
    }

    proptest! {
        /// A compact message reads back exactly as its JSON record does (the text held in
        /// memory is never stored, in either form), and is JSON again at rest.
        #[test]
        fn a_compact_message_reads_back_as_its_json_record(m in message()) {
            let compact = encode_message(&m).unwrap();
            prop_assert_eq!(compact[0], MESSAGE_V1);
            let back = decode_message(&compact).unwrap();
            prop_assert_eq!(&back, &via_json_message(&m));
            let rest = at_rest(Space::Messages, &compact).unwrap().unwrap();
            prop_assert_eq!(rest, to_json("messages", &back).unwrap());
        }

        #[test]
        fn a_compact_stream_reads_back_as_itself_and_as_json_at_rest(st in stream()) {
            let compact = encode_stream(&st);
            prop_assert_eq!(decode_stream(&compact).unwrap(), st.clone());
            let rest = at_rest(Space::Streams, &compact).unwrap().unwrap();
            prop_assert_eq!(decode_stream(&rest).unwrap(), st);
        }

        /// Every cut of a record, and every byte flipped in it, is an error or a record:
        /// never a panic, never an allocation the bytes do not justify.
        #[test]
        fn damaged_records_are_refused_or_read_never_a_panic(
            m in message(),
            st in stream(),
            at in any::<prop::sample::Index>(),
            flip in any::<u8>(),
        ) {
            for (space, record) in [
                (Space::Messages, encode_message(&m).unwrap()),
                (Space::Streams, encode_stream(&st)),
            ] {
                let cut = at.index(record.len());
                if cut > 0 {
                    let short = &record[..cut];
                    prop_assert!(decode_message(short).is_err() || space == Space::Streams);
                    prop_assert!(decode_stream(short).is_err() || space == Space::Messages);
                }
                let mut flipped = record.clone();
                flipped[cut] ^= flip | 1;
                let _ = (decode_message(&flipped), decode_stream(&flipped));
                let _ = at_rest(space, &flipped);
            }
        }
    }

    /// A completed call's arguments are serialized once, not at every commit of their message
    /// (the mixed workload's profile: most of `encode_message`): the row holds serde_json's
    /// encoding of the value, as before, made by the first encode and kept for the next ones.
    #[test]
    fn a_completed_call_s_arguments_are_serialized_once() {
        let value = serde_json::json!({"q": "line\n\"quoted\"", "n": [1, 2.5, -3], "z": null});
        let mut m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 3);
        let mut call = CallState::new();
        call.status = CallStatus::Completed;
        call.arguments = value.clone().into();
        m.calls.push(call);
        assert!(!m.calls[0].arguments.is_cached());

        let first = encode_message(&m).unwrap();
        assert!(
            m.calls[0].arguments.is_cached(),
            "the encode kept the JSON it made"
        );
        let inline = serde_json::to_vec(&value).unwrap();
        assert!(
            first.windows(inline.len()).any(|w| w == inline.as_slice()),
            "the row holds serde_json's encoding of the value"
        );
        assert_eq!(encode_message(&m).unwrap(), first);
        let read = decode_message(&first).unwrap();
        assert_eq!(read.calls[0].arguments, value);
        assert_eq!(encode_message(&read).unwrap(), first);
    }

    /// The JSON kept is what encodes write, and a row read back keeps the bytes it was read
    /// from: JSON spaced otherwise than serde_json writes it goes through a read and a write
    /// unchanged (a re-serialization would drop the spaces).
    #[test]
    fn arguments_are_written_from_the_json_kept_and_read_rows_keep_theirs() {
        let spaced: &[u8] = br#"{ "q" : [ 1, "a" ] }"#;
        let value = serde_json::json!({"q": [1, "a"]});
        let mut m = MessageState::new("c", "m", Some(Provider::Anthropic), 1);
        let mut call = CallState::new();
        call.status = CallStatus::Completed;
        call.arguments = Arguments::with_json(spaced);
        m.calls.push(call);
        let row = encode_message(&m).unwrap();
        let holds = |row: &[u8]| row.windows(spaced.len()).any(|w| w == spaced);
        assert!(holds(&row), "written from the JSON kept");
        let read = decode_message(&row).unwrap();
        assert!(read.calls[0].arguments.is_cached());
        assert!(
            holds(&encode_message(&read).unwrap()),
            "read back, written as read"
        );
        assert_eq!(read.calls[0].arguments, value);
    }

    /// A message read back and written again (a later input of it, a result for one of its
    /// calls) does not parse its completed calls' arguments: each is checked to be JSON at
    /// the read and parsed only when its value is asked for (the mixed workload's profile: a
    /// tenth of the worker's JSON parsing went to values no one looked at).
    #[test]
    fn read_arguments_are_parsed_only_when_their_value_is_asked_for() {
        let value = serde_json::json!({"path": "/tmp/a", "lines": [1, 2, 3], "deep": {"x": null}});
        let mut m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 3);
        let mut call = CallState::new();
        call.status = CallStatus::Completed;
        call.arguments = value.clone().into();
        m.calls.push(call);
        let row = encode_message(&m).unwrap();

        let read = decode_message(&row).unwrap();
        let args = &read.calls[0].arguments;
        assert!(!args.is_parsed(), "read, not parsed");
        assert!(!args.is_null(), "completed, without parsing");
        assert_eq!(encode_message(&read).unwrap(), row, "written back as read");
        assert!(!args.is_parsed(), "nor by writing it back");
        assert_eq!(*args.value(), value);
        assert!(args.is_parsed());
        assert_eq!(args.get("lines"), value.get("lines"), "read through Deref");
    }

    /// What the lazy parse relies on: stored arguments that would not parse as a value are
    /// refused at the read, as a corrupt row, as when they were parsed there, including what
    /// a skip over the bytes (`IgnoredAny`) lets through: a number out of range, a lone
    /// surrogate, bytes that are not UTF-8 in a string, nesting past the parser's limit.
    #[test]
    fn stored_arguments_that_would_not_parse_are_corrupt_at_the_read() {
        let call_with = |json: &[u8]| {
            let mut m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 3);
            let mut call = CallState::new();
            call.status = CallStatus::Completed;
            call.arguments = Arguments::with_json(json);
            m.calls.push(call);
            encode_message(&m).unwrap()
        };
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let bad: [&[u8]; 5] = [
            br#"{"n": 1e400}"#,
            br#"{"s": "\ud800"}"#,
            b"{\"s\": \"\xff\xfe\"}",
            deep.as_bytes(),
            br#"{"a": [1, 2}"#,
        ];
        for json in bad {
            assert!(
                serde_json::from_slice::<serde_json::Value>(json).is_err(),
                "{json:?} is one a parse refuses"
            );
            assert!(
                matches!(
                    decode_message(&call_with(json)),
                    Err(StoreError::Corrupt { .. })
                ),
                "{:?} refused at the read",
                String::from_utf8_lossy(json)
            );
        }
        let good: [&[u8]; 3] = [
            br#"{"n": 1e300, "s": "\ud83d\ude00"}"#,
            b"null",
            br#"[[[]]]"#,
        ];
        for json in good {
            let read = decode_message(&call_with(json)).expect("read");
            let value: serde_json::Value = serde_json::from_slice(json).unwrap();
            assert_eq!(read.calls[0].arguments.is_null(), value.is_null());
            assert_eq!(*read.calls[0].arguments.value(), value);
        }
    }

    /// A stored row whose arguments are not JSON at all is refused at the read.
    #[test]
    fn stored_arguments_that_are_not_json_are_corrupt_at_the_read() {
        let value = serde_json::json!({"q": "abcdefgh"});
        let mut m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 3);
        let mut call = CallState::new();
        call.status = CallStatus::Completed;
        call.arguments = value.into();
        m.calls.push(call);
        let mut row = encode_message(&m).unwrap();
        let at = row
            .windows(br#"{"q":"#.len())
            .position(|w| w == br#"{"q":"#)
            .unwrap();
        row[at] = b'[';
        assert!(matches!(
            decode_message(&row),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn json_records_stay_readable_and_are_left_as_they_are_at_rest() {
        let st = StreamState {
            next: 7,
            open: true,
            provider: Some(Provider::Anthropic),
            ..StreamState::default()
        };
        let stored = to_json("streams", &st).unwrap();
        assert_eq!(decode_stream(&stored).unwrap(), st);
        assert_eq!(at_rest(Space::Streams, &stored).unwrap(), None);
        let m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 3);
        let stored = to_json("messages", &m).unwrap();
        assert_eq!(decode_message(&stored).unwrap(), m);
        assert_eq!(at_rest(Space::Messages, &stored).unwrap(), None);
        // other spaces are never touched, whatever their first byte
        assert_eq!(at_rest(Space::Args, &[STREAM_V1, 1, 2]).unwrap(), None);
    }

    #[test]
    fn a_typical_message_is_several_times_smaller_than_its_json_record() {
        let mut m = MessageState::new("conv-17", "c17m3", Some(Provider::OpenaiChat), 42);
        for (i, id) in ["call_17x3x0", "call_17x3x1"].into_iter().enumerate() {
            let mut c = CallState::new();
            c.wire_id = Some(id.into());
            c.wire_index = Some(i as u32);
            c.id = Some(id.into());
            c.name = Some("search_documents".into());
            c.started = true;
            c.args_len = 311;
            c.pieces = 40;
            m.calls.push(c);
        }
        let compact = encode_message(&m).unwrap().len();
        let json = to_json("messages", &m).unwrap().len();
        assert!(compact * 3 < json, "compact {compact} bytes, JSON {json}");
    }
}
