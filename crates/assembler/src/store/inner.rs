//! The in-memory part of the store: a cache of live streams and messages, the timer
//! indexes, and counters. Everything here can be rebuilt from storage ([`Inner::load`]).

use super::records::from_bytes;
use crate::config::Config;
use crate::core::{Limits, MessageState, PendingResult, StreamState};
use crate::error::StoreError;
use crate::hash::FastMap;
use crate::keys;
use crate::storage::{Space, Storage};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Cache, indexes and counters.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The configuration.
    pub config: Config,
    /// The limits the core enforces.
    pub limits: Limits,
    /// Streams that are open or have parked inputs, by stream key (less those the current
    /// unit of work took out: `store::txn`, `Txn::stream`).
    pub streams: FastMap<Vec<u8>, StreamState>,
    /// Messages not completed yet (without their argument text, see
    /// [`crate::core::CallState::text_held`]), by message key: at most
    /// `config.message_cache_entries` between units of work (every one is stored).
    pub messages: FastMap<Vec<u8>, MessageState>,
    /// Keys of `messages` in the order they were put there, oldest first (may name entries
    /// that are gone): the eviction order.
    pub message_order: VecDeque<Vec<u8>>,
    /// Chunk streams whose message has not completed (idle timer applies).
    pub open: BTreeSet<Vec<u8>>,
    /// Streams with parked inputs (gap timer applies).
    pub gapped: BTreeSet<Vec<u8>>,
    /// Results waiting for their call: (conversation, call id) → arrival time.
    pub pending: BTreeMap<(String, String), u64>,
    /// The group of fingerprints each live stream is filling, as last committed
    /// (`store::seen`).
    pub seen: super::seen::Cache,
    /// Next outbox key.
    pub outbox_next: u64,
    /// Next message order number.
    pub order_next: u64,
    /// Entries of the retention index ([`Space::Done`]), by kind: what
    /// `retention_max_messages` bounds. Counted only when that setting is not 0 (read at
    /// load, one pass over the index's keys); kept up to date by the commits that write or
    /// delete entries (a message's completion, retention).
    pub retained: Retained,
    /// The cache may disagree with storage (a commit failed): reload before use.
    pub stale: bool,
    /// Where events are serialized before they become outbox rows ([`super::txn::Txn::emit`]),
    /// kept between them so that an event is not written into a buffer growing from empty
    /// (its capacity is dropped past [`EVENT_BUF_KEEP`]).
    pub event_buf: Vec<u8>,
    /// The lists of a unit of work, empty between units ([`super::txn::Lists`]).
    pub unit_lists: super::txn::Lists,
}

/// Capacity of [`Inner::event_buf`] kept for the next event (a larger event's is freed).
pub const EVENT_BUF_KEEP: usize = 1 << 20;

/// Completed messages and tombstones kept in the store, as counted by the retention index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retained {
    /// Completed messages not deleted yet.
    pub messages: usize,
    /// Deleted messages whose stream tombstones are still kept.
    pub tombstones: usize,
}

fn read_u64(storage: &dyn Storage, key: &[u8]) -> Result<u64, StoreError> {
    Ok(storage
        .get(Space::Meta, key)?
        .and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0))
}

impl Inner {
    /// Rebuilds the in-memory part from storage.
    pub fn load(storage: &dyn Storage, config: Config) -> Result<Inner, StoreError> {
        let mut inner = Inner {
            limits: Limits {
                max_argument_bytes: config.max_argument_bytes,
                max_calls_per_message: config.max_calls_per_message,
            },
            config,
            streams: FastMap::default(),
            messages: FastMap::default(),
            message_order: VecDeque::new(),
            open: BTreeSet::new(),
            gapped: BTreeSet::new(),
            pending: BTreeMap::new(),
            seen: Default::default(),
            outbox_next: 0,
            order_next: 0,
            retained: Retained::default(),
            stale: false,
            event_buf: Vec::new(),
            unit_lists: Default::default(),
        };
        for (k, _) in storage.scan_prefix(Space::Live, b"")? {
            let Some(v) = storage.get(Space::Streams, &k)? else {
                continue;
            };
            let st = super::compact::decode_stream(&v)?;
            if st.open || st.parked > 0 {
                inner.index_stream(&k, st.open, st.parked);
                inner.streams.insert(k, st);
            }
        }
        for (k, v) in storage.scan_prefix(Space::Results, b"p")? {
            let p: PendingResult = from_bytes("results", &v)?;
            if let Some(ids) = keys::parse_pending(&k) {
                inner.pending.insert(ids, p.received_ms);
            }
        }
        if inner.config.retention_max_messages > 0 {
            inner.retained = count_retained(storage)?;
        }
        // Keys keep increasing across restarts even when every row was removed: the counter
        // is written in the same commit as the rows it numbers.
        inner.outbox_next = read_u64(storage, keys::META_OUTBOX_NEXT)?;
        inner.order_next = read_u64(storage, keys::META_ORDER_NEXT)?;
        Ok(inner)
    }

    /// Notes a completed message written to the retention index by the unit of work in
    /// progress (if that unit fails, the cache is stale and [`Inner::load`] counts again).
    pub fn note_completed(&mut self) {
        self.retained.messages += 1;
    }

    /// Updates the timer indexes for a stream's current state (whether it is `open`, and
    /// how many inputs it has `parked`).
    pub fn index_stream(&mut self, key: &[u8], open: bool, parked: u64) {
        // (a lookup before an insert: most commits leave a stream as it was indexed)
        if !open {
            self.open.remove(key);
        } else if !self.open.contains(key) {
            self.open.insert(key.to_vec());
        }
        if parked == 0 {
            self.gapped.remove(key);
        } else if !self.gapped.contains(key) {
            self.gapped.insert(key.to_vec());
        }
    }
}

/// Counts the retention index's entries by kind (keys only; values are empty).
fn count_retained(storage: &dyn Storage) -> Result<Retained, StoreError> {
    let mut retained = Retained::default();
    for (k, _) in storage.scan_prefix(Space::Done, b"")? {
        match keys::parse_done(&k).map(|(_, tag, _, _)| tag) {
            Some(keys::DoneTag::Message) => retained.messages += 1,
            Some(keys::DoneTag::Tombstone) => retained.tombstones += 1,
            None => {}
        }
    }
    Ok(retained)
}
