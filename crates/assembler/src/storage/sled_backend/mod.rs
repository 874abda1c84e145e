//! sled [`Storage`]: every keyspace lives in ONE sled tree under a one-byte prefix, behind
//! in-memory layers of writes that a **flush log** of our own makes durable.
//!
//! - `commit` applies the set's writes to the **active layer** (under one lock, so a commit is
//!   atomic to every reader) and appends, for each write, the log entry that redoes it
//!   (`layer`: a value whole, or as a patch of the value it replaces, or the bytes appended to
//!   an argument piece). Reads look in the active layer, then the frozen one, then in sled.
//! - `flush` appends the entries gathered since the last flush as ONE record to the current
//!   log segment and syncs it (`fdatasync`; `wal`). That is all a flush writes: no sled
//!   write, no sled sync. Commits go on meanwhile (only the log's writer is locked).
//! - Every [`MATERIALIZE_FLUSHES`] flushes, or once the active layer holds
//!   [`MATERIALIZE_BYTES`] or its window's log [`MATERIALIZE_LOG_BYTES`], a flush **freezes**
//!   the active layer (a new one and a new segment start) and, once its record is synced,
//!   starts writing the frozen layer to sled's keyspaces: a slice of it per flush, from that
//!   flush on, so that no one flush holds its acks for a whole window; the last slice flushes
//!   sled and removes the window's segments (`materialize`; why in the flushes, not on a
//!   thread of its own: `materialize_frozen`). Readers see the frozen layer until sled holds
//!   it; commits go on meanwhile (the next flush waits for a slice), and a commit that makes
//!   the active layer outgrow [`SPILL_WRITES`] / [`SPILL_BYTES`] flushes and materializes it
//!   itself, as a flush does with the rest of a frozen layer when the next one is due.
//! - `open` replays the segments after sled's marker (the last window materialized) into
//!   the active layer: the state after a crash is sled plus the log, i.e. every flushed
//!   commit. A crash therefore loses exactly the commits made since the last flush (a suffix,
//!   never part of a commit), which is the storage contract.
//! - A clean stop settles: [`Storage::settle`] materializes everything and leaves no segment,
//!   so what is at rest is sled's keyspaces alone, in the form every earlier release reads
//!   (values go to sled in their form at rest, [`SledStorage::with_at_rest`]).
//! - sled's page cache is bounded by [`crate::Config::storage_cache_bytes`].
//!
//! Why: sled's cost is per key written (each insert clones its leaf and logs a fragment:
//! ~12 k instructions) and its flush writes its own log. Every input rewrites a stream's
//! state, a message's state, an argument piece and a fingerprint group, and with many
//! interleaved streams each flush touched each of those keys again. Earlier designs paid
//! that per commit (one sled transaction per input, ~33 µs), then per flush (four sled
//! inserts per input), then kept a log in sled itself (one sled value per flush, written and
//! later deleted, and at every flush a pass over every key changed to find what to log).
//! Now a commit writes its log entries as it goes, a flush is one append and one
//! `fdatasync`, and sled is written once per key per window, by the flushes from the one
//! that ends the window on, a slice each (off the worker's apply path; a commit that spills
//! does it itself).
//!
//! Stores written by an earlier release may hold log records in sled itself, under
//! [`LEGACY_LOG_PREFIX`] (a crash before a clean stop): they use the same entries, are
//! replayed first, and are deleted by the first materialization.

mod layer;
mod materialize;
#[cfg(test)]
mod tests;
mod wal;

use super::{AtRest, Pair, Space, Storage, Write, WriteSet};
use crate::error::{BackendErrorKind, StoreError};
use layer::Layer;
use materialize::Frozen;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Name of the sled tree that holds every keyspace.
const TREE: &str = "toolstream_v1";

/// Active-layer writes past which a commit flushes and materializes the active layer itself
/// (a caller that flushes rarely, or a burst of large chunks): memory stays bounded whatever
/// producers send.
pub const SPILL_WRITES: usize = 262_144;

/// Active-layer bytes (keys and values) past which the same happens (a caller that flushes
/// every few hundred inputs never gets there; a burst of large chunks between two flushes
/// does).
pub const SPILL_BYTES: usize = 8 * 1024 * 1024;

/// Largest stored argument piece a materialization rewrites to append a call's new pieces
/// to it (larger ones get a new key: a long argument is not copied again every window).
pub const EXTEND_STORED_MAX: usize = 4096;

/// Largest argument piece that later pieces of its call are joined onto, in a layer or when
/// materialized: tiny fragments become pieces of about this size, and a long argument stays
/// in pieces of at most about twice that. sled clones a leaf (up to 16 keys) for every write
/// to it and holds the replaced versions a while, so leaves holding a call's whole window of
/// text in one value are costly (one of the causes of the peak `materialize_frozen` tells
/// of; not measured alone).
pub const JOIN_PIECE_MAX: usize = 4096;

/// Flushes per window: the active layer is frozen and materialized every this many flushes
/// (8 in unit tests, so that random histories cross windows). Under a backlog the byte
/// bounds below end a window first; 256 rather than 64 flushes wrote sled ~45% less per input
/// (`materialize::run`, callgrind over `completion_cost --chunks 40000`: 164 M -> 91 M
/// instructions; 1,024 flushes: 86 M).
pub const MATERIALIZE_FLUSHES: u32 = if cfg!(test) { 8 } else { 256 };

/// Active-layer bytes at which the next flush freezes it.
pub const MATERIALIZE_BYTES: usize = 4 * 1024 * 1024;

/// Bytes of a window's log records at which the next flush freezes its layer (what a
/// restart after a crash reads back).
pub const MATERIALIZE_LOG_BYTES: usize = 8 * 1024 * 1024;

/// Most room a flush makes for the next flush's log entries ([`SledStorage::flush`]): a burst
/// of large chunks does not leave its size reserved.
const LOG_ROOM_MAX: usize = 1024 * 1024;

/// Key prefix of the log records an earlier release kept in sled, a byte after every
/// [`Space`]'s: `LEGACY_LOG_PREFIX · record (u64 BE) · part (u32 BE)`.
pub const LEGACY_LOG_PREFIX: u8 = 0xFE;

/// The key of sled's marker: the last window materialized (u64 BE), written in the same
/// batch as the end of its materialization. Outside every keyspace.
const MARKER_KEY: &[u8] = &[0xFD, b'w', b'a', b'l'];

/// sled's page cache when no size is given (as [`crate::Config::storage_cache_bytes`]).
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// A sled database holding the keyspaces in one prefixed tree, behind write layers and a
/// flush log (see the module docs).
#[derive(Debug)]
pub struct SledStorage {
    shared: Arc<Shared>,
    /// The log's writer; held for a whole flush, so flushes append in order.
    writer: Mutex<wal::Writer>,
    /// Set by [`SledStorage::discard_unflushed`]: the drop writes nothing, like a crash.
    crashed: AtomicBool,
    /// Whether anything was committed since the store was opened: a store only read (the
    /// `inspect` command) is left as it was found, log included.
    wrote: AtomicBool,
}

/// What the storage and its materializations share.
#[derive(Debug)]
struct Shared {
    db: sled::Db,
    tree: sled::Tree,
    wal_dir: PathBuf,
    /// The form values take in sled's keyspaces (see [`SledStorage::with_at_rest`]).
    at_rest: Option<AtRest>,
    state: Mutex<State>,
    /// Signalled when a materialization ends (or fails).
    materialized: Condvar,
    /// Tests: the batch before which the next materialization fails, as a crash there would
    /// stop it (`usize::MAX`: none; see [`SledStorage::fail_next_materialization_before`]).
    fail_before: std::sync::atomic::AtomicUsize,
    /// Tests: the next sled flush of a materialization fails ([`SledStorage::fail_next_sled_flush`]).
    fail_sled_flush: AtomicBool,
}

/// The layers and the log entries not yet flushed.
#[derive(Debug, Default)]
struct State {
    active: Layer,
    /// The layer being materialized, if one is.
    frozen: Option<Arc<Frozen>>,
    /// Where the frozen layer's materialization stands.
    phase: Phase,
    /// How far the slices of the frozen layer's materialization got (`materialize`).
    progress: materialize::Progress,
    /// Log entries of the active layer's commits since the last flush.
    log: Vec<u8>,
    /// Log entries of earlier windows not yet written (a freeze between two flushes, or a
    /// flush that failed): written first, oldest first.
    sealed: VecDeque<(u64, Vec<u8>)>,
    /// The window the active layer's commits belong to.
    window: u64,
    /// Records and bytes logged for the active layer's windows.
    window_records: u32,
    window_bytes: usize,
    /// Records the frozen layer holds.
    frozen_records: u32,
    /// Keys of an earlier release's log records in sled, replayed into the active layer.
    legacy: Vec<Vec<u8>>,
    /// A window sled holds (its materialization applied every batch) but whose sled flush
    /// failed: sled may not have it on disk, so its segments stay, and nothing more is
    /// appended to the log until sled is flushed and they are removed
    /// ([`Shared::sync_materialized`]). Otherwise a later record could rely on sled
    /// holding the window (a delete logged as a forget, say) and be durable before it.
    unsynced: Option<u64>,
    /// Where a commit builds each write's prefixed key (kept: commits do not allocate one).
    key_buf: Vec<u8>,
}

/// Where the materialization of the frozen layer stands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Phase {
    /// No layer is frozen.
    #[default]
    Idle,
    /// A layer was frozen; its materialization starts once the flush that froze it has
    /// synced its log, and goes on a slice per flush (`materialize`).
    Frozen,
    /// A slice of its materialization runs (in a flush).
    Running,
    /// Its materialization failed, for this reason: the layer stays frozen and readable, the
    /// log keeps it, and the next flush starts it again.
    Failed(String),
}

impl State {
    /// Freezes the active layer for materialization; a new window starts.
    fn freeze(&mut self) {
        let log = std::mem::take(&mut self.log);
        if !log.is_empty() {
            self.sealed.push_back((self.window, log));
        }
        let active = std::mem::take(&mut self.active);
        self.frozen = Some(Arc::new(Frozen {
            writes: active,
            window: self.window,
            legacy: std::mem::take(&mut self.legacy),
        }));
        self.frozen_records = self.window_records;
        self.phase = Phase::Frozen;
        self.progress = materialize::Progress::default();
        self.window += 1;
        self.window_records = 0;
        self.window_bytes = 0;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is whole before it is visible: a panic elsewhere cannot
    // leave half a commit behind.
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `key` of `space` as it is written in layers and in sled (its keyspace byte first), in
/// `buf` (a key built for each write was an allocation and a copy each).
fn in_space<'b>(buf: &'b mut Vec<u8>, space: Space, key: &[u8]) -> &'b [u8] {
    buf.clear();
    buf.push(space as u8);
    buf.extend_from_slice(key);
    buf
}

fn prefixed(space: Space, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(space as u8);
    k.extend_from_slice(key);
    k
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

fn materialization_failed(why: &str) -> StoreError {
    StoreError::Backend {
        backend: "sled",
        kind: BackendErrorKind::Io,
        detail: format!("materializing the flush log failed: {why}"),
    }
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

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Flushes sled (a materialization's last step before its segments go).
    fn sled_flush(&self) -> Result<(), StoreError> {
        if self.fail_sled_flush.swap(false, Ordering::SeqCst) {
            return Err(layer::corrupt("test: sled's flush failed"));
        }
        self.db.flush()?;
        Ok(())
    }

    /// The unsynced window ([`State::unsynced`]), if any: flushes sled and removes its
    /// segments now, or fails (the caller's flush with it). Called with the writer locked: by
    /// a materialization right after its last batch, and before a flush appends anything.
    fn sync_materialized(&self) -> Result<(), StoreError> {
        let Some(window) = self.state().unsynced else {
            return Ok(());
        };
        self.sled_flush()?;
        wal::remove_through(&self.wal_dir, window)?;
        let mut st = self.state();
        if st.unsynced == Some(window) {
            st.unsynced = None;
        }
        Ok(())
    }

    /// `value` of the prefixed `key` as it is written to sled's keyspaces.
    fn rest_form<'v>(&self, key: &[u8], value: &'v [u8]) -> Result<Cow<'v, [u8]>, StoreError> {
        match (self.at_rest, materialize::space_of(key)) {
            (Some(at_rest), Some(space)) => Ok(match at_rest(space, value)? {
                Some(other) => Cow::Owned(other),
                None => Cow::Borrowed(value),
            }),
            _ => Ok(Cow::Borrowed(value)),
        }
    }

    /// Fails a materialization before its batch `index` (`last`: whether that is its last
    /// batch) when a test asked for it: see [`SledStorage::fail_next_materialization_before`].
    fn fail_before_batch(&self, index: usize, last: bool) -> Result<(), StoreError> {
        let asked = self.fail_before.load(Ordering::SeqCst);
        if asked == usize::MAX || (asked != index && !(last && asked > index)) {
            return Ok(());
        }
        self.fail_before.store(usize::MAX, Ordering::SeqCst);
        Err(layer::corrupt(
            "test: stopped between materialization batches",
        ))
    }

    /// Rebuilds the layers from what is on disk: an earlier release's log records in sled,
    /// then the segments after sled's marker, into the active layer. Returns the state and,
    /// when the last segment ends in a torn record, where to cut it off.
    fn load(&self) -> Result<(State, Option<(u64, u64)>), StoreError> {
        let mut st = State::default();
        let marker = match self.tree.get(MARKER_KEY)? {
            Some(v) => v
                .as_ref()
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| layer::corrupt("a marker of the wrong length"))?,
            None => 0,
        };
        let mut legacy_record = None;
        for item in self.tree.scan_prefix([LEGACY_LOG_PREFIX]) {
            let (key, part) = item?;
            let record = key.get(1..9).filter(|_| key.len() == 13);
            if record.is_none() {
                return Err(layer::corrupt("a log key of the wrong length"));
            }
            if legacy_record != record.map(<[u8]>::to_vec) {
                st.window_records += 1;
                legacy_record = record.map(<[u8]>::to_vec);
            }
            st.active.replay(&part)?;
            st.window_bytes += part.len();
            st.legacy.push(key.to_vec());
        }
        let windows: Vec<u64> = wal::windows(&self.wal_dir)?
            .into_iter()
            .filter(|w| *w > marker)
            .collect();
        let mut torn = None;
        for (i, &w) in windows.iter().enumerate() {
            let segment = wal::read(&self.wal_dir, w)?;
            if let Some(at) = segment.torn_at {
                if i + 1 < windows.len() {
                    return Err(layer::corrupt(&format!(
                        "segment {w:x} ends in a torn record, and a later segment follows it"
                    )));
                }
                torn = Some((w, at));
            }
            for record in &segment.records {
                st.active.replay(record)?;
                st.window_records += 1;
                st.window_bytes += record.len();
            }
        }
        st.window = windows.last().copied().unwrap_or(marker + 1);
        Ok((st, torn))
    }
}

/// Writes the next slice of the frozen layer to sled, about `budget` writes (`None`: all that
/// is left; see `materialize`), in the calling thread (a flush, once the log of the flush that
/// froze the layer is synced: see [`Phase::Frozen`]), with the state lock let go meanwhile:
/// commits and reads go on. Returns the state lock again.
///
/// In the flushes, not on a thread of its own: a background thread writing sled while the
/// apply thread read it made sled's page cache and glibc's per-thread arenas grow far past
/// their bounds (`open_streams_memory open 2048 524288 4096`: 964 MiB at its peak; in the
/// flush, with the batches applied as they fill, 194 MiB; `open 100000 100`: 261 vs 218
/// MiB), and drained no faster (`perf`, 3 rounds: typical 94 k/s in the background vs 97.5
/// k/s in the flush, mixed 80.5 vs 83 k/s).
///
/// A failure leaves the layer frozen ([`Phase::Failed`]) for the next flush to try again; a
/// failed sled flush after the last batch leaves nothing frozen but the window unsynced
/// ([`State::unsynced`]). A panic on the way counts as a failure, so no one waits for it.
fn materialize_frozen<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    budget: Option<usize>,
) -> MutexGuard<'a, State> {
    let Some(frozen) = st.frozen.clone() else {
        // (a failure after the layer went to sled, a panic say: nothing is left to write)
        if matches!(st.phase, Phase::Failed(_)) {
            st.phase = Phase::Idle;
        }
        return st;
    };
    // (a failed attempt left no progress: this one starts from the layer's first key)
    let mut progress = std::mem::take(&mut st.progress);
    st.phase = Phase::Running;
    drop(st);
    let mut running = Running {
        shared,
        done: false,
    };
    let result = materialize::run(shared, &frozen, &mut progress, budget);
    running.done = true;
    let mut st = shared.state();
    match result {
        Ok(true) => {}
        Ok(false) => {
            st.progress = progress;
            st.phase = Phase::Frozen;
            shared.materialized.notify_all();
        }
        Err(e) => {
            tracing::error!(error = %e, "materializing the flush log failed; the next flush tries again");
            st.phase = match st.frozen.is_some() {
                true => Phase::Failed(e.to_string()),
                false => Phase::Idle,
            };
            shared.materialized.notify_all();
        }
    }
    st
}

/// Ends [`Phase::Running`] if a materialization unwinds (`done` unset): as a failure while its
/// layer is still frozen, else idle.
struct Running<'a> {
    shared: &'a Shared,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.shared.state();
        st.phase = match st.frozen.is_some() {
            true => Phase::Failed("the materialization panicked".into()),
            false => Phase::Idle,
        };
        self.shared.materialized.notify_all();
    }
}

/// Waits while a materialization runs.
fn wait_running<'a>(shared: &'a Shared, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    while st.phase == Phase::Running {
        st = match shared.materialized.wait(st) {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
    }
    st
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
        SledStorage::with_db(db, wal::dir_of(path))
    }

    /// A database in a temporary directory, removed when dropped.
    pub fn temporary() -> Result<SledStorage, StoreError> {
        SledStorage::temporary_with_cache(DEFAULT_CACHE_BYTES)
    }

    /// A database in a temporary directory with a page cache of `cache_bytes`.
    pub fn temporary_with_cache(cache_bytes: u64) -> Result<SledStorage, StoreError> {
        let config = sled::Config::new()
            .temporary(true)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None);
        // (sled removes the whole directory, log segments included, when it is dropped)
        let wal_dir = wal::dir_of(&config.get_path());
        SledStorage::with_db(config.open()?, wal_dir)
    }

    fn with_db(db: sled::Db, wal_dir: PathBuf) -> Result<SledStorage, StoreError> {
        let tree = db.open_tree(TREE)?;
        let shared = Shared {
            db,
            tree,
            wal_dir: wal_dir.clone(),
            at_rest: None,
            state: Mutex::new(State::default()),
            materialized: Condvar::new(),
            fail_before: std::sync::atomic::AtomicUsize::new(usize::MAX),
            fail_sled_flush: AtomicBool::new(false),
        };
        let (state, torn) = shared.load()?;
        *lock(&shared.state) = state;
        let mut writer = wal::Writer::new(wal_dir);
        writer.torn = torn;
        Ok(SledStorage {
            shared: Arc::new(shared),
            writer: Mutex::new(writer),
            crashed: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
        })
    }

    /// Writes values to sled's keyspaces in the form `at_rest` gives them (materializations;
    /// the layers and the log keep them as committed).
    pub fn with_at_rest(mut self, at_rest: AtRest) -> SledStorage {
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => shared.at_rest = Some(at_rest),
            // (nothing shares it before the first flush)
            None => tracing::error!("the storage's form at rest was set after it started"),
        }
        self
    }

    /// Whether anything below the active layer holds `key` (prefixed): the frozen layer, as a
    /// value or a tombstone, or sled.
    fn held_below(&self, st: &State, key: &[u8]) -> Result<bool, StoreError> {
        if st.frozen.as_ref().is_some_and(|f| f.writes.contains(key)) {
            return Ok(true);
        }
        Ok(self.shared.tree.contains_key(key)?)
    }

    /// The flush (see [`Storage::flush`]); with `spill`, it freezes the active layer whatever
    /// the cadence says (a materialization that failed is run again first, once; failing
    /// again, it is an error: the disk under sled does not take writes, and memory must stay
    /// bounded). A window left unsynced is synced before anything is appended.
    fn flush_log(&self, spill: bool) -> Result<(), StoreError> {
        let mut writer = lock(&self.writer);
        self.shared.sync_materialized()?;
        let (chunks, finish) = {
            let mut st = self.shared.state();
            if spill {
                st = wait_running(&self.shared, st);
                if let Phase::Failed(_) = st.phase {
                    st = materialize_frozen(&self.shared, st, None);
                    if let Phase::Failed(why) = &st.phase {
                        return Err(materialization_failed(why));
                    }
                }
            }
            let mut chunks: Vec<(u64, Vec<u8>)> = st.sealed.drain(..).collect();
            let log = std::mem::take(&mut st.log);
            // the next flush's entries are written into room for as many as this one's, not
            // into a buffer growing from empty (a copy of all of them at every doubling)
            let room = log.len().min(LOG_ROOM_MAX);
            if !log.is_empty() {
                chunks.push((st.window, log));
            }
            let logged: usize = chunks.iter().map(|(_, c)| c.len()).sum();
            if logged > 0 {
                st.window_records += 1;
                st.window_bytes += logged;
            }
            let due = spill
                || st.window_records >= MATERIALIZE_FLUSHES
                || st.active.bytes >= MATERIALIZE_BYTES
                || st.window_bytes >= MATERIALIZE_LOG_BYTES;
            let holds_any = !st.active.is_empty() || !st.legacy.is_empty();
            // (a layer still frozen when the next one is due: its window ended in fewer
            // flushes than its slices took (a backlog's windows end by bytes), or it failed;
            // the rest of it is written below, in this flush, and the next flush freezes)
            let finish = due && holds_any && st.frozen.is_some();
            if due && holds_any && st.frozen.is_none() {
                st.freeze();
            }
            // (after the freeze, which takes the log: the state is locked, nothing was logged)
            st.log.reserve(room);
            (chunks, finish)
        };
        for (i, (window, payload)) in chunks.iter().enumerate() {
            if payload.is_empty() {
                continue;
            }
            if let Err(e) = writer.append(*window, payload) {
                // Not durable: the entries go back in front, for the next flush to write.
                let mut st = self.shared.state();
                for (window, mut payload) in chunks.into_iter().skip(i).rev() {
                    if window == st.window {
                        payload.extend_from_slice(&st.log);
                        st.log = payload;
                    } else {
                        st.sealed.push_front((window, payload));
                    }
                }
                return Err(e);
            }
        }
        let st = self.shared.state();
        if matches!(st.phase, Phase::Frozen | Phase::Failed(_)) {
            let budget = match (spill || finish, &st.frozen) {
                (false, Some(frozen)) => Some(materialize::slice_writes(frozen.writes.len())),
                _ => None,
            };
            drop(materialize_frozen(&self.shared, st, budget));
        }
        if spill && finish {
            // A spill that found a layer still frozen (between its slices) wrote the rest of
            // it above but froze nothing: once more, to freeze the active layer and write it
            // too, so that memory stays bounded (its records are appended first, as always).
            drop(writer);
            return self.flush_log(true);
        }
        Ok(())
    }

    /// Materializes everything and waits for it: afterwards sled's keyspaces hold every
    /// commit, and no segment is left.
    fn materialize_all(&self) -> Result<(), StoreError> {
        loop {
            self.flush_log(true)?;
            let st = wait_running(&self.shared, self.shared.state());
            if let Phase::Failed(why) = &st.phase {
                return Err(materialization_failed(why));
            }
            let done = st.active.is_empty()
                && st.legacy.is_empty()
                && st.log.is_empty()
                && st.sealed.is_empty();
            drop(st);
            if done {
                // What is left: segments a crash left behind a marker, and the current
                // window's, if its entries only dropped keys its own layer had put (replayed,
                // they rebuild an empty layer). The writer lets go of its segment first: an
                // append must never go to a removed file.
                let mut writer = lock(&self.writer);
                self.shared.sync_materialized()?;
                writer.close();
                let mut st = self.shared.state();
                // (a commit came meanwhile; or another thread's flush froze a layer, and its
                // materialization failed: that window's segment must stay)
                if !(st.active.is_empty()
                    && st.legacy.is_empty()
                    && st.log.is_empty()
                    && st.sealed.is_empty()
                    && st.frozen.is_none())
                {
                    continue;
                }
                wal::remove_through(&self.shared.wal_dir, st.window)?;
                st.window_records = 0;
                st.window_bytes = 0;
                return Ok(());
            }
        }
    }

    /// Drops every commit made since the last flush, as a crash would (for tests that
    /// simulate a crash in-process: call this, then drop the store and reopen).
    ///
    /// A running materialization is let finish first (a crash could also have come after
    /// it). Afterwards the storage holds what is on disk (sled and the log, as a reopen after
    /// a crash reads them), and dropping it writes nothing more.
    pub fn discard_unflushed(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        // (a materialization runs in a flush, under the writer's lock: none runs now)
        let mut writer = lock(&self.writer);
        match self.shared.load() {
            Ok((state, torn)) => {
                *self.shared.state() = state;
                writer.close();
                writer.torn = torn;
            }
            Err(e) => {
                tracing::error!(error = %e, "reading the flush log back after a discard failed");
                *self.shared.state() = State::default();
            }
        }
    }

    /// Flush-log records not yet materialized (replayed at open): 0 after a clean stop,
    /// which settles the store (see the module docs).
    pub fn log_records(&self) -> u32 {
        let st = self.shared.state();
        st.window_records + st.frozen_records
    }

    /// Writes every commit to the keyspaces now and removes the log (see the module docs).
    /// Flushes do this on their own every [`MATERIALIZE_FLUSHES`]; tests call it to look at
    /// what sled holds.
    pub fn materialize_now(&self) -> Result<(), StoreError> {
        self.materialize_all()
    }

    /// For tests of crashes in the middle of a materialization: the next one fails before
    /// its batch `index` (before its last batch when it has fewer: `usize::MAX - 1` is
    /// "every batch but the last"), leaving sled as a crash there would, and the frozen layer
    /// and the log as they were. Call [`SledStorage::discard_unflushed`] then, as the crash.
    #[doc(hidden)]
    pub fn fail_next_materialization_before(&self, index: usize) {
        self.shared.fail_before.store(index, Ordering::SeqCst);
    }

    /// For tests of an I/O error after a materialization's last batch: its sled flush fails
    /// (see [`State::unsynced`]).
    #[doc(hidden)]
    pub fn fail_next_sled_flush(&self) {
        self.shared.fail_sled_flush.store(true, Ordering::SeqCst);
    }

    /// Up to `limit` live pairs under `space`/`prefix`: sled's, overlaid with the frozen
    /// layer, overlaid with the active one.
    fn merged(&self, space: Space, prefix: &[u8], limit: usize) -> Result<Vec<Pair>, StoreError> {
        let full = prefixed(space, prefix);
        let st = self.shared.state();
        let frozen = st.frozen.clone();
        let empty = layer::Layer::default();
        let mut active = st.active.range(&full).peekable();
        let mut below = frozen
            .as_ref()
            .map_or(&empty, |f| &f.writes)
            .range(&full)
            .peekable();
        let mut tree = self.shared.tree.scan_prefix(&full).peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            if let Some(Err(_)) = tree.peek() {
                if let Some(Err(e)) = tree.next() {
                    return Err(e.into());
                }
            }
            let tree_key = match tree.peek() {
                Some(Ok((k, _))) => Some(k.as_ref()),
                _ => None,
            };
            // the smallest key of the three; the upper layer's entry wins
            let Some(key) = [
                active.peek().map(|(k, _)| *k),
                below.peek().map(|(k, _)| *k),
                tree_key,
            ]
            .into_iter()
            .flatten()
            .min()
            .map(<[u8]>::to_vec) else {
                break;
            };
            let mut value: Option<Cow<'_, [u8]>> = None;
            if tree_key == Some(key.as_slice()) {
                if let Some(Ok((_, v))) = tree.next() {
                    value = Some(Cow::Owned(v.to_vec()));
                }
            }
            if below.peek().is_some_and(|(k, _)| **k == key) {
                value = below
                    .next()
                    .and_then(|(_, v)| v.as_deref().map(Cow::Borrowed));
            }
            if active.peek().is_some_and(|(k, _)| **k == key) {
                value = active
                    .next()
                    .and_then(|(_, v)| v.as_deref().map(Cow::Borrowed));
            }
            if let Some(v) = value {
                out.push((key.get(1..).unwrap_or_default().to_vec(), v.into_owned()));
            }
        }
        Ok(out)
    }
}

impl Storage for SledStorage {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let k = prefixed(space, key);
        {
            let st = self.shared.state();
            if let Some(v) = st.active.get(&k) {
                return Ok(v.clone());
            }
            if let Some(v) = st.frozen.as_ref().and_then(|f| f.writes.get(&k)) {
                return Ok(v.clone());
            }
        }
        Ok(self.shared.tree.get(k)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        self.merged(space, prefix, usize::MAX)
    }

    fn first_n(&self, space: Space, limit: usize) -> Result<Vec<Pair>, StoreError> {
        self.merged(space, b"", limit)
    }

    fn count(&self, space: Space) -> Result<usize, StoreError> {
        let prefix = [space as u8];
        let layered = {
            let st = self.shared.state();
            let held = |l: &layer::Layer| l.range(&prefix).next().is_some();
            held(&st.active) || st.frozen.as_ref().is_some_and(|f| held(&f.writes))
        };
        if layered {
            return Ok(self.merged(space, b"", usize::MAX)?.len());
        }
        // Nothing layered: count sled's keys without reading values.
        let mut n = 0;
        for k in self.shared.tree.scan_prefix(prefix).keys() {
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
        let spill = {
            let mut guard = self.shared.state();
            let st = &mut *guard;
            // Every sled read the commit needs comes first: a failed read leaves everything
            // as it was, so a commit is never half applied. Only a delete of a value the
            // active layer holds may drop it instead of leaving a tombstone, so only those
            // look below.
            let mut nothing_below = Vec::new();
            for w in &set.writes {
                if let Write::Delete(space, k) = w {
                    let k = prefixed(*space, k);
                    let held_here = matches!(st.active.get(&k), Some(Some(_)));
                    nothing_below.push(held_here && !self.held_below(st, &k)?);
                }
            }
            let mut nothing_below = nothing_below.into_iter();
            // (one buffer for every write's prefixed key)
            let kbuf = &mut st.key_buf;
            for w in set.writes {
                match w {
                    Write::Put(space, k, v) => {
                        st.active.put(in_space(kbuf, space, &k), v, &mut st.log)
                    }
                    Write::Delete(space, k) => {
                        let below_free = nothing_below.next().unwrap_or(false);
                        let k = in_space(kbuf, space, &k);
                        st.active.delete(k, below_free, &mut st.log);
                    }
                }
            }
            st.active.len() >= SPILL_WRITES || st.active.bytes >= SPILL_BYTES
        };
        if spill {
            self.flush_log(true)?;
        }
        Ok(())
    }

    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError> {
        let k = prefixed(space, key);
        self.wrote.store(true, Ordering::SeqCst);
        let mut guard = self.shared.state();
        let st = &mut *guard;
        let existed = match st.active.get(&k) {
            Some(None) => return Ok(false), // a tombstone
            Some(Some(_)) => true,
            None => match st.frozen.as_ref().and_then(|f| f.writes.get(&k)) {
                Some(v) => v.is_some(),
                None => self.shared.tree.contains_key(&k)?,
            },
        };
        if existed {
            let below_free = !self.held_below(st, &k)?;
            st.active.delete(&k, below_free, &mut st.log);
        }
        Ok(existed)
    }

    fn settle(&self) -> Result<(), StoreError> {
        self.materialize_all()
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.flush_log(false)
    }
}

impl Drop for SledStorage {
    /// A clean drop keeps what was committed, materialized (a crash does not: that is what
    /// `flush` is for); after [`SledStorage::discard_unflushed`], a failed open, or when
    /// nothing was committed, it writes nothing.
    fn drop(&mut self) {
        if !self.crashed.load(Ordering::SeqCst) && self.wrote.load(Ordering::SeqCst) {
            if let Err(e) = self.materialize_all() {
                tracing::error!(error = %e, "settling the store at drop failed; the flush log keeps what was flushed");
            }
        }
    }
}
