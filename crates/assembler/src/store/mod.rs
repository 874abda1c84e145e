//! [`Store`]: the imperative shell around the pure core. It owns the storage, a cache of open
//! streams and messages, and the counters; every `apply` and every timeout is one atomic
//! commit (state change + outbox rows + watermark); `flush` is the durability point.
//!
//! - `txn` — one unit of work: loads state through the cache, collects writes, commits.
//! - `apply` — ordering (duplicate / park / apply / release parked), numbering, decoding,
//!   stepping the core and persisting what it caused.
//! - `close` — ending a chunk stream's message for toolstream's reasons (a hole: `gap`,
//!   `lost_chunk`; or idle `timeout`), dead-lettering what was parked behind a hole.
//! - `results` — carrying out the result matching and orphan decisions of
//!   [`crate::core::matching`].
//! - `dead_letter` — an input's facts and its dead-letter row (wire headers and id).
//! - `tick` — gap, idle and orphan timeouts, then retention.
//! - `retention` — deleting completed messages `retention_ms` after completion or when more
//!   than `retention_max_messages` are kept (bounded per tick; the redelivery decision is
//!   documented there).
//! - `seen` — the producer numbers a stream has seen (duplicate detection), packed per 32
//!   numbers into one value; staged in the unit of work, merged at commit.
//! - `attempts` — the durable note of an input applied alone, and the process stops while
//!   applying it (poison detection).
//! - `snapshot` — what is stored for a message or a conversation.
//! - [`records`] — stored record forms; [`compact`] — the binary form of stream and message
//!   states that commits write (JSON at rest).
//! - `inner` — the in-memory part: cache, timers index, counters; rebuilt from storage on
//!   open and after a failed commit.

mod apply;
mod attempts;
mod checkpoint;
mod close;
pub mod compact;
mod dead_letter;
mod inner;
mod inspect;
pub mod records;
mod results;
mod retention;
mod seen;
mod snapshot;
mod tick;
mod txn;

pub use checkpoint::CheckpointStats;

use crate::config::Config;
use crate::error::StoreError;
use crate::input::{Applied, Input};
use crate::keys;
use crate::outbox::OutboxEntry;
use crate::storage::memory::MemoryStorage;
use crate::storage::sled_backend::SledStorage;
use crate::storage::{Space, Storage};
use chunk_model::MessageSnapshot;
use inner::Inner;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use inner::Retained;
pub use retention::EXPIRE_PER_TICK;

/// The assembler store. Cheap to clone (shared handles); `Send + Sync`. `apply` and `tick`
/// are serialized internally (one writer); outbox reads and removals run alongside.
#[derive(Clone)]
pub struct Store {
    storage: Arc<dyn Storage>,
    inner: Arc<Mutex<Inner>>,
    outbox_len: Arc<AtomicUsize>,
    /// Outbox rows with a key below this are durable (written before the last flush began);
    /// only those are handed to the relay.
    durable_before: Arc<AtomicU64>,
    /// `durable_before` as [`Store::take_relay_news`] last saw it.
    relay_told: Arc<AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("outbox_len", &self.outbox_len())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the sled store at `path`, recovering its state: the state of a
    /// prefix of the inputs applied before the last flush, and every unpublished outbox row.
    pub fn open(path: &Path, config: Config) -> Result<Store, StoreError> {
        let storage = SledStorage::open_with_cache(path, config.storage_cache_bytes)?
            .with_at_rest(compact::at_rest);
        Store::with_storage(Arc::new(storage), config)
    }

    /// A sled store in a temporary directory, removed when dropped.
    pub fn open_temporary(config: Config) -> Result<Store, StoreError> {
        let storage = SledStorage::temporary_with_cache(config.storage_cache_bytes)?
            .with_at_rest(compact::at_rest);
        Store::with_storage(Arc::new(storage), config)
    }

    /// A store on [`MemoryStorage`] (nothing is durable), for tests and benches.
    pub fn open_memory(config: Config) -> Result<Store, StoreError> {
        Store::with_storage(Arc::new(MemoryStorage::new()), config)
    }

    /// A store on any [`Storage`].
    pub fn with_storage(storage: Arc<dyn Storage>, config: Config) -> Result<Store, StoreError> {
        attempts::recover(storage.as_ref())?;
        let inner = Inner::load(storage.as_ref(), config)?;
        let outbox_len = storage.count(Space::Outbox)?;
        // Everything found at open survived a restart: it is durable.
        let durable_before = inner.outbox_next;
        Ok(Store {
            storage,
            inner: Arc::new(Mutex::new(inner)),
            outbox_len: Arc::new(AtomicUsize::new(outbox_len)),
            durable_before: Arc::new(AtomicU64::new(durable_before)),
            relay_told: Arc::new(AtomicU64::new(durable_before)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic inside apply cannot leave storage half-written (commits are atomic); the
        // cache is rebuilt below when it may be stale.
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                g.stale = true;
                g
            }
        }
    }

    fn locked(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        let mut g = self.lock();
        if g.stale {
            let config = g.config.clone();
            *g = Inner::load(self.storage.as_ref(), config)?;
        }
        Ok(g)
    }

    /// Applies one input in ONE atomic commit: the state change, the outbox rows for the
    /// events it caused, and the stream's watermark. Not durable until [`Store::flush`].
    /// Malformed input is not an error: it is [`Applied::DeadLettered`].
    pub fn apply(&self, input: &Input<'_>, now_ms: u64) -> Result<Applied, StoreError> {
        let mut inner = self.locked()?;
        let storage = self.storage.as_ref();
        let result = apply::apply(&mut inner, storage, input, None, now_ms);
        self.settle(&mut inner, result)
    }

    /// Dead-letters an input the caller could not read (bad headers, say why in `reason`) in
    /// ONE atomic commit, like [`Store::apply`] does with an undecodable one: a redelivery is
    /// a duplicate, and a chunk ends its stream (`lost_chunk`), so the call it belonged to can
    /// never end `completed`.
    pub fn reject(
        &self,
        input: &Input<'_>,
        reason: &str,
        now_ms: u64,
    ) -> Result<Applied, StoreError> {
        let mut inner = self.locked()?;
        let storage = self.storage.as_ref();
        let result = apply::apply(&mut inner, storage, input, Some(reason), now_ms);
        self.settle(&mut inner, result)
    }

    /// Runs the timeouts due at `now_ms` (gap, idle, orphaned results), then retention
    /// (completed messages older than `retention_ms`, at most [`EXPIRE_PER_TICK`] per call,
    /// each deleted in one commit); each change is one commit. Returns the number of events
    /// created (retention creates none).
    pub fn tick(&self, now_ms: u64) -> Result<usize, StoreError> {
        let mut inner = self.locked()?;
        let storage = self.storage.as_ref();
        let result = tick::tick(&mut inner, storage, now_ms, &self.outbox_len);
        match result {
            Ok(n) => Ok(n),
            Err(e) => {
                inner.stale = true;
                Err(e)
            }
        }
    }

    fn settle(
        &self,
        inner: &mut Inner,
        result: Result<(Applied, usize), StoreError>,
    ) -> Result<Applied, StoreError> {
        match result {
            Ok((applied, rows)) => {
                self.outbox_len.fetch_add(rows, Ordering::Relaxed);
                Ok(applied)
            }
            Err(e) => {
                inner.stale = true;
                Err(e)
            }
        }
    }

    /// Makes every commit so far durable (group commit: call once per batch, then ack it),
    /// and hands the outbox rows those commits wrote to the relay.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.make_durable(|storage| storage.flush())
    }

    /// [`Store::flush`], leaving nothing for the next open to replay ([`Storage::settle`]):
    /// the last call of a clean stop.
    pub fn flush_settled(&self) -> Result<(), StoreError> {
        self.make_durable(|storage| storage.settle())
    }

    /// Runs `durable` (a flush of the storage) and hands the relay the outbox rows it made
    /// durable.
    fn make_durable(
        &self,
        durable: impl FnOnce(&dyn Storage) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        // Rows numbered below `mark` were committed before this flush began, so the flush
        // makes them durable; rows committed meanwhile wait for the next flush.
        let mark = self.locked()?.outbox_next;
        durable(self.storage.as_ref())?;
        self.durable_before.fetch_max(mark, Ordering::AcqRel);
        Ok(())
    }

    /// Whether outbox rows became durable since the last call, by whichever flush: then the
    /// relay has rows to publish that it may not have seen. Each call takes the news: the next
    /// says `false` until a flush makes more rows durable. Rows found at open are not news
    /// (the relay's first round reads them).
    ///
    /// A flush that made no row durable (a batch of fragments that completed nothing, the
    /// usual batch when input is sparse) need not wake the relay for a round that would find
    /// nothing; and a flush that returns after another one made its rows durable finds them
    /// told already.
    pub fn take_relay_news(&self) -> bool {
        let durable = self.durable_before.load(Ordering::Acquire);
        self.relay_told.fetch_max(durable, Ordering::AcqRel) < durable
    }

    /// Up to `limit` *durable* outbox rows, oldest first. A row becomes visible here only
    /// after a [`Store::flush`] made it durable, so nothing is published that a crash could
    /// take back (a timeout event, say, that a late chunk would then contradict).
    pub fn outbox_peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let durable_before = self.durable_before.load(Ordering::Acquire);
        self.storage
            .first_n(Space::Outbox, limit)?
            .into_iter()
            .filter(|(k, _)| keys::outbox_key(k).is_some_and(|key| key < durable_before))
            .map(|(k, v)| {
                keys::outbox_key(&k)
                    .and_then(|key| OutboxEntry::decode(key, &v))
                    .ok_or_else(|| StoreError::Corrupt {
                        space: "outbox",
                        detail: "unreadable row".into(),
                    })
            })
            .collect()
    }

    /// Deletes an outbox row after its publication was confirmed (no-op when already gone).
    pub fn outbox_remove(&self, key: u64) -> Result<(), StoreError> {
        if self.storage.remove(Space::Outbox, &keys::outbox(key))? {
            self.outbox_len.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Number of outbox rows.
    pub fn outbox_len(&self) -> usize {
        self.outbox_len.load(Ordering::Relaxed)
    }

    /// Number of chunk streams whose message has not completed.
    pub fn open_streams(&self) -> usize {
        self.lock().open.len()
    }

    /// Completed messages and tombstones kept, as counted for `retention_max_messages`
    /// (`None` when that setting is 0: then nothing is counted).
    pub fn retained(&self) -> Option<Retained> {
        let inner = self.lock();
        (inner.config.retention_max_messages > 0).then_some(inner.retained)
    }

    /// The stored calls and results of one message, if it is known.
    pub fn message_snapshot(
        &self,
        conv: &str,
        msg: &str,
    ) -> Result<Option<MessageSnapshot>, StoreError> {
        let inner = self.locked()?;
        snapshot::message(&inner, self.storage.as_ref(), conv, msg)
    }

    /// Every stored message of a conversation, in conversation (first-seen) order.
    pub fn conversation(&self, conv: &str) -> Result<Vec<MessageSnapshot>, StoreError> {
        let inner = self.locked()?;
        snapshot::conversation(&inner, self.storage.as_ref(), conv)
    }
}
