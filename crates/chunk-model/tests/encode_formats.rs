//! The wire shape of each history format, pinned on realistic stored calls.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::{parse_history, HistoryFormat};
use chunk_model::history::{render, HistoryOptions};
use chunk_model::MessageSnapshot;
use history_fixtures::{call, result, snapshot};
use serde_json::{json, Value};

fn two_parallel_calls() -> MessageSnapshot {
    snapshot(
        "m1",
        vec![
            call("call_w", "get_weather", 0, json!({"city": "Paris"})),
            call("call_t", "get_time", 1, json!({"tz": "Europe/Paris"})),
        ],
        vec![result("call_t", "12:00"), result("call_w", "18C")],
    )
}

fn rendered(format: HistoryFormat, snaps: &[MessageSnapshot]) -> Vec<Value> {
    render(snaps, format, &HistoryOptions::default())
        .unwrap()
        .messages
}

#[test]
fn arguments_are_a_json_string_for_openai() {
    let m = rendered(HistoryFormat::OpenaiChat, &[two_parallel_calls()]);
    assert_eq!(
        m[0],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_t", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}
        ]})
    );
    // empty arguments are "{}", never "" (which crashes JSON.parse downstream)
    let snap = snapshot("m1", vec![call("call_e", "noop", 0, json!({}))], vec![]);
    let m = rendered(HistoryFormat::OpenaiChat, &[snap]);
    assert_eq!(m[0]["tool_calls"][0]["function"]["arguments"], "{}");
}

#[test]
fn parallel_calls_stay_separate() {
    for format in HistoryFormat::ALL {
        let m = rendered(format, &[two_parallel_calls()]);
        let back = parse_history(format, &m).unwrap();
        assert_eq!(back.len(), 1, "{format}: one turn");
        let names: Vec<&str> = back[0]
            .calls
            .iter()
            .map(|c| c.tool_call.name.as_str())
            .collect();
        assert_eq!(names, ["get_weather", "get_time"], "{format}");
        assert_eq!(
            back[0].calls[0].tool_call.arguments,
            json!({"city": "Paris"}),
            "{format}"
        );
        assert_eq!(
            back[0].calls[1].tool_call.arguments,
            json!({"tz": "Europe/Paris"}),
            "{format}"
        );
        // results come back in call order, each matched to its own call
        let outs: Vec<(&str, &str)> = back[0]
            .tool_results
            .iter()
            .map(|r| (r.tool_call_id.as_str(), r.output.as_str()))
            .collect();
        let ids: Vec<&str> = back[0]
            .calls
            .iter()
            .map(|c| c.tool_call.id.as_str())
            .collect();
        assert_eq!(outs, [(ids[0], "18C"), (ids[1], "12:00")], "{format}");
    }
}

#[test]
fn openai_tool_messages_follow_in_call_order() {
    let m = rendered(HistoryFormat::OpenaiChat, &[two_parallel_calls()]);
    assert_eq!(
        m[1],
        json!({"role": "tool", "tool_call_id": "call_w", "content": "18C"})
    );
    assert_eq!(
        m[2],
        json!({"role": "tool", "tool_call_id": "call_t", "content": "12:00"})
    );
    assert_eq!(m.len(), 3);
}

#[test]
fn anthropic_results_of_one_turn_share_one_user_message() {
    let m = rendered(HistoryFormat::Anthropic, &[two_parallel_calls()]);
    assert_eq!(m.len(), 2);
    assert_eq!(
        m[0]["content"][1],
        json!({"type": "tool_use", "id": "call_t", "name": "get_time", "input": {"tz": "Europe/Paris"}})
    );
    assert_eq!(
        m[1],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_w", "content": "18C", "is_error": false},
            {"type": "tool_result", "tool_use_id": "call_t", "content": "12:00", "is_error": false}
        ]})
    );
}

#[test]
fn thought_signature_is_rendered_back() {
    let mut c0 = call("call_g0", "get_weather", 0, json!({"city": "Paris"}));
    c0.tool_call
        .provider_metadata
        .insert("thoughtSignature".into(), json!("CiQBsig=="));
    c0.tool_call
        .provider_metadata
        .insert("synthetic_id".into(), json!(true));
    let mut c1 = call("call_g1", "get_time", 1, json!({}));
    c1.tool_call
        .provider_metadata
        .insert("synthetic_id".into(), json!(true));
    let snap = snapshot("m1", vec![c0, c1], vec![result("call_g0", "18C")]);
    let m = rendered(HistoryFormat::Gemini, &[snap]);
    assert_eq!(
        m[0],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQBsig=="},
            {"functionCall": {"name": "get_time", "args": {}}}
        ]})
    );
    assert_eq!(
        m[1],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
            {"functionResponse": {"name": "get_time", "response": {"output": "[No result recorded]"}}}
        ]})
    );
    let back = parse_history(HistoryFormat::Gemini, &m).unwrap();
    assert_eq!(
        back[0].calls[0].tool_call.provider_metadata["thoughtSignature"],
        "CiQBsig=="
    );
}

#[test]
fn synthetic_ids_are_never_sent_to_gemini_but_real_ids_are() {
    let snap = snapshot(
        "m1",
        vec![call("fc-real-1", "f", 0, json!({}))],
        vec![result("fc-real-1", "ok")],
    );
    let m = rendered(HistoryFormat::Gemini, &[snap]);
    assert_eq!(m[0]["parts"][0]["functionCall"]["id"], "fc-real-1");
    assert_eq!(m[1]["parts"][0]["functionResponse"]["id"], "fc-real-1");
}

#[test]
fn gemini_error_result_goes_in_response_error() {
    let mut r = result("call_1", "boom");
    r.is_error = true;
    let snap = snapshot("m1", vec![call("call_1", "f", 0, json!({}))], vec![r]);
    let m = rendered(HistoryFormat::Gemini, &[snap]);
    assert_eq!(
        m[1]["parts"][0]["functionResponse"]["response"],
        json!({"error": "boom"})
    );
}

#[test]
fn responses_uses_call_id_and_item_id_when_it_fits() {
    let mut c0 = call("call_r0", "f", 0, json!({"a": 1}));
    c0.tool_call
        .provider_metadata
        .insert("item_id".into(), json!("fc_67e1"));
    let mut c1 = call("call_r1", "g", 1, json!({}));
    c1.tool_call
        .provider_metadata
        .insert("item_id".into(), json!("msg with spaces"));
    let snap = snapshot("m1", vec![c0, c1], vec![result("call_r0", "out")]);
    let opts = HistoryOptions {
        send_item_ids: true,
        ..HistoryOptions::default()
    };
    let m = render(
        std::slice::from_ref(&snap),
        HistoryFormat::OpenaiResponses,
        &opts,
    )
    .unwrap()
    .messages;
    assert_eq!(
        m[0],
        json!({"type": "function_call", "call_id": "call_r0", "name": "f", "arguments": "{\"a\":1}", "id": "fc_67e1"})
    );
    assert_eq!(
        m[1],
        json!({"type": "function_call", "call_id": "call_r1", "name": "g", "arguments": "{}"})
    );
    assert_eq!(
        m[2],
        json!({"type": "function_call_output", "call_id": "call_r0", "output": "out"})
    );
    assert_eq!(m[3]["output"], "[No result recorded]");
    let back = parse_history(HistoryFormat::OpenaiResponses, &m).unwrap();
    assert_eq!(
        back[0].calls[0].tool_call.provider_metadata["item_id"],
        "fc_67e1"
    );
}

#[test]
fn responses_item_ids_are_not_sent_by_default() {
    // An fc_ id the API did not store, or without its reasoning item, is a 400.
    let mut c0 = call("call_r0", "f", 0, json!({}));
    c0.tool_call
        .provider_metadata
        .insert("item_id".into(), json!("fc_67e1"));
    let snap = snapshot("m1", vec![c0], vec![result("call_r0", "out")]);
    let m = rendered(HistoryFormat::OpenaiResponses, &[snap]);
    assert_eq!(
        m[0],
        json!({"type": "function_call", "call_id": "call_r0", "name": "f", "arguments": "{}"})
    );
}

#[test]
fn bedrock_results_carry_status() {
    let mut r = result("tooluse_1", "denied");
    r.is_error = true;
    let snap = snapshot(
        "m1",
        vec![call("tooluse_1", "f", 0, json!({"x": [1, 2]}))],
        vec![r],
    );
    let m = rendered(HistoryFormat::Bedrock, &[snap]);
    assert_eq!(
        m[0],
        json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "f", "input": {"x": [1, 2]}}}]})
    );
    assert_eq!(
        m[1],
        json!({"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "denied"}], "status": "error"}}]})
    );
}

#[test]
fn mistral_ids_are_nine_alphanumerics_on_call_and_result() {
    let snap = snapshot(
        "m1",
        vec![call("call_abc123def456", "f", 0, json!({}))],
        vec![result("call_abc123def456", "ok")],
    );
    let m = rendered(HistoryFormat::Mistral, &[snap]);
    let id = m[0]["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(id.len(), 9);
    assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(
        m[1],
        json!({"role": "tool", "tool_call_id": id, "content": "ok", "name": "f"})
    );
    assert_eq!(m[0]["content"], "");
}

#[test]
fn ollama_arguments_are_an_object_and_results_name_the_tool() {
    let m = rendered(HistoryFormat::Ollama, &[two_parallel_calls()]);
    assert_eq!(
        m[0]["tool_calls"][0],
        json!({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
    );
    assert_eq!(
        m[1],
        json!({"role": "tool", "content": "18C", "tool_name": "get_weather"})
    );
}

#[test]
fn gemini_and_bedrock_roles_alternate() {
    let mut snap = two_parallel_calls();
    snap.orphaned_results.push(result("lost", "orphan text"));
    let snaps = vec![
        snap,
        snapshot("m2", vec![call("call_z", "h", 0, json!({}))], vec![]),
    ];
    for format in [
        HistoryFormat::Gemini,
        HistoryFormat::Bedrock,
        HistoryFormat::Anthropic,
    ] {
        let m = rendered(format, &snaps);
        for pair in m.windows(2) {
            assert_ne!(pair[0]["role"], pair[1]["role"], "{format}: {m:?}");
        }
    }
}

#[test]
fn same_wire_id_in_two_turns_gets_two_ids() {
    // Some OpenAI-compatible hosts number ids per message (call_0 in every turn).
    let snaps = vec![
        snapshot(
            "m1",
            vec![call("call_0", "a", 0, json!({}))],
            vec![result("call_0", "r1")],
        ),
        snapshot(
            "m2",
            vec![call("call_0", "b", 0, json!({}))],
            vec![result("call_0", "r2")],
        ),
    ];
    let m = rendered(HistoryFormat::Anthropic, &snaps);
    let first = m[0]["content"][0]["id"].as_str().unwrap();
    let second = m[2]["content"][0]["id"].as_str().unwrap();
    assert_eq!(first, "call_0");
    assert_ne!(first, second);
    assert_eq!(m[1]["content"][0]["tool_use_id"], first);
    assert_eq!(m[3]["content"][0]["tool_use_id"], second);
}

#[test]
fn parsing_a_tool_message_before_any_call_is_an_error() {
    let msgs = [json!({"role": "tool", "tool_call_id": "call_1", "content": "x"})];
    let err = parse_history(HistoryFormat::OpenaiChat, &msgs).unwrap_err();
    assert!(err.to_string().contains("no preceding call"), "{err}");
    let bad = [json!({"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]})];
    let err = parse_history(HistoryFormat::OpenaiChat, &bad).unwrap_err();
    assert!(err.to_string().contains("function.name"), "{err}");
}

#[test]
fn blank_results_never_become_empty_text_blocks() {
    // Bedrock and Anthropic answer 400 "text content blocks must be non-empty".
    let snap = snapshot(
        "m1",
        vec![call("c1", "f", 0, json!({})), call("c2", "g", 1, json!({}))],
        vec![result("c1", ""), result("c2", "  ")],
    );
    let m = rendered(HistoryFormat::Bedrock, std::slice::from_ref(&snap));
    assert_eq!(
        m[1]["content"][0]["toolResult"]["content"],
        json!([{"text": "[empty result]"}])
    );
    assert_eq!(
        m[1]["content"][1]["toolResult"]["content"],
        json!([{"text": "[empty result]"}])
    );
    let m = rendered(HistoryFormat::Anthropic, &[snap]);
    assert_eq!(
        m[1]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "c1", "is_error": false})
    );
    let back = parse_history(HistoryFormat::Anthropic, &m).unwrap();
    assert_eq!(back[0].tool_results[0].output, "");
}
