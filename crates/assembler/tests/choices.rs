//! OpenAI chat with `n > 1`: every choice is its own message (`<msg>` for choice 0,
//! `<msg>~choice<k>` for choice k), assembled, ended and completed on its own, and every one
//! ends with the stream (`[DONE]`, an explicit end, a timeout). It used to be choice 0 only:
//! the other choices' calls were never seen.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Config, Control, Input, InputKind, Seq, Store};
use chunk_model::{CallStatus, EventType, Provider};
use serde_json::{json, Value};

fn chunk(choices: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "chatcmpl-n2", "object": "chat.completion.chunk", "created": 1767225600,
        "model": "gpt-4o-mini", "choices": choices
    }))
    .unwrap()
}

fn call_delta(choice: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut call = json!({"index": 0, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["type"] = "function".into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    json!({"index": choice, "delta": {"tool_calls": [call]}, "finish_reason": null})
}

/// Two alternative completions, interleaved as the API streams them (role deltas first, then
/// each choice's call, then a finish per choice), then `[DONE]`.
fn n2_stream() -> Vec<Vec<u8>> {
    vec![
        chunk(json!([
            {"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null},
            {"index": 1, "delta": {"role": "assistant", "content": null}, "finish_reason": null}
        ])),
        chunk(json!([call_delta(
            0,
            Some("call_c0"),
            Some("get_weather"),
            ""
        )])),
        chunk(json!([call_delta(
            1,
            Some("call_c1"),
            Some("get_time"),
            ""
        )])),
        chunk(json!([call_delta(0, None, None, "{\"city\":\"Paris\"}")])),
        chunk(json!([call_delta(1, None, None, "{\"tz\":\"CET\"}")])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        chunk(json!([{"index": 1, "delta": {}, "finish_reason": "tool_calls"}])),
        b"[DONE]".to_vec(),
    ]
}

fn input(seq: u64, body: &[u8]) -> Input<'_> {
    common::chunk("c", "m1", seq, body)
}

#[test]
fn every_choice_of_an_n2_stream_is_its_own_message() {
    let store = Store::open_memory(Config::default()).unwrap();
    for (seq, body) in n2_stream().iter().enumerate() {
        let applied = store.apply(&input(seq as u64, body), 1).unwrap();
        assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");
    }
    let first = store.message_snapshot("c", "m1").unwrap().unwrap();
    let second = store.message_snapshot("c", "m1~choice1").unwrap().unwrap();
    assert_eq!(first.calls.len(), 1);
    assert_eq!(first.calls[0].tool_call.id, "call_c0");
    assert_eq!(first.calls[0].tool_call.arguments, json!({"city": "Paris"}));
    assert_eq!(second.calls.len(), 1);
    assert_eq!(second.calls[0].tool_call.id, "call_c1");
    assert_eq!(second.calls[0].tool_call.arguments, json!({"tz": "CET"}));
    assert_eq!(second.finish_reason.as_deref(), Some("tool_calls"));
    let evs = common::events(&store);
    let completed: Vec<&str> = evs
        .iter()
        .filter(|e| e.event_type == EventType::MessageCompleted)
        .map(|e| e.message_id.as_str())
        .collect();
    assert_eq!(completed, ["m1", "m1~choice1"]);
    assert_eq!(
        store.open_streams(),
        0,
        "the stream closes once every choice has"
    );
    // results match each choice's call by id
    let r = br#"{"tool_call_id":"call_c1","output":"12:00"}"#;
    let _ = store.apply(&common::result("c", "tools", 0, r), 2).unwrap();
    let evs = common::events(&store);
    let result = evs
        .iter()
        .find(|e| e.event_type == EventType::ToolResultCompleted)
        .unwrap();
    assert_eq!(result.message_id, "m1~choice1");
}

#[test]
fn the_stream_stays_open_until_every_choice_ended_and_a_timeout_ends_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        idle_timeout_ms: 1_000,
        ..Config::default()
    };
    let stream = n2_stream();
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        // choice 0 finishes, choice 1 does not (the connection dropped)
        for seq in [0usize, 1, 2, 3, 4, 5] {
            let _ = store.apply(&input(seq as u64, &stream[seq]), 10).unwrap();
        }
        assert_eq!(store.open_streams(), 1, "choice 1 is still open");
        store.flush().unwrap();
    }
    // the number of choices survives a restart
    let store = common::reopen(dir.path(), config);
    store.tick(2_000).unwrap();
    let first = store.message_snapshot("c", "m1").unwrap().unwrap();
    let second = store.message_snapshot("c", "m1~choice1").unwrap().unwrap();
    assert_eq!(first.calls[0].status, CallStatus::Completed);
    assert_eq!(second.calls[0].status, CallStatus::Abandoned);
    assert_eq!(second.calls[0].reason.as_deref(), Some("timeout"));
    assert_eq!(second.calls[0].tool_call.raw_arguments, "{\"tz\":\"CET\"}");
    assert_eq!(store.open_streams(), 0);
}

#[test]
fn an_explicit_end_ends_every_choice() {
    let store = Store::open_memory(Config::default()).unwrap();
    let stream = n2_stream();
    for (seq, body) in stream.iter().enumerate().take(5) {
        let _ = store.apply(&input(seq as u64, body), 1).unwrap();
    }
    let end = Input {
        kind: InputKind::Chunk,
        conversation_id: "c",
        message_id: "m1",
        provider: Some(Provider::OpenaiChat),
        seq: Seq::Producer(5),
        control: Some(Control::End),
        body: b"",
        origin: None,
    };
    let _ = store.apply(&end, 2).unwrap();
    for msg in ["m1", "m1~choice1"] {
        let snap = store.message_snapshot("c", msg).unwrap().unwrap();
        assert_eq!(snap.calls[0].status, CallStatus::Abandoned, "{msg}");
        assert_eq!(
            snap.calls[0].reason.as_deref(),
            Some("stream_ended"),
            "{msg}"
        );
    }
    assert_eq!(store.open_streams(), 0);
}

#[test]
fn a_choice_index_past_the_limit_is_a_lost_chunk() {
    let store = Store::open_memory(Config::default()).unwrap();
    let body = chunk(json!([call_delta(
        4_000_000,
        Some("call_x"),
        Some("f"),
        "{}"
    )]));
    let applied = store.apply(&input(0, &body), 1).unwrap();
    assert!(common::is_dead(
        &applied,
        "decode_error: openai-chat: choices[].index 4000000"
    ));
    assert!(store
        .message_snapshot("c", "m1~choice4000000")
        .unwrap()
        .is_none());
}
