//! Retention: deleting completed messages `retention_ms` after their `message.completed`, or
//! early when more than `retention_max_messages` are kept (oldest first, like Kafka's
//! `retention.bytes` beside `retention.ms`), each message in ONE commit, a bounded number per
//! tick. Both bounds delete through the same path ([`delete_message`]) and leave the same
//! tombstones.
//!
//! The retention index ([`Space::Done`]) holds `(time, tag, message key)`, written in the
//! commit that completes a message, so expiry scans from the oldest entry and stops at the
//! first one not due: no scan of all history.
//!
//! Deleting a message removes its state record, its argument pieces (text and path), the
//! call-id index entries that point at it, and the parked inputs of its chunk and result
//! streams. Its stream records are replaced by tombstones that keep only the watermark (the
//! chunk stream also `closed`), indexed for deletion one more `retention_ms` later.
//!
//! Redelivery decision: a redelivered chunk of a deleted message meets its tombstone and is
//! a duplicate (or, past the watermark, consumed without effect as on any closed stream), so
//! it never re-opens the message. Once the tombstone is gone too (2 × `retention_ms` after
//! completion, far beyond any JetStream redelivery or `max_age` in practice) such a chunk
//! would start a new message. A result that arrives for a call of a deleted message finds no
//! call: it waits `orphan_grace_ms` and becomes `tool_result.orphaned` (recorded on a new
//! record for its results subject's message, which retention does not delete: it never
//! completes). The result-stream tombstone is not closed, so such new results still apply.
//! Messages completed before the index existed have no entry and are kept. Outbox rows are
//! never touched (the relay owns them), nor the conversation's provider record.
//!
//! Over the count bound, messages whose calls still await their results (a completed function
//! or custom call without a result: the agent's tool may run for minutes or hours, and
//! deleting the message turns its result into `tool_result.orphaned`) go last: within one
//! tick's read of the index (its oldest 2 × [`EXPIRE_PER_TICK`] entries) the answered ones are
//! deleted first, and only a store still over the bound then deletes the oldest of those still
//! running. So a running tool's message survives while fewer than about 2,000 older messages
//! also wait for results, and the bound holds whether or not producers send results. Entries
//! never move: `retention_ms` counts from the completion for every message.
//!
//! Count bound (`retention_max_messages` = `n`, not 0): the index's entries are counted in
//! memory by kind ([`super::inner::Retained`]: read at open with one pass over the index's
//! keys, then moved by the commits that write entries — a completion, here). Past `n` kept
//! messages the oldest are deleted as above; past `n` tombstones the oldest are dropped. What a
//! tombstone protects is the redelivery decision above; bounding tombstones by count shortens
//! it from "2 × `retention_ms` after completion" to "until about `n` messages were deleted
//! after this one", i.e. about 2 `n` completions after its own (whichever ends first). A
//! redelivery later than that starts a new stream instead of being a duplicate: its chunks
//! end as a new stream's would (from sequence 0, a call that ends `abandoned`/`timeout`; from
//! a later number, a gap that ends `gap`), visible, never a second `completed` of the old
//! call unless every chunk is re-sent. JetStream redelivers only unacked inputs, within
//! `ack_wait`, so this needs a producer re-publishing an old message or more than 2 `n`
//! completions per partition within a redelivery. Without a tombstone bound the tombstones,
//! which are records too (a stream record and an index entry each), would grow with the
//! completion rate × `retention_ms` exactly like the messages did.

use super::inner::Inner;
use super::records::{from_bytes, CallIndex};
use crate::core::{MessagePhase, PendingResult, StreamState};
use crate::error::StoreError;
use crate::input::InputKind;
use crate::keys::{self, DoneTag, ResultTag};
use crate::storage::{Space, Storage, WriteSet};
use chunk_model::{CallKind, CallStatus};

/// Most messages deleted by one tick, and most tombstones dropped, so one tick never stalls
/// the consume loop; the rest wait for the next tick.
pub const EXPIRE_PER_TICK: usize = 1_000;

/// Deletes what is due at `now` (by `retention_ms`) and what is over the count bound
/// (`retention_max_messages`), oldest first: at most [`EXPIRE_PER_TICK`] messages deleted and
/// as many tombstones dropped, from one read of the index's first 2 × [`EXPIRE_PER_TICK`]
/// entries. Returns the number of entries handled.
///
/// Order: the index is in time order, messages by completion and tombstones by deletion.
/// Under the count bound the `k`-th deletion is of the `k`-th completion and happens at about
/// the `(k + n)`-th completion, so a tombstone's entry sits beside the messages that completed
/// when it was written and the oldest message and the oldest tombstone are both near the
/// start: an entry within its bound that stands before one over it is passed over (it counts
/// against the read), and in a steady state few are. After a burst (many completions within
/// one tick), tombstones can sit behind up to `n` kept messages and wait for them: the
/// tombstone count then stays above the bound until those messages are deleted (at most
/// `2 n` tombstones, transiently).
pub(crate) fn expire(
    inner: &mut Inner,
    storage: &dyn Storage,
    now: u64,
) -> Result<usize, StoreError> {
    let retention = inner.config.retention_ms;
    let cap = inner.config.retention_max_messages;
    let over = |inner: &Inner, tag: DoneTag| {
        cap > 0
            && match tag {
                DoneTag::Message => inner.retained.messages > cap,
                DoneTag::Tombstone => inner.retained.tombstones > cap,
            }
    };
    let any_over = |inner: &Inner| over(inner, DoneTag::Message) || over(inner, DoneTag::Tombstone);
    if retention == 0 && !any_over(inner) {
        return Ok(0);
    }
    let (mut deleted, mut dropped) = (0, 0);
    // messages over the count bound whose tools are still running: they go last
    let mut running: Vec<(Vec<u8>, String, String)> = Vec::new();
    for (key, _) in storage.first_n(Space::Done, 2 * EXPIRE_PER_TICK)? {
        let (at, tag, conv, msg) = keys::parse_done(&key).ok_or_else(|| StoreError::Corrupt {
            space: "done",
            detail: "unreadable retention key".into(),
        })?;
        let due = retention > 0 && now.saturating_sub(at) >= retention;
        if !due {
            if !any_over(inner) {
                // in time order: nothing later is due either
                break;
            }
            if !over(inner, tag) {
                continue;
            }
        }
        match tag {
            DoneTag::Message if deleted < EXPIRE_PER_TICK => {
                if !due && awaits_results(storage, &conv, &msg)? {
                    // Its tool is still running: the answered ones go first.
                    running.push((key, conv, msg));
                    continue;
                }
                delete_message(inner, storage, &key, &conv, &msg, now)?;
                deleted += 1;
            }
            DoneTag::Tombstone if dropped < EXPIRE_PER_TICK => {
                drop_tombstones(inner, storage, &key, &conv, &msg)?;
                dropped += 1;
            }
            _ => {}
        }
        if deleted >= EXPIRE_PER_TICK && dropped >= EXPIRE_PER_TICK {
            break;
        }
    }
    // Still over the bound with no answered message left to delete in this read: the bound
    // holds (memory is bounded by it whether or not producers send results), the oldest
    // messages whose tools are still running go too. The rest stay where they are.
    for (key, conv, msg) in running {
        if !over(inner, DoneTag::Message) || deleted >= EXPIRE_PER_TICK {
            break;
        }
        delete_message(inner, storage, &key, &conv, &msg, now)?;
        deleted += 1;
    }
    Ok(deleted + dropped)
}

/// Whether message `msg` has a completed call that a tool executes (a function or custom
/// call) and no result for it yet: the agent is still running that tool.
fn awaits_results(storage: &dyn Storage, conv: &str, msg: &str) -> Result<bool, StoreError> {
    let Some(v) = storage.get(Space::Messages, &keys::message(conv, msg))? else {
        return Ok(false);
    };
    let m = super::compact::decode_message(&v)?;
    Ok(m.calls.iter().any(|c| {
        c.status == CallStatus::Completed
            && matches!(c.kind, CallKind::Function | CallKind::Custom)
            && c.id
                .as_deref()
                .is_some_and(|id| !m.tool_results.iter().any(|r| r.tool_call_id == id))
    }))
}

/// The stream's current state: the cache holds the newest for live streams.
fn stream_state(
    inner: &Inner,
    storage: &dyn Storage,
    skey: &[u8],
) -> Result<Option<StreamState>, StoreError> {
    if let Some(st) = inner.streams.get(skey) {
        return Ok(Some(st.clone()));
    }
    match storage.get(Space::Streams, skey)? {
        Some(v) => Ok(Some(super::compact::decode_stream(&v)?)),
        None => Ok(None),
    }
}

/// Deletes one completed message in one commit, leaving stream tombstones.
fn delete_message(
    inner: &mut Inner,
    storage: &dyn Storage,
    done_key: &[u8],
    conv: &str,
    msg: &str,
    now: u64,
) -> Result<(), StoreError> {
    let mkey = keys::message(conv, msg);
    let mut w = WriteSet::default();
    w.delete(Space::Done, done_key.to_vec());
    // Results waiting (still streaming) for one of its calls: they lose their call and
    // become orphans after the grace period.
    let mut unmatched: Vec<(String, u64)> = Vec::new();
    let message = match storage.get(Space::Messages, &mkey)? {
        Some(v) => Some(super::compact::decode_message(&v)?),
        None => None,
    };
    if message
        .as_ref()
        .is_some_and(|m| m.phase != MessagePhase::Completed)
    {
        // Not the message that completed (cannot happen: a completed message stays so);
        // drop the stale entry and touch nothing else.
        storage.commit(w)?;
        inner.retained.messages = inner.retained.messages.saturating_sub(1);
        return Ok(());
    }
    if let Some(m) = message {
        for id in m.calls.iter().filter_map(|c| c.id.as_deref()) {
            let ikey = keys::result(ResultTag::CallIndex, conv, id);
            let Some(v) = storage.get(Space::Results, &ikey)? else {
                continue;
            };
            let index: CallIndex = from_bytes("results", &v)?;
            if index.message_id != msg {
                continue;
            }
            w.delete(Space::Results, ikey);
            let pkey = keys::result(ResultTag::Pending, conv, id);
            if let Some(v) = storage.get(Space::Results, &pkey)? {
                let pending: PendingResult = from_bytes("results", &v)?;
                unmatched.push((id.to_string(), pending.received_ms));
            }
        }
        w.delete(Space::Messages, mkey.clone());
        for (k, _) in storage.scan_prefix(Space::Args, &mkey)? {
            w.delete(Space::Args, k);
        }
    }
    let mut tombstoned = Vec::new();
    for kind in [InputKind::Chunk, InputKind::Result] {
        let skey = keys::stream(kind, conv, msg);
        inner.seen.remove(&skey);
        for space in [Space::Parked, Space::Seen, Space::SeenSets] {
            for (k, _) in storage.scan_prefix(space, &skey)? {
                w.delete(space, k);
            }
        }
        let Some(mut st) = stream_state(inner, storage, &skey)? else {
            continue;
        };
        st.discard_parked();
        st.open = false;
        st.closed = kind == InputKind::Chunk;
        w.put(
            Space::Streams,
            skey.clone(),
            super::compact::encode_stream(&st),
        );
        w.delete(Space::Live, skey.clone());
        tombstoned.push(skey);
    }
    if !tombstoned.is_empty() {
        w.put(
            Space::Done,
            keys::done(now, DoneTag::Tombstone, conv, msg),
            Vec::new(),
        );
    }
    storage.commit(w)?;
    inner.retained.messages = inner.retained.messages.saturating_sub(1);
    if !tombstoned.is_empty() {
        inner.retained.tombstones += 1;
    }
    for skey in &tombstoned {
        inner.streams.remove(skey);
        inner.open.remove(skey);
        inner.gapped.remove(skey);
    }
    inner.messages.remove(&mkey);
    for (id, received_ms) in unmatched {
        inner
            .pending
            .entry((conv.to_string(), id))
            .or_insert(received_ms);
    }
    Ok(())
}

/// Deletes a deleted message's stream tombstones (one commit). A stream that became live
/// again since (a result stream waiting behind a gap) is left to its own timers.
fn drop_tombstones(
    inner: &mut Inner,
    storage: &dyn Storage,
    done_key: &[u8],
    conv: &str,
    msg: &str,
) -> Result<(), StoreError> {
    let mut w = WriteSet::default();
    w.delete(Space::Done, done_key.to_vec());
    for kind in [InputKind::Chunk, InputKind::Result] {
        let skey = keys::stream(kind, conv, msg);
        if !inner.streams.contains_key(&skey) {
            w.delete(Space::Streams, skey);
        }
    }
    storage.commit(w)?;
    inner.retained.tombstones = inner.retained.tombstones.saturating_sub(1);
    Ok(())
}
