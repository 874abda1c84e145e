//! Tool results in the store: carrying out the matching decisions of
//! [`crate::core::matching`] (reads, record writes, events). Nothing is decided here.

use super::records::{from_bytes, to_bytes};
use super::txn::Txn;
use crate::core::matching::{self, CallIndex, OrphanDecision, RegisterDecision, ResultDecision};
use crate::core::PendingResult;
use crate::error::StoreError;
use crate::keys::{self, ResultTag};
use chunk_model::ResultInput;

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
    match matching::on_register(existing.as_ref(), pending.as_ref()) {
        RegisterDecision::Skip => Ok(()),
        RegisterDecision::Index { matches } => {
            let index = CallIndex {
                message_id: msg.to_string(),
                index: pos,
                resolved: false,
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

/// Adds one result input that arrived on message `rmsg` ([`matching::takes_result`],
/// [`matching::on_result`]).
pub(crate) fn handle_result(
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
    let index = read_index(txn, conv, &id)?;
    if !matching::takes_result(&id, index.as_ref()) {
        return Ok(());
    }
    let mut pending =
        read_pending(txn, conv, &id)?.unwrap_or_else(|| PendingResult::new(rmsg, now));
    if let Some((piece, delta)) = pending.absorb(input) {
        txn.results_put(keys::result_piece(conv, &id, piece), delta.into_bytes());
    }
    match matching::on_result(index.as_ref(), &pending) {
        ResultDecision::Match { message_id, index } => {
            matched(txn, conv, &id, &message_id, index, &pending)
        }
        ResultDecision::Wait => {
            txn.results_put(
                keys::result(ResultTag::Pending, conv, &id),
                to_bytes("results", &pending)?,
            );
            txn.inner
                .pending
                .insert((conv.to_string(), id), pending.received_ms);
            Ok(())
        }
    }
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
