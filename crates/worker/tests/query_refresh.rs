//! The query service against the real binary and a real nats-server: "refresh shows the same
//! as live" (the stored message equals what the events said), provider-valid history, coded
//! errors instead of silence, and service discovery.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;

use common::{anthropic_stream, openai_chat_stream, Call, Producer, StreamLog};
use ops_support::{query, OpsWorker, WAIT};
use serde_json::{json, Value};
use toolstream_testkit::NatsServer;

/// A nats-server, a worker whose `/healthz` answers 200, and a client; dropped in this order.
struct Running {
    worker: OpsWorker,
    client: async_nats::Client,
    _dir: tempfile::TempDir,
    _server: NatsServer,
}

impl Running {
    async fn start() -> Running {
        let server = NatsServer::start().expect("nats-server");
        let dir = tempfile::tempdir().expect("tempdir");
        let worker = OpsWorker::start(&server.url(), &dir.path().join("data"));
        worker.wait_status("/healthz", 200).await;
        let client = common::client(&server.url()).await;
        Running {
            worker,
            client,
            _dir: dir,
            _server: server,
        }
    }
}

fn call(id: &str, name: &str, args: Value) -> Call {
    Call {
        id: id.into(),
        name: name.into(),
        args,
    }
}

/// Streams two messages into conversation `conv` (openai-chat with two parallel calls,
/// anthropic with one), results for two of the calls (one long), and waits for every event.
async fn stream_conversation(
    producer: &Producer,
    events: &mut StreamLog,
    worker: &OpsWorker,
    conv: &str,
) -> (Vec<Call>, Vec<Call>, String) {
    let m1 = vec![
        call(
            "call_a1",
            "get_weather",
            json!({"city": "Paris", "unit": "celsius"}),
        ),
        call("call_b2", "get_time", json!({"tz": "Europe/Paris"})),
    ];
    let m2 = vec![call(
        "toolu_01X",
        "search_docs",
        json!({"q": "sled flush", "k": 3}),
    )];
    for (seq, chunk) in openai_chat_stream(&m1).iter().enumerate() {
        producer
            .chunk(conv, "m1", "openai-chat", seq as u64, chunk)
            .await;
    }
    producer
        .result(conv, "m1", 0, "call_a1", "18°C, sunny")
        .await;
    for (seq, chunk) in anthropic_stream(&m2).iter().enumerate() {
        producer
            .chunk(conv, "m2", "anthropic", seq as u64, chunk)
            .await;
    }
    let long = "result line with some detail. ".repeat(10); // 300 chars
    producer.result(conv, "m2", 0, "toolu_01X", &long).await;
    let conv_owned = conv.to_string();
    events
        .until(
            WAIT,
            "both messages completed and both results",
            |all| {
                let of_conv: Vec<Value> = all
                    .iter()
                    .map(|r| r.json())
                    .filter(|e| e["conversation_id"] == conv_owned.as_str())
                    .collect();
                let count = |t: &str| of_conv.iter().filter(|e| e["type"] == t).count();
                count("message.completed") == 2 && count("tool_result.completed") == 2
            },
            || worker.log(),
        )
        .await;
    (m1, m2, long)
}

fn events_of(events: &StreamLog, conv: &str, msg: &str) -> Vec<Value> {
    events
        .all
        .iter()
        .map(|r| r.json())
        .filter(|e| e["conversation_id"] == conv && e["message_id"] == msg)
        .collect()
}

#[tokio::test]
async fn query_message_after_completion_equals_what_the_events_said() {
    let running = Running::start().await;
    let (worker, client) = (&running.worker, &running.client);
    let js = async_nats::jetstream::new(client.clone());
    ops_support::wait_provisioned(&js, 1).await;
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    stream_conversation(&producer, &mut events, worker, "refresh1").await;

    for msg in ["m1", "m2"] {
        let live = events_of(&events, "refresh1", msg);
        let stored = query(
            client,
            &format!("toolstream.query.message.refresh1.{msg}"),
            "",
        )
        .await
        .unwrap_or_else(|e| panic!("query {msg}: {e:?}\n{}", worker.log()));
        let done = live
            .iter()
            .find(|e| e["type"] == "message.completed")
            .expect("message.completed");
        assert_eq!(stored["conversation_id"], "refresh1");
        assert_eq!(stored["message_id"], msg);
        assert_eq!(stored["status"], "completed");
        assert_eq!(stored["provider"], done["provider"]);
        assert_eq!(stored["finish_reason"], done["finish_reason"]);
        // The full list of calls is exactly what message.completed carried ...
        assert_eq!(stored["calls"], done["calls"], "{msg}: calls differ");
        // ... and each call exactly what its tool_call.completed said.
        for e in live.iter().filter(|e| e["type"] == "tool_call.completed") {
            let id = &e["tool_call"]["id"];
            let stored_call = stored["calls"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| &c["tool_call"]["id"] == id)
                .unwrap_or_else(|| panic!("{msg}: call {id} missing from the query answer"));
            assert_eq!(stored_call["status"], "completed");
            assert_eq!(stored_call["tool_call"], e["tool_call"], "{msg}: call {id}");
        }
        // Results: the same set the tool_result.completed events published.
        let mut live_results: Vec<Value> = live
            .iter()
            .filter(|e| e["type"] == "tool_result.completed")
            .map(|e| e["tool_result"].clone())
            .collect();
        let mut stored_results = stored["tool_results"].as_array().unwrap().clone();
        let key = |v: &Value| v["tool_call_id"].as_str().unwrap_or_default().to_string();
        live_results.sort_by_key(key);
        stored_results.sort_by_key(key);
        assert_eq!(stored_results, live_results, "{msg}: results differ");
        assert_eq!(stored_results.len(), 1);
    }
}

#[tokio::test]
async fn query_history_is_provider_valid_with_truncated_results_and_no_orphans() {
    let running = Running::start().await;
    let (worker, client) = (&running.worker, &running.client);
    let js = async_nats::jetstream::new(client.clone());
    ops_support::wait_provisioned(&js, 1).await;
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let (m1, m2, _long) = stream_conversation(&producer, &mut events, worker, "hist1").await;

    let history = query(
        client,
        "toolstream.query.history.hist1",
        r#"{"target":"openai-chat","max_result_chars":100}"#,
    )
    .await
    .unwrap_or_else(|e| panic!("history: {e:?}\n{}", worker.log()));
    let messages = history["messages"].as_array().expect("messages");
    let mut announced = Vec::new();
    let mut answered = Vec::new();
    for m in messages {
        match m["role"].as_str() {
            Some("assistant") => {
                for tc in m["tool_calls"].as_array().into_iter().flatten() {
                    assert_eq!(tc["type"], "function", "{tc}");
                    let args = tc["function"]["arguments"]
                        .as_str()
                        .unwrap_or_else(|| panic!("arguments must be a string: {tc}"));
                    let name = tc["function"]["name"].as_str().unwrap();
                    let want = m1
                        .iter()
                        .chain(&m2)
                        .find(|c| c.name == name)
                        .expect("known call");
                    assert_eq!(serde_json::from_str::<Value>(args).unwrap(), want.args);
                    announced.push(tc["id"].as_str().unwrap().to_string());
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap().to_string();
                assert!(
                    announced.contains(&id),
                    "tool message {id} answers no earlier call (orphan): {messages:#?}"
                );
                let content = m["content"].as_str().unwrap();
                assert!(content.chars().count() <= 100, "not truncated: {content}");
                answered.push(id);
            }
            _ => {}
        }
    }
    announced.sort();
    answered.sort();
    assert_eq!(announced.len(), 3, "{messages:#?}");
    assert_eq!(
        answered, announced,
        "every call gets exactly one tool message (a placeholder if none was recorded)"
    );
    let all_text = serde_json::to_string(messages).unwrap();
    assert!(all_text.contains("... [truncated]"), "{all_text}");
    assert!(all_text.contains("18°C, sunny"));
    assert_eq!(history["truncated_results"], 1);
    assert_eq!(history["placeholders"], 1);

    // Another target from the same store: Anthropic blocks.
    let anthropic = query(
        client,
        "toolstream.query.history.hist1",
        r#"{"target":"anthropic"}"#,
    )
    .await
    .expect("anthropic history");
    let text = serde_json::to_string(&anthropic["messages"]).unwrap();
    assert!(text.contains("\"type\":\"tool_use\""), "{text}");
    assert!(text.contains("\"type\":\"tool_result\""), "{text}");

    // An empty body means openai-chat with the defaults.
    let default = query(client, "toolstream.query.history.hist1", "")
        .await
        .expect("default history");
    assert_eq!(default["target"], "openai-chat");
    assert_eq!(
        default["truncated_results"], 0,
        "default limit is 500 chars"
    );
}

#[tokio::test]
async fn bad_queries_get_coded_service_errors_not_silence() {
    let running = Running::start().await;
    let client = &running.client;

    let err = query(client, "toolstream.query.message.nope.m1", "")
        .await
        .expect_err("unknown message");
    assert_eq!(err.code, 404, "{err:?}");
    assert!(err.status.contains("\"m1\""), "{err:?}");

    let err = query(client, "toolstream.query.history.nope", "")
        .await
        .expect_err("unknown conversation");
    assert_eq!(err.code, 404, "{err:?}");

    for body in [
        "{not json",
        r#"{"target":"no-such-provider"}"#,
        r#"{"max_results_chars":5}"#,
    ] {
        let err = query(client, "toolstream.query.history.nope", body)
            .await
            .expect_err("bad body");
        assert_eq!(err.code, 400, "{body}: {err:?}");
    }
}

#[tokio::test]
async fn query_service_shows_up_in_nats_service_discovery() {
    let running = Running::start().await;
    let client = &running.client;

    let ping = query(client, "$SRV.PING.toolstream", "")
        .await
        .expect("ping");
    assert_eq!(ping["name"], "toolstream");
    assert_eq!(ping["version"], env!("CARGO_PKG_VERSION"));

    let info = query(client, "$SRV.INFO.toolstream", "")
        .await
        .expect("info");
    let mut subjects: Vec<&str> = info["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    subjects.sort();
    assert_eq!(
        subjects,
        ["toolstream.query.history.*", "toolstream.query.message.*.*"]
    );

    let _ = query(client, "toolstream.query.message.c.m", "").await;
    let stats = query(client, "$SRV.STATS.toolstream", "")
        .await
        .expect("stats");
    let message = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "message")
        .expect("message endpoint stats");
    assert_eq!(message["num_requests"], 1, "{stats}");
    assert_eq!(
        message["num_errors"], 1,
        "the unknown message was an error: {stats}"
    );
}
