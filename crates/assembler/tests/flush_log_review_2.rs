//! Second adversarial review of the flush log: deletes of keys only the active layer holds
//! (logged as `TAG_FORGET`, dropped instead of tombstoned), `settle`, argument pieces around
//! the size a materialization still extends (`EXTEND_STORED_MAX`), replaces, joins, and
//! crashes, also between the batches of a materialization. (Written against the log kept in
//! sled, 834a571 and 2c8cf74; kept for the log in files of its own, whose materializations run
//! in the background.)
//!
//! Public API only. A crash is `discard_unflushed`, drop, reopen; a crash *between the
//! batches of a materialization* is a materialization made to fail before its last batch
//! (`SledStorage::fail_next_materialization_before`), then that crash: every batch but the
//! last (the one with the extensions of stored pieces and the marker) applied, as a SIGKILL
//! after those batches would leave sled.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use assembler::keys::{args_piece, args_prefix};
use assembler::storage::sled_backend::{SledStorage, EXTEND_STORED_MAX};
use assembler::storage::{Space, Storage, WriteSet};
use std::collections::BTreeMap;
use std::path::Path;

fn reopen(dir: &Path) -> SledStorage {
    for _ in 0..500 {
        if let Ok(s) = SledStorage::open(dir) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot reopen {}", dir.display());
}

/// A crash: every unflushed commit lost, nothing more written.
fn crash(dir: &Path, s: SledStorage) -> SledStorage {
    s.discard_unflushed();
    drop(s);
    reopen(dir)
}

/// One byte over the longest stored piece a materialization extends: the longest pieces
/// keep keys of their own in sled.
const LONG: usize = EXTEND_STORED_MAX + 1;

/// A crash after the regular batches of a materialization, before its last one (the
/// extensions of stored pieces and the marker).
fn crash_mid_materialization(dir: &Path, s: SledStorage) -> SledStorage {
    s.flush().unwrap();
    s.fail_next_materialization_before(usize::MAX - 1);
    // (nothing frozen to materialize, when nothing was committed since the last one)
    let _ = s.materialize_now();
    crash(dir, s)
}

// ---------------------------------------------------------------------------------------------
// The random model.
// ---------------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Message keys, one a prefix of the other.
const MSGS: [&[u8]; 2] = [b"c\x00a", b"c\x00ab"];
const CALLS: [u32; 2] = [0, 1];

#[derive(Clone, Default, Debug, PartialEq)]
struct Model {
    plain: BTreeMap<u8, Vec<u8>>,
    outbox: BTreeMap<u64, Vec<u8>>,
    calls: BTreeMap<(u8, u32), Vec<u8>>,
    /// Next piece number per call (the store keeps it in its message state).
    next: BTreeMap<(u8, u32), u32>,
    /// Next outbox row number (the store keeps it in Meta).
    next_row: u64,
}

fn call_text(s: &SledStorage, msg: &[u8], call: u32) -> Vec<u8> {
    s.scan_prefix(Space::Args, &args_prefix(msg, call))
        .unwrap()
        .into_iter()
        .flat_map(|(_, v)| v)
        .collect()
}

fn read_model(s: &SledStorage, m: &Model) -> Model {
    let plain = s
        .scan_prefix(Space::Streams, b"")
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k[0], v))
        .collect();
    let outbox = s
        .first_n(Space::Outbox, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (u64::from_be_bytes(k.try_into().unwrap()), v))
        .collect();
    let mut calls = BTreeMap::new();
    for (mi, msg) in MSGS.iter().enumerate() {
        for call in CALLS {
            let t = call_text(s, msg, call);
            if !t.is_empty() {
                calls.insert((mi as u8, call), t);
            }
        }
    }
    Model {
        plain,
        outbox,
        calls,
        next: m.next.clone(),
        next_row: m.next_row,
    }
}

fn summarize(m: &Model) -> Vec<String> {
    let mut out: Vec<String> = m
        .plain
        .iter()
        .map(|(k, v)| format!("{k}={}b/{:?}", v.len(), v.first()))
        .collect();
    out.push(format!("outbox {:?}", m.outbox.keys().collect::<Vec<_>>()));
    out.extend(m.calls.iter().map(|(k, v)| {
        let head = String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned();
        format!("{k:?}: {} bytes {head:?}", v.len())
    }));
    out
}

fn piece_len(rng: &mut Rng) -> usize {
    match rng.below(20) {
        0 => LONG,
        1 => LONG - 1,
        2 => LONG / 2,
        3 => 5000,
        4 => EXTEND_STORED_MAX + 1,
        _ => 1 + rng.below(5) as usize,
    }
}

/// How a run draws its histories.
#[derive(Clone, Copy)]
struct Draw {
    /// Crashes between the batches of a materialization too.
    mid_crashes: bool,
    /// Replaces whose text is exactly `LONG` (see
    /// `a_replace_of_exactly_one_over_the_extend_limit_then_a_piece_does_not_resurrect_the_old_second_piece`);
    /// otherwise one byte more.
    exact_long_replace: bool,
}

fn run_model(seed: u64, steps: usize, draw: Draw) {
    let Draw {
        mid_crashes,
        exact_long_replace,
    } = draw;
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let mut rng = Rng(seed | 1);
    let mut live = Model::default();
    // whether anything was committed or removed since the store was last opened
    let mut wrote = false;
    let mut flushed = Model::default();
    let mut log: Vec<String> = Vec::new();
    for step in 0..steps {
        let pick = rng.below(100);
        let mi = rng.below(2) as u8;
        let call = CALLS[rng.below(2) as usize];
        let id = (mi, call);
        let msg = MSGS[mi as usize];
        let op: String;
        if pick <= 68 {
            wrote = true;
        }
        match pick {
            0..=9 => {
                let k = rng.below(4) as u8;
                let v = vec![rng.below(256) as u8; 1 + rng.below(6) as usize];
                let mut w = WriteSet::default();
                w.put(Space::Streams, vec![k], v.clone());
                s.commit(w).unwrap();
                live.plain.insert(k, v);
                op = format!("put {k}");
            }
            10..=13 => {
                let k = rng.below(4) as u8;
                let existed = s.remove(Space::Streams, &[k]).unwrap();
                let want = live.plain.remove(&k).is_some();
                assert_eq!(existed, want, "seed {seed} step {step}: remove {k}");
                op = format!("remove {k} -> {existed}");
            }
            14..=16 => {
                let k = rng.below(4) as u8;
                let mut w = WriteSet::default();
                w.delete(Space::Streams, vec![k]);
                s.commit(w).unwrap();
                live.plain.remove(&k);
                op = format!("delete {k}");
            }
            17..=19 => {
                // put, delete, put again (or not) in one commit
                let k = rng.below(4) as u8;
                let again = rng.below(2) == 0;
                let v = vec![rng.below(256) as u8; 3];
                let mut w = WriteSet::default();
                w.put(Space::Streams, vec![k], b"tmp".to_vec());
                w.delete(Space::Streams, vec![k]);
                if again {
                    w.put(Space::Streams, vec![k], v.clone());
                    live.plain.insert(k, v);
                } else {
                    live.plain.remove(&k);
                }
                s.commit(w).unwrap();
                op = format!("put-delete-put({again}) {k}");
            }
            20..=25 => {
                // an outbox row
                let row = live.next_row;
                let v = row.to_be_bytes().to_vec();
                let mut w = WriteSet::default();
                w.put(Space::Outbox, row.to_be_bytes().to_vec(), v.clone());
                w.put(
                    Space::Meta,
                    b"next".to_vec(),
                    (row + 1).to_be_bytes().to_vec(),
                );
                s.commit(w).unwrap();
                live.outbox.insert(row, v);
                live.next_row = row + 1;
                op = format!("row {row}");
            }
            26..=30 => {
                // the relay removes the oldest row, or one that may be gone
                let row = match rng.below(3) {
                    0 => live.next_row.saturating_sub(1 + rng.below(4)),
                    _ => live.outbox.keys().next().copied().unwrap_or(0),
                };
                let existed = s.remove(Space::Outbox, &row.to_be_bytes()).unwrap();
                let want = live.outbox.remove(&row).is_some();
                assert_eq!(existed, want, "seed {seed} step {step}: remove row {row}");
                op = format!("remove row {row} -> {existed}");
            }
            31..=55 => {
                let n = *live.next.get(&id).unwrap_or(&0);
                let len = piece_len(&mut rng);
                let text: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
                let mut w = WriteSet::default();
                w.put(Space::Args, args_piece(msg, call, n), text.clone());
                if rng.below(3) == 0 {
                    w.put(Space::Streams, vec![9], n.to_be_bytes().to_vec());
                    live.plain.insert(9, n.to_be_bytes().to_vec());
                }
                s.commit(w).unwrap();
                live.next.insert(id, n + 1);
                live.calls.entry(id).or_default().extend_from_slice(&text);
                op = format!("piece {id:?} #{n} ({len} bytes)");
            }
            56..=61 => {
                // a replace: every piece deleted, piece 0 written; appends go on at 1
                let n = *live.next.get(&id).unwrap_or(&0);
                let mut w = WriteSet::default();
                for p in 0..n {
                    w.delete(Space::Args, args_piece(msg, call, p));
                }
                let len = match (rng.below(4), exact_long_replace) {
                    (0, true) => LONG,
                    (0, false) => LONG + 1,
                    _ => 2,
                };
                let text: Vec<u8> = (0..len).map(|i| b"RS"[i % 2]).collect();
                w.put(Space::Args, args_piece(msg, call, 0), text.clone());
                s.commit(w).unwrap();
                live.next.insert(id, 1);
                live.calls.insert(id, text);
                op = format!("replace {id:?} of {n} ({len} bytes)");
            }
            62..=65 => {
                // a completed message's call joined into its first piece (store/txn.rs)
                let pieces = s.scan_prefix(Space::Args, &args_prefix(msg, call)).unwrap();
                let mut it = pieces.into_iter();
                let mut keys = Vec::new();
                if let Some((first, mut joined)) = it.next() {
                    for (k, v) in it {
                        joined.extend_from_slice(&v);
                        keys.push(k);
                    }
                    if !keys.is_empty() {
                        let mut w = WriteSet::default();
                        for k in &keys {
                            w.delete(Space::Args, k.clone());
                        }
                        w.put(Space::Args, first, joined);
                        s.commit(w).unwrap();
                    }
                }
                op = format!("join {id:?} ({} deleted)", keys.len());
            }
            66..=68 => {
                // a call's pieces deleted (retention: every key the scan sees)
                let mut w = WriteSet::default();
                for (k, _) in s.scan_prefix(Space::Args, &args_prefix(msg, call)).unwrap() {
                    w.delete(Space::Args, k);
                }
                s.commit(w).unwrap();
                live.calls.remove(&id);
                op = format!("drop call {id:?}");
            }
            69..=82 => {
                s.flush().unwrap();
                flushed = live.clone();
                op = "flush".into();
            }
            83..=85 => {
                s.materialize_now().unwrap();
                flushed = live.clone();
                op = "materialize".into();
            }
            86..=87 => {
                s.settle().unwrap();
                assert_eq!(s.log_records(), 0, "seed {seed} step {step}: settled");
                flushed = live.clone();
                op = "settle".into();
            }
            88..=89 => {
                // a clean drop materializes when this open wrote anything, and leaves a store
                // only read as it was found (455b3cc)
                let want = if wrote { 0 } else { s.log_records() };
                drop(s);
                s = reopen(dir.path());
                wrote = false;
                assert_eq!(
                    s.log_records(),
                    want,
                    "seed {seed} step {step}: a clean drop"
                );
                flushed = live.clone();
                op = "clean reopen".into();
            }
            90..=94 if mid_crashes => {
                s = crash_mid_materialization(dir.path(), s);
                wrote = false;
                flushed = live.clone();
                op = "crash mid-materialization".into();
            }
            _ => {
                s = crash(dir.path(), s);
                wrote = false;
                live = flushed.clone();
                op = "crash".into();
            }
        }
        log.push(op);
        let got = read_model(&s, &live);
        let counts = (
            s.count(Space::Streams).unwrap(),
            s.count(Space::Outbox).unwrap(),
        );
        if got != live || counts != (live.plain.len(), live.outbox.len()) {
            let tail: Vec<_> = log.iter().rev().take(30).rev().collect();
            panic!(
                "seed {seed} step {step}: the storage reads\n{:?}\ncounts {counts:?}\nthe model\
                 \n{:?}\nlast ops {tail:#?}",
                summarize(&got),
                summarize(&live)
            );
        }
    }
    // one more crash after a last flush, and a settle: the same
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(read_model(&s, &live), live, "seed {seed}: after the end");
    s.settle().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(s.log_records(), 0);
    assert_eq!(read_model(&s, &live), live, "seed {seed}: settled");
}

/// Seeds per random test: `default`, or `FLUSH_LOG_REVIEW_2_SEEDS` for a longer search.
fn seeds(default: u64) -> u64 {
    std::env::var("FLUSH_LOG_REVIEW_2_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Found the bug of
/// `a_replace_of_exactly_one_over_the_extend_limit_then_a_piece_does_not_resurrect_the_old_second_piece` (seed
/// 4354685564936845354, step 207: a call read 8194 bytes where the model holds 4097).
#[test]
fn a_random_history_with_forgotten_deletes_and_long_pieces_reads_like_the_model() {
    for seed in 1..=40u64 {
        run_model(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            300,
            Draw {
                mid_crashes: true,
                exact_long_replace: true,
            },
        );
    }
}

/// The same histories with replaces one byte longer (the bug above set aside): every other
/// interleaving of forgotten deletes, long pieces, replaces, joins, settles and crashes.
#[test]
fn a_random_history_without_exact_long_replaces_reads_like_the_model() {
    for seed in 1..=seeds(60) {
        run_model(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            300,
            Draw {
                mid_crashes: false,
                exact_long_replace: false,
            },
        );
    }
}

/// The same with crashes between the batches of a materialization.
#[test]
fn the_same_with_crashes_between_materialization_batches() {
    for seed in 1..=seeds(60) {
        run_model(
            seed.wrapping_mul(0x2545_F491_4F6C_DD1D),
            300,
            Draw {
                mid_crashes: true,
                exact_long_replace: false,
            },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Targeted cases.
// ---------------------------------------------------------------------------------------------

const MSG: &[u8] = b"conv\x00msg";

fn put_piece(s: &SledStorage, call: u32, n: u32, text: &[u8]) {
    let mut w = WriteSet::default();
    w.put(Space::Args, args_piece(MSG, call, n), text.to_vec());
    s.commit(w).unwrap();
}

fn put(s: &SledStorage, space: Space, k: &[u8], v: &[u8]) {
    let mut w = WriteSet::default();
    w.put(space, k.to_vec(), v.to_vec());
    s.commit(w).unwrap();
}

fn delete(s: &SledStorage, space: Space, k: &[u8]) {
    let mut w = WriteSet::default();
    w.delete(space, k.to_vec());
    s.commit(w).unwrap();
}

/// A key put and flushed, deleted (only the active layer held it: forgotten), put again and
/// deleted again over several flushes, with crashes between: each crash reads the last flush.
#[test]
fn a_forgotten_key_put_again_and_deleted_again_across_flushes_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put(&s, Space::Outbox, b"r", b"1");
    s.flush().unwrap();
    delete(&s, Space::Outbox, b"r");
    put(&s, Space::Outbox, b"r", b"2");
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(
        s.get(Space::Outbox, b"r").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    assert!(s.remove(Space::Outbox, b"r").unwrap());
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(s.get(Space::Outbox, b"r").unwrap(), None);
    assert!(!s.remove(Space::Outbox, b"r").unwrap());
    put(&s, Space::Outbox, b"r", b"3");
    s.flush().unwrap();
    delete(&s, Space::Outbox, b"r"); // unflushed
    let s = crash(dir.path(), s);
    assert_eq!(
        s.get(Space::Outbox, b"r").unwrap().as_deref(),
        Some(&b"3"[..])
    );
    s.materialize_now().unwrap();
    put(&s, Space::Outbox, b"r", b"4"); // sled holds 3, the active layer 4
    assert!(s.remove(Space::Outbox, b"r").unwrap());
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(
        s.get(Space::Outbox, b"r").unwrap(),
        None,
        "the stored 3 stays deleted"
    );
    assert_eq!(s.count(Space::Outbox).unwrap(), 0);
}

/// A long piece (over what a materialization extends), then the call replaced and its new
/// text grown past that size again, then joined: crashes between every step.
#[test]
fn a_long_piece_replaced_and_grown_again_survives_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let big = vec![b'x'; LONG];
    put_piece(&s, 0, 0, &big);
    put_piece(&s, 0, 1, b"y");
    s.flush().unwrap();
    put_piece(&s, 0, 2, b"z");
    s.flush().unwrap();
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), [&big[..], b"yz"].concat());
    // replace: every piece tombstoned or forgotten, a new piece 0
    let mut w = WriteSet::default();
    for p in 0..3 {
        w.delete(Space::Args, args_piece(MSG, 0, p));
    }
    w.put(Space::Args, args_piece(MSG, 0, 0), b"R".to_vec());
    s.commit(w).unwrap();
    s.flush().unwrap();
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"R");
    put_piece(&s, 0, 1, &big);
    s.flush().unwrap(); // piece 0 = R + big
    put_piece(&s, 0, 2, b"!");
    s.flush().unwrap();
    s = crash(dir.path(), s);
    let want = [&b"R"[..], &big[..], b"!"].concat();
    assert_eq!(call_text(&s, MSG, 0), want);
    s.materialize_now().unwrap();
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), want);
}

/// A piece one byte over the extension limit, pieces after it, then a crash mid-way through a
/// materialization, then a full one.
#[test]
fn a_long_piece_over_the_extend_limit_then_a_crash_mid_materialization() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let big = vec![b'x'; LONG];
    put_piece(&s, 0, 0, &big);
    s.flush().unwrap();
    put_piece(&s, 0, 1, b"a");
    put_piece(&s, 0, 2, b"b");
    s = crash_mid_materialization(dir.path(), s);
    let want = [&big[..], b"ab"].concat();
    assert_eq!(call_text(&s, MSG, 0), want);
    put_piece(&s, 0, 3, b"c");
    s = crash_mid_materialization(dir.path(), s);
    let want = [&want[..], b"c"].concat();
    assert_eq!(call_text(&s, MSG, 0), want);
    s.materialize_now().unwrap();
    assert_eq!(call_text(&s, MSG, 0), want);
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), want);
}

/// A key whose earlier value is in sled (materialized) and a newer one in the log: a delete
/// must leave a tombstone (else the stored value comes back), through a crash mid-way through a
/// materialization that already applied some keys.
#[test]
fn a_delete_after_a_crash_mid_materialization_keeps_the_key_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    put(&s, Space::Streams, b"a", b"old");
    put(&s, Space::Streams, b"b", b"old");
    s.materialize_now().unwrap();
    put(&s, Space::Streams, b"a", b"new");
    delete(&s, Space::Streams, b"b");
    put(&s, Space::Streams, b"c", b"new");
    s = crash_mid_materialization(dir.path(), s);
    // sled now holds a=new, c=new, no b; the replayed log the same
    delete(&s, Space::Streams, b"a");
    delete(&s, Space::Streams, b"c");
    put(&s, Space::Streams, b"b", b"again");
    delete(&s, Space::Streams, b"b");
    s.flush().unwrap();
    s = crash(dir.path(), s);
    assert!(s.scan_prefix(Space::Streams, b"").unwrap().is_empty());
    assert_eq!(s.count(Space::Streams).unwrap(), 0);
    s.materialize_now().unwrap();
    s = crash(dir.path(), s);
    assert!(s.scan_prefix(Space::Streams, b"").unwrap().is_empty());
}

/// A clean stop settles: no record is left, and dropping after `settle` writes nothing more.
#[test]
fn settle_leaves_no_record_even_with_only_forgotten_deletes_pending() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put(&s, Space::Outbox, b"r", b"1");
    delete(&s, Space::Outbox, b"r"); // the layer is empty again, one change pending
    s.settle().unwrap();
    assert_eq!(s.log_records(), 0);
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(s.get(Space::Outbox, b"r").unwrap(), None);
    put(&s, Space::Outbox, b"r", b"2");
    s.flush().unwrap();
    delete(&s, Space::Outbox, b"r");
    s.settle().unwrap();
    assert_eq!(s.log_records(), 0);
    let s = crash(dir.path(), s);
    assert_eq!(s.log_records(), 0);
    assert_eq!(s.get(Space::Outbox, b"r").unwrap(), None);
}

/// A call whose first stored piece is over `EXTEND_STORED_MAX` keeps its next piece under its
/// own key in sled. A replace tombstones both and writes piece 0 with `LONG` bytes; then a
/// piece 1. Found as a bug of the log kept in sled, which wrote pieces of exactly
/// `EXTEND_STORED_MAX` bytes to sled at the flush: piece 1 was then buffered under its own key
/// over its tombstone, the materialization extended the stored piece 0 with it and wrote
/// nothing at piece 1's key, so sled's old piece 1, from before the replace, was read again
/// after the new text. The buffered keys folded into an extended piece are removed from sled.
#[test]
fn a_replace_of_exactly_one_over_the_extend_limit_then_a_piece_does_not_resurrect_the_old_second_piece(
) {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put_piece(&s, 0, 0, &vec![b'o'; 5000]);
    s.materialize_now().unwrap(); // piece 0 in sled
    put_piece(&s, 0, 1, b"OLD");
    s.materialize_now().unwrap(); // piece 1: its own key (piece 0 too long to extend)
    let mut w = WriteSet::default();
    for p in 0..2 {
        w.delete(Space::Args, args_piece(MSG, 0, p));
    }
    let new = vec![b'n'; LONG];
    w.put(Space::Args, args_piece(MSG, 0, 0), new.clone());
    s.commit(w).unwrap();
    s.flush().unwrap(); // the layer holds the new piece 0 and piece 1's tombstone
    put_piece(&s, 0, 1, b"c");
    s.flush().unwrap();
    let want = [&new[..], b"c"].concat();
    assert_eq!(call_text(&s, MSG, 0), want, "before the materialization");
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), want, "after a crash");
    s.materialize_now().unwrap();
    let got = call_text(&s, MSG, 0);
    assert_eq!(
        String::from_utf8_lossy(&got[LONG..]),
        "c",
        "after the materialization (the text after the new piece 0)"
    );
}
