//! Unit tests of the sled storage: the layers, the flush log's files, materializations (a
//! slice per flush, from the flush that freezes a layer), crashes (in-process: `discard_unflushed`, drop, reopen)
//! and a random model.

use super::layer::{TAG_DELETE, TAG_PATCH, TAG_PUT};
use super::*;
use crate::keys::args_piece;
use std::collections::BTreeMap;

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

fn active_args(s: &SledStorage) -> usize {
    s.shared
        .state()
        .active
        .iter()
        .filter(|(k, _)| k.first() == Some(&(Space::Args as u8)))
        .count()
}

fn stored_args(s: &SledStorage) -> usize {
    s.shared
        .tree
        .scan_prefix([Space::Args as u8])
        .keys()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
        .len()
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

/// A crash: what was not flushed is lost, nothing more is written; then a reopen.
fn reopen(dir: &Path, s: SledStorage) -> SledStorage {
    s.discard_unflushed();
    drop(s);
    open_again(dir)
}

/// Opens the store at `dir`, waiting while the sled instance dropped just before still holds
/// its lock (its threads let go of it after the drop returns: an open right after one
/// failed once in the whole suite's run).
fn open_again(dir: &Path) -> SledStorage {
    let mut last = None;
    for _ in 0..200 {
        match SledStorage::open(dir) {
            Ok(s) => return s,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot open {} again: {last:?}", dir.display());
}

/// The segments on disk, and their records.
fn segments(dir: &Path) -> Vec<(u64, usize)> {
    let wal = wal::dir_of(dir);
    wal::windows(&wal)
        .unwrap()
        .into_iter()
        .map(|w| (w, wal::read(&wal, w).unwrap().records.len()))
        .collect()
}

/// Waits until no materialization runs.
fn settled_background(s: &SledStorage) {
    drop(wait_running(&s.shared, s.shared.state()));
}

/// Opens the directory with sled alone (as a release before the flush log would).
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
fn appended_pieces_share_one_buffered_value_and_read_back_in_order() {
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, "ab");
    put(&s, 1, "c");
    put(&s, 2, "d");
    assert_eq!(text(&s), "abcd");
    assert_eq!(active_args(&s), 1, "pieces 1 and 2 extend piece 0");
    s.flush().unwrap();
    put(&s, 3, "e");
    put(&s, 4, "f");
    assert_eq!(text(&s), "abcdef");
    assert_eq!(active_args(&s), 1);
    s.flush().unwrap();
    assert_eq!(text(&s), "abcdef");
}

#[test]
fn a_call_streamed_over_many_materializations_keeps_one_stored_key() {
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
    let call0: String = s
        .scan_prefix(Space::Args, &crate::keys::args_prefix(MSG, 0))
        .unwrap()
        .into_iter()
        .map(|(_, v)| String::from_utf8(v).unwrap())
        .collect();
    assert_eq!(call0, format!("{long}y"));
}

#[test]
fn pieces_are_joined_in_a_layer_only_up_to_join_piece_max() {
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, &"a".repeat(JOIN_PIECE_MAX - 1));
    put(&s, 1, "b");
    assert_eq!(active_args(&s), 1, "joined while under JOIN_PIECE_MAX");
    put(&s, 2, "c");
    assert_eq!(
        active_args(&s),
        2,
        "a piece of JOIN_PIECE_MAX takes no more"
    );
    put(&s, 3, "d");
    assert_eq!(active_args(&s), 2);
    let want = format!("{}bcd", "a".repeat(JOIN_PIECE_MAX - 1));
    assert_eq!(text(&s), want);
    s.materialize_now().unwrap();
    assert_eq!(text(&s), want);
    // consecutive pieces, the first of JOIN_PIECE_MAX: not joined on their way to sled either
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, &"a".repeat(JOIN_PIECE_MAX));
    put(&s, 1, "b");
    assert_eq!(active_args(&s), 2);
    s.materialize_now().unwrap();
    assert_eq!(
        stored_args(&s),
        2,
        "nor are they joined on their way to sled"
    );
    assert_eq!(text(&s), format!("{}b", "a".repeat(JOIN_PIECE_MAX)));
}

/// The other half of the memory bug: extending a call's stored piece reads its leaf (large
/// with argument text) into sled's cache; a run that starts with a piece of
/// `EXTEND_STORED_MAX` or more is not worth it and gets a key of its own.
#[test]
fn a_run_starting_with_a_long_piece_does_not_extend_the_stored_one() {
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, "ab");
    s.materialize_now().unwrap();
    let long = "x".repeat(EXTEND_STORED_MAX);
    put(&s, 1, &long);
    s.materialize_now().unwrap();
    assert_eq!(stored_args(&s), 2);
    assert_eq!(text(&s), format!("ab{long}"));
    // a short run still extends the short stored piece it follows
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, "ab");
    s.materialize_now().unwrap();
    put(&s, 1, "cd");
    s.materialize_now().unwrap();
    assert_eq!(stored_args(&s), 1);
    assert_eq!(text(&s), "abcd");
}

#[test]
fn a_materialization_batch_ends_at_a_mebibyte_of_writes() {
    let s = SledStorage::temporary().unwrap();
    // fewer writes than a batch holds (3 in tests), more bytes than it may
    for k in ["a", "b", "c"] {
        let mut w = WriteSet::default();
        w.put(Space::Parked, k.as_bytes().to_vec(), vec![1; 700 * 1024]);
        s.commit(w).unwrap();
    }
    s.fail_next_materialization_before(1);
    assert!(s.materialize_now().is_err());
    assert_eq!(
        stored_keys(&s, Space::Parked),
        2,
        "the first batch closed at 1 MiB, after two values"
    );
    assert_eq!(s.scan_prefix(Space::Parked, b"").unwrap().len(), 3);
    s.materialize_now().unwrap();
    assert_eq!(stored_keys(&s, Space::Parked), 3);
}

#[test]
fn a_replace_then_append_reads_only_the_new_text() {
    let s = SledStorage::temporary().unwrap();
    put(&s, 0, "old");
    s.flush().unwrap();
    put(&s, 1, "-er");
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

#[test]
fn a_flush_appends_one_record_and_a_crash_keeps_exactly_the_flushed_commits() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    put_kv(&s, Space::Streams, "a", "1");
    put_kv(&s, Space::Messages, "b", "1");
    s.flush().unwrap();
    assert!(
        s.shared
            .tree
            .scan_prefix([Space::Streams as u8])
            .next()
            .is_none(),
        "a flush writes the log, not sled"
    );
    assert_eq!(segments(dir.path()), vec![(1, 1)], "one record");
    put_kv(&s, Space::Streams, "a", "2");
    let mut w = WriteSet::default();
    w.delete(Space::Messages, b"b".to_vec());
    s.commit(w).unwrap();
    s.flush().unwrap();
    // a flush with nothing committed since appends nothing
    s.flush().unwrap();
    assert_eq!(segments(dir.path()), vec![(1, 2)]);
    put_kv(&s, Space::Streams, "a", "3 (never flushed)");
    put_kv(&s, Space::Streams, "c", "never flushed");
    let s = reopen(dir.path(), s);
    assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("2"));
    assert_eq!(value(&s, Space::Messages, "b"), None, "the delete holds");
    assert_eq!(value(&s, Space::Streams, "c"), None);
    assert_eq!(s.log_records(), 2);
    // and the replayed state goes on: flushed again, materialized, reopened
    put_kv(&s, Space::Streams, "c", "3");
    s.flush().unwrap();
    s.materialize_now().unwrap();
    assert!(
        segments(dir.path()).is_empty(),
        "a materialization removes the log"
    );
    assert_eq!(s.log_records(), 0);
    let s = reopen(dir.path(), s);
    assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("2"));
    assert_eq!(value(&s, Space::Streams, "c").as_deref(), Some("3"));
    assert_eq!(s.count(Space::Streams).unwrap(), 2);
}

#[test]
fn rewrites_are_logged_as_patches_and_appends_as_their_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    let first = "x".repeat(10_000);
    put(&s, 0, &first);
    let state = "s".repeat(300);
    put_kv(&s, Space::Streams, "st", &state);
    s.flush().unwrap();
    for n in 1..=5 {
        put(&s, n, "y");
        put_kv(&s, Space::Streams, "st", &format!("{}{n}", &state[1..]));
        s.flush().unwrap();
    }
    let wal = wal::dir_of(dir.path());
    let records = wal::read(&wal, 1).unwrap().records;
    assert_eq!(records.len(), 6);
    for later in &records[1..] {
        assert!(
            later.len() < 120,
            "an append and a patch log what changed: {} bytes",
            later.len()
        );
        assert!(later.contains(&TAG_PATCH));
    }
    put(&s, 6, "never flushed");
    let s = reopen(dir.path(), s);
    assert_eq!(text(&s), format!("{first}yyyyy"));
    assert_eq!(
        value(&s, Space::Streams, "st"),
        Some(format!("{}5", &state[1..]))
    );
    put(&s, 6, "z");
    s.flush().unwrap();
    let s = reopen(dir.path(), s);
    assert_eq!(text(&s), format!("{first}yyyyyz"));
}

#[test]
fn a_key_put_and_deleted_in_one_window_leaves_no_tombstone() {
    let s = SledStorage::temporary().unwrap();
    put_kv(&s, Space::Outbox, "row", "event");
    s.flush().unwrap();
    assert!(s.remove(Space::Outbox, b"row").unwrap());
    assert!(!s.remove(Space::Outbox, b"row").unwrap(), "gone already");
    assert!(s.shared.state().active.is_empty(), "no tombstone");
    // a key sled holds gets one
    put_kv(&s, Space::Outbox, "kept", "event");
    s.materialize_now().unwrap();
    assert!(s.remove(Space::Outbox, b"kept").unwrap());
    assert_eq!(s.shared.state().active.len(), 1, "a tombstone");
    assert_eq!(s.first_n(Space::Outbox, 10).unwrap(), vec![]);
    s.materialize_now().unwrap();
    assert_eq!(s.count(Space::Outbox).unwrap(), 0);
}

/// The memory bug of a materialization on a thread of its own (sled's cache and glibc's
/// arenas grew past their bounds while it wrote sled beside the apply thread): the flush that
/// freezes the layer writes it to sled (all of it, for a layer of one slice) before it
/// returns, and nothing runs after it.
#[test]
fn every_materialize_flushes_flush_freezes_the_layer_and_materializes_it_before_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    for i in 0..MATERIALIZE_FLUSHES - 1 {
        put_kv(&s, Space::Streams, "k", &format!("v{i}"));
        s.flush().unwrap();
    }
    assert_eq!(stored_keys(&s, Space::Streams), 0);
    assert_eq!(s.log_records(), MATERIALIZE_FLUSHES - 1);
    put_kv(&s, Space::Streams, "k", "last");
    s.flush().unwrap();
    {
        let st = s.shared.state();
        assert_eq!(
            st.phase,
            Phase::Idle,
            "nothing left running after the flush"
        );
        assert!(st.frozen.is_none());
    }
    assert_eq!(stored_keys(&s, Space::Streams), 1, "materialized");
    assert_eq!(s.log_records(), 0);
    assert!(
        segments(dir.path()).is_empty(),
        "the window's segment is gone"
    );
    assert_eq!(
        raw_marker(&s),
        Some(1),
        "the marker names the window materialized"
    );
    // the next window starts a new segment
    put_kv(&s, Space::Streams, "k", "next");
    s.flush().unwrap();
    assert_eq!(segments(dir.path()), vec![(2, 1)]);
    assert_eq!(value(&s, Space::Streams, "k").as_deref(), Some("next"));
}

/// What a reader sees of the keys these tests write: the call's text and the streams.
fn reads(s: &SledStorage) -> (String, Vec<Pair>) {
    (text(s), s.scan_prefix(Space::Streams, b"").unwrap())
}

/// Writes a window whose layer holds more keys than a slice ([`materialize::slice_writes`]):
/// a piece continuing the call's stored one (`ab`), and the 20 streams, written again. Its
/// last flush freezes it. Returns what a reader sees then, and the window sled's marker names.
fn window_of_many_slices(s: &SledStorage) -> ((String, Vec<Pair>), Option<u64>) {
    put(s, 0, "ab");
    for k in 0..20u8 {
        put_kv(s, Space::Streams, &format!("k{k:02}"), "old");
    }
    s.materialize_now().unwrap();
    let marker = raw_marker(s);
    put(s, 1, "cd");
    for i in 0..MATERIALIZE_FLUSHES {
        for k in 0..20u8 {
            put_kv(
                s,
                Space::Streams,
                &format!("k{k:02}"),
                &format!("new{i}.{k}"),
            );
        }
        s.flush().unwrap();
    }
    assert!(20 > materialize::slice_writes(21), "the layer spans slices");
    (reads(s), marker)
}

/// A frozen layer goes to sled a slice per flush (a whole window in the flush that froze it
/// held that flush, and the acks behind it, for 12–15 ms): between slices sled holds part of
/// it, readers see the same, the log stays, and the stored piece it extends is extended once,
/// in its last slice.
#[test]
fn a_frozen_layer_goes_to_sled_a_slice_per_flush_and_reads_the_same_between_slices() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    let (before, marker) = window_of_many_slices(&s);
    assert_eq!(before.0, "abcd");
    let mut slices = 1;
    let mut stored_before = 0;
    loop {
        let (phase, frozen) = {
            let st = s.shared.state();
            (st.phase.clone(), st.frozen.is_some())
        };
        assert_eq!(reads(&s), before, "after slice {slices}");
        if phase == Phase::Idle {
            assert!(!frozen);
            break;
        }
        assert_eq!(phase, Phase::Frozen);
        assert!(frozen, "readable until sled holds all of it");
        let stored = s
            .shared
            .tree
            .scan_prefix([Space::Streams as u8])
            .values()
            .filter(|v| v.as_ref().is_ok_and(|v| v.starts_with(b"new")))
            .count();
        assert!(
            stored < 20,
            "slice {slices}: {stored} streams in sled already"
        );
        assert!(
            stored > stored_before,
            "slice {slices} wrote streams: {stored}"
        );
        stored_before = stored;
        assert!(!segments(dir.path()).is_empty(), "the log stays meanwhile");
        assert_eq!(stored_args(&s), 1);
        assert_eq!(raw_marker(&s), marker, "slice {slices}: the marker waits");
        s.flush().unwrap();
        slices += 1;
    }
    assert!(slices >= 3, "{slices} slices");
    assert!(
        segments(dir.path()).is_empty(),
        "the window's segment is gone"
    );
    assert_eq!(raw_marker(&s), marker.map(|m| m + 1));
    assert_eq!(stored_args(&s), 1, "the stored piece was extended, once");
    let s = reopen(dir.path(), s);
    assert_eq!(reads(&s), before);
}

/// A crash between two slices: the restart reads what was flushed, and materializes it again
/// from the start (rewriting what the slices wrote with the same values).
#[test]
fn a_crash_between_the_slices_of_a_materialization_reads_the_same_after_the_restart() {
    for crash_after in 1..=2 {
        let dir = tempfile::tempdir().unwrap();
        let s = open_again(dir.path());
        let (before, _) = window_of_many_slices(&s);
        for _ in 1..crash_after {
            s.flush().unwrap();
        }
        assert_eq!(s.shared.state().phase, Phase::Frozen, "between slices");
        let s = reopen(dir.path(), s);
        assert_eq!(reads(&s), before, "crash after slice {crash_after}");
        s.materialize_now().unwrap();
        let s = reopen(dir.path(), s);
        assert_eq!(reads(&s), before);
        assert_eq!(stored_args(&s), 1, "the stored piece was extended, once");
    }
}

/// A window due while the last one is still frozen (a burst of bytes ends windows faster than
/// slices go): the flush writes the rest of the frozen layer, and the next flush freezes.
#[test]
fn a_window_due_while_the_last_is_still_frozen_finishes_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    let (before, marker) = window_of_many_slices(&s);
    assert!(s.shared.state().frozen.is_some());
    put_kv(&s, Space::Meta, "big", &"x".repeat(MATERIALIZE_BYTES));
    s.flush().unwrap();
    {
        let st = s.shared.state();
        assert!(
            st.frozen.is_none(),
            "the rest of the frozen layer was written"
        );
        assert_eq!(st.active.len(), 1, "the new window is not frozen yet");
    }
    assert_eq!(raw_marker(&s), marker.map(|m| m + 1));
    s.flush().unwrap();
    assert!(
        s.shared.state().active.is_empty(),
        "frozen by the next flush"
    );
    assert_eq!(reads(&s), before);
    assert_eq!(
        value(&s, Space::Meta, "big").map(|v| v.len()),
        Some(MATERIALIZE_BYTES)
    );
}

/// A spill (a commit that makes the active layer outgrow its bound) while a layer is frozen
/// between its slices: the rest of the frozen layer is written, and the active one is frozen
/// and written too, so memory stays bounded.
#[test]
fn a_spill_between_slices_writes_the_frozen_layer_and_freezes_the_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    let (before, _) = window_of_many_slices(&s);
    assert_eq!(s.shared.state().phase, Phase::Frozen, "between slices");
    put_kv(&s, Space::Meta, "big", &"x".repeat(SPILL_BYTES));
    {
        let st = s.shared.state();
        assert!(st.frozen.is_none(), "both layers written");
        assert!(
            st.active.is_empty(),
            "the active layer, spilled, holds nothing"
        );
    }
    assert!(s
        .shared
        .tree
        .contains_key(prefixed(Space::Meta, b"big"))
        .unwrap());
    assert_eq!(reads(&s), before);
    let s = reopen(dir.path(), s);
    assert_eq!(reads(&s), before);
}

/// The log entry that puts `text` at `key` (prefixed), as an earlier release's log records
/// held every argument piece: replayed, each piece is a key of its own in the layer.
fn put_entry(log: &mut Vec<u8>, key: &[u8], text: &str) {
    log.push(TAG_PUT);
    field(log, key);
    field(log, text.as_bytes());
}

/// A frozen layer whose calls' pieces are keys of their own (a window replayed from an
/// earlier release's records): each call's pieces are joined into one run, appended to the
/// call's stored piece. The first slice ends right after the second call's run began: the
/// run goes on in the next slice, and each stored piece is extended once, in the last one.
#[test]
fn a_run_of_pieces_a_slice_ends_in_goes_on_in_the_next_and_extends_the_stored_piece_once() {
    let s = SledStorage::temporary().unwrap();
    for (call, text) in [(0, "ab"), (1, "w")] {
        let mut w = WriteSet::default();
        w.put(
            Space::Args,
            args_piece(MSG, call, 0),
            text.as_bytes().to_vec(),
        );
        s.commit(w).unwrap();
    }
    s.materialize_now().unwrap();
    let mut log = Vec::new();
    for (call, piece, text) in [
        (0, 1, "c"),
        (0, 2, "d"),
        (1, 1, "x"),
        (1, 2, "y"),
        (1, 3, "z"),
    ] {
        put_entry(
            &mut log,
            &prefixed(Space::Args, &args_piece(MSG, call, piece)),
            text,
        );
    }
    let mut writes = Layer::default();
    writes.replay(&log).unwrap();
    assert_eq!(writes.len(), 5, "a key per piece");
    // (two writes a slice: the first call's run ends at the second call's first piece, with
    // the removal of its two folded keys, and the slice stops with the second run open)
    assert_eq!(materialize::slice_writes(writes.len()), 2);
    {
        let mut st = s.shared.state();
        let window = st.window;
        st.frozen = Some(Arc::new(Frozen {
            writes,
            window,
            legacy: Vec::new(),
        }));
        st.phase = Phase::Frozen;
        st.window += 1;
    }
    let mut slices = 0;
    while s.shared.state().frozen.is_some() {
        assert_eq!(text(&s), "abcdwxyz", "after {slices} slices");
        s.flush().unwrap();
        slices += 1;
    }
    assert_eq!(slices, 2);
    assert_eq!(text(&s), "abcdwxyz");
    let stored: Vec<(Vec<u8>, Vec<u8>)> = s
        .shared
        .tree
        .scan_prefix([Space::Args as u8])
        .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    let want = [(0, "abcd"), (1, "wxyz")].map(|(call, text)| {
        (
            prefixed(Space::Args, &args_piece(MSG, call, 0)),
            text.as_bytes().to_vec(),
        )
    });
    assert_eq!(stored, want, "one key per call, each extended once");
}

fn stored_keys(s: &SledStorage, space: Space) -> usize {
    s.shared.tree.scan_prefix([space as u8]).count()
}

fn raw_marker(s: &SledStorage) -> Option<u64> {
    s.shared
        .tree
        .get(MARKER_KEY)
        .unwrap()
        .map(|v| u64::from_be_bytes(v.as_ref().try_into().unwrap()))
}

#[test]
fn a_large_layer_is_frozen_at_the_next_flush() {
    let s = SledStorage::temporary().unwrap();
    let mut w = WriteSet::default();
    w.put(Space::Parked, b"big".to_vec(), vec![7; MATERIALIZE_BYTES]);
    s.commit(w).unwrap();
    s.flush().unwrap();
    assert_eq!(s.log_records(), 0);
    assert_eq!(stored_keys(&s, Space::Parked), 1);
    assert_eq!(
        s.get(Space::Parked, b"big").unwrap().map(|v| v.len()),
        Some(MATERIALIZE_BYTES)
    );
}

#[test]
fn a_settled_store_holds_everything_in_its_keyspaces_and_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    put_kv(&s, Space::Streams, "a", "1");
    put(&s, 0, "text");
    s.flush().unwrap();
    put_kv(&s, Space::Streams, "b", "2 (not flushed, but settled)");
    s.settle().unwrap();
    assert_eq!(s.log_records(), 0);
    assert!(segments(dir.path()).is_empty());
    drop(s);
    let (a, b, args) = raw(dir.path(), |tree| {
        (
            tree.get(prefixed(Space::Streams, b"a")).unwrap(),
            tree.get(prefixed(Space::Streams, b"b")).unwrap(),
            tree.scan_prefix([Space::Args as u8]).count(),
        )
    });
    assert_eq!(a.as_deref(), Some(&b"1"[..]));
    assert!(b.is_some());
    assert_eq!(args, 1);
}

#[test]
fn values_go_to_sled_in_their_form_at_rest_and_are_read_in_either() {
    fn upper(space: Space, v: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok((space == Space::Messages).then(|| v.to_ascii_uppercase()))
    }
    let s = SledStorage::temporary().unwrap().with_at_rest(upper);
    put_kv(&s, Space::Messages, "m", "state");
    put_kv(&s, Space::Streams, "s", "state");
    assert_eq!(value(&s, Space::Messages, "m").as_deref(), Some("state"));
    s.materialize_now().unwrap();
    assert_eq!(value(&s, Space::Messages, "m").as_deref(), Some("STATE"));
    assert_eq!(value(&s, Space::Streams, "s").as_deref(), Some("state"));
}

/// A store whose first segment holds two flushed records (`a`, then `b`), left as a crash
/// leaves it: the segment's path.
fn two_flushed_records(dir: &Path) -> PathBuf {
    let s = SledStorage::open(dir).unwrap();
    put_kv(&s, Space::Streams, "a", "1");
    s.flush().unwrap();
    put_kv(&s, Space::Streams, "b", "2");
    s.flush().unwrap();
    s.discard_unflushed();
    drop(s);
    wal::dir_of(dir).join(format!("{:016x}.log", 1))
}

#[test]
fn a_corrupt_record_refuses_to_open_instead_of_losing_commits() {
    let dir = tempfile::tempdir().unwrap();
    // the first record's payload damaged, the second whole after it
    let path = two_flushed_records(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let err = loop {
        match SledStorage::open(dir.path()) {
            Err(StoreError::Corrupt { space, detail }) => break (space, detail),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            Ok(_) => panic!("a damaged log opened"),
        }
    };
    assert_eq!(err.0, "flush log");
    // the failed open changed nothing
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let a = raw(dir.path(), |tree| {
        tree.get(prefixed(Space::Streams, b"a")).unwrap()
    });
    assert_eq!(a, None);
}

#[test]
fn a_torn_last_record_loses_only_its_own_commits_and_is_cut_before_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    // the process died while appending the second record: cut it in the middle
    let path = two_flushed_records(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let s = open_again(dir.path());
    assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("1"));
    assert_eq!(value(&s, Space::Streams, "b"), None);
    put_kv(&s, Space::Streams, "c", "3");
    s.flush().unwrap();
    let s = reopen(dir.path(), s);
    assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("1"));
    assert_eq!(value(&s, Space::Streams, "c").as_deref(), Some("3"));
    assert_eq!(segments(dir.path()), vec![(1, 2)]);
}

#[test]
fn a_store_only_read_is_left_as_it_was_found() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    put_kv(&s, Space::Streams, "a", "1");
    s.flush().unwrap();
    let s = reopen(dir.path(), s);
    // a torn record at the end stays too: only a writer cuts it off
    let path = wal::dir_of(dir.path()).join(format!("{:016x}.log", 1));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &[9, 0, 0, 0, 1]).unwrap();
    drop(f);
    let found = std::fs::read(&path).unwrap();
    drop(s);
    let s = open_again(dir.path());
    assert_eq!(value(&s, Space::Streams, "a").as_deref(), Some("1"));
    drop(s); // read, never written: nothing materialized, nothing cut
    assert_eq!(std::fs::read(&path).unwrap(), found);
    assert_eq!(
        raw(dir.path(), |tree| tree
            .scan_prefix([Space::Streams as u8])
            .count()),
        0
    );
    // one that writes is settled when dropped
    let s = open_again(dir.path());
    put_kv(&s, Space::Streams, "b", "2");
    drop(s);
    assert!(segments(dir.path()).is_empty());
    let a = raw(dir.path(), |tree| {
        tree.get(prefixed(Space::Streams, b"a")).unwrap()
    });
    assert_eq!(a.as_deref(), Some(&b"1"[..]));
}

#[test]
fn a_crash_between_the_batches_of_a_materialization_reads_the_same_as_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    // a stored piece the materialization will extend (a write to a key not in the layer)
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
        s.fail_next_materialization_before(stop);
        assert!(s.materialize_now().is_err(), "stops before batch {stop}");
        assert_eq!(
            (text(&s), s.scan_prefix(Space::Streams, b"").unwrap()),
            before,
            "reads are the same with the layer half written"
        );
        assert!(
            !segments(dir.path()).is_empty(),
            "the log goes only after sled holds everything"
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

/// Found by review: sled's flush failed after a materialization's last batch, and the next
/// flush appended its record anyway (one that may rely on sled holding the window: a delete
/// logged as a forget) while the window's segment stayed until some later materialization,
/// and a settle removed it without sled being flushed. Now the window stays unsynced, and
/// sled is flushed and the segment removed before anything more is appended.
#[test]
fn a_failed_sled_flush_after_materializing_is_synced_before_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_again(dir.path());
    put_kv(&s, Space::Streams, "x", "old");
    s.materialize_now().unwrap();
    let mut w = WriteSet::default();
    w.delete(Space::Streams, b"x".to_vec());
    s.commit(w).unwrap();
    s.fail_next_sled_flush();
    for i in 0..MATERIALIZE_FLUSHES {
        put_kv(&s, Space::Streams, "k", &i.to_string());
        s.flush().unwrap();
    }
    let window = s.shared.state().unsynced.expect("the window is unsynced");
    assert_eq!(s.shared.state().phase, Phase::Idle);
    assert!(s.shared.state().frozen.is_none(), "sled holds the layer");
    assert!(
        segments(dir.path()).iter().any(|(w, _)| *w == window),
        "its segment stays while sled may not have it on disk"
    );
    assert_eq!(value(&s, Space::Streams, "x"), None);
    put_kv(&s, Space::Streams, "y", "1");
    s.flush().unwrap();
    assert_eq!(s.shared.state().unsynced, None);
    assert_eq!(
        segments(dir.path()),
        vec![(window + 1, 1)],
        "synced and removed before the next record"
    );
    let s = reopen(dir.path(), s);
    assert_eq!(value(&s, Space::Streams, "x"), None);
    assert_eq!(value(&s, Space::Streams, "y").as_deref(), Some("1"));
}

#[test]
fn a_failed_materialization_is_tried_again_by_the_next_flush() {
    let s = SledStorage::temporary().unwrap();
    for k in 0..10u8 {
        put_kv(&s, Space::Streams, &format!("k{k}"), "v");
    }
    s.fail_next_materialization_before(1);
    assert!(s.materialize_now().is_err());
    assert!(s.log_records() > 0);
    assert_eq!(s.scan_prefix(Space::Streams, b"").unwrap().len(), 10);
    put_kv(&s, Space::Streams, "later", "v");
    s.flush().unwrap();
    s.materialize_now().unwrap();
    assert_eq!(s.log_records(), 0);
    assert_eq!(stored_keys(&s, Space::Streams), 11);
}

#[test]
fn log_records_of_an_earlier_release_in_sled_are_replayed_then_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // what an earlier release left after a crash: a materialized key, and two records in
    // sled (a put, then a patch of it and a delete of the materialized key)
    raw(dir.path(), |tree| {
        tree.insert(prefixed(Space::Streams, b"old"), &b"stored"[..])
            .unwrap();
        let mut first = vec![TAG_PUT];
        field(&mut first, &prefixed(Space::Streams, b"k"));
        field(&mut first, b"abcdefghijklmnop");
        tree.insert(legacy_key(0, 0), first).unwrap();
        let mut second = vec![TAG_PATCH];
        field(&mut second, &prefixed(Space::Streams, b"k"));
        second.extend_from_slice(&2u32.to_be_bytes());
        second.extend_from_slice(&2u32.to_be_bytes());
        field(&mut second, b"XY");
        second.push(TAG_DELETE);
        field(&mut second, &prefixed(Space::Streams, b"old"));
        tree.insert(legacy_key(1, 0), second).unwrap();
        tree.flush().unwrap();
    });
    let s = open_again(dir.path());
    assert_eq!(value(&s, Space::Streams, "k").as_deref(), Some("abXYop"));
    assert_eq!(value(&s, Space::Streams, "old"), None);
    assert_eq!(s.log_records(), 2);
    // a new commit, a crash: both the old records and the new log are replayed, in order
    put_kv(&s, Space::Streams, "new", "1");
    s.flush().unwrap();
    let s = reopen(dir.path(), s);
    assert_eq!(value(&s, Space::Streams, "k").as_deref(), Some("abXYop"));
    assert_eq!(value(&s, Space::Streams, "new").as_deref(), Some("1"));
    s.materialize_now().unwrap();
    drop(s);
    let (records, k, old) = raw(dir.path(), |tree| {
        (
            tree.scan_prefix([LEGACY_LOG_PREFIX]).count(),
            tree.get(prefixed(Space::Streams, b"k")).unwrap(),
            tree.get(prefixed(Space::Streams, b"old")).unwrap(),
        )
    });
    assert_eq!(
        (records, k.as_deref(), old),
        (0, Some(&b"abXYop"[..]), None)
    );
}

fn field(out: &mut Vec<u8>, f: &[u8]) {
    out.extend_from_slice(&(f.len() as u32).to_be_bytes());
    out.extend_from_slice(f);
}

fn legacy_key(record: u64, part: u32) -> Vec<u8> {
    let mut k = vec![LEGACY_LOG_PREFIX];
    k.extend_from_slice(&record.to_be_bytes());
    k.extend_from_slice(&part.to_be_bytes());
    k
}

#[test]
fn readers_see_the_same_while_flushes_materialize() {
    let s = Arc::new(SledStorage::temporary().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (s, stop) = (Arc::clone(&s), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // the writer keeps every call's text a run of one letter, and the keys'
                // values equal to their names: any mix-up of layers shows
                for c in 0..4u32 {
                    let t: Vec<u8> = s
                        .scan_prefix(Space::Args, &crate::keys::args_prefix(MSG, c))
                        .unwrap()
                        .into_iter()
                        .flat_map(|(_, v)| v)
                        .collect();
                    assert!(t.iter().all(|b| *b == b'a' + c as u8), "call {c}: {t:?}");
                }
                for (k, v) in s.scan_prefix(Space::Streams, b"").unwrap() {
                    assert_eq!(k, v);
                }
                reads += 1;
            }
            reads
        })
    };
    let mut next = [0u32; 4];
    for i in 0..3_000u32 {
        let c = i % 4;
        let mut w = WriteSet::default();
        w.put(
            Space::Args,
            args_piece(MSG, c, next[c as usize]),
            vec![b'a' + c as u8; 1 + (i % 7) as usize],
        );
        next[c as usize] += 1;
        let k = format!("k{}", i % 50).into_bytes();
        w.put(Space::Streams, k.clone(), k);
        s.commit(w).unwrap();
        if i % 5 == 0 {
            s.flush().unwrap();
        }
    }
    stop.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
}

/// One step of [`the_flush_log_keeps_what_was_flushed_through_crashes_and_materializations`].
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    /// Rewrites a key's value (48 bytes when it had fewer) with one byte changed at a
    /// position, or one byte inserted (`true`), or one removed: logged as a patch.
    Edit(u8, u8, u8, Option<bool>),
    Delete(u8),
    /// A row put and (with `true`) removed at once, as the relay does with outbox rows.
    Row(u8, bool),
    Piece(u8, u8),
    BigPiece(u8, u8),
    Replace(u8),
    Flush,
    Materialize,
    Crash,
    /// A crash before this batch of a materialization.
    CrashMaterializing(usize),
    /// Waits for a running materialization, if one runs (none should, after a flush).
    Settle,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..6, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        4 => (0u8..6, any::<u8>(), any::<u8>(), any::<Option<bool>>())
            .prop_map(|(k, at, v, grow)| Op::Edit(k, at, v, grow)),
        1 => (0u8..6).prop_map(Op::Delete),
        2 => (0u8..8, any::<bool>()).prop_map(|(k, gone)| Op::Row(k, gone)),
        4 => (0u8..3, any::<u8>()).prop_map(|(c, v)| Op::Piece(c, v)),
        1 => (0u8..3, any::<u8>()).prop_map(|(c, v)| Op::BigPiece(c, v)),
        1 => (0u8..3).prop_map(Op::Replace),
        6 => Just(Op::Flush),
        1 => Just(Op::Materialize),
        1 => Just(Op::Crash),
        1 => (0usize..4).prop_map(Op::CrashMaterializing),
        1 => Just(Op::Settle),
    ]
}

/// What the storage reads: plain keys, outbox rows and each call's text.
type Model = (
    BTreeMap<u8, Vec<u8>>,
    BTreeMap<u8, Vec<u8>>,
    BTreeMap<u8, Vec<u8>>,
);

fn read(s: &SledStorage) -> Model {
    let plain = s
        .scan_prefix(Space::Streams, b"")
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k[0], v))
        .collect();
    let rows = s
        .scan_prefix(Space::Outbox, b"")
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
    (plain, rows, calls)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
    /// Puts, patches, deletes, rows put and removed, argument appends and replaces, with
    /// flushes, materializations (whole, and stopped between batches) and
    /// crashes in between: after every crash the storage reads exactly what the last flush
    /// before it held; a materialization changes nothing a reader sees.
    #[test]
    fn the_flush_log_keeps_what_was_flushed_through_crashes_and_materializations(
        ops in proptest::collection::vec(op(), 1..400)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_again(dir.path());
        let mut live: Model = Default::default();
        let mut flushed: Model = Default::default();
        // next piece number per call (piece numbers only grow until a replace)
        let mut next = [0u32; 3];
        for op in ops {
            match op {
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
                Op::Row(k, gone) => {
                    let mut w = WriteSet::default();
                    w.put(Space::Outbox, vec![k], vec![k; 20]);
                    s.commit(w).unwrap();
                    live.1.insert(k, vec![k; 20]);
                    if gone {
                        proptest::prop_assert!(s.remove(Space::Outbox, &[k]).unwrap());
                        live.1.remove(&k);
                    }
                }
                Op::Piece(c, v) | Op::BigPiece(c, v) => {
                    let len = match op {
                        Op::BigPiece(..) => EXTEND_STORED_MAX / 2 + 1,
                        _ => 3,
                    };
                    let n = next[usize::from(c)];
                    let mut w = WriteSet::default();
                    w.put(Space::Args, args_piece(MSG, u32::from(c), n), vec![v; len]);
                    s.commit(w).unwrap();
                    next[usize::from(c)] = n + 1;
                    live.2.entry(c).or_default().extend(vec![v; len]);
                }
                Op::Replace(c) => {
                    let mut w = WriteSet::default();
                    for n in 0..next[usize::from(c)] {
                        w.delete(Space::Args, args_piece(MSG, u32::from(c), n));
                    }
                    w.put(Space::Args, args_piece(MSG, u32::from(c), 0), b"R".to_vec());
                    s.commit(w).unwrap();
                    next[usize::from(c)] = 1;
                    live.2.insert(c, b"R".to_vec());
                }
                Op::Flush => {
                    s.flush().unwrap();
                    flushed = live.clone();
                }
                Op::Materialize => {
                    s.materialize_now().unwrap();
                    flushed = live.clone();
                }
                Op::Settle => settled_background(&s),
                Op::Crash | Op::CrashMaterializing(_) => {
                    if let Op::CrashMaterializing(before) = op {
                        s.fail_next_materialization_before(before);
                        // stops before that batch, or before the last when there are fewer;
                        // everything was flushed to the log first
                        let _ = s.materialize_now();
                        flushed = live.clone();
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
        // settled, nothing is left in the log, and sled alone holds what was read
        s.settle().unwrap();
        proptest::prop_assert!(segments(dir.path()).is_empty());
        proptest::prop_assert_eq!(s.log_records(), 0);
        s.discard_unflushed();
        proptest::prop_assert_eq!(read(&s), live);
    }
}
