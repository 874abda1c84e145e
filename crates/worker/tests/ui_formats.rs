//! `?format=ai-sdk` and `?format=ag-ui` against the real binary and a real nats-server, read by
//! the real client libraries in Node (tests/ui-clients: `ai`'s `uiMessageChunkSchema` and
//! `readUIMessageStream`, `@ag-ui/core`'s `EventSchemas`): a message with a completed call and
//! its result, a completed call whose tool failed, and a call with broken JSON ends in the
//! expected tool part states with the expected inputs and outputs. Also: on a loopback listener
//! without `ui.token` the API needs no token. With argument previews on
//! (`[assembler.previews]`), the same readers get the argument text as it arrived: AI SDK
//! `tool-input-delta`s (the reader shows the call `input-streaming` with a partial input) and
//! AG-UI `TOOL_CALL_ARGS` deltas, each concatenating to the final arguments. One server and
//! one worker per test.
//!
//! Needs Node 20+ and npm; without them the test fails saying so (never skipped).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;
mod ui_support;

use common::Producer;
use ops_support::OpsWorker;
use serde_json::{json, Value};
use std::time::Duration;
use toolstream_testkit::{openai, NatsServer};
use ui_support::{check, request, ui_clients};

const CONV: &str = "ui-formats";

/// Publishes message `msg` of [`CONV`] as an OpenAI chat completion, chunk by chunk in order:
/// the role chunk, the tool-call chunks `calls`, the `tool_calls` finish and `[DONE]`.
async fn publish_completion(producer: &Producer, msg: &str, calls: Vec<Vec<u8>>) {
    let mut chunks = vec![openai::role_chunk()];
    chunks.extend(calls);
    chunks.push(openai::finish_chunk("tool_calls"));
    chunks.push(openai::DONE.to_vec());
    for (seq, c) in chunks.iter().enumerate() {
        producer
            .chunk(CONV, msg, "openai-chat", seq as u64, c)
            .await;
    }
}

/// Publishes message `msg`: call 0 completes with `{"city":"Paris"}`, call 1 completes with
/// `{"q":1}`, call 2 has broken JSON; then a result for 0 and a failed result for 1.
async fn publish(producer: &Producer, msg: &str) {
    let calls = vec![
        openai::call_start(0, "call_ok", "get_weather"),
        openai::args_chunk(0, "{\"city\":"),
        openai::args_chunk(0, "\"Paris\"}"),
        openai::call_start(1, "call_fails", "search"),
        openai::args_chunk(1, "{\"q\":1}"),
        openai::call_start(2, "call_bad", "book"),
        openai::args_chunk(2, "{\"date\": 2026-12-01}"),
    ];
    publish_completion(producer, msg, calls).await;
    producer.result(CONV, msg, 0, "call_ok", "18°C").await;
    let failed =
        json!({"tool_call_id": "call_fails", "output": "search is down", "is_error": true});
    producer
        .publish(
            &format!("toolstream.results.{CONV}.{msg}"),
            async_nats::HeaderMap::new(),
            &format!("{CONV}:{msg}:rfail"),
            failed.to_string().as_bytes(),
        )
        .await;
}

/// The whole body of a stream that ends by itself (the message is done).
async fn body(port: u16, path: &str) -> (ui_support::Head, String) {
    let (head, body) =
        tokio::time::timeout(Duration::from_secs(60), request(port, "GET", path, &[]))
            .await
            .expect("the stream ends once the message is done");
    assert_eq!(head.status, 200, "{path}: {body}");
    (head, body)
}

#[tokio::test]
async fn ai_sdk_and_ag_ui_streams_are_read_by_the_real_client_libraries() {
    let clients = tokio::task::spawn_blocking(ui_clients);
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    // loopback and no [ui] token: no authentication needed
    let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
    worker.wait_status("/healthz", 200).await;
    let port = worker.metrics_port;
    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    let producer = Producer::new(js.clone());
    publish(&producer, "m1").await;
    let clients = clients.await.unwrap();

    // --- ai-sdk ---------------------------------------------------------------------------
    let (head, sse) = body(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m1&format=ai-sdk"),
    )
    .await;
    assert_eq!(head.header("x-vercel-ai-ui-message-stream"), Some("v1"));
    let read = check(&clients, "ai-sdk", &sse);
    assert_eq!(read["done"], true, "ends with [DONE]");
    let message = &read["message"];
    assert_eq!(message["id"], "m1");
    let tools: Vec<&Value> = message["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"].as_str().unwrap().starts_with("tool-"))
        .collect();
    let part = |id: &str| {
        *tools
            .iter()
            .find(|p| p["toolCallId"] == id)
            .unwrap_or_else(|| panic!("no part for {id}: {message}"))
    };
    assert_eq!(tools.len(), 3, "{message}");
    assert_eq!(part("call_ok")["type"], "tool-get_weather");
    assert_eq!(part("call_ok")["state"], "output-available");
    assert_eq!(part("call_ok")["input"], json!({"city": "Paris"}));
    assert_eq!(part("call_ok")["output"], "18°C");
    assert_eq!(part("call_fails")["state"], "output-error");
    assert_eq!(part("call_fails")["input"], json!({"q": 1}));
    assert_eq!(part("call_fails")["errorText"], "search is down");
    assert_eq!(part("call_bad")["state"], "output-error", "{message}");
    assert_eq!(part("call_bad")["rawInput"], "{\"date\": 2026-12-01}");
    assert!(part("call_bad")["errorText"]
        .as_str()
        .unwrap()
        .contains("invalid_json"));

    // --- ag-ui ----------------------------------------------------------------------------
    let (_, sse) = body(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m1&format=ag-ui"),
    )
    .await;
    let read = check(&clients, "ag-ui", &sse);
    let events = read["events"].as_array().unwrap();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"RUN_STARTED"));
    assert_eq!(types.last(), Some(&"RUN_FINISHED"));
    let of = |id: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["toolCallId"] == id || e["value"]["toolCallId"] == id)
            .collect()
    };
    let kinds = |id: &str| -> Vec<String> {
        of(id)
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        kinds("call_ok"),
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT"
        ]
    );
    let args: String = of("call_ok")
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(of("call_ok")[3]["content"], "18°C");
    assert_eq!(
        kinds("call_fails"),
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "CUSTOM"
        ]
    );
    assert_eq!(
        kinds("call_bad"),
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "CUSTOM"
        ]
    );
    let custom = of("call_bad")[3];
    assert_eq!(custom["name"], "toolstream.tool_call.invalid");
    assert_eq!(custom["value"]["reason"], "invalid_json");

    // a format needs one message
    let (head, _) = request(
        port,
        "GET",
        &format!("/v1/conversations/{CONV}/events?format=ai-sdk"),
        &[],
    )
    .await;
    assert_eq!(head.status, 400);
}

/// The arguments of [`publish_streamed`]'s call, as the fragments concatenate.
const STREAMED: &str = "{\"city\":\"Paris\", \"days\": 3, \"note\": \"a \\\"quoted\\\" word\"}";

/// Publishes message `msg`: call `call_live` whose arguments ([`STREAMED`]) arrive in small
/// fragments, then its result.
async fn publish_streamed(producer: &Producer, msg: &str) {
    let mut calls = vec![openai::call_start(0, "call_live", "plan_trip")];
    let mut rest = STREAMED;
    while !rest.is_empty() {
        let cut = rest.char_indices().nth(5).map_or(rest.len(), |(i, _)| i);
        calls.push(openai::args_chunk(0, &rest[..cut]));
        rest = &rest[cut..];
    }
    publish_completion(producer, msg, calls).await;
    producer.result(CONV, msg, 0, "call_live", "booked").await;
}

#[tokio::test]
async fn with_previews_the_real_client_libraries_read_the_arguments_as_they_arrive() {
    let clients = tokio::task::spawn_blocking(ui_clients);
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = OpsWorker::start_with_config(
        &server.url(),
        dir.path(),
        "toolstream.toml",
        // a delta after every fragment
        "[assembler.previews]\nenabled = true\nmin_bytes = 1\nmin_interval_ms = 0\n",
    )
    .await;
    let port = worker.metrics_port;
    let client = common::client(&server.url()).await;
    let producer = Producer::new(async_nats::jetstream::new(client.clone()));
    publish_streamed(&producer, "m2").await;
    let clients = clients.await.unwrap();
    let want: Value = serde_json::from_str(STREAMED).unwrap();

    // --- ai-sdk ---------------------------------------------------------------------------
    let (_, sse) = body(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m2&format=ai-sdk"),
    )
    .await;
    let read = check(&clients, "ai-sdk", &sse);
    assert_eq!(read["done"], true);
    assert_eq!(
        read["deltas"]["call_live"], STREAMED,
        "the tool-input-deltas concatenate to the final input text"
    );
    assert!(
        sse.matches("\"tool-input-delta\"").count() >= 5,
        "a delta per fragment: {sse}"
    );
    let streaming: Vec<&Value> = read["streaming"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["toolCallId"] == "call_live")
        .collect();
    assert!(
        streaming
            .iter()
            .any(|p| p["input"]["city"] == "Paris" && p["input"].get("note").is_none()),
        "the reader showed a partial input: {streaming:?}"
    );
    let part = read["message"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCallId"] == "call_live")
        .unwrap();
    assert_eq!(part["state"], "output-available", "{part}");
    assert_eq!(
        part["input"], want,
        "the final input is the completed arguments"
    );
    assert_eq!(part["output"], "booked");

    // --- ag-ui ----------------------------------------------------------------------------
    let (_, sse) = body(
        port,
        &format!("/v1/conversations/{CONV}/events?message=m2&format=ag-ui"),
    )
    .await;
    let read = check(&clients, "ag-ui", &sse);
    let events: Vec<&Value> = read["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["toolCallId"] == "call_live")
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"TOOL_CALL_START"));
    let args: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(args.len() >= 5, "a TOOL_CALL_ARGS per fragment: {types:?}");
    assert_eq!(
        args.concat(),
        STREAMED,
        "the deltas concatenate to the args"
    );
    let end = types.iter().position(|t| *t == "TOOL_CALL_END").unwrap();
    assert!(
        types[..end].iter().all(|t| *t != "TOOL_CALL_RESULT"),
        "{types:?}"
    );
    assert_eq!(types.last(), Some(&"TOOL_CALL_RESULT"));
}
