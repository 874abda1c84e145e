//! Issue: one input crashed the worker again and again; after `max_deliver` the server dropped
//! it, and the valid streams fetched in the same batches lost their chunks and ended
//! `abandoned`. Now a redelivered input is applied alone behind a durable note, the input that
//! stops the worker is dead-lettered as `poison` after `max_deliver - 1` such stops, and the
//! server (which redelivers without limit) never drops the inputs fetched with it.
//!
//! The crash is a test failpoint (`TOOLSTREAM_FAILPOINT_ABORT_ON_BODY`): the process aborts
//! while applying any input whose body holds the marker, as a stack overflow would.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toolstream_testkit::openai;

const MARKER: &str = "POISON_7f3a";
const GOOD: usize = 6;

fn good_calls(i: usize) -> Vec<Call> {
    vec![Call {
        id: format!("call_g{i}"),
        name: "lookup".to_string(),
        args: json!({"q": format!("query {i}"), "page": i}),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_input_costs_no_other_stream_anything() {
    let flags = ["--ack-wait", "2s", "--max-deliver", "3"];
    let env = [("TOOLSTREAM_FAILPOINT_ABORT_ON_BODY", MARKER)];
    let mut e2e = E2e::start_with_env(toolstream_bin(), &flags, &env).await;
    let (worker, js, producer) = e2e.parts();
    // everything waits while the worker is down, so the poison is fetched in one batch with
    // the good streams' chunks
    worker.kill();
    let poison_calls = vec![Call {
        id: "call_p".to_string(),
        name: "exec".to_string(),
        args: json!({"cmd": format!("echo {MARKER}")}),
    }];
    let mut poison_stream = openai_chat_stream(&poison_calls);
    // a well-formed chunk in the middle of the call, carrying the marker in a field nobody reads
    let mut poison: Value = serde_json::from_slice(&openai::args_chunk(0, "")).unwrap();
    poison["system_fingerprint"] = MARKER.into();
    poison_stream.insert(2, serde_json::to_vec(&poison).unwrap());
    let good: Vec<Vec<Vec<u8>>> = (0..GOOD)
        .map(|i| openai_chat_stream(&good_calls(i)))
        .collect();
    let longest = good.iter().map(Vec::len).max().unwrap_or(0);
    for seq in 0..longest.max(poison_stream.len()) {
        for (i, chunks) in good.iter().enumerate() {
            if let Some(body) = chunks.get(seq) {
                let (c, m) = (format!("g{i}"), format!("gm{i}"));
                producer
                    .chunk(&c, &m, "openai-chat", seq as u64, body)
                    .await;
            }
        }
        if let Some(body) = poison_stream.get(seq) {
            producer
                .chunk("cp", "mp", "openai-chat", seq as u64, body)
                .await;
        }
    }
    assert!(
        poison_stream
            .iter()
            .any(|b| String::from_utf8_lossy(b).contains(MARKER)),
        "the marker is in one of the poison stream's chunks"
    );

    // supervise: restart the worker whenever the poison stops it
    worker.restart();
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut stops = 0;
    loop {
        events.poll().await;
        dlq.poll().await;
        let completed = by_message(&events.all)
            .iter()
            .filter(|((c, _), evs)| {
                c.starts_with('g') && evs.iter().any(|e| e["type"] == "message.completed")
            })
            .count();
        let poison_dead = dlq.all.iter().any(|r| {
            r.header("Toolstream-Reason")
                .is_some_and(|why| why.starts_with("poison"))
        });
        let poison_done = by_message(&events.all)
            .get(&("cp".to_string(), "mp".to_string()))
            .is_some_and(|evs| evs.iter().any(|e| e["type"] == "message.completed"));
        if completed == GOOD && poison_dead && poison_done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{completed}/{GOOD} good streams, poison dead-lettered: {poison_dead}, {stops} stops\n{}",
            tail(&worker.log(), 40)
        );
        if !worker.is_running() {
            stops += 1;
            worker.restart();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        (1..=3).contains(&stops),
        "the poison stopped the worker {stops} times (1 in its batch, then alone until given up)"
    );
    assert!(worker.terminate(), "{}", tail(&worker.log(), 40));
    events.poll().await;

    assert_each_event_once(&events.all);
    let grouped = by_message(&events.all);
    for i in 0..GOOD {
        let evs = &grouped[&(format!("g{i}"), format!("gm{i}"))];
        check_message(evs, &good_calls(i)).unwrap_or_else(|e| panic!("g{i}: {e}\n{evs:#?}"));
    }
    let poisoned = &grouped[&("cp".to_string(), "mp".to_string())];
    assert!(
        !poisoned.iter().any(|e| e["type"] == "tool_call.completed"),
        "the call that lost its poison chunk never completes: {poisoned:#?}"
    );
    assert!(
        poisoned
            .iter()
            .any(|e| e["type"] == "tool_call.abandoned" && e["reason"] == "lost_chunk"),
        "{poisoned:#?}"
    );
}
