//! Adversarial review of the sled storage's flush log (commit 41d1881): a flush logs what
//! changed since the last one as a record under the log prefix and keeps the buffer; every
//! 32nd flush (or at 4 MiB) materializes; open replays the records. These tests hold the
//! storage contract (`storage/mod.rs`) against it through the public API only: a crash is
//! `discard_unflushed`, drop, reopen (and real SIGKILLs of a child process). Written against
//! 41d1881 and also run at 834a571 (materialization in batches, long pieces written by the
//! flush itself, 7 KiB log parts): all pass except the one marked `BUG` (rollback safety).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use assembler::keys::{args_piece, args_prefix};
use assembler::storage::sled_backend::{SledStorage, MATERIALIZE_BYTES, MATERIALIZE_FLUSHES};
use assembler::storage::{Space, Storage, WriteSet};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MSG: &[u8] = b"conv\x00msg";

/// Simulates a crash: drops every unflushed commit, drops the store, reopens the directory.
fn crash(dir: &Path, s: SledStorage) -> SledStorage {
    s.discard_unflushed();
    drop(s);
    reopen(dir)
}

fn reopen(dir: &Path) -> SledStorage {
    for _ in 0..500 {
        if let Ok(s) = SledStorage::open(dir) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot reopen {}", dir.display());
}

fn call_text(s: &SledStorage, msg: &[u8], call: u32) -> Vec<u8> {
    s.scan_prefix(Space::Args, &args_prefix(msg, call))
        .unwrap()
        .into_iter()
        .flat_map(|(_, v)| v)
        .collect()
}

/// A tiny deterministic generator (no dependency on a seed crate).
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

// ---------------------------------------------------------------------------------------------
// Group commit: commits from one thread while another flushes (as `consume/batch.rs` does).
// ---------------------------------------------------------------------------------------------

/// What commit `i` of [`commit_step`] writes: the counter, one argument piece of call `i % 3`,
/// and every 97th a large parked value (log parts over sled's blob threshold, and flushes
/// that cross `MATERIALIZE_BYTES`).
fn commit_step(s: &SledStorage, i: u64, next_piece: &mut [u32; 3]) {
    let c = (i % 3) as usize;
    let mut w = WriteSet::default();
    w.put(
        Space::Streams,
        b"counter".to_vec(),
        i.to_be_bytes().to_vec(),
    );
    w.put(
        Space::Args,
        args_piece(MSG, c as u32, next_piece[c]),
        format!("{i},").into_bytes(),
    );
    next_piece[c] += 1;
    w.put(
        Space::Messages,
        format!("m{}", i % 50).into_bytes(),
        i.to_be_bytes().to_vec(),
    );
    if i.is_multiple_of(97) {
        w.put(
            Space::Parked,
            format!("p{}", i % 5).into_bytes(),
            vec![(i % 251) as u8; 300 * 1024],
        );
    }
    s.commit(w).unwrap();
}

/// Checks that `s` holds exactly commits `0..=j` of [`commit_step`] for the `j` the counter
/// names, and returns it.
fn check_prefix(s: &SledStorage) -> Option<u64> {
    let j = s
        .get(Space::Streams, b"counter")
        .unwrap()
        .map(|v| u64::from_be_bytes(v.try_into().unwrap()))?;
    for c in 0..3u64 {
        let want: String = (0..=j)
            .filter(|i| i % 3 == c)
            .map(|i| format!("{i},"))
            .collect();
        let got = String::from_utf8(call_text(s, MSG, c as u32)).unwrap();
        assert_eq!(got, want, "call {c} after a crash at commit {j}");
    }
    for m in 0..50u64 {
        let want = (0..=j).rev().find(|i| i % 50 == m);
        let got = s
            .get(Space::Messages, format!("m{m}").as_bytes())
            .unwrap()
            .map(|v| u64::from_be_bytes(v.try_into().unwrap()));
        assert_eq!(got, want, "message key m{m} after a crash at commit {j}");
    }
    for p in 0..5u64 {
        let want = (0..=j).rev().find(|i| i % 97 == 0 && i % 5 == p);
        let got = s.get(Space::Parked, format!("p{p}").as_bytes()).unwrap();
        match (want, got) {
            (None, None) => {}
            (Some(i), Some(v)) => {
                assert_eq!(v.len(), 300 * 1024);
                assert!(v.iter().all(|b| *b == (i % 251) as u8), "parked p{p}");
            }
            (w, g) => panic!("parked p{p}: want {w:?}, got {:?}", g.map(|v| v.len())),
        }
    }
    Some(j)
}

/// Pieces of each call in the recovered state (the store would read its piece count back
/// from its message state; here: one piece per commit of the call).
fn pieces_after(j: Option<u64>) -> [u32; 3] {
    let mut n = [0u32; 3];
    if let Some(j) = j {
        for i in 0..=j {
            n[(i % 3) as usize] += 1;
        }
    }
    n
}

#[test]
fn commits_racing_flushes_survive_crashes_as_a_prefix_that_holds_every_acked_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Arc::new(SledStorage::open(dir.path()).unwrap());
    let mut next_commit = 0u64;
    let mut next_piece = [0u32; 3];
    for round in 0..6u64 {
        let done = Arc::new(AtomicU64::new(u64::MAX)); // last committed index (MAX: none)
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(u64::MAX));
        let flush_count = Arc::new(AtomicU64::new(0));
        let flusher = {
            let (s, done, stop, acked, count) = (
                s.clone(),
                done.clone(),
                stop.clone(),
                acked.clone(),
                flush_count.clone(),
            );
            std::thread::spawn(move || {
                let mut last = u64::MAX;
                while !stop.load(Ordering::SeqCst) {
                    // a batch is acked only when a flush that began after its commit returned
                    let before = done.load(Ordering::SeqCst);
                    s.flush().unwrap();
                    if before != last {
                        // (counts flushes with new commits: each logs or materializes)
                        count.fetch_add(1, Ordering::SeqCst);
                        last = before;
                    }
                    if before != u64::MAX {
                        acked.store(before, Ordering::SeqCst);
                    }
                }
            })
        };
        // more than MATERIALIZE_FLUSHES flushes a round: materializations race commits too
        let min_flushes = u64::from(MATERIALIZE_FLUSHES) + 8 + round * 5;
        let first = next_commit;
        while next_commit < first + 500 || flush_count.load(Ordering::SeqCst) < min_flushes {
            commit_step(&s, next_commit, &mut next_piece);
            done.store(next_commit, Ordering::SeqCst);
            next_commit += 1;
            if next_commit.is_multiple_of(8) {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        }
        let end = next_commit;
        stop.store(true, Ordering::SeqCst);
        flusher.join().unwrap();
        let flushes = flush_count.load(Ordering::SeqCst);
        let acked = acked.load(Ordering::SeqCst);
        eprintln!("round {round}: {flushes} flushes over commits {first}..{end}, acked {acked}");
        let storage = Arc::try_unwrap(s).expect("the flusher's handle is gone");
        let storage = crash(dir.path(), storage);
        let j = check_prefix(&storage);
        if acked != u64::MAX {
            let j = j.expect("acked commits survive");
            assert!(
                j >= acked,
                "round {round}: commit {acked} was acked after a flush ({flushes} flushes, \
                 commits {first}..{end}) but the store came back at {j}"
            );
        }
        assert!(j.is_none_or(|j| j < end));
        next_commit = j.map_or(0, |j| j + 1);
        next_piece = pieces_after(j);
        s = Arc::new(storage);
    }
    // a last clean run: flush, materialize, reopen, same state
    let storage = Arc::try_unwrap(s).unwrap();
    storage.flush().unwrap();
    let before = check_prefix(&storage);
    storage.materialize_now().unwrap();
    assert_eq!(check_prefix(&storage), before);
    let storage = crash(dir.path(), storage);
    assert_eq!(check_prefix(&storage), before);
}

// ---------------------------------------------------------------------------------------------
// A random model: plain keys, `remove`, argument pieces with replaces (piece numbers reset or
// continuing with gaps), whole-call deletes, stored pieces below and above EXTEND_STORED_MAX,
// large values, flushes, materializations and crashes.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Default, Debug, PartialEq)]
struct Model {
    plain: BTreeMap<u8, Vec<u8>>,
    calls: BTreeMap<(u8, u32), Vec<u8>>,
    /// Next piece number per (message, call).
    next: BTreeMap<(u8, u32), u32>,
}

const MSGS: [&[u8]; 2] = [b"c\x00a", b"c\x00ab"];

fn read_model(s: &SledStorage, m: &Model) -> Model {
    let plain = s
        .scan_prefix(Space::Streams, b"")
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k[0], v))
        .collect();
    let mut calls = BTreeMap::new();
    for (mi, msg) in MSGS.iter().enumerate() {
        for call in [0u32, 1, 0x8000_0001] {
            let t = call_text(s, msg, call);
            if !t.is_empty() {
                calls.insert((mi as u8, call), t);
            }
        }
    }
    Model {
        plain,
        calls,
        next: m.next.clone(),
    }
}

fn run_model(seed: u64, steps: usize, spills: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let mut rng = Rng(seed | 1);
    let mut live = Model::default();
    let mut flushed = Model::default();
    let mut log = Vec::new();
    for step in 0..steps {
        let pick = rng.below(100);
        let mi = rng.below(2) as u8;
        let call = [0u32, 1, 0x8000_0001][rng.below(3) as usize];
        let id = (mi, call);
        let msg = MSGS[mi as usize];
        let op;
        match pick {
            0..=14 => {
                let k = rng.below(6) as u8;
                let len = match rng.below(20) {
                    0 => 200 * 1024,
                    _ => 1 + rng.below(8) as usize,
                };
                let v = vec![rng.below(256) as u8; len];
                let mut w = WriteSet::default();
                w.put(Space::Streams, vec![k], v.clone());
                s.commit(w).unwrap();
                op = format!("put {k} ({len} bytes)");
                live.plain.insert(k, v);
            }
            15..=18 => {
                let k = rng.below(6) as u8;
                let existed = s.remove(Space::Streams, &[k]).unwrap();
                assert_eq!(existed, live.plain.remove(&k).is_some(), "remove {k}");
                op = format!("remove {k}");
            }
            19..=21 => {
                let k = rng.below(6) as u8;
                let mut w = WriteSet::default();
                w.delete(Space::Streams, vec![k]);
                s.commit(w).unwrap();
                live.plain.remove(&k);
                op = format!("delete {k}");
            }
            22..=59 => {
                let n = *live.next.get(&id).unwrap_or(&0);
                let len = match rng.below(15) {
                    0 => 5000,
                    1 => 3000,
                    _ => 1 + rng.below(5) as usize,
                };
                let text: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
                let mut w = WriteSet::default();
                w.put(Space::Args, args_piece(msg, call, n), text.clone());
                // sometimes with other writes in the same commit
                if rng.below(3) == 0 {
                    w.put(Space::Streams, vec![9], n.to_be_bytes().to_vec());
                    live.plain.insert(9, n.to_be_bytes().to_vec());
                }
                s.commit(w).unwrap();
                live.next.insert(id, n + 1);
                live.calls.entry(id).or_default().extend_from_slice(&text);
                op = format!("piece {id:?} #{n} ({len} bytes)");
            }
            60..=67 => {
                // a replace: delete every piece, write piece 0; the count resets or goes on
                let n = *live.next.get(&id).unwrap_or(&0);
                let mut w = WriteSet::default();
                for p in 0..n {
                    w.delete(Space::Args, args_piece(msg, call, p));
                }
                let text = format!("R{step}").into_bytes();
                w.put(Space::Args, args_piece(msg, call, 0), text.clone());
                s.commit(w).unwrap();
                let keep_count = rng.below(2) == 0;
                live.next.insert(id, if keep_count { n.max(1) } else { 1 });
                live.calls.insert(id, text);
                op = format!("replace {id:?} of {n} (count kept: {keep_count})");
            }
            68..=71 => {
                // the call's pieces deleted (a finished message)
                let n = *live.next.get(&id).unwrap_or(&0);
                let mut w = WriteSet::default();
                for p in 0..n {
                    w.delete(Space::Args, args_piece(msg, call, p));
                }
                s.commit(w).unwrap();
                live.next.insert(id, 0);
                live.calls.remove(&id);
                op = format!("delete call {id:?} ({n} pieces)");
            }
            72..=87 => {
                s.flush().unwrap();
                flushed = live.clone();
                op = "flush".into();
            }
            88..=91 => {
                s.materialize_now().unwrap();
                flushed = live.clone();
                op = "materialize".into();
            }
            92 if spills => {
                // one commit past SPILL_BYTES: the buffer is materialized mid-interval, unflushed
                // commits with it (sled took them as one batch with the log records' deletion;
                // `discard_unflushed` keeps what sled took, a valid outcome of a crash)
                let mut w = WriteSet::default();
                w.put(Space::Parked, b"spill".to_vec(), vec![5; 33 * 1024 * 1024]);
                s.commit(w).unwrap();
                let mut w = WriteSet::default();
                w.delete(Space::Parked, b"spill".to_vec());
                s.commit(w).unwrap();
                assert_eq!(s.get(Space::Parked, b"spill").unwrap(), None);
                flushed = live.clone();
                op = "spill".into();
            }
            _ => {
                s = crash(dir.path(), s);
                live = flushed.clone();
                op = "crash".into();
            }
        }
        log.push(op);
        let got = read_model(&s, &live);
        if got != live {
            let tail: Vec<_> = log.iter().rev().take(25).rev().collect();
            panic!(
                "seed {seed} step {step}: the storage reads\n{:?}\nthe model\n{:?}\nlast ops {tail:#?}",
                summarize(&got),
                summarize(&live)
            );
        }
    }
    // a clean reopen materializes and reads the same
    drop(s);
    let s = reopen(dir.path());
    assert_eq!(
        read_model(&s, &live),
        live,
        "seed {seed}: after a clean reopen"
    );
}

fn summarize(m: &Model) -> Vec<String> {
    let mut out: Vec<String> = m
        .plain
        .iter()
        .map(|(k, v)| format!("{k}={}b/{:?}", v.len(), v.first()))
        .collect();
    out.extend(m.calls.iter().map(|(k, v)| {
        let head = String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned();
        format!("{k:?}: {} bytes {head:?}", v.len())
    }));
    out
}

#[test]
fn a_random_history_reads_like_the_model_through_flushes_materializations_and_crashes() {
    for seed in 1..=24u64 {
        run_model(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 400, false);
    }
}

/// The same with spills: one commit past `SPILL_BYTES` materializes the buffer between two
/// flushes (slow: sled's recovery reads the 33 MiB values back at every crash).
#[test]
fn a_random_history_with_spills_reads_like_the_model() {
    for seed in 101..=101u64 {
        run_model(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 150, true);
    }
}

// ---------------------------------------------------------------------------------------------
// Targeted cases.
// ---------------------------------------------------------------------------------------------

fn put_piece(s: &SledStorage, call: u32, n: u32, text: &[u8]) {
    let mut w = WriteSet::default();
    w.put(Space::Args, args_piece(MSG, call, n), text.to_vec());
    s.commit(w).unwrap();
}

/// A call whose text is appended over many flushes grows one buffered value; its log records
/// are tails. The value crosses sled's blob threshold (~128 KiB), and the rounds go on past
/// `MATERIALIZE_BYTES` (a window ends there, before `MATERIALIZE_FLUSHES`): replay rebuilds
/// it exactly, and a materialization after the replay writes the same text.
#[test]
fn a_large_argument_appended_over_flushes_replays_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open(dir.path()).unwrap();
    let mut want = Vec::new();
    let mut n = 0;
    let rounds = (MATERIALIZE_BYTES / (3 * 20 * 1024) + 8).min(MATERIALIZE_FLUSHES as usize + 5);
    for round in 0..rounds {
        for _ in 0..3 {
            let text = vec![b'a' + (n % 26) as u8; 20 * 1024];
            put_piece(&s, 0, n, &text);
            want.extend_from_slice(&text);
            n += 1;
        }
        s.flush().unwrap();
        if round % 4 == 3 {
            // lost: never flushed
            put_piece(&s, 0, n, b"LOST");
            s = crash(dir.path(), s);
        }
        assert_eq!(call_text(&s, MSG, 0), want, "round {round}");
    }
    s.materialize_now().unwrap();
    assert_eq!(call_text(&s, MSG, 0), want);
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), want);
}

/// The buffer crosses SPILL_BYTES between two flushes: it is materialized (not fsynced), with
/// the log records deleted, in the middle of a flush interval, then more commits follow and
/// the pieces appended before the spill (logged as tails) continue after it.
#[test]
fn a_spill_between_flushes_keeps_the_log_and_the_appends_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put_piece(&s, 0, 0, b"ab");
    s.flush().unwrap(); // record 0: piece 0 = "ab"
    put_piece(&s, 0, 1, b"cd"); // a tail of piece 0
                                // 33 MiB of parked inputs, no flush: the buffer spills
    for i in 0..33u32 {
        let mut w = WriteSet::default();
        w.put(
            Space::Parked,
            i.to_be_bytes().to_vec(),
            vec![i as u8; 1024 * 1024],
        );
        s.commit(w).unwrap();
    }
    put_piece(&s, 0, 2, b"ef");
    s.flush().unwrap();
    put_piece(&s, 0, 3, b"LOST");
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"abcdef");
    assert_eq!(s.count(Space::Parked).unwrap(), 33);
    put_piece(&s, 0, 3, b"gh");
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"abcdefgh");
    s.materialize_now().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"abcdefgh");
}

/// A spill in the middle of an unflushed interval followed by a crash: what comes back is a
/// prefix of the commits (here: everything up to the spill, which sled took; never the
/// commits after it, never a part of one).
#[test]
fn a_crash_after_an_unflushed_spill_comes_back_as_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    let mut w = WriteSet::default();
    w.put(Space::Streams, b"k".to_vec(), b"flushed".to_vec());
    s.commit(w).unwrap();
    s.flush().unwrap();
    // 40 MiB without a flush: the buffer spills once (past SPILL_BYTES), mid-interval
    for i in 0..40u32 {
        let mut w = WriteSet::default();
        w.put(
            Space::Parked,
            i.to_be_bytes().to_vec(),
            vec![1; 1024 * 1024],
        );
        w.put(Space::Streams, b"k".to_vec(), i.to_be_bytes().to_vec());
        s.commit(w).unwrap();
    }
    let s = crash(dir.path(), s);
    let k = s.get(Space::Streams, b"k").unwrap().unwrap();
    let parked = s.count(Space::Parked).unwrap() as u32;
    match k.as_slice() {
        b"flushed" => assert_eq!(parked, 0),
        v => {
            let i = u32::from_be_bytes(v.try_into().unwrap());
            assert_eq!(
                parked,
                i + 1,
                "the counter and the parked inputs come from one commit"
            );
        }
    }
}

/// A replace inside the flush interval after a piece was appended (logged as a tail) in an
/// earlier interval; then the count goes on with a gap; crash between every step.
#[test]
fn a_replace_after_logged_tails_and_continued_pieces_survive_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    put_piece(&s, 0, 0, b"ab");
    s.materialize_now().unwrap(); // sled holds piece 0 = "ab"
    put_piece(&s, 0, 1, b"c"); // own key (piece 0 is in sled)
    s.flush().unwrap();
    put_piece(&s, 0, 2, b"d"); // a tail of piece 1
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"abcd");
    // replace all three pieces, then continue at piece 3 (count kept)
    let mut w = WriteSet::default();
    for p in 0..3 {
        w.delete(Space::Args, args_piece(MSG, 0, p));
    }
    w.put(Space::Args, args_piece(MSG, 0, 0), b"R".to_vec());
    s.commit(w).unwrap();
    put_piece(&s, 0, 3, b"x");
    s.flush().unwrap();
    put_piece(&s, 0, 4, b"y");
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"Rxy");
    s.materialize_now().unwrap();
    assert_eq!(call_text(&s, MSG, 0), b"Rxy");
    put_piece(&s, 0, 5, b"z");
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(call_text(&s, MSG, 0), b"Rxyz");
}

/// The 4 MiB materialization: a flush whose buffer holds MATERIALIZE_BYTES materializes even
/// with few records, and what was logged before stays readable through crashes.
#[test]
fn the_byte_threshold_materialization_keeps_earlier_records_contents() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    for i in 0..3u8 {
        let mut w = WriteSet::default();
        w.put(Space::Streams, vec![i], vec![i; 10]);
        s.commit(w).unwrap();
        s.flush().unwrap();
    }
    let mut w = WriteSet::default();
    w.put(Space::Parked, b"big".to_vec(), vec![7; MATERIALIZE_BYTES]);
    w.delete(Space::Streams, vec![1]);
    s.commit(w).unwrap();
    s.flush().unwrap();
    let s = crash(dir.path(), s);
    assert_eq!(s.get(Space::Streams, &[0]).unwrap(), Some(vec![0; 10]));
    assert_eq!(s.get(Space::Streams, &[1]).unwrap(), None);
    assert_eq!(s.get(Space::Streams, &[2]).unwrap(), Some(vec![2; 10]));
    assert_eq!(
        s.get(Space::Parked, b"big").unwrap().map(|v| v.len()),
        Some(MATERIALIZE_BYTES)
    );
}

// ---------------------------------------------------------------------------------------------
// Real SIGKILLs: the same group-commit workload as above in a child process (this binary
// re-executed), killed at random points; sled's on-disk recovery of the log records and of the
// materializations, not its in-memory state as `discard_unflushed` reads it.
// ---------------------------------------------------------------------------------------------

const CHILD_ENV: &str = "TOOLSTREAM_FLUSH_LOG_REVIEW_DIR";

fn read_acked(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("acked"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

#[test]
fn flush_log_review_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let s = Arc::new(reopen(&dir.join("db")));
    let j = check_prefix(&s);
    let mut next = j.map_or(0, |j| j + 1);
    let mut pieces = pieces_after(j);
    std::fs::write(dir.join("started"), "1").unwrap();
    let done = Arc::new(AtomicU64::new(j.unwrap_or(u64::MAX)));
    {
        let (s, done, dir) = (s.clone(), done.clone(), dir.to_path_buf());
        std::thread::spawn(move || loop {
            let before = done.load(Ordering::SeqCst);
            s.flush().unwrap();
            if before != u64::MAX {
                let tmp = dir.join("acked.tmp");
                std::fs::write(&tmp, before.to_string()).unwrap();
                std::fs::rename(&tmp, dir.join("acked")).unwrap();
            }
        });
    }
    loop {
        if next < 400_000 {
            commit_step(&s, next, &mut pieces);
            done.store(next, Ordering::SeqCst);
            next += 1;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

#[test]
fn sigkills_during_group_commit_keep_every_acked_commit_and_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5EED_u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7));
    let mut seen = Vec::new();
    for kill in 0..16 {
        let _ = std::fs::remove_file(dir.path().join("started"));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "flush_log_review_child",
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
        std::thread::sleep(std::time::Duration::from_millis(50 + rng.below(400)));
        let _ = child.kill();
        let _ = child.wait();
        let acked = read_acked(dir.path());
        let s = reopen(&dir.path().join("db"));
        let j = check_prefix(&s);
        if let Some(a) = acked {
            let j =
                j.unwrap_or_else(|| panic!("kill {kill}: commit {a} was acked, none came back"));
            assert!(
                j >= a,
                "kill {kill}: commit {a} was acked, the store came back at {j}"
            );
        }
        seen.push((acked, j));
        s.discard_unflushed(); // the parent's look must not write anything
        drop(s);
    }
    eprintln!("(acked, recovered) per kill: {seen:?}");
    assert!(
        seen.iter().filter(|(a, _)| a.is_some()).count() >= 8,
        "the child acked too rarely to test anything"
    );
}

// ---------------------------------------------------------------------------------------------
// The on-disk format: the keyspaces alone no longer hold every flushed commit.
// ---------------------------------------------------------------------------------------------

/// Rollback safety. A flushed commit may live only in a flush-log record (0xFE keys), which
/// the previous release does not read; a worker stopped cleanly settles its store
/// (`Storage::settle`: the log applied to the keyspaces), so the previous release then reads
/// every commit, and the next upgrade reads what the previous release wrote after it. (After
/// a crash there are records left: README "Durability" says to start the same release once,
/// or stop it cleanly, before a rollback.) Simulated with sled directly, as the previous
/// release's storage did (keyspace prefix + key, one `apply_batch` per flush).
#[test]
fn a_settled_store_survives_a_rollback_and_a_new_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStorage::open(dir.path()).unwrap();
    let mut w = WriteSet::default();
    w.put(Space::Streams, b"k".to_vec(), b"v1 (acked)".to_vec());
    s.commit(w).unwrap();
    s.flush().unwrap(); // durable: the input is acked
    s.settle().unwrap(); // the clean stop's last write
    s.discard_unflushed(); // then killed: nothing more is written
    drop(s);
    // the previous release opens the same directory
    let old_key = [&[Space::Streams as u8][..], b"k"].concat();
    let seen_by_old = {
        let db = loop {
            match sled::Config::new().path(dir.path()).open() {
                Ok(db) => break db,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        let tree = db.open_tree("toolstream_v1").unwrap();
        let seen_by_old = tree.get(&old_key).unwrap();
        // it then applies newer input and flushes
        let mut b = sled::Batch::default();
        b.insert(old_key.as_slice(), &b"v2 (newer)"[..]);
        tree.apply_batch(b).unwrap();
        db.flush().unwrap();
        seen_by_old
    };
    // upgrade again
    let s = reopen(dir.path());
    let after_upgrade = s.get(Space::Streams, b"k").unwrap();
    assert_eq!(
        (seen_by_old.as_deref(), after_upgrade.as_deref()),
        (Some(&b"v1 (acked)"[..]), Some(&b"v2 (newer)"[..])),
        "(what the previous release reads of a flushed, acked commit; what the next upgrade \
         reads after the previous release wrote a newer value)"
    );
}
