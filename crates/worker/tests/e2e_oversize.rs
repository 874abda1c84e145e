//! Nothing is dropped for its size (issue 8, items 3 and 8), against the real worker and
//! Debian's nats-server 2.9.10 at its default `max_payload` (1 MiB):
//!
//! - a dead letter that does not fit (an input body that filled `max_payload`, plus the
//!   dead-letter headers) still lands in the DLQ with its reason and headers, its body cut and
//!   `Toolstream-Body-*` headers naming the whole body in the payload bucket — on both paths:
//!   the worker's direct dead letter (`dead_letter_now`: a subject naming no message) and the
//!   store's dead-letter outbox rows published by the relay (an unknown provider, an
//!   undecodable chunk);
//! - a call with 1 MiB of arguments reaches an events subscriber as `tool_call.completed` with
//!   `payload_ref`, the object holds the whole event byte for byte, and the message query
//!   answers by reference too;
//! - a SIGKILL between storing that object and publishing the event loses nothing and
//!   duplicates nothing.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream::{self, object_store::ObjectStore};
use async_nats::HeaderMap;
use chunk_model::event::{hex, sha256};
use chunk_model::{event_id, Event, EventSubject, EventType, MessageSnapshot};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use toolstream_testkit::{current_server, debian_server, NatsServer};

const BUCKET: &str = "TOOLSTREAM_PAYLOADS";

/// Debian's nats-server 2.9.10 (the oldest release toolstream supports), default config.
fn server() -> NatsServer {
    let bin = debian_server().expect("Debian's nats-server 2.9.10");
    NatsServer::start_with(&bin).expect("nats-server")
}

async fn bucket(js: &jetstream::Context) -> ObjectStore {
    eventually_async(
        WAIT,
        || async move { js.get_object_store(BUCKET).await.ok() },
    )
    .await
    .unwrap_or_else(|| panic!("the worker did not provision {BUCKET}"))
}

async fn read_object(js: &jetstream::Context, name: &str) -> Vec<u8> {
    let mut object = bucket(js)
        .await
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("object {name}: {e}"));
    let mut bytes = Vec::new();
    object.read_to_end(&mut bytes).await.expect("read object");
    bytes
}

/// Fetches what a `payload_ref` names and checks its size and SHA-256.
async fn fetch_ref(js: &jetstream::Context, r: &Value) -> Vec<u8> {
    assert_eq!(r["bucket"], BUCKET, "{r}");
    let bytes = read_object(js, r["object"].as_str().expect("object name")).await;
    assert_eq!(r["size"].as_u64(), Some(bytes.len() as u64), "{r}");
    assert_eq!(
        r["sha256"].as_str(),
        Some(hex(&sha256(&bytes)).as_str()),
        "{r}"
    );
    bytes
}

/// A `write_file` call whose arguments are a little over 1 MiB of varied text (quotes,
/// backslashes, newlines and non-ASCII included, so a byte-exact comparison means something).
fn write_file_call() -> (Call, String) {
    let alphabet: Vec<char> = "abcdefghij KLMNOP\"\\\n\té€😀0123456789{}[],:"
        .chars()
        .collect();
    let mut content = String::with_capacity(1_100_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while content.len() < 1_048_576 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        content.push(alphabet[(x % alphabet.len() as u64) as usize]);
    }
    let call = Call {
        id: "call_write1".to_string(),
        name: "write_file".to_string(),
        args: json!({"path": "/srv/data/blob.txt", "content": content}),
    };
    (call, content)
}

/// Publishes the call as an OpenAI chat stream in 48 KiB fragments (each chunk fits).
async fn publish_big_call(producer: &Producer, conv: &str, msg: &str, call: &Call) {
    let chunks = openai_chat_stream_cut(std::slice::from_ref(call), |_| 48 * 1024);
    for (seq, body) in chunks.iter().enumerate() {
        producer
            .chunk(conv, msg, "openai-chat", seq as u64, body)
            .await;
    }
}

fn events_of<'a>(all: &'a [Read], conv: &str, msg: &str, ty: &str) -> Vec<&'a Read> {
    all.iter()
        .filter(|r| {
            let v = r.json();
            v["conversation_id"] == conv && v["message_id"] == msg && v["type"] == ty
        })
        .collect()
}

/// Checks a full `tool_call.completed` event against the call that was streamed.
fn assert_whole_call(full: &Event, call: &Call, content: &str) {
    assert!(full.payload_ref.is_none(), "the object is the whole event");
    let c = full.tool_call.as_ref().expect("tool_call");
    assert_eq!(
        (c.id.as_str(), c.name.as_str()),
        ("call_write1", "write_file")
    );
    assert_eq!(
        c.raw_arguments,
        call.args.to_string(),
        "raw arguments byte-exact"
    );
    assert_eq!(c.arguments, call.args, "parsed arguments");
    assert_eq!(c.arguments["content"].as_str(), Some(content));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_larger_than_max_payload_is_kept_with_its_reason_not_dropped() {
    let mut e2e = E2e::start_on(server(), toolstream_bin(), &[], &[]).await;
    let E2e {
        worker,
        js,
        producer,
        client,
        ..
    } = &mut e2e;
    let max_payload = client.server_info().max_payload;
    assert_eq!(max_payload, 1_048_576, "the server's default max_payload");

    // A body that fills max_payload exactly, with its input headers.
    let body_for = |headers: &[(&str, &str)], msg_id: &str| -> Vec<u8> {
        // what the server counts: "NATS/1.0\r\n", a "Name: value\r\n" line per header
        // (Nats-Msg-Id included), "\r\n", then the body
        let line = |k: &str, v: &str| k.len() + 2 + v.len() + 2;
        let header_bytes = 10
            + headers.iter().map(|(k, v)| line(k, v)).sum::<usize>()
            + line("Nats-Msg-Id", msg_id)
            + 2;
        let len = max_payload - header_bytes;
        (0..len)
            .map(|i| b"0123456789abcdefXYZ-{}"[(i * 7 + i / 13) % 22])
            .collect()
    };

    let publish_filling = |subject: &'static str, provider: &'static str, msg_id: &'static str| {
        let headers = [("Toolstream-Provider", provider), ("Toolstream-Seq", "0")];
        let body = body_for(&headers, msg_id);
        let producer = producer.clone();
        async move {
            let mut h = HeaderMap::new();
            for (k, v) in headers {
                h.insert(k, v);
            }
            producer.publish(subject, h, msg_id, &body).await;
            body
        }
    };
    // 1. the worker's direct dead letter (dead_letter_now): a subject that names no message
    let unroutable = publish_filling("toolstream.chunks.lonely", "openai-chat", "lonely:0").await;
    // 2. the store's dead letters, published by the relay: an unknown provider, and a chunk
    //    that does not decode
    let unknown = publish_filling("toolstream.chunks.cx.mx", "no-such-llm", "cx:mx:0").await;
    let undecodable = publish_filling("toolstream.chunks.cy.my", "openai-chat", "cy:my:0").await;

    let cases = [
        (
            "toolstream.dlq.unroutable",
            "toolstream.chunks.lonely",
            &unroutable,
            "unroutable_subject",
            1u64,
        ),
        (
            "toolstream.dlq.cx.mx",
            "toolstream.chunks.cx.mx",
            &unknown,
            "unknown_provider",
            2u64,
        ),
        (
            "toolstream.dlq.cy.my",
            "toolstream.chunks.cy.my",
            &undecodable,
            "",
            3u64,
        ),
    ];
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    dlq.until(
        WAIT,
        "the three oversized dead letters",
        |all| {
            cases
                .iter()
                .all(|(subject, ..)| all.iter().any(|r| r.subject == *subject))
        },
        || worker.log(),
    )
    .await;

    for (subject, input_subject, original, reason_prefix, seq) in cases {
        let dead: Vec<&Read> = dlq.all.iter().filter(|r| r.subject == subject).collect();
        assert_eq!(dead.len(), 1, "{subject}: exactly one dead letter");
        let dead = dead[0];
        let reason = dead.header("Toolstream-Reason").unwrap_or_default();
        assert!(
            !reason.is_empty() && reason.starts_with(reason_prefix),
            "{subject}: reason kept: {reason:?}"
        );
        assert!(
            !reason.contains("too_large"),
            "{subject}: the input's own reason: {reason}"
        );
        assert_eq!(
            dead.header("Toolstream-Subject").as_deref(),
            Some(input_subject)
        );
        assert_eq!(dead.header("Toolstream-Stream-Seq"), Some(seq.to_string()));
        assert_eq!(
            dead.header("Toolstream-Body-Truncated"),
            Some(original.len().to_string()),
            "{subject}: says the body was cut and its original size"
        );
        assert_eq!(
            dead.header("Toolstream-Body-Sha256"),
            Some(hex(&sha256(original)))
        );
        assert!(
            !dead.payload.is_empty() && dead.payload.len() < original.len(),
            "{subject}: a cut body of {} bytes",
            dead.payload.len()
        );
        assert!(
            original.starts_with(&dead.payload),
            "{subject}: the body's first bytes"
        );
        let reference = dead
            .header("Toolstream-Body-Ref")
            .unwrap_or_else(|| panic!("{subject}: the whole body is stored"));
        let object = reference
            .strip_prefix(&format!("{BUCKET}/"))
            .unwrap_or_else(|| panic!("bad ref {reference}"));
        assert!(
            read_object(js, object).await == *original,
            "{subject}: the stored body is byte-exact"
        );
    }

    // terminated once, never redelivered
    wait_settled(js, "toolstream")
        .await
        .unwrap_or_else(|e| panic!("inputs not settled: {e}"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    dlq.poll().await;
    assert_eq!(dlq.all.len(), 3, "no second dead letter");
    assert!(worker.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_1_mib_of_arguments_reaches_subscribers_as_completed_not_the_dlq() {
    big_call_reaches_subscribers(server()).await;
}

/// The same on the pinned current nats-server release (scripts/test.sh installs it), so the
/// object store use holds on both ends of the supported range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_1_mib_of_arguments_reaches_subscribers_on_the_current_nats_server_too() {
    let bin = current_server().expect("the pinned current nats-server");
    big_call_reaches_subscribers(NatsServer::start_with(&bin).expect("nats-server")).await;
}

async fn big_call_reaches_subscribers(server: NatsServer) {
    let mut e2e = E2e::start_on(server, toolstream_bin(), &[], &[]).await;
    let E2e {
        worker,
        js,
        producer,
        client,
        server,
        ..
    } = &mut e2e;
    // a UI: a plain subscription on the conversation's events
    let mut ui = client
        .subscribe("toolstream.events.cbig.>")
        .await
        .expect("subscribe");
    client.flush().await.unwrap();

    let (call, content) = write_file_call();
    assert!(call.args.to_string().len() > 1_048_576);
    publish_big_call(producer, "cbig", "mbig", &call).await;
    producer
        .openai_stream(
            "csmall",
            "msmall",
            &[Call {
                id: "call_s".into(),
                name: "lookup".into(),
                args: json!({"q": 1}),
            }],
        )
        .await;

    // the subscriber sees started, completed (small form with payload_ref), message.completed
    let mut seen: Vec<Value> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !seen.iter().any(|v| v["type"] == "message.completed") {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, futures::StreamExt::next(&mut ui))
            .await
            .unwrap_or_else(|_| panic!("events so far: {seen:#?}\n{}", tail(&worker.log(), 40)))
            .expect("subscription open");
        assert!(msg.payload.len() <= 1_048_576);
        seen.push(serde_json::from_slice(&msg.payload).expect("event JSON"));
    }
    let types: Vec<&str> = seen.iter().filter_map(|v| v["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "tool_call.started",
            "tool_call.completed",
            "message.completed"
        ]
    );
    let small = &seen[1];
    assert_eq!(
        small["event_id"],
        event_id(
            "cbig",
            "mbig",
            EventSubject::Call(0),
            EventType::ToolCallCompleted
        )
    );
    assert_eq!(small["tool_call"]["name"], "write_file");
    assert_eq!(small["tool_call"]["arguments"], Value::Null);
    assert_eq!(small["payload_ref"]["object"], small["event_id"]);
    let object = fetch_ref(js, &small["payload_ref"]).await;
    let full: Event = serde_json::from_slice(&object).expect("the object is the event");
    assert_eq!(full.event_type, EventType::ToolCallCompleted);
    assert_eq!(
        serde_json::to_value(&full.event_id).unwrap(),
        small["event_id"]
    );
    assert_whole_call(&full, &call, &content);
    // message.completed is offloaded the same way and lists the whole call
    let message: Event =
        serde_json::from_slice(&fetch_ref(js, &seen[2]["payload_ref"]).await).expect("event");
    let calls = message.calls.expect("calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.raw_arguments, call.args.to_string());

    // `toolstream tail --full` prints the whole events
    let url = server.url();
    let tailed = tokio::task::spawn_blocking(move || {
        std::process::Command::new(toolstream_bin())
            .args(["tail", "--nats-url", &url, "--conversation", "cbig"])
            .args(["--from-start", "--full", "--count", "3", "--timeout", "60s"])
            .output()
            .expect("run toolstream tail")
    })
    .await
    .unwrap();
    assert!(
        tailed.status.success(),
        "{}",
        String::from_utf8_lossy(&tailed.stderr)
    );
    let lines: Vec<&[u8]> = tailed.stdout.split(|b| *b == b'\n').collect();
    assert_eq!(
        &lines[1],
        &object.as_slice(),
        "tail --full prints the stored event"
    );
    let printed: Event = serde_json::from_slice(lines[2]).expect("message.completed");
    assert!(printed.payload_ref.is_none() && printed.calls.is_some());

    // the query answers by reference: the stored snapshot with the whole call
    let reply = client
        .request("toolstream.query.message.cbig.mbig", "".into())
        .await
        .expect("query reply");
    assert!(
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error"))
            .is_none(),
        "{:?}",
        reply.headers
    );
    let reply: Value = serde_json::from_slice(&reply.payload).expect("reply JSON");
    let message_ref = reply["payload_ref"].clone();
    let snapshot: MessageSnapshot =
        serde_json::from_slice(&fetch_ref(js, &message_ref).await).expect("snapshot");
    assert_eq!(snapshot.calls.len(), 1);
    assert_eq!(
        snapshot.calls[0].tool_call.raw_arguments,
        call.args.to_string()
    );
    assert_eq!(snapshot.calls[0].tool_call.arguments, call.args);
    // so does the history of the conversation, which carries the arguments too
    // (rendering 1 MiB of arguments takes seconds in a debug build: a longer timeout)
    let reply = client
        .send_request(
            "toolstream.query.history.cbig",
            async_nats::Request::new()
                .payload("".into())
                .timeout(Some(WAIT)),
        )
        .await
        .unwrap_or_else(|e| panic!("history reply: {e}\n{}", tail(&worker.log(), 30)));
    let reply: Value = serde_json::from_slice(&reply.payload).expect("reply JSON");
    let history = fetch_ref(js, &reply["payload_ref"]).await;
    let history: Value = serde_json::from_slice(&history).expect("history JSON");
    assert!(
        history
            .to_string()
            .contains(&serde_json::to_string(&call.args.to_string()).unwrap()),
        "the history renders the whole arguments"
    );
    // asking again reuses the reply's object: one object per distinct request, not per ask
    let again = client
        .request("toolstream.query.message.cbig.mbig", "".into())
        .await
        .expect("query reply");
    let again: Value = serde_json::from_slice(&again.payload).expect("reply JSON");
    assert_eq!(again["payload_ref"], message_ref);
    let mut objects = 0;
    let mut list = bucket(js).await.list().await.expect("list");
    while let Some(info) = futures::StreamExt::next(&mut list).await {
        info.expect("object info");
        objects += 1;
    }
    assert_eq!(
        objects, 4,
        "two events, one message reply, one history reply"
    );
    // a small message's query still answers inline
    let reply = client
        .request("toolstream.query.message.csmall.msmall", "".into())
        .await
        .expect("query reply");
    let snapshot: MessageSnapshot = serde_json::from_slice(&reply.payload).expect("inline");
    assert_eq!(snapshot.calls[0].tool_call.name, "lookup");

    // the events stream holds them once each, nothing went to the DLQ
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the small message completes",
            |all| !events_of(all, "csmall", "msmall", "message.completed").is_empty(),
            || worker.log(),
        )
        .await;
    assert_each_event_once(&events.all);
    assert_eq!(
        events_of(&events.all, "cbig", "mbig", "tool_call.completed").len(),
        1
    );
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    dlq.poll().await;
    assert!(
        dlq.all.is_empty(),
        "nothing dead-lettered: {:?}",
        dlq.all.len()
    );
    assert!(worker.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_storing_an_oversized_event_and_publishing_it_loses_and_duplicates_nothing()
{
    let failpoint = [("TOOLSTREAM_FAILPOINT_HOLD_AFTER_PAYLOAD_PUTS", "1")];
    let mut e2e = E2e::start_on(server(), toolstream_bin(), &[], &failpoint).await;
    let (url, store_dir) = (e2e.server.url(), e2e.store());
    let (worker, js, producer) = e2e.parts();
    let (call, content) = write_file_call();
    publish_big_call(producer, "ccrash", "mcrash", &call).await;

    // the relay stored the completed event's object and holds before publishing it
    let held = &*worker;
    eventually_async(WAIT, || async move {
        held.current_log().contains("failpoint: payload stored")
    })
    .await
    .unwrap_or_else(|| panic!("failpoint not reached:\n{}", tail(&worker.log(), 40)));
    let completed_id = event_id(
        "ccrash",
        "mcrash",
        EventSubject::Call(0),
        EventType::ToolCallCompleted,
    );
    let before = bucket(js)
        .await
        .info(&completed_id)
        .await
        .expect("object stored");
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events.poll().await;
    assert!(
        !events_of(&events.all, "ccrash", "mcrash", "tool_call.started").is_empty(),
        "started was published before"
    );
    assert!(
        events_of(&events.all, "ccrash", "mcrash", "tool_call.completed").is_empty(),
        "the event is not published yet"
    );

    worker.kill(); // SIGKILL in the window
    let mut worker = Worker::start(&url, &store_dir, &[]);
    events
        .until(
            WAIT,
            "the held message completes after the restart",
            |all| !events_of(all, "ccrash", "mcrash", "message.completed").is_empty(),
            || worker.log(),
        )
        .await;

    assert_each_event_once(&events.all);
    let completed = events_of(&events.all, "ccrash", "mcrash", "tool_call.completed");
    assert_eq!(completed.len(), 1, "published exactly once");
    let small = completed[0].json();
    assert_eq!(small["event_id"], completed_id.as_str());
    let full: Event =
        serde_json::from_slice(&fetch_ref(js, &small["payload_ref"]).await).expect("event");
    assert_whole_call(&full, &call, &content);
    // the object was not written again: same upload, and only the two events' objects exist
    let after = bucket(js).await.info(&completed_id).await.expect("object");
    assert_eq!(
        after.nuid, before.nuid,
        "the stored object was reused, not rewritten"
    );
    let mut names = Vec::new();
    let mut list = bucket(js).await.list().await.expect("list");
    while let Some(info) = futures::StreamExt::next(&mut list).await {
        names.push(info.expect("object info").name);
    }
    names.sort();
    let message_id = event_id(
        "ccrash",
        "mcrash",
        EventSubject::Message,
        EventType::MessageCompleted,
    );
    let mut expected = vec![completed_id.clone(), message_id];
    expected.sort();
    assert_eq!(
        names, expected,
        "one object per oversized event, none twice"
    );
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    dlq.poll().await;
    assert!(dlq.all.is_empty(), "nothing dead-lettered");
    assert!(worker.terminate());
}
