//! The argument text of open calls lives in the store, not in memory (issue 8): the cache
//! lets go of it after every commit and reads it back when a step needs it (an end, a name
//! arriving, the argument limit, a timeout) or a snapshot shows it. These tests stream calls
//! over many commits and check that every event and snapshot still carries the whole text,
//! including pieces staged by the same commit that ends the call, and across a restart.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Config, Control, Store, StoreError};
use chunk_model::{CallStatus, Event, EventType, MessageStatus};
use common::*;
use serde_json::json;

/// The input was applied (not dead-lettered).
fn ok(r: Result<Applied, StoreError>) {
    let applied = r.unwrap();
    assert!(
        !matches!(applied, Applied::DeadLettered { .. }),
        "{applied:?}"
    );
}

fn store() -> Store {
    Store::open_temporary(Config::default()).unwrap()
}

/// The text `{"q":"<n x's>"}` in fragments of 7 bytes.
fn fragments(n: usize) -> (String, Vec<String>) {
    let text = format!("{{\"q\":\"{}\"}}", "x".repeat(n));
    let parts = text
        .as_bytes()
        .chunks(7)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    (text, parts)
}

fn call_events(store: &Store, ty: EventType) -> Vec<Event> {
    events(store)
        .into_iter()
        .filter(|e| e.event_type == ty)
        .collect()
}

fn raw(ev: &Event) -> &str {
    &ev.tool_call.as_ref().unwrap().raw_arguments
}

#[test]
fn a_call_completes_with_its_whole_text_after_its_pieces_were_evicted() {
    let s = store();
    let (text, parts) = fragments(500);
    let mut seq = 0;
    let mut apply = |body: &[u8]| {
        ok(s.apply(&chunk("c", "m", seq, body), 0));
        seq += 1;
    };
    apply(&oa_delta(0, Some("call_a"), Some("lookup"), ""));
    for (i, p) in parts.iter().enumerate() {
        apply(&oa_delta(0, None, None, p));
        if i % 5 == 0 {
            s.flush().unwrap();
        }
    }
    apply(&oa_finish("tool_calls"));
    let done = call_events(&s, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1);
    assert_eq!(raw(&done[0]), text);
    assert_eq!(
        done[0].tool_call.as_ref().unwrap().arguments,
        json!({"q": "x".repeat(500)})
    );
    let completed = call_events(&s, EventType::MessageCompleted);
    assert_eq!(
        completed[0].calls.as_ref().unwrap()[0]
            .tool_call
            .raw_arguments,
        text
    );
}

#[test]
fn an_open_call_survives_a_restart_and_completes_with_its_whole_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (text, parts) = fragments(300);
    let half = parts.len() / 2;
    {
        let s = Store::open(&path, Config::default()).unwrap();
        ok(s.apply(
            &chunk(
                "c",
                "m",
                0,
                &oa_delta(0, Some("call_a"), Some("lookup"), ""),
            ),
            0,
        ));
        for (i, p) in parts.iter().take(half).enumerate() {
            ok(s.apply(
                &chunk("c", "m", 1 + i as u64, &oa_delta(0, None, None, p)),
                0,
            ));
        }
        s.flush().unwrap();
    }
    let s = reopen(&path, Config::default());
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.status, MessageStatus::Streaming);
    assert_eq!(
        snap.calls[0].tool_call.raw_arguments,
        parts[..half].concat()
    );
    for (i, p) in parts.iter().enumerate().skip(half) {
        ok(s.apply(
            &chunk("c", "m", 1 + i as u64, &oa_delta(0, None, None, p)),
            0,
        ));
    }
    let end = 1 + parts.len() as u64;
    ok(s.apply(&chunk("c", "m", end, &oa_finish("tool_calls")), 0));
    let done = call_events(&s, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1);
    assert_eq!(raw(&done[0]), text);
}

#[test]
fn pieces_staged_by_the_commit_that_ends_the_call_are_part_of_its_text() {
    // seq 1..=3 arrive late: 2 and 3 (the finish) are parked, 1 fills the gap, and one commit
    // appends 1 and 2 and then ends the call: its pieces are not in storage yet.
    let s = store();
    ok(s.apply(
        &chunk(
            "c",
            "m",
            0,
            &oa_delta(0, Some("call_a"), Some("lookup"), "{\"a\":"),
        ),
        0,
    ));
    s.flush().unwrap();
    ok(s.apply(&chunk("c", "m", 3, &oa_finish("tool_calls")), 0));
    ok(s.apply(&chunk("c", "m", 2, &oa_delta(0, None, None, "\"y\"}")), 0));
    ok(s.apply(&chunk("c", "m", 1, &oa_delta(0, None, None, "1,\"b\":")), 0));
    let done = call_events(&s, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1, "{:?}", types(&s));
    assert_eq!(raw(&done[0]), "{\"a\":1,\"b\":\"y\"}");
}

#[test]
fn a_snapshot_of_an_open_call_shows_its_text_so_far() {
    let s = store();
    ok(s.apply(
        &chunk(
            "c",
            "m",
            0,
            &oa_delta(0, Some("call_a"), Some("lookup"), "{\"q\""),
        ),
        0,
    ));
    ok(s.apply(&chunk("c", "m", 1, &oa_delta(0, None, None, ":\"abc")), 0));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].status, CallStatus::Streaming);
    assert_eq!(snap.calls[0].tool_call.raw_arguments, "{\"q\":\"abc");
    let conv = s.conversation("c").unwrap();
    assert_eq!(conv[0].calls[0].tool_call.raw_arguments, "{\"q\":\"abc");
}

#[test]
fn text_sent_before_the_name_is_in_the_started_event() {
    let s = store();
    ok(s.apply(&chunk("c", "m", 0, &oa_delta(0, None, None, "{\"k\":")), 0));
    ok(s.apply(&chunk("c", "m", 1, &oa_delta(0, None, None, "2")), 0));
    s.flush().unwrap();
    assert!(call_events(&s, EventType::ToolCallStarted).is_empty());
    ok(s.apply(
        &chunk(
            "c",
            "m",
            2,
            &oa_delta(0, Some("call_a"), Some("lookup"), "}"),
        ),
        0,
    ));
    let started = call_events(&s, EventType::ToolCallStarted);
    assert_eq!(started.len(), 1);
    assert_eq!(raw(&started[0]), "{\"k\":2");
    ok(s.apply(&chunk("c", "m", 3, &oa_finish("tool_calls")), 0));
    let done = call_events(&s, EventType::ToolCallCompleted);
    assert_eq!(raw(&done[0]), "{\"k\":2}");
}

#[test]
fn a_call_pushed_over_the_argument_limit_ends_invalid_with_its_text_so_far() {
    let config = Config {
        max_argument_bytes: 20,
        ..Config::default()
    };
    let s = Store::open_temporary(config).unwrap();
    ok(s.apply(
        &chunk(
            "c",
            "m",
            0,
            &oa_delta(0, Some("call_a"), Some("lookup"), "{\"q\":\""),
        ),
        0,
    ));
    ok(s.apply(
        &chunk("c", "m", 1, &oa_delta(0, None, None, "0123456789")),
        0,
    ));
    s.flush().unwrap();
    ok(s.apply(&chunk("c", "m", 2, &oa_delta(0, None, None, "abcdef")), 0));
    let invalid = call_events(&s, EventType::ToolCallInvalid);
    assert_eq!(invalid.len(), 1);
    assert_eq!(invalid[0].reason.as_deref(), Some("argument_limit"));
    assert_eq!(raw(&invalid[0]), "{\"q\":\"0123456789");
}

#[test]
fn idle_and_ended_streams_abandon_calls_with_their_whole_text() {
    let s = store();
    let (text, parts) = fragments(40);
    for (msg, ctl) in [("idle", false), ("ended", true)] {
        ok(s.apply(
            &chunk("c", msg, 0, &oa_delta(0, Some(msg), Some("lookup"), "")),
            0,
        ));
        for (i, p) in parts.iter().enumerate() {
            ok(s.apply(
                &chunk("c", msg, 1 + i as u64, &oa_delta(0, None, None, p)),
                0,
            ));
        }
        if ctl {
            let mut end = chunk("c", msg, 1 + parts.len() as u64, b"");
            end.control = Some(Control::End);
            ok(s.apply(&end, 0));
        }
    }
    s.flush().unwrap();
    s.tick(Config::default().idle_timeout_ms + 1).unwrap();
    let abandoned = call_events(&s, EventType::ToolCallAbandoned);
    assert_eq!(abandoned.len(), 2, "{:?}", types(&s));
    for ev in &abandoned {
        assert_eq!(raw(ev), text, "{}", ev.message_id);
    }
}

#[test]
fn streams_go_on_after_their_message_states_were_evicted_from_the_cache() {
    let config = Config {
        message_cache_entries: 1,
        ..Config::default()
    };
    let s = Store::open_temporary(config.clone()).unwrap();
    let reference = Store::open_temporary(Config::default()).unwrap();
    let msgs = ["m0", "m1", "m2"];
    let (text, parts) = fragments(30);
    let mut bodies = vec![oa_delta(0, Some("call"), Some("lookup"), "")];
    bodies.extend(parts.iter().map(|p| oa_delta(0, None, None, p)));
    bodies.push(oa_finish("tool_calls"));
    for (seq, body) in bodies.iter().enumerate() {
        for m in msgs {
            for store in [&s, &reference] {
                ok(store.apply(&chunk("c", m, seq as u64, body), 0));
            }
        }
        if seq == 2 {
            for m in msgs {
                assert_eq!(
                    s.message_snapshot("c", m).unwrap(),
                    reference.message_snapshot("c", m).unwrap()
                );
            }
        }
    }
    assert_eq!(events(&s), events(&reference));
    let done = call_events(&s, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|e| raw(e) == text));
    assert_eq!(
        s.conversation("c").unwrap(),
        reference.conversation("c").unwrap()
    );
}
