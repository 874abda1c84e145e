//! Applying one input: ordering (duplicate / park / apply / release parked), decoding,
//! stepping the core, matching results, dead letters. Everything lands in one [`Txn`].

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

/// Applies `input` in one commit. Returns the verdict and the number of outbox rows written.
pub(crate) fn apply(
    inner: &mut Inner,
    storage: &dyn Storage,
    input: &Input<'_>,
    now: u64,
) -> Result<(Applied, usize), StoreError> {
    let mut txn = Txn::new(inner, storage);
    let verdict = admit(&mut txn, input, now)?;
    let (events, rows) = txn.commit()?;
    let verdict = match verdict {
        Applied::Accepted { .. } => Applied::Accepted { events },
        other => other,
    };
    Ok((verdict, rows))
}

fn admit(txn: &mut Txn<'_>, input: &Input<'_>, now: u64) -> Result<Applied, StoreError> {
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
    if input.kind == InputKind::Chunk
        && txn.inner.open.len() >= txn.inner.config.max_open_streams
        && !txn.stream_exists(&skey)?
    {
        return Ok(dead_letter(txn, &item, "open_stream_limit"));
    }
    match txn.stream(&skey)?.admit(input.seq) {
        Admission::Duplicate => Ok(Applied::Duplicate),
        Admission::Closed => {
            txn.stream_mut(&skey)?.consumed(input.seq, now);
            Ok(Applied::Accepted { events: 0 })
        }
        Admission::Park => {
            let Seq::Producer(s) = input.seq else {
                return Ok(Applied::Duplicate);
            };
            let pkey = keys::parked(&skey, s);
            if txn.storage.get(Space::Parked, &pkey)?.is_some() {
                return Ok(Applied::Duplicate);
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
    match item.kind {
        InputKind::Chunk => apply_chunk(txn, &item, now),
        InputKind::Result => apply_result(txn, &item, now),
    }
}

fn apply_chunk(txn: &mut Txn<'_>, item: &Item<'_>, now: u64) -> Result<Applied, StoreError> {
    let limits = txn.inner.limits;
    let mut out = StepOutput::default();
    if let Some(control) = item.control {
        let m = txn.message_or_new(item.conv, item.msg, item.provider)?;
        core::step::control(m, control, &mut out);
    } else {
        let Some(provider) = item.provider else {
            return Ok(dead_letter(txn, item, "no_provider"));
        };
        let events = match chunk_model::decode(provider, item.body) {
            Ok(evs) => evs,
            Err(e) => return Ok(dead_letter(txn, item, &format!("decode_error: {e}"))),
        };
        let m = txn.message_or_new(item.conv, item.msg, Some(provider))?;
        for ev in events {
            core::step(m, ev, &limits, &mut out);
        }
    }
    after_step(txn, item.conv, item.msg, out, now)?;
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
        Some(m) => (
            core::complete_if_done(m),
            m.phase != core::MessagePhase::Completed,
        ),
        None => (None, false),
    };
    if let Some(ev) = done {
        txn.emit(&ev)?;
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
    let n = match item.seq {
        Seq::Producer(s) | Seq::Transport(s) => s,
    };
    let msg_id = match item.kind {
        InputKind::Chunk => format!("dlq:{}:{}:{n}", item.conv, item.msg),
        InputKind::Result => format!("dlq:{}:{}:result:{n}", item.conv, item.msg),
    };
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
