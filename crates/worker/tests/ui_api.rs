//! The HTTP API for UIs against the real binary and a real nats-server: the bearer token, CORS,
//! coded JSON errors instead of hung sockets, the limit on concurrent streams, `?message=`, and
//! the snapshot's `offset` (a page that renders the snapshot and subscribes after its offset
//! sees every event it did not show, once), checked while the worker is still applying the
//! message. One server and one worker for the whole file.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;
mod ui_support;

use common::{openai_chat_stream, Call, Producer, StreamLog};
use ops_support::{OpsWorker, WAIT};
use serde_json::{json, Value};
use std::time::Duration;
use toolstream_testkit::NatsServer;
use ui_support::{get_json, request, Sse};

const TOKEN: &str = "ui-api-token-abcdefghij";
const CONV: &str = "ui-api";
const READ: Duration = Duration::from_secs(30);

fn calls(msg: &str, n: usize) -> Vec<Call> {
    (0..n)
        .map(|i| Call {
            id: format!("call_{msg}_{i}"),
            name: "lookup".into(),
            args: json!({"q": format!("{msg} {i}"), "k": i}),
        })
        .collect()
}

/// The events of message `msg` of [`CONV`] read so far: (sequence, event).
fn events_of(events: &StreamLog, msg: &str) -> Vec<(u64, Value)> {
    events
        .all
        .iter()
        .map(|r| (r.seq, r.json()))
        .filter(|(_, e)| e["conversation_id"] == CONV && e["message_id"] == msg)
        .collect()
}

/// Whether the snapshot's state is exactly what the events up to `offset` say: the message
/// completed iff `message.completed` is among them, each call ended iff its terminal event is,
/// each call named iff its `started` is, each result iff its `tool_result.completed` is.
fn agrees(snapshot: &Value, events: &[(u64, Value)], offset: u64) -> Result<(), String> {
    let upto: Vec<&Value> = events
        .iter()
        .filter(|(s, _)| *s <= offset)
        .map(|(_, e)| e)
        .collect();
    let has = |ty: &str, index: Option<u64>, result: Option<&str>| {
        upto.iter().any(|e| {
            e["type"] == ty
                && index.is_none_or(|i| e["tool_call"]["index"] == i)
                && result.is_none_or(|r| e["tool_result"]["tool_call_id"] == r)
        })
    };
    let completed = snapshot["status"] == "completed";
    if completed != has("message.completed", None, None) {
        return Err(format!("status {} at offset {offset}", snapshot["status"]));
    }
    for call in snapshot["calls"].as_array().unwrap() {
        let index = call["tool_call"]["index"].as_u64().unwrap();
        let named = !call["tool_call"]["name"].as_str().unwrap().is_empty();
        if named != has("tool_call.started", Some(index), None) {
            return Err(format!("call {index} named={named} at offset {offset}"));
        }
        let status = call["status"].as_str().unwrap();
        let terminal: Vec<&str> = ["completed", "invalid", "abandoned"]
            .into_iter()
            .filter(|t| has(&format!("tool_call.{t}"), Some(index), None))
            .collect();
        let want: Vec<&str> = if status == "streaming" {
            vec![]
        } else {
            vec![status]
        };
        if terminal != want {
            return Err(format!(
                "call {index} {status} at offset {offset}, events say {terminal:?}"
            ));
        }
    }
    let results = snapshot["tool_results"].as_array().unwrap();
    let result_events = upto
        .iter()
        .filter(|e| e["type"] == "tool_result.completed")
        .count();
    if results.len() != result_events {
        return Err(format!(
            "{} result(s) in the snapshot, {result_events} event(s) at offset {offset}",
            results.len()
        ));
    }
    for r in results {
        if !has("tool_result.completed", None, r["tool_call_id"].as_str()) {
            return Err(format!("result {} at offset {offset}", r["tool_call_id"]));
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_ui_api_checks_tokens_origins_and_limits_and_its_snapshot_offset_is_exact() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = OpsWorker::start_with_config(
        &server.url(),
        dir.path(),
        "ui.toml",
        &format!(
            "[ui]\ntoken = \"{TOKEN}\"\ncors_origins = [\"http://app.test\"]\nmax_streams = 2\n"
        ),
    )
    .await;
    let port = worker.metrics_port;
    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let stream_path = format!("/v1/conversations/{CONV}/events");

    // --- auth -------------------------------------------------------------------------------
    let (head, body) = request(port, "GET", &stream_path, &[]).await;
    assert_eq!(head.status, 401, "{body}");
    assert_eq!(head.header("www-authenticate"), Some("Bearer"));
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"], "unauthorized");
    let (status, body) = get_json(port, &stream_path, "wrong-token").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    // EventSource cannot set headers: the token may come as ?access_token=
    let (head, _) = request(
        port,
        "GET",
        &format!("/v1/conversations/{CONV}/messages/none?access_token={TOKEN}"),
        &[],
    )
    .await;
    assert_eq!(head.status, 404, "authorized by access_token, then unknown");
    // /metrics and /healthz stay as they were
    assert_eq!(worker.get("/healthz").await.unwrap().0, 200);

    // --- coded errors, never a hung socket -----------------------------------------------------
    for (path, status, code) in [
        ("/v1/conversations/a.b/events", 400, "bad_conversation"),
        ("/v1/conversations/c/events?after=x", 400, "bad_after"),
        (
            "/v1/conversations/c/events?after=99999999",
            400,
            "bad_after",
        ),
        ("/v1/conversations/c/events?format=xml", 400, "bad_format"),
        ("/v1/conversations/c/events?message=a.b", 400, "bad_message"),
        ("/v1/conversations/c/messages/m%FF", 400, "bad_message"),
        ("/v1/conversations/c", 404, "not_found"),
        ("/v1/conversations/c/messages/never", 404, "unknown_message"),
    ] {
        let (got, body) = get_json(port, path, TOKEN).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{path}: {body}"
        );
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (head, _) = request(port, "POST", &stream_path, &[]).await;
    assert_eq!(head.status, 405);

    // --- CORS ----------------------------------------------------------------------------------
    let (head, _) = request(
        port,
        "OPTIONS",
        &stream_path,
        &[
            "Origin: http://app.test",
            "Access-Control-Request-Method: GET",
        ],
    )
    .await;
    assert_eq!(head.status, 204);
    assert_eq!(
        head.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    assert!(head
        .header("access-control-allow-headers")
        .is_some_and(|h| h.contains("Authorization") && h.contains("Last-Event-ID")));
    let (head, _) = request(port, "OPTIONS", &stream_path, &["Origin: http://evil.test"]).await;
    assert_eq!(head.status, 403);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (head, _) = request(
        port,
        "GET",
        &format!("/v1/conversations/{CONV}/messages/none"),
        &[&auth, "Origin: http://evil.test"],
    )
    .await;
    assert_eq!(head.header("access-control-allow-origin"), None);

    // --- at most max_streams at once -----------------------------------------------------------
    let one = Sse::open(port, &stream_path, TOKEN, &["Origin: http://app.test"]).await;
    assert_eq!(
        one.head.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    let two = Sse::open(port, &stream_path, TOKEN, &[]).await;
    let Err((head, body)) = Sse::try_open(port, &stream_path, TOKEN, &[]).await else {
        panic!("a third stream over max_streams = 2 was served");
    };
    assert_eq!(head.status, 503);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"],
        "too_many_streams"
    );
    drop(one); // the worker notices the client left and frees its place
    let three = common::eventually_async(WAIT, || async {
        Sse::try_open(port, &stream_path, TOKEN, &[]).await.ok()
    })
    .await
    .expect("a place frees when a client leaves");
    drop((two, three));

    // --- the snapshot's offset while a message streams -----------------------------------------
    let m1 = calls("m1", 2);
    let chunks = openai_chat_stream(&m1);
    let (open, end) = chunks.split_at(chunks.len() - 2); // without the finish and [DONE]
    for (seq, c) in open.iter().enumerate() {
        producer
            .chunk(CONV, "m1", "openai-chat", seq as u64, c)
            .await;
    }
    common::eventually_async(WAIT, || async {
        let mut log = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
        log.poll().await;
        (events_of(&log, "m1").len() == 2).then_some(())
    })
    .await
    .expect("both started events");
    events.poll().await;
    let started = events_of(&events, "m1");
    let (status, answer) = get_json(
        port,
        &format!("/v1/conversations/{CONV}/messages/m1"),
        TOKEN,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["snapshot"]["status"], "streaming");
    assert_eq!(answer["offset"].as_u64(), Some(started[1].0), "{answer}");
    assert_eq!(answer["conversation_id"], CONV);
    assert_eq!(answer["message_id"], "m1");

    // a page renders that snapshot and subscribes after its offset: it gets the rest, once
    let offset = answer["offset"].as_u64().unwrap();
    let mut page = Sse::open(
        port,
        &format!("{stream_path}?message=m1&after={offset}"),
        TOKEN,
        &[],
    )
    .await;
    // each input is followed at once by a request, so answers come while the worker applies
    // it and its events wait in the outbox: every answer must agree with the events up to its
    // offset
    let ask = || async {
        let (status, answer) = get_json(
            port,
            &format!("/v1/conversations/{CONV}/messages/m1"),
            TOKEN,
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let mut answers = Vec::new();
    for (i, c) in end.iter().enumerate() {
        producer
            .chunk(CONV, "m1", "openai-chat", (open.len() + i) as u64, c)
            .await;
        answers.push(ask().await);
    }
    producer.result(CONV, "m1", 0, "call_m1_0", "first").await;
    answers.push(ask().await);
    producer.result(CONV, "m1", 1, "call_m1_1", "second").await;
    loop {
        let answer = ask().await;
        let done = answer["snapshot"]["tool_results"].as_array().unwrap().len() == 2;
        answers.push(answer);
        if done {
            break;
        }
    }
    events.poll().await;
    let all = events_of(&events, "m1");
    for answer in &answers {
        let offset = answer["offset"].as_u64().unwrap();
        if let Err(e) = agrees(&answer["snapshot"], &all, offset) {
            panic!("a snapshot and its offset disagree: {e}\n{answer}\nevents: {all:?}");
        }
    }
    let last = all.last().unwrap().0;
    let frames = page.until_id(last, READ).await;
    let got: Vec<u64> = frames.iter().map(|f| f.id.unwrap()).collect();
    let want: Vec<u64> = all
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| *s > offset)
        .collect();
    assert_eq!(
        got, want,
        "after the offset: exactly the events the snapshot did not show"
    );
    assert!(frames.iter().all(|f| f.event != "tool_call.started"));

    // ?message= narrows: another message's events do not come
    producer.openai_stream(CONV, "m2", &calls("m2", 1)).await;
    common::eventually_async(WAIT, || async {
        let mut log = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
        log.poll().await;
        events_of(&log, "m2")
            .iter()
            .any(|(_, e)| e["type"] == "message.completed")
            .then_some(())
    })
    .await
    .expect("m2 completed");
    assert!(
        page.next(Duration::from_millis(500)).await.is_none(),
        "m2 is not m1's"
    );
    drop(page);
}
