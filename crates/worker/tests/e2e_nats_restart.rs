//! A worker started while its NATS server is down keeps retrying and connects once the server
//! is up. (The server SIGKILLed and restarted under load, on both server releases and as a
//! cluster node, is in nats_sigkill_loses_and_duplicates_nothing.rs.)

mod common;

use common::*;
use serde_json::json;
use toolstream_testkit::NatsServer;

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
async fn a_worker_started_before_its_server_connects_once_the_server_is_up() {
    let mut server = NatsServer::start().expect("nats-server");
    server.kill();
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    // it retries (and says so) while nothing listens
    let starting = &worker;
    eventually_async(WAIT, || async move {
        starting.log().contains("waiting for the NATS server")
    })
    .await
    .unwrap_or_else(|| panic!("no retry logged:\n{}", worker.log()));
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
