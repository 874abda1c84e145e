//! Fingerprints of the inputs that took each producer sequence number, packed: ONE value per
//! stream and group of [`GROUP`] numbers ([`Space::SeenSets`]), instead of one key per
//! number.
//!
//! Why: every key the store keeps costs memory in sled for as long as it exists (sled keeps
//! per-page state in memory for the whole database, and its leaves hold at most 16 keys), and
//! a message keeps its fingerprints until retention deletes it. One key per chunk was more
//! than half of a completed message's keys; packed, a stream of up to [`GROUP`] numbers has
//! one. The rewrite of a group per input is small (at most [`GROUP`] × 9 bytes) and the
//! storage logs a rewrite as a patch of the value it replaces and writes sled once per key
//! and window (`storage::sled_backend`).
//!
//! Value: entries of 9 bytes, `slot` (the number modulo [`GROUP`]) then the fingerprint
//! (u64, big-endian), sorted by slot, one per slot. A later fingerprint for a slot replaces
//! the earlier one (as a later write of a per-number key did).
//!
//! Stores written before this have per-number keys in [`Space::Seen`]; [`lookup`] still
//! reads them (after the packed ones) and retention deletes both.
//!
//! The group an open stream is filling is kept in memory too ([`Cache`], in the store's
//! `Inner`), so that noting a number is not a storage read: the cache holds what was last
//! committed for the stream, and goes (with the rest of `Inner`) when a commit fails, and
//! per stream when the stream leaves the cache of live streams or retention deletes it.

use super::txn::Txn;
use crate::error::StoreError;
use crate::hash::FastMap;
use crate::keys;
use crate::storage::{Space, Storage, WriteSet};

/// Producer sequence numbers per packed value.
pub const GROUP: u64 = 32;

/// Bytes of one entry: slot, fingerprint.
const ENTRY: usize = 9;

/// Fingerprints noted by a unit of work and not yet written, in order: (stream key, number,
/// fingerprint). A unit notes one or a few.
pub(crate) type Staged = Vec<(Vec<u8>, u64, u64)>;

/// The last committed group of streams that noted a number: stream key → (group number,
/// value). Bounded by the caller ([`write_staged`]'s `cap`).
pub(crate) type Cache = FastMap<Vec<u8>, (u64, Vec<u8>)>;

/// The key of the group holding `seq` of stream `skey`.
fn group_key(skey: &[u8], seq: u64) -> Vec<u8> {
    keys::parked(skey, seq / GROUP)
}

fn slot(seq: u64) -> u8 {
    // GROUP ≤ 256: the remainder fits
    (seq % GROUP) as u8
}

/// The entries of a stored group value (a truncated tail entry is ignored).
fn entries(value: &[u8]) -> impl Iterator<Item = (u8, u64)> + '_ {
    value.chunks_exact(ENTRY).filter_map(|e| {
        let (s, fp) = e.split_first()?;
        Some((*s, u64::from_be_bytes(fp.try_into().ok()?)))
    })
}

/// Notes that `seq` of stream `skey` was taken by an input with fingerprint `fp` (written by
/// [`write_staged`] at the unit's commit).
pub(crate) fn stage(staged: &mut Staged, skey: &[u8], seq: u64, fp: u64) {
    staged.push((skey.to_vec(), seq, fp));
}

/// Adds the staged fingerprints (sorted in place by stream and group: the caller empties the
/// list afterwards) to their stored groups (one put per group touched), patching
/// each stored value in place: its entries are sorted by slot, one per slot. The group's
/// value comes from `cache` when it holds the stream's group, and goes back into it (which
/// is emptied first when it holds `cap` streams).
pub(crate) fn write_staged(
    storage: &dyn Storage,
    cache: &mut Cache,
    cap: usize,
    staged: &mut Staged,
    writes: &mut WriteSet,
) -> Result<(), StoreError> {
    // one pass per (stream, group), the numbers in the order noted
    staged.sort_by(|(a, sa, _), (b, sb, _)| a.cmp(b).then((sa / GROUP).cmp(&(sb / GROUP))));
    let mut rest = staged.as_slice();
    while let Some(((skey, seq, _), _)) = rest.split_first() {
        let group = seq / GROUP;
        let n = rest
            .iter()
            .take_while(|(k, s, _)| k == skey && s / GROUP == group)
            .count();
        let (this, after) = rest.split_at(n);
        rest = after;
        let gkey = group_key(skey, *seq);
        // the group is patched where the cache holds it (read and cached first on a miss)
        let value = match cache.get_mut(skey.as_slice()) {
            Some((g, value)) if *g == group => value,
            _ => {
                let stored = storage.get(Space::SeenSets, &gkey)?.unwrap_or_default();
                if cache.len() >= cap && !cache.contains_key(skey.as_slice()) {
                    cache.clear();
                }
                &mut cache
                    .entry(skey.clone())
                    .insert_entry((group, stored))
                    .into_mut()
                    .1
            }
        };
        // (a truncated tail entry is dropped, as `entries` ignores it)
        value.truncate(value.len() - value.len() % ENTRY);
        for (s, fp) in this.iter().map(|(_, seq, fp)| (slot(*seq), *fp)) {
            // the first entry at or after slot `s`, and whether it is slot `s`'s
            let at = value.chunks_exact(ENTRY).enumerate().find_map(|(i, e)| {
                e.first()
                    .filter(|slot| **slot >= s)
                    .map(|slot| (i, *slot == s))
            });
            let entry = std::iter::once(s).chain(fp.to_be_bytes());
            match at {
                Some((i, true)) => drop(value.splice(i * ENTRY..(i + 1) * ENTRY, entry)),
                Some((i, false)) => drop(value.splice(i * ENTRY..i * ENTRY, entry)),
                None => value.extend(entry),
            }
        }
        writes.put(Space::SeenSets, gkey, value.clone());
    }
    Ok(())
}

/// The fingerprint of the input that took `seq` of stream `skey`, if one did: this unit's
/// staged ones first, then the stored group, then a per-number key of an older store.
pub(crate) fn lookup(txn: &Txn<'_>, skey: &[u8], seq: u64) -> Result<Option<u64>, StoreError> {
    let gkey = group_key(skey, seq);
    let s = slot(seq);
    // the latest noted in this unit
    if let Some((_, _, fp)) = txn
        .staged_seen()
        .iter()
        .rev()
        .find(|(k, n, _)| k == skey && *n == seq)
    {
        return Ok(Some(*fp));
    }
    let stored = match txn.inner.seen.get(skey) {
        Some((g, v)) if *g == seq / GROUP => Some(v.clone()),
        _ => txn.storage.get(Space::SeenSets, &gkey)?,
    };
    if let Some(v) = stored {
        if let Some((_, fp)) = entries(&v).find(|(e, _)| *e == s) {
            return Ok(Some(fp));
        }
    }
    Ok(txn
        .storage
        .get(Space::Seen, &keys::parked(skey, seq))?
        .and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()))
        .map(u64::from_be_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;
    use std::collections::BTreeMap;

    fn stored(storage: &MemoryStorage, staged: Staged) {
        let mut w = WriteSet::default();
        write_staged(storage, &mut Cache::default(), 100, &mut { staged }, &mut w).unwrap();
        storage.commit(w).unwrap();
    }

    #[test]
    fn one_value_per_group_and_later_fingerprints_replace_earlier_ones() {
        let storage = MemoryStorage::new();
        let mut staged = Staged::new();
        for seq in 0..40 {
            stage(&mut staged, b"s", seq, seq * 10);
        }
        stored(&storage, staged);
        assert_eq!(
            storage.count(Space::SeenSets).unwrap(),
            2,
            "0..32 and 32..40"
        );
        let mut staged = Staged::new();
        stage(&mut staged, b"s", 3, 7);
        stage(&mut staged, b"s", 41, 9);
        stored(&storage, staged);
        let group0: Vec<_> = entries(
            &storage
                .get(Space::SeenSets, &group_key(b"s", 0))
                .unwrap()
                .unwrap(),
        )
        .collect();
        assert_eq!(group0.len(), 32);
        assert_eq!(group0[3], (3, 7));
        assert_eq!(group0[4], (4, 40));
        let group1: Vec<_> = entries(
            &storage
                .get(Space::SeenSets, &group_key(b"s", 33))
                .unwrap()
                .unwrap(),
        )
        .collect();
        assert_eq!(
            group1,
            vec![
                (0, 320),
                (1, 330),
                (2, 340),
                (3, 350),
                (4, 360),
                (5, 370),
                (6, 380),
                (7, 390),
                (9, 9)
            ]
        );
    }

    /// Groups are patched in place: fingerprints staged in any order, over several commits,
    /// read back as the last one noted per number, with the value's entries sorted by slot;
    /// the same with the group cached between commits (and the cache emptied when full).
    #[test]
    fn patching_in_place_keeps_entries_sorted_whatever_order_numbers_come_in() {
        for cap in [0, 1, 100] {
            patch_in_place(cap);
        }
    }

    fn patch_in_place(cap: usize) {
        let storage = MemoryStorage::new();
        let mut cache = Cache::default();
        let mut model = BTreeMap::new();
        // a fixed permutation of 0..64 with repeats: inserts before, between and after stored
        // entries, and replacements
        let order: Vec<u64> = (0..96u64).map(|i| (i * 37 + 11) % 64).collect();
        for (commit, seqs) in order.chunks(7).enumerate() {
            let mut staged = Staged::new();
            for &seq in seqs {
                let fp = seq * 1000 + commit as u64;
                stage(&mut staged, b"s", seq, fp);
                model.insert(seq, fp);
            }
            let mut w = WriteSet::default();
            if cap == 0 {
                cache.clear();
            }
            write_staged(&storage, &mut cache, cap.max(1), &mut staged, &mut w).unwrap();
            storage.commit(w).unwrap();
            // another stream's group between: a cache of one holds it instead
            let mut w = WriteSet::default();
            write_staged(
                &storage,
                &mut cache,
                cap.max(1),
                &mut vec![(b"o".to_vec(), commit as u64, 1)],
                &mut w,
            )
            .unwrap();
            storage.commit(w).unwrap();
        }
        for group in 0..2u64 {
            let value = storage
                .get(Space::SeenSets, &group_key(b"s", group * GROUP))
                .unwrap()
                .unwrap();
            let got: Vec<(u8, u64)> = entries(&value).collect();
            let want: Vec<(u8, u64)> = model
                .range(group * GROUP..(group + 1) * GROUP)
                .map(|(seq, fp)| (slot(*seq), *fp))
                .collect();
            assert_eq!(got, want, "group {group}, cache of {cap}");
        }
    }
}
