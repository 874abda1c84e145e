//! The count bound (`retention_max_messages`) deletes a message whose calls still await their
//! results last: an agent's tool may run for minutes or hours, and deleting its message early
//! would turn the result, when it comes, into `tool_result.orphaned`. Messages behind
//! it are still deleted by count, and the bound holds when no answered message is left to delete
//! (`the_bound_holds_when_no_tool_ever_answers` in `retention_by_count.rs`).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Config, Store};
use common::{chunk, oa_delta, oa_finish, result};

const CONV: &str = "c1";
const CAP: usize = 4;

fn store(retention_ms: u64) -> Store {
    Store::open_memory(Config {
        retention_max_messages: CAP,
        retention_ms,
        ..Config::default()
    })
    .unwrap()
}

/// Completes message `m<i>` (one call `call_m<i>`) at `now`.
fn complete(store: &Store, i: usize, now: u64) {
    let m = format!("m{i}");
    let bodies = [
        oa_delta(0, Some(&format!("call_m{i}")), Some("run"), "{\"x\":"),
        oa_delta(0, None, None, "1}"),
        oa_finish("tool_calls"),
        b"[DONE]".to_vec(),
    ];
    for (seq, body) in bodies.iter().enumerate() {
        let applied = store
            .apply(&chunk(CONV, &m, seq as u64, body), now)
            .unwrap();
        assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    }
}

/// The result of `m<i>`'s call arrives at `now`.
fn answer(store: &Store, i: usize, now: u64) {
    let body = format!("{{\"tool_call_id\":\"call_m{i}\",\"output\":\"done\"}}");
    let m = format!("m{i}");
    let applied = store
        .apply(&result(CONV, &m, 0, body.as_bytes()), now)
        .unwrap();
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
}

fn kept(store: &Store, i: usize) -> bool {
    store
        .message_snapshot(CONV, &format!("m{i}"))
        .unwrap()
        .is_some()
}

fn tick(store: &Store, now: u64) {
    for _ in 0..4 {
        store.tick(now).unwrap();
        store.flush().unwrap();
    }
}

#[test]
fn the_count_bound_passes_over_messages_whose_tools_are_still_running() {
    let store = store(7 * 24 * 3_600_000);
    // m0 and m1 wait for their tools; m2..m5 were answered
    for i in 0..6 {
        complete(&store, i, 1_000 + i as u64);
        if i >= 2 {
            answer(&store, i, 1_000 + i as u64);
        }
    }
    tick(&store, 2_000);
    assert!(kept(&store, 0) && kept(&store, 1), "still awaiting results");
    assert!(
        !kept(&store, 2) && !kept(&store, 3),
        "the oldest answered ones go"
    );
    assert!(kept(&store, 4) && kept(&store, 5), "the newest are kept");

    // m0's tool answers: its result matches its call (not orphaned)
    answer(&store, 0, 3_000);
    let snap = store.message_snapshot(CONV, "m0").unwrap().unwrap();
    assert_eq!(snap.tool_results.len(), 1, "{snap:?}");
    assert!(snap.orphaned_results.is_empty(), "{snap:?}");
    // more messages: the bound goes on, m0 (answered now, the oldest) goes first, m1 is
    // passed over again
    for i in 6..10 {
        complete(&store, i, 3_000 + i as u64);
        answer(&store, i, 3_000 + i as u64);
        tick(&store, 3_000 + i as u64);
    }
    assert!(!kept(&store, 0), "answered, then deleted by count");
    assert!(kept(&store, 1), "still awaiting");
    assert!(!kept(&store, 4) && !kept(&store, 5) && !kept(&store, 6));
    assert!((7..10).all(|i| kept(&store, i)));
}

#[test]
fn retention_by_time_deletes_a_message_still_awaiting_results() {
    let store = store(60_000);
    for i in 0..4 {
        complete(&store, i, 1_000 + i as u64);
    }
    tick(&store, 2_000);
    assert!((0..4).all(|i| kept(&store, i)), "all four await results");
    tick(&store, 2_000 + 60_000);
    assert!(
        (0..4).all(|i| !kept(&store, i)),
        "retention_ms deletes them"
    );
}
