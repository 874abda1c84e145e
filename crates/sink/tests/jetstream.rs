//! The relay against a real nats-server (one per test, from the testkit): rows go out on their
//! subjects with their `Nats-Msg-Id` and headers, a re-publish of the same rows (a crash between
//! PubAck and delete) is deduplicated by the stream, and an event over `max_payload` is stored
//! whole in the payload bucket and published by reference. The same relay with fakes under
//! paused time: `src/relay/tests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use assembler::{OutboxEntry, OutboxKind};
use async_nats::jetstream::{self, stream};
use chunk_model::wire::headers;
use chunk_model::{Event, EventType, ToolResult};
use sink::jetstream::JetStream;
use sink::outbox::Outbox;
use sink::relay::{Drained, Relay, RelayTask};
use sink::testing::{FakeOutbox, Log};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use toolstream_testkit::wait::eventually_async;
use toolstream_testkit::NatsServer;

/// Puts `rows` in the in-memory outbox (`sink::testing`, the unit tests' fake).
fn add(outbox: &FakeOutbox, rows: &[OutboxEntry]) {
    for row in rows {
        outbox.add(row.clone());
    }
}

fn row(key: u64, kind: OutboxKind, msg_id: &str, payload: &[u8]) -> OutboxEntry {
    OutboxEntry {
        key,
        kind,
        conversation_id: "conv".into(),
        message_id: format!("msg{key}"),
        msg_id: msg_id.into(),
        headers: vec![(headers::EVENT_TYPE.into(), "tool_call.completed".into())],
        payload: payload.to_vec(),
    }
}

/// The events and dead-letter streams the worker provisions, as the relay needs them.
async fn streams(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    for (name, subject) in [("EVENTS", "ts.events.>"), ("DLQ", "ts.dlq.>")] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subject.into()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    js
}

async fn messages(js: &jetstream::Context, stream: &str) -> Vec<jetstream::message::StreamMessage> {
    let s = js.get_stream(stream).await.unwrap();
    let n = s.get_info().await.unwrap().state.messages;
    let mut out = Vec::new();
    for seq in 1..=n {
        out.push(s.get_raw_message(seq).await.unwrap());
    }
    out
}

#[tokio::test]
async fn rows_go_out_with_their_msg_id_and_a_republish_is_deduplicated() {
    let server = NatsServer::start().expect("nats-server");
    let js = streams(&server).await;
    let rows = [
        row(1, OutboxKind::Event, "ev_one", br#"{"n":1}"#),
        row(2, OutboxKind::DeadLetter, "dlq:conv:msg2:1", b"not json"),
        row(3, OutboxKind::Event, "ev_three", br#"{"n":3}"#),
    ];
    let outbox = FakeOutbox::new(&Log::default());
    add(&outbox, &rows);
    let relay = Relay::new(JetStream::new(js.clone()), "ts", 100);

    let round = relay.round(&outbox).await;
    assert!(round.error.is_none(), "{:?}", round.error);
    assert_eq!(
        (round.events, round.dead_letters, round.duplicates),
        (2, 1, 0)
    );
    assert_eq!(outbox.len(), 0);

    let events = messages(&js, "EVENTS").await;
    let got: Vec<(&str, &str, &[u8])> = events
        .iter()
        .map(|m| {
            let id = m.headers.get(headers::MSG_ID).unwrap().as_str();
            (m.subject.as_str(), id, &m.payload[..])
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ts.events.conv.msg1", "ev_one", &br#"{"n":1}"#[..]),
            ("ts.events.conv.msg3", "ev_three", &br#"{"n":3}"#[..]),
        ]
    );
    assert_eq!(
        events[0].headers.get(headers::EVENT_TYPE).unwrap().as_str(),
        "tool_call.completed"
    );
    let dlq = messages(&js, "DLQ").await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].subject.as_str(), "ts.dlq.conv.msg2");
    assert_eq!(&dlq[0].payload[..], b"not json");

    // The same rows again, as after a crash between the PubAcks and the delete: the loop
    // publishes them (woken), the stream acks them as duplicates and keeps one copy each.
    add(&outbox, &rows);
    let duplicates = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&duplicates);
    let wake = Arc::new(Notify::new());
    let (stop, stop_rx) = watch::channel(false);
    let task = RelayTask::new(relay, Arc::clone(&outbox), Arc::clone(&wake))
        .interval(Duration::from_secs(3600))
        .on_round(move |r| *counted.lock().unwrap() += r.duplicates);
    let handle = tokio::spawn(task.run(stop_rx));
    wake.notify_one();
    eventually_async(Duration::from_secs(10), || async { outbox.len() == 0 })
        .await
        .expect("rows not published again");
    stop.send_replace(true);
    assert_eq!(handle.await.unwrap(), Drained::Empty);
    assert_eq!(*duplicates.lock().unwrap(), 3);
    assert_eq!(
        messages(&js, "EVENTS").await.len(),
        2,
        "deduplicated by Nats-Msg-Id"
    );
    assert_eq!(messages(&js, "DLQ").await.len(), 1);
}

#[tokio::test]
async fn an_event_over_max_payload_is_stored_in_the_payload_bucket_and_referenced() {
    let server = NatsServer::start_with_config("max_payload: 262144\n").expect("nats-server");
    let js = streams(&server).await;
    assert_eq!(js.client().max_payload(), 262_144);
    let mut event = Event::new(
        EventType::ToolResultCompleted,
        "ev_large".into(),
        "conv",
        "msg1",
        None,
    );
    event.tool_result = Some(ToolResult {
        tool_call_id: "call_1".into(),
        output: "r".repeat(600_000),
        is_error: false,
    });
    let whole = serde_json::to_vec(&event).unwrap();
    let outbox = FakeOutbox::new(&Log::default());
    add(
        &outbox,
        &[
            row(1, OutboxKind::Event, "ev_large", &whole),
            row(2, OutboxKind::Event, "ev_after", b"{}"),
        ],
    );
    let relay = Relay::new(JetStream::new(js.clone()), "ts", 100);

    let round = relay.round(&outbox).await;
    assert!(round.error.is_none(), "{:?}", round.error);
    assert_eq!((round.events, round.offloaded), (2, 1));
    assert_eq!(outbox.len(), 0);

    let events = messages(&js, "EVENTS").await;
    assert_eq!(events.len(), 2, "the large event does not block the next");
    assert_eq!(events[0].subject.as_str(), "ts.events.conv.msg1");
    assert_eq!(
        events[0].headers.get(headers::MSG_ID).unwrap().as_str(),
        "ev_large"
    );
    let small: Event = serde_json::from_slice(&events[0].payload).unwrap();
    let reference = small.payload_ref.clone().expect("payload_ref");
    assert_eq!(
        (reference.bucket.as_str(), reference.object.as_str()),
        (sink::payloads::BUCKET, "ev_large")
    );
    assert_eq!(small.event_type, EventType::ToolResultCompleted);
    assert_eq!(small.tool_result.map(|r| r.output), Some(String::new()));
    // the object is the whole event, byte for byte, checked against the reference
    let fetched = sink::payloads::fetch(&js, &reference).await.unwrap();
    assert_eq!(fetched, whole);

    // a re-publish (crash between PubAck and delete) stores nothing new and is deduplicated
    add(&outbox, &[row(1, OutboxKind::Event, "ev_large", &whole)]);
    let round = relay.round(&outbox).await;
    assert_eq!((round.offloaded, round.duplicates), (1, 1));
    assert_eq!(messages(&js, "EVENTS").await.len(), 2);
}
