//! Tests for the tool-result decoder: every accepted shape, output text rules, and clear
//! errors for results without a usable call id; plus a no-panic property test.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{decode_result, DecodeError, ResultInput, ToolResult};
use proptest::prelude::*;
use serde_json::json;
use support::arb_json;

fn ok(body: &str) -> Vec<ResultInput> {
    decode_result(body.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

fn problem(body: &str) -> String {
    match decode_result(body.as_bytes()) {
        Err(DecodeError::BadResult { problem, .. }) => problem,
        other => panic!("expected BadResult, got {other:?}"),
    }
}

fn complete(id: &str, output: &str, is_error: bool) -> ResultInput {
    ResultInput::Complete(ToolResult {
        tool_call_id: id.into(),
        output: output.into(),
        is_error,
    })
}

#[test]
fn toolstream_whole_result() {
    assert_eq!(
        ok(r#"{"tool_call_id":"call_1","output":"72F and sunny","is_error":false}"#),
        vec![complete("call_1", "72F and sunny", false)]
    );
    assert_eq!(
        ok(r#"{"tool_call_id":"call_1","output":"denied","is_error":true}"#),
        vec![complete("call_1", "denied", true)]
    );
}

#[test]
fn non_string_output_becomes_compact_json_text() {
    assert_eq!(
        ok(r#"{"tool_call_id":"c","output":{ "temp": 72, "tags": ["a", "b"] }}"#),
        vec![complete("c", r#"{"tags":["a","b"],"temp":72}"#, false)]
    );
    assert_eq!(
        ok(r#"{"tool_call_id":"c","output":42}"#),
        vec![complete("c", "42", false)]
    );
}

#[test]
fn streamed_result_delta_and_done() {
    assert_eq!(
        ok(r#"{"tool_call_id":"c","delta":"part 1 "}"#),
        vec![ResultInput::Delta {
            tool_call_id: "c".into(),
            delta: "part 1 ".into()
        }]
    );
    assert_eq!(
        ok(r#"{"tool_call_id":"c","done":true}"#),
        vec![ResultInput::Done {
            tool_call_id: "c".into(),
            is_error: false
        }]
    );
    assert_eq!(
        ok(r#"{"tool_call_id":"c","done":true,"is_error":true}"#),
        vec![ResultInput::Done {
            tool_call_id: "c".into(),
            is_error: true
        }]
    );
}

#[test]
fn openai_tool_message_with_string_or_text_parts() {
    assert_eq!(
        ok(r#"{"role":"tool","tool_call_id":"call_abc","content":"{\"temp\":72}"}"#),
        vec![complete("call_abc", r#"{"temp":72}"#, false)]
    );
    assert_eq!(
        ok(
            r#"{"role":"tool","tool_call_id":"call_abc","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]}"#
        ),
        vec![complete("call_abc", "line 1\nline 2", false)]
    );
}

#[test]
fn anthropic_tool_result_block_string_or_blocks_with_is_error() {
    assert_eq!(
        ok(r#"{"type":"tool_result","tool_use_id":"toolu_01A","content":"15 degrees"}"#),
        vec![complete("toolu_01A", "15 degrees", false)]
    );
    assert_eq!(
        ok(
            r#"{"type":"tool_result","tool_use_id":"toolu_01A","content":[{"type":"text","text":"ConnectionError"}],"is_error":true}"#
        ),
        vec![complete("toolu_01A", "ConnectionError", true)]
    );
    assert_eq!(
        ok(r#"{"type":"tool_result","tool_use_id":"toolu_01B"}"#),
        vec![complete("toolu_01B", "", false)]
    );
}

#[test]
fn anthropic_non_text_blocks_are_kept_as_json_not_dropped() {
    let body = r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"chart:"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}]}"#;
    let out = ok(body);
    let ResultInput::Complete(r) = &out[0] else {
        panic!("{out:?}")
    };
    assert!(
        r.output.contains("iVBOR") && r.output.contains("chart:"),
        "{}",
        r.output
    );
}

#[test]
fn anthropic_user_message_with_several_tool_result_blocks() {
    let body = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a"},{"type":"text","text":"what next?"},{"type":"tool_result","tool_use_id":"toolu_2","content":"b","is_error":true}]}"#;
    assert_eq!(
        ok(body),
        vec![
            complete("toolu_1", "a", false),
            complete("toolu_2", "b", true)
        ]
    );
}

#[test]
fn ai_sdk_tool_result_part_output_or_result() {
    assert_eq!(
        ok(r#"{"type":"tool-result","toolCallId":"c1","toolName":"f","output":{"ok":true}}"#),
        vec![complete("c1", r#"{"ok":true}"#, false)]
    );
    assert_eq!(
        ok(r#"{"type":"tool-result","toolCallId":"c2","toolName":"f","result":"plain"}"#),
        vec![complete("c2", "plain", false)]
    );
}

#[test]
fn ai_sdk_v5_typed_outputs_are_unwrapped() {
    assert_eq!(
        ok(
            r#"{"type":"tool-result","toolCallId":"c","toolName":"f","output":{"type":"text","value":"hi"}}"#
        ),
        vec![complete("c", "hi", false)]
    );
    assert_eq!(
        ok(
            r#"{"type":"tool-result","toolCallId":"c","toolName":"f","output":{"type":"json","value":{"a":1}}}"#
        ),
        vec![complete("c", r#"{"a":1}"#, false)]
    );
    assert_eq!(
        ok(
            r#"{"type":"tool-result","toolCallId":"c","toolName":"f","output":{"type":"error-text","value":"nope"}}"#
        ),
        vec![complete("c", "nope", true)]
    );
}

#[test]
fn array_of_results_decodes_each() {
    let body =
        r#"[{"tool_call_id":"a","output":"1"},{"role":"tool","tool_call_id":"b","content":"2"}]"#;
    assert_eq!(
        ok(body),
        vec![complete("a", "1", false), complete("b", "2", false)]
    );
}

#[test]
fn missing_or_blank_id_is_bad_result_with_clear_problem() {
    assert_eq!(
        problem(r#"{"role":"tool","content":"x"}"#),
        "`tool_call_id` is missing"
    );
    assert_eq!(
        problem(r#"{"tool_call_id":"  ","output":"x"}"#),
        "`tool_call_id` is blank"
    );
    assert_eq!(
        problem(r#"{"type":"tool_result","tool_use_id":7,"content":"x"}"#),
        "`tool_use_id` must be a string"
    );
    assert_eq!(
        problem(r#"{"type":"tool-result","output":"x"}"#),
        "`toolCallId` is missing"
    );
}

#[test]
fn flags_written_as_strings_are_read() {
    assert_eq!(
        ok(r#"{"tool_call_id":"c","output":"denied","is_error":"true"}"#),
        vec![complete("c", "denied", true)]
    );
    assert_eq!(
        ok(r#"{"type":"tool-result","toolCallId":"c","output":"x","isError":"FALSE"}"#),
        vec![complete("c", "x", false)]
    );
    assert_eq!(
        ok(r#"{"tool_call_id":"c","done":"true","is_error":null}"#),
        vec![ResultInput::Done {
            tool_call_id: "c".into(),
            is_error: false
        }]
    );
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_result() {
    let shapes = [
        (
            r#"{"tool_call_id":"c","output":"ok"}"#,
            complete("c", "ok", false),
        ),
        (
            r#"{"role":"tool","tool_call_id":"c","content":"ok"}"#,
            complete("c", "ok", false),
        ),
        (
            r#"{"type":"tool_result","tool_use_id":"c","content":"ok"}"#,
            complete("c", "ok", false),
        ),
        (
            r#"{"type":"tool-result","toolCallId":"c","output":"ok"}"#,
            complete("c", "ok", false),
        ),
    ];
    for (body, want) in shapes {
        for key in [
            "name",
            "metadata",
            "timestamp",
            "usage",
            "providerExecuted",
            "cache_control",
        ] {
            for value in support::wrong_typed_values() {
                let variant = support::with_member(body, &format!("/{key}"), value.clone());
                assert_eq!(ok(&variant), vec![want.clone()], "{variant}");
            }
        }
    }
}

#[test]
fn unrecognised_or_incomplete_shapes_are_bad_result() {
    assert!(problem(r#"{"hello":"world"}"#).starts_with("unrecognised shape"));
    assert!(problem(r#"{"tool_call_id":"c"}"#).contains("`output`, `delta` or `done: true`"));
    assert!(problem(r#"{"tool_call_id":"c","output":"x","is_error":"yes"}"#).contains("boolean"));
    assert!(
        problem(r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#)
            .contains("no tool_result")
    );
    assert!(problem("not json").starts_with("not valid JSON"));
    assert!(problem("[]").contains("no tool result"));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_result(&bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        let _ = decode_result(value.to_string().as_bytes());
        for shaped in [
            json!({"tool_call_id": "c", "output": value, "delta": value, "done": value, "is_error": value}),
            json!({"role": "tool", "tool_call_id": value, "content": value}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": value}, value]}),
            json!({"type": "tool-result", "toolCallId": "c", "output": {"type": "content", "value": value}}),
        ] {
            let _ = decode_result(shaped.to_string().as_bytes());
        }
    }

    #[test]
    fn string_output_is_kept_exactly(output in ".*", id in "[a-zA-Z0-9_]{1,20}") {
        let body = json!({"tool_call_id": id, "output": output, "is_error": false});
        prop_assert_eq!(
            decode_result(body.to_string().as_bytes()).unwrap(),
            vec![ResultInput::Complete(ToolResult { tool_call_id: id, output, is_error: false })]
        );
    }
}
