//! A layer of buffered writes over sled's keyspaces (prefixed key → value, `None` a
//! tombstone), and the **log entries** that rebuild it: every change to the active layer is
//! written as one entry at the moment it is made, so a flush only has to append the entries
//! gathered since the last one (see the module docs of `super`).
//!
//! Entries: a tag byte and the key (u32 BE length, bytes), then
//! - [`TAG_PUT`]: the value (length, bytes);
//! - [`TAG_DELETE`]: nothing (a tombstone: a layer or sled below may hold the key);
//! - [`TAG_FORGET`]: nothing (drop the key: nothing below holds it, so no tombstone is needed);
//! - [`TAG_APPEND`]: bytes appended to the key's buffered value (an argument piece);
//! - [`TAG_PATCH`]: the lengths of the prefix and suffix kept of the key's buffered value
//!   (two u32 BE) and the bytes between them.
//!
//! The tags and their layout are those of the log records an earlier release kept in sled
//! (under [`super::LEGACY_LOG_PREFIX`]), so one replay reads both.
//!
//! An entry is relative to the layer as the entries before it left it, never to what sled
//! holds: a patch or an append names a key the layer holds a value for. So a window's
//! entries, replayed in order into an empty layer, rebuild exactly the layer that wrote them,
//! whatever sled holds meanwhile.

use crate::error::StoreError;
use crate::hash::FastMap;
use crate::storage::Space;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

/// A prefixed key (keyspace byte, key), shared by a layer's map and its order.
pub(super) type Key = Arc<[u8]>;

pub(super) const TAG_PUT: u8 = 0;
pub(super) const TAG_DELETE: u8 = 1;
pub(super) const TAG_APPEND: u8 = 2;
pub(super) const TAG_FORGET: u8 = 3;
pub(super) const TAG_PATCH: u8 = 4;

/// Buffered writes (prefixed key → value, `None` a tombstone) and the bytes they hold (keys
/// and values).
///
/// Found by key in a hash map, in order through a set of the same keys: every input rewrites
/// its stream's state, its message's state and its fingerprint group, keys the layer already
/// holds, and a lookup in an ordered map of a few thousand keys sharing long prefixes cost
/// ~1,000 instructions of byte comparisons (a hash lookup ~100); order is needed only for
/// new keys, scans and materializations.
#[derive(Debug, Default)]
pub(super) struct Layer {
    values: FastMap<Key, Option<Vec<u8>>>,
    order: BTreeSet<Key>,
    /// The latest argument piece written here of each call (the piece key's prefix): where
    /// its next piece is appended ([`Layer::put`]).
    latest_piece: FastMap<Key, Key>,
    pub bytes: usize,
}

impl Layer {
    /// The entry at `key` (prefixed): `Some(None)` a tombstone.
    pub fn get(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.values.get(key)
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.values.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every entry, in key order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Option<Vec<u8>>)> + '_ {
        self.order
            .iter()
            .filter_map(|k| self.values.get(k).map(|v| (&k[..], v)))
    }

    /// Every entry after `after` (from the first with `None`), in key order.
    pub fn iter_after<'a>(
        &'a self,
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a Key, &'a Option<Vec<u8>>)> + 'a {
        let start = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        self.order
            .range::<[u8], _>((start, Bound::Unbounded))
            .filter_map(|k| self.values.get(k).map(|v| (k, v)))
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn range<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Option<Vec<u8>>)> + 'a {
        self.order
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |k| k.starts_with(prefix))
            .filter_map(|k| self.values.get(k).map(|v| (&k[..], v)))
    }

    /// Sets `key` (prefixed) to `value` and appends the entry that does the same to `log`: an
    /// append to the call's latest argument piece here when `key` is a later piece of it,
    /// else a patch of the value here at `key` when that is shorter, else the value whole.
    pub fn put(&mut self, key: &[u8], value: Vec<u8>, log: &mut Vec<u8>) {
        let Some(value) = self.append_to_piece(key, value, log) else {
            return;
        };
        let new_len = value.len();
        match self.values.get_mut(key) {
            Some(old) => {
                let old_len = old.as_ref().map_or(0, Vec::len);
                match old.as_deref().and_then(|base| patch_of(base, &value)) {
                    Some((prefix, suffix, middle)) => {
                        entry(log, TAG_PATCH, key);
                        log.extend_from_slice(&prefix.to_be_bytes());
                        log.extend_from_slice(&suffix.to_be_bytes());
                        put_field(log, middle);
                    }
                    None => {
                        entry(log, TAG_PUT, key);
                        put_field(log, &value);
                    }
                }
                *old = Some(value);
                self.bytes = (self.bytes + new_len).saturating_sub(old_len);
            }
            None => {
                entry(log, TAG_PUT, key);
                put_field(log, &value);
                self.insert_new(key, Some(value));
            }
        }
        self.note_piece(key);
    }

    /// Deletes `key` (prefixed) and appends the entry that does the same to `log`. With
    /// `nothing_below` (no layer below this one and not sled holds `key`), a value held here
    /// is dropped instead of covered by a tombstone: every outbox row the relay deletes, say,
    /// would otherwise stay here as a tombstone that every scan of its keyspace walks past.
    pub fn delete(&mut self, key: &[u8], nothing_below: bool, log: &mut Vec<u8>) {
        if nothing_below && matches!(self.values.get(key), Some(Some(_))) {
            entry(log, TAG_FORGET, key);
            self.forget(key);
        } else {
            entry(log, TAG_DELETE, key);
            self.set(key, None);
            self.note_piece(key);
        }
    }

    /// Appends `value` (the argument piece at `key`) to the call's latest piece here, when
    /// that holds text, less than [`super::JOIN_PIECE_MAX`] bytes, and comes before `key`,
    /// logging the append; otherwise hands `value` back.
    ///
    /// Readers concatenate a call's pieces in key order and tolerate gaps in piece numbers,
    /// and a call's piece numbers only grow until a replace (which deletes the old pieces
    /// first, tombstones over every layer below): so the latest piece written here ends the
    /// call's text, and the new one continues it. A tiny fragment then costs an append, not
    /// a key of its own.
    fn append_to_piece(
        &mut self,
        key: &[u8],
        value: Vec<u8>,
        log: &mut Vec<u8>,
    ) -> Option<Vec<u8>> {
        let Some((prefix, n)) = piece_of(key) else {
            return Some(value);
        };
        if n == 0 {
            return Some(value);
        }
        let Some(latest) = self.latest_piece.get(prefix) else {
            return Some(value);
        };
        if latest.len() != key.len() || &latest[..] >= key {
            return Some(value);
        }
        match self.values.get_mut(latest) {
            Some(Some(text)) if text.len() < super::JOIN_PIECE_MAX => {
                entry(log, TAG_APPEND, latest);
                put_field(log, &value);
                self.bytes += value.len();
                text.extend_from_slice(&value);
                None
            }
            _ => Some(value),
        }
    }

    /// Remembers `key`, if it is an argument piece, as its call's latest piece written here.
    fn note_piece(&mut self, key: &[u8]) {
        let Some((prefix, _)) = piece_of(key) else {
            return;
        };
        let Some((stored, _)) = self.values.get_key_value(key) else {
            return;
        };
        let stored = Arc::clone(stored);
        match self.latest_piece.get_mut(prefix) {
            Some(latest) => *latest = stored,
            None => {
                self.latest_piece.insert(Arc::from(prefix), stored);
            }
        }
    }

    fn insert_new(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        let k: Key = Arc::from(key);
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        self.order.insert(Arc::clone(&k));
        self.values.insert(k, value);
    }

    /// Buffers `value` at `key` without logging it, keeping `bytes` right.
    fn set(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        match self.values.get_mut(key) {
            Some(old) => {
                let old_len = old.as_ref().map_or(0, Vec::len);
                let new_len = value.as_ref().map_or(0, Vec::len);
                *old = value;
                self.bytes = (self.bytes + new_len).saturating_sub(old_len);
            }
            None => self.insert_new(key, value),
        }
    }

    fn forget(&mut self, key: &[u8]) {
        if let Some(old) = self.values.remove(key) {
            self.order.remove(key);
            let len = key.len() + old.as_ref().map_or(0, Vec::len);
            self.bytes = self.bytes.saturating_sub(len);
            if let Some((prefix, _)) = piece_of(key) {
                if self.latest_piece.get(prefix).is_some_and(|l| &l[..] == key) {
                    self.latest_piece.remove(prefix);
                }
            }
        }
    }

    /// Applies the log entries in `payload` (one flush's, or a record of an earlier release's
    /// log in sled), in order.
    pub fn replay(&mut self, mut payload: &[u8]) -> Result<(), StoreError> {
        while let Some((&tag, rest)) = payload.split_first() {
            let (key, rest) = take_field(rest)?;
            payload = match tag {
                TAG_DELETE => {
                    self.set(key, None);
                    self.note_piece(key);
                    rest
                }
                TAG_FORGET => {
                    self.forget(key);
                    rest
                }
                TAG_PUT => {
                    let (value, rest) = take_field(rest)?;
                    self.set(key, Some(value.to_vec()));
                    self.note_piece(key);
                    rest
                }
                TAG_PATCH => {
                    let (prefix, rest) = take_u32(rest)?;
                    let (suffix, rest) = take_u32(rest)?;
                    let (middle, rest) = take_field(rest)?;
                    let Some(Some(value)) = self.values.get_mut(key) else {
                        return Err(corrupt("a patch of a value the log does not hold"));
                    };
                    let old_len = value.len();
                    if prefix.saturating_add(suffix) > old_len {
                        return Err(corrupt("a patch longer than its value"));
                    }
                    value.splice(prefix..old_len - suffix, middle.iter().copied());
                    self.bytes = (self.bytes + value.len()).saturating_sub(old_len);
                    rest
                }
                TAG_APPEND => {
                    let (tail, rest) = take_field(rest)?;
                    match self.values.get_mut(key) {
                        Some(Some(value)) => value.extend_from_slice(tail),
                        _ => return Err(corrupt("an append to a value the log does not hold")),
                    }
                    self.bytes += tail.len();
                    rest
                }
                _ => return Err(corrupt("an unknown entry tag")),
            };
        }
        Ok(())
    }
}

/// For a prefixed [`Space::Args`] key: (the call's prefix, piece number).
pub(super) fn piece_of(key: &[u8]) -> Option<(&[u8], u32)> {
    if key.first() != Some(&(Space::Args as u8)) || key.len() < 5 {
        return None;
    }
    let (prefix, n) = key.split_at(key.len() - 4);
    let n: [u8; 4] = n.try_into().ok()?;
    Some((prefix, u32::from_be_bytes(n)))
}

/// Starts an entry: its tag and key.
fn entry(log: &mut Vec<u8>, tag: u8, key: &[u8]) {
    log.push(tag);
    put_field(log, key);
}

/// Appends a length-prefixed field (u32 BE length).
fn put_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(field);
}

/// The patch turning `base` into `value` ([`TAG_PATCH`]): the lengths of their common
/// prefix and (in what follows it) common suffix, and `value`'s bytes between them; `None`
/// when logging `value` whole is no longer (two values with nothing in common).
pub(super) fn patch_of<'v>(base: &[u8], value: &'v [u8]) -> Option<(u32, u32, &'v [u8])> {
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

/// Length of the common prefix of `a` and `b`, compared 8 bytes at a time.
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
        .ok_or_else(|| corrupt("a cut patch length"))?;
    Ok((n as usize, bytes.get(4..).unwrap_or_default()))
}

/// Splits a length-prefixed field off the front of `bytes`.
fn take_field(bytes: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let (len, rest) = take_u32(bytes).map_err(|_| corrupt("a cut field length"))?;
    if rest.len() < len {
        return Err(corrupt("a cut field"));
    }
    Ok(rest.split_at(len))
}

pub(super) fn corrupt(detail: &str) -> StoreError {
    StoreError::Corrupt {
        space: "flush log",
        detail: detail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Byte-wise model of [`patch_of`]: the longest common prefix, then the longest common
    /// suffix of what follows it.
    fn model(base: &[u8], value: &[u8]) -> (usize, usize) {
        let p = base.iter().zip(value).take_while(|(a, b)| a == b).count();
        let (b, v) = (&base[p..], &value[p..]);
        let s = b
            .iter()
            .rev()
            .zip(v.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        (p, s)
    }

    /// A layer's entries, in order (and so checked against its own order).
    fn entries(layer: &Layer) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let all: Vec<_> = layer.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(all.len(), layer.len(), "the order holds every key");
        all
    }

    fn args_key(call: u8, piece: u32) -> Vec<u8> {
        let mut k = vec![Space::Args as u8, b'm', call];
        k.extend_from_slice(&piece.to_be_bytes());
        k
    }

    proptest! {
        #[test]
        fn a_patch_rebuilds_its_value_from_its_base(
            base in prop::collection::vec(0u8..4, 0..80),
            value in prop::collection::vec(0u8..4, 0..80),
        ) {
            let (p, s) = model(&base, &value);
            match patch_of(&base, &value) {
                Some((prefix, suffix, middle)) => {
                    prop_assert_eq!((prefix as usize, suffix as usize), (p, s));
                    let mut rebuilt = base[..p].to_vec();
                    rebuilt.extend_from_slice(middle);
                    rebuilt.extend_from_slice(&base[base.len() - s..]);
                    prop_assert_eq!(rebuilt, value);
                }
                None => prop_assert!(value.len() - p - s + 8 >= value.len()),
            }
        }

        /// Whatever is put, appended, patched, deleted or forgotten, replaying the entries
        /// into an empty layer rebuilds the layer that wrote them.
        #[test]
        fn replaying_the_entries_rebuilds_the_layer(
            ops in prop::collection::vec((0u8..4, 0u8..3, 0u32..4, prop::collection::vec(0u8..3, 0..40)), 0..60),
        ) {
            let mut layer = Layer::default();
            let mut log = Vec::new();
            for (op, call, piece, value) in ops {
                let key = match op {
                    0 | 1 => args_key(call, piece),
                    _ => vec![Space::Streams as u8, call],
                };
                match op {
                    0 | 2 => layer.put(&key, value, &mut log),
                    _ => layer.delete(&key, piece % 2 == 0, &mut log),
                }
            }
            let mut rebuilt = Layer::default();
            rebuilt.replay(&log).unwrap();
            prop_assert_eq!(entries(&rebuilt), entries(&layer));
            prop_assert_eq!(rebuilt.bytes, layer.bytes);
            let held: usize = entries(&layer)
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum();
            prop_assert_eq!(layer.bytes, held);
        }
    }

    #[test]
    fn pieces_of_a_call_append_to_its_latest_buffered_piece_and_are_logged_as_appends() {
        let mut layer = Layer::default();
        let mut log = Vec::new();
        layer.put(&args_key(0, 0), b"ab".to_vec(), &mut log);
        layer.put(&args_key(0, 1), b"c".to_vec(), &mut log);
        layer.put(&args_key(0, 2), b"d".to_vec(), &mut log);
        // another call's piece 1 does not append to call 0's
        layer.put(&args_key(1, 1), b"x".to_vec(), &mut log);
        assert_eq!(layer.len(), 2);
        assert_eq!(layer.get(&args_key(0, 0)), Some(&Some(b"abcd".to_vec())));
        // the entries' tags, in order
        let mut tags = Vec::new();
        let mut rest = log.as_slice();
        while let Some((&tag, after)) = rest.split_first() {
            let (_, after) = take_field(after).unwrap();
            let (_, after) = take_field(after).unwrap();
            tags.push(tag);
            rest = after;
        }
        assert_eq!(tags, vec![TAG_PUT, TAG_APPEND, TAG_APPEND, TAG_PUT]);
    }
}
