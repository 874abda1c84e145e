//! Timeouts, each change its own commit: unfilled sequence gaps, idle streams, results whose
//! call never appeared, then retention (see `store::retention`). See [`crate::core::order`]
//! for the gap decision.

use super::apply::drain;
use super::close::{close_stream, end_stream};
use super::inner::Inner;
use super::results::orphan;
use super::txn::Txn;
use crate::error::StoreError;
use crate::input::InputKind;
use crate::keys;
use crate::storage::{Space, Storage};
use chunk_model::wire::Reason;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs every timeout due at `now`. Returns the number of events created.
pub(crate) fn tick(
    inner: &mut Inner,
    storage: &dyn Storage,
    now: u64,
    outbox_len: &AtomicUsize,
) -> Result<usize, StoreError> {
    let mut total = 0;
    let mut done = |(events, rows): (usize, usize)| {
        outbox_len.fetch_add(rows, Ordering::Relaxed);
        total += events;
    };
    let gap_timeout = inner.config.gap_timeout_ms;
    let expired_gaps: Vec<Vec<u8>> = inner
        .gapped
        .iter()
        .filter(|k| {
            inner
                .streams
                .get(*k)
                .is_some_and(|st| st.gap_expired(now, gap_timeout))
        })
        .cloned()
        .collect();
    for key in expired_gaps {
        let Some((kind, conv, msg)) = keys::parse_stream(&key) else {
            continue;
        };
        let mut txn = Txn::new(inner, storage);
        expire_gap(&mut txn, &key, kind, &conv, &msg, now)?;
        done(txn.commit()?);
    }
    let idle_timeout = inner.config.idle_timeout_ms;
    let idle: Vec<Vec<u8>> = inner
        .open
        .iter()
        .filter(|k| {
            inner
                .streams
                .get(*k)
                .is_some_and(|st| st.idle_expired(now, idle_timeout))
        })
        .cloned()
        .collect();
    for key in idle {
        let Some((_, conv, msg)) = keys::parse_stream(&key) else {
            continue;
        };
        let mut txn = Txn::new(inner, storage);
        end_stream(&mut txn, &key, &conv, &msg, Reason::Timeout, now)?;
        done(txn.commit()?);
    }
    let grace = inner.config.orphan_grace_ms;
    let orphans: Vec<(String, String)> = inner
        .pending
        .iter()
        .filter(|(_, t)| now.saturating_sub(**t) >= grace)
        .map(|(k, _)| k.clone())
        .collect();
    for (conv, id) in orphans {
        let mut txn = Txn::new(inner, storage);
        orphan(&mut txn, &conv, &id)?;
        done(txn.commit()?);
    }
    super::retention::expire(inner, storage, now)?;
    Ok(total)
}

/// A stream whose sequence gap ran out at `now`: a chunk stream is closed (`gap`); a result
/// stream goes on past the hole with what was parked behind it.
pub(crate) fn expire_gap(
    txn: &mut Txn<'_>,
    key: &[u8],
    kind: InputKind,
    conv: &str,
    msg: &str,
    now: u64,
) -> Result<(), StoreError> {
    match kind {
        InputKind::Chunk => close_stream(txn, key, conv, msg, Reason::Gap, now),
        InputKind::Result => {
            let first = txn
                .storage
                .scan_prefix(Space::Parked, key)?
                .first()
                .and_then(|(k, _)| k.get(key.len()..))
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes);
            let st = txn.stream_mut(key)?;
            match first {
                Some(first) => st.next = first,
                None => st.discard_parked(),
            }
            drain(txn, key, kind, conv, msg, now)
        }
    }
}

/// The timeouts of an input's own stream and conversation that ran out by its publish time
/// `now`, applied before the input as `tick` would have applied them: a gap that did not fill,
/// an idle chunk stream, results whose call did not appear within the grace. So what an input
/// finds depends only on publish times, never on when timers last ran: a partition rebuilt
/// from the input stream (leases, a new owner) decides exactly as its first owner did, and a
/// late input applied before the next tick finds its stream as a tick would have left it.
pub(crate) fn expire_due(
    txn: &mut Txn<'_>,
    key: &[u8],
    kind: InputKind,
    conv: &str,
    msg: &str,
    now: u64,
) -> Result<(), StoreError> {
    let (gap_timeout, idle_timeout, grace) = (
        txn.inner.config.gap_timeout_ms,
        txn.inner.config.idle_timeout_ms,
        txn.inner.config.orphan_grace_ms,
    );
    // What `tick` walks: the gapped and open streams, every one of which the cache holds (a
    // stream with a timer is live, and live streams stay cached): no storage read, and for
    // most inputs one hash lookup, for a stream without a timer due.
    let (gapped, open) = match txn.cached_stream(key) {
        Some(st) => (st.parked > 0, st.open),
        None => (false, false),
    };
    let gap = gapped && txn.stream(key)?.gap_expired(now, gap_timeout);
    if gap {
        expire_gap(txn, key, kind, conv, msg, now)?;
    } else if kind == InputKind::Chunk && open && txn.stream(key)?.idle_expired(now, idle_timeout) {
        end_stream(txn, key, conv, msg, Reason::Timeout, now)?;
    }
    if txn.inner.pending.is_empty() {
        return Ok(());
    }
    // only this conversation's pending results (the map is ordered by conversation first):
    // this runs before every input
    let orphans: Vec<(String, String)> = txn
        .inner
        .pending
        .range((conv.to_string(), String::new())..)
        .take_while(|((c, _), _)| c == conv)
        .filter(|(_, t)| now.saturating_sub(**t) >= grace)
        .map(|(k, _)| k.clone())
        .collect();
    for (c, id) in orphans {
        orphan(txn, &c, &id)?;
    }
    Ok(())
}
