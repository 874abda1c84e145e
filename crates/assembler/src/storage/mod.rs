//! The storage seam: a few ordered keyspaces, atomic batched commits, and an explicit
//! durability point.
//!
//! ## Contract
//! - [`Storage::commit`] applies a [`WriteSet`] **atomically**: after a crash at any moment,
//!   either every write of the set is visible or none is. Commits are applied in call order,
//!   and a later read sees an earlier commit.
//! - A commit is **not durable** until [`Storage::flush`] returns: a crash may lose any suffix
//!   of the commits made since the last flush (never a middle one, never part of one). So the
//!   caller acks its inputs only after `flush` (group commit: one flush per batch).
//! - Reads ([`Storage::get`], [`Storage::scan_prefix`], [`Storage::first_n`]) see all commits
//!   made so far, flushed or not.
//! - Keys are compared as bytes; [`crate::keys`] builds keys whose byte order is the
//!   wanted order.
//!
//! Two implementations: [`sled_backend::SledStorage`] (every keyspace in one sled tree under a
//! one-byte prefix, behind in-memory layers of writes; commits log what they change as they
//! go, `flush` appends that to a log file of its own and syncs it, and from every 256th flush
//! on, each flush writes a slice of what the window before wrote to sled) and [`memory::MemoryStorage`] (`BTreeMap`s behind a mutex,
//! flush is a no-op and nothing survives a drop) for tests.

pub mod memory;
pub mod sled_backend;

use crate::error::StoreError;

/// A stored (key, value) pair.
pub type Pair = (Vec<u8>, Vec<u8>);

/// A keyspace: keys of one kind in byte order, apart from every other space's keys (each
/// backend chooses how; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Per-stream ordering state: watermark, parked sequence numbers, timers.
    Streams,
    /// Per-message assembly state (calls without their argument text).
    Messages,
    /// Argument text pieces, keyed by (message, call, piece number). A call's text is the
    /// concatenation of its pieces' values in key order; numbers may have gaps (a storage
    /// may merge consecutive pieces into the first one's key).
    Args,
    /// Raw inputs parked ahead of a sequence gap.
    Parked,
    /// Events and dead letters waiting for the relay.
    Outbox,
    /// Per-conversation results and the call-id index used to match them.
    Results,
    /// Counters (next outbox key, next message order).
    Meta,
    /// Keys of the streams that are open or have parked inputs (loaded at open, so a
    /// restart does not read the stream records of all history).
    Live,
    /// Retention index: (time, tag, message key) of completed messages and of the stream
    /// tombstones they leave, oldest first, so expiry is a scan from the start.
    Done,
    /// Fingerprints of the inputs applied at each producer sequence number, keyed by
    /// (stream, seq): a later input with the same number and other bytes is a conflicting
    /// duplicate, not a redelivery. Written by stores before [`Space::SeenSets`]; still read
    /// and deleted. (Last but one, so the other spaces keep their prefixes.)
    Seen,
    /// The same fingerprints packed, one value per (stream, group of 32 numbers): see
    /// `crate::store::seen` (`src/store/seen.rs`). (Last, so the other spaces keep their
    /// prefixes.)
    SeenSets,
}

impl Space {
    /// Every keyspace, in a fixed order.
    pub const ALL: [Space; 11] = [
        Space::Streams,
        Space::Messages,
        Space::Args,
        Space::Parked,
        Space::Outbox,
        Space::Results,
        Space::Meta,
        Space::Live,
        Space::Done,
        Space::Seen,
        Space::SeenSets,
    ];

    /// Position in [`Space::ALL`].
    pub fn position(self) -> usize {
        self as usize
    }
}

/// The form a value takes at rest, given its keyspace: `Some` to store another form of it
/// (the store keeps its compact state records as JSON there, `crate::store::compact`), `None`
/// to store it as it is. A backend that holds values in memory before writing them out calls
/// it on the way out; readers must take both forms.
pub type AtRest = fn(Space, &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

/// One write of a [`WriteSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Set `key` to `value`.
    Put(Space, Vec<u8>, Vec<u8>),
    /// Remove `key` (no-op when absent).
    Delete(Space, Vec<u8>),
}

/// Writes committed together, in order (a later write to the same key wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSet {
    /// The writes, in order.
    pub writes: Vec<Write>,
}

impl WriteSet {
    /// Adds a put.
    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.writes.push(Write::Put(space, key, value));
    }

    /// Adds a delete.
    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.writes.push(Write::Delete(space, key));
    }

    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// Ordered key-value keyspaces with atomic commits and an explicit flush (see the module
/// contract).
pub trait Storage: Send + Sync {
    /// The value at `key`.
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every (key, value) whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<Pair>, StoreError>;
    /// Up to `limit` (key, value) pairs from the start of `space`, in key order.
    fn first_n(&self, space: Space, limit: usize) -> Result<Vec<Pair>, StoreError>;
    /// Number of keys in `space` (may be O(n); called at open only).
    fn count(&self, space: Space) -> Result<usize, StoreError>;
    /// Applies every write atomically (not yet durable).
    fn commit(&self, set: WriteSet) -> Result<(), StoreError>;
    /// Removes one key on its own, returning whether it existed (atomic, not yet durable).
    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError>;
    /// Makes every commit so far durable.
    fn flush(&self) -> Result<(), StoreError>;
    /// Makes every commit so far durable and leaves nothing for the next open to replay
    /// (the sled backend applies its flush log to the keyspaces): what a clean stop calls
    /// last, so that a store is whole in its keyspaces whenever its process stopped cleanly.
    fn settle(&self) -> Result<(), StoreError> {
        self.flush()
    }
}
