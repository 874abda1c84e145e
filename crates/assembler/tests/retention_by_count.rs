//! Retention by count (`retention_max_messages`, issue 8: memory bounded by configuration, not
//! by the history producers send): past the bound the oldest completed messages are deleted
//! early through the same path as `retention_ms` (state, argument pieces, call-id index; stream
//! tombstones left), the newest kept exactly; tombstones are bounded by the same number; the
//! counts survive a reopen and a checkpoint rebuild; a redelivered chunk of a message deleted
//! by count is a duplicate while its tombstone exists (and opens a new stream once it is gone,
//! the documented trade-off); `0` deletes nothing by count. On a real sled store; `retention_ms`
//! stays at its 7-day default and the clock never gets near it.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::storage::sled_backend::SledStorage;
use assembler::storage::{Space, Storage};
use assembler::store::Retained;
use assembler::{keys, Applied, Config, Store};
use chunk_model::CallStatus;
use common::{chunk, oa_delta, oa_finish};
use std::path::Path;
use std::sync::Arc;

const CONV: &str = "c1";

fn config(cap: usize) -> Config {
    Config {
        retention_max_messages: cap,
        ..Config::default()
    }
}

/// A store on sled at `path`, with the storage handle kept to look at keys.
fn open(path: &Path, cap: usize) -> (Store, Arc<SledStorage>) {
    let mut last = None;
    for _ in 0..200 {
        // a just-dropped handle may hold the file lock for a moment
        match SledStorage::open(path) {
            Ok(storage) => {
                let storage = Arc::new(storage);
                let store =
                    Store::with_storage(storage.clone() as Arc<dyn Storage>, config(cap)).unwrap();
                return (store, storage);
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot open {}: {last:?}", path.display());
}

fn msg(i: usize) -> String {
    format!("m{i}")
}

/// The argument text of message `m<i>`'s one call.
fn text(i: usize) -> String {
    format!("{{\"q\":\"x{i}\"}}")
}

/// The chunks of message `m<i>`: one call `call_m<i>`, complete after the last.
fn bodies(i: usize) -> Vec<Vec<u8>> {
    let t = text(i);
    let (a, b) = t.split_at(4);
    vec![
        oa_delta(0, Some(&format!("call_m{i}")), Some("lookup"), a),
        oa_delta(0, None, None, b),
        oa_finish("tool_calls"),
        b"[DONE]".to_vec(),
    ]
}

/// Applies every chunk of message `m<i>` at `now`; it completes at `now`.
fn complete(store: &Store, i: usize, now: u64) {
    let m = msg(i);
    for (seq, body) in bodies(i).iter().enumerate() {
        let applied = store
            .apply(&chunk(CONV, &m, seq as u64, body), now)
            .unwrap();
        assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    }
    // its tool answered (the count bound passes over a message still awaiting a result)
    let result = format!("{{\"tool_call_id\":\"call_m{i}\",\"output\":\"ok\"}}");
    let applied = store
        .apply(&common::result(CONV, &m, 0, result.as_bytes()), now)
        .unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    store.flush().unwrap();
}

/// When message `m<i>` completes (publish times grow with the message number).
fn at(i: usize) -> u64 {
    1_000 + 10 * i as u64
}

/// Completes messages `range`, message `i` at [`at`]`(i)`.
fn complete_all(store: &Store, range: std::ops::Range<usize>) {
    for i in range {
        complete(store, i, at(i));
    }
}

/// Ticks until a tick changes nothing (each tick's new tombstones are seen by the next).
fn settle(store: &Store, now: u64) {
    for _ in 0..10 {
        let before = store.retained();
        store.tick(now).unwrap();
        store.flush().unwrap();
        if store.retained() == before {
            return;
        }
    }
    panic!("retention did not settle: {:?}", store.retained());
}

/// Whether message `m<i>` is stored whole: its snapshot has its one call completed with
/// exactly its text.
fn kept_exactly(store: &Store, i: usize) -> bool {
    let Some(snap) = store.message_snapshot(CONV, &msg(i)).unwrap() else {
        return false;
    };
    assert_eq!(snap.calls.len(), 1, "m{i}");
    assert_eq!(snap.calls[0].status, CallStatus::Completed, "m{i}");
    assert_eq!(snap.calls[0].tool_call.raw_arguments, text(i), "m{i}");
    true
}

/// Whether the call-id index holds message `m<i>`'s call.
fn indexed(storage: &SledStorage, i: usize) -> bool {
    let key = keys::result(keys::ResultTag::CallIndex, CONV, &format!("call_m{i}"));
    storage.get(Space::Results, &key).unwrap().is_some()
}

/// Whether message `m<i>`'s state, argument pieces and call-id index entry are all gone.
fn deleted(storage: &SledStorage, store: &Store, i: usize) -> bool {
    let mkey = keys::message(CONV, &msg(i));
    store.message_snapshot(CONV, &msg(i)).unwrap().is_none()
        && storage.get(Space::Messages, &mkey).unwrap().is_none()
        && storage.scan_prefix(Space::Args, &mkey).unwrap().is_empty()
        && !indexed(storage, i)
}

/// Whether message `m<i>`'s chunk stream record (a tombstone once deleted) is stored.
fn has_stream_record(storage: &SledStorage, i: usize) -> bool {
    let skey = keys::stream(assembler::InputKind::Chunk, CONV, &msg(i));
    storage.get(Space::Streams, &skey).unwrap().is_some()
}

fn retained(messages: usize, tombstones: usize) -> Option<Retained> {
    Some(Retained {
        messages,
        tombstones,
    })
}

#[test]
fn completing_more_messages_than_the_cap_deletes_the_oldest_and_keeps_the_newest_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(&dir.path().join("db"), 3);
    complete_all(&store, 0..8);
    assert_eq!(
        store.retained(),
        retained(8, 0),
        "nothing deleted before a tick"
    );
    for i in 0..8 {
        assert!(kept_exactly(&store, i), "m{i} kept until a tick");
    }
    settle(&store, at(7));
    for i in 0..5 {
        assert!(deleted(&storage, &store, i), "m{i} (oldest) deleted");
    }
    for i in 5..8 {
        assert!(kept_exactly(&store, i), "m{i} (newest) kept whole");
        assert!(indexed(&storage, i), "m{i}'s call stays indexed");
    }
    assert_eq!(store.retained(), retained(3, 3));
    // deleting by count leaves the same stream tombstones as retention by time; the two
    // oldest tombstones went over the cap and were dropped
    assert!(!has_stream_record(&storage, 0) && !has_stream_record(&storage, 1));
    for i in 2..8 {
        assert!(has_stream_record(&storage, i), "m{i}'s stream record");
    }
    assert_eq!(
        storage.count(Space::Done).unwrap(),
        6,
        "3 messages + 3 tombstones"
    );
    assert_eq!(store.open_streams(), 0);
}

#[test]
fn tombstones_stay_bounded_by_the_cap_under_churn() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(&dir.path().join("db"), 5);
    // ticks between completions, as the worker runs them: counts never exceed the
    // documented transient bound, and once settled they are exactly at the cap
    for round in 0..20 {
        complete_all(&store, round * 7..(round + 1) * 7);
        let now = at((round + 1) * 7 - 1);
        store.tick(now).unwrap();
        let r = store.retained().unwrap();
        assert!(
            r.messages <= 5 + 7 && r.tombstones <= 2 * 5,
            "{round}: {r:?}"
        );
        settle(&store, now);
        let deleted_so_far = (round + 1) * 7 - 5;
        assert_eq!(
            store.retained(),
            retained(5, deleted_so_far.min(5)),
            "round {round}"
        );
    }
    for i in 135..140 {
        assert!(kept_exactly(&store, i), "m{i}");
    }
    assert!((0..135).all(|i| deleted(&storage, &store, i)));
    // the chunk and result streams of 5 kept messages + their 5 pairs of tombstones: nothing
    // else is left of 135 deleted messages
    assert_eq!(storage.count(Space::Streams).unwrap(), 20);
    assert_eq!(storage.count(Space::Messages).unwrap(), 5);
    assert_eq!(storage.count(Space::Done).unwrap(), 10);
}

#[test]
fn counts_survive_a_reopen_and_the_bound_goes_on_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (store, storage) = open(&path, 3);
    complete_all(&store, 0..5);
    settle(&store, at(4));
    assert_eq!(store.retained(), retained(3, 2));
    drop((store, storage));

    let (store, storage) = open(&path, 3);
    assert_eq!(
        store.retained(),
        retained(3, 2),
        "read back from the index at open"
    );
    complete(&store, 5, at(5));
    assert_eq!(store.retained(), retained(4, 2));
    settle(&store, at(5));
    assert_eq!(store.retained(), retained(3, 3));
    assert!(
        deleted(&storage, &store, 2),
        "the oldest kept one goes next"
    );
    for i in 3..6 {
        assert!(kept_exactly(&store, i), "m{i}");
    }
    drop((store, storage));

    // the same store opened with the bound off counts nothing and deletes nothing
    let (store, _storage) = open(&path, 0);
    assert_eq!(store.retained(), None);
    complete(&store, 6, at(6));
    store.tick(at(6)).unwrap();
    for i in 3..7 {
        assert!(kept_exactly(&store, i), "m{i}");
    }
}

#[test]
fn a_store_rebuilt_from_a_checkpoint_counts_what_the_checkpoint_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _storage) = open(&dir.path().join("a"), 3);
    complete_all(&store, 0..6);
    settle(&store, at(5));
    assert_eq!(store.retained(), retained(3, 3));
    let file = dir.path().join("ckpt");
    store.export_checkpoint(&file).unwrap();

    let (rebuilt, _) = Store::import_checkpoint(&file, &dir.path().join("b"), config(3)).unwrap();
    assert_eq!(rebuilt.retained(), retained(3, 3));
    complete(&rebuilt, 6, at(6));
    settle(&rebuilt, at(6));
    assert_eq!(rebuilt.retained(), retained(3, 3));
    assert!(rebuilt.message_snapshot(CONV, "m3").unwrap().is_none());
    for i in 4..7 {
        assert!(kept_exactly(&rebuilt, i), "m{i}");
    }
}

#[test]
fn a_redelivered_chunk_of_a_message_deleted_by_count_is_a_duplicate_while_its_tombstone_exists() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(&dir.path().join("db"), 2);
    complete_all(&store, 0..4);
    settle(&store, at(3));
    assert_eq!(store.retained(), retained(2, 2));
    assert!(deleted(&storage, &store, 0) && has_stream_record(&storage, 0));
    store.flush().unwrap();
    let rows = store.outbox_len();
    for (seq, body) in bodies(0).iter().enumerate() {
        let applied = store
            .apply(&chunk(CONV, "m0", seq as u64, body), at(3) + 1)
            .unwrap();
        assert_eq!(applied, Applied::Duplicate, "seq {seq}");
    }
    assert_eq!(store.outbox_len(), rows, "no event, no dead letter");
    assert_eq!(store.open_streams(), 0);
    assert!(store.message_snapshot(CONV, "m0").unwrap().is_none());

    // two more completions: m2 and m3 are deleted, and m0's and m1's tombstones go over the
    // cap and are dropped
    complete_all(&store, 4..6);
    settle(&store, at(5));
    assert!(!has_stream_record(&storage, 0));
    // the documented trade-off: with its tombstone gone, m0's first chunk is a new stream
    let first = &bodies(0)[0];
    let applied = store
        .apply(&chunk(CONV, "m0", 0, first), at(5) + 1)
        .unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    assert_eq!(store.open_streams(), 1);
}

#[test]
fn with_the_cap_zero_nothing_is_deleted_by_count() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(&dir.path().join("db"), 0);
    complete_all(&store, 0..30);
    for t in [at(29), at(29) + 1_000, at(29) + 60_000] {
        store.tick(t).unwrap();
    }
    assert_eq!(store.retained(), None, "nothing counted");
    for i in 0..30 {
        assert!(kept_exactly(&store, i), "m{i}");
    }
    assert_eq!(storage.count(Space::Done).unwrap(), 30);
}

#[test]
fn the_default_cap_is_on_and_time_retention_still_deletes_below_it() {
    assert!(Config::default().retention_max_messages > 0);
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(
        &dir.path().join("db"),
        Config::default().retention_max_messages,
    );
    complete_all(&store, 0..3);
    let r = Config::default().retention_ms;
    store.tick(at(0) + r).unwrap();
    assert!(deleted(&storage, &store, 0), "due by time");
    assert!(kept_exactly(&store, 1) && kept_exactly(&store, 2));
    assert_eq!(store.retained(), retained(2, 1));
}

#[test]
fn a_message_awaiting_its_result_is_still_deleted_retention_ms_after_completion_while_over_the_cap()
{
    // Over the bound, messages whose tool is still running go last: the answered ones are
    // deleted, and those still running are queued again behind the newest, on every tick the
    // store is over the bound. Their retention_ms must still count from their completion, or a
    // result that never comes would keep them forever.
    const R: u64 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("db"),
        Config {
            retention_ms: R,
            ..config(2)
        },
    )
    .unwrap();
    for i in 0..2 {
        let m = msg(i);
        for (seq, body) in bodies(i).iter().enumerate() {
            let applied = store
                .apply(&chunk(CONV, &m, seq as u64, body), 1_000)
                .unwrap();
            assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
        }
    }
    // an answered message completes every second, keeping the store over the bound
    let (mut now, mut next) = (2_000, 2);
    while now < 1_000 + R {
        complete(&store, next, now);
        store.tick(now).unwrap();
        assert_eq!(store.retained().map(|r| r.messages), Some(2));
        assert!(
            !kept_exactly(&store, next),
            "m{next}: answered, so deleted first"
        );
        now += 1_000;
        next += 1;
    }
    for i in 0..2 {
        assert!(kept_exactly(&store, i), "m{i}: its tool is still running");
    }
    store.tick(1_000 + R).unwrap();
    for i in 0..2 {
        assert!(
            store.message_snapshot(CONV, &msg(i)).unwrap().is_none(),
            "m{i}: retention_ms after its completion"
        );
    }
}

#[test]
fn the_bound_holds_when_no_tool_ever_answers() {
    // Producers that never send results: every message is still awaiting one. The oldest go
    // anyway once no answered message is left to delete; memory stays bounded.
    let dir = tempfile::tempdir().unwrap();
    let (store, _storage) = open(&dir.path().join("db"), 3);
    for i in 0..10 {
        let m = msg(i);
        for (seq, body) in bodies(i).iter().enumerate() {
            let applied = store
                .apply(&chunk(CONV, &m, seq as u64, body), at(i))
                .unwrap();
            assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
        }
        store.tick(at(i)).unwrap();
    }
    settle(&store, at(9));
    assert_eq!(store.retained().map(|r| r.messages), Some(3));
    assert!((0..7).all(|i| store.message_snapshot(CONV, &msg(i)).unwrap().is_none()));
    assert!(
        (7..10).all(|i| kept_exactly(&store, i)),
        "the newest are kept"
    );
}
