//! The NATS server SIGKILLed and restarted (same port, same JetStream store) while streams are
//! being published and consumed: the worker reconnects by itself, keeps its state, and finishes
//! every stream with every event exactly once.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use toolstream_testkit::NatsServer;

const MESSAGES: usize = 24;

fn calls_of(i: usize) -> Vec<Call> {
    (0..1 + i % 2)
        .map(|k| Call {
            id: format!("call_{i}_{k}"),
            name: "query_db".to_string(),
            args: json!({"sql": format!("select {k} from t{i}"), "timeout_ms": 100 * i}),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted_under_load_every_stream_still_completes() {
    let mut server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    let js = async_nats::jetstream::new(client(&server.url()).await);
    wait_provisioned(&js, "toolstream").await;
    worker.wait_ready();
    let producer = Producer::new(js.clone());

    let tasks =
        spawn_paced_openai_streams(&producer, MESSAGES, calls_of, Duration::from_millis(40));

    // Let some of the run happen, then take the server away under load and bring it back.
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(WAIT, "first events", |all| all.len() >= 5, || worker.log())
        .await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server
        .restart()
        .expect("server restarts on the same port and store");

    for t in tasks {
        t.await.unwrap();
    }
    let expected_events: usize = (0..MESSAGES).map(|i| 2 * calls_of(i).len() + 1).sum();
    events
        .until(
            WAIT * 2,
            "every message.completed after the server restart",
            |all| completed_messages(all) >= MESSAGES,
            || {
                format!(
                    "{}\n--- server log ---\n{}",
                    worker.log(),
                    tail(&server.log(), 20)
                )
            },
        )
        .await;
    let mut worker = worker;
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
    events.poll().await;

    assert_each_event_once(&events.all);
    assert_eq!(events.all.len(), expected_events);
    let grouped = by_message(&events.all);
    for i in 0..MESSAGES {
        let evs = &grouped[&(format!("c{i}"), format!("m{i}"))];
        check_message(evs, &calls_of(i)).unwrap_or_else(|e| panic!("m{i}: {e}\n{evs:#?}"));
    }
    let log = worker.log();
    assert!(
        log.contains("disconnected from NATS"),
        "the worker saw the outage"
    );
    assert_eq!(
        log.matches("store open").count(),
        1,
        "the worker process was never restarted: it reconnected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_server_connects_once_the_server_is_up() {
    let mut server = NatsServer::start().expect("nats-server");
    server.kill();
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    // it retries (and says so) while nothing listens
    let deadline = std::time::Instant::now() + WAIT;
    while !worker.log().contains("waiting for the NATS server") {
        assert!(
            std::time::Instant::now() < deadline,
            "no retry logged:\n{}",
            worker.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(worker.is_running());
    server.restart().expect("server starts on the same port");
    worker.wait_ready();

    let js = async_nats::jetstream::new(client(&server.url()).await);
    let producer = Producer::new(js.clone());
    producer.openai_stream("late", "m1", &calls_of(1)).await;
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the stream completes",
            |all| completed_messages(all) == 1,
            || worker.log(),
        )
        .await;
    assert!(worker.terminate());
}
