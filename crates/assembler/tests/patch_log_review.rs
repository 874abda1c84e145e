//! Adversarial review of the flush log's TAG_PATCH entries (commit a3f7a74, "log a rewritten
//! value as a patch of what the last flush held").
//!
//! A key rewritten whole is logged as a patch of the value the active layer held before the
//! write (written against the log kept in sled, which patched against the value the last
//! flush held; kept for the log in files of its own). These tests drive histories in which values share prefixes and
//! suffixes with their previous value (edits, growth, shrinking, emptied values, identical
//! rewrites), mixed with deletes of buffer-only keys, put/delete/put in one flush, argument
//! pieces appended to or replaced whole, long pieces, bursts of new keys, materializations
//! (in the background), clean reopens and simulated crashes (`discard_unflushed`, drop,
//! reopen). After every step the store must read like the model; after a crash, like the
//! model at the last flush; and real SIGKILLs of a child process. Public API only.
//! `PATCH_REVIEW_SEEDS=n` runs the random histories with n seeds (10 by default).
//!
//! Checked to fail on two mutants of the storage: a patch base taken at a later write of the
//! flush instead of the first, and a buffer-only delete that does not replace a pending
//! patch with a forget (the log then skips the key).

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
    // the last error, for the report
    match SledStorage::open(dir) {
        Ok(s) => s,
        Err(e) => panic!("cannot reopen {}: {e}", dir.display()),
    }
}

/// A crash: every unflushed commit lost, nothing more written.
fn crash(dir: &Path, s: SledStorage) -> SledStorage {
    s.discard_unflushed();
    drop(s);
    reopen(dir)
}

/// One byte over the longest stored piece a materialization extends.
const LONG: usize = EXTEND_STORED_MAX + 1;

/// What the log records a crash left hold: entries by tag (put, delete, append, forget,
/// patch).
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    entries: [u64; 5],
    logged_flushes: u64,
    materializations: u64,
    crashes: u64,
}

fn take_field(b: &[u8]) -> (&[u8], &[u8]) {
    let len = u32::from_be_bytes(b[..4].try_into().unwrap()) as usize;
    b[4..].split_at(len)
}

/// Counts the entries of the log records in the closed store at `dir` (its segment files
/// read directly: `wal/<window>.log`, records of `length (u32 LE) · CRC-32 (u32 LE) ·
/// payload`).
fn count_log_entries(dir: &Path, stats: &mut Stats) {
    let Ok(segments) = std::fs::read_dir(dir.join("wal")) else {
        return;
    };
    for segment in segments {
        let bytes = std::fs::read(segment.unwrap().path()).unwrap();
        let mut at = 0;
        while at + 8 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let Some(part) = bytes.get(at + 8..at + 8 + len) else {
                break; // a torn record
            };
            at += 8 + len;
            count_entries(part, stats);
        }
    }
}

fn count_entries(part: &[u8], stats: &mut Stats) {
    {
        let mut rest: &[u8] = part;
        while let Some((&tag, r)) = rest.split_first() {
            let (_, r) = take_field(r);
            rest = match tag {
                0 | 2 => take_field(r).1,
                1 | 3 => r,
                4 => take_field(&r[8..]).1,
                t => panic!("unknown log tag {t}"),
            };
            stats.entries[usize::from(tag)] += 1;
        }
    }
}

/// A crash, counting what the log records hold first.
fn crash_counting(dir: &Path, s: SledStorage, stats: &mut Stats) -> SledStorage {
    s.discard_unflushed();
    drop(s);
    count_log_entries(dir, stats);
    stats.crashes += 1;
    reopen(dir)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Bytes from a small alphabet: prefixes and suffixes coincide often.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| b'a' + self.below(3) as u8).collect()
    }
    fn len(&mut self) -> usize {
        match self.below(10) {
            0 => 0,
            1..=4 => self.below(20) as usize,
            5..=8 => 20 + self.below(120) as usize,
            _ => 500 + self.below(3000) as usize,
        }
    }
}

/// `old` changed the way a stream's state changes: a byte, an insertion, a removal, growth
/// at either end, truncation, emptied, unchanged, or replaced.
fn edit(rng: &mut Rng, old: &[u8]) -> Vec<u8> {
    let mut v = old.to_vec();
    let at = |rng: &mut Rng, v: &Vec<u8>| rng.below(v.len() as u64 + 1) as usize;
    match rng.below(12) {
        0 => {
            if !v.is_empty() {
                let i = rng.below(v.len() as u64) as usize;
                v[i] = v[i].wrapping_add(1 + rng.below(2) as u8);
            }
        }
        1 => {
            let i = at(rng, &v);
            let n = 1 + rng.len() % 40;
            let ins = rng.bytes(n);
            v.splice(i..i, ins);
        }
        2 => {
            let i = at(rng, &v);
            let n = (1 + rng.below(40) as usize).min(v.len() - i);
            v.drain(i..i + n);
        }
        3 => v.extend({
            let n = 1 + rng.below(30) as usize;
            rng.bytes(n)
        }),
        4 => {
            let mut p = {
                let n = 1 + rng.below(30) as usize;
                rng.bytes(n)
            };
            p.extend_from_slice(&v);
            v = p;
        }
        5 => {
            let i = at(rng, &v);
            v.truncate(i);
        }
        6 => {
            let i = at(rng, &v);
            v.drain(..i);
        }
        7 => v.clear(),
        8 => {} // rewritten unchanged
        9 => {
            let n = rng.len();
            v = rng.bytes(n);
        }
        10 => {
            // a middle replaced by bytes of another length
            let i = at(rng, &v);
            let j = i + rng.below((v.len() - i) as u64 + 1) as usize;
            let n = rng.below(12) as usize;
            let mid = rng.bytes(n);
            v.splice(i..j, mid);
        }
        _ => {
            // one byte changed at each end (nothing common but the middle)
            if let Some(b) = v.first_mut() {
                *b = b'z';
            }
            if let Some(b) = v.last_mut() {
                *b = b'y';
            }
        }
    }
    v
}

const MSG: &[u8] = b"conv\x00msg";
const CALLS: u32 = 3;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    plain: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Each call's text.
    calls: BTreeMap<u32, Vec<u8>>,
}

/// Each call's next piece number (not read back: piece numbers only grow until a replace).
type Next = [u32; CALLS as usize];

fn read(s: &SledStorage) -> Model {
    let plain: BTreeMap<Vec<u8>, Vec<u8>> = s
        .scan_prefix(Space::Streams, b"")
        .unwrap()
        .into_iter()
        .collect();
    let mut calls = BTreeMap::new();
    for c in 0..CALLS {
        let pairs = s.scan_prefix(Space::Args, &args_prefix(MSG, c)).unwrap();
        if !pairs.is_empty() {
            calls.insert(c, pairs.into_iter().flat_map(|(_, v)| v).collect());
        }
    }
    // the point reads agree with the scans
    for (k, v) in &plain {
        assert_eq!(s.get(Space::Streams, k).unwrap().as_ref(), Some(v));
    }
    Model { plain, calls }
}

fn summarize(m: &Model) -> Vec<String> {
    let mut out: Vec<String> = m
        .plain
        .iter()
        .map(|(k, v)| {
            format!(
                "{k:?}={}b {:?}",
                v.len(),
                String::from_utf8_lossy(&v[..v.len().min(16)])
            )
        })
        .collect();
    out.extend(m.calls.iter().map(|(c, v)| {
        format!(
            "call {c}: {}b {:?}",
            v.len(),
            String::from_utf8_lossy(&v[..v.len().min(16)])
        )
    }));
    out
}

/// Keys of the plain keyspace: a few hot ones (rewritten at every flush) and many cold ones
/// (windows of many keys written once).
fn plain_key(rng: &mut Rng, wide: bool) -> Vec<u8> {
    match wide {
        true => format!("k{:03}", rng.below(400)).into_bytes(),
        false => format!("k{:03}", rng.below(6)).into_bytes(),
    }
}

fn run(seed: u64, steps: usize, stats: &mut Stats) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut live = Model::default();
    let mut flushed = Model::default();
    let mut next: Next = [0; CALLS as usize];
    let mut flushed_next: Next = next;
    let mut ops: Vec<String> = Vec::new();
    let mut last_records = 0;
    // phases: mostly hot keys, or many cold keys (large windows of keys written once)
    let mut wide = false;
    for step in 0..steps {
        if step % 300 == 0 {
            wide = rng.below(3) == 0;
        }
        let mut pick = rng.below(100);
        // rare crashes, settles and clean stops: windows of 64 flushes reach materializations
        if pick >= 90 && rng.below(10) != 0 {
            pick = 73; // a flush
        }
        // the cold phase: mostly new keys
        if wide && rng.below(2) == 0 {
            pick = 42;
        }
        let op: String = match pick {
            // a key rewritten as an edit of its value (TAG_PATCH)
            0..=29 => {
                let k = plain_key(&mut rng, wide);
                let old = live.plain.get(&k).cloned().unwrap_or_else(|| {
                    let n = rng.len();
                    rng.bytes(n)
                });
                let v = edit(&mut rng, &old);
                let mut w = WriteSet::default();
                w.put(Space::Streams, k.clone(), v.clone());
                s.commit(w).unwrap();
                live.plain.insert(k.clone(), v.clone());
                format!("put {k:?} {}b (was {}b)", v.len(), old.len())
            }
            // deleted (a buffer-only key is forgotten), maybe put again in the same commit
            30..=35 => {
                let k = plain_key(&mut rng, wide);
                let mut w = WriteSet::default();
                w.delete(Space::Streams, k.clone());
                live.plain.remove(&k);
                let again = rng.below(2) == 0;
                let mut desc = format!("delete {k:?}");
                if again {
                    let base = flushed.plain.get(&k).cloned().unwrap_or_default();
                    let v = edit(&mut rng, &base);
                    w.put(Space::Streams, k.clone(), v.clone());
                    desc += &format!(" then put {}b in one commit", v.len());
                    live.plain.insert(k.clone(), v);
                }
                s.commit(w).unwrap();
                desc
            }
            // put, delete, put in one commit
            36..=38 => {
                let k = plain_key(&mut rng, wide);
                let old = live.plain.get(&k).cloned().unwrap_or_default();
                let v1 = edit(&mut rng, &old);
                let v2 = edit(&mut rng, &old);
                let mut w = WriteSet::default();
                w.put(Space::Streams, k.clone(), v1);
                w.delete(Space::Streams, k.clone());
                w.put(Space::Streams, k.clone(), v2.clone());
                s.commit(w).unwrap();
                live.plain.insert(k.clone(), v2.clone());
                format!("put/delete/put {k:?} {}b", v2.len())
            }
            // Storage::remove
            39..=41 => {
                let k = plain_key(&mut rng, wide);
                let existed = s.remove(Space::Streams, &k).unwrap();
                assert_eq!(
                    existed,
                    live.plain.remove(&k).is_some(),
                    "seed {seed} step {step}: remove {k:?}"
                );
                format!("remove {k:?} ({existed})")
            }
            // a burst of cold keys
            42..=43 => {
                let mut w = WriteSet::default();
                for _ in 0..12 {
                    let k = format!("c{:05}", rng.below(3000)).into_bytes();
                    let v = {
                        let n = 1 + rng.below(30) as usize;
                        rng.bytes(n)
                    };
                    w.put(Space::Streams, k.clone(), v.clone());
                    live.plain.insert(k, v);
                }
                s.commit(w).unwrap();
                "cold burst".to_string()
            }
            // the next argument piece of a call (appended to a buffered piece, or its own key)
            44..=59 => {
                let c = rng.below(u64::from(CALLS)) as u32;
                let n = next[c as usize];
                let len = match rng.below(12) {
                    0 => LONG + rng.below(100) as usize,
                    1 => LONG - 1 - rng.below(3) as usize,
                    _ => rng.below(12) as usize,
                };
                let text = rng.bytes(len);
                let mut w = WriteSet::default();
                w.put(Space::Args, args_piece(MSG, c, n), text.clone());
                s.commit(w).unwrap();
                next[c as usize] = n + 1;
                live.calls.entry(c).or_default().extend_from_slice(&text);
                format!("piece {c}#{n} {len}b")
            }
            // a call replaced whole with an edit of its text (piece 0 rewritten: a patch of
            // its buffered value when that was not forgotten), maybe with more pieces after
            60..=69 => {
                let c = rng.below(u64::from(CALLS)) as u32;
                let n = next[c as usize];
                let old = live.calls.get(&c).cloned().unwrap_or_default();
                let mut text = edit(&mut rng, &old);
                if rng.below(8) == 0 {
                    text.resize(LONG + rng.below(50) as usize, b'q');
                }
                let mut w = WriteSet::default();
                for p in 0..n {
                    w.delete(Space::Args, args_piece(MSG, c, p));
                }
                w.put(Space::Args, args_piece(MSG, c, 0), text.clone());
                let mut all = text.clone();
                let mut count = 1;
                if rng.below(3) == 0 {
                    let more = {
                        let n = rng.below(10) as usize;
                        rng.bytes(n)
                    };
                    w.put(Space::Args, args_piece(MSG, c, 1), more.clone());
                    all.extend_from_slice(&more);
                    count = 2;
                }
                s.commit(w).unwrap();
                next[c as usize] = count;
                live.calls.insert(c, all);
                format!("replace call {c} ({n} pieces) with {}b", text.len())
            }
            // a call's pieces deleted
            70..=72 => {
                let c = rng.below(u64::from(CALLS)) as u32;
                let n = next[c as usize];
                let mut w = WriteSet::default();
                for p in 0..n {
                    w.delete(Space::Args, args_piece(MSG, c, p));
                }
                if n > 0 {
                    s.commit(w).unwrap();
                }
                next[c as usize] = 0;
                live.calls.remove(&c);
                format!("delete call {c} ({n} pieces)")
            }
            73..=89 => {
                // (materializations run in the background: one ended when fewer records
                // are left than the last flush left)
                let before = s.log_records();
                if before < last_records {
                    stats.materializations += 1;
                }
                s.flush().unwrap();
                last_records = s.log_records();
                if last_records == before + 1 {
                    stats.logged_flushes += 1;
                }
                flushed = live.clone();
                flushed_next = next;
                "flush".to_string()
            }
            90..=91 => {
                s.settle().unwrap();
                flushed = live.clone();
                flushed_next = next;
                "settle".to_string()
            }
            92 => {
                // a clean stop materializes everything committed
                drop(s);
                s = reopen(dir.path());
                flushed = live.clone();
                flushed_next = next;
                "clean reopen".to_string()
            }
            _ => {
                s = crash_counting(dir.path(), s, stats);
                live = flushed.clone();
                next = flushed_next;
                "crash".to_string()
            }
        };
        ops.push(op);
        let got = read(&s);
        if got != live {
            let tail: Vec<_> = ops.iter().rev().take(40).rev().collect();
            panic!(
                "seed {seed} step {step}: the storage reads\n{:#?}\nthe model\n{:#?}\nlast ops {tail:#?}",
                summarize(&got),
                summarize(&live)
            );
        }
    }
    // what the last flush held survives a final crash
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(read(&s), live, "seed {seed}: after a final flush and crash");
}

#[test]
fn random_histories_of_edited_values_replay_exactly_after_crashes() {
    let seeds: u64 = std::env::var("PATCH_REVIEW_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut stats = Stats::default();
    for seed in 1..=seeds {
        run(seed, 1200, &mut stats);
    }
    eprintln!("{stats:?}");
    // the histories reached what they are meant to exercise
    assert!(stats.entries[4] > 100, "patches logged: {stats:?}");
    assert!(stats.entries[2] > 0 && stats.entries[3] > 0, "{stats:?}");
    assert!(
        stats.materializations > 0 && stats.logged_flushes > 0,
        "{stats:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Targeted histories.
// ---------------------------------------------------------------------------------------------

fn put(s: &SledStorage, k: &[u8], v: &[u8]) {
    let mut w = WriteSet::default();
    w.put(Space::Streams, k.to_vec(), v.to_vec());
    s.commit(w).unwrap();
}

fn del(s: &SledStorage, k: &[u8]) {
    let mut w = WriteSet::default();
    w.delete(Space::Streams, k.to_vec());
    s.commit(w).unwrap();
}

fn get(s: &SledStorage, k: &[u8]) -> Option<Vec<u8>> {
    s.get(Space::Streams, k).unwrap()
}

fn state(n: u32, tail: &str) -> Vec<u8> {
    format!("{}{n:08}{}{tail}", "p".repeat(40), "s".repeat(40)).into_bytes()
}

/// A key rewritten with a few bytes changed at every flush, across several windows of 64
/// flushes, emptied and regrown; crashed after every flush with unflushed edits on top.
#[test]
fn a_value_edited_at_every_flush_replays_through_windows_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let mut last = None;
    for n in 0..200u32 {
        // several edits within the flush: the patch is against the last flush's value
        let v = match n % 17 {
            5 => Vec::new(),
            9 => state(n, &"t".repeat(n as usize)),
            _ => state(n, ""),
        };
        put(&s, b"k", &state(n + 1000, "x"));
        put(&s, b"k", &v);
        s.flush().unwrap();
        last = Some(v.clone());
        put(&s, b"k", &state(n + 5000, "unflushed"));
        if n % 7 == 3 {
            s = crash(dir.path(), s);
            assert_eq!(get(&s, b"k"), last, "after flush {n} and a crash");
        }
    }
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), last);
}

/// put → delete of the buffer-only value (forgotten) → put, in one flush, after a flush that
/// held a value sharing most bytes with both.
#[test]
fn put_forgotten_delete_put_in_one_flush_replays_the_last_put() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put(&s, b"k", &state(1, ""));
    s.flush().unwrap();
    put(&s, b"k", &state(2, "")); // first write: a patch of state(1)
    del(&s, b"k"); // only the buffer holds it: forgotten
    put(&s, b"k", &state(3, "")); // logged whole
    s.flush().unwrap();
    put(&s, b"k", &state(4, "")); // a patch of state(3)
    s.flush().unwrap();
    put(&s, b"k", &state(5, ""));
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), Some(state(4, "")));
    // the same in one commit
    let mut w = WriteSet::default();
    w.put(Space::Streams, b"k".to_vec(), state(6, ""));
    w.delete(Space::Streams, b"k".to_vec());
    w.put(Space::Streams, b"k".to_vec(), state(7, ""));
    s.commit(w).unwrap();
    s.flush().unwrap();
    del(&s, b"k");
    s.flush().unwrap(); // forgotten, logged as such
    put(&s, b"k", &state(8, ""));
    s.flush().unwrap();
    put(&s, b"k", &state(9, ""));
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), Some(state(9, "")));
    // rewritten (a patch pending), then deleted while only the buffer held it: the record
    // must forget it, not patch it nor skip it
    put(&s, b"k", &state(10, ""));
    del(&s, b"k");
    s.flush().unwrap();
    put(&s, b"k", &state(11, "unflushed"));
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), None);
}

/// A key held by sled and by the buffer: a delete is a tombstone (the first write of the
/// flush keeps the buffered value as the patch base), then a put in the same flush.
#[test]
fn a_tombstone_then_a_put_in_one_flush_patches_the_last_flushed_value() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put(&s, b"k", &state(1, ""));
    s.settle().unwrap(); // in sled
    put(&s, b"k", &state(2, "")); // buffered too
    s.flush().unwrap();
    del(&s, b"k");
    put(&s, b"k", &state(3, "abc"));
    s.flush().unwrap();
    del(&s, b"k");
    s.flush().unwrap(); // a tombstone logged
    put(&s, b"k", &state(4, "")); // first write over a tombstone: whole
    del(&s, b"k");
    put(&s, b"k", &state(5, ""));
    s.flush().unwrap();
    put(&s, b"k", &state(6, ""));
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), Some(state(5, "")));
    del(&s, b"k");
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(get(&s, b"k"), None);
}

fn call_text(s: &SledStorage, c: u32) -> Vec<u8> {
    s.scan_prefix(Space::Args, &args_prefix(MSG, c))
        .unwrap()
        .into_iter()
        .flat_map(|(_, v)| v)
        .collect()
}

fn piece(s: &SledStorage, c: u32, n: u32, text: &[u8]) {
    let mut w = WriteSet::default();
    w.put(Space::Args, args_piece(MSG, c, n), text.to_vec());
    s.commit(w).unwrap();
}

fn replace(s: &SledStorage, c: u32, pieces: u32, text: &[u8]) {
    let mut w = WriteSet::default();
    for p in 0..pieces {
        w.delete(Space::Args, args_piece(MSG, c, p));
    }
    w.put(Space::Args, args_piece(MSG, c, 0), text.to_vec());
    s.commit(w).unwrap();
}

/// A call's buffered piece appended to (logged as its tail) and replaced whole with a text
/// sharing its prefix (a patch, or whole after a forgotten delete), in either order within a
/// flush, and grown past the size a materialization extends.
#[test]
fn an_argument_piece_appended_and_replaced_whole_in_one_flush_replays_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let long = |n: usize| -> Vec<u8> { (0..n).map(|i| b'a' + (i % 23) as u8).collect() };
    piece(&s, 0, 0, &long(100));
    s.settle().unwrap(); // piece 0 in sled: a replace leaves tombstones, not forgotten keys
    piece(&s, 0, 0, &long(100)); // (a replace without deletes: the same key rewritten)
    piece(&s, 0, 1, b"tail"); // appended to the buffered piece 0
    s.flush().unwrap();
    let mut expect = long(100);
    expect.extend_from_slice(b"tail");
    assert_eq!(call_text(&s, 0), expect);
    // appended, then replaced whole by a text sharing its prefix: a patch of the last flush
    piece(&s, 0, 2, b"more");
    replace(&s, 0, 3, &long(120));
    piece(&s, 0, 1, b"X");
    s.flush().unwrap();
    let mut expect = long(120);
    expect.push(b'X');
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, 0), expect);
    // replaced, then appended to past the size a materialization extends, in one flush
    replace(&s, 0, 2, &long(110));
    piece(&s, 0, 1, &long(LONG));
    s.flush().unwrap();
    let mut expect = long(110);
    expect.extend_from_slice(&long(LONG));
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, 0), expect);
    // the long piece (only in sled now) replaced by a text sharing its prefix, then edited
    replace(&s, 0, 2, &long(LONG - 10));
    s.flush().unwrap();
    replace(&s, 0, 1, &long(LONG - 20));
    piece(&s, 0, 1, b"end");
    s.flush().unwrap();
    replace(&s, 0, 2, b"unflushed");
    let mut expect = long(LONG - 20);
    expect.extend_from_slice(b"end");
    s = crash(dir.path(), s);
    assert_eq!(call_text(&s, 0), expect);
    // emptied, then regrown
    replace(&s, 0, 2, b"");
    s.flush().unwrap();
    replace(&s, 0, 1, &long(64));
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, 0), long(64));
}

// ---------------------------------------------------------------------------------------------
// Real SIGKILLs: a child process (this binary re-executed) rewrites values with small edits
// and flushes after every step; killed at random points, the store must come back exactly at
// the last acknowledged step or the one in flight.
// ---------------------------------------------------------------------------------------------

const CHILD_ENV: &str = "TOOLSTREAM_PATCH_LOG_REVIEW_DIR";
const KEYS: u64 = 8;

/// Key `k`'s value after step `j` (None: deleted).
fn value_after(j: u64, k: u64) -> Option<Vec<u8>> {
    if (j + k).is_multiple_of(11) {
        return None;
    }
    if (j + k).is_multiple_of(13) {
        return Some(Vec::new());
    }
    let grow = "g".repeat(((j / 7 + k) % 50) as usize);
    Some(format!("{k}:{}{j:08}{}{grow}", "p".repeat(40), "s".repeat(40)).into_bytes())
}

/// Call 0's text and next piece number after step `j`.
fn call_after(j: u64) -> (Vec<u8>, u32) {
    let (mut text, mut next) = (Vec::new(), 0u32);
    for i in 0..=j {
        if i % 7 == 6 {
            if text.len() > 6000 {
                text = text[text.len() - 3000..].to_vec();
            } else if !text.is_empty() {
                let at = (i as usize * 31) % text.len();
                text[at] = b'X';
            }
            next = 1;
        } else {
            text.extend_from_slice(format!("<{i}>").as_bytes());
            next += 1;
        }
    }
    (text, next)
}

fn child_step(s: &SledStorage, j: u64) {
    let k = j % KEYS;
    // put → delete (forgotten if only the buffer holds it) → the step's value, for one key
    let mut w = WriteSet::default();
    w.put(Space::Streams, vec![k as u8], b"garbage".to_vec());
    s.commit(w).unwrap();
    let mut w = WriteSet::default();
    w.delete(Space::Streams, vec![k as u8]);
    s.commit(w).unwrap();
    let mut w = WriteSet::default();
    for k in 0..KEYS {
        match value_after(j, k) {
            Some(v) => w.put(Space::Streams, vec![k as u8], v),
            None => w.delete(Space::Streams, vec![k as u8]),
        }
    }
    w.put(Space::Streams, b"step".to_vec(), j.to_be_bytes().to_vec());
    let pieces = match j {
        0 => 0,
        _ => call_after(j - 1).1,
    };
    if j % 7 == 6 {
        for p in 0..pieces {
            w.delete(Space::Args, args_piece(MSG, 0, p));
        }
        w.put(Space::Args, args_piece(MSG, 0, 0), call_after(j).0);
    } else {
        w.put(
            Space::Args,
            args_piece(MSG, 0, pieces),
            format!("<{j}>").into_bytes(),
        );
    }
    s.commit(w).unwrap();
}

/// The step the store is at, checking that everything it holds is that step's.
fn check_step(s: &SledStorage) -> Option<u64> {
    let j = s
        .get(Space::Streams, b"step")
        .unwrap()
        .map(|v| u64::from_be_bytes(v.try_into().unwrap()))?;
    for k in 0..KEYS {
        assert_eq!(
            s.get(Space::Streams, &[k as u8]).unwrap(),
            value_after(j, k),
            "key {k} at step {j}"
        );
    }
    assert_eq!(call_text(s, 0), call_after(j).0, "call text at step {j}");
    Some(j)
}

#[test]
fn patch_log_review_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let s = reopen(&dir.join("db"));
    let mut j = check_step(&s).map_or(0, |j| j + 1);
    std::fs::write(dir.join("started"), "1").unwrap();
    loop {
        child_step(&s, j);
        s.flush().unwrap();
        let tmp = dir.join("acked.tmp");
        std::fs::write(&tmp, j.to_string()).unwrap();
        std::fs::rename(&tmp, dir.join("acked")).unwrap();
        j += 1;
        // unflushed commits of the next step at the kill, sometimes
        if j.is_multiple_of(3) {
            let mut w = WriteSet::default();
            w.put(Space::Streams, vec![0], b"unflushed".to_vec());
            s.commit(w).unwrap();
        }
    }
}

#[test]
fn sigkills_while_values_are_patched_come_back_at_the_last_acked_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5EED
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7));
    let mut seen = Vec::new();
    for kill in 0..12 {
        let _ = std::fs::remove_file(dir.path().join("started"));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "patch_log_review_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        for _ in 0..2000 {
            if dir.path().join("started").exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50 + rng.below(500)));
        let _ = child.kill();
        let _ = child.wait();
        let acked: Option<u64> = std::fs::read_to_string(dir.path().join("acked"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let s = reopen(&dir.path().join("db"));
        let j = check_step(&s);
        if let Some(a) = acked {
            let j = j.unwrap_or_else(|| panic!("kill {kill}: step {a} was acked, none came back"));
            assert!(
                j == a || j == a + 1,
                "kill {kill}: step {a} was acked, the store came back at {j}"
            );
        }
        seen.push((acked, j));
        s.discard_unflushed(); // the parent's look must not write anything
        drop(s);
    }
    eprintln!("(acked, recovered) per kill: {seen:?}");
    assert!(
        seen.iter().filter(|(a, _)| a.is_some()).count() >= 6,
        "the child acked too rarely to test anything"
    );
}

/// Records of several parts: 300 values of ~1 KiB, rewritten whole (a record of ~300 KiB, in
/// parts of 64 KiB), then edited (patches), some rewritten with nothing in common; crashed
/// after each flush.
#[test]
fn records_of_several_parts_with_patches_replay_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let value = |k: u32, round: u32| -> Vec<u8> {
        let mut v: Vec<u8> = (0..1000 + k)
            .map(|i| b'a' + ((i * 7 + k) % 26) as u8)
            .collect();
        match round % 4 {
            0 => v[(k as usize * 13) % 900] = b'0' + (round % 10) as u8,
            1 => v.truncate(500 + (round as usize * 37 + k as usize) % 400),
            2 => v
                .splice(100..100, format!("{round}:{k}").into_bytes())
                .for_each(drop),
            _ => v = vec![b'A' + (round % 26) as u8; 900], // nothing in common
        }
        v
    };
    for round in 0..12u32 {
        let mut w = WriteSet::default();
        for k in 0..300u32 {
            if (k + round) % 5 != 0 {
                w.put(
                    Space::Streams,
                    format!("k{k:04}").into_bytes(),
                    value(k, round),
                );
            }
        }
        s.commit(w).unwrap();
        s.flush().unwrap();
        put(&s, b"k0000", b"unflushed");
        s = crash(dir.path(), s);
        for k in 0..300u32 {
            let last = (0..=round).rev().find(|r| (k + r) % 5 != 0);
            assert_eq!(
                get(&s, format!("k{k:04}").as_bytes()),
                last.map(|r| value(k, r)),
                "key {k} after round {round}"
            );
        }
    }
}

/// Commits racing flushes from another thread: after a crash the store holds exactly one of
/// the values committed between the start of the last flush and its return (a patch of
/// whichever value the previous flush held).
#[test]
fn commits_racing_flushes_come_back_as_a_value_the_last_flush_could_hold() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let value = |i: u64| -> Vec<u8> {
        let tail = "t".repeat((i % 37) as usize);
        format!("{}{i:010}{}{tail}", "p".repeat(60), "s".repeat(60)).into_bytes()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut s = Arc::new(SledStorage::open(dir.path()).unwrap());
    for round in 0..6 {
        let done = Arc::new(AtomicU64::new(u64::MAX));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (s, done, stop) = (s.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = round * 1_000_000;
                while !stop.load(Ordering::SeqCst) {
                    let mut w = WriteSet::default();
                    w.put(Space::Streams, b"k".to_vec(), value(i));
                    if i % 5 == 0 {
                        w.delete(Space::Streams, b"k".to_vec());
                        w.put(Space::Streams, b"k".to_vec(), value(i));
                    }
                    s.commit(w).unwrap();
                    done.store(i, Ordering::SeqCst);
                    i += 1;
                }
            })
        };
        // (a flush with nothing new to log returns at once: the writer must have begun)
        while done.load(Ordering::SeqCst) == u64::MAX {
            std::thread::yield_now();
        }
        let (mut lo, mut hi) = (u64::MAX, u64::MAX);
        for _ in 0..150 {
            lo = done.load(Ordering::SeqCst);
            s.flush().unwrap();
            hi = done.load(Ordering::SeqCst);
        }
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        let store = Arc::try_unwrap(s).unwrap();
        let store = crash(dir.path(), store);
        let got = get(&store, b"k").expect("a value came back");
        let i: u64 = String::from_utf8_lossy(&got[60..70]).parse().unwrap();
        assert_eq!(got, value(i), "round {round}: a value committed whole");
        assert!(
            // (commit hi + 1 may have returned, not yet published, when the flush took it)
            lo == u64::MAX || (lo <= i && i <= hi + 1),
            "round {round}: the last flush started after commit {lo} and returned before {hi} + 1 was published, the store came back at {i}"
        );
        s = Arc::new(store);
    }
}
