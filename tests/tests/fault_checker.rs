//! The fault checker itself, without a worker: the reference's own events published to a real
//! server's events stream (and a fake query service answering with the reference snapshots)
//! pass; the same with one event dropped, one published twice, one altered, one ghost
//! `abandoned` for a call the reference completes, two events swapped and one wrong snapshot is
//! reported as exactly that.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use toolstream_testkit::fault::{Checker, Reference, Workload, WorkloadSpec};
use toolstream_testkit::NatsServer;

async fn streams(js: &jetstream::Context) {
    for (name, subject) in [
        ("TOOLSTREAM_EVENTS", "toolstream.events.>"),
        ("TOOLSTREAM_DLQ", "toolstream.dlq.>"),
    ] {
        js.create_stream(stream::Config {
            name: name.to_string(),
            subjects: vec![subject.to_string()],
            duplicate_window: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .expect("create stream");
    }
}

/// Answers `toolstream.query.message.<conv>.<msg>` from `snapshots` (404 when absent).
fn fake_query_service(client: async_nats::Client, snapshots: BTreeMap<(String, String), Value>) {
    tokio::spawn(async move {
        let mut sub = client
            .subscribe("toolstream.query.message.*.*")
            .await
            .expect("subscribe");
        while let Some(m) = sub.next().await {
            let Some(reply) = m.reply else { continue };
            let parts: Vec<&str> = m.subject.as_str().split('.').collect();
            let key = (parts[3].to_string(), parts[4].to_string());
            match snapshots.get(&key) {
                Some(v) => {
                    let _ = client.publish(reply, v.to_string().into()).await;
                }
                None => {
                    let mut h = HeaderMap::new();
                    h.insert("Nats-Service-Error-Code", "404");
                    let _ = client.publish_with_headers(reply, h, "".into()).await;
                }
            }
        }
    });
}

async fn publish(js: &jetstream::Context, event: &Value, msg_id: &str) {
    let subject = format!(
        "toolstream.events.{}.{}",
        event["conversation_id"].as_str().unwrap(),
        event["message_id"].as_str().unwrap()
    );
    let mut h = HeaderMap::new();
    h.insert("Nats-Msg-Id", msg_id);
    js.publish_with_headers(subject, h, event.to_string().into())
        .await
        .expect("publish")
        .await
        .expect("puback");
}

/// The reference's events per message, in reference order.
fn per_message(reference: &Reference) -> Vec<Vec<Value>> {
    reference
        .messages
        .values()
        .map(|m| {
            m.event_ids
                .iter()
                .map(|id| reference.events[id].clone())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_passes_the_reference_and_reports_each_kind_of_fault() {
    let server = NatsServer::start().expect("nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client.clone());
    streams(&js).await;

    let good = Workload::build(&WorkloadSpec::small("good", 7, 8)).unwrap();
    let bad = Workload::build(&WorkloadSpec::small("bad", 8, 8)).unwrap();
    let config = assembler::Config::default();
    let (good_ref, bad_ref) = (
        Reference::compute(&good, &config).unwrap(),
        Reference::compute(&bad, &config).unwrap(),
    );
    let mut snapshots = BTreeMap::new();
    for r in [&good_ref, &bad_ref] {
        for (key, m) in &r.messages {
            if let Some(s) = &m.snapshot {
                snapshots.insert(key.clone(), s.clone());
            }
        }
    }

    // faults in the bad run, each in its own message (every message has at least one call)
    let messages = per_message(&bad_ref);
    assert!(messages.len() >= 6);
    let is = |e: &Value, t: &str| e["type"] == t;
    let mut wrong_snapshot = None;
    for (n, events) in messages.iter().enumerate() {
        let mut events = events.clone();
        let mut extra: Vec<(usize, Value)> = Vec::new();
        match n {
            // lost: no message.completed
            0 => events.retain(|e| !is(e, "message.completed")),
            // duplicated: the first event again under another Nats-Msg-Id
            1 => extra.push((1, events[0].clone())),
            // mismatched: the first completed call with other arguments
            2 => {
                let e = events
                    .iter_mut()
                    .find(|e| is(e, "tool_call.completed"))
                    .unwrap();
                e["tool_call"]["arguments"] = serde_json::json!({"forged": true});
            }
            // ghost: an abandoned for a call the reference completes, after its started
            3 => {
                let at = events
                    .iter()
                    .position(|e| is(e, "tool_call.started"))
                    .unwrap();
                let mut ghost = events[at].clone();
                ghost["type"] = "tool_call.abandoned".into();
                ghost["event_id"] = "ev_00000000000000000000000000000ghost".into();
                ghost["reason"] = "gap".into();
                extra.push((at + 1, ghost));
            }
            // order: message.completed before the last call event
            4 => {
                let done = events
                    .iter()
                    .position(|e| is(e, "message.completed"))
                    .unwrap();
                let call = events[..done]
                    .iter()
                    .rposition(|e| e["type"].as_str().unwrap().starts_with("tool_call."))
                    .unwrap();
                events.swap(call, done);
            }
            // snapshot: the query answers another finish reason
            5 => {
                let key = bad_ref.messages.keys().nth(n).unwrap().clone();
                let s = snapshots.get_mut(&key).unwrap();
                s["finish_reason"] = "forged".into();
                wrong_snapshot = Some(key);
            }
            _ => {}
        }
        for (at, e) in extra.into_iter().rev() {
            events.insert(at, e);
        }
        let mut copies = 0;
        for e in &events {
            let id = e["event_id"].as_str().unwrap().to_string();
            // the second occurrence of an id gets another Nats-Msg-Id (so the server keeps it)
            let seen_before = events
                .iter()
                .take_while(|o| !std::ptr::eq(*o, e))
                .any(|o| o["event_id"] == e["event_id"]);
            let msg_id = if seen_before {
                copies += 1;
                format!("{id}-copy{copies}")
            } else {
                id
            };
            publish(&js, e, &msg_id).await;
        }
    }
    assert!(wrong_snapshot.is_some());
    for events in per_message(&good_ref) {
        for e in &events {
            publish(&js, e, e["event_id"].as_str().unwrap()).await;
        }
    }
    fake_query_service(client.clone(), snapshots);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut checker = Checker::new(client.clone(), "toolstream");
    checker.query_limit = Duration::from_secs(5);
    let report = checker.check(&good_ref).await;
    assert!(report.ok(), "the reference itself passes: {report}");
    assert_eq!(report.events_checked, good_ref.event_count());

    let report = checker.check(&bad_ref).await;
    assert!(!report.ok());
    eprintln!("{report}");
    assert_eq!(report.lost, 1, "{report}");
    assert_eq!(report.duplicated, 1, "{report}");
    assert_eq!(report.ghosts, 1, "{report}");
    assert_eq!(report.should_have_completed, 1, "{report}");
    assert_eq!(report.mismatched, 1, "{report}");
    assert_eq!(report.order_violations, 1, "{report}");
    assert_eq!(report.snapshot_mismatches, 1, "{report}");

    // an event of a checked workload published afterwards is late
    let late = per_message(&good_ref)[0][0].clone();
    publish(&js, &late, "late-copy").await;
    let report = checker.late_report().await;
    assert_eq!(report.late, 1, "{report}");
    assert!(!report.ok());
}
