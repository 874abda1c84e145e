//! Tool results in the store: carrying out the matching decisions of
//! [`crate::core::matching`] (reads, record writes, events, `duplicate_result` dead letters).
//! Nothing is decided here.

use super::dead_letter::{dead_letter, dead_letter_part, Item};
use super::records::{from_bytes, to_bytes};
use super::txn::Txn;
use crate::core::matching::{
    self, CallIndex, DuplicateWhy, Intake, OrphanDecision, RegisterDecision, ResultDecision,
};
use crate::core::{PendingResult, ResultSource};
use crate::error::StoreError;
use crate::input::{Applied, InputKind, Seq};
use crate::keys::{self, ResultTag};
use chunk_model::wire::DeadLetterCode;
use chunk_model::ResultInput;
use serde_json::json;

/// The input a result arrived in: where it came from, and what its dead letter is made of if
/// it does not stand.
#[derive(Clone, Copy)]
pub(crate) struct Carrier<'a> {
    /// The input (a results message, or the chunk that carried the provider's own result).
    pub(crate) item: &'a Item<'a>,
    /// Producer-published or the provider's own.
    pub(crate) source: ResultSource,
    /// The input holds this one result and nothing else: if it does not stand, the input's
    /// verdict is its dead letter, with the input's own body (otherwise the dead letter's body
    /// is the result alone, in toolstream's own result shape).
    pub(crate) only: bool,
}

/// The results of one results message (`item`), each handled in order. The verdict is the
/// dead letter when the message holds one result and it does not stand; otherwise the message
/// is applied (any result in it that does not stand has its own dead letter).
pub(crate) fn apply_results(
    txn: &mut Txn<'_>,
    item: &Item<'_>,
    results: Vec<ResultInput>,
    now: u64,
) -> Result<Applied, StoreError> {
    let carrier = Carrier {
        item,
        source: ResultSource::Producer,
        only: results.len() == 1,
    };
    let mut verdict = Applied::Accepted { events: 0 };
    for r in results {
        match handle_result(txn, item.conv, item.msg, r, carrier, now)? {
            Some(dead) if carrier.only => verdict = dead,
            _ => {}
        }
    }
    Ok(verdict)
}

/// The provider's own results, carried in chunk `item` of message `msg` (`None`: a step
/// toolstream caused, which carries none; they are still handled, under a stand-in input).
pub(crate) fn stream_results(
    txn: &mut Txn<'_>,
    item: Option<&Item<'_>>,
    conv: &str,
    msg: &str,
    results: Vec<ResultInput>,
    now: u64,
) -> Result<(), StoreError> {
    let stand_in = Item {
        kind: InputKind::Chunk,
        conv,
        msg,
        provider: None,
        seq: Seq::Transport(0),
        control: None,
        body: b"",
        origin: None,
    };
    let carrier = Carrier {
        item: item.unwrap_or(&stand_in),
        source: ResultSource::Stream,
        only: false,
    };
    for r in results {
        let _dead = handle_result(txn, conv, msg, r, carrier, now)?;
    }
    Ok(())
}

/// A result in toolstream's own result shape: the body of its `duplicate_result` dead letter
/// when it was not the whole input (the headers name the input it came in).
fn result_body(r: &ResultInput) -> Vec<u8> {
    let value = match r {
        ResultInput::Complete(t) => json!({
            "tool_call_id": t.tool_call_id,
            "output": t.output,
            "is_error": t.is_error,
        }),
        ResultInput::Delta {
            tool_call_id,
            delta,
        } => json!({"tool_call_id": tool_call_id, "delta": delta}),
        ResultInput::Done {
            tool_call_id,
            is_error,
        } => json!({"tool_call_id": tool_call_id, "done": true, "is_error": is_error}),
    };
    value.to_string().into_bytes()
}

/// The `duplicate_result` dead letter of result `r` of `carrier`'s input.
fn reject(txn: &mut Txn<'_>, carrier: Carrier<'_>, r: &ResultInput, why: DuplicateWhy) -> Applied {
    let reason = DeadLetterCode::DuplicateResult.with(why.detail(r.tool_call_id()));
    if carrier.only {
        dead_letter(txn, carrier.item, &reason)
    } else {
        dead_letter_part(txn, carrier.item, &result_body(r), &reason)
    }
}

/// Dead-letters the pending producer result of `id` that the provider's own result (arriving
/// in `by`) displaces, with the facts of the input its first piece arrived in, and removes it
/// (its streamed pieces too).
fn displace(
    txn: &mut Txn<'_>,
    conv: &str,
    id: &str,
    pending: &PendingResult,
    by: &Item<'_>,
) -> Result<(), StoreError> {
    let result = take_result(txn, conv, id, pending)?;
    let body = match &pending.input_body {
        Some(body) => body.clone().into_bytes(),
        None => {
            let mut body = json!({
                "tool_call_id": result.tool_call_id,
                "output": result.output,
                "is_error": result.is_error,
            });
            if !pending.done {
                // (its `done` never came: the dead letter holds the text streamed so far)
                body["done"] = json!(false);
            }
            body.to_string().into_bytes()
        }
    };
    let item = Item {
        kind: InputKind::Result,
        conv,
        msg: &pending.message_id,
        provider: None,
        // (a record stored before results kept their input's number: the displacing input's)
        seq: pending.seq.unwrap_or(by.seq),
        control: None,
        body: &body,
        origin: pending.origin.as_ref(),
    };
    let reason = DeadLetterCode::DuplicateResult.with(DuplicateWhy::Displaced.detail(id));
    let _dead = dead_letter(txn, &item, &reason);
    txn.results_delete(keys::result(ResultTag::Pending, conv, id));
    txn.inner
        .pending
        .remove(&(conv.to_string(), id.to_string()));
    Ok(())
}

/// Reads the call index of `id` in `conv`.
fn read_index(txn: &Txn<'_>, conv: &str, id: &str) -> Result<Option<CallIndex>, StoreError> {
    match txn.results_get(&keys::result(ResultTag::CallIndex, conv, id))? {
        Some(bytes) => Ok(Some(from_bytes("results", &bytes)?)),
        None => Ok(None),
    }
}

/// Reads the pending result of `id` in `conv`.
fn read_pending(txn: &Txn<'_>, conv: &str, id: &str) -> Result<Option<PendingResult>, StoreError> {
    match txn.results_get(&keys::result(ResultTag::Pending, conv, id))? {
        Some(bytes) => Ok(Some(from_bytes("results", &bytes)?)),
        None => Ok(None),
    }
}

/// Indexes a call by its consumer-facing id and matches a complete result waiting for it
/// ([`matching::on_register`]).
pub(crate) fn register(
    txn: &mut Txn<'_>,
    conv: &str,
    msg: &str,
    pos: u32,
) -> Result<(), StoreError> {
    let id = txn
        .message_mut(conv, msg)?
        .and_then(|m| m.calls.get(pos as usize).and_then(|c| c.id.clone()));
    let Some(id) = id else {
        return Ok(());
    };
    let existing = read_index(txn, conv, &id)?;
    // (an answered id needs no look at its pending result: there is none)
    let pending = match &existing {
        Some(i) if i.resolved => None,
        _ => read_pending(txn, conv, &id)?,
    };
    let awaits = matching::awaits_stream(txn.message_mut(conv, msg)?.as_deref());
    match matching::on_register(existing.as_ref(), pending.as_ref(), awaits) {
        RegisterDecision::Skip => Ok(()),
        RegisterDecision::Index { matches } => {
            let index = CallIndex {
                message_id: msg.to_string(),
                index: pos,
                resolved: false,
                by_stream: false,
            };
            txn.results_put(
                keys::result(ResultTag::CallIndex, conv, &id),
                to_bytes("results", &index)?,
            );
            match pending {
                Some(pending) if matches => matched(txn, conv, &id, msg, pos, &pending),
                _ => Ok(()),
            }
        }
    }
}

/// Adds one result input that arrived on message `rmsg` in `carrier`'s input
/// ([`matching::on_intake`], [`matching::on_result`]). Returns the dead letter when the result
/// does not stand.
pub(crate) fn handle_result(
    txn: &mut Txn<'_>,
    conv: &str,
    rmsg: &str,
    input: ResultInput,
    carrier: Carrier<'_>,
    now: u64,
) -> Result<Option<Applied>, StoreError> {
    let id = input.tool_call_id().to_string();
    if id.trim().is_empty() {
        return Ok(None);
    }
    let index = read_index(txn, conv, &id)?;
    let mut pending = match &index {
        Some(i) if i.resolved => None,
        _ => read_pending(txn, conv, &id)?,
    };
    match matching::on_intake(
        &input,
        rmsg,
        carrier.source,
        index.as_ref(),
        pending.as_ref(),
    ) {
        Intake::Ignore => return Ok(None),
        Intake::Duplicate(why) => return Ok(Some(reject(txn, carrier, &input, why))),
        Intake::Displace => {
            if let Some(waiting) = pending.take() {
                displace(txn, conv, &id, &waiting, carrier.item)?;
            }
        }
        Intake::Take => {}
    }
    let mut pending = pending.unwrap_or_else(|| {
        let mut p = PendingResult::new(rmsg, now);
        p.source = carrier.source;
        p.origin = carrier.item.origin.cloned();
        p.seq = Some(carrier.item.seq);
        if carrier.only && carrier.source == ResultSource::Producer {
            p.input_body = std::str::from_utf8(carrier.item.body)
                .ok()
                .map(str::to_string);
        }
        p
    });
    if let Some((piece, delta)) = pending.absorb(input) {
        txn.results_put(keys::result_piece(conv, &id, piece), delta.into_bytes());
    }
    let awaits = match &index {
        Some(i) => matching::awaits_stream(txn.message_mut(conv, &i.message_id)?.as_deref()),
        None => false,
    };
    match matching::on_result(index.as_ref(), &pending, awaits) {
        ResultDecision::Match { message_id, index } => {
            matched(txn, conv, &id, &message_id, index, &pending)?;
        }
        ResultDecision::Wait => {
            txn.results_put(
                keys::result(ResultTag::Pending, conv, &id),
                to_bytes("results", &pending)?,
            );
            txn.inner
                .pending
                .insert((conv.to_string(), id), pending.received_ms);
        }
    }
    Ok(None)
}

/// Message `msg` has ended: the complete producer results that waited for it (its calls may
/// no longer get the provider's own) are matched now ([`matching::releases`]), in call order,
/// before `message.completed` lists the message's results.
pub(crate) fn release_on_end(txn: &mut Txn<'_>, conv: &str, msg: &str) -> Result<(), StoreError> {
    let ids: Vec<String> = match txn.message_mut(conv, msg)? {
        Some(m) if matching::streams_results(m.provider) => {
            m.calls.iter().filter_map(|c| c.id.clone()).collect()
        }
        _ => return Ok(()),
    };
    for id in ids {
        let index = read_index(txn, conv, &id)?;
        let Some(i) = index
            .as_ref()
            .filter(|i| !i.resolved && i.message_id == msg)
        else {
            continue;
        };
        let pending = read_pending(txn, conv, &id)?;
        if let (true, Some(p)) = (
            matching::releases(Some(i), msg, pending.as_ref()),
            pending.as_ref(),
        ) {
            matched(txn, conv, &id, msg, i.index, p)?;
        }
    }
    Ok(())
}

/// Carries out a match: `tool_result.completed` for the call (`call_msg`, `pos`), the call
/// resolved, the pending result gone.
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
    txn.emit(&matching::matched_event(conv, call_msg, provider, &result))?;
    let index = CallIndex {
        message_id: call_msg.to_string(),
        index: pos,
        resolved: true,
        by_stream: pending.source == ResultSource::Stream,
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

/// The orphan timer of the result for `id` ran out ([`matching::on_orphan_timer`]): emits
/// `tool_result.orphaned` when the decision says so.
pub(crate) fn orphan(txn: &mut Txn<'_>, conv: &str, id: &str) -> Result<(), StoreError> {
    txn.inner
        .pending
        .remove(&(conv.to_string(), id.to_string()));
    let call_indexed = txn
        .results_get(&keys::result(ResultTag::CallIndex, conv, id))?
        .is_some();
    let pending = if call_indexed {
        None
    } else {
        read_pending(txn, conv, id)?
    };
    let (OrphanDecision::Orphan { message_id }, Some(pending)) = (
        matching::on_orphan_timer(call_indexed, pending.as_ref()),
        pending,
    ) else {
        return Ok(());
    };
    let pkey = keys::result(ResultTag::Pending, conv, id);
    let result = take_result(txn, conv, id, &pending)?;
    let repeat = matching::orphan_is_repeat(txn.message_mut(conv, &message_id)?.as_deref(), id);
    if repeat {
        let body = match &pending.input_body {
            Some(body) => body.clone().into_bytes(),
            None => json!({
                "tool_call_id": result.tool_call_id,
                "output": result.output,
                "is_error": result.is_error,
            })
            .to_string()
            .into_bytes(),
        };
        let item = Item {
            kind: InputKind::Result,
            conv,
            msg: &message_id,
            provider: None,
            seq: pending.seq.unwrap_or(Seq::Transport(pending.received_ms)),
            control: None,
            body: &body,
            origin: pending.origin.as_ref(),
        };
        let reason = DeadLetterCode::DuplicateResult.with(DuplicateWhy::Orphaned.detail(id));
        let _dead = dead_letter(txn, &item, &reason);
        txn.results_delete(pkey);
        return Ok(());
    }
    let provider = txn.conversation_provider(conv)?;
    let ev = matching::orphaned_event(conv, &message_id, provider, &result);
    txn.message_or_new(conv, &message_id, None)?
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
