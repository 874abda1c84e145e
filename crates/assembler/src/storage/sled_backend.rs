//! sled [`Storage`]: every keyspace lives in ONE sled tree under a one-byte prefix, behind a
//! write-back buffer.
//!
//! - `commit` puts the set's writes into an in-memory buffer (under one lock, so it is atomic
//!   to every reader); reads look in the buffer first, then in sled.
//! - `flush` applies the whole buffer to sled as ONE `Tree::apply_batch` (sled seals a batch
//!   in its log as a unit, so after a crash either all of it is there or none) and then
//!   fsyncs (`Db::flush`). A crash therefore loses exactly the commits made since the last
//!   flush — a suffix, never part of a commit — which is the storage contract.
//! - If the buffer grows past [`SPILL_WRITES`] writes or [`SPILL_BYTES`] bytes between
//!   flushes (a caller that flushes rarely, or a batch of large chunks), it is applied to sled
//!   early, still as one batch of whole commits, not fsynced: the buffer's memory is bounded
//!   whatever producers send.
//! - sled's page cache is bounded by [`crate::Config::storage_cache_bytes`] (sled's own
//!   default, 1 GiB, would let stored argument text fill the process's memory).
//!
//! - Consecutive argument pieces of one call in the buffer are written as ONE sled value
//!   under the first piece's key (readers concatenate a call's pieces in key order, and
//!   appends continue at the call's piece count, so gaps in piece numbers are harmless), and
//!   appended to the call's last piece already in sled when that one is at most
//!   [`EXTEND_STORED_MAX`] bytes: a call streamed over many flushes keeps one key.
//!
//! Why: measured on this machine, one sled transaction (or batch) per applied chunk cost
//! ~33 µs and made each group-commit flush ~10 ms (sled writing every intermediate state),
//! capping durable apply near 10,000 chunks/s. With the buffer, the many rewrites of a
//! stream's state within a batch collapse into one sled write per key.

use super::{Pair, Space, Storage, Write, WriteSet};
use crate::error::{BackendErrorKind, StoreError};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Name of the sled tree that holds every keyspace.
const TREE: &str = "toolstream_v1";

/// Buffered writes after which the buffer is applied to sled before a flush.
pub const SPILL_WRITES: usize = 262_144;

/// Buffered bytes (keys and values, counted as written) after which the buffer is applied to
/// sled before a flush.
pub const SPILL_BYTES: usize = 32 * 1024 * 1024;

/// Largest stored argument piece a flush rewrites to append a call's new pieces to it
/// (larger ones get a new key: a long argument is not copied again at every flush).
pub const EXTEND_STORED_MAX: usize = 4096;

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
}

/// The write-back buffer and the bytes written into it since it was last applied.
#[derive(Debug, Default)]
struct Buffered {
    writes: Buffer,
    bytes: usize,
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
        Ok(SledStorage {
            db,
            tree,
            buffer: Mutex::new(Buffered::default()),
        })
    }

    fn buffer(&self) -> MutexGuard<'_, Buffered> {
        // The buffer is only changed by whole commits under the lock; a panic elsewhere
        // cannot leave half a commit in it.
        match self.buffer.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Applies the buffer to sled as one atomic batch (not fsynced). The buffer is emptied
    /// only once sled took the batch: on an error every commit stays buffered (readers still
    /// see it, and the next flush tries again), so nothing the caller was told is committed
    /// disappears.
    fn apply_buffer(&self, buffer: &mut Buffered) -> Result<(), StoreError> {
        if buffer.writes.is_empty() {
            return Ok(());
        }
        self.tree.apply_batch(self.batch_of(&buffer.writes)?)?;
        buffer.writes.clear();
        buffer.bytes = 0;
        Ok(())
    }

    /// The buffer as one sled batch. Keys and values are copied once, into sled's own
    /// buffers (they stay in the write-back buffer until sled took the batch).
    fn batch_of(&self, buffer: &Buffer) -> Result<sled::Batch, StoreError> {
        let mut batch = sled::Batch::default();
        // A run of consecutive argument pieces of one call is written as its first piece
        // holding their concatenation (see `Space::Args`): one sled write instead of one per
        // fragment. A run that continues a call already in sled is appended to the call's
        // last stored piece (see `stored_piece_to_extend`), so a call streamed over many
        // flushes keeps one key instead of one per flush.
        let mut run: Option<(Vec<u8>, u32, Vec<u8>)> = None;
        let mut prev: Option<&[u8]> = None;
        for (k, v) in buffer.iter() {
            let piece = piece_of(k);
            if let (Some((first_key, last, text)), Some((prefix, n)), Some(bytes)) =
                (run.as_mut(), piece, v.as_ref())
            {
                if first_key.len() == k.len()
                    && first_key.starts_with(prefix)
                    && last.checked_add(1) == Some(n)
                {
                    *last = n;
                    text.extend_from_slice(bytes);
                    prev = Some(k.as_slice());
                    continue;
                }
            }
            if let Some((key, _, text)) = run.take() {
                batch.insert(key, text);
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
                            (key, n, text)
                        }
                        None => (k.clone(), n, v.clone()),
                    });
                }
                (Some(v), None) => batch.insert(k.as_slice(), v.as_slice()),
                (None, _) => batch.remove(k.as_slice()),
            }
            prev = Some(k.as_slice());
        }
        if let Some((key, _, text)) = run.take() {
            batch.insert(key, text);
        }
        Ok(batch)
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

/// Appends an argument piece to the call's latest piece already in the buffer, if there is
/// one; otherwise hands the value back to be inserted under its own key.
///
/// Same invariant as the merge in [`SledStorage::apply_buffer`]: readers concatenate a call's
/// pieces in key order and tolerate gaps in piece numbers. Every piece in the buffer is newer
/// than every piece in sled (piece numbers only grow until a replace, which deletes the old
/// ones), so the buffer's last piece of the call is the end of its text. A tiny fragment then
/// costs an append to a buffered value, not a new key: 1.7× less per byte from 1–4 byte
/// fragments (`large_arguments` bench).
fn append_to_buffered_piece(buffer: &mut Buffer, key: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
    let Some((prefix, n)) = piece_of(key) else {
        return Some(value);
    };
    if n == 0 {
        return Some(value);
    }
    match buffer.range_mut(..key.to_vec()).next_back() {
        Some((last_key, Some(text)))
            if last_key.len() == key.len() && last_key.starts_with(prefix) =>
        {
            text.extend_from_slice(&value);
            None
        }
        _ => Some(value),
    }
}

impl SledStorage {
    /// Drops every commit made since the last flush, as a crash would (for tests that
    /// simulate a crash in-process: call this, then drop the store and reopen).
    pub fn discard_unflushed(&self) {
        let mut buffer = self.buffer();
        buffer.writes.clear();
        buffer.bytes = 0;
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
        let mut guard = self.buffer();
        let buffer = &mut *guard;
        for w in set.writes {
            match w {
                Write::Put(space, k, v) => {
                    let k = prefixed(space, &k);
                    buffer.bytes += k.len() + v.len();
                    if let Some(v) = append_to_buffered_piece(&mut buffer.writes, &k, v) {
                        buffer.writes.insert(k, Some(v));
                    }
                }
                Write::Delete(space, k) => {
                    let k = prefixed(space, &k);
                    buffer.bytes += k.len();
                    buffer.writes.insert(k, None);
                }
            }
        }
        if buffer.writes.len() >= SPILL_WRITES || buffer.bytes >= SPILL_BYTES {
            self.apply_buffer(buffer)?;
        }
        Ok(())
    }

    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError> {
        let k = prefixed(space, key);
        let mut buffer = self.buffer();
        let existed = match buffer.writes.get(&k) {
            Some(v) => v.is_some(),
            None => self.tree.contains_key(&k)?,
        };
        if existed {
            buffer.bytes += k.len();
            buffer.writes.insert(k, None);
        }
        Ok(existed)
    }

    fn flush(&self) -> Result<(), StoreError> {
        {
            let mut buffer = self.buffer();
            self.apply_buffer(&mut buffer)?;
        }
        self.db.flush()?;
        Ok(())
    }
}

impl Drop for SledStorage {
    /// A clean drop keeps what was committed (a crash does not: that is what `flush` is for).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::args_piece;

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
        s.flush().unwrap();
        for (n, t) in [(1, "c"), (2, "d"), (3, "e")] {
            put(&s, n, t);
            s.flush().unwrap();
            assert_eq!(stored_args(&s), 1, "piece {n} extends the stored piece");
        }
        put(&s, 4, "f");
        put(&s, 5, "g");
        assert_eq!(text(&s), "abcdefg");
        s.flush().unwrap();
        assert_eq!(stored_args(&s), 1);
        assert_eq!(text(&s), "abcdefg");
    }

    #[test]
    fn a_replace_of_a_stored_call_is_not_extended_and_later_pieces_are() {
        let s = SledStorage::temporary().unwrap();
        put(&s, 0, "old");
        s.flush().unwrap();
        put(&s, 1, "-er");
        s.flush().unwrap();
        let mut w = WriteSet::default();
        for n in 0..2 {
            w.delete(Space::Args, args_piece(MSG, 0, n));
        }
        w.put(Space::Args, args_piece(MSG, 0, 0), b"new".to_vec());
        s.commit(w).unwrap();
        put(&s, 1, "!");
        s.flush().unwrap();
        assert_eq!(text(&s), "new!");
        put(&s, 2, "?");
        s.flush().unwrap();
        assert_eq!(text(&s), "new!?");
        assert_eq!(stored_args(&s), 1);
    }

    #[test]
    fn a_long_stored_piece_is_not_copied_again_and_other_calls_are_not_extended() {
        let s = SledStorage::temporary().unwrap();
        let long = "x".repeat(EXTEND_STORED_MAX + 1);
        put(&s, 0, &long);
        s.flush().unwrap();
        put(&s, 1, "y");
        s.flush().unwrap();
        assert_eq!(stored_args(&s), 2, "the long piece stays as it is");
        assert_eq!(text(&s), format!("{long}y"));
        // call 1's first stored piece follows call 0's last key: never appended to it
        let mut w = WriteSet::default();
        w.put(Space::Args, args_piece(MSG, 1, 3), b"z".to_vec());
        s.commit(w).unwrap();
        s.flush().unwrap();
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
}
