//! AI SDK stream parts of every shipped major version (issue 10): the v4 data stream protocol
//! (`<code>:<json>` lines), v6 tool approval parts, `tool-output-denied`, the UI stream's
//! `tool-input-error`, the `finish` reason as a string, with `rawFinishReason`, and as the
//! `LanguageModelV3` object, and v7 parts that change nothing for calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::decode::ai_sdk::{data_stream_code, EXECUTION_DENIED};
use chunk_model::{detect_provider, ChunkEvent, Finish, Provider};
use support::*;

const P: Provider = Provider::AiSdk;

#[test]
fn v4_data_stream_protocol_lines_decode_like_the_parts_they_stand_for() {
    let events = decode_recording(P, "ai-sdk/v4_data_stream.txt");
    assert_eq!(
        events,
        vec![
            frag(wire(Some("call_v4dsK2")), Some("searchDocs"), None),
            frag(wire(Some("call_v4dsK2")), None, Some("{\"query\":\"sled")),
            frag(wire(Some("call_v4dsK2")), None, Some(" flush\"}")),
            end(
                wire(Some("call_v4dsK2")),
                Some("searchDocs"),
                Some(r#"{"query":"sled flush"}"#)
            ),
            result("call_v4dsK2", "Tree::flush writes dirty buffers", false),
            msg_end(Finish::Complete, "tool-calls"),
        ]
    );
    // an error line holds a JSON string
    assert_eq!(
        decode_ok(P, r#"3:"rate limited""#),
        vec![ChunkEvent::ProviderError {
            message: "rate limited".into()
        }]
    );
    // every line is recognised as the AI SDK's; JSON parts and other providers' chunks are not
    // data stream lines
    for line in [
        "9:{\"toolCallId\":\"x\"}",
        "0:\"hi\"",
        "d:{}",
        "f:{\"messageId\":\"m\"}",
    ] {
        assert_eq!(detect_provider(line.as_bytes()), Some(P), "{line}");
    }
    for chunk in [
        "data: {}",
        "{\"type\":\"finish\"}",
        "[DONE]",
        "x:{}",
        "9:",
        "9: {}",
    ] {
        assert_eq!(data_stream_code(chunk.as_bytes()), None, "{chunk}");
    }
    // a data stream line whose JSON is broken fails like any chunk
    assert!(chunk_model::decode(P, b"9:{\"toolCallId\":").is_err());
}

#[test]
fn a_v6_tool_approval_request_adds_nothing_to_the_call_it_names() {
    let events = decode_recording(P, "ai-sdk/v6_ui_tool_approval.sse");
    let ends: Vec<&ChunkEvent> = events
        .iter()
        .filter(|e| matches!(e, ChunkEvent::CallEnd(_)))
        .collect();
    assert_eq!(ends.len(), 1, "{events:?}");
    assert_eq!(
        events.last(),
        Some(&ChunkEvent::StreamEnd),
        "finish tool-calls then [DONE]"
    );
    // the fullStream form carries the whole call, already stated by its tool-call part
    let full = r#"{"type":"tool-approval-request","approvalId":"aitxt-1","toolCall":{"type":"tool-call","toolCallId":"call_1","toolName":"deleteFile","input":{"path":"/tmp/a"}}}"#;
    assert_eq!(decode_ok(P, full), vec![]);
    let response = r#"{"type":"tool-approval-response","approvalId":"aitxt-1","approved":false,"reason":"no"}"#;
    assert_eq!(decode_ok(P, response), vec![]);
}

#[test]
fn a_denied_tool_is_the_calls_result_with_the_sdks_execution_denied_output() {
    let ui = r#"{"type":"tool-output-denied","toolCallId":"call_Ap7dR2"}"#;
    assert_eq!(
        decode_ok(P, ui),
        vec![result("call_Ap7dR2", EXECUTION_DENIED, true)]
    );
    let full = r#"{"type":"tool-output-denied","toolCallId":"call_Ap7dR2","toolName":"deleteFile","providerExecuted":false}"#;
    assert_eq!(
        decode_ok(P, full),
        vec![result("call_Ap7dR2", EXECUTION_DENIED, true)]
    );
    assert!(chunk_model::decode(P, br#"{"type":"tool-output-denied"}"#).is_err());
}

#[test]
fn a_tool_input_error_ends_the_call_with_the_refused_input() {
    let events = decode_recording(P, "ai-sdk/v6_ui_tool_input_error.sse");
    assert!(events.contains(&end(
        wire(Some("call_Bx4nW9")),
        Some("getWeather"),
        Some("{\"city\": Paris}")
    )));
    assert!(events.iter().any(|e| matches!(
        e,
        ChunkEvent::ToolResult(chunk_model::ResultInput::Complete(r)) if r.is_error && r.tool_call_id == "call_Bx4nW9"
    )));
}

#[test]
fn finish_reasons_of_every_version() {
    let cases = [
        // v4/v5 and the v6 UI stream: a string
        (
            r#"{"type":"finish","finishReason":"tool-calls"}"#,
            Finish::Complete,
            "tool-calls",
        ),
        // v6 streamText: the unified string with the provider's raw word beside it
        (
            r#"{"type":"finish","finishReason":"length","rawFinishReason":"max_tokens","totalUsage":{"inputTokens":3}}"#,
            Finish::Truncated,
            "length",
        ),
        // v6 LanguageModelV3: the object
        (
            r#"{"type":"finish","finishReason":{"unified":"content-filter","raw":"refusal"},"usage":{}}"#,
            Finish::Filtered,
            "content-filter",
        ),
    ];
    for (chunk, finish, reason) in cases {
        assert_eq!(
            decode_ok(P, chunk),
            vec![msg_end(finish, reason)],
            "{chunk}"
        );
    }
}

#[test]
fn v7_parts_change_nothing_for_calls() {
    for part in [
        r#"{"type":"custom","kind":"openai.compaction","providerMetadata":{}}"#,
        r#"{"type":"reasoning-file","file":{"mediaType":"image/png","base64":"iVBOR"}}"#,
        r#"{"type":"raw","rawValue":{"anything":[1,2]}}"#,
    ] {
        assert_eq!(decode_ok(P, part), vec![], "{part}");
    }
    // toolMetadata on a tool-input-start is not needed and never fails it
    let start = r#"{"type":"tool-input-start","id":"call_7","toolName":"f","toolMetadata":{"a":[1]},"dynamic":true,"title":"F"}"#;
    assert_eq!(
        decode_ok(P, start),
        vec![frag(wire(Some("call_7")), Some("f"), None)]
    );
}
