//! `/metrics` and `/healthz` of the real binary against a real nats-server: counters move with
//! traffic, gauges return to zero when streams finish, `/healthz` follows the NATS connection
//! down and back up, and the docker-compose health check passes against a live worker.

mod common;
mod ops_support;

use common::{eventually_async, openai_chat_stream, Call, Producer, StreamLog};
use ops_support::{sample, OpsWorker, WAIT};
use serde_json::json;

use toolstream_testkit::NatsServer;

#[tokio::test]
async fn metrics_counters_move_with_real_traffic() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
    let before = worker.wait_status("/metrics", 200).await;
    assert_eq!(sample(&before, "toolstream_chunks_in_total"), Some(0.0));
    assert_eq!(sample(&before, "toolstream_events_out_total"), Some(0.0));

    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    ops_support::wait_provisioned(&js, 1).await;
    let producer = Producer::new(js.clone());
    let calls = vec![
        Call {
            id: "call_m1".into(),
            name: "lookup".into(),
            args: json!({"id": 42}),
        },
        Call {
            id: "call_m2".into(),
            name: "lookup".into(),
            args: json!({"id": 43}),
        },
    ];
    let chunks = openai_chat_stream(&calls);
    // Distinct message ids: the contract's Nats-Msg-Id is `<msg>:<seq>`, so the same message
    // id in two conversations would be deduplicated by the input stream.
    for (conv, msg) in [("mc1", "m1"), ("mc2", "m2")] {
        for (seq, c) in chunks.iter().enumerate() {
            producer
                .chunk(conv, msg, "openai-chat", seq as u64, c)
                .await;
        }
    }
    producer.result("mc1", "m1", 0, "call_m1", "found").await;
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "two messages and one result",
            |all| common::completed_messages(all) == 2 && all.len() == 11,
            || worker.log(),
        )
        .await;

    // Counters are updated after the PubAck/flush (an input's durable age when its ack is
    // sent, after the flush that woke the relay); poll until they settle.
    let n_chunks = (chunks.len() * 2) as f64;
    let inputs = n_chunks + 1.0;
    let durable = "toolstream_input_lag_seconds_count{stage=\"durable\"}";
    let polled = &worker;
    let settled = eventually_async(WAIT, || async move {
        let (_, body) = polled.get("/metrics").await.expect("GET /metrics");
        (sample(&body, "toolstream_events_out_total") == Some(11.0)
            && sample(&body, "toolstream_outbox_depth") == Some(0.0)
            && sample(&body, durable) == Some(inputs))
        .then_some(body)
    })
    .await;
    let Some(after) = settled else {
        let (_, body) = worker.get("/metrics").await.expect("GET /metrics");
        panic!("metrics did not settle:\n{body}");
    };
    assert_eq!(sample(&after, "toolstream_chunks_in_total"), Some(n_chunks));
    assert_eq!(sample(&after, "toolstream_results_in_total"), Some(1.0));
    assert_eq!(sample(&after, "toolstream_dead_letters_total"), Some(0.0));
    assert_eq!(sample(&after, "toolstream_open_streams"), Some(0.0));
    assert_eq!(sample(&after, "toolstream_nats_connected"), Some(1.0));
    let batches = sample(&after, "toolstream_batches_total").expect("batches");
    assert!(batches >= 1.0);
    assert_eq!(
        sample(&after, "toolstream_batch_apply_seconds_count"),
        Some(batches),
        "one apply observation per batch"
    );
    // group commit (consume/batch.rs): a flush covers every batch applied before it began
    let flushes = sample(&after, "toolstream_batch_flush_seconds_count").expect("flushes");
    assert!(
        (1.0..=batches).contains(&flushes),
        "between one flush and one per batch: {flushes} flushes, {batches} batches"
    );
    assert_eq!(
        sample(&after, "toolstream_batch_apply_seconds_bucket{le=\"+Inf\"}"),
        Some(batches)
    );
    // where an input's time goes (README "Where an input's time goes"), from the shipped
    // binary: each input (chunks and the result, none redelivered) counted once when fetched
    // and once when durable, the ages in seconds (an age in the wrong unit would be years),
    // and relay rounds that found the 11 events: at least one, at most one per event when
    // none failed (a failed round is counted too)
    for stage in ["fetched", "durable"] {
        let series =
            |part: &str| format!("toolstream_input_lag_seconds_{part}{{stage=\"{stage}\"}}");
        assert_eq!(sample(&after, &series("count")), Some(inputs), "{stage}");
        let sum = sample(&after, &series("sum")).expect("sum");
        assert!((0.0..inputs * 60.0).contains(&sum), "{stage} sum {sum}");
    }
    assert_eq!(sample(&after, "toolstream_publish_errors_total"), Some(0.0));
    let rounds = sample(&after, "toolstream_relay_round_seconds_count").expect("relay rounds");
    assert!(
        (1.0..=11.0).contains(&rounds),
        "between one relay round and one per event: {rounds}"
    );
}

#[tokio::test]
async fn healthz_follows_the_nats_connection_down_and_back_up() {
    let mut server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
    let body = worker.wait_status("/healthz", 200).await;
    assert!(body.contains("\"status\":\"ok\""), "{body}");

    server.kill();
    let body = worker.wait_status("/healthz", 503).await;
    assert!(body.contains("\"nats_connected\":false"), "{body}");
    assert!(body.contains("\"store_open\":true"), "{body}");
    let (_, metrics) = worker.get("/metrics").await.expect("metrics still served");
    assert_eq!(sample(&metrics, "toolstream_nats_connected"), Some(0.0));

    server.restart().expect("restart nats-server");
    worker.wait_status("/healthz", 200).await;
}

#[tokio::test]
async fn compose_healthcheck_command_passes_against_a_live_worker() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
    worker.wait_status("/healthz", 200).await;

    let compose_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/docker-compose.yml");
    let compose: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(compose_path).expect("compose file"))
            .expect("compose parses");
    let test = compose["x-worker"]["healthcheck"]["test"]
        .as_sequence()
        .expect("healthcheck test");
    assert_eq!(test[0].as_str(), Some("CMD-SHELL"));
    let shell = test[1]
        .as_str()
        .expect("command")
        .replace("/9090", &format!("/{}", worker.metrics_port));
    let ok = std::process::Command::new("bash")
        .args(["-c", &shell])
        .status()
        .expect("run the health check");
    assert!(
        ok.success(),
        "health check failed against a healthy worker: {shell}"
    );

    // And it fails when nothing healthy answers there.
    let dead = test[1]
        .as_str()
        .unwrap()
        .replace("/9090", &format!("/{}", toolstream_testkit::free_port()));
    let status = std::process::Command::new("bash")
        .args(["-c", &dead])
        .status()
        .expect("run the health check");
    assert!(!status.success(), "health check passed with no worker");
}
