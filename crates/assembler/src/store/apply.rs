//! Applying one input: ordering (duplicate / park / apply / release parked), decoding,
//! stepping the core, matching results, dead letters. Everything lands in one [`Txn`].
//!
//! Every input gets exactly one visible outcome: applied, a duplicate of the same bytes, or a
//! dead letter with a reason. A chunk that will not be assembled (undecodable, rejected by the
//! caller, no provider, over the open-stream limit, numbered unlike its stream) is a hole in
//! its stream: the stream is closed like a sequence gap ([`close_stream`]): open calls end
//! `abandoned` (`lost_chunk`), parked chunks and later chunks are dead-lettered
//! (`stream_closed`), so a `completed` call is always the whole call. Other outcomes that
//! used to leave no trace are dead letters too: a duplicate number with other bytes
//! (`conflicting_duplicate`; the first one stays applied) and a call statement after the
//! message ended (`after_message_end`).

use super::inner::Inner;
use super::records::{from_bytes, to_bytes, CallIndex, ParkedHeader, ParkedInput};
use super::txn::Txn;
use crate::core::{self, emit, Admission, PendingResult, StepOutput};
use crate::error::StoreError;
use crate::input::{Applied, Control, Input, InputKind, Origin, Seq};
use crate::keys::{self, ResultTag};
use crate::outbox::{OutboxEntry, OutboxKind};
use crate::storage::{Space, Storage};
use chunk_model::{EventType, Provider, ResultInput};

/// Dead-letter header: why.
pub const HEADER_REASON: &str = "Toolstream-Reason";
/// Dead-letter header: the original subject.
pub const HEADER_SUBJECT: &str = "Toolstream-Subject";
/// Dead-letter header: the original JetStream stream sequence.
pub const HEADER_STREAM_SEQ: &str = "Toolstream-Stream-Seq";

/// One input's facts, owned or borrowed (a live input or a parked one).
struct Item<'a> {
    kind: InputKind,
    conv: &'a str,
    msg: &'a str,
    provider: Option<Provider>,
    seq: Seq,
    control: Option<&'a Control>,
    body: &'a [u8],
    origin: Option<&'a Origin>,
}

/// Reason of calls (and finish reason of a message) whose stream lost a chunk to the DLQ.
pub const LOST_CHUNK: &str = "lost_chunk";

/// Applies `input` in one commit. Returns the verdict and the number of outbox rows written.
/// With `rejected`, the caller could not read the input (bad headers): it is dead-lettered
/// with that reason and, for a chunk, ends its stream like any lost chunk.
pub(crate) fn apply(
    inner: &mut Inner,
    storage: &dyn Storage,
    input: &Input<'_>,
    rejected: Option<&str>,
    now: u64,
) -> Result<(Applied, usize), StoreError> {
    let mut txn = Txn::new(inner, storage);
    let verdict = admit(&mut txn, input, rejected, now)?;
    let (events, rows) = txn.commit()?;
    let verdict = match verdict {
        Applied::Accepted { .. } => Applied::Accepted { events },
        other => other,
    };
    Ok((verdict, rows))
}

fn admit(
    txn: &mut Txn<'_>,
    input: &Input<'_>,
    rejected: Option<&str>,
    now: u64,
) -> Result<Applied, StoreError> {
    let skey = keys::stream(input.kind, input.conversation_id, input.message_id);
    let item = Item {
        kind: input.kind,
        conv: input.conversation_id,
        msg: input.message_id,
        provider: input.provider,
        seq: input.seq,
        control: input.control.as_ref(),
        body: input.body,
        origin: input.origin.as_ref(),
    };
    // (before the stream is looked at: that creates it)
    let over_limit = input.kind == InputKind::Chunk
        && txn.inner.open.len() >= txn.inner.config.max_open_streams
        && !txn.stream_exists(&skey)?;
    let admission = txn.stream(&skey)?.admit(input.seq);
    if admission == Admission::Duplicate {
        return duplicate(txn, &skey, &item);
    }
    if let Some(reason) = rejected {
        return lose(txn, &skey, &item, reason, now);
    }
    if over_limit {
        return lose(txn, &skey, &item, "open_stream_limit", now);
    }
    if admission != Admission::Closed {
        if let Some(reason) = numbered_unlike_its_stream(txn.stream(&skey)?, &item) {
            return lose(txn, &skey, &item, reason, now);
        }
    }
    match admission {
        Admission::Duplicate => duplicate(txn, &skey, &item),
        Admission::Closed => {
            txn.stream_mut(&skey)?.consumed(input.seq, now);
            record_seen(txn, &skey, &item);
            Ok(dead_letter(
                txn,
                &item,
                "stream_closed: its message already ended (a lost chunk, a gap, or retention)",
            ))
        }
        Admission::Park => {
            let Seq::Producer(s) = input.seq else {
                return Ok(Applied::Duplicate);
            };
            let pkey = keys::parked(&skey, s);
            if let Some(bytes) = txn.storage.get(Space::Parked, &pkey)? {
                let parked = ParkedInput::decode(&bytes)?;
                return Ok(
                    if fingerprint(parked.header.control.as_ref(), &parked.body)
                        == fingerprint(item.control, item.body)
                    {
                        Applied::Duplicate
                    } else {
                        dead_letter(txn, &item, CONFLICTING_DUPLICATE)
                    },
                );
            }
            let parked = ParkedInput {
                header: ParkedHeader {
                    provider: input.provider,
                    control: input.control.clone(),
                    origin: input.origin.clone(),
                },
                body: input.body.to_vec(),
            };
            txn.writes.put(Space::Parked, pkey, parked.encode()?);
            let st = txn.stream_mut(&skey)?;
            st.park(now);
            if st.provider.is_none() {
                st.provider = input.provider;
            }
            Ok(Applied::Parked)
        }
        Admission::Apply => {
            let verdict = apply_item(txn, &skey, item, now)?;
            drain(
                txn,
                &skey,
                input.kind,
                input.conversation_id,
                input.message_id,
                now,
            )?;
            Ok(verdict)
        }
    }
}

/// Dead-letter reason of an input numbered like one already applied or parked, with other
/// bytes (the first one stays).
pub const CONFLICTING_DUPLICATE: &str =
    "conflicting_duplicate: this Toolstream-Seq was already taken by an input with other bytes";

/// A redelivery (same bytes) changes nothing; another input with the same number is a
/// conflicting duplicate and goes to the DLQ.
fn duplicate(txn: &mut Txn<'_>, skey: &[u8], item: &Item<'_>) -> Result<Applied, StoreError> {
    let Seq::Producer(s) = item.seq else {
        return Ok(Applied::Duplicate);
    };
    let first = match txn.storage.get(Space::Seen, &keys::parked(skey, s))? {
        Some(v) => v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes),
        None => None,
    };
    match first {
        Some(fp) if fp != fingerprint(item.control, item.body) => {
            Ok(dead_letter(txn, item, CONFLICTING_DUPLICATE))
        }
        _ => Ok(Applied::Duplicate),
    }
}

/// An input that will not be assembled: its dead letter, its number consumed, and for a
/// chunk the end of its stream (a hole: nothing after it can be trusted).
fn lose(
    txn: &mut Txn<'_>,
    skey: &[u8],
    item: &Item<'_>,
    reason: &str,
    now: u64,
) -> Result<Applied, StoreError> {
    let verdict = dead_letter(txn, item, reason);
    record_seen(txn, skey, item);
    {
        let st = txn.stream_mut(skey)?;
        if st.provider.is_none() {
            st.provider = item.provider;
        }
        // A number ahead of a gap is not consumed: the inputs numbered before it are still to
        // come, and moving the watermark past them took them for duplicates (no trace at all:
        // the chunks of a closed stream must be stream_closed dead letters, and results must
        // be applied).
        let ahead = matches!(item.seq, Seq::Producer(s) if s > st.next);
        if !ahead {
            st.consumed(item.seq, now);
        }
    }
    if item.kind == InputKind::Chunk {
        close_stream(txn, skey, item.conv, item.msg, LOST_CHUNK, now)?;
    }
    Ok(verdict)
}

/// A chunk numbered unlike the chunks its stream already has (a chunk without
/// `Toolstream-Seq` in a numbered stream, or the reverse) cannot be placed: why, if so.
/// Explicit ends (`Toolstream-Control`) may come unnumbered.
fn numbered_unlike_its_stream(st: &core::StreamState, item: &Item<'_>) -> Option<&'static str> {
    if item.kind != InputKind::Chunk || item.control.is_some() {
        return None;
    }
    let numbered = st.next > 0 || st.parked > 0;
    let unnumbered = st.last_transport.is_some();
    match item.seq {
        Seq::Transport(_) if numbered && !unnumbered => {
            Some("missing_seq: no Toolstream-Seq on a chunk of a stream whose chunks are numbered")
        }
        Seq::Producer(_) if unnumbered && !numbered => Some(
            "unexpected_seq: a Toolstream-Seq on a chunk of a stream whose chunks are not numbered",
        ),
        _ => None,
    }
}

/// Records the fingerprint of the input a producer number was taken by (applied or
/// dead-lettered), so that other bytes under that number later are a conflicting duplicate.
fn record_seen(txn: &mut Txn<'_>, skey: &[u8], item: &Item<'_>) {
    if let Seq::Producer(s) = item.seq {
        let fp = fingerprint(item.control, item.body);
        txn.writes.put(
            Space::Seen,
            keys::parked(skey, s),
            fp.to_be_bytes().to_vec(),
        );
    }
}

/// A stable fingerprint (FNV-1a, 64 bit) of an input's bytes and control header, stored per
/// producer sequence number ([`Space::Seen`]).
pub(crate) fn fingerprint(control: Option<&Control>, body: &[u8]) -> u64 {
    let tag: &[u8] = match control {
        None => b"c",
        Some(Control::End) => b"e",
        Some(Control::Error(_)) => b"x",
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.iter().chain(body) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Closes a chunk stream with a hole (`gap`, `lost_chunk`): every parked chunk behind it is
/// dead-lettered (`stream_closed: <reason>`), later chunks will be too, and the message ends
/// with its open calls `abandoned` (`reason`).
pub(crate) fn close_stream(
    txn: &mut Txn<'_>,
    skey: &[u8],
    conv: &str,
    msg: &str,
    reason: &str,
    now: u64,
) -> Result<(), StoreError> {
    let next = txn.stream(skey)?.next;
    let why = format!("stream_closed: {reason}");
    for (k, v) in txn.storage.scan_prefix(Space::Parked, skey)? {
        let seq = k
            .get(skey.len()..)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        // released earlier in this same commit (their deletes are staged, not yet visible)
        if seq.is_some_and(|s| s < next) {
            continue;
        }
        let parked = ParkedInput::decode(&v)?;
        let item = Item {
            kind: InputKind::Chunk,
            conv,
            msg,
            provider: parked.header.provider,
            seq: Seq::Producer(seq.unwrap_or(0)),
            control: parked.header.control.as_ref(),
            body: &parked.body,
            origin: parked.header.origin.as_ref(),
        };
        let _dead = dead_letter(txn, &item, &why);
        txn.writes.delete(Space::Parked, k);
    }
    let st = txn.stream_mut(skey)?;
    st.discard_parked();
    st.closed = true;
    end_stream(txn, skey, conv, msg, reason, now)
}

/// Ends a chunk stream's message for a toolstream reason (`gap`, `timeout`, `lost_chunk`):
/// open calls `abandoned`. A stream that never named a provider has nothing assembled (every
/// chunk of it was dead-lettered) and gets no message of its own.
pub(crate) fn end_stream(
    txn: &mut Txn<'_>,
    skey: &[u8],
    conv: &str,
    msg: &str,
    reason: &str,
    now: u64,
) -> Result<(), StoreError> {
    let provider = txn.stream(skey)?.provider;
    if provider.is_none() && txn.message_mut(conv, msg)?.is_none() {
        txn.stream_mut(skey)?.open = false;
        return Ok(());
    }
    let mut out = StepOutput::default();
    txn.message_or_new(conv, msg, provider)?;
    txn.hold_text(&keys::message(conv, msg))?;
    let m = txn.message_or_new(conv, msg, provider)?;
    core::step::abandon(m, reason, &mut out);
    after_step(txn, conv, msg, out, now)
}

/// Applies parked inputs that are next in line, in order.
pub(crate) fn drain(
    txn: &mut Txn<'_>,
    skey: &[u8],
    kind: InputKind,
    conv: &str,
    msg: &str,
    now: u64,
) -> Result<(), StoreError> {
    loop {
        let st = txn.stream(skey)?;
        if st.parked == 0 {
            break;
        }
        let s = st.next;
        let pkey = keys::parked(skey, s);
        let Some(bytes) = txn.storage.get(Space::Parked, &pkey)? else {
            break;
        };
        txn.stream_mut(skey)?.released(now);
        txn.writes.delete(Space::Parked, pkey);
        let parked = ParkedInput::decode(&bytes)?;
        let item = Item {
            kind,
            conv,
            msg,
            provider: parked.header.provider,
            seq: Seq::Producer(s),
            control: parked.header.control.as_ref(),
            body: &parked.body,
            origin: parked.header.origin.as_ref(),
        };
        let _verdict = apply_item(txn, skey, item, now)?;
    }
    Ok(())
}

/// Applies one input that is next in line and consumes its sequence number.
fn apply_item(
    txn: &mut Txn<'_>,
    skey: &[u8],
    mut item: Item<'_>,
    now: u64,
) -> Result<Applied, StoreError> {
    {
        let st = txn.stream_mut(skey)?;
        if st.provider.is_none() {
            st.provider = item.provider;
        }
        item.provider = item.provider.or(st.provider);
        st.consumed(item.seq, now);
    }
    record_seen(txn, skey, &item);
    match item.kind {
        InputKind::Chunk => apply_chunk(txn, skey, &item, now),
        InputKind::Result => apply_result(txn, &item, now),
    }
}

fn apply_chunk(
    txn: &mut Txn<'_>,
    skey: &[u8],
    item: &Item<'_>,
    now: u64,
) -> Result<Applied, StoreError> {
    let limits = txn.inner.limits;
    let mut out = StepOutput::default();
    if let Some(control) = item.control {
        // An end on a stream that never named a provider (and has no message) would complete
        // an empty message that no event can show, silently, and dead-letter the real stream
        // after it: it is a `no_provider` input like any chunk of such a stream.
        if item.provider.is_none() && txn.message_mut(item.conv, item.msg)?.is_none() {
            return lose(txn, skey, item, "no_provider", now);
        }
        txn.message_or_new(item.conv, item.msg, item.provider)?;
        txn.hold_text(&keys::message(item.conv, item.msg))?;
        let m = txn.message_or_new(item.conv, item.msg, item.provider)?;
        core::step::control(m, control, &mut out);
    } else {
        let Some(provider) = item.provider else {
            return lose(txn, skey, item, "no_provider", now);
        };
        let events = match chunk_model::decode(provider, item.body) {
            Ok(evs) => evs,
            Err(e) => return lose(txn, skey, item, &format!("decode_error: {e}"), now),
        };
        let mkey = keys::message(item.conv, item.msg);
        for ev in events {
            let m = txn.message_or_new(item.conv, item.msg, Some(provider))?;
            if core::step::needs_text(m, &ev, &limits) {
                txn.hold_text(&mkey)?;
            }
            let m = txn.message_or_new(item.conv, item.msg, Some(provider))?;
            core::step(m, ev, &limits, &mut out);
        }
        // (a chunk with no events still makes its message, as before)
        txn.message_or_new(item.conv, item.msg, Some(provider))?;
    }
    let after_end = out.after_end;
    after_step(txn, item.conv, item.msg, out, now)?;
    if after_end {
        return Ok(dead_letter(
            txn,
            item,
            "after_message_end: a call statement arrived after its message had ended",
        ));
    }
    Ok(Applied::Accepted { events: 0 })
}

fn apply_result(txn: &mut Txn<'_>, item: &Item<'_>, now: u64) -> Result<Applied, StoreError> {
    if item.control.is_some() {
        return Ok(dead_letter(txn, item, "control_on_results"));
    }
    let results = match chunk_model::decode_result(item.body) {
        Ok(r) => r,
        Err(e) => return Ok(dead_letter(txn, item, &format!("decode_error: {e}"))),
    };
    for r in results {
        handle_result(txn, item.conv, item.msg, r, now)?;
    }
    Ok(Applied::Accepted { events: 0 })
}

/// Persists what a core step caused: argument writes, events, call registrations (and the
/// results they match), in-stream results, then `message.completed` when due, and the
/// stream's open flag.
pub(crate) fn after_step(
    txn: &mut Txn<'_>,
    conv: &str,
    msg: &str,
    out: StepOutput,
    now: u64,
) -> Result<(), StoreError> {
    let mkey = keys::message(conv, msg);
    if out.text_missing {
        return Err(text_missing());
    }
    txn.arg_ops(&mkey, &out.arg_ops);
    for ev in &out.events {
        txn.emit(ev)?;
    }
    for pos in out.registered {
        register(txn, conv, msg, pos)?;
    }
    for r in out.results {
        handle_result(txn, conv, msg, r, now)?;
    }
    let (done, open) = match txn.message_mut(conv, msg)? {
        Some(m) => {
            if m.phase == core::MessagePhase::Ended && m.calls.iter().any(|c| c.needs_text()) {
                return Err(text_missing());
            }
            (
                core::complete_if_done(m),
                m.phase != core::MessagePhase::Completed,
            )
        }
        None => (None, false),
    };
    if let Some(mut ev) = done {
        if ev.provider.is_none() {
            ev.provider = txn.conversation_provider(conv)?;
        }
        // a message that never had a provider assembled nothing: no event to speak of
        if ev.provider.is_some() {
            txn.emit(&ev)?;
        }
        // The retention clock starts in the same commit that completes the message.
        txn.writes.put(
            Space::Done,
            keys::done(now, keys::DoneTag::Message, conv, msg),
            Vec::new(),
        );
    }
    txn.stream_mut(&keys::stream(InputKind::Chunk, conv, msg))?
        .open = open;
    Ok(())
}

/// A step needed argument text the store had not read back (a bug: nothing is committed).
fn text_missing() -> StoreError {
    StoreError::Corrupt {
        space: "args",
        detail: "a call's argument text was needed but not read back before the step".into(),
    }
}

/// Indexes a call by its consumer-facing id and matches a complete result waiting for it.
fn register(txn: &mut Txn<'_>, conv: &str, msg: &str, pos: u32) -> Result<(), StoreError> {
    let id = txn
        .message_mut(conv, msg)?
        .and_then(|m| m.calls.get(pos as usize).and_then(|c| c.id.clone()));
    let Some(id) = id else {
        return Ok(());
    };
    let ikey = keys::result(ResultTag::CallIndex, conv, &id);
    if let Some(bytes) = txn.results_get(&ikey)? {
        let existing: CallIndex = from_bytes("results", &bytes)?;
        if existing.resolved {
            return Ok(());
        }
    }
    let index = CallIndex {
        message_id: msg.to_string(),
        index: pos,
        resolved: false,
    };
    txn.results_put(ikey, to_bytes("results", &index)?);
    let pkey = keys::result(ResultTag::Pending, conv, &id);
    if let Some(bytes) = txn.results_get(&pkey)? {
        let pending: PendingResult = from_bytes("results", &bytes)?;
        if pending.done {
            matched(txn, conv, &id, msg, pos, &pending)?;
        }
    }
    Ok(())
}

/// Adds one result input: matched when complete and its call is known, else kept pending.
fn handle_result(
    txn: &mut Txn<'_>,
    conv: &str,
    rmsg: &str,
    input: ResultInput,
    now: u64,
) -> Result<(), StoreError> {
    let id = input.tool_call_id().to_string();
    if id.trim().is_empty() {
        return Ok(());
    }
    let ikey = keys::result(ResultTag::CallIndex, conv, &id);
    let index: Option<CallIndex> = match txn.results_get(&ikey)? {
        Some(bytes) => Some(from_bytes("results", &bytes)?),
        None => None,
    };
    if index.as_ref().is_some_and(|i| i.resolved) {
        return Ok(());
    }
    let pkey = keys::result(ResultTag::Pending, conv, &id);
    let mut pending = match txn.results_get(&pkey)? {
        Some(bytes) => from_bytes("results", &bytes)?,
        None => PendingResult::new(rmsg, now),
    };
    if let Some((piece, delta)) = pending.absorb(input) {
        txn.results_put(keys::result_piece(conv, &id, piece), delta.into_bytes());
    }
    match index {
        Some(i) if pending.done => matched(txn, conv, &id, &i.message_id, i.index, &pending),
        _ => {
            txn.inner
                .pending
                .insert((conv.to_string(), id), pending.received_ms);
            txn.results_put(pkey, to_bytes("results", &pending)?);
            Ok(())
        }
    }
}

/// Emits `tool_result.completed` for a result matched to the call (`call_msg`, `pos`).
fn matched(
    txn: &mut Txn<'_>,
    conv: &str,
    id: &str,
    call_msg: &str,
    pos: u32,
    pending: &PendingResult,
) -> Result<(), StoreError> {
    let result = take_result(txn, conv, id, pending)?;
    let provider = match txn.message_mut(conv, call_msg)? {
        Some(m) => {
            m.tool_results.push(result.clone());
            m.provider
        }
        None => None,
    };
    let ev = emit::result_event(
        conv,
        call_msg,
        provider,
        &result,
        EventType::ToolResultCompleted,
        None,
    );
    txn.emit(&ev)?;
    let index = CallIndex {
        message_id: call_msg.to_string(),
        index: pos,
        resolved: true,
    };
    txn.results_put(
        keys::result(ResultTag::CallIndex, conv, id),
        to_bytes("results", &index)?,
    );
    txn.results_delete(keys::result(ResultTag::Pending, conv, id));
    txn.inner
        .pending
        .remove(&(conv.to_string(), id.to_string()));
    Ok(())
}

/// Emits `tool_result.orphaned` for a pending result whose call never appeared. Returns
/// whether it did (a result whose call is known but which is not complete is left alone).
pub(crate) fn orphan(txn: &mut Txn<'_>, conv: &str, id: &str) -> Result<(), StoreError> {
    txn.inner
        .pending
        .remove(&(conv.to_string(), id.to_string()));
    if txn
        .results_get(&keys::result(ResultTag::CallIndex, conv, id))?
        .is_some()
    {
        return Ok(());
    }
    let pkey = keys::result(ResultTag::Pending, conv, id);
    let Some(bytes) = txn.results_get(&pkey)? else {
        return Ok(());
    };
    let pending: PendingResult = from_bytes("results", &bytes)?;
    let result = take_result(txn, conv, id, &pending)?;
    // A result for an id whose earlier result was already orphaned in this message: the
    // first stays (as for matched results), and the event is not emitted twice (found by
    // cargo fuzz: the same event_id was written again).
    let already = txn
        .message_mut(conv, &pending.message_id)?
        .is_some_and(|m| m.orphaned_results.iter().any(|r| r.tool_call_id == id));
    if already {
        txn.results_delete(pkey);
        return Ok(());
    }
    let provider = txn.conversation_provider(conv)?;
    let ev = emit::result_event(
        conv,
        &pending.message_id,
        provider,
        &result,
        EventType::ToolResultOrphaned,
        Some("no_call"),
    );
    txn.message_or_new(conv, &pending.message_id, None)?
        .orphaned_results
        .push(result);
    txn.emit(&ev)?;
    txn.results_delete(pkey);
    Ok(())
}

/// The complete result of a pending one (streamed pieces read back in order), deleting the
/// pieces.
fn take_result(
    txn: &mut Txn<'_>,
    conv: &str,
    id: &str,
    pending: &PendingResult,
) -> Result<chunk_model::ToolResult, StoreError> {
    let mut streamed = Vec::new();
    if pending.pieces > 0 {
        let prefix = keys::result(ResultTag::ResultPiece, conv, id);
        for (k, v) in txn.results_scan(&prefix)? {
            streamed.extend_from_slice(&v);
            txn.results_delete(k);
        }
    }
    Ok(pending.to_result_with(id, &String::from_utf8_lossy(&streamed)))
}

/// Writes a dead letter for `item` (its sequence number is consumed by the caller).
fn dead_letter(txn: &mut Txn<'_>, item: &Item<'_>, reason: &str) -> Applied {
    let (numbering, n) = match item.seq {
        Seq::Producer(s) => ("p", s),
        Seq::Transport(s) => ("t", s),
    };
    // Deterministic (a redelivery maps to the same id, which the DLQ stream drops) and
    // unambiguous: tokens are length-prefixed, and different bytes at one number differ.
    let msg_id = format!(
        "dlq:{}:{}:{}:{}:{}:{numbering}{n}:{:016x}",
        keys::kind_byte(item.kind) as char,
        item.conv.len(),
        item.conv,
        item.msg.len(),
        item.msg,
        fingerprint(item.control, item.body)
    );
    let mut headers = vec![(HEADER_REASON.to_string(), reason.to_string())];
    if let Some(o) = item.origin {
        headers.push((HEADER_SUBJECT.to_string(), o.subject.clone()));
        headers.push((HEADER_STREAM_SEQ.to_string(), o.stream_seq.to_string()));
    }
    txn.push_row(OutboxEntry {
        key: 0,
        kind: OutboxKind::DeadLetter,
        conversation_id: item.conv.to_string(),
        message_id: item.msg.to_string(),
        msg_id,
        headers,
        payload: item.body.to_vec(),
    });
    Applied::DeadLettered {
        reason: reason.to_string(),
    }
}
