//! Issue 8 (bad-input corpus, cases `h-rejected-chunk-ahead-of-a-gap` and
//! `r-rejected-result-ahead-of-a-gap`): an input dead-lettered before it could be placed (a
//! header the worker cannot read, the open-stream limit) while numbered ahead of a gap moved
//! its stream's watermark past the numbers still to come. Those inputs were then taken for
//! duplicates and acked without a trace: the missing chunks of the closed stream were not
//! `stream_closed` dead letters, and numbered tool results were dropped.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::Applied;
use chunk_model::EventType;
use common::*;

#[test]
fn chunks_behind_a_rejected_chunk_ahead_of_a_gap_are_stream_closed_not_duplicates() {
    let s = assembler::Store::open_temporary(assembler::Config::default()).unwrap();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let v = s
        .reject(&chunk("c", "m", 3, &b[3]), "bad_control: x", 0)
        .unwrap();
    assert!(is_dead(&v, "bad_control"), "{v:?}");
    for (i, body) in b.iter().enumerate().skip(1).take(2) {
        let v = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        assert!(is_dead(&v, "stream_closed"), "seq {i}: {v:?}");
    }
    // numbers already taken are still duplicates
    assert_eq!(
        s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap(),
        Applied::Duplicate
    );
}

#[test]
fn a_numbered_result_behind_a_rejected_one_ahead_of_a_gap_is_applied() {
    let s = assembler::Store::open_temporary(assembler::Config::default()).unwrap();
    let b = two_call_stream();
    for (i, body) in b.iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let ids: Vec<String> = s
        .message_snapshot("c", "m")
        .unwrap()
        .unwrap()
        .calls
        .iter()
        .map(|c| c.tool_call.id.clone())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let body = |id: &str, out: &str| {
        serde_json::json!({"tool_call_id": id, "output": out})
            .to_string()
            .into_bytes()
    };
    let first = body(&ids[0], "A");
    let _ = s.apply(&result("c", "m", 0, &first), 0).unwrap();
    let ahead = body("call_other", "C");
    let v = s
        .reject(&result("c", "m", 2, &ahead), "unknown_provider: \"x\"", 0)
        .unwrap();
    assert!(is_dead(&v, "unknown_provider"), "{v:?}");
    let second = body(&ids[1], "B");
    let v = s.apply(&result("c", "m", 1, &second), 0).unwrap();
    assert!(matches!(v, Applied::Accepted { .. }), "{v:?}");
    s.flush().unwrap();
    let results = events(&s)
        .into_iter()
        .filter(|e| e.event_type == EventType::ToolResultCompleted)
        .count();
    assert_eq!(results, 2, "both results applied");
}
