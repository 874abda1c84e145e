//! The worker SIGKILLed again and again in the middle of a run and restarted on the same sled
//! directory: no event lost, none published twice (counted by `event_id` in the events
//! stream), and no input applied twice (an argument fragment applied twice would change the
//! assembled arguments, which are compared byte-exact as JSON).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MESSAGES: usize = 40;
const KILLS: usize = 4;

fn calls_of(i: usize) -> Vec<Call> {
    (0..1 + i % 3)
        .map(|k| Call {
            id: format!("call_{i}_{k}"),
            name: "fetch".to_string(),
            args: json!({"url": format!("https://example.com/{i}/{k}"), "retries": k,
                         "body": "x".repeat(40 + i)}),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_and_restart_loses_nothing_and_duplicates_nothing() {
    let mut e2e = E2e::start(toolstream_bin(), &[]).await;
    let (worker, js, producer) = e2e.parts();

    let expected_events: usize = (0..MESSAGES).map(|i| 2 * calls_of(i).len() + 1).sum();
    let publishing = Arc::new(AtomicBool::new(true));
    // pace the producers so that kills land while input is still flowing
    let tasks = spawn_paced_openai_streams(producer, MESSAGES, calls_of, Duration::from_millis(60));
    let done_publishing = Arc::clone(&publishing);
    let all_published = tokio::spawn(async move {
        for t in tasks {
            t.await.unwrap();
        }
        done_publishing.store(false, Ordering::SeqCst);
    });

    // Kill at scattered points while input flows: each start must be up first, then runs for
    // a different, pseudo-random while (no wall-clock assertion depends on it).
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    for kill in 0..KILLS {
        worker.wait_ready();
        let run_for = 80 + (kill * 137) % 300;
        tokio::time::sleep(Duration::from_millis(run_for as u64)).await;
        worker.kill();
        worker.restart();
    }
    worker.wait_ready();
    let still_publishing_at_last_kill = publishing.load(Ordering::SeqCst);
    all_published.await.unwrap();

    events
        .until(
            WAIT * 2,
            "every message.completed after the restarts",
            |all| completed_messages(all) >= MESSAGES,
            || worker.log(),
        )
        .await;
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
    events.poll().await;

    assert_each_event_once(&events.all);
    assert_eq!(
        events.all.len(),
        expected_events,
        "no event lost, none extra"
    );

    let grouped = by_message(&events.all);
    for i in 0..MESSAGES {
        let evs = &grouped[&(format!("c{i}"), format!("m{i}"))];
        check_message(evs, &calls_of(i)).unwrap_or_else(|e| panic!("m{i}: {e}\n{evs:#?}"));
    }
    let log = worker.log();
    assert_eq!(
        log.matches("store open").count(),
        KILLS + 1,
        "the worker really was restarted {KILLS} times"
    );
    // Informational: whether the last kill happened while input was still being published.
    eprintln!("last kill while publishing: {still_publishing_at_last_kill}");
}

/// The worst crash point for duplicates, hit on purpose: the relay aborts the process after
/// its PubAcks and before deleting the rows (test failpoint), so the restarted worker publishes
/// those events again. `Nats-Msg-Id = event_id` must make the stream drop every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_between_puback_and_outbox_delete_republishes_without_duplicates() {
    let failpoint = [("TOOLSTREAM_FAILPOINT_ABORT_AFTER_PUBACKS", "5")];
    let mut e2e = E2e::start_with_env(toolstream_bin(), &[], &failpoint).await;
    let (url, store) = (e2e.server.url(), e2e.store());
    let (worker, js, producer) = e2e.parts();
    const N: usize = 6;
    for i in 0..N {
        producer
            .openai_stream(&format!("c{i}"), &format!("m{i}"), &calls_of(i))
            .await;
    }
    assert_eq!(
        worker.wait_exit(WAIT),
        Some(false),
        "the failpoint aborts the worker:\n{}",
        tail(&worker.log(), 20)
    );
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events.poll().await;
    let before = events.all.len();
    assert!(
        before >= 5,
        "the aborted worker's publishes were confirmed: {before}"
    );

    // Same store, no failpoint: the rows still in the outbox are published again.
    let mut worker = Worker::start(&url, &store, &[]);
    let expected: usize = (0..N).map(|i| 2 * calls_of(i).len() + 1).sum();
    events
        .until(
            WAIT,
            "every message.completed after the abort",
            |all| completed_messages(all) >= N,
            || worker.log(),
        )
        .await;
    assert!(worker.terminate(), "{}", tail(&worker.log(), 20));
    events.poll().await;
    assert_each_event_once(&events.all);
    assert_eq!(events.all.len(), expected);
    assert!(
        worker.log().contains("confirmed as duplicates"),
        "the restarted relay re-published rows the stream already had (the path under test)"
    );
    let grouped = by_message(&events.all);
    for i in 0..N {
        check_message(&grouped[&(format!("c{i}"), format!("m{i}"))], &calls_of(i))
            .unwrap_or_else(|e| panic!("m{i}: {e}"));
    }
}

/// The window for applying input twice, hit on purpose: the worker aborts after a batch is
/// flushed and before it is acked (test failpoint), so the server redelivers input the store
/// already holds. The store must recognize every redelivery (counted as duplicates) and the
/// arguments stay byte-exact (a fragment applied twice would change them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_between_flush_and_ack_applies_no_input_twice() {
    const N: usize = 6;
    // input first, so the aborting worker's first batches carry real chunks
    let mut e2e = E2e::start(toolstream_bin(), &["--batch-size", "8"]).await;
    assert!(e2e.worker.terminate());
    let (url, store) = (e2e.server.url(), e2e.store());
    let E2e { js, producer, .. } = &e2e;
    for i in 0..N {
        producer
            .openai_stream(&format!("c{i}"), &format!("m{i}"), &calls_of(i))
            .await;
    }
    let mut worker = Worker::start_with_env(
        &url,
        &store,
        &["--batch-size", "8"],
        &[("TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES", "3")],
    );
    assert_eq!(
        worker.wait_exit(WAIT),
        Some(false),
        "the failpoint aborts the worker:\n{}",
        tail(&worker.log(), 20)
    );

    // The unacked batch comes back after ack_wait (4s in the harness) to the restarted worker.
    let mut worker = Worker::start(&url, &store, &["--batch-size", "8"]);
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "every message.completed after the abort",
            |all| completed_messages(all) >= N,
            || worker.log(),
        )
        .await;
    // the redelivered batch is settled once the consumer has nothing pending
    wait_settled(js, "toolstream")
        .await
        .unwrap_or_else(|e| panic!("input never settled: {e}"));
    let metrics = worker.metrics();
    assert!(worker.terminate());
    let duplicates: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolstream_duplicates_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        duplicates >= 1,
        "redelivered, already-applied input was recognized as duplicate ({duplicates})"
    );

    events.poll().await;
    let expected: usize = (0..N).map(|i| 2 * calls_of(i).len() + 1).sum();
    assert_eq!(events.all.len(), expected, "no event lost, none extra");
    let grouped = by_message(&events.all);
    for i in 0..N {
        check_message(&grouped[&(format!("c{i}"), format!("m{i}"))], &calls_of(i))
            .unwrap_or_else(|e| panic!("m{i}: {e}"));
    }
}
