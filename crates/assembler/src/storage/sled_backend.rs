//! sled [`Storage`]: every keyspace lives in ONE sled tree under a one-byte prefix, behind a
//! write-back buffer that a flush makes durable as a log record.
//!
//! - `commit` puts the set's writes into an in-memory buffer (under one lock, so it is atomic
//!   to every reader); reads look in the buffer first, then in sled's keyspaces.
//! - `flush` writes what changed since the last flush as ONE **flush-log record** (a few sled
//!   values under the log prefix [`LOG_PREFIX`], outside every keyspace, in one
//!   `Tree::apply_batch`) and fsyncs (`Db::flush`). The buffer keeps its writes.
//! - Every [`MATERIALIZE_FLUSHES`] flushes, or once the buffer holds [`MATERIALIZE_BYTES`] or
//!   the records [`MATERIALIZE_LOG_BYTES`], the flush instead **materializes**: it applies the whole buffer to the keyspaces and deletes
//!   the log records, as ONE `Tree::apply_batch` (sled seals a batch in its log as a unit), then
//!   fsyncs, and empties the buffer.
//! - `open` replays the log records still in sled into the buffer, in order: the state after a
//!   crash is the keyspaces plus the records, i.e. every flushed commit. A crash therefore loses
//!   exactly the commits made since the last flush (a suffix, never part of a commit), which is
//!   the storage contract.
//! - If the buffer grows past [`SPILL_WRITES`] writes or [`SPILL_BYTES`] bytes between
//!   flushes (a caller that flushes rarely, or a batch of large chunks), it is materialized
//!   early, not fsynced: the buffer's memory is bounded whatever producers send.
//! - sled's page cache is bounded by [`crate::Config::storage_cache_bytes`] (sled's own
//!   default, 1 GiB, would let stored argument text fill the process's memory).
//!
//! - Consecutive argument pieces of one call in the buffer are written as ONE sled value
//!   under the first piece's key (readers concatenate a call's pieces in key order, and
//!   appends continue at the call's piece count, so gaps in piece numbers are harmless), and
//!   appended to the call's last piece already in sled when that one is at most
//!   [`EXTEND_STORED_MAX`] bytes: a call streamed over many flushes keeps one key. A piece
//!   appended to in the buffer is logged as the appended bytes, not again whole.
//! - A value rewritten whole that differs from what the last flush held in a few bytes (a
//!   stream's watermark, a message's counters, a fingerprint group's new entry) is logged as
//!   a patch of that value ([`TAG_PATCH`]): the record holds the bytes that changed, not the
//!   value again.
//!
//! Why: sled's cost is per key written (each insert clones the key's leaf and logs a
//! fragment; ~12 k instructions), and with many interleaved streams every flush rewrote each
//! stream's state, message state, argument piece and fingerprint group: four sled inserts
//! per chunk. A log record is one insert per flush, and materializing every
//! [`MATERIALIZE_FLUSHES`] flushes collapses a stream's rewrites over all of them into one
//! sled write per key (`benches/examples/completion_cost.rs`, README "Benchmarks"). Earlier,
//! one sled transaction per applied chunk had cost ~33 µs: the buffer came first, the log
//! second.

use super::{Pair, Space, Storage, Write, WriteSet};
use crate::error::{BackendErrorKind, StoreError};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Name of the sled tree that holds every keyspace.
const TREE: &str = "toolstream_v1";

/// Buffered writes after which the buffer is applied to sled before a flush.
pub const SPILL_WRITES: usize = 262_144;

/// Buffered bytes (keys and values held) after which the buffer is materialized before a
/// flush.
pub const SPILL_BYTES: usize = 32 * 1024 * 1024;

/// Largest stored argument piece a flush rewrites to append a call's new pieces to it
/// (larger ones get a new key: a long argument is not copied again at every flush).
pub const EXTEND_STORED_MAX: usize = 4096;

/// Key prefix of the flush log: a byte after every [`Space`]'s, so no keyspace read sees it.
/// A record's parts are keyed `LOG_PREFIX · record (u64 BE) · part (u32 BE)`.
pub const LOG_PREFIX: u8 = 0xFE;

/// Flushes logged between two materializations (see the module docs); 8 in unit tests, so
/// that random histories reach materializations and direct flushes.
pub const MATERIALIZE_FLUSHES: u32 = if cfg!(test) { 8 } else { 64 };

/// Buffered bytes at which the next flush materializes (see the module docs).
pub const MATERIALIZE_BYTES: usize = 4 * 1024 * 1024;

/// Bytes of log records since the last materialization at which the next flush materializes
/// (a key rewritten whole at every flush is in every record, so the records outgrow the
/// buffer). The records live in sled: on disk, in its bounded page cache, and replayed at
/// open.
pub const MATERIALIZE_LOG_BYTES: usize = 8 * 1024 * 1024;

/// Bytes of one log value (a record larger than this is split into parts, all written in the
/// record's one batch; one entry larger than this gets a part of its own). Under a quarter of
/// sled's 512 KiB segment, so one part's insert is logged inline, not as a blob file. Fewer,
/// larger parts are cheaper: each is a sled key, and the log's leaves split and merge as
/// records come and go (`completion_cost --chunks 100000`, CPU user+sys: 7 KiB parts 2.5 s,
/// 16 KiB 2.4 s, 32 KiB 2.2 s, 64 KiB 2.1 s).
const LOG_PART_BYTES: usize = 64 * 1024;

/// Log entry tags: the key is set to a value, deleted, or its buffered value grew.
const TAG_PUT: u8 = 0;
const TAG_DELETE: u8 = 1;
const TAG_APPEND: u8 = 2;
/// Drop the key from the buffer: its value went to its keyspace in the record's own batch,
/// or it was deleted while only the buffer held it.
const TAG_FORGET: u8 = 3;
/// The key's buffered value changed in the middle: keep its first `prefix` and last `suffix`
/// bytes (two u32 BE) and put the logged bytes between them. A stream's state, a message's
/// state and a fingerprint group are rewritten whole at every commit, but differ from what
/// the last flush held in a few bytes (a counter, a watermark, an appended entry): logged
/// whole, they were ~90% of every record's bytes (see [`patch_of`]).
const TAG_PATCH: u8 = 4;

/// An argument piece at least this long is written to its keyspace by the flush itself, in
/// the log record's batch, instead of into the log: text is written once, not in the log
/// and again at materialization, and the log stays small. With 1 GiB of open argument text
/// in 4 KiB fragments (`open_streams_memory open 2048 524288 4096`), logging the text took
/// the peak from 179 to 283 MiB and the run from 41 to 63 s; written directly, 224 MiB and
/// 27 s. Only argument pieces: readers join a call's pieces in key order, so a piece written
/// early changes nothing they read. Strictly above [`EXTEND_STORED_MAX`]: a piece the flush
/// wrote is never extended by a materialization (one of exactly 4,096 bytes was, after a
/// replace, and the replaced call's old second piece, still in sled under the key of the
/// new one, was read again: `flush_log_review_2.rs`).
pub const DIRECT_PIECE_BYTES: usize = EXTEND_STORED_MAX + 1;

/// sled's page cache when no size is given (as [`crate::Config::storage_cache_bytes`]).
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Writes not yet applied to sled: prefixed key → value (`None`: deleted).
type Buffer = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A sled database holding the keyspaces in one prefixed tree, with a write-back buffer.
#[derive(Debug)]
pub struct SledStorage {
    db: sled::Db,
    tree: sled::Tree,
    buffer: Mutex<Buffered>,
    /// Set by [`SledStorage::discard_unflushed`]: the drop writes nothing, like a crash.
    crashed: AtomicBool,
    /// Whether anything was committed since the store was opened: a store only read (the
    /// `inspect` command) is left as it was found, log records included.
    wrote: AtomicBool,
    /// The form values take in sled's keyspaces (see [`SledStorage::with_at_rest`]).
    at_rest: Option<super::AtRest>,
}

/// The write-back buffer, the bytes written into it since it was last materialized, and what
/// the next log record must hold.
#[derive(Debug, Default)]
struct Buffered {
    writes: Buffer,
    bytes: usize,
    /// Keys changed since the last flush, and how each is logged (hashed, not ordered: the
    /// record's entries name distinct keys, so their order does not matter, and this map
    /// is looked up at every write of every commit).
    since_flush: crate::hash::FastMap<Vec<u8>, Change>,
    /// Keys of the log parts in sled since the last materialization, oldest first.
    log_keys: Vec<Vec<u8>>,
    /// Number of the next log record.
    next_record: u64,
    /// Log records written since the last materialization.
    records: u32,
    /// Bytes of those records.
    log_bytes: usize,
    /// Keys written per flush since the last materialization (each key counted once a flush).
    flush_keys: u64,
    /// Of those, keys an earlier flush of the same window had written: what the log saves.
    rewritten: u64,
    /// Flushes still to apply directly, without the log (see [`DIRECT_FLUSHES`]).
    direct_left: u32,
}

/// How a key changed since the last flush.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// Set or deleted: logged with its whole buffered value.
    Whole,
    /// Set or deleted; its buffered value at the last flush was this one (what a replay
    /// rebuilds before this flush's record): logged as a [`TAG_PATCH`] of it when that is
    /// shorter than the whole value.
    From(Vec<u8>),
    /// Only appended to: logged as its buffered value from this offset on.
    AppendedFrom(usize),
    /// Deleted while its value was only in the buffer: dropped from the buffer instead of
    /// kept as a tombstone, and logged as [`TAG_FORGET`].
    Forgotten,
}

impl Buffered {
    /// Sets or deletes `key` (`None`) in the buffer, noted for the next log record (one
    /// lookup of the buffer: this runs for every write of every commit).
    fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        if let Some(c) = self.since_flush.get_mut(key.as_slice()) {
            // written before in this flush: a `From` keeps the value of the last flush
            if !matches!(c, Change::From(_)) {
                *c = Change::Whole;
            }
            self.set(key, value);
            return;
        }
        // The first write of `key` in this flush: the buffer holds what the last flush left
        // (the log records since the last materialization rebuild it), kept as the base of a
        // patch. An earlier flush of the window wrote `key` too if the buffer held it.
        let old = self.set(key.clone(), value);
        self.flush_keys += 1;
        if old.is_some() {
            self.rewritten += 1;
        }
        let change = match old {
            Some(Some(base)) => Change::From(base),
            _ => Change::Whole,
        };
        self.since_flush.insert(key, change);
    }

    /// Buffers `value` at `key`, keeping `bytes` equal to what the buffer holds. Returns what
    /// the buffer held at `key` before (`Some(None)`: a tombstone).
    fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Option<Option<Vec<u8>>> {
        let key_len = key.len();
        let new_len = value.as_ref().map_or(0, Vec::len);
        let old = self.writes.insert(key, value);
        match &old {
            Some(old) => {
                let old_len = old.as_ref().map_or(0, Vec::len);
                self.bytes = (self.bytes + new_len).saturating_sub(old_len);
            }
            None => self.bytes += key_len + new_len,
        }
        old
    }

    /// Drops `key` from the buffer (its value is in the keyspace now).
    fn forget(&mut self, key: &[u8]) {
        if let Some(old) = self.writes.remove(key) {
            let len = key.len() + old.as_ref().map_or(0, Vec::len);
            self.bytes = self.bytes.saturating_sub(len);
        }
    }

    /// Empties the buffer and the log bookkeeping (after a materialization, or to rebuild).
    fn clear(&mut self) {
        self.writes.clear();
        self.bytes = 0;
        self.since_flush.clear();
        self.log_keys.clear();
        self.records = 0;
        self.log_bytes = 0;
        self.flush_keys = 0;
        self.rewritten = 0;
    }
}

fn prefixed(space: Space, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(space as u8);
    k.extend_from_slice(key);
    k
}

/// For a prefixed `Space::Args` key: (the call's prefix, piece number).
fn piece_of(key: &[u8]) -> Option<(&[u8], u32)> {
    if key.first() != Some(&(Space::Args as u8)) || key.len() < 5 {
        return None;
    }
    let (prefix, n) = key.split_at(key.len() - 4);
    let n: [u8; 4] = n.try_into().ok()?;
    Some((prefix, u32::from_be_bytes(n)))
}

/// sled's errors as the store's typed [`StoreError::Backend`] (the storage seam names no
/// sled type; the message text is sled's own).
impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> StoreError {
        let kind = match &e {
            sled::Error::Io(_) => BackendErrorKind::Io,
            sled::Error::Corruption { .. } => BackendErrorKind::Corruption,
            sled::Error::Unsupported(_) => BackendErrorKind::Unsupported,
            sled::Error::CollectionNotFound(_) | sled::Error::ReportableBug(_) => {
                BackendErrorKind::Internal
            }
        };
        StoreError::Backend {
            backend: "sled",
            kind,
            detail: e.to_string(),
        }
    }
}

fn io_error(e: std::io::Error) -> StoreError {
    StoreError::from(sled::Error::Io(e))
}

/// Removes the `snap.<lsn>.generating` files a killed process left in `path`.
///
/// sled 0.34 writes a snapshot to `snap.<lsn>.generating`, fsyncs it and only then renames it
/// to `snap.<lsn>`; but at open it reads the snapshot file with the highest name, which is
/// such an unfinished file when the process was killed in between, and then refuses to open
/// at all ("corrupt snapshot file found, crc does not match expected": sled issue #1527).
/// Found by the 1,000-kill soak. An unfinished snapshot is never needed: the finished one
/// before it and the log are what recovery reads.
/// Returns whether it removed any (then opening is worth another try).
fn remove_unfinished_snapshots(path: &Path) -> Result<bool, StoreError> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error(e)),
    };
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            tracing::warn!(file = %name, "removing an unfinished sled snapshot left by a crash");
            std::fs::remove_file(entry.path()).map_err(io_error)?;
            removed = true;
        }
    }
    Ok(removed)
}

impl SledStorage {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<SledStorage, StoreError> {
        SledStorage::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the database at `path` with a page cache of `cache_bytes`.
    pub fn open_with_cache(path: &Path, cache_bytes: u64) -> Result<SledStorage, StoreError> {
        // Flushes happen when the caller says so (group commit), not on a background timer.
        let open = || {
            sled::Config::new()
                .path(path)
                .cache_capacity(cache_bytes)
                .flush_every_ms(None)
                .open()
        };
        let db = match open() {
            Ok(db) => db,
            // Only when sled refuses: a live worker's snapshot in progress is never touched
            // (sled holds its lock then, and this open fails on the lock, not on corruption).
            Err(sled::Error::Corruption { .. }) if remove_unfinished_snapshots(path)? => open()?,
            Err(e) => return Err(e.into()),
        };
        SledStorage::with_db(db)
    }

    /// A database in a temporary directory, removed when dropped.
    pub fn temporary() -> Result<SledStorage, StoreError> {
        SledStorage::temporary_with_cache(DEFAULT_CACHE_BYTES)
    }

    /// A database in a temporary directory with a page cache of `cache_bytes`.
    pub fn temporary_with_cache(cache_bytes: u64) -> Result<SledStorage, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()?;
        SledStorage::with_db(db)
    }

    fn with_db(db: sled::Db) -> Result<SledStorage, StoreError> {
        let tree = db.open_tree(TREE)?;
        let storage = SledStorage {
            db,
            tree,
            buffer: Mutex::new(Buffered::default()),
            crashed: AtomicBool::new(false),
            // (so a store that fails to open is dropped unchanged too)
            wrote: AtomicBool::new(false),
            at_rest: None,
        };
        {
            let mut buffer = storage.buffer();
            storage.replay_log(&mut buffer)?;
        }
        Ok(storage)
    }

    /// Writes values to sled's keyspaces in the form `at_rest` gives them (materializations and
    /// direct flushes; the buffer and the log keep them as committed).
    pub fn with_at_rest(mut self, at_rest: super::AtRest) -> SledStorage {
        self.at_rest = Some(at_rest);
        self
    }

    /// `value` of the prefixed `key` as it is written to sled's keyspaces.
    fn rest_form<'v>(
        &self,
        key: &[u8],
        value: &'v [u8],
    ) -> Result<std::borrow::Cow<'v, [u8]>, StoreError> {
        let space = key.first().and_then(|b| Space::ALL.get(usize::from(*b)));
        match (self.at_rest, space) {
            (Some(at_rest), Some(space)) => Ok(match at_rest(*space, value)? {
                Some(other) => std::borrow::Cow::Owned(other),
                None => std::borrow::Cow::Borrowed(value),
            }),
            _ => Ok(std::borrow::Cow::Borrowed(value)),
        }
    }

    /// Rebuilds the buffer from the flush-log records in sled, oldest first: afterwards it
    /// holds every commit flushed since the last materialization (see the module docs).
    fn replay_log(&self, buffer: &mut Buffered) -> Result<(), StoreError> {
        buffer.clear();
        let mut last = None;
        for item in self.tree.scan_prefix([LOG_PREFIX]) {
            let (key, part) = item?;
            let record = key
                .get(1..9)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
                .filter(|_| key.len() == LOG_KEY_LEN)
                .ok_or_else(|| corrupt_log("a log key of the wrong length"))?;
            if last != Some(record) {
                buffer.records += 1;
                last = Some(record);
            }
            replay_part(buffer, &part)?;
            buffer.log_bytes += part.len();
            buffer.log_keys.push(key.to_vec());
        }
        buffer.next_record = last.map_or(0, |r| r.saturating_add(1));
        Ok(())
    }

    /// Writes what changed since the last flush as one log record (not yet fsynced).
    fn write_log_record(&self, buffer: &mut Buffered) -> Result<(), StoreError> {
        let record = buffer.next_record;
        let mut batch = sled::Batch::default();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut part = Vec::new();
        let mut logged = 0;
        let mut seal = |batch: &mut sled::Batch, part: &mut Vec<u8>, keys: &mut Vec<Vec<u8>>| {
            logged += part.len();
            let key = log_key(record, keys.len());
            batch.insert(key.as_slice(), std::mem::take(part));
            keys.push(key);
        };
        let mut direct = Vec::new();
        for (key, change) in &buffer.since_flush {
            if matches!(change, Change::Forgotten) {
                part.push(TAG_FORGET);
                put_field(&mut part, key);
                continue;
            }
            // every other key changed since the last flush is buffered: a materialization
            // empties both
            let Some(entry) = buffer.writes.get(key) else {
                continue;
            };
            match (change, entry) {
                (_, Some(value))
                    if value.len() >= DIRECT_PIECE_BYTES && piece_of(key).is_some() =>
                {
                    batch.insert(key.as_slice(), value.as_slice());
                    part.push(TAG_FORGET);
                    put_field(&mut part, key);
                    direct.push(key.clone());
                }
                (_, None) => {
                    part.push(TAG_DELETE);
                    put_field(&mut part, key);
                }
                (Change::AppendedFrom(from), Some(value)) if *from <= value.len() => {
                    part.push(TAG_APPEND);
                    put_field(&mut part, key);
                    put_field(&mut part, value.get(*from..).unwrap_or_default());
                }
                (Change::From(base), Some(value)) => match patch_of(base, value) {
                    Some((prefix, suffix, middle)) => {
                        part.push(TAG_PATCH);
                        put_field(&mut part, key);
                        part.extend_from_slice(&prefix.to_be_bytes());
                        part.extend_from_slice(&suffix.to_be_bytes());
                        put_field(&mut part, middle);
                    }
                    None => {
                        part.push(TAG_PUT);
                        put_field(&mut part, key);
                        put_field(&mut part, value);
                    }
                },
                (_, Some(value)) => {
                    part.push(TAG_PUT);
                    put_field(&mut part, key);
                    put_field(&mut part, value);
                }
            }
            if part.len() >= LOG_PART_BYTES {
                seal(&mut batch, &mut part, &mut keys);
            }
        }
        if !part.is_empty() {
            seal(&mut batch, &mut part, &mut keys);
        }
        self.tree.apply_batch(batch)?;
        for key in direct {
            buffer.forget(&key);
        }
        buffer.log_keys.extend(keys);
        buffer.log_bytes += logged;
        buffer.records += 1;
        buffer.next_record = record.saturating_add(1);
        buffer.since_flush.clear();
        Ok(())
    }

    fn buffer(&self) -> MutexGuard<'_, Buffered> {
        // The buffer is only changed by whole commits under the lock; a panic elsewhere
        // cannot leave half a commit in it.
        match self.buffer.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Buffers the deletion of `key`. A key whose value only the buffer holds (put since the
    /// last materialization, not in sled) is dropped from the buffer instead of kept as a
    /// tombstone: every outbox row the relay deletes, say, would otherwise stay in the buffer
    /// until the next materialization, and every scan of its keyspace (the relay's peek)
    /// would walk past all of them.
    ///
    /// `in_sled`: whether sled's keyspace holds `key`, read by the caller before it changed
    /// the buffer at all, so that a failed read leaves the buffer as it was (a commit is
    /// atomic).
    fn delete(buffer: &mut Buffered, key: Vec<u8>, in_sled: bool) {
        if !in_sled && matches!(buffer.writes.get(&key), Some(Some(_))) {
            buffer.forget(&key);
            buffer.since_flush.insert(key, Change::Forgotten);
        } else {
            buffer.write(key, None);
        }
    }

    /// Materializes: applies the buffer to the keyspaces and deletes the log records (not
    /// fsynced). The buffer is emptied only once sled took every batch: on an error every
    /// commit stays buffered (readers still see it, and the next flush tries again), so
    /// nothing the caller was told is committed disappears.
    ///
    /// In several sled batches, not one: sled keeps every leaf version an insert replaces until
    /// its batch ends, so one batch of a buffer spanning 100,000 streams held ~250 MiB more at
    /// its peak (`open_streams_memory open 100000 100`). That is safe because the buffer is
    /// logged whole first: after a crash between the batches, the replayed buffer covers every
    /// key they wrote, and reads look in the buffer first. The only writes to keys the buffer
    /// does not hold (a stored argument piece extended, see [`SledStorage::batches_of`]) go
    /// in the last batch, with the deletion of the log records.
    fn materialize(&self, buffer: &mut Buffered) -> Result<(), StoreError> {
        if buffer.writes.is_empty() && buffer.log_keys.is_empty() {
            return Ok(());
        }
        if !buffer.since_flush.is_empty() {
            self.write_log_record(buffer)?;
        }
        let (batches, mut last) = self.batches_of(&buffer.writes, false)?;
        for (index, batch) in batches.into_iter().enumerate() {
            stop_before_batch(index)?;
            self.tree.apply_batch(batch)?;
        }
        for key in &buffer.log_keys {
            last.remove(key.as_slice());
        }
        self.tree.apply_batch(last)?;
        buffer.clear();
        Ok(())
    }

    /// Applies the buffer to the keyspaces as ONE atomic batch, without the log (only when no
    /// log record is pending, so the batch holds every commit since the last materialization,
    /// and the buffer is at most [`DIRECT_APPLY_MAX`] writes): how every flush worked before
    /// the log, for a load the log does not pay for (see [`DIRECT_FLUSHES`]).
    fn apply_directly(&self, buffer: &mut Buffered) -> Result<(), StoreError> {
        // (with `single`, every write is in the one batch and the last is empty)
        let (batches, _) = self.batches_of(&buffer.writes, true)?;
        for batch in batches {
            self.tree.apply_batch(batch)?;
        }
        buffer.clear();
        Ok(())
    }

    /// The buffer as sled batches of at most [`MATERIALIZE_BATCH_WRITES`] writes to buffered
    /// keys, and a last batch with the writes to keys the buffer does not hold (stored
    /// argument pieces extended). Keys and values are copied once, into sled's own buffers
    /// (they stay in the write-back buffer until sled took the batches).
    /// With `single`, everything goes into one batch (and the last batch is empty).
    fn batches_of(
        &self,
        buffer: &Buffer,
        single: bool,
    ) -> Result<(Vec<sled::Batch>, sled::Batch), StoreError> {
        let mut batch = Batches {
            single,
            ..Batches::default()
        };
        // A run of consecutive argument pieces of one call is written as its first piece
        // holding their concatenation (see `Space::Args`): one sled write instead of one per
        // fragment. A run that continues a call already in sled is appended to the call's
        // last stored piece (see `stored_piece_to_extend`), so a call streamed over many
        // flushes keeps one key instead of one per flush.
        // The buffered keys folded into a run under another key are removed from sled (they
        // hold nothing there, unless a replace left an older piece under the same number,
        // whose text would otherwise be read after the run's: `flush_log_review_2.rs`).
        let mut run: Option<Run> = None;
        let mut prev: Option<&[u8]> = None;
        for (k, v) in buffer.iter() {
            let piece = piece_of(k);
            if let (Some((first_key, last, text, _, folded)), Some((prefix, n)), Some(bytes)) =
                (run.as_mut(), piece, v.as_ref())
            {
                if first_key.len() == k.len()
                    && first_key.starts_with(prefix)
                    && last.checked_add(1) == Some(n)
                {
                    *last = n;
                    text.extend_from_slice(bytes);
                    folded.push(k.clone());
                    prev = Some(k.as_slice());
                    continue;
                }
            }
            if let Some((key, _, text, stored, folded)) = run.take() {
                batch.insert(key, text, stored);
                for key in folded {
                    batch.remove(key);
                }
            }
            match (v, piece) {
                (Some(v), Some((prefix, n))) => {
                    let follows_buffered =
                        prev.is_some_and(|p| p.len() == k.len() && p.starts_with(prefix));
                    let stored = match follows_buffered {
                        true => None,
                        false => self.stored_piece_to_extend(k, prefix, n)?,
                    };
                    run = Some(match stored {
                        Some((key, mut text)) => {
                            text.extend_from_slice(v);
                            (key, n, text, true, vec![k.clone()])
                        }
                        None => (k.clone(), n, v.clone(), false, Vec::new()),
                    });
                }
                (Some(v), None) => batch.insert(k.as_slice(), &*self.rest_form(k, v)?, false),
                (None, _) => batch.remove(k.as_slice()),
            }
            prev = Some(k.as_slice());
        }
        if let Some((key, _, text, stored, folded)) = run.take() {
            batch.insert(key, text, stored);
            for key in folded {
                batch.remove(key);
            }
        }
        Ok(batch.finish())
    }

    /// For a buffered argument piece `key` (piece `n` > 0 of the call `prefix`) that no
    /// buffered write of the same call precedes: the call's last piece in sled and its value,
    /// when that value is small enough to be rewritten with the new pieces appended
    /// ([`EXTEND_STORED_MAX`]).
    ///
    /// Same invariant as [`append_to_buffered_piece`]: readers concatenate a call's pieces in
    /// key order and tolerate gaps in piece numbers, and piece numbers only grow until a
    /// replace (which deletes the old pieces; a buffered delete precedes the key then, and
    /// nothing is extended). So sled's last piece of the call ends its stored text, and the
    /// new pieces continue it. Why: a call whose fragments arrive in different flushes (the
    /// usual case with many concurrent streams) otherwise left one sled key per flush, which
    /// the end of its message then read back one by one and deleted one by one (about 1.4 M
    /// instructions to apply a typical call-ending chunk, 20× an ordinary chunk, and as much
    /// again in the flush).
    fn stored_piece_to_extend(
        &self,
        key: &[u8],
        prefix: &[u8],
        n: u32,
    ) -> Result<Option<Pair>, StoreError> {
        if n == 0 {
            return Ok(None);
        }
        let Some((stored_key, value)) = self.tree.get_lt(key)? else {
            return Ok(None);
        };
        if stored_key.len() != key.len()
            || !stored_key.starts_with(prefix)
            || value.len() > EXTEND_STORED_MAX
        {
            return Ok(None);
        }
        Ok(Some((stored_key.to_vec(), value.to_vec())))
    }

    /// Up to `limit` live pairs under `space`/`prefix`: sled's, overlaid with the buffer.
    fn merged(&self, space: Space, prefix: &[u8], limit: usize) -> Result<Vec<Pair>, StoreError> {
        let full = prefixed(space, prefix);
        let buffer = self.buffer();
        let mut over = buffer
            .writes
            .range(full.clone()..)
            .take_while(|(k, _)| k.starts_with(&full))
            .peekable();
        let mut tree = self.tree.scan_prefix(&full).peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            let tree_key = match tree.peek() {
                Some(Ok((k, _))) => Some(k.to_vec()),
                Some(Err(_)) => {
                    if let Some(Err(e)) = tree.next() {
                        return Err(e.into());
                    }
                    continue;
                }
                None => None,
            };
            let over_key = over.peek().map(|(k, _)| (*k).clone());
            let (key, value) = match (tree_key, over_key) {
                (None, None) => break,
                (Some(t), Some(o)) if o <= t => {
                    if o == t {
                        tree.next();
                    }
                    match over.next() {
                        Some((k, v)) => (k.clone(), v.clone()),
                        None => break,
                    }
                }
                (Some(_), _) => match tree.next() {
                    Some(Ok((k, v))) => (k.to_vec(), Some(v.to_vec())),
                    Some(Err(e)) => return Err(e.into()),
                    None => break,
                },
                (None, Some(_)) => match over.next() {
                    Some((k, v)) => (k.clone(), v.clone()),
                    None => break,
                },
            };
            if let Some(v) = value {
                out.push((key.get(1..).unwrap_or_default().to_vec(), v));
            }
        }
        Ok(out)
    }
}

/// Flushes applied directly, without the log, after a materialization found that the log did
/// not pay (fewer than a quarter of the keys each flush wrote had been written by an earlier
/// flush since the last materialization); then the log gets another window, to look again.
/// With 20,000 concurrent streams and 256 inputs per flush every input touches other keys
/// than the last 64 flushes did, and the log (each write logged, then materialized) cost 14%
/// of the inputs applied (`open_streams_memory sustained 4 20000 4096 256`).
pub const DIRECT_FLUSHES: u32 = if cfg!(test) { 8 } else { 256 };

/// Most buffered writes applied directly as one batch (a larger buffer goes through the log;
/// see [`SledStorage::materialize`] for why batches are bounded).
pub const DIRECT_APPLY_MAX: usize = 4096;

/// In unit tests, fails a materialization before its batch `index` when a test asked for it
/// (as a crash there would stop it); nothing otherwise.
fn stop_before_batch(index: usize) -> Result<(), StoreError> {
    #[cfg(test)]
    if tests::STOP_BEFORE_BATCH.with(|s| s.get()) == Some(index) {
        return Err(corrupt_log("test: stopped between materialization batches"));
    }
    let _ = index;
    Ok(())
}

/// Writes applied to sled per batch when materializing (see [`SledStorage::materialize`]);
/// a few in unit tests, so that they cross batch boundaries.
const MATERIALIZE_BATCH_WRITES: usize = if cfg!(test) { 3 } else { 512 };

/// A run of argument pieces being joined by [`SledStorage::batches_of`]: the key written, the
/// last piece number, the text, whether the key is a stored piece's (extended), and the
/// buffered keys folded into it.
type Run = (Vec<u8>, u32, Vec<u8>, bool, Vec<Vec<u8>>);

/// A materialization's sled batches (see [`SledStorage::batches_of`]).
#[derive(Default)]
struct Batches {
    full: Vec<sled::Batch>,
    current: sled::Batch,
    len: usize,
    last: sled::Batch,
    /// One batch for everything (a direct apply, [`SledStorage::apply_directly`]).
    single: bool,
}

impl Batches {
    /// Sets `key`; `unbuffered` when the buffer does not hold `key` (then it goes last).
    fn insert(
        &mut self,
        key: impl Into<sled::IVec>,
        value: impl Into<sled::IVec>,
        unbuffered: bool,
    ) {
        match unbuffered && !self.single {
            true => self.last.insert(key, value),
            false => {
                self.current.insert(key, value);
                self.counted();
            }
        }
    }

    fn remove(&mut self, key: impl Into<sled::IVec>) {
        self.current.remove(key);
        self.counted();
    }

    fn counted(&mut self) {
        self.len += 1;
        if self.len >= MATERIALIZE_BATCH_WRITES && !self.single {
            self.full.push(std::mem::take(&mut self.current));
            self.len = 0;
        }
    }

    fn finish(mut self) -> (Vec<sled::Batch>, sled::Batch) {
        if self.len > 0 {
            self.full.push(self.current);
        }
        (self.full, self.last)
    }
}

/// Appends an argument piece to the call's latest piece already in the buffer, if there is
/// one (noting the append for the next log record); otherwise hands the value back to be
/// inserted under its own key.
///
/// Same invariant as the merge in [`SledStorage::batches_of`]: readers concatenate a call's
/// pieces in key order and tolerate gaps in piece numbers. Every piece in the buffer is newer
/// than every piece in sled (piece numbers only grow until a replace, which deletes the old
/// ones), so the buffer's last piece of the call is the end of its text. A tiny fragment then
/// costs an append to a buffered value, not a new key: 1.7× less per byte from 1–4 byte
/// fragments (`large_arguments` bench).
fn append_to_buffered_piece(
    buffered: &mut Buffered,
    key: &[u8],
    value: Vec<u8>,
) -> Option<Vec<u8>> {
    let Some((prefix, n)) = piece_of(key) else {
        return Some(value);
    };
    if n == 0 {
        return Some(value);
    }
    let Buffered {
        writes,
        since_flush,
        bytes,
        flush_keys,
        rewritten,
        ..
    } = buffered;
    match writes.range_mut(..key.to_vec()).next_back() {
        Some((last_key, Some(text)))
            if last_key.len() == key.len() && last_key.starts_with(prefix) =>
        {
            if !since_flush.contains_key(last_key) {
                // an earlier flush of this window wrote the piece: the log saves a write
                *flush_keys += 1;
                *rewritten += 1;
                since_flush.insert(last_key.clone(), Change::AppendedFrom(text.len()));
            }
            *bytes += value.len();
            text.extend_from_slice(&value);
            None
        }
        _ => Some(value),
    }
}

/// The key of part `part` of log record `record`.
fn log_key(record: u64, part: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(LOG_KEY_LEN);
    k.push(LOG_PREFIX);
    k.extend_from_slice(&record.to_be_bytes());
    k.extend_from_slice(&u32::try_from(part).unwrap_or(u32::MAX).to_be_bytes());
    k
}

/// Bytes of a log key: prefix, record, part.
const LOG_KEY_LEN: usize = 1 + 8 + 4;

/// Appends a length-prefixed field (u32 BE length) to a log part.
fn put_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(field);
}

/// The patch turning `base` into `value` ([`TAG_PATCH`]): the lengths of their common
/// prefix and (in what follows it) common suffix, and `value`'s bytes between them; `None`
/// when logging `value` whole is no longer (two values with nothing in common).
fn patch_of<'v>(base: &[u8], value: &'v [u8]) -> Option<(u32, u32, &'v [u8])> {
    let prefix = common_prefix(base, value);
    let (base_rest, value_rest) = (base.get(prefix..)?, value.get(prefix..)?);
    let suffix = common_suffix(base_rest, value_rest);
    let middle = value_rest.get(..value_rest.len() - suffix)?;
    // the two lengths cost 8 bytes more than a whole value's entry
    if middle.len() + 8 >= value.len() {
        return None;
    }
    Some((
        u32::try_from(prefix).ok()?,
        u32::try_from(suffix).ok()?,
        middle,
    ))
}

/// Length of the common prefix of `a` and `b`, compared 8 bytes at a time (a byte at a time,
/// this was most of a flush's own cost).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let words = a.chunks_exact(8).zip(b.chunks_exact(8));
    let mut n = 0;
    for (x, y) in words {
        let (x, y) = (word(x), word(y));
        if x != y {
            // little-endian loads: the first differing byte is the lowest differing one
            return n + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    let tail = a
        .get(n..)
        .unwrap_or_default()
        .iter()
        .zip(b.get(n..).unwrap_or_default());
    n + tail.take_while(|(x, y)| x == y).count()
}

/// Length of the common suffix of `a` and `b`, compared 8 bytes at a time.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let words = a.rchunks_exact(8).zip(b.rchunks_exact(8));
    let mut n = 0;
    for (x, y) in words {
        let (x, y) = (word(x), word(y));
        if x != y {
            // the last differing byte is the highest differing one
            return n + ((x ^ y).leading_zeros() / 8) as usize;
        }
        n += 8;
    }
    let a = a.get(..a.len().saturating_sub(n)).unwrap_or_default();
    let b = b.get(..b.len().saturating_sub(n)).unwrap_or_default();
    n + a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Eight bytes as a little-endian word (0 for a short slice, which `chunks_exact` never gives).
fn word(bytes: &[u8]) -> u64 {
    bytes.try_into().map_or(0, u64::from_le_bytes)
}

/// Splits a u32 (BE) off the front of `bytes`, as a length.
fn take_u32(bytes: &[u8]) -> Result<(usize, &[u8]), StoreError> {
    let n = bytes
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| corrupt_log("a cut patch length"))?;
    Ok((n as usize, bytes.get(4..).unwrap_or_default()))
}

/// Splits a length-prefixed field off the front of `bytes`.
fn take_field(bytes: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let len = bytes
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| corrupt_log("a cut field length"))? as usize;
    let rest = bytes.get(4..).unwrap_or_default();
    if rest.len() < len {
        return Err(corrupt_log("a cut field"));
    }
    Ok(rest.split_at(len))
}

/// Applies one log part's entries to the buffer.
fn replay_part(buffer: &mut Buffered, mut part: &[u8]) -> Result<(), StoreError> {
    while let Some((&tag, rest)) = part.split_first() {
        let (key, rest) = take_field(rest)?;
        part = match tag {
            TAG_DELETE => {
                buffer.set(key.to_vec(), None);
                rest
            }
            TAG_FORGET => {
                buffer.forget(key);
                rest
            }
            TAG_PUT => {
                let (value, rest) = take_field(rest)?;
                buffer.set(key.to_vec(), Some(value.to_vec()));
                rest
            }
            TAG_PATCH => {
                let (prefix, rest) = take_u32(rest)?;
                let (suffix, rest) = take_u32(rest)?;
                let (middle, rest) = take_field(rest)?;
                let Some(Some(value)) = buffer.writes.get_mut(key) else {
                    return Err(corrupt_log("a patch of a value the log does not hold"));
                };
                let old_len = value.len();
                if prefix.saturating_add(suffix) > old_len {
                    return Err(corrupt_log("a patch longer than its value"));
                }
                value.splice(prefix..old_len - suffix, middle.iter().copied());
                buffer.bytes = (buffer.bytes + value.len()).saturating_sub(old_len);
                rest
            }
            TAG_APPEND => {
                let (tail, rest) = take_field(rest)?;
                match buffer.writes.get_mut(key) {
                    Some(Some(value)) => value.extend_from_slice(tail),
                    _ => return Err(corrupt_log("an append to a value the log does not hold")),
                }
                buffer.bytes += tail.len();
                rest
            }
            _ => return Err(corrupt_log("an unknown entry tag")),
        };
    }
    Ok(())
}

fn corrupt_log(detail: &str) -> StoreError {
    StoreError::Corrupt {
        space: "flush log",
        detail: detail.to_string(),
    }
}

impl SledStorage {
    /// Drops every commit made since the last flush, as a crash would (for tests that
    /// simulate a crash in-process: call this, then drop the store and reopen).
    ///
    /// Afterwards the storage holds what was flushed (the keyspaces and the log records, as a
    /// reopen after a crash would read them), and dropping it writes nothing more, so the
    /// reopen replays the log as after a real crash.
    pub fn discard_unflushed(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        let mut buffer = self.buffer();
        if let Err(e) = self.replay_log(&mut buffer) {
            tracing::error!(error = %e, "replaying the flush log after a discard failed");
            buffer.clear();
        }
    }

    /// Flush-log records not yet applied to the keyspaces (replayed at open): 0 after a clean
    /// stop, which settles the store (see the module docs).
    pub fn log_records(&self) -> u32 {
        self.buffer().records
    }

    /// Applies every commit to the keyspaces now and deletes the log records (see the module
    /// docs), then fsyncs. Flushes do this on their own every [`MATERIALIZE_FLUSHES`]; tests
    /// call it to look at what sled holds.
    pub fn materialize_now(&self) -> Result<(), StoreError> {
        {
            let mut buffer = self.buffer();
            self.materialize(&mut buffer)?;
        }
        self.db.flush()?;
        Ok(())
    }
}

impl Storage for SledStorage {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let k = prefixed(space, key);
        if let Some(v) = self.buffer().writes.get(&k) {
            return Ok(v.clone());
        }
        Ok(self.tree.get(k)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        self.merged(space, prefix, usize::MAX)
    }

    fn first_n(&self, space: Space, limit: usize) -> Result<Vec<Pair>, StoreError> {
        self.merged(space, b"", limit)
    }

    fn count(&self, space: Space) -> Result<usize, StoreError> {
        let prefix = [space as u8];
        let buffered = {
            let buffer = self.buffer();
            buffer
                .writes
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .count()
        };
        if buffered > 0 {
            return Ok(self.merged(space, b"", usize::MAX)?.len());
        }
        // Nothing buffered: count sled's keys without reading values.
        let mut n = 0;
        for k in self.tree.scan_prefix(prefix).keys() {
            k?;
            n += 1;
        }
        Ok(n)
    }

    fn commit(&self, set: WriteSet) -> Result<(), StoreError> {
        if set.is_empty() {
            return Ok(());
        }
        self.wrote.store(true, Ordering::SeqCst);
        let mut guard = self.buffer();
        let buffer = &mut *guard;
        // Every sled read the commit needs comes first: a failed read leaves the buffer as it
        // was, so a commit is never half applied. Only a delete of a value buffered now may be
        // dropped from the buffer instead of tombstoned (see `delete`), so only those ask sled;
        // every other delete is a tombstone, which is always correct (retention's deletes of
        // stored keys, a key put earlier in this same set).
        let mut in_sled = Vec::new();
        for w in &set.writes {
            if let Write::Delete(space, k) = w {
                let k = prefixed(*space, k);
                let buffered = matches!(buffer.writes.get(&k), Some(Some(_)));
                in_sled.push(!buffered || self.tree.contains_key(&k)?);
            }
        }
        let mut in_sled = in_sled.into_iter();
        for w in set.writes {
            match w {
                Write::Put(space, k, v) => {
                    let k = prefixed(space, &k);
                    if let Some(v) = append_to_buffered_piece(buffer, &k, v) {
                        buffer.write(k, Some(v));
                    }
                }
                Write::Delete(space, k) => {
                    // (one answer per delete, in order; a tombstone if one were missing)
                    let stored = in_sled.next().unwrap_or(true);
                    SledStorage::delete(buffer, prefixed(space, &k), stored);
                }
            }
        }
        if buffer.writes.len() >= SPILL_WRITES || buffer.bytes >= SPILL_BYTES {
            self.materialize(buffer)?;
        }
        Ok(())
    }

    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError> {
        let k = prefixed(space, key);
        self.wrote.store(true, Ordering::SeqCst);
        let mut buffer = self.buffer();
        let buffered = buffer.writes.get(&k).map(Option::is_some);
        if buffered == Some(false) {
            return Ok(false); // a buffered tombstone
        }
        let in_sled = self.tree.contains_key(&k)?;
        let existed = buffered.unwrap_or(in_sled);
        if existed {
            SledStorage::delete(&mut buffer, k, in_sled);
        }
        Ok(existed)
    }

    fn settle(&self) -> Result<(), StoreError> {
        self.materialize_now()
    }

    fn flush(&self) -> Result<(), StoreError> {
        {
            let mut buffer = self.buffer();
            let direct = buffer.direct_left > 0
                && buffer.log_keys.is_empty()
                && buffer.writes.len() <= DIRECT_APPLY_MAX;
            if direct && !buffer.since_flush.is_empty() {
                buffer.direct_left -= 1;
                self.apply_directly(&mut buffer)?;
            } else if !buffer.since_flush.is_empty() {
                let due = buffer.records.saturating_add(1) >= MATERIALIZE_FLUSHES
                    || buffer.bytes >= MATERIALIZE_BYTES
                    || buffer.log_bytes >= MATERIALIZE_LOG_BYTES;
                match due {
                    true => {
                        // Did the log pay? If fewer than a quarter of the keys each flush wrote
                        // had been written by an earlier flush of the window (many more streams
                        // than inputs per window), it was pure overhead: the next flushes apply
                        // directly.
                        let paid = buffer.rewritten.saturating_mul(4) >= buffer.flush_keys;
                        self.materialize(&mut buffer)?;
                        buffer.direct_left = if paid { 0 } else { DIRECT_FLUSHES };
                    }
                    false => self.write_log_record(&mut buffer)?,
                }
            }
        }
        // (outside the lock: commits go on while sled fsyncs)
        self.db.flush()?;
        Ok(())
    }
}

impl Drop for SledStorage {
    /// A clean drop keeps what was committed, materialized (a crash does not: that is what
    /// `flush` is for); after [`SledStorage::discard_unflushed`], a failed open, or when
    /// nothing was committed, it writes nothing.
    fn drop(&mut self) {
        if !self.crashed.load(Ordering::SeqCst) && self.wrote.load(Ordering::SeqCst) {
            let _ = self.materialize_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::args_piece;
    use std::cell::Cell;

    thread_local! {
        /// The materialization batch before which `materialize` fails, as a crash there would
        /// stop it.
        pub(super) static STOP_BEFORE_BATCH: Cell<Option<usize>> = const { Cell::new(None) };
    }

    const MSG: &[u8] = b"conv\x00msg";

    fn put(s: &SledStorage, piece: u32, text: &str) {
        let mut w = WriteSet::default();
        w.put(
            Space::Args,
            args_piece(MSG, 0, piece),
            text.as_bytes().to_vec(),
        );
        s.commit(w).unwrap();
    }

    fn text(s: &SledStorage) -> String {
        s.scan_prefix(Space::Args, MSG)
            .unwrap()
            .into_iter()
            .map(|(_, v)| String::from_utf8(v).unwrap())
            .collect()
    }

    fn buffered_args(s: &SledStorage) -> usize {
        s.buffer()
            .writes
            .keys()
            .filter(|k| k.first() == Some(&(Space::Args as u8)))
            .count()
    }

    #[test]
    fn appended_pieces_share_one_buffered_value_and_read_back_in_order() {
        let s = SledStorage::temporary().unwrap();
        put(&s, 0, "ab");
        put(&s, 1, "c");
        put(&s, 2, "d");
        assert_eq!(text(&s), "abcd");
        assert_eq!(buffered_args(&s), 1, "pieces 1 and 2 extend piece 0");
        s.flush().unwrap();
        put(&s, 3, "e");
        put(&s, 4, "f");
        assert_eq!(text(&s), "abcdef", "sled's pieces, then the buffer's");
        assert_eq!(buffered_args(&s), 1);
        s.flush().unwrap();
        assert_eq!(text(&s), "abcdef");
    }

    fn stored_args(s: &SledStorage) -> usize {
        s.tree
            .scan_prefix([Space::Args as u8])
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .len()
    }

    #[test]
    fn a_call_streamed_over_many_flushes_keeps_one_stored_key() {
        let s = SledStorage::temporary().unwrap();
        put(&s, 0, "ab");
        s.materialize_now().unwrap();
        for (n, t) in [(1, "c"), (2, "d"), (3, "e")] {
            put(&s, n, t);
            s.materialize_now().unwrap();
            assert_eq!(stored_args(&s), 1, "piece {n} extends the stored piece");
        }
        put(&s, 4, "f");
        put(&s, 5, "g");
        assert_eq!(text(&s), "abcdefg");
        s.materialize_now().unwrap();
        assert_eq!(stored_args(&s), 1);
        assert_eq!(text(&s), "abcdefg");
    }

    #[test]
    fn a_replace_of_a_stored_call_is_not_extended_and_later_pieces_are() {
        let s = SledStorage::temporary().unwrap();
        put(&s, 0, "old");
        s.materialize_now().unwrap();
        put(&s, 1, "-er");
        s.materialize_now().unwrap();
        let mut w = WriteSet::default();
        for n in 0..2 {
            w.delete(Space::Args, args_piece(MSG, 0, n));
        }
        w.put(Space::Args, args_piece(MSG, 0, 0), b"new".to_vec());
        s.commit(w).unwrap();
        put(&s, 1, "!");
        s.materialize_now().unwrap();
        assert_eq!(text(&s), "new!");
        put(&s, 2, "?");
        s.materialize_now().unwrap();
        assert_eq!(text(&s), "new!?");
        assert_eq!(stored_args(&s), 1);
    }

    #[test]
    fn a_long_stored_piece_is_not_copied_again_and_other_calls_are_not_extended() {
        let s = SledStorage::temporary().unwrap();
        let long = "x".repeat(EXTEND_STORED_MAX + 1);
        put(&s, 0, &long);
        s.materialize_now().unwrap();
        put(&s, 1, "y");
        s.materialize_now().unwrap();
        assert_eq!(stored_args(&s), 2, "the long piece stays as it is");
        assert_eq!(text(&s), format!("{long}y"));
        // call 1's first stored piece follows call 0's last key: never appended to it
        let mut w = WriteSet::default();
        w.put(Space::Args, args_piece(MSG, 1, 3), b"z".to_vec());
        s.commit(w).unwrap();
        s.materialize_now().unwrap();
        assert_eq!(stored_args(&s), 3);
        assert_eq!(
            text(&s),
            format!("{long}yz"),
            "call 0's pieces, then call 1's"
        );
        let call0: String = s
            .scan_prefix(Space::Args, &crate::keys::args_prefix(MSG, 0))
            .unwrap()
            .into_iter()
            .map(|(_, v)| String::from_utf8(v).unwrap())
            .collect();
        assert_eq!(call0, format!("{long}y"));
    }

    #[test]
    fn a_replace_then_append_reads_only_the_new_text() {
        let s = SledStorage::temporary().unwrap();
        put(&s, 0, "old");
        s.flush().unwrap();
        put(&s, 1, "-er");
        // a replace: delete pieces 0..2, write piece 0
        let mut w = WriteSet::default();
        for n in 0..2 {
            w.delete(Space::Args, args_piece(MSG, 0, n));
        }
        w.put(Space::Args, args_piece(MSG, 0, 0), b"new".to_vec());
        s.commit(w).unwrap();
        put(&s, 1, "!");
        assert_eq!(text(&s), "new!");
        s.flush().unwrap();
        assert_eq!(text(&s), "new!");
    }

    fn log_parts(s: &SledStorage) -> Vec<Vec<u8>> {
        s.tree
            .scan_prefix([LOG_PREFIX])
            .values()
            .map(|v| v.unwrap().to_vec())
            .collect()
    }

    fn reopen(dir: &Path, s: SledStorage) -> SledStorage {
        s.discard_unflushed();
        drop(s);
        for _ in 0..200 {
            if let Ok(s) = SledStorage::open(dir) {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("cannot reopen {}", dir.display());
    }

    fn put_kv(s: &SledStorage, space: Space, k: &str, v: &str) {
        let mut w = WriteSet::default();
        w.put(space, k.as_bytes().to_vec(), v.as_bytes().to_vec());
        s.commit(w).unwrap();
    }

    fn value(s: &SledStorage, space: Space, k: &str) -> Option<String> {
        s.get(space, k.as_bytes())
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn a_flush_writes_one_log_record_and_a_crash_keeps_exactly_the_flushed_commits() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        put_kv(&s, Space::Streams, "a", "1");
        put_kv(&s, Space::Messages, "b", "1");
        s.flush().unwrap();
        assert!(
            s.tree.scan_prefix([Space::Streams as u8]).next().is_none(),
            "a flush writes the log, not the keyspaces"
        );
        assert_eq!(log_parts(&s).len(), 1, "one record, one part");
        put_kv(&s, Space::Streams, "a", "2");
        let mut w = WriteSet::default();
        w.delete(Space::Messages, b"b".to_vec());
        s.commit(w).unwrap();
        s.flush().unwrap();
        put_kv(&s, Space::Streams, "a", "3 (never flushed)");
        put_kv(&s, Space::Streams, "c", "never flushed");
        let s = reopen(dir.path(), s);
        assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("2"));
        assert_eq!(
            value(&s, Space::Messages, "b"),
            None,
            "the logged delete holds"
        );
        assert_eq!(value(&s, Space::Streams, "c"), None);
        // and the replayed state goes on: flushed again, materialized, reopened
        put_kv(&s, Space::Streams, "c", "3");
        s.flush().unwrap();
        s.materialize_now().unwrap();
        assert!(
            log_parts(&s).is_empty(),
            "a materialization deletes the records"
        );
        let s = reopen(dir.path(), s);
        assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("2"));
        assert_eq!(value(&s, Space::Streams, "c").as_deref(), Some("3"));
        assert_eq!(s.count(Space::Streams).unwrap(), 2);
    }

    #[test]
    fn an_argument_appended_over_many_flushes_is_logged_as_its_new_bytes_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        let first = "x".repeat(10_000);
        put(&s, 0, &first);
        s.flush().unwrap();
        for n in 1..=5 {
            put(&s, n, "y");
            s.flush().unwrap();
        }
        let parts = log_parts(&s);
        assert_eq!(parts.len(), 6);
        for later in &parts[1..] {
            assert!(
                later.len() < 100,
                "an append logs its tail: {} bytes",
                later.len()
            );
        }
        put(&s, 6, "never flushed");
        let s = reopen(dir.path(), s);
        assert_eq!(text(&s), format!("{first}yyyyy"));
        put(&s, 6, "z");
        s.flush().unwrap();
        let s = reopen(dir.path(), s);
        assert_eq!(text(&s), format!("{first}yyyyyz"));
    }

    #[test]
    fn a_long_piece_is_written_to_its_keyspace_by_the_flush_and_forgotten_by_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        let half = "h".repeat(DIRECT_PIECE_BYTES.div_ceil(2));
        put(&s, 0, &half);
        s.flush().unwrap();
        assert_eq!(stored_args(&s), 0, "a short piece goes to the log");
        put(&s, 1, &half);
        s.flush().unwrap();
        assert_eq!(
            stored_args(&s),
            1,
            "grown past the threshold, the flush writes it"
        );
        assert_eq!(buffered_args(&s), 0, "and the buffer forgets it");
        assert!(
            log_parts(&s).last().is_some_and(|p| p.len() < 100),
            "that flush's record holds no text of it"
        );
        put(&s, 2, "tail");
        s.flush().unwrap();
        put(&s, 3, "never flushed");
        let s = reopen(dir.path(), s);
        assert_eq!(
            text(&s),
            format!("{half}{half}tail"),
            "the replay forgets the logged base and keeps the later piece"
        );
        s.materialize_now().unwrap();
        let s = reopen(dir.path(), s);
        assert_eq!(text(&s), format!("{half}{half}tail"));
    }

    #[test]
    fn a_key_put_and_deleted_between_materializations_leaves_no_tombstone() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        put_kv(&s, Space::Outbox, "stored", "1");
        s.materialize_now().unwrap();
        put_kv(&s, Space::Outbox, "row", "1");
        s.flush().unwrap();
        let mut w = WriteSet::default();
        w.delete(Space::Outbox, b"row".to_vec());
        w.delete(Space::Outbox, b"stored".to_vec());
        s.commit(w).unwrap();
        let row = prefixed(Space::Outbox, b"row");
        let stored = prefixed(Space::Outbox, b"stored");
        assert_eq!(s.buffer().writes.get(&row), None, "only buffered: dropped");
        assert_eq!(
            s.buffer().writes.get(&stored),
            Some(&None),
            "in sled: a tombstone"
        );
        assert!(s.first_n(Space::Outbox, 10).unwrap().is_empty());
        s.flush().unwrap();
        let s = reopen(dir.path(), s);
        assert!(
            s.first_n(Space::Outbox, 10).unwrap().is_empty(),
            "the replay drops it too"
        );
        assert_eq!(s.buffer().writes.get(&row), None);
        assert!(s
            .remove(Space::Outbox, b"row")
            .is_ok_and(|existed| !existed));
    }

    #[test]
    fn log_records_outgrowing_the_buffer_materialize_at_the_next_flush() {
        let s = SledStorage::temporary().unwrap();
        // 100 states of 20 KB rewritten whole at every flush, every byte changed (nothing for
        // a patch to keep): a 2 MB buffer, 2 MB per record
        let mut emptied = Vec::new();
        for flush in 1..=12u8 {
            let state = char::from(b'a' + flush).to_string().repeat(20_000);
            for k in 0..100 {
                put_kv(&s, Space::Streams, &format!("{k:03}"), &state);
            }
            let before: usize = log_parts(&s).iter().map(Vec::len).sum();
            s.flush().unwrap();
            let logged: usize = log_parts(&s).iter().map(Vec::len).sum();
            match before >= MATERIALIZE_LOG_BYTES {
                true => assert_eq!(logged, 0, "flush {flush} materializes"),
                false => assert!(logged > before, "flush {flush} logs"),
            }
            if logged == 0 {
                emptied.push(flush);
            }
            assert!(s.buffer().bytes < MATERIALIZE_BYTES);
        }
        // 8 MiB of records after 5 flushes of 2 MB: every 6th flush, not every 8th
        assert_eq!(emptied, [6, 12]);
    }

    #[test]
    fn a_settled_store_holds_everything_in_its_keyspaces() {
        let s = SledStorage::temporary().unwrap();
        put_kv(&s, Space::Streams, "k", "v");
        s.flush().unwrap();
        assert!(!log_parts(&s).is_empty());
        s.settle().unwrap();
        assert!(log_parts(&s).is_empty());
        assert_eq!(
            s.tree
                .get(prefixed(Space::Streams, b"k"))
                .unwrap()
                .as_deref(),
            Some(&b"v"[..])
        );
    }

    fn flush_writing(s: &SledStorage, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            put_kv(s, Space::Streams, &k, "v");
        }
        s.flush().unwrap();
    }

    #[test]
    fn a_load_the_log_does_not_pay_for_is_applied_directly_then_looked_at_again() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        let mut n = 0;
        let mut fresh = |count: usize| {
            n += count;
            (n - count..n)
                .map(|i| format!("{i:06}"))
                .collect::<Vec<_>>()
        };
        // every flush writes keys no earlier flush wrote
        for _ in 0..MATERIALIZE_FLUSHES {
            flush_writing(&s, fresh(10));
        }
        assert!(log_parts(&s).is_empty(), "the 64th flush materialized");
        for _ in 0..DIRECT_FLUSHES {
            flush_writing(&s, fresh(10));
            assert!(log_parts(&s).is_empty(), "applied directly");
            assert!(s.buffer().writes.is_empty());
        }
        flush_writing(&s, fresh(10));
        assert_eq!(
            log_parts(&s).len(),
            1,
            "after the direct flushes, the log again"
        );
        // a crash in direct mode keeps exactly what was flushed
        for _ in 1..MATERIALIZE_FLUSHES {
            flush_writing(&s, fresh(10));
        }
        flush_writing(&s, fresh(10));
        assert!(s.buffer().direct_left > 0 && log_parts(&s).is_empty());
        put_kv(&s, Space::Streams, "unflushed", "v");
        let flushed = n;
        let s = reopen(dir.path(), s);
        assert_eq!(s.count(Space::Streams).unwrap(), flushed);
        assert_eq!(value(&s, Space::Streams, "unflushed"), None);
    }

    #[test]
    fn a_flush_too_large_to_apply_directly_is_logged_and_so_are_the_next_until_materialized() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        for f in 0..MATERIALIZE_FLUSHES {
            flush_writing(&s, (0..10).map(|i| format!("f{f}-{i}")));
        }
        assert!(s.buffer().direct_left > 0, "direct mode");
        put_kv(&s, Space::Streams, "x", "1");
        flush_writing(&s, (0..=DIRECT_APPLY_MAX).map(|i| format!("big{i:05}")));
        assert!(
            !log_parts(&s).is_empty(),
            "too large to apply directly: logged"
        );
        // deleted again while only the buffer holds them: the buffer is small again
        let mut w = WriteSet::default();
        for i in 0..=DIRECT_APPLY_MAX {
            w.delete(Space::Streams, format!("big{i:05}").into_bytes());
        }
        s.commit(w).unwrap();
        assert!(s.buffer().writes.len() < DIRECT_APPLY_MAX);
        put_kv(&s, Space::Streams, "x", "2");
        s.flush().unwrap();
        assert_eq!(
            s.log_records(),
            2,
            "logged too: a direct apply would leave x=1 in the log"
        );
        let s = reopen(dir.path(), s);
        assert_eq!(value(&s, Space::Streams, "x").as_deref(), Some("2"));
    }

    #[test]
    fn a_load_that_rewrites_its_keys_stays_on_the_log() {
        let s = SledStorage::temporary().unwrap();
        let keys = || (0..10).map(|i| format!("{i:02}"));
        for _ in 0..MATERIALIZE_FLUSHES {
            flush_writing(&s, keys());
        }
        assert_eq!(s.buffer().direct_left, 0);
        flush_writing(&s, keys());
        assert_eq!(log_parts(&s).len(), 1);
    }

    #[test]
    fn every_materialize_flushes_flush_applies_the_buffer_and_empties_the_log() {
        let s = SledStorage::temporary().unwrap();
        for i in 0..MATERIALIZE_FLUSHES {
            put_kv(&s, Space::Streams, "k", &i.to_string());
            s.flush().unwrap();
            let logged = log_parts(&s).len() as u32;
            match i + 1 == MATERIALIZE_FLUSHES {
                true => assert_eq!(logged, 0, "flush {i} materializes"),
                false => assert_eq!(logged, i + 1, "flush {i} logs"),
            }
        }
        let last = (MATERIALIZE_FLUSHES - 1).to_string();
        assert_eq!(
            s.tree.get([Space::Streams as u8, b'k']).unwrap().as_deref(),
            Some(last.as_bytes())
        );
        assert!(s.buffer().writes.is_empty());
    }

    #[test]
    fn a_large_buffer_materializes_at_the_next_flush() {
        let s = SledStorage::temporary().unwrap();
        let big = "v".repeat(MATERIALIZE_BYTES / 4 + 1);
        for k in ["a", "b", "c", "d"] {
            put_kv(&s, Space::Messages, k, &big);
        }
        s.flush().unwrap();
        assert!(log_parts(&s).is_empty());
        assert_eq!(s.tree.scan_prefix([Space::Messages as u8]).count(), 4);
        assert_eq!(
            value(&s, Space::Messages, "d").as_deref(),
            Some(big.as_str())
        );
    }

    #[test]
    fn a_corrupt_log_record_refuses_to_open_instead_of_losing_commits() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        put_kv(&s, Space::Streams, "a", "1");
        s.flush().unwrap();
        put_kv(&s, Space::Streams, "b", "2");
        s.flush().unwrap();
        let key = s
            .tree
            .scan_prefix([LOG_PREFIX])
            .keys()
            .last()
            .unwrap()
            .unwrap();
        s.tree
            .insert(key, &[TAG_PUT, 0, 0, 0, 9, b'a'][..])
            .unwrap();
        s.db.flush().unwrap();
        s.discard_unflushed();
        drop(s);
        let err = loop {
            match SledStorage::open(dir.path()) {
                Err(StoreError::Corrupt { space, detail }) => break (space, detail),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                Ok(_) => panic!("a cut log record opened"),
            }
        };
        assert_eq!(err.0, "flush log");
        // the failed open changed nothing: both records are there, nothing was applied
        let (records, a) = raw(dir.path(), |tree| {
            (
                tree.scan_prefix([LOG_PREFIX]).count(),
                tree.get(prefixed(Space::Streams, b"a")).unwrap(),
            )
        });
        assert_eq!((records, a), (2, None));
    }

    /// Opens the directory with sled alone (as a release before the log would).
    fn raw<T>(dir: &Path, f: impl FnOnce(&sled::Tree) -> T) -> T {
        let db = loop {
            match sled::Config::new().path(dir).open() {
                Ok(db) => break db,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        f(&db.open_tree(TREE).unwrap())
    }

    #[test]
    fn a_store_only_read_is_left_as_it_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        put_kv(&s, Space::Streams, "a", "1");
        s.flush().unwrap();
        let s = reopen(dir.path(), s);
        assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("1"));
        drop(s); // read, never written: no materialization
        let records = raw(dir.path(), |tree| tree.scan_prefix([LOG_PREFIX]).count());
        assert_eq!(records, 1);
        // one that writes is materialized when dropped
        let s = SledStorage::open(dir.path()).unwrap();
        put_kv(&s, Space::Streams, "b", "2");
        drop(s);
        let (records, a) = raw(dir.path(), |tree| {
            (
                tree.scan_prefix([LOG_PREFIX]).count(),
                tree.get(prefixed(Space::Streams, b"a")).unwrap(),
            )
        });
        assert_eq!((records, a.as_deref()), (0, Some(&b"1"[..])));
    }

    #[test]
    fn a_crash_between_the_batches_of_a_materialization_reads_the_same_as_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStorage::open(dir.path()).unwrap();
        // a stored piece the materialization will extend (a write to a key not buffered)
        put(&s, 0, "ab");
        for k in 0..20u8 {
            put_kv(&s, Space::Streams, &format!("k{k:02}"), "old");
        }
        s.materialize_now().unwrap();
        put(&s, 1, "cd");
        for k in 0..20u8 {
            put_kv(&s, Space::Streams, &format!("k{k:02}"), &format!("new{k}"));
        }
        s.flush().unwrap();
        put(&s, 2, "ef");
        let mut w = WriteSet::default();
        w.delete(Space::Streams, b"k03".to_vec());
        s.commit(w).unwrap();
        let before = (text(&s), s.scan_prefix(Space::Streams, b"").unwrap());
        assert_eq!(before.0, "abcdef");
        for stop in [1, 3, 6] {
            STOP_BEFORE_BATCH.with(|c| c.set(Some(stop)));
            assert!(s.materialize_now().is_err(), "stops before batch {stop}");
            STOP_BEFORE_BATCH.with(|c| c.set(None));
            assert!(
                !log_parts(&s).is_empty(),
                "the log is deleted in the last batch only"
            );
        }
        let s = reopen(dir.path(), s);
        assert_eq!(
            (text(&s), s.scan_prefix(Space::Streams, b"").unwrap()),
            before
        );
        s.materialize_now().unwrap();
        let s = reopen(dir.path(), s);
        assert_eq!(
            (text(&s), s.scan_prefix(Space::Streams, b"").unwrap()),
            before
        );
        assert_eq!(stored_args(&s), 1, "the stored piece was extended once");
    }

    /// One step of [`the_flush_log_keeps_what_was_flushed_through_crashes_and_materializations`].
    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        /// Rewrites a key's value (48 bytes when it had fewer) with one byte changed at a
        /// position, or one byte appended (`true`), or one removed: logged as a patch of what
        /// the last flush held (`TAG_PATCH`).
        Edit(u8, u8, u8, Option<bool>),
        /// Puts a key no earlier step wrote (while there are some): a load the log does not
        /// pay for, so materializations switch to direct flushes.
        Fresh(u8),
        Delete(u8),
        Piece(u8, u8),
        /// Half a [`DIRECT_PIECE_BYTES`]: a buffered piece crosses it in two.
        BigPiece(u8, u8),
        Replace(u8),
        Flush,
        Materialize,
        Crash,
        /// A crash before this batch of a materialization.
        CrashMaterializing(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..6, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            4 => (0u8..6, any::<u8>(), any::<u8>(), any::<Option<bool>>())
                .prop_map(|(k, at, v, grow)| Op::Edit(k, at, v, grow)),
            3 => any::<u8>().prop_map(Op::Fresh),
            1 => (0u8..6).prop_map(Op::Delete),
            4 => (0u8..3, any::<u8>()).prop_map(|(c, v)| Op::Piece(c, v)),
            1 => (0u8..3, any::<u8>()).prop_map(|(c, v)| Op::BigPiece(c, v)),
            1 => (0u8..3).prop_map(Op::Replace),
            6 => Just(Op::Flush),
            1 => Just(Op::Materialize),
            1 => Just(Op::Crash),
            1 => (0usize..4).prop_map(Op::CrashMaterializing),
        ]
    }

    /// What the storage reads: plain keys and each call's text.
    type Model = (BTreeMap<u8, Vec<u8>>, BTreeMap<u8, Vec<u8>>);

    fn read(s: &SledStorage) -> Model {
        let plain = s
            .scan_prefix(Space::Streams, b"")
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k[0], v))
            .collect();
        let mut calls: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
        for c in 0..3u8 {
            let text: Vec<u8> = s
                .scan_prefix(Space::Args, &crate::keys::args_prefix(MSG, u32::from(c)))
                .unwrap()
                .into_iter()
                .flat_map(|(_, v)| v)
                .collect();
            if !text.is_empty() {
                calls.insert(c, text);
            }
        }
        (plain, calls)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
        /// Puts, deletes, argument appends and replaces, with flushes, materializations and
        /// crashes in between: after every crash the storage reads exactly what the last flush
        /// before it held; a materialization changes nothing a reader sees.
        #[test]
        fn the_flush_log_keeps_what_was_flushed_through_crashes_and_materializations(
            ops in proptest::collection::vec(op(), 1..500)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = SledStorage::open(dir.path()).unwrap();
            let mut live: Model = Default::default();
            let mut flushed: Model = Default::default();
            // next piece number per call (piece numbers only grow until a replace)
            let mut next = [0u32; 3];
            let mut fresh = 100u8;
            for op in ops {
                match op {
                    Op::Fresh(v) => {
                        let mut w = WriteSet::default();
                        w.put(Space::Streams, vec![fresh], vec![v]);
                        s.commit(w).unwrap();
                        live.0.insert(fresh, vec![v]);
                        fresh = fresh.checked_add(1).unwrap_or(100);
                    }
                    Op::Put(k, v) => {
                        let mut w = WriteSet::default();
                        w.put(Space::Streams, vec![k], vec![v]);
                        s.commit(w).unwrap();
                        live.0.insert(k, vec![v]);
                    }
                    Op::Edit(k, at, v, grow) => {
                        let mut value = live.0.get(&k).cloned().unwrap_or_default();
                        if value.len() < 48 {
                            value = (0..48u8).map(|i| i.wrapping_mul(k.wrapping_add(7))).collect();
                        }
                        let at = usize::from(at) % value.len();
                        match grow {
                            Some(true) => value.insert(at, v),
                            Some(false) => drop(value.remove(at)),
                            None => value[at] = v,
                        }
                        let mut w = WriteSet::default();
                        w.put(Space::Streams, vec![k], value.clone());
                        s.commit(w).unwrap();
                        live.0.insert(k, value);
                    }
                    Op::Delete(k) => {
                        let mut w = WriteSet::default();
                        w.delete(Space::Streams, vec![k]);
                        s.commit(w).unwrap();
                        live.0.remove(&k);
                    }
                    Op::Piece(c, v) | Op::BigPiece(c, v) => {
                        let len = match op {
                            Op::BigPiece(..) => DIRECT_PIECE_BYTES.div_ceil(2),
                            _ => 3,
                        };
                        let n = next[usize::from(c)];
                        let mut w = WriteSet::default();
                        w.put(Space::Args, args_piece(MSG, u32::from(c), n), vec![v; len]);
                        s.commit(w).unwrap();
                        next[usize::from(c)] = n + 1;
                        live.1.entry(c).or_default().extend(vec![v; len]);
                    }
                    Op::Replace(c) => {
                        let mut w = WriteSet::default();
                        for n in 0..next[usize::from(c)] {
                            w.delete(Space::Args, args_piece(MSG, u32::from(c), n));
                        }
                        w.put(Space::Args, args_piece(MSG, u32::from(c), 0), b"R".to_vec());
                        s.commit(w).unwrap();
                        next[usize::from(c)] = 1;
                        live.1.insert(c, b"R".to_vec());
                    }
                    Op::Flush => {
                        s.flush().unwrap();
                        flushed = live.clone();
                    }
                    Op::Materialize => {
                        s.materialize_now().unwrap();
                        flushed = live.clone();
                    }
                    Op::Crash | Op::CrashMaterializing(_) => {
                        if let Op::CrashMaterializing(before) = op {
                            STOP_BEFORE_BATCH.with(|s| s.set(Some(before)));
                            // stops before that batch, or completes when there are fewer;
                            // either way the buffer was logged whole first, so all of it is kept
                            let _ = s.materialize_now();
                            flushed = live.clone();
                            STOP_BEFORE_BATCH.with(|s| s.set(None));
                        }
                        s = reopen(dir.path(), s);
                        live = flushed.clone();
                        // the piece count a store reads back: the stored pieces' last number + 1
                        for c in 0..3u8 {
                            next[usize::from(c)] = s
                                .scan_prefix(Space::Args, &crate::keys::args_prefix(MSG, u32::from(c)))
                                .unwrap()
                                .last()
                                .map_or(0, |(k, _)| {
                                    let n: [u8; 4] = k[k.len() - 4..].try_into().unwrap();
                                    u32::from_be_bytes(n) + 1
                                })
                                .max(next[usize::from(c)]);
                        }
                    }
                }
                proptest::prop_assert_eq!(read(&s), live.clone());
            }
        }
    }

    proptest::proptest! {
        /// A patch rebuilds the value from its base, whatever the two hold, and is taken only
        /// when shorter than the whole value; the word-wise prefix and suffix agree with a
        /// byte-wise count.
        #[test]
        fn a_patch_rebuilds_its_value_from_its_base(
            base in proptest::collection::vec(0u8..4, 0..80),
            edits in proptest::collection::vec((proptest::prelude::any::<usize>(), 0u8..4, 0u8..3), 0..4),
        ) {
            let mut value = base.clone();
            for (at, v, how) in edits {
                let at = at % (value.len() + 1);
                match how {
                    0 => value.insert(at, v),
                    1 if at < value.len() => value[at] = v,
                    _ if at < value.len() => drop(value.remove(at)),
                    _ => value.push(v),
                }
            }
            let naive_prefix = base.iter().zip(&value).take_while(|(a, b)| a == b).count();
            proptest::prop_assert_eq!(common_prefix(&base, &value), naive_prefix);
            let naive_suffix = base.iter().rev().zip(value.iter().rev()).take_while(|(a, b)| a == b).count();
            proptest::prop_assert_eq!(common_suffix(&base, &value), naive_suffix);
            if let Some((prefix, suffix, middle)) = patch_of(&base, &value) {
                proptest::prop_assert!(middle.len() + 8 < value.len());
                let (prefix, suffix) = (prefix as usize, suffix as usize);
                let mut rebuilt = base[..prefix].to_vec();
                rebuilt.extend_from_slice(middle);
                rebuilt.extend_from_slice(&base[base.len() - suffix..]);
                proptest::prop_assert_eq!(rebuilt, value);
            }
        }
    }
}
