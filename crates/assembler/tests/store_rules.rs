//! The store's ordering, dedupe, parking, dead letters, results, timeouts, limits and
//! snapshots, on raw OpenAI-chat-shaped chunks.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Config, Control, InputKind, Origin, OutboxKind, Seq, Store};
use chunk_model::{CallStatus, EventType, MessageStatus};
use common::*;
use serde_json::json;

fn store() -> Store {
    Store::open_temporary(Config::default()).unwrap()
}

#[test]
fn a_redelivered_chunk_changes_nothing() {
    let s = store();
    let body = oa_delta(0, Some("call_a"), Some("f"), "{\"a\":");
    assert!(matches!(
        s.apply(&chunk("c", "m", 0, &body), 1).unwrap(),
        Applied::Accepted { events: 1 }
    ));
    assert_eq!(
        s.apply(&chunk("c", "m", 0, &body), 2).unwrap(),
        Applied::Duplicate
    );
    let more = oa_delta(0, None, None, "1}");
    let _ = s.apply(&chunk("c", "m", 1, &more), 3).unwrap();
    assert_eq!(
        s.apply(&chunk("c", "m", 0, &body), 4).unwrap(),
        Applied::Duplicate
    );
    let fin = oa_finish("tool_calls");
    let _ = s.apply(&chunk("c", "m", 2, &fin), 5).unwrap();
    let ev = events(&s);
    let done = ev
        .iter()
        .find(|e| e.event_type == EventType::ToolCallCompleted)
        .unwrap();
    assert_eq!(done.tool_call.as_ref().unwrap().raw_arguments, "{\"a\":1}");
}

#[test]
fn a_chunk_ahead_of_a_gap_is_parked_and_applied_when_the_gap_fills() {
    let s = store();
    let bodies = two_call_stream();
    // deliver 0, then 2..5, then 1
    let _ = s.apply(&chunk("c", "m", 0, &bodies[0]), 1).unwrap();
    for (i, b) in bodies.iter().enumerate().skip(2) {
        assert_eq!(
            s.apply(&chunk("c", "m", i as u64, b), 2).unwrap(),
            Applied::Parked
        );
    }
    assert_eq!(
        s.apply(&chunk("c", "m", 3, &bodies[3]), 3).unwrap(),
        Applied::Duplicate
    );
    let applied = s.apply(&chunk("c", "m", 1, &bodies[1]), 4).unwrap();
    assert!(matches!(applied, Applied::Accepted { events } if events >= 4));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.status, MessageStatus::Completed);
    assert_eq!(snap.calls[0].tool_call.arguments, json!({"city":"Paris"}));
    assert_eq!(snap.calls[1].tool_call.id, "call_b");
    assert_eq!(s.open_streams(), 0);
}

#[test]
fn an_unfilled_gap_abandons_open_calls_with_reason_gap_and_discards_parked_chunks() {
    let cfg = Config {
        gap_timeout_ms: 1_000,
        ..Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let _ = s.apply(&chunk("c", "m", 1, &b[1]), 0).unwrap();
    assert_eq!(
        s.apply(&chunk("c", "m", 3, &b[3]), 100).unwrap(),
        Applied::Parked
    );
    assert_eq!(s.tick(1_099).unwrap(), 0);
    assert!(s.tick(1_100).unwrap() >= 2);
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.finish_reason.as_deref(), Some("gap"));
    assert_eq!(snap.calls.len(), 1);
    assert_eq!(snap.calls[0].status, CallStatus::Abandoned);
    assert_eq!(snap.calls[0].reason.as_deref(), Some("gap"));
    assert_eq!(snap.calls[0].tool_call.raw_arguments, "{\"city\":");
    // The parked chunk was not dropped without a trace: it is a dead letter.
    let dead = dead_letters(&s);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "stream_closed: gap");
    // The late chunk is a dead letter too; nothing completes twice.
    let before = events(&s).len();
    let late = s.apply(&chunk("c", "m", 2, &b[2]), 2_000).unwrap();
    assert!(
        matches!(&late, Applied::DeadLettered { reason } if reason.starts_with("stream_closed")),
        "{late:?}"
    );
    assert_eq!(events(&s).len(), before);
}

#[test]
fn an_undecodable_chunk_in_the_middle_of_a_call_ends_it_lost_chunk_never_completed() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let origin = Origin {
        subject: "toolstream.chunks.c.m".into(),
        stream_seq: 42,
    };
    let mut bad = chunk("c", "m", 1, b"{not json");
    bad.origin = Some(&origin);
    let verdict = s.apply(&bad, 0).unwrap();
    assert!(
        matches!(&verdict, Applied::DeadLettered { reason } if reason.starts_with("decode_error"))
    );
    // Everything after the hole is a dead letter as well: assembling across it would
    // complete the call without the lost text.
    for (i, body) in b.iter().enumerate().skip(2) {
        let v = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        assert!(
            matches!(&v, Applied::DeadLettered { reason } if reason.starts_with("stream_closed")),
            "seq {i}: {v:?}"
        );
    }
    let rows = common::durable_rows(&s, 100);
    let dlq: Vec<_> = rows
        .iter()
        .filter(|r| r.kind == OutboxKind::DeadLetter)
        .collect();
    assert_eq!(dlq.len(), b.len() - 1);
    assert!(
        dlq[0].msg_id.starts_with("dlq:c:1:c:1:m:p1:"),
        "{}",
        dlq[0].msg_id
    );
    assert_eq!(dlq[0].payload, b"{not json");
    let header = |k: &str| {
        dlq[0]
            .headers
            .iter()
            .find(|(h, _)| h == k)
            .map(|(_, v)| v.clone())
    };
    assert!(header("Toolstream-Reason")
        .unwrap()
        .starts_with("decode_error"));
    assert_eq!(
        header("Toolstream-Subject").as_deref(),
        Some("toolstream.chunks.c.m")
    );
    assert_eq!(header("Toolstream-Stream-Seq").as_deref(), Some("42"));
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.status, MessageStatus::Completed);
    assert_eq!(snap.finish_reason.as_deref(), Some("lost_chunk"));
    assert_eq!(snap.calls[0].status, CallStatus::Abandoned);
    assert_eq!(snap.calls[0].reason.as_deref(), Some("lost_chunk"));
    assert!(
        !events(&s)
            .iter()
            .any(|e| e.event_type == EventType::ToolCallCompleted),
        "a call with a lost chunk never completes"
    );
}

#[test]
fn a_chunk_without_any_provider_is_dead_lettered_no_provider() {
    let s = store();
    let body = oa_delta(0, Some("a"), Some("f"), "{}");
    let mut input = chunk("c", "m", 0, &body);
    input.provider = None;
    assert_eq!(
        s.apply(&input, 0).unwrap(),
        Applied::DeadLettered {
            reason: "no_provider".into()
        }
    );
}

#[test]
fn the_provider_named_by_the_first_chunk_serves_the_rest_of_the_stream() {
    let s = store();
    let b = two_call_stream();
    for (i, body) in b.iter().enumerate() {
        let mut input = chunk("c", "m", i as u64, body);
        if i > 0 {
            input.provider = None;
        }
        assert!(matches!(
            s.apply(&input, 0).unwrap(),
            Applied::Accepted { .. }
        ));
    }
    assert_eq!(
        s.message_snapshot("c", "m").unwrap().unwrap().calls.len(),
        2
    );
}

#[test]
fn a_result_that_arrives_before_its_call_is_matched_when_the_call_appears() {
    let s = store();
    let r = br#"{"tool_call_id":"call_a","output":"22C"}"#;
    assert!(matches!(
        s.apply(&result("c", "tools", 0, r), 0).unwrap(),
        Applied::Accepted { events: 0 }
    ));
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 1).unwrap();
    }
    let ev = events(&s);
    let matched = ev
        .iter()
        .find(|e| e.event_type == EventType::ToolResultCompleted)
        .unwrap();
    assert_eq!(
        matched.message_id, "m",
        "result events carry the CALL's message id"
    );
    assert_eq!(matched.tool_result.as_ref().unwrap().output, "22C");
    let completed = ev
        .iter()
        .find(|e| e.event_type == EventType::MessageCompleted)
        .unwrap();
    assert_eq!(completed.tool_results.as_ref().unwrap().len(), 1);
    // Past the grace period nothing is orphaned: it was matched.
    assert_eq!(s.tick(10_000_000).unwrap(), 0);
}

#[test]
fn streamed_results_are_assembled_by_appending() {
    let s = store();
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let parts: [&[u8]; 3] = [
        br#"{"tool_call_id":"call_b","delta":"12:"}"#,
        br#"{"tool_call_id":"call_b","delta":"00"}"#,
        br#"{"tool_call_id":"call_b","done":true}"#,
    ];
    for (i, p) in parts.iter().enumerate() {
        let _ = s.apply(&result("c", "tools", i as u64, p), 1).unwrap();
    }
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.tool_results.len(), 1);
    assert_eq!(snap.tool_results[0].output, "12:00");
}

#[test]
fn a_result_whose_call_never_appears_is_orphaned_after_the_grace_period() {
    let cfg = Config {
        orphan_grace_ms: 500,
        ..Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let r = br#"{"tool_call_id":"call_zzz","output":"x"}"#;
    let _ = s.apply(&result("c", "tools", 0, r), 1_000).unwrap();
    assert_eq!(s.tick(1_499).unwrap(), 0);
    assert_eq!(s.tick(1_500).unwrap(), 1);
    let ev = events(&s);
    assert_eq!(ev[0].event_type, EventType::ToolResultOrphaned);
    assert_eq!(ev[0].message_id, "tools");
    assert_eq!(
        s.message_snapshot("c", "tools")
            .unwrap()
            .unwrap()
            .orphaned_results
            .len(),
        1
    );
    assert_eq!(s.tick(99_999).unwrap(), 0, "orphaned once");
}

#[test]
fn an_idle_stream_abandons_its_open_calls_with_reason_timeout() {
    let cfg = Config {
        idle_timeout_ms: 1_000,
        ..Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let _ = s.apply(&chunk("c", "m", 1, &b[1]), 500).unwrap();
    assert_eq!(s.open_streams(), 1);
    assert_eq!(s.tick(1_499).unwrap(), 0);
    assert_eq!(s.tick(1_500).unwrap(), 2);
    assert_eq!(s.open_streams(), 0);
    assert_eq!(
        types(&s),
        vec![
            "tool_call.started",
            "tool_call.abandoned",
            "message.completed"
        ]
    );
    let ev = events(&s);
    assert_eq!(ev[2].finish_reason.as_deref(), Some("timeout"));
}

#[test]
fn control_end_abandons_open_calls_stream_ended() {
    let s = store();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let mut end = chunk("c", "m", 1, b"");
    end.control = Some(Control::End);
    let _ = s.apply(&end, 0).unwrap();
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].status, CallStatus::Abandoned);
    assert_eq!(snap.calls[0].reason.as_deref(), Some("stream_ended"));
    assert_eq!(snap.finish_reason.as_deref(), Some("control_end"));
}

#[test]
fn a_new_stream_past_the_open_stream_limit_is_dead_lettered_and_others_go_on() {
    let cfg = Config {
        max_open_streams: 1,
        ..Config::default()
    };
    let s = Store::open_temporary(cfg).unwrap();
    let b = two_call_stream();
    let _ = s.apply(&chunk("c", "m1", 0, &b[0]), 0).unwrap();
    assert_eq!(
        s.apply(&chunk("c", "m2", 0, &b[0]), 0).unwrap(),
        Applied::DeadLettered {
            reason: "open_stream_limit".into()
        }
    );
    for (i, body) in b.iter().enumerate().skip(1) {
        assert!(matches!(
            s.apply(&chunk("c", "m1", i as u64, body), 0).unwrap(),
            Applied::Accepted { .. }
        ));
    }
    // m2 lost its first chunk: a redelivery is a duplicate, and its later chunks are dead
    // letters instead of a stream assembled from the middle.
    assert_eq!(
        s.apply(&chunk("c", "m2", 0, &b[0]), 0).unwrap(),
        Applied::Duplicate
    );
    assert!(matches!(
        s.apply(&chunk("c", "m2", 1, &b[1]), 0).unwrap(),
        Applied::DeadLettered { reason } if reason.starts_with("stream_closed")
    ));
    let snap = s.message_snapshot("c", "m2").unwrap().unwrap();
    assert_eq!(snap.finish_reason.as_deref(), Some("lost_chunk"));
    assert!(snap.calls.is_empty());
}

#[test]
fn transport_sequence_numbers_only_dedupe() {
    let s = store();
    let b = two_call_stream();
    let seqs = [10u64, 13, 20, 21, 40, 41];
    for (body, n) in b.iter().zip(seqs) {
        let mut input = chunk("c", "m", 0, body);
        input.seq = Seq::Transport(n);
        assert!(matches!(
            s.apply(&input, 0).unwrap(),
            Applied::Accepted { .. }
        ));
    }
    let mut again = chunk("c", "m", 0, &b[1]);
    again.seq = Seq::Transport(13);
    assert_eq!(s.apply(&again, 0).unwrap(), Applied::Duplicate);
    assert_eq!(
        s.message_snapshot("c", "m").unwrap().unwrap().calls.len(),
        2
    );
}

#[test]
fn outbox_keys_keep_increasing_across_restarts_even_when_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let b = two_call_stream();
    let last = {
        let s = reopen(dir.path(), Config::default());
        for (i, body) in b.iter().enumerate() {
            let _ = s.apply(&chunk("c", "m1", i as u64, body), 0).unwrap();
        }
        let rows = common::durable_rows(&s, 100);
        for r in &rows {
            s.outbox_remove(r.key).unwrap();
        }
        s.flush().unwrap();
        assert_eq!(s.outbox_len(), 0);
        rows.last().unwrap().key
    };
    let s = reopen(dir.path(), Config::default());
    assert_eq!(s.outbox_len(), 0);
    let _ = s.apply(&chunk("c", "m2", 0, &b[0]), 0).unwrap();
    let rows = common::durable_rows(&s, 100);
    assert!(rows[0].key > last);
    // The first message's chunks are still duplicates after the restart.
    assert_eq!(
        s.apply(&chunk("c", "m1", 2, &b[2]), 0).unwrap(),
        Applied::Duplicate
    );
}

#[test]
fn an_open_message_survives_a_restart_with_its_argument_text() {
    let dir = tempfile::tempdir().unwrap();
    let b = two_call_stream();
    {
        let s = reopen(dir.path(), Config::default());
        for (i, body) in b.iter().enumerate().take(3) {
            let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        }
        s.flush().unwrap();
    }
    let s = reopen(dir.path(), Config::default());
    assert_eq!(s.open_streams(), 1);
    for (i, body) in b.iter().enumerate().skip(3) {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].tool_call.arguments, json!({"city":"Paris"}));
}

#[test]
fn conversation_lists_messages_in_first_seen_order() {
    let s = store();
    let b = two_call_stream();
    for m in ["zeta", "alpha", "mid"] {
        for (i, body) in b.iter().enumerate() {
            let _ = s.apply(&chunk("c", m, i as u64, body), 0).unwrap();
        }
    }
    let ids: Vec<_> = s
        .conversation("c")
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(ids, vec!["zeta", "alpha", "mid"]);
    assert!(s.conversation("other").unwrap().is_empty());
    let _ = InputKind::Chunk;
}

#[test]
fn the_store_is_a_send_sync_clone_handle() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Store>();
    let s = store();
    let t = s.clone();
    let body = oa_delta(0, Some("call_a"), Some("f"), "{}");
    let h = std::thread::spawn(move || t.apply(&chunk("c", "m", 0, &body), 0).unwrap());
    assert!(matches!(h.join().unwrap(), Applied::Accepted { events: 1 }));
    assert_eq!(s.outbox_len(), 1);
}

#[test]
fn config_defaults_and_unknown_fields_are_rejected() {
    let c: Config = serde_json::from_str(r#"{"gap_timeout_ms": 5}"#).unwrap();
    assert_eq!(c.gap_timeout_ms, 5);
    assert_eq!(c.max_argument_bytes, 8 * 1024 * 1024);
    assert_eq!(c.max_calls_per_message, 256);
    assert_eq!(c.max_open_streams, 100_000);
    assert_eq!(c.idle_timeout_ms, 300_000);
    assert_eq!(c.orphan_grace_ms, 600_000);
    assert!(serde_json::from_str::<Config>(r#"{"gap_timeout": 5}"#).is_err());
}

#[test]
fn removed_outbox_rows_stay_removed_and_peek_is_oldest_first() {
    let s = store();
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let rows = common::durable_rows(&s, 100);
    assert!(rows.windows(2).all(|w| w[0].key < w[1].key));
    assert_eq!(rows.len(), s.outbox_len());
    s.outbox_remove(rows[0].key).unwrap();
    s.outbox_remove(rows[0].key).unwrap();
    assert_eq!(s.outbox_len(), rows.len() - 1);
    s.flush().unwrap();
    let after = common::durable_rows(&s, 100);
    assert_eq!(after.first().map(|r| r.key), Some(rows[1].key));
    assert_eq!(
        after[0].headers,
        vec![(
            "Toolstream-Event-Type".to_string(),
            "tool_call.started".to_string()
        )]
    );
}

#[test]
fn a_producer_far_ahead_of_a_gap_parks_thousands_and_all_drain_in_order() {
    let s = store();
    let mut bodies = vec![oa_delta(0, Some("call_a"), Some("f"), "{\"n\":\"")];
    for _ in 0..2_000 {
        bodies.push(oa_delta(0, None, None, "x"));
    }
    bodies.push(oa_delta(0, None, None, "\"}"));
    bodies.push(oa_finish("tool_calls"));
    for (i, b) in bodies.iter().enumerate().skip(1).rev() {
        assert_eq!(
            s.apply(&chunk("c", "m", i as u64, b), 0).unwrap(),
            Applied::Parked
        );
    }
    assert_eq!(
        s.apply(&chunk("c", "m", 7, &bodies[7]), 0).unwrap(),
        Applied::Duplicate
    );
    let filled = s.apply(&chunk("c", "m", 0, &bodies[0]), 0).unwrap();
    assert_eq!(filled, Applied::Accepted { events: 3 });
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(
        snap.calls[0].tool_call.arguments,
        json!({"n": "x".repeat(2_000)})
    );
    assert_eq!(
        s.tick(u64::MAX / 2).unwrap(),
        0,
        "nothing left parked or open"
    );
}

#[test]
fn a_result_streamed_in_one_message_with_its_done_is_assembled_whole() {
    let s = store();
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let all = br#"[{"tool_call_id":"call_a","delta":"sun"},{"tool_call_id":"call_a","delta":"ny"},{"tool_call_id":"call_a","done":true}]"#;
    let _ = s.apply(&result("c", "tools", 0, all), 0).unwrap();
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.tool_results[0].output, "sunny");
}

#[test]
fn a_streamed_result_survives_a_restart_between_its_pieces() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = reopen(dir.path(), Config::default());
        let d = br#"{"tool_call_id":"call_b","delta":"12:"}"#;
        let _ = s.apply(&result("c", "tools", 0, d), 0).unwrap();
        s.flush().unwrap();
    }
    let s = reopen(dir.path(), Config::default());
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    let parts: [&[u8]; 2] = [
        br#"{"tool_call_id":"call_b","delta":"30"}"#,
        br#"{"tool_call_id":"call_b","done":true}"#,
    ];
    for (i, p) in parts.iter().enumerate() {
        let _ = s.apply(&result("c", "tools", i as u64 + 1, p), 0).unwrap();
    }
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.tool_results[0].output, "12:30");
}

/// A row the relay published before the flush could be taken back by a crash (a timeout event,
/// say, contradicted after restart by a late chunk): only flushed rows are handed out.
#[test]
fn outbox_rows_reach_the_relay_only_after_the_flush_that_made_them_durable() {
    let s = Store::open_memory(Config::default()).unwrap();
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
    }
    assert!(s.outbox_len() > 0, "the stream caused events");
    assert!(
        s.outbox_peek(100).unwrap().is_empty(),
        "nothing before the flush"
    );
    s.flush().unwrap();
    let first = s.outbox_peek(100).unwrap();
    assert_eq!(first.len(), s.outbox_len());
    // rows committed after a flush wait for the next one
    let _ = s
        .apply(&chunk("c", "m2", 0, &two_call_stream()[0]), 0)
        .unwrap();
    assert_eq!(s.outbox_peek(100).unwrap().len(), first.len());
    s.flush().unwrap();
    assert!(s.outbox_peek(100).unwrap().len() > first.len());
}

/// The consume loop wakes the relay only when a flush made outbox rows durable
/// (`Store::take_relay_news`): a fragment that completes nothing writes no row, so its flush
/// is no news; a row is news once durable, and only once, whichever flush made it so.
#[test]
fn only_a_flush_that_made_rows_durable_is_news_for_the_relay_and_only_once() {
    let s = store();
    assert!(!s.take_relay_news(), "nothing is news at open");
    let opening = oa_delta(0, Some("call_a"), Some("get_weather"), "");
    let applied = s.apply(&chunk("c", "m", 0, &opening), 0).unwrap();
    assert!(matches!(applied, Applied::Accepted { events: 1 }));
    assert!(
        !s.take_relay_news(),
        "a row written and not yet flushed is not news: the relay cannot publish it"
    );
    s.flush().unwrap();
    assert!(s.take_relay_news(), "tool_call.started made durable");
    assert!(!s.take_relay_news(), "told once");

    let fragment = oa_delta(0, None, None, "{\"city\":\"Paris\"}");
    let applied = s.apply(&chunk("c", "m", 1, &fragment), 0).unwrap();
    assert!(matches!(applied, Applied::Accepted { events: 0 }));
    s.flush().unwrap();
    assert!(!s.take_relay_news(), "a flush that made no row durable");

    // rows made durable by one flush are news once, whoever asks after which flush
    let finish = oa_finish("tool_calls");
    let applied = s.apply(&chunk("c", "m", 2, &finish), 0).unwrap();
    assert!(matches!(applied, Applied::Accepted { events: 2 }));
    s.flush().unwrap();
    s.flush().unwrap();
    assert!(s.take_relay_news(), "tool_call.completed made durable");
    assert!(
        !s.take_relay_news(),
        "the second flush made nothing more durable"
    );
    assert_eq!(
        types(&s),
        [
            "tool_call.started",
            "tool_call.completed",
            "message.completed"
        ],
        "every event is there to publish"
    );
}
