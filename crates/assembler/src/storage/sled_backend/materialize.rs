//! Materializing a frozen layer: writing it to sled's keyspaces, then letting go of the flush
//! log that held it (see the module docs of `super`).
//!
//! The layer goes to sled in batches of [`MATERIALIZE_BATCH_WRITES`] writes or
//! [`MATERIALIZE_BATCH_BYTES`], each applied as soon as it is full (sled keeps every leaf
//! version an insert replaces until its batch ends, so one batch for a layer spanning 100,000
//! streams held ~250 MiB more at its peak, `open_streams_memory open 100000 100`).
//! Those batches only write keys the frozen layer holds, with the values it holds: readers
//! look in the layer first, so they read the same before, during and after. The writes to
//! keys the layer does not hold (a stored argument piece extended with the layer's run of
//! pieces, see [`stored_piece_to_extend`]), the deletion of an earlier release's log records
//! and the **marker** (the window materialized through) go in one last batch, applied under
//! the state lock together with the layer's removal: no reader sees a piece extended while
//! the layer still holds the run. (That last batch is not bounded: one extension per call
//! the window continued, at most about 8 KiB each.) Then sled is flushed, and only then are
//! the window's segments removed: at every moment, sled plus the segments after its marker
//! hold every flushed commit.
//!
//! A layer goes to sled a **slice** at a time: each flush, from the one that froze it on, writes
//! the next [`slice_writes`] of it ([`Progress`] says where the last slice stopped), so that no
//! flush, and none of the acks waiting for it, holds for the whole layer (a typical window's
//! 3,400 keys took 12–15 ms in one flush, against 0.2 ms for a flush without one:
//! `completion_cost`). A slice leaves sled as a crash between two batches would (see above),
//! so nothing changes for readers or for a restart. A flush that must have the layer gone (a
//! spill, a clean stop, a window due while the layer is still there) writes all of the rest.

use super::layer::{piece_of, Key, Layer};
use super::{lock, Shared, EXTEND_STORED_MAX, JOIN_PIECE_MAX, MARKER_KEY};
use crate::error::StoreError;
use crate::storage::{Pair, Space};
use std::borrow::Cow;

/// Writes applied to sled per batch (a few in unit tests, so that they cross batches).
pub(super) const MATERIALIZE_BATCH_WRITES: usize = if cfg!(test) { 3 } else { 512 };

/// Bytes (keys and values) written to sled per batch: a batch's replaced leaf versions are
/// held until it ends, and leaves holding argument text are large.
pub(super) const MATERIALIZE_BATCH_BYTES: usize = 1024 * 1024;

/// A layer frozen for materialization: read beneath the active layer until sled holds it.
#[derive(Debug)]
pub(super) struct Frozen {
    pub writes: Layer,
    /// The last window whose commits it holds (the marker written with it).
    pub window: u64,
    /// Keys of an earlier release's log records in sled that it holds (deleted with it).
    pub legacy: Vec<Vec<u8>>,
}

/// Layers are written in about this many slices ([`slice_writes`]): a window of
/// [`super::MATERIALIZE_FLUSHES`] flushes leaves its successor ample flushes to finish in.
pub(super) const MATERIALIZE_SLICES: usize = if cfg!(test) { 3 } else { 32 };

/// Fewest writes a slice holds (a slice of a few keys would spread a small layer over flushes
/// for nothing: a slice's sled batch has a fixed cost).
pub(super) const SLICE_WRITES_MIN: usize = if cfg!(test) { 2 } else { 128 };

/// Writes per slice of a layer of `keys` keys.
pub(super) fn slice_writes(keys: usize) -> usize {
    keys.div_ceil(MATERIALIZE_SLICES).max(SLICE_WRITES_MIN)
}

/// Where the materialization of a frozen layer stands between its slices. Dropped when it
/// fails: the next attempt starts from the layer's first key, writing the same values again.
#[derive(Default)]
pub(super) struct Progress {
    /// The last key of the layer written (or joined into a run), if any.
    after: Option<Key>,
    /// The run of argument pieces being joined when the last slice stopped.
    run: Option<Run>,
    /// Batches applied so far (what [`Shared::fail_before_batch`] counts).
    applied: usize,
    /// The last batch so far (writes to keys the layer does not hold).
    last: sled::Batch,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("after", &self.after)
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

/// Writes the next slice of `frozen` to sled, about `budget` writes (`None`: all that is left),
/// and, once nothing is left, its last batch, and lets go of it (see the module docs). Returns
/// whether it is gone. On an error before its last batch the layer stays where it is,
/// readable, and the log still holds it: nothing is lost, and a later flush starts it again.
/// On an error in sled's flush after it, the layer is gone (sled holds it) and the window
/// stays unsynced: the next flush syncs it before it appends anything
/// ([`super::State::unsynced`]).
pub(super) fn run(
    shared: &Shared,
    frozen: &Frozen,
    progress: &mut Progress,
    budget: Option<usize>,
) -> Result<bool, StoreError> {
    if !apply_batches(shared, &frozen.writes, progress, budget)? {
        return Ok(false);
    }
    shared.fail_before_batch(progress.applied, true)?;
    let mut last = std::mem::take(&mut progress.last);
    for key in &frozen.legacy {
        last.remove(key.as_slice());
    }
    last.insert(MARKER_KEY, &frozen.window.to_be_bytes());
    {
        let mut st = lock(&shared.state);
        shared.tree.apply_batch(last)?;
        st.frozen = None;
        st.frozen_records = 0;
        st.phase = super::Phase::Idle;
        st.unsynced = Some(frozen.window);
    }
    shared.materialized.notify_all();
    shared.sync_materialized()?;
    Ok(true)
}

/// A run of argument pieces being joined: the key written, the last piece number, the text,
/// whether the key is a stored piece's (extended, so it goes in the last batch), and the
/// buffered keys folded into it.
type Run = (Vec<u8>, u32, Vec<u8>, bool, Vec<Vec<u8>>);

/// Applies the writes of `writes` after `progress` to sled in batches of at most
/// [`MATERIALIZE_BATCH_WRITES`] writes (and [`MATERIALIZE_BATCH_BYTES`]) to keys it holds, each
/// as soon as it is full (the layer is not copied whole first: 41 MiB at the peak of `open
/// 100000 100`), stopping after about `budget` writes (`None`: at the end); returns whether
/// it got to the end. The writes to keys the layer does not hold (stored argument pieces
/// extended) gather in `progress`'s last batch, for the caller to apply once at the end.
///
/// A run of consecutive argument pieces of one call is written as its first piece holding
/// their concatenation (see [`Space::Args`]): one sled write instead of one per fragment. A
/// run that continues a call already in sled is appended to the call's last stored piece
/// ([`stored_piece_to_extend`]), so a call streamed over many windows keeps one key. The keys
/// folded into a run are removed from sled (they hold nothing there, unless a replace left an
/// older piece under the same number, whose text would otherwise be read after the run's:
/// `flush_log_review_2.rs`). Values go in their form at rest ([`Shared::rest_form`]). A run a
/// slice ends in is carried to the next slice (`progress`), and written when it ends there.
fn apply_batches(
    shared: &Shared,
    writes: &Layer,
    progress: &mut Progress,
    budget: Option<usize>,
) -> Result<bool, StoreError> {
    let mut batch = Batches::new(shared, progress.applied, std::mem::take(&mut progress.last));
    let mut run = progress.run.take();
    let mut prev: Option<&Key> = None;
    let mut done = true;
    for (k, v) in writes.iter_after(progress.after.as_deref()) {
        if budget.is_some_and(|b| batch.written >= b) {
            done = false;
            break;
        }
        let piece = piece_of(k);
        if let (Some((first_key, last, text, _, folded)), Some((prefix, n)), Some(bytes)) =
            (run.as_mut(), piece, v.as_ref())
        {
            if first_key.len() == k.len()
                && first_key.starts_with(prefix)
                && last.checked_add(1) == Some(n)
                && text.len() < JOIN_PIECE_MAX
            {
                *last = n;
                text.extend_from_slice(bytes);
                folded.push(k.to_vec());
                prev = Some(k);
                continue;
            }
        }
        if let Some(run) = run.take() {
            batch.run(run)?;
        }
        match (v, piece) {
            (Some(v), Some((prefix, n))) => {
                // (the key before this one: this slice's, else where the last one stopped)
                let before = prev.map(|p| &p[..]).or(progress.after.as_deref());
                let follows_buffered =
                    before.is_some_and(|p| p.len() == k.len() && p.starts_with(prefix));
                // (a run that starts with a piece of EXTEND_STORED_MAX or more, which joined
                // 4 KiB fragments always reach, gets a key of its own without looking at
                // sled: reading the call's last stored piece pulls its leaf, large with
                // argument text, into sled's cache, which counts it by its size on disk (a
                // blob's pointer): `open 2048 131072 4096` held 120 MiB of such leaves)
                let stored = match follows_buffered || v.len() >= EXTEND_STORED_MAX {
                    true => None,
                    false => stored_piece_to_extend(shared, k, prefix, n)?,
                };
                run = Some(match stored {
                    Some((key, mut text)) => {
                        text.extend_from_slice(v);
                        (key, n, text, true, vec![k.to_vec()])
                    }
                    None => (k.to_vec(), n, v.clone(), false, Vec::new()),
                });
            }
            (Some(v), None) => match shared.rest_form(k, v)? {
                Cow::Borrowed(v) => batch.insert(&k[..], v, false)?,
                Cow::Owned(v) => batch.insert(&k[..], v, false)?,
            },
            (None, _) => batch.remove(&k[..])?,
        }
        prev = Some(k);
    }
    if done {
        if let Some(run) = run.take() {
            batch.run(run)?;
        }
    }
    if let Some(k) = prev {
        progress.after = Some(Key::clone(k));
    }
    progress.run = run;
    (progress.applied, progress.last) = batch.finish()?;
    Ok(done)
}

/// For a buffered argument piece `key` (piece `n` > 0 of the call `prefix`) that no buffered
/// write of the same call precedes: the call's last piece in sled and its value, when that
/// value is small enough to be rewritten with the new pieces appended ([`EXTEND_STORED_MAX`]).
///
/// Readers concatenate a call's pieces in key order and tolerate gaps in piece numbers, and
/// piece numbers only grow until a replace (which deletes the old pieces; a buffered delete
/// of the same call precedes the key then, and nothing is extended). So sled's last piece of
/// the call ends its stored text, and the new pieces continue it. Why: a call whose fragments
/// arrive in different windows otherwise leaves one sled key per window, which the end of its
/// message reads back one by one and deletes one by one.
fn stored_piece_to_extend(
    shared: &Shared,
    key: &[u8],
    prefix: &[u8],
    n: u32,
) -> Result<Option<Pair>, StoreError> {
    if n == 0 {
        return Ok(None);
    }
    let Some((stored_key, value)) = shared.tree.get_lt(key)? else {
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

/// A materialization's sled batches (see [`apply_batches`]): the current one, applied once
/// full, and the last one.
struct Batches<'a> {
    shared: &'a Shared,
    /// Batches applied so far (by this materialization, counting earlier slices).
    applied: usize,
    /// Writes put in regular batches by this slice.
    written: usize,
    current: sled::Batch,
    len: usize,
    bytes: usize,
    last: sled::Batch,
}

impl<'a> Batches<'a> {
    fn new(shared: &'a Shared, applied: usize, last: sled::Batch) -> Self {
        Batches {
            shared,
            applied,
            written: 0,
            current: sled::Batch::default(),
            len: 0,
            bytes: 0,
            last,
        }
    }

    /// Sets `key`; `unbuffered` when the layer does not hold `key` (then it goes last).
    fn insert(
        &mut self,
        key: impl Into<sled::IVec>,
        value: impl Into<sled::IVec>,
        unbuffered: bool,
    ) -> Result<(), StoreError> {
        match unbuffered {
            true => {
                self.last.insert(key, value);
                Ok(())
            }
            false => {
                let (key, value) = (key.into(), value.into());
                let bytes = key.len() + value.len();
                self.current.insert(key, value);
                self.counted(bytes)
            }
        }
    }

    fn remove(&mut self, key: impl Into<sled::IVec>) -> Result<(), StoreError> {
        let key = key.into();
        let bytes = key.len();
        self.current.remove(key);
        self.counted(bytes)
    }

    /// A finished run: its joined text under its key, the keys folded into it removed.
    fn run(&mut self, (key, _, text, stored, folded): Run) -> Result<(), StoreError> {
        self.insert(key, text, stored)?;
        for key in folded {
            self.remove(key)?;
        }
        Ok(())
    }

    fn counted(&mut self, bytes: usize) -> Result<(), StoreError> {
        self.len += 1;
        self.written += 1;
        self.bytes += bytes;
        if self.len >= MATERIALIZE_BATCH_WRITES || self.bytes >= MATERIALIZE_BATCH_BYTES {
            self.apply_current()?;
        }
        Ok(())
    }

    fn apply_current(&mut self) -> Result<(), StoreError> {
        self.shared.fail_before_batch(self.applied, false)?;
        self.shared
            .tree
            .apply_batch(std::mem::take(&mut self.current))?;
        self.applied += 1;
        self.len = 0;
        self.bytes = 0;
        Ok(())
    }

    /// Applies what is left of the current batch; how many were applied, and the last one.
    fn finish(mut self) -> Result<(usize, sled::Batch), StoreError> {
        if self.len > 0 {
            self.apply_current()?;
        }
        Ok((self.applied, self.last))
    }
}

/// The keyspace of a prefixed key.
pub(super) fn space_of(key: &[u8]) -> Option<Space> {
    key.first()
        .and_then(|b| Space::ALL.get(usize::from(*b)))
        .copied()
}
