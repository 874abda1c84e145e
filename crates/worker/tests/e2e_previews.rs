//! Argument previews end to end, against the real worker and a real nats-server: with
//! `[assembler.previews]` on, a subscriber to a conversation's events sees each call's
//! `tool_call.delta`s (contiguous, carrying a prefix of the final text, `partial_arguments` the
//! parse of the text so far) before its `tool_call.completed`, which carries the whole
//! arguments unchanged, and none after it. The worker is SIGKILLed after some deltas were
//! published and restarted (its call state comes back from sled, without the text held for
//! previews): the events stream holds every delta once, and the deltas go on where they
//! stopped.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const CONV: &str = "e2e-previews";

fn calls() -> Vec<Call> {
    vec![
        Call {
            id: "toolu_first".into(),
            name: "write_file".into(),
            args: json!({"path": "/tmp/a.md", "content": "lorem \"ipsum\" é ".repeat(12)}),
        },
        Call {
            id: "toolu_second".into(),
            name: "search".into(),
            args: json!({"q": "rust sled", "filters": [{"lang": "en"}, {"year": 2026}], "n": 7}),
        },
    ]
}

/// Checks the deltas of each call in `events` (in the order received) and returns the text
/// they carried per call id.
fn check(events: &[Value]) -> BTreeMap<String, String> {
    let mut text: BTreeMap<String, String> = BTreeMap::new();
    let mut ended: Vec<String> = Vec::new();
    for e in events {
        let id = e["tool_call"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match e["type"].as_str().unwrap() {
            "tool_call.delta" => {
                assert!(!ended.contains(&id), "a delta after its call ended: {e}");
                assert_eq!(e["tool_call"]["arguments"], Value::Null);
                let so_far = text.entry(id).or_default();
                assert_eq!(
                    e["arguments_offset"].as_u64(),
                    Some(so_far.len() as u64),
                    "contiguous: {e}"
                );
                let delta = e["arguments_delta"].as_str().unwrap();
                assert!(delta.len() >= 16, "min_bytes: {e}");
                so_far.push_str(delta);
                if let Some(partial) = e.get("partial_arguments") {
                    assert_eq!(
                        Some(partial),
                        assembler::core::preview::partial_json(so_far).as_ref(),
                        "{e}"
                    );
                }
            }
            "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned" => {
                let raw = e["tool_call"]["raw_arguments"].as_str().unwrap();
                let so_far = text.get(&id).cloned().unwrap_or_default();
                assert!(
                    raw.starts_with(&so_far),
                    "{so_far:?} is no prefix of {raw:?}"
                );
                ended.push(id);
            }
            _ => {}
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_deltas_then_completed_also_across_a_worker_kill() {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("toolstream.toml");
    std::fs::write(
        &config,
        "[assembler.previews]\nenabled = true\nmin_bytes = 16\nmin_interval_ms = 0\n",
    )
    .unwrap();
    let mut e2e = E2e::start(toolstream_bin(), &["--config", config.to_str().unwrap()]).await;
    let mut live = e2e
        .client
        .subscribe(format!("toolstream.events.{CONV}.>"))
        .await
        .unwrap();
    e2e.client.flush().await.unwrap();
    let (worker, js, producer) = e2e.parts();
    let calls = calls();
    let chunks = anthropic_stream(&calls);
    let half = chunks.len() / 2;
    for (seq, c) in chunks.iter().enumerate().take(half) {
        producer.chunk(CONV, "m1", "anthropic", seq as u64, c).await;
    }
    // some deltas are out, and every input so far is acked: then the worker dies
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "deltas of the first half",
            |all| {
                all.iter()
                    .filter(|r| r.json()["type"] == "tool_call.delta")
                    .count()
                    >= 3
            },
            || worker.log(),
        )
        .await;
    wait_settled(js, "toolstream").await.unwrap();
    worker.kill();
    for (seq, c) in chunks.iter().enumerate().skip(half) {
        producer.chunk(CONV, "m1", "anthropic", seq as u64, c).await;
    }
    worker.restart();
    events
        .until(
            WAIT,
            "message.completed",
            |all| all.iter().any(|r| r.json()["type"] == "message.completed"),
            || worker.log(),
        )
        .await;

    // the events stream: each event once, deltas then the completion, arguments unchanged
    assert_each_event_once(&events.all);
    let stored: Vec<Value> = events.all.iter().map(|r| r.json()).collect();
    let text = check(&stored);
    for c in &calls {
        let completed = stored
            .iter()
            .find(|e| e["type"] == "tool_call.completed" && e["tool_call"]["id"] == c.id)
            .unwrap_or_else(|| panic!("{} completed", c.id));
        assert_eq!(completed["tool_call"]["arguments"], c.args);
        let raw = completed["tool_call"]["raw_arguments"].as_str().unwrap();
        let previewed = &text[&c.id];
        assert!(
            raw.len() - previewed.len() < 16,
            "{}: previewed {} of {} bytes (min_bytes 16)",
            c.id,
            previewed.len(),
            raw.len()
        );
    }
    let deltas = stored
        .iter()
        .filter(|e| e["type"] == "tool_call.delta")
        .count();
    assert!(deltas >= 10, "{deltas} deltas");

    // the live subscriber saw them, in the same order; deduped by event_id as a subscriber
    // does (a core subscription also gets a relay's re-publish after the kill, which
    // JetStream dropped by Nats-Msg-Id)
    let mut seen: Vec<Value> = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    while seen.len() < stored.len() {
        let m = tokio::time::timeout(Duration::from_secs(10), live.next())
            .await
            .expect("the subscriber gets every event")
            .unwrap();
        let e: Value = serde_json::from_slice(&m.payload).unwrap();
        if ids.insert(e["event_id"].as_str().unwrap().to_string()) {
            seen.push(e);
        }
    }
    assert_eq!(
        seen, stored,
        "the subscriber saw the events stream's events"
    );
    let first_completed = seen
        .iter()
        .position(|e| e["type"] == "tool_call.completed")
        .unwrap();
    assert!(
        seen[..first_completed]
            .iter()
            .any(|e| e["type"] == "tool_call.delta"),
        "deltas come before the completion"
    );
    drop(live);
    let _ = worker.terminate();
}
