//! Timers decide by publish time, also when an input arrives before the next tick (found by an
//! independent review of issue 14): a takeover's rebuild used to re-decide timer outcomes.
//!
//! The first owner runs timers (gap / idle / orphan) at the settled watermark *between* batches;
//! `Store::apply` did not check a deadline against the input's publish time (it now runs the
//! input's own stream's and conversation's due timers first, `store::tick::expire_due`). A new owner replays
//! the input after the checkpoint's floors in batches of up to `batch_size` (256), and its
//! watermark is at most the oldest unacknowledged input, so an input published *after* a
//! deadline is applied before that timer can fire. When the first owner saw "deadline, then
//! late input" and published the timer's events, the rebuild sees "late input, no deadline":
//! other events, with other ids (event ids are (conv, msg, call, type)), which the published-id
//! set cannot suppress. A subscriber then sees the same call both `abandoned` and `completed`.
//!
//! Run: `cargo nextest run -p assembler --test timers_by_publish_time --no-capture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Config, Input, OutboxKind, Store};
use common::oa_delta;
use serde_json::Value;
use std::collections::BTreeSet;

fn chunk<'a>(seq: u64, body: &'a [u8]) -> Input<'a> {
    common::chunk("c", "m", seq, body)
}

/// (event id, type, call id) of every durable event row.
fn events(store: &Store) -> Vec<(String, String, String)> {
    store.flush().unwrap();
    store
        .outbox_peek(usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == OutboxKind::Event)
        .map(|r| {
            let v: Value = serde_json::from_slice(&r.payload).unwrap();
            (
                v["event_id"].as_str().unwrap_or_default().to_string(),
                v["type"].as_str().unwrap_or_default().to_string(),
                v["tool_call"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn a_rebuild_applies_a_late_chunk_before_the_gap_timer_the_first_owner_fired() {
    let stream = common::two_call_stream();
    let dir = tempfile::tempdir().unwrap();
    let first = Store::open(&dir.path().join("first"), Config::default()).unwrap();
    // chunk 0 applied and acked, then the owner's checkpoint (its floor is just after chunk 0)
    let _ = first.apply(&chunk(0, &stream[0]), 1_000).unwrap();
    first.flush().unwrap();
    let file = dir.path().join("checkpoint");
    first.export_checkpoint(&file).unwrap();

    // Live, first owner: chunk 1 is late; 2..5 park behind the hole.
    for (i, body) in stream.iter().enumerate().skip(2) {
        let _ = first
            .apply(&chunk(i as u64, body), 2_000 + i as u64)
            .unwrap();
    }
    // Caught up: the watermark follows the wall clock (less 2 s); 30 s after parking the gap
    // timer fires and its events are published by the relay.
    first.tick(33_000).unwrap();
    // The late chunk 1, published at 40 s, finds its stream closed.
    let _ = first.apply(&chunk(1, &stream[1]), 40_000).unwrap();
    first.tick(45_000).unwrap();
    let published: Vec<_> = events(&first);
    let published_ids: BTreeSet<String> = published.iter().map(|e| e.0.clone()).collect();

    // The first owner dies before its next checkpoint. The new owner imports the checkpoint and
    // replays the input after its floor: chunks 2..5 and the late chunk 1 (stream order) arrive
    // in one fetched batch and are applied together; the watermark (the oldest unacked input,
    // 2 s) cannot reach the deadline before that batch is applied.
    let (rebuilt, _) =
        Store::import_checkpoint(&file, &dir.path().join("rebuilt"), Config::default()).unwrap();
    for (i, body) in stream.iter().enumerate().skip(2) {
        let _ = rebuilt
            .apply(&chunk(i as u64, body), 2_000 + i as u64)
            .unwrap();
    }
    let _ = rebuilt.apply(&chunk(1, &stream[1]), 40_000).unwrap();
    rebuilt.tick(45_000).unwrap();
    let again = events(&rebuilt);

    // What the new owner publishes: its events whose ids are not already in the stream.
    let new: Vec<_> = again
        .iter()
        .filter(|e| !published_ids.contains(&e.0))
        .cloned()
        .collect();
    eprintln!("first owner published: {published:#?}");
    eprintln!("new owner publishes in addition: {new:#?}");
    let seen_by_subscriber: BTreeSet<(String, String)> = published
        .iter()
        .chain(new.iter())
        .map(|e| (e.1.clone(), e.2.clone()))
        .collect();
    let contradictory = seen_by_subscriber
        .contains(&("tool_call.abandoned".into(), "call_a".into()))
        && seen_by_subscriber.contains(&("tool_call.completed".into(), "call_a".into()));
    assert!(
        !contradictory && new.is_empty(),
        "the takeover published events the first owner never made (a call both abandoned and \
         completed): {new:?}"
    );
}

#[test]
fn a_chunk_published_after_the_idle_timeout_finds_its_stream_ended_before_any_tick() {
    let idle = Config::default().idle_timeout_ms;
    let first_chunk = oa_delta(0, Some("call_a"), Some("get_weather"), "{\"city\":");
    let late = oa_delta(0, None, None, "\"Paris\"}");
    let dir = tempfile::tempdir().unwrap();
    // live: the idle timer fires at a tick, then the late chunk comes
    let live = Store::open(&dir.path().join("live"), Config::default()).unwrap();
    let _ = live.apply(&chunk(0, &first_chunk), 1_000).unwrap();
    live.tick(1_000 + idle + 1).unwrap();
    let _ = live.apply(&chunk(1, &late), 1_000 + idle + 5).unwrap();
    // rebuilt: the same inputs at the same publish times, no tick in between
    let rebuilt = Store::open(&dir.path().join("rebuilt"), Config::default()).unwrap();
    let _ = rebuilt.apply(&chunk(0, &first_chunk), 1_000).unwrap();
    let _ = rebuilt.apply(&chunk(1, &late), 1_000 + idle + 5).unwrap();
    let kinds = |s: &Store| -> Vec<(String, String)> {
        events(s).into_iter().map(|e| (e.0, e.1)).collect()
    };
    assert_eq!(kinds(&rebuilt), kinds(&live));
    assert!(
        kinds(&live).iter().any(|(_, t)| t == "tool_call.abandoned"),
        "{:?}",
        kinds(&live)
    );
}
