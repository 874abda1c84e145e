//! Retention of completed messages: deleted `retention_ms` after `message.completed` and not
//! before, from every keyspace but the outbox; open messages never; bounded work per tick;
//! across a restart; redelivered chunks of a deleted message stay duplicates; a late result
//! becomes an orphan; `retention_ms = 0` keeps everything. Time is the `now_ms` value.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::storage::memory::MemoryStorage;
use assembler::storage::{Space, Storage};
use assembler::store::EXPIRE_PER_TICK;
use assembler::{Applied, Config, Store};
use common::{chunk, oa_delta, oa_finish, result, types};
use std::sync::Arc;

const R: u64 = 10_000;
const GRACE: u64 = 3_000;

fn config() -> Config {
    Config {
        retention_ms: R,
        orphan_grace_ms: GRACE,
        // Open messages must stay open however far the clock runs in these tests.
        idle_timeout_ms: u64::MAX / 4,
        ..Config::default()
    }
}

fn memory(config: Config) -> (Store, Arc<MemoryStorage>) {
    let storage = Arc::new(MemoryStorage::new());
    let store = Store::with_storage(storage.clone(), config).unwrap();
    (store, storage)
}

/// The chunks of a message with one call `call_<msg>`, complete when all are applied.
fn one_call(msg: &str) -> Vec<Vec<u8>> {
    vec![
        oa_delta(0, Some(&format!("call_{msg}")), Some("lookup"), "{\"q\":"),
        oa_delta(0, None, None, "\"x\"}"),
        oa_finish("tool_calls"),
        b"[DONE]".to_vec(),
    ]
}

/// Applies every chunk of `one_call(msg)` at `now`; the message completes at `now`.
fn complete(store: &Store, conv: &str, msg: &str, now: u64) {
    for (seq, body) in one_call(msg).iter().enumerate() {
        let applied = store
            .apply(&chunk(conv, msg, seq as u64, body), now)
            .unwrap();
        assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    }
}

/// Every key of `space` that mentions `needle`.
fn keys_naming(storage: &MemoryStorage, space: Space, needle: &str) -> Vec<Vec<u8>> {
    storage
        .scan_prefix(space, b"")
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.windows(needle.len()).any(|w| w == needle.as_bytes()))
        .collect()
}

#[test]
fn a_completed_message_is_gone_after_retention_and_not_before() {
    let (store, _) = memory(config());
    complete(&store, "c1", "m1", 1_000);
    complete(&store, "c1", "m2", 5_000);
    assert_eq!(
        store
            .message_snapshot("c1", "m1")
            .unwrap()
            .unwrap()
            .calls
            .len(),
        1
    );

    store.tick(1_000 + R - 1).unwrap();
    assert!(store.message_snapshot("c1", "m1").unwrap().is_some());
    assert_eq!(store.conversation("c1").unwrap().len(), 2);

    store.tick(1_000 + R).unwrap();
    assert!(store.message_snapshot("c1", "m1").unwrap().is_none());
    let left: Vec<String> = store
        .conversation("c1")
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(left, ["m2"], "the younger message stays");

    store.tick(5_000 + R).unwrap();
    assert!(store.conversation("c1").unwrap().is_empty());
}

#[test]
fn an_expired_message_leaves_no_key_in_any_keyspace_but_the_outbox() {
    let (store, storage) = memory(config());
    complete(&store, "conv-r", "msg-gone", 1_000);
    // A matched result: a resolved call-index entry and a result on the message.
    let body = br#"{"tool_call_id":"call_msg-gone","output":"42"}"#;
    let applied = store
        .apply(&result("conv-r", "msg-gone", 0, body), 1_500)
        .unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    // A chunk parked ahead of a gap after completion (seq 9, next is 4).
    let applied = store
        .apply(&chunk("conv-r", "msg-gone", 9, &oa_finish("stop")), 1_600)
        .unwrap();
    assert_eq!(applied, Applied::Parked);
    let snap = store
        .message_snapshot("conv-r", "msg-gone")
        .unwrap()
        .unwrap();
    assert_eq!(snap.tool_results.len(), 1);
    for space in [
        Space::Messages,
        Space::Args,
        Space::Parked,
        Space::Live,
        Space::Results,
        Space::Streams,
        Space::Done,
    ] {
        assert!(
            !keys_naming(&storage, space, "msg-gone").is_empty(),
            "{space:?} should hold the message before expiry"
        );
    }
    let outbox_before = storage.count(Space::Outbox).unwrap();
    assert!(outbox_before > 0);

    // Keep the gap timer out of the way: the parked chunk is discarded by expiry itself.
    store.tick(1_000 + R).unwrap();
    for space in [
        Space::Messages,
        Space::Args,
        Space::Parked,
        Space::Live,
        Space::Results,
    ] {
        assert_eq!(
            keys_naming(&storage, space, "msg-gone"),
            Vec::<Vec<u8>>::new(),
            "{space:?} still names the expired message"
        );
    }
    // What remains: stream tombstones (watermark only) and their retention entry.
    assert_eq!(keys_naming(&storage, Space::Streams, "msg-gone").len(), 2);
    assert_eq!(keys_naming(&storage, Space::Done, "msg-gone").len(), 1);
    assert_eq!(storage.count(Space::Outbox).unwrap(), outbox_before);

    // One more retention period drops the tombstones too.
    store.tick(1_000 + 2 * R).unwrap();
    for space in Space::ALL {
        if space == Space::Outbox {
            continue;
        }
        assert_eq!(
            keys_naming(&storage, space, "msg-gone"),
            Vec::<Vec<u8>>::new(),
            "{space:?} still names the expired message"
        );
    }
    assert_eq!(storage.count(Space::Outbox).unwrap(), outbox_before);
}

#[test]
fn open_messages_are_never_expired() {
    let (store, _) = memory(config());
    let body = oa_delta(0, Some("call_open"), Some("lookup"), "{\"q\":");
    let applied = store.apply(&chunk("c1", "open", 0, &body), 1_000).unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    complete(&store, "c1", "done", 1_000);
    store.tick(1_000 + 100 * R).unwrap();
    assert!(store.message_snapshot("c1", "done").unwrap().is_none());
    let open = store.message_snapshot("c1", "open").unwrap().unwrap();
    assert_eq!(open.calls.len(), 1);
    assert_eq!(store.open_streams(), 1);
}

#[test]
fn retention_clock_starts_when_an_idle_message_is_abandoned_not_when_it_began() {
    let (store, _) = memory(Config {
        idle_timeout_ms: 2_000,
        ..config()
    });
    let body = oa_delta(0, Some("call_idle"), Some("lookup"), "{\"q\":");
    let applied = store.apply(&chunk("c1", "idle", 0, &body), 0).unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    store.tick(50_000).unwrap(); // abandoned (and completed) at 50,000
    assert!(store.message_snapshot("c1", "idle").unwrap().is_some());
    store.tick(50_000 + R - 1).unwrap();
    assert!(store.message_snapshot("c1", "idle").unwrap().is_some());
    store.tick(50_000 + R).unwrap();
    assert!(store.message_snapshot("c1", "idle").unwrap().is_none());
}

#[test]
fn one_tick_expires_at_most_expire_per_tick_messages() {
    let (store, _) = memory(config());
    let n = EXPIRE_PER_TICK + 7;
    for i in 0..n {
        complete(&store, "c1", &format!("m{i}"), 1_000);
    }
    assert_eq!(store.conversation("c1").unwrap().len(), n);
    store.tick(1_000 + R).unwrap();
    let left = store.conversation("c1").unwrap();
    assert_eq!(left.len(), 7, "the oldest EXPIRE_PER_TICK go first");
    store.tick(1_000 + R).unwrap();
    assert!(store.conversation("c1").unwrap().is_empty());
}

#[test]
fn a_restart_between_completion_and_expiry_still_expires_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path, config()).unwrap();
        complete(&store, "c1", "m1", 1_000);
        store.flush().unwrap();
    }
    {
        let store = common::reopen(&path, config());
        store.tick(1_000 + R - 1).unwrap();
        assert!(store.message_snapshot("c1", "m1").unwrap().is_some());
        store.tick(1_000 + R).unwrap();
        assert!(store.message_snapshot("c1", "m1").unwrap().is_none());
        store.flush().unwrap();
    }
    let store = common::reopen(&path, config());
    assert!(store.message_snapshot("c1", "m1").unwrap().is_none());
    assert!(store.conversation("c1").unwrap().is_empty());
    assert_eq!(store.open_streams(), 0);
}

#[test]
fn retention_zero_keeps_everything() {
    let (store, storage) = memory(Config {
        retention_ms: 0,
        ..config()
    });
    complete(&store, "c1", "m1", 1_000);
    let before: Vec<_> = Space::ALL
        .iter()
        .map(|s| storage.scan_prefix(*s, b"").unwrap())
        .collect();
    store.tick(u64::MAX / 2).unwrap();
    let after: Vec<_> = Space::ALL
        .iter()
        .map(|s| storage.scan_prefix(*s, b"").unwrap())
        .collect();
    assert_eq!(before, after);
    assert!(store.message_snapshot("c1", "m1").unwrap().is_some());
}

#[test]
fn a_redelivered_chunk_of_an_expired_message_is_a_duplicate_not_a_new_stream() {
    let (store, _) = memory(config());
    complete(&store, "c1", "m1", 1_000);
    store.tick(1_000 + R).unwrap();
    let rows = store.outbox_len();
    for (seq, body) in one_call("m1").iter().enumerate() {
        let applied = store
            .apply(&chunk("c1", "m1", seq as u64, body), 1_000 + R + 1)
            .unwrap();
        assert_eq!(applied, Applied::Duplicate, "seq {seq}");
    }
    // Past the watermark: the tombstone is closed; the chunk is a dead letter, not an event
    // and not silently dropped.
    let late = oa_delta(1, Some("call_late"), Some("lookup"), "{}");
    let applied = store
        .apply(&chunk("c1", "m1", 4, &late), 1_000 + R + 2)
        .unwrap();
    assert!(
        matches!(&applied, Applied::DeadLettered { reason } if reason.starts_with("stream_closed")),
        "{applied:?}"
    );
    assert_eq!(store.open_streams(), 0);
    assert!(store.message_snapshot("c1", "m1").unwrap().is_none());
    assert_eq!(store.outbox_len(), rows + 1, "one dead letter, no event");
}

#[test]
fn a_result_for_a_call_of_an_expired_message_becomes_an_orphan_after_grace() {
    let (store, _) = memory(config());
    complete(&store, "c1", "m1", 1_000);
    let t = 1_000 + R;
    store.tick(t).unwrap();
    let body = br#"{"tool_call_id":"call_m1","output":"late"}"#;
    let applied = store.apply(&result("c1", "m2", 0, body), t).unwrap();
    assert_eq!(applied, Applied::Accepted { events: 0 });
    store.tick(t + GRACE - 1).unwrap();
    assert!(!types(&store).contains(&"tool_result.orphaned"));
    store.tick(t + GRACE).unwrap();
    let types = types(&store);
    assert_eq!(types.last(), Some(&"tool_result.orphaned"), "{types:?}");
    assert!(!types.contains(&"tool_result.completed"));
}
