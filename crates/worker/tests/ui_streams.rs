//! UI event streams against the real binary and a real nats-server:
//! - a message-scoped `ai-sdk` / `ag-ui` stream resumed at or after its message's
//!   `message.completed` ends the way the format ends a finished message (it used to hang,
//!   never seeing that event again), checked by the real client libraries in Node; one resumed
//!   there while a result is still missing waits for it, then ends; a `toolstream` stream
//!   resumed there stays a plain tail (it gets the later result);
//! - the stream metrics on `/metrics`: open streams, opened, closed behind (a client that takes
//!   no write for `ui.write_timeout`), rejected by the token and by `ui.max_streams`.
//!
//! Needs Node 20+ and npm (tests/ui-clients); without them the test fails saying so.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;
mod ui_support;

use common::{eventually_async, Call, Producer, StreamLog};
use ops_support::{sample, OpsWorker, WAIT};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolstream_testkit::NatsServer;
use ui_support::{check, request, Sse};

const READ: Duration = Duration::from_secs(30);

fn calls(msg: &str, n: usize) -> Vec<Call> {
    (0..n)
        .map(|i| Call {
            id: format!("call_{msg}_{i}"),
            name: "lookup".into(),
            args: json!({"q": format!("{msg} {i}")}),
        })
        .collect()
}

/// The `data:` values of an SSE body, in order.
fn datas(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// The `type`s of the JSON `data:` values (`[DONE]` as itself).
fn types(body: &str) -> Vec<String> {
    datas(body)
        .iter()
        .map(|d| match serde_json::from_str::<Value>(d) {
            Ok(v) => v["type"].as_str().unwrap().to_string(),
            Err(_) => d.clone(),
        })
        .collect()
}

/// The whole body of a stream that must end by itself.
async fn ended(port: u16, path: &str) -> String {
    let (head, body) = tokio::time::timeout(READ, request(port, "GET", path, &[]))
        .await
        .unwrap_or_else(|_| panic!("{path}: the stream did not end"));
    assert_eq!(head.status, 200, "{path}: {body}");
    body
}

/// The sequence of the first event of `conv`/`msg` of type `ty` (and result for `call`).
fn seq_of(events: &StreamLog, conv: &str, msg: &str, ty: &str, call: Option<&str>) -> u64 {
    events
        .all
        .iter()
        .find(|r| {
            let e = r.json();
            e["conversation_id"] == conv
                && e["message_id"] == msg
                && e["type"] == ty
                && call.is_none_or(|c| e["tool_result"]["tool_call_id"] == c)
        })
        .unwrap_or_else(|| panic!("no {ty} of {conv}/{msg}"))
        .seq
}

#[tokio::test]
async fn a_message_stream_resumed_after_its_message_completed_ends_instead_of_hanging() {
    const CONV: &str = "ui-resume-done";
    let clients = tokio::task::spawn_blocking(ui_support::ui_clients);
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
    worker.wait_status("/healthz", 200).await;
    let port = worker.metrics_port;
    let js = async_nats::jetstream::new(common::client(&server.url()).await);
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let count = |all: &[common::Read], msg: &str, ty: &str| {
        all.iter()
            .filter(|r| r.json()["message_id"] == msg && r.json()["type"] == ty)
            .count()
    };

    // m1: two calls; the message completes, then both results come
    producer.openai_stream(CONV, "m1", &calls("m1", 2)).await;
    events
        .until(
            WAIT,
            "m1 completed",
            |all| count(all, "m1", "message.completed") == 1,
            || worker.log(),
        )
        .await;
    producer.result(CONV, "m1", 0, "call_m1_0", "first").await;
    producer.result(CONV, "m1", 1, "call_m1_1", "second").await;
    events
        .until(
            WAIT,
            "m1's results",
            |all| count(all, "m1", "tool_result.completed") == 2,
            || worker.log(),
        )
        .await;
    let completed = seq_of(&events, CONV, "m1", "message.completed", None);
    let last = seq_of(
        &events,
        CONV,
        "m1",
        "tool_result.completed",
        Some("call_m1_1"),
    );
    assert!(completed < last);
    let clients = clients.await.unwrap();
    let path = |format: &str, after: u64| {
        format!("/v1/conversations/{CONV}/events?message=m1&format={format}&after={after}")
    };

    // resumed after the message's last event: nothing left but the end
    let body = ended(port, &path("ai-sdk", last)).await;
    assert_eq!(
        types(&body),
        ["start", "start-step", "finish-step", "finish", "[DONE]"],
        "{body}"
    );
    let read = check(&clients, "ai-sdk", &body);
    assert_eq!(
        read["done"], true,
        "the AI SDK reads a finished message: {read}"
    );
    let body = ended(port, &path("ag-ui", last)).await;
    assert_eq!(types(&body), ["RUN_STARTED", "RUN_FINISHED"], "{body}");
    check(&clients, "ag-ui", &body);
    // ... and by Last-Event-ID, what EventSource sends
    let (head, body) = tokio::time::timeout(
        READ,
        request(
            port,
            "GET",
            &format!("/v1/conversations/{CONV}/events?message=m1&format=ai-sdk"),
            &[&format!("Last-Event-ID: {last}")],
        ),
    )
    .await
    .expect("the stream resumed by Last-Event-ID ends");
    assert_eq!(head.status, 200);
    assert_eq!(
        types(&body).last().map(String::as_str),
        Some("[DONE]"),
        "{body}"
    );

    // resumed right after message.completed: the two results, then the end
    let body = ended(port, &path("ai-sdk", completed)).await;
    assert_eq!(
        types(&body),
        [
            "start",
            "start-step",
            "tool-output-available",
            "tool-output-available",
            "finish-step",
            "finish",
            "[DONE]"
        ],
        "{body}"
    );
    assert!(body.contains(&format!("id: {last}\n")), "{body}");
    // the AI SDK reads a resumed stream into the message it has: what the first connection
    // sent up to the resume point, then the resumed stream, is the whole message, finished
    let whole = ended(port, &path("ai-sdk", 0)).await;
    let at = whole
        .find(&format!("id: {completed}\n"))
        .expect("the resume point's id");
    let cut = at + whole[at..].find("\n\n").unwrap() + 2;
    let read = check(&clients, "ai-sdk", &format!("{}{body}", &whole[..cut]));
    assert_eq!(read["done"], true, "{read}");
    let states: Vec<&str> = read["message"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["state"].as_str())
        .collect();
    assert_eq!(states, ["output-available", "output-available"], "{read}");
    let body = ended(port, &path("ag-ui", completed)).await;
    assert_eq!(
        types(&body),
        [
            "RUN_STARTED",
            "TOOL_CALL_RESULT",
            "TOOL_CALL_RESULT",
            "RUN_FINISHED"
        ],
        "{body}"
    );
    check(&clients, "ag-ui", &body);

    // m2: completed, its result not yet there: a stream resumed after message.completed waits
    // for the result, then ends; a toolstream stream resumed there gets the result too
    producer.openai_stream(CONV, "m2", &calls("m2", 1)).await;
    events
        .until(
            WAIT,
            "m2 completed",
            |all| count(all, "m2", "message.completed") == 1,
            || worker.log(),
        )
        .await;
    let completed2 = seq_of(&events, CONV, "m2", "message.completed", None);
    let mut waiting = Sse::open(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m2&format=ai-sdk&after={completed2}"),
        "",
        &[],
    )
    .await;
    let mut tail = Sse::open(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m2&after={completed2}"),
        "",
        &[],
    )
    .await;
    let part = |data: String| match serde_json::from_str::<Value>(&data) {
        Ok(v) => v["type"].as_str().unwrap().to_string(),
        Err(_) => data,
    };
    let mut opening = Vec::new();
    for _ in 0..2 {
        opening.push(part(waiting.next(READ).await.expect("the opening").data));
    }
    assert_eq!(opening, ["start", "start-step"]);
    // still open: the result comes only now
    producer.result(CONV, "m2", 0, "call_m2_0", "third").await;
    let mut rest = Vec::new();
    while let Some(frame) = waiting.next(READ).await {
        rest.push(part(frame.data));
    }
    assert_eq!(
        rest,
        ["tool-output-available", "finish-step", "finish", "[DONE]"],
        "the result, then the end"
    );
    let frame = tail
        .next(READ)
        .await
        .expect("the toolstream stream is still open");
    assert_eq!(frame.event, "tool_result.completed");
    assert!(frame.id.is_some_and(|id| id > completed2));
}

/// Opens an event stream and never reads it, on a socket with a tiny receive buffer.
async fn slow_client(port: u16, path: &str, token: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    s
}

#[tokio::test]
async fn ui_stream_metrics_count_open_opened_closed_behind_and_rejected_streams() {
    const CONV: &str = "ui-metrics";
    const TOKEN: &str = "ui-metrics-token-0123456789";
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = OpsWorker::start_with_config(
        &server.url(),
        dir.path(),
        "ui.toml",
        &format!("[ui]\ntoken = \"{TOKEN}\"\nmax_streams = 2\nwrite_timeout = \"1s\"\n"),
    )
    .await;
    let port = worker.metrics_port;
    let w = &worker;
    let metric = move |name: &'static str| async move {
        let (status, body) = w.get("/metrics").await.expect("GET /metrics");
        assert_eq!(status, 200);
        sample(&body, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
    };
    const OPEN: &str = "toolstream_ui_streams_open";
    const OPENED: &str = "toolstream_ui_streams_opened_total";
    const BEHIND: &str = "toolstream_ui_streams_closed_behind_total";
    const AUTH: &str = "toolstream_ui_streams_rejected_total{reason=\"auth\"}";
    const LIMIT: &str = "toolstream_ui_streams_rejected_total{reason=\"limit\"}";
    for name in [OPEN, OPENED, BEHIND, AUTH, LIMIT] {
        assert_eq!(metric(name).await, 0.0, "{name} starts at 0");
    }
    let stream_path = format!("/v1/conversations/{CONV}/events");

    // refused by the token: a stream request counts, a snapshot request does not
    let (head, _) = request(port, "GET", &stream_path, &[]).await;
    assert_eq!(head.status, 401);
    let (head, _) = request(port, "GET", &stream_path, &["Authorization: Bearer nope"]).await;
    assert_eq!(head.status, 401);
    let (head, _) = request(
        port,
        "GET",
        &format!("/v1/conversations/{CONV}/messages/m"),
        &[],
    )
    .await;
    assert_eq!(head.status, 401);
    assert_eq!(metric(AUTH).await, 2.0);

    // two open, a third over max_streams refused
    let one = Sse::open(port, &stream_path, TOKEN, &[]).await;
    let two = Sse::open(port, &stream_path, TOKEN, &[]).await;
    assert_eq!((metric(OPEN).await, metric(OPENED).await), (2.0, 2.0));
    let Err((head, _)) = Sse::try_open(port, &stream_path, TOKEN, &[]).await else {
        panic!("a third stream over max_streams = 2 was served");
    };
    assert_eq!(head.status, 503);
    assert_eq!(metric(LIMIT).await, 1.0);
    assert_eq!(metric(OPENED).await, 2.0, "a refused stream was never open");
    drop((one, two));
    eventually_async(WAIT, || async { (metric(OPEN).await == 0.0).then_some(()) })
        .await
        .expect("the gauge falls when clients leave");
    assert_eq!(
        metric(BEHIND).await,
        0.0,
        "clients that leave are not behind"
    );

    // a client that reads nothing while ~10 MB of events wait for it: closed after
    // write_timeout, counted as behind
    let js = async_nats::jetstream::new(common::client(&server.url()).await);
    let producer = Producer::new(js.clone());
    let big = calls("m1", 12);
    producer.openai_stream(CONV, "m1", &big).await;
    let output = "x".repeat(800 * 1024);
    for (i, c) in big.iter().enumerate() {
        producer.result(CONV, "m1", i as u64, &c.id, &output).await;
    }
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the 12 large results",
            |all| {
                all.iter()
                    .filter(|r| r.json()["type"] == "tool_result.completed")
                    .count()
                    == 12
            },
            || worker.log(),
        )
        .await;
    let mut slow = slow_client(port, &stream_path, TOKEN).await;
    eventually_async(WAIT, || async {
        (metric(BEHIND).await == 1.0).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the slow client was never closed as behind:\n{}",
            worker.log()
        )
    });
    assert_eq!(metric(OPENED).await, 3.0);
    eventually_async(WAIT, || async { (metric(OPEN).await == 0.0).then_some(()) })
        .await
        .expect("the closed stream is no longer open");
    // the client then finds its connection closed after what was buffered
    let mut sink = vec![0u8; 1 << 20];
    let drained = tokio::time::timeout(READ, async {
        loop {
            match slow.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the worker closed the slow client's connection"
    );
}
