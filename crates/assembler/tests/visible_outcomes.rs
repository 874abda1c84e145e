//! Every input has a visible outcome: applied, a duplicate of the same bytes, or a dead letter
//! with a reason; and a chunk that was not assembled means its call can never end `completed`.
//! Each test names an input that used to be acked without a trace (or with a wrong result).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Control, Input, Seq, Store};
use chunk_model::{CallStatus, EventType};
use common::*;

fn store() -> Store {
    Store::open_temporary(assembler::Config::default()).unwrap()
}

#[test]
fn a_duplicate_seq_with_a_different_body_is_a_conflicting_duplicate_dead_letter() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let _ = s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap();
    // the same bytes again: a redelivery
    assert_eq!(
        s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap(),
        Applied::Duplicate
    );
    // other bytes under an applied number
    let other = oa_delta(0, None, None, "\"Rome\"");
    let v = s.apply(&chunk("c", "m", 1, &other), 0).unwrap();
    assert!(is_dead(&v, "conflicting_duplicate"), "{v:?}");
    // and under a parked number
    let _ = s.apply(&chunk("c", "m", 4, &b[4]), 0).unwrap();
    assert_eq!(
        s.apply(&chunk("c", "m", 4, &b[4]), 0).unwrap(),
        Applied::Duplicate
    );
    let v = s.apply(&chunk("c", "m", 4, &other), 0).unwrap();
    assert!(is_dead(&v, "conflicting_duplicate"), "{v:?}");
    // the first one stays: the stream completes as first sent
    for (i, body) in b.iter().enumerate().skip(2) {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].status, CallStatus::Completed);
    assert_eq!(
        snap.calls[0].tool_call.raw_arguments,
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(dead_reasons(&s).len(), 2);
}

#[test]
fn a_new_calls_chunks_after_the_message_ended_are_dead_lettered_not_dropped() {
    let s = store();
    let b = two_call_stream();
    for (i, body) in b.iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let events = durable_rows(&s, 1_000).len();
    let late = oa_delta(2, Some("call_late"), Some("rm"), "{\"path\":\"/\"}");
    let v = s.apply(&chunk("c", "m", b.len() as u64, &late), 0).unwrap();
    assert!(is_dead(&v, "after_message_end"), "{v:?}");
    let more_text = oa_delta(0, None, None, "tail");
    let v = s
        .apply(&chunk("c", "m", b.len() as u64 + 1, &more_text), 0)
        .unwrap();
    assert!(is_dead(&v, "after_message_end"), "{v:?}");
    assert_eq!(
        durable_rows(&s, 1_000).len(),
        events + 2,
        "two dead letters, no event"
    );
    // a trailing chunk without call statements is fine ([DONE], usage)
    let usage = br#"{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1}}"#;
    let v = s
        .apply(&chunk("c", "m", b.len() as u64 + 2, usage), 0)
        .unwrap();
    assert!(matches!(v, Applied::Accepted { .. }), "{v:?}");
}

#[test]
fn a_chunk_without_seq_in_a_numbered_stream_is_dead_lettered_missing_seq_and_ends_the_call() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let mut unnumbered = chunk("c", "m", 0, &b[1]);
    unnumbered.seq = Seq::Transport(77);
    let v = s.apply(&unnumbered, 0).unwrap();
    assert!(is_dead(&v, "missing_seq"), "{v:?}");
    // the redelivery of the same message is a duplicate, not a second dead letter
    assert_eq!(s.apply(&unnumbered, 0).unwrap(), Applied::Duplicate);
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].status, CallStatus::Abandoned);
    assert_eq!(snap.calls[0].reason.as_deref(), Some("lost_chunk"));
    // an unnumbered explicit end is still an end, not a lost chunk
    let s = store();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let mut end = chunk("c", "m", 0, b"");
    end.seq = Seq::Transport(5);
    end.control = Some(Control::End);
    assert!(matches!(
        s.apply(&end, 0).unwrap(),
        Applied::Accepted { .. }
    ));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].reason.as_deref(), Some("stream_ended"));
}

#[test]
fn a_numbered_chunk_in_an_unnumbered_stream_is_dead_lettered_unexpected_seq() {
    let s = store();
    let b = two_call_stream();
    let mut first = chunk("c", "m", 0, &b[0]);
    first.seq = Seq::Transport(10);
    let _ = s.apply(&first, 0).unwrap();
    let v = s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap();
    assert!(is_dead(&v, "unexpected_seq"), "{v:?}");
}

#[test]
fn an_input_the_caller_rejected_ends_its_stream_lost_chunk() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let _ = s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap();
    let bad = chunk("c", "m", 2, &b[2]);
    let v = s.reject(&bad, "unknown_provider: \"nope\"", 0).unwrap();
    assert!(is_dead(&v, "unknown_provider"), "{v:?}");
    assert_eq!(
        s.reject(&bad, "unknown_provider: \"nope\"", 0).unwrap(),
        Applied::Duplicate
    );
    for (i, body) in b.iter().enumerate().skip(3) {
        let v = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        assert!(is_dead(&v, "stream_closed"), "seq {i}: {v:?}");
    }
    let evs = events(&s);
    assert!(!evs
        .iter()
        .any(|e| e.event_type == EventType::ToolCallCompleted));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.finish_reason.as_deref(), Some("lost_chunk"));
}

#[test]
fn a_stream_that_never_named_a_provider_emits_no_message_with_a_null_provider() {
    let cfg = assembler::Config {
        idle_timeout_ms: 1_000,
        ..assembler::Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let body = oa_delta(0, Some("a"), Some("f"), "{}");
    let input = Input {
        provider: None,
        ..chunk("c", "m", 0, &body)
    };
    let v = s.apply(&input, 0).unwrap();
    assert!(is_dead(&v, "no_provider"), "{v:?}");
    let _ = s.tick(10_000).unwrap();
    for ev in events(&s) {
        assert!(ev.provider.is_some(), "an event without a provider: {ev:?}");
    }
}

/// Found by cargo fuzz (fuzz/regressions/assembler/…same-id-twice…): a second result for an
/// id whose first result was already orphaned was orphaned again under the same event id.
#[test]
fn a_second_result_for_an_orphaned_id_does_not_emit_the_orphan_event_twice() {
    let cfg = assembler::Config {
        orphan_grace_ms: 1_000,
        ..assembler::Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let first = br#"{"tool_call_id":"call_x","output":"one"}"#;
    let second = br#"{"tool_call_id":"call_x","output":"two"}"#;
    let _ = s.apply(&result("c", "m", 0, first), 0).unwrap();
    let _ = s.tick(5_000).unwrap();
    let _ = s.apply(&result("c", "m", 1, second), 6_000).unwrap();
    let _ = s.tick(20_000).unwrap();
    let orphaned: Vec<_> = events(&s)
        .into_iter()
        .filter(|e| e.event_type == EventType::ToolResultOrphaned)
        .collect();
    assert_eq!(orphaned.len(), 1, "{orphaned:?}");
    let ids: std::collections::BTreeSet<_> =
        events(&s).iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(ids.len(), events(&s).len(), "every event id once");
}

/// The fuzzer's own input (fuzz/regressions/assembler/orphaned-result-for-the-same-id-twice-…):
/// a finished empty result, orphaned; then a streamed piece for the same id, orphaned again.
#[test]
fn a_streamed_piece_after_an_orphaned_result_does_not_reuse_its_event_id() {
    let cfg = assembler::Config {
        orphan_grace_ms: 10_000,
        ..assembler::Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let _ = s
        .apply(
            &result("c", "m", 0, br#"{"tool_call_id":"x","done":true}"#),
            1,
        )
        .unwrap();
    let _ = s.tick(15_801).unwrap();
    let _ = s
        .apply(
            &result("c", "m", 1, br#"{"tool_call_id":"x","delta":"aaa"}"#),
            15_802,
        )
        .unwrap();
    let _ = s.tick(27_301).unwrap();
    let all = events(&s);
    let ids: std::collections::BTreeSet<_> = all.iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(ids.len(), all.len(), "every event id once: {all:#?}");
}

/// From review: a number taken by a dead-lettered input recorded no fingerprint, so other
/// bytes sent later under it were a silent duplicate instead of a conflicting one.
#[test]
fn other_bytes_under_a_dead_lettered_number_are_a_conflicting_duplicate() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let v = s.apply(&chunk("c", "m", 1, b"{not json"), 0).unwrap();
    assert!(is_dead(&v, "decode_error"), "{v:?}");
    assert_eq!(
        s.apply(&chunk("c", "m", 1, b"{not json"), 0).unwrap(),
        Applied::Duplicate,
        "the same bytes again are a redelivery"
    );
    let v = s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap();
    assert!(is_dead(&v, "conflicting_duplicate"), "{v:?}");
}
