//! Issue: a crash turned a long stream into `tool_call.abandoned` (`gap`). The chunks a killed
//! worker had fetched but not acked come back only after `ack_wait`; later chunks of the same
//! stream arrive at once after the restart and are parked; `gap_timeout` ran out first.
//!
//! These tests hold a chunk the way a dead worker does — fetched from the durable consumer by
//! another client and never acked — while the rest of the stream reaches the restarted worker,
//! with a `gap_timeout` far shorter than `ack_wait`. The stream must complete, whole, once the
//! held chunk is redelivered.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream::consumer::PullConsumer;
use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use toolstream_testkit::harness;

const GAP_TIMEOUT_MS: &str = "300";
const ACK_WAIT: &str = "6s";
/// The worker of the two gap tests.
const GAP_FLAGS: [&str; 4] = ["--gap-timeout-ms", GAP_TIMEOUT_MS, "--ack-wait", ACK_WAIT];

fn calls() -> Vec<Call> {
    vec![Call {
        id: "call_long".to_string(),
        name: "write_file".to_string(),
        args: json!({"path": "/tmp/report.md", "content": "lorem ipsum ".repeat(40)}),
    }]
}

/// Fetches exactly one message from the worker's durable consumer and keeps it unacked, as a
/// worker killed right after its fetch would; returns its Toolstream-Seq.
async fn hold_one_like_a_dead_worker(js: &async_nats::jetstream::Context) -> String {
    let stream = js.get_stream("TOOLSTREAM_IN").await.expect("input stream");
    let consumer: PullConsumer = stream.get_consumer("toolstream").await.expect("consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(3))
        .messages()
        .await
        .expect("fetch");
    let held = batch
        .next()
        .await
        .expect("one message is pending for the consumer")
        .expect("message");
    let seq = held
        .headers
        .as_ref()
        .and_then(|h| h.get("Toolstream-Seq"))
        .map(|v| v.to_string())
        .expect("the held chunk has a Toolstream-Seq");
    // dropped without an ack: it stays pending until ack_wait runs out
    drop(held);
    seq
}

/// Waits (bounded) until the events stream holds an event of type `ty`.
async fn wait_for(events: &mut StreamLog, ty: &str, limit: Duration, worker: &harness::Worker) {
    events
        .until(
            limit,
            ty,
            |all| all.iter().any(|r| r.json()["type"] == ty),
            || worker.log(),
        )
        .await;
}

fn events_of(log: &StreamLog, msg: &str) -> Vec<Value> {
    log.all
        .iter()
        .map(Read::json)
        .filter(|e| e["message_id"] == msg)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_held_by_a_killed_worker_does_not_end_its_stream_gap() {
    let mut e2e = E2e::start(toolstream_bin(), &GAP_FLAGS).await;
    let (worker, js, producer) = e2e.parts();
    let chunks = openai_chat_stream(&calls());
    assert!(chunks.len() > 10, "a long enough stream");

    // the first two chunks are applied by the running worker
    for (seq, body) in chunks.iter().enumerate().take(2) {
        producer
            .chunk("c1", "m1", "openai-chat", seq as u64, body)
            .await;
    }
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    wait_for(
        &mut events,
        "tool_call.started",
        Duration::from_secs(20),
        worker,
    )
    .await;

    // the worker dies; its pull requests expire on the server
    worker.kill();
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // chunk 2 is fetched by "the dead worker" and never acked
    producer
        .chunk("c1", "m1", "openai-chat", 2, &chunks[2])
        .await;
    assert_eq!(hold_one_like_a_dead_worker(js).await, "2");

    // the rest of the stream is there at once when the worker comes back
    for (seq, body) in chunks.iter().enumerate().skip(3) {
        producer
            .chunk("c1", "m1", "openai-chat", seq as u64, body)
            .await;
    }
    worker.restart();
    worker.wait_ready();

    wait_for(
        &mut events,
        "message.completed",
        Duration::from_secs(40),
        worker,
    )
    .await;
    let of_m1 = events_of(&events, "m1");
    let types: Vec<&str> = of_m1.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(
        !types.contains(&"tool_call.abandoned"),
        "the held chunk was waited for, not given up on: {of_m1:#?}"
    );
    check_message(&of_m1, &calls()).unwrap_or_else(|e| panic!("{e}: {of_m1:#?}"));
}

/// The other half of the rule: a gap whose chunk was never published (nothing pending) still
/// ends the stream `gap`, on time, so waiting for redeliveries does not wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_was_never_published_still_ends_the_stream_gap() {
    let mut e2e = E2e::start(toolstream_bin(), &GAP_FLAGS).await;
    let (worker, js, producer) = e2e.parts();
    let chunks = openai_chat_stream(&calls());
    for (seq, body) in chunks.iter().enumerate() {
        if seq != 2 {
            producer
                .chunk("c1", "m2", "openai-chat", seq as u64, body)
                .await;
        }
    }
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            Duration::from_secs(20),
            "tool_call.abandoned (gap)",
            |all| {
                all.iter().any(|r| {
                    let e = r.json();
                    e["type"] == "tool_call.abandoned" && e["reason"] == "gap"
                })
            },
            || worker.log(),
        )
        .await;
    let of_m2 = events_of(&events, "m2");
    assert!(
        !of_m2.iter().any(|e| e["type"] == "tool_call.completed"),
        "a call with a hole never completes: {of_m2:#?}"
    );
}

/// Issue: timeouts punished backlog. The idle timeout ran from when the worker applied a chunk,
/// so a stream whose next chunks waited in the input stream while the worker was down longer
/// than `idle_timeout` was abandoned on restart (the first tick came before the backlog was
/// read). Streams are timed by publish time now, and only once the backlog is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_queued_during_an_outage_longer_than_idle_timeout_is_not_abandoned() {
    let mut e2e = E2e::start(toolstream_bin(), &["--idle-timeout-ms", "1000"]).await;
    let (worker, js, producer) = e2e.parts();
    let chunks = openai_chat_stream(&calls());

    producer
        .chunk("c1", "m3", "openai-chat", 0, &chunks[0])
        .await;
    producer
        .chunk("c1", "m3", "openai-chat", 1, &chunks[1])
        .await;
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    wait_for(
        &mut events,
        "tool_call.started",
        Duration::from_secs(20),
        worker,
    )
    .await;
    // an outage: the worker is gone while the producer finishes the stream at once
    worker.kill();
    for (seq, body) in chunks.iter().enumerate().skip(2) {
        producer
            .chunk("c1", "m3", "openai-chat", seq as u64, body)
            .await;
    }
    // ... and stays gone three idle timeouts
    tokio::time::sleep(Duration::from_secs(3)).await;
    worker.restart();
    wait_for(
        &mut events,
        "message.completed",
        Duration::from_secs(30),
        worker,
    )
    .await;
    let of_m3 = events_of(&events, "m3");
    check_message(&of_m3, &calls()).unwrap_or_else(|e| panic!("{e}: {of_m3:#?}"));
}
