//! Decoder tests for `openai-responses` call kinds: `custom_tool_call` (free text, never JSON),
//! `mcp_call` (keyed by its item id, its output as its result), `mcp_approval_request`, call
//! items ending `incomplete`, and the recordings of these shapes decoded in full. The classic
//! function-call items are in `decode_openai_responses.rs`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{
    CallEnd, CallFragment, CallKind, ChunkEvent, Finish, Provider, ResultInput, ToolResult,
};
use serde_json::json;
use support::*;

const P: Provider = Provider::OpenaiResponses;

fn meta(item_id: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("item_id".into(), json!(item_id));
    m
}

fn kind_meta(
    item_id: &str,
    server_label: Option<&str>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = meta(item_id);
    if let Some(label) = server_label {
        m.insert("server_label".into(), json!(label));
    }
    m
}

#[test]
fn custom_tool_call_items_are_custom_calls_keyed_by_call_id_with_their_input_as_text() {
    let c = r#"{"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_c1","name":"apply_patch","input":""}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallFragment(CallFragment {
            at: at(Some(1), Some("call_c1"), Some("ctc_1")),
            name: Some("apply_patch".into()),
            kind: Some(CallKind::Custom),
            metadata: meta("ctc_1"),
            ..CallFragment::default()
        })]
    );
    // input deltas are text keyed by item id, like argument deltas
    let c = r#"{"type":"response.custom_tool_call_input.delta","sequence_number":5,"output_index":1,"item_id":"ctc_1","delta":"*** Begin Patch\n{not json","obfuscation":"k3"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(
            at(Some(1), None, Some("ctc_1")),
            None,
            Some("*** Begin Patch\n{not json")
        )]
    );
    // `.done` carries the whole input in `input` and ends the call as custom
    let c = r#"{"type":"response.custom_tool_call_input.done","sequence_number":6,"output_index":1,"item_id":"ctc_1","input":"*** Begin Patch\n{not json"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(1), None, Some("ctc_1")),
            arguments: Some("*** Begin Patch\n{not json".into()),
            kind: Some(CallKind::Custom),
            ..CallEnd::default()
        })]
    );
    let c = r#"{"type":"response.output_item.done","sequence_number":7,"output_index":1,"item":{"id":"ctc_1","type":"custom_tool_call","status":"completed","call_id":"call_c1","name":"apply_patch","input":"x y"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(1), Some("call_c1"), Some("ctc_1")),
            name: Some("apply_patch".into()),
            arguments: Some("x y".into()),
            kind: Some(CallKind::Custom),
            metadata: meta("ctc_1"),
            ..CallEnd::default()
        })]
    );
}

#[test]
fn an_item_that_ends_incomplete_ends_its_call_as_cut() {
    let c = r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_1","type":"function_call","status":"incomplete","arguments":"{\"a\":","call_id":"call_1","name":"f"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(0), Some("call_1"), Some("fc_1")),
            name: Some("f".into()),
            arguments: Some(r#"{"a":"#.into()),
            metadata: meta("fc_1"),
            finish: Some(Finish::Truncated),
            ..CallEnd::default()
        })]
    );
    // a status of another value or shape is a normal end
    for status in [r#""completed""#, r#""weird""#, "7", "null"] {
        let c = format!(
            r#"{{"type":"response.output_item.done","output_index":0,"item":{{"id":"fc_1","type":"function_call","status":{status},"arguments":"{{}}","call_id":"call_1","name":"f"}}}}"#
        );
        let events = decode_ok(P, &c);
        assert!(
            matches!(&events[..], [ChunkEvent::CallEnd(e)] if e.finish.is_none()),
            "{c}: {events:?}"
        );
    }
}

#[test]
fn mcp_calls_are_keyed_by_their_item_id_and_their_output_is_their_result() {
    let c = r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"mcp_1","type":"mcp_call","status":"in_progress","approval_request_id":null,"arguments":"","error":null,"name":"ask_question","output":null,"server_label":"deepwiki"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallFragment(CallFragment {
            at: at(Some(1), Some("mcp_1"), Some("mcp_1")),
            name: Some("ask_question".into()),
            kind: Some(CallKind::Mcp),
            metadata: kind_meta("mcp_1", Some("deepwiki")),
            ..CallFragment::default()
        })]
    );
    let c = r#"{"type":"response.mcp_call_arguments.delta","output_index":1,"item_id":"mcp_1","delta":"{\"q\":"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(
            at(Some(1), None, Some("mcp_1")),
            None,
            Some("{\"q\":")
        )]
    );
    let c = r#"{"type":"response.mcp_call_arguments.done","output_index":1,"item_id":"mcp_1","arguments":"{\"q\":1}"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(1), None, Some("mcp_1")),
            arguments: Some(r#"{"q":1}"#.into()),
            kind: Some(CallKind::Mcp),
            ..CallEnd::default()
        })]
    );
    // progress events of the MCP call are no news
    for c in [
        r#"{"type":"response.mcp_call.in_progress","output_index":1,"item_id":"mcp_1"}"#,
        r#"{"type":"response.mcp_call.completed","output_index":1,"item_id":"mcp_1"}"#,
        r#"{"type":"response.mcp_list_tools.completed","output_index":0,"item_id":"mcpl_1"}"#,
    ] {
        assert_eq!(decode_ok(P, c), vec![], "{c}");
    }
    let end = |error: &str, output: &str| {
        format!(
            r#"{{"type":"response.output_item.done","output_index":1,"item":{{"id":"mcp_1","type":"mcp_call","status":"completed","arguments":"{{}}","error":{error},"name":"ask_question","output":{output},"server_label":"deepwiki"}}}}"#
        )
    };
    let result = |output: &str, is_error: bool| {
        ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
            tool_call_id: "mcp_1".into(),
            output: output.into(),
            is_error,
        }))
    };
    let events = decode_ok(P, &end("null", r#""the answer""#));
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(&events[0], ChunkEvent::CallEnd(e) if e.kind == Some(CallKind::Mcp)));
    assert_eq!(events[1], result("the answer", false));
    let events = decode_ok(P, &end(r#""503 Service Unavailable""#, "null"));
    assert_eq!(events[1], result("503 Service Unavailable", true));
    // an error given as an object is kept as its JSON text
    let events = decode_ok(P, &end(r#"{"code":503}"#, "null"));
    assert_eq!(events[1], result(r#"{"code":503}"#, true));
    // no output and no error: no result
    assert_eq!(decode_ok(P, &end("null", "null")).len(), 1);
}

#[test]
fn mcp_approval_requests_are_whole_calls_of_their_kind() {
    let c = r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"mcpr_1","type":"mcp_approval_request","arguments":"{\"title\":\"x\"}","name":"create_issue","server_label":"github"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(1), Some("mcpr_1"), Some("mcpr_1")),
            name: Some("create_issue".into()),
            arguments: Some(r#"{"title":"x"}"#.into()),
            kind: Some(CallKind::McpApprovalRequest),
            metadata: kind_meta("mcpr_1", Some("github")),
            ..CallEnd::default()
        })]
    );
    // a label that is not a string is not read; the call still decodes
    let c = r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"mcpr_1","type":"mcp_approval_request","arguments":"{}","name":"create_issue","server_label":{"x":1}}}"#;
    assert!(matches!(
        &decode_ok(P, c)[..],
        [ChunkEvent::CallFragment(f)] if f.metadata == meta("mcpr_1")
    ));
}

#[test]
fn recorded_new_call_shapes_decode_in_full() {
    let events = decode_recording(P, "openai-responses/custom_tool_call.sse");
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) => f.arguments.clone(),
            _ => None,
        })
        .collect();
    assert!(text.starts_with("*** Begin Patch") && text.ends_with("*** End Patch"));
    let ends: Vec<&CallEnd> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2);
    assert!(ends.iter().all(|e| e.kind == Some(CallKind::Custom)));
    assert!(ends
        .iter()
        .all(|e| e.arguments.as_deref() == Some(text.as_str())));

    let events = decode_recording(P, "openai-responses/function_call_item_incomplete.sse");
    assert!(events
        .iter()
        .any(|e| matches!(e, ChunkEvent::CallEnd(e) if e.finish == Some(Finish::Truncated))));
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Truncated, "max_output_tokens"))
    );

    let events = decode_recording(P, "openai-responses/mcp_call.sse");
    let results = events
        .iter()
        .filter(|e| matches!(e, ChunkEvent::ToolResult(_)))
        .count();
    assert_eq!(results, 1);
    let events = decode_recording(P, "openai-responses/mcp_approval_request.sse");
    let kinds: Vec<Option<CallKind>> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(e) => Some(e.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some(CallKind::Mcp),
            Some(CallKind::Mcp),
            Some(CallKind::McpApprovalRequest)
        ]
    );
}
