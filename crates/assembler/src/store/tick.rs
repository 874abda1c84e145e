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
        match kind {
            InputKind::Chunk => close_stream(&mut txn, &key, &conv, &msg, Reason::Gap, now)?,
            InputKind::Result => {
                let first = txn
                    .storage
                    .scan_prefix(Space::Parked, &key)?
                    .first()
                    .and_then(|(k, _)| k.get(key.len()..))
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes);
                let st = txn.stream_mut(&key)?;
                match first {
                    Some(first) => st.next = first,
                    None => st.discard_parked(),
                }
                drain(&mut txn, &key, kind, &conv, &msg, now)?;
            }
        }
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
