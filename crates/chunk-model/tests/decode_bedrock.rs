//! Decoder tests for Bedrock ConverseStream events as JSON (NDJSON recordings in
//! `tests/recordings/bedrock/`, every event with AWS's `p` padding): one test per quirk,
//! named for it, plus no-panic property tests.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{
    CallKind, ChunkEvent, DecodeError, Finish, Provider, ReasoningKind, ReasoningPiece,
    ResultBlockPiece,
};
use proptest::prelude::*;
use support::*;

const P: Provider = Provider::Bedrock;

#[test]
fn single_call_recording_decodes_to_start_string_fragments_and_end() {
    let events = decode_recording(P, "bedrock/single_call.ndjson");
    assert_eq!(
        events,
        vec![
            end(idx(0), None, None), // the text block (which had no start) stops
            frag(
                idx_id(1, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"),
                Some("get_weather"),
                None
            ),
            frag(idx(1), None, Some("")),
            frag(idx(1), None, Some(r#"{"location": "Seat"#)),
            frag(idx(1), None, Some(r#"tle, WA", "unit": "celsius"}"#)),
            end(idx(1), None, None),
            msg_end(Finish::Complete, "tool_use"),
        ]
    );
}

/// Bedrock system tools (toolUse `type: server_tool_use`, e.g. Nova's `nova_grounding`) and
/// their `toolResult` blocks, streamed as a start, `toolResult` delta pieces and a stop.
#[test]
fn server_tool_use_is_a_server_tool_call_and_its_tool_result_block_streams_its_result() {
    let events = decode_recording(P, "bedrock/server_tool_result.ndjson");
    let id = "tooluse_Wq3b8LxTQyS1v9NcGr2aZw";
    let result_piece = |tool_call_id: Option<&str>, text: Option<&str>| {
        ChunkEvent::ResultBlock(ResultBlockPiece {
            index: 1,
            tool_call_id: tool_call_id.map(str::to_string),
            is_error: false,
            text: text.map(str::to_string),
        })
    };
    let mut server_start = frag(idx_id(0, id), Some("nova_grounding"), None);
    if let ChunkEvent::CallFragment(f) = &mut server_start {
        f.kind = Some(CallKind::ServerTool);
    }
    assert_eq!(
        events,
        vec![
            server_start,
            frag(idx(0), None, Some(r#"{"query": "tokio latest"#)),
            frag(idx(0), None, Some(r#" release"}"#)),
            end(idx(0), None, None),
            result_piece(Some(id), None),
            result_piece(
                None,
                Some(
                    r#"{"results":[{"title":"Releases · tokio-rs/tokio","url":"https://github.com/tokio-rs/tokio/releases"}]}"#
                )
            ),
            result_piece(None, Some(" Latest: tokio-1.47.1")),
            end(idx(1), None, None),
            // the text block and its citation delta: only the stop
            end(idx(2), None, None),
            frag(
                idx_id(3, "tooluse_c0Jx7nYvQ2u8bLmE4kPd1A"),
                Some("add_dependency"),
                None
            ),
            frag(idx(3), None, Some(r#"{"crate": "tokio", "#)),
            frag(idx(3), None, Some(r#""version": "1.47.1"}"#)),
            end(idx(3), None, None),
            msg_end(Finish::Complete, "tool_use"),
        ]
    );
}

#[test]
fn a_tool_result_block_with_status_error_is_an_error_and_one_without_an_id_is_skipped() {
    let start = r#"{"contentBlockStart":{"contentBlockIndex":4,"start":{"toolResult":{"toolUseId":"tooluse_x","type":"nova_grounding","status":"error"}}}}"#;
    assert_eq!(
        decode_ok(P, start),
        vec![ChunkEvent::ResultBlock(ResultBlockPiece {
            index: 4,
            tool_call_id: Some("tooluse_x".to_string()),
            is_error: true,
            text: None,
        })]
    );
    for skipped in [
        r#"{"contentBlockStart":{"contentBlockIndex":4,"start":{"toolResult":{"status":"success"}}}}"#,
        r#"{"contentBlockStart":{"contentBlockIndex":4,"start":{"toolResult":{"toolUseId":7}}}}"#,
        r#"{"contentBlockStart":{"contentBlockIndex":"x","start":{"toolResult":{"toolUseId":"tooluse_x"}}}}"#,
        r#"{"contentBlockStart":{"contentBlockIndex":4,"start":{"toolResult":"odd"}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":4,"delta":{"toolResult":[{"image":{}}]}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":4,"delta":{"toolResult":"odd"}}}"#,
        r#"{"contentBlockStart":{"contentBlockIndex":5,"start":{"image":{"format":"png"}}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":5,"delta":{"image":{"source":{"bytes":"iVBO"}}}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":2,"delta":{"citation":{"title":"t","location":{"web":{"url":"https://example.com"}}}}}}"#,
    ] {
        assert_eq!(decode_ok(P, skipped), vec![], "{skipped}");
    }
}

#[test]
fn a_tool_use_type_other_than_server_tool_use_is_a_client_tool() {
    for ty in [r#""custom""#, "7", "null", "{}"] {
        let chunk = format!(
            r#"{{"contentBlockStart":{{"contentBlockIndex":0,"start":{{"toolUse":{{"toolUseId":"tooluse_a","name":"f","type":{ty}}}}}}}}}"#
        );
        assert_eq!(
            decode_ok(P, &chunk),
            vec![frag(idx_id(0, "tooluse_a"), Some("f"), None)],
            "{chunk}"
        );
    }
}

#[test]
fn malformed_tool_use_and_malformed_model_output_end_the_message_as_an_error() {
    for reason in ["malformed_tool_use", "malformed_model_output"] {
        let chunk = format!(r#"{{"messageStop":{{"stopReason":"{reason}"}}}}"#);
        assert_eq!(decode_ok(P, &chunk), vec![msg_end(Finish::Error, reason)]);
    }
    let events = decode_recording(P, "bedrock/malformed_tool_use.ndjson");
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Error, "malformed_tool_use"))
    );
}

#[test]
fn text_blocks_without_a_start_decode_to_nothing_but_their_stop() {
    let delta =
        r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}}"#;
    assert_eq!(decode_ok(P, delta), vec![]);
}

#[test]
fn reasoning_content_deltas_are_reasoning_pieces_of_their_block() {
    let piece = |kind, text: Option<&str>, signature: Option<&str>, data: Option<&str>| {
        vec![ChunkEvent::Reasoning(ReasoningPiece {
            index: 0,
            kind,
            text: text.map(str::to_string),
            signature: signature.map(str::to_string),
            data: data.map(str::to_string),
        })]
    };
    let text = r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hmm"}},"p":"ab"}}"#;
    assert_eq!(
        decode_ok(P, text),
        piece(Some(ReasoningKind::Thinking), Some("hmm"), None, None)
    );
    let signature = r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"ErcBCkgIAhAB"}}}}"#;
    assert_eq!(
        decode_ok(P, signature),
        piece(None, None, Some("ErcBCkgIAhAB"), None)
    );
    let redacted = r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"redactedContent":"RW5jcnlwdGVk"}}}}"#;
    assert_eq!(
        decode_ok(P, redacted),
        piece(
            Some(ReasoningKind::RedactedThinking),
            None,
            None,
            Some("RW5jcnlwdGVk")
        )
    );
    // not needed: unreadable pieces are skipped, never an error
    for bad in [
        r#"{"contentBlockDelta":{"contentBlockIndex":"x","delta":{"reasoningContent":{"text":"hmm"}}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":7}}}}"#,
        r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":"hmm"}}}"#,
    ] {
        assert_eq!(decode_ok(P, bad), vec![], "{bad}");
    }
}

#[test]
fn tool_input_arrives_as_string_fragments_that_concatenate() {
    let events = decode_recording(P, "bedrock/single_call.ndjson");
    let text = text_at(&events, 1);
    let args: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(args["location"], "Seattle, WA");
}

#[test]
fn message_stop_before_metadata_ends_the_message_and_metadata_adds_nothing() {
    let events = decode_recording(P, "bedrock/single_call.ndjson");
    assert_eq!(events.last(), Some(&msg_end(Finish::Complete, "tool_use")));
    let metadata = r#"{"metadata":{"usage":{"inputTokens":412,"outputTokens":71,"totalTokens":483},"metrics":{"latencyMs":1184},"p":"abc"}}"#;
    assert_eq!(decode_ok(P, metadata), vec![]);
}

#[test]
fn parallel_tool_use_blocks_keep_their_own_index_and_id_in_a_crlf_recording() {
    let events = decode_recording(P, "bedrock/parallel_calls.ndjson");
    assert_eq!(text_at(&events, 0), r#"{"location": "Paris"}"#);
    assert_eq!(text_at(&events, 1), r#"{"location": "Rome"}"#);
    let ids: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) => f.at.wire_id.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            "tooluse_Hq3vPz8sT0K2mWc6Xn4Ryw",
            "tooluse_B7dLk1Qe9Vt5Zs2Ny8Jmhg"
        ]
    );
}

#[test]
fn max_tokens_without_content_block_stop_gives_truncated_end_and_no_call_end() {
    let events = decode_recording(P, "bedrock/truncated_max_tokens.ndjson");
    assert!(
        !events.iter().any(|e| matches!(e, ChunkEvent::CallEnd(_))),
        "{events:?}"
    );
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Truncated, "max_tokens"))
    );
}

#[test]
fn stop_reasons_map_to_finish() {
    for (reason, finish) in [
        ("tool_use", Finish::Complete),
        ("end_turn", Finish::Complete),
        ("stop_sequence", Finish::Complete),
        ("max_tokens", Finish::Truncated),
        ("model_context_window_exceeded", Finish::Truncated),
        ("guardrail_intervened", Finish::Filtered),
        ("content_filtered", Finish::Filtered),
    ] {
        let chunk = format!(r#"{{"messageStop":{{"stopReason":"{reason}","p":"ab"}}}}"#);
        assert_eq!(
            decode_ok(P, &chunk),
            vec![msg_end(finish, reason)],
            "{reason}"
        );
    }
}

#[test]
fn model_stream_error_exception_mid_stream_is_a_provider_error() {
    let events = decode_recording(P, "bedrock/stream_error.ndjson");
    assert_eq!(
        events.last(),
        Some(&ChunkEvent::ProviderError {
            message:
                "modelStreamErrorException: Model stream error: the model produced an invalid response"
                    .to_string()
        })
    );
}

#[test]
fn every_exception_event_is_a_provider_error_naming_it() {
    for name in [
        "internalServerException",
        "modelStreamErrorException",
        "validationException",
        "throttlingException",
        "serviceUnavailableException",
    ] {
        let chunk = format!(r#"{{"{name}":{{"message":"boom"}}}}"#);
        assert_eq!(
            decode_ok(P, &chunk),
            vec![ChunkEvent::ProviderError {
                message: format!("{name}: boom")
            }],
            "{name}"
        );
    }
}

#[test]
fn message_start_and_unknown_events_decode_to_nothing() {
    assert_eq!(
        decode_ok(P, r#"{"messageStart":{"role":"assistant","p":"abcdef"}}"#),
        vec![]
    );
    assert_eq!(decode_ok(P, r#"{"someFutureEvent":{"x":[1,2,3]}}"#), vec![]);
}

#[test]
fn blank_tool_use_id_and_name_are_absent() {
    let chunk = r#"{"contentBlockStart":{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"","name":" "}}}}"#;
    assert_eq!(decode_ok(P, chunk), vec![frag(idx(2), None, None)]);
}

#[test]
fn tool_delta_without_block_index_is_a_bad_field_naming_it() {
    let e = decode_err(
        P,
        r#"{"contentBlockDelta":{"delta":{"toolUse":{"input":"{}"}}}}"#,
    );
    assert_eq!(bad_field(&e), "contentBlockDelta.contentBlockIndex");
}

#[test]
fn tool_input_that_is_not_a_string_is_a_bad_field_naming_its_path() {
    let e = decode_err(
        P,
        r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"toolUse":{"input":{"a":1}}}}}"#,
    );
    assert_eq!(bad_field(&e), "contentBlockDelta.delta.toolUse.input");
}

#[test]
fn content_block_index_as_numeric_string_is_read_as_its_number() {
    let c = r#"{"contentBlockDelta":{"contentBlockIndex":"1","delta":{"toolUse":{"input":"{}"}}},"p":"abc"}"#;
    assert_eq!(decode_ok(P, c), vec![frag(idx(1), None, Some("{}"))]);
    let c = r#"{"contentBlockStop":{"contentBlockIndex":"x"}}"#;
    assert_eq!(
        bad_field(&decode_err(P, c)),
        "contentBlockStop.contentBlockIndex"
    );
}

#[test]
fn text_delta_with_an_odd_block_index_never_fails() {
    // Only tool deltas need the index.
    let c = r#"{"contentBlockDelta":{"contentBlockIndex":"first","delta":{"text":"Hi"}}}"#;
    assert_eq!(decode_ok(P, c), vec![]);
}

#[test]
fn stop_reason_of_another_shape_is_a_plain_stream_end() {
    for reason in ["1", "[]", "{}", "true"] {
        let c = format!(r#"{{"messageStop":{{"stopReason":{reason}}}}}"#);
        assert_eq!(decode_ok(P, &c), vec![ChunkEvent::StreamEnd], "{c}");
    }
}

#[test]
fn exception_of_any_shape_is_still_a_provider_error() {
    for (body, want) in [
        (r#""boom""#, "internalServerException"),
        (
            r#"{"message":{"code":5}}"#,
            r#"internalServerException: {"code":5}"#,
        ),
        (r#"{"Message":"boom"}"#, "internalServerException: boom"),
    ] {
        let c = format!(r#"{{"internalServerException":{body}}}"#);
        assert_eq!(
            decode_ok(P, &c),
            vec![ChunkEvent::ProviderError {
                message: want.to_string()
            }],
            "{c}"
        );
    }
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let metadata = r#"{"metadata":{"usage":{"inputTokens":10,"outputTokens":20,"totalTokens":30},"metrics":{"latencyMs":100},"trace":{}},"p":"abcdef"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        metadata,
        &[
            "/metadata",
            "/metadata/usage",
            "/metadata/metrics",
            "/metadata/trace",
            "/metadata/performanceConfig",
            "/p",
        ],
    );
    assert_eq!(events, vec![]);

    let delta = r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a"}}},"p":"abc"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        delta,
        &[
            "/p",
            "/messageStart",
            "/contentBlockDelta/delta/text",
            "/contentBlockDelta/delta/reasoningContent",
            "/contentBlockDelta/delta/citation",
        ],
    );
    assert_eq!(events, vec![frag(idx(1), None, Some("{\"a"))]);

    let stop = r#"{"messageStop":{"stopReason":"tool_use","additionalModelResponseFields":null},"p":"ab"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        stop,
        &["/p", "/messageStop/additionalModelResponseFields"],
    );
    assert_eq!(
        events,
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "tool_use".into()
        }]
    );

    let text_start = r#"{"contentBlockStart":{"contentBlockIndex":0,"start":{}}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        text_start,
        &[
            "/contentBlockStart/contentBlockIndex",
            "/contentBlockStart/start/image",
        ],
    );
    assert_eq!(events, vec![]);
}

#[test]
fn non_json_chunk_is_a_not_json_error_naming_bedrock() {
    let e = decode_err(P, r#"{"contentBlockStop":{"contentBlockIndex":"#);
    assert!(matches!(e, DecodeError::NotJson { .. }), "{e:?}");
    assert_eq!(e.provider(), Some(P));
}

const KEYS: &[&str] = &[
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
    "internalServerException",
    "modelStreamErrorException",
    "throttlingException",
    "contentBlockIndex",
    "start",
    "delta",
    "toolUse",
    "toolUseId",
    "name",
    "input",
    "text",
    "stopReason",
    "message",
    "p",
];
const WORDS: &[&str] = &["tool_use", "max_tokens", "guardrail_intervened", "{\"a\":"];

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_values_never_panic(value in arb_json_with(KEYS, WORDS)) {
        let text = value.to_string();
        match chunk_model::decode(P, text.as_bytes()) {
            Ok(_) => {}
            Err(e) => prop_assert_eq!(e.provider(), Some(P)),
        }
    }
}

proptest! {
    /// `metadata`, padding, `messageStop` members and exceptions of any shape never fail.
    #[test]
    fn unneeded_members_never_fail_whatever_they_hold(v in arb_json()) {
        let c = serde_json::json!({"metadata": v, "p": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
        let c = serde_json::json!({"messageStop": {"stopReason": v, "additionalModelResponseFields": v}, "p": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
        let c = serde_json::json!({"throttlingException": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
        let c = serde_json::json!({"contentBlockDelta": {"contentBlockIndex": v, "delta": {"text": v}}});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
    }
}
