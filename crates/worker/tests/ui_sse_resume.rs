//! The UI event stream (`GET /v1/conversations/{conv}/events`) against the real binary and a
//! real nats-server: a client whose connection is cut mid-stream, and separately one whose
//! worker is SIGKILLed and restarted, resumes with `Last-Event-ID` and sees every event of the
//! conversation on the events stream exactly once, in stream order, byte for byte, each with
//! its stream sequence as its SSE id; and so does one that resumes on a second worker. One
//! server for the whole file.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;
mod ui_support;

use common::{Call, Producer, StreamLog};
use ops_support::{OpsWorker, WAIT};
use serde_json::json;
use std::time::Duration;
use toolstream_testkit::NatsServer;
use ui_support::{Frame, Sse};

const TOKEN: &str = "ui-test-token-0123456789";
const CONV: &str = "ui-resume";
const READ: Duration = Duration::from_secs(30);

fn calls(msg: &str) -> Vec<Call> {
    (0..2)
        .map(|i| Call {
            id: format!("call_{msg}_{i}"),
            name: "get_weather".into(),
            args: json!({"city": format!("{msg}-{i}"), "days": i}),
        })
        .collect()
}

/// Publishes message `msg` of [`CONV`] (two calls) and a result for its first call.
async fn publish_message(producer: &Producer, msg: &str) {
    producer.openai_stream(CONV, msg, &calls(msg)).await;
    producer
        .result(CONV, msg, 0, &format!("call_{msg}_0"), "sunny")
        .await;
}

/// The events of [`CONV`] on the events stream once every message in `msgs` completed with its
/// result: (sequence, payload) in stream order.
async fn published(
    events: &mut StreamLog,
    worker: &OpsWorker,
    msgs: &[&str],
) -> Vec<(u64, String)> {
    ui_support::conversation_done(events, CONV, msgs.len(), || worker.log()).await
}

/// What the client saw, as (id, data); checks each frame's `event:` is its type.
fn seen(frames: &[Frame]) -> Vec<(u64, String)> {
    frames
        .iter()
        .map(|f| {
            let event: serde_json::Value = serde_json::from_str(&f.data).unwrap();
            assert_eq!(
                f.event,
                event["type"].as_str().unwrap(),
                "event: is the type"
            );
            (f.id.expect("every event has an id"), f.data.clone())
        })
        .collect()
}

#[tokio::test]
async fn a_client_resumes_with_last_event_id_after_a_cut_and_after_a_worker_sigkill_seeing_each_event_once(
) {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = OpsWorker::start_with_config(
        &server.url(),
        dir.path(),
        "ui.toml",
        &format!("[ui]\ntoken = \"{TOKEN}\"\nheartbeat = \"1s\"\n"),
    )
    .await;
    let port = worker.metrics_port;
    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let path = format!("/v1/conversations/{CONV}/events");

    // --- the connection is cut mid-stream -------------------------------------------------
    publish_message(&producer, "m1").await;
    publish_message(&producer, "m2").await;
    let first = published(&mut events, &worker, &["m1", "m2"]).await;
    let mut sse = Sse::open(port, &path, TOKEN, &[]).await;
    let cut_at = first[first.len() / 2].0;
    let mut frames = sse.until_id(cut_at, READ).await;
    drop(sse); // the cut: the client is gone mid-stream
    publish_message(&producer, "m3").await;
    let all = published(&mut events, &worker, &["m1", "m2", "m3"]).await;
    let last = all.last().unwrap().0;
    let resume = format!("Last-Event-ID: {cut_at}");
    // the URL's ?after= (what the page first asked for) loses to Last-Event-ID, as EventSource sends it
    let mut sse = Sse::open(port, &format!("{path}?after=0"), TOKEN, &[&resume]).await;
    frames.extend(sse.until_id(last, READ).await);
    assert_eq!(
        seen(&frames),
        all,
        "after the cut: every event once, in order"
    );
    // nothing more is sent while nothing is published; heartbeats keep the stream open
    assert!(sse.next(Duration::from_millis(2500)).await.is_none());
    assert!(
        sse.comments.iter().any(|c| c == "keep-alive"),
        "heartbeat comments on an idle stream: {:?}",
        sse.comments
    );
    drop(sse);

    // --- the worker is SIGKILLed mid-stream and restarted ------------------------------------
    let mut sse = Sse::open(port, &path, TOKEN, &[]).await;
    let mut frames = sse.until_id(last, READ).await;
    publish_message(&producer, "m4").await;
    let with_m4 = published(&mut events, &worker, &["m1", "m2", "m3", "m4"]).await;
    let m4_first = with_m4[all.len()].0;
    frames.extend(sse.until_id(m4_first, READ).await);
    worker.kill();
    // the kill cut the connection: what was in flight is dropped, never half-delivered
    while let Some(f) = sse.next(Duration::from_secs(5)).await {
        frames.push(f);
    }
    publish_message(&producer, "m5").await; // while no worker runs
    worker.restart();
    worker.wait_status("/healthz", 200).await;
    let everything = published(&mut events, &worker, &["m1", "m2", "m3", "m4", "m5"]).await;
    let resume = format!("Last-Event-ID: {}", frames.last().unwrap().id.unwrap());
    let mut sse = Sse::open(port, &path, TOKEN, &[&resume]).await;
    frames.extend(sse.until_id(everything.last().unwrap().0, READ).await);
    assert_eq!(
        seen(&frames),
        everything,
        "across a SIGKILL and a restart: every event once, in order"
    );

    // --- a second worker serves the reconnect ------------------------------------------------
    // (its own consumer and store: it assembles every input again, and the events stream drops
    // its re-publications by Nats-Msg-Id; it serves the stream from the same sequences)
    let config2 = dir.path().join("ui2.toml");
    std::fs::write(&config2, format!("[ui]\ntoken = \"{TOKEN}\"\n")).unwrap();
    let other = OpsWorker::start_with(
        &server.url(),
        &dir.path().join("data2"),
        &[
            "--config",
            config2.to_str().unwrap(),
            "--consumer",
            "second",
        ],
    );
    other.wait_status("/healthz", 200).await;
    publish_message(&producer, "m6").await;
    let six = ["m1", "m2", "m3", "m4", "m5", "m6"];
    let all6 = published(&mut events, &worker, &six).await;
    let cut_at = all6[everything.len()].0; // m6's first event
    frames.extend(sse.until_id(cut_at, READ).await);
    drop(sse); // the client leaves the first worker mid-message
    let resume = format!("Last-Event-ID: {cut_at}");
    let mut sse = Sse::open(other.metrics_port, &path, TOKEN, &[&resume]).await;
    frames.extend(sse.until_id(all6.last().unwrap().0, READ).await);
    assert_eq!(
        seen(&frames),
        all6,
        "resumed on another worker: every event once, in order"
    );
    // the second worker's re-publications of all six messages added nothing to the stream
    common::wait_settled(&js, "second").await.unwrap();
    let published_by_second = common::eventually_async(WAIT, || async {
        let (_, body) = other.get("/metrics").await.ok()?;
        let depth = ops_support::sample(&body, "toolstream_outbox_depth")?;
        let out = ops_support::sample(&body, "toolstream_events_out_total")?;
        (depth == 0.0 && out > 0.0).then_some(out)
    })
    .await
    .expect("the second worker published its events");
    assert!(published_by_second >= all6.len() as f64);
    events.poll().await;
    let ids: Vec<String> = events
        .all
        .iter()
        .map(|r| r.json()["event_id"].as_str().unwrap().to_string())
        .collect();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no event twice on the stream");
    drop(sse);
    let _ = worker.terminate();
}
