//! Decoder tests for AI SDK stream parts (v6 LanguageModelV3 stream parts, v5/v6 fullStream,
//! v5 UI message stream, v4 fullStream): calls keyed by wire id only, whole calls, in-stream
//! results, recorded streams, and a no-panic property test. Finish reasons in every shape,
//! unneeded fields of any shape and error parts are in `decode_ai_sdk_lenient.rs`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{CallEnd, ChunkEvent, DecodeError, Finish, Provider};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::AiSdk;

#[test]
fn v5_tool_input_start_delta_end_use_id_and_no_index() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-input-start","id":"call_1","toolName":"weather","providerExecuted":false}"#
        ),
        vec![frag(at(None, Some("call_1"), None), Some("weather"), None)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-input-delta","id":"call_1","delta":"{\"city\""}"#
        ),
        vec![frag(
            at(None, Some("call_1"), None),
            None,
            Some("{\"city\"")
        )]
    );
}

/// `tool-input-end` only closes the input text; the `tool-call` part that follows is the end
/// and alone carries provider metadata (Gemini's `thoughtSignature`). Ending the call on
/// `tool-input-end` lost that metadata, or made the completed event disagree with the
/// message's list.
#[test]
fn tool_input_end_is_not_the_end_of_the_call() {
    assert_eq!(
        decode_ok(P, r#"{"type":"tool-input-end","id":"call_1"}"#),
        Vec::<ChunkEvent>::new()
    );
    let events = decode_ok(
        P,
        r#"{"type":"tool-call","toolCallId":"call_1","toolName":"weather","input":{"city":"Berlin"},"providerMetadata":{"google":{"thoughtSignature":"sig"}}}"#,
    );
    match events.as_slice() {
        [ChunkEvent::CallEnd(e)] => {
            assert_eq!(e.at.wire_id.as_deref(), Some("call_1"));
            assert!(e.metadata.contains_key("providerMetadata"), "{e:?}");
            // lifted to the key the Gemini history encoder renders back
            assert_eq!(
                e.metadata.get("thoughtSignature"),
                Some(&serde_json::json!("sig"))
            );
        }
        other => panic!("expected one end, got {other:?}"),
    }
}

#[test]
fn ui_stream_parts_use_tool_call_id_and_input_text_delta() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-input-start","toolCallId":"call_2","toolName":"getOrder"}"#
        ),
        vec![frag(at(None, Some("call_2"), None), Some("getOrder"), None)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-input-delta","toolCallId":"call_2","inputTextDelta":"{\"o"}"#
        ),
        vec![frag(at(None, Some("call_2"), None), None, Some("{\"o"))]
    );
}

#[test]
fn tool_call_with_object_input_is_whole_call_with_compact_text() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-call","toolCallId":"call_3","toolName":"weather","input":{ "city": "Berlin", "days": [1, 2] }}"#
        ),
        vec![end(
            at(None, Some("call_3"), None),
            Some("weather"),
            Some(r#"{"city":"Berlin","days":[1,2]}"#)
        )]
    );
}

#[test]
fn tool_call_with_string_input_keeps_the_string() {
    // LanguageModelV2 stream parts carry `input` as the JSON text itself.
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-call","toolCallId":"call_4","toolName":"f","input":"{\"a\":1}"}"#
        ),
        vec![end(
            at(None, Some("call_4"), None),
            Some("f"),
            Some(r#"{"a":1}"#)
        )]
    );
}

#[test]
fn tool_input_available_is_a_whole_call_like_tool_call() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-input-available","toolCallId":"call_5","toolName":"getOrder","input":{"orderId":"A-1"}}"#
        ),
        vec![end(
            at(None, Some("call_5"), None),
            Some("getOrder"),
            Some(r#"{"orderId":"A-1"}"#)
        )]
    );
}

#[test]
fn provider_metadata_on_tool_call_is_kept() {
    let events = decode_ok(
        P,
        r#"{"type":"tool-call","toolCallId":"c","toolName":"f","input":{},"providerMetadata":{"google":{"thoughtSignature":"sig=="}}}"#,
    );
    match &events[..] {
        [ChunkEvent::CallEnd(CallEnd { metadata, .. })] => {
            assert_eq!(
                metadata.get("providerMetadata"),
                Some(&json!({"google": {"thoughtSignature": "sig=="}}))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn v4_streaming_start_and_args_text_delta() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-call-streaming-start","toolCallId":"call_6","toolName":"search"}"#
        ),
        vec![frag(at(None, Some("call_6"), None), Some("search"), None)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-call-delta","toolCallType":"function","toolCallId":"call_6","toolName":"search","argsTextDelta":"{\"q"}"#
        ),
        vec![frag(
            at(None, Some("call_6"), None),
            Some("search"),
            Some("{\"q")
        )]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-call","toolCallType":"function","toolCallId":"call_6","toolName":"search","args":{"q":"x"}}"#
        ),
        vec![end(
            at(None, Some("call_6"), None),
            Some("search"),
            Some(r#"{"q":"x"}"#)
        )]
    );
}

#[test]
fn tool_results_in_stream_are_complete_results() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-result","toolCallId":"c1","toolName":"f","input":{},"output":{"ok":true}}"#
        ),
        vec![result("c1", r#"{"ok":true}"#, false)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-result","toolCallId":"c2","toolName":"f","result":"done"}"#
        ),
        vec![result("c2", "done", false)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-output-available","toolCallId":"c3","output":[1,2]}"#
        ),
        vec![result("c3", "[1,2]", false)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-output-error","toolCallId":"c4","errorText":"boom"}"#
        ),
        vec![result("c4", "boom", true)]
    );
}

#[test]
fn preliminary_tool_output_is_skipped() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-output-available","toolCallId":"c","output":{"p":1},"preliminary":true}"#
        ),
        vec![]
    );
}

#[test]
fn tool_result_without_id_is_bad_field() {
    assert!(matches!(
        decode_err(P, r#"{"type":"tool-result","toolCallId":"  ","output":1}"#),
        DecodeError::BadField { field, .. } if field == "toolCallId"
    ));
}

#[test]
fn recorded_v5_parallel_calls_interleaved_stay_apart() {
    let events = decode_recording(P, "ai-sdk/v5_full_stream_parallel.sse");
    let glued = |id: &str| -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ChunkEvent::CallFragment(f) if f.at.wire_id.as_deref() == Some(id) => {
                    f.arguments.clone()
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(glued("call_Yf2mQ8xA1"), r#"{"city":"Berlin"}"#);
    assert_eq!(
        glued("call_Pz0nW3cB7"),
        r#"{"city":"Lisbon","units":"metric"}"#
    );
    assert!(events.contains(&result("call_Pz0nW3cB7", "19°C, sunny", false)));
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Complete, "tool-calls"))
    );
    assert!(events.iter().all(|e| match e {
        ChunkEvent::CallFragment(f) => f.at.index.is_none(),
        ChunkEvent::CallEnd(e) => e.at.index.is_none(),
        _ => true,
    }));
}

#[test]
fn recorded_ui_stream_skips_preliminary_output_and_ends_with_done() {
    let events = decode_recording(P, "ai-sdk/ui_message_stream.sse");
    let results: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, ChunkEvent::ToolResult(_)))
        .collect();
    assert_eq!(
        results,
        vec![&result(
            "call_UiX9k2Lm",
            r#"{"status":"shipped","eta":"2025-09-03"}"#,
            false
        )]
    );
    assert_eq!(
        &events[events.len() - 2..],
        &[ChunkEvent::StreamEnd, ChunkEvent::StreamEnd]
    );
}

#[test]
fn recorded_v4_truncated_and_error_streams() {
    let v4 = decode_recording(P, "ai-sdk/v4_full_stream.sse");
    assert!(v4.contains(&end(
        at(None, Some("call_v4Qw81Zr"), None),
        Some("searchDocs"),
        Some(r#"{"query":"sled flush","limit":5}"#)
    )));
    assert!(v4.contains(&result(
        "call_v4Qw81Zr",
        r#"[{"title":"Tree::flush","score":0.92}]"#,
        false
    )));
    let cut = decode_recording(P, "ai-sdk/truncated_length.sse");
    assert_eq!(cut.last(), Some(&msg_end(Finish::Truncated, "length")));
    let err = decode_recording(P, "ai-sdk/error.sse");
    assert!(err.contains(&result(
        "call_Err0x1",
        "getaddrinfo ENOTFOUND example.invalid",
        true
    )));
    assert!(err.contains(&ChunkEvent::ProviderError {
        message: "Overloaded: upstream returned 529".into()
    }));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json(), ty in arb_type()) {
        let _ = chunk_model::decode(P, value.to_string().as_bytes());
        let shaped = json!({"type": ty, "id": value, "toolCallId": "c", "toolName": value, "input": value, "output": value, "delta": value, "error": value, "finishReason": value});
        let _ = chunk_model::decode(P, shaped.to_string().as_bytes());
        let shaped = json!({"type": ty, "toolCallId": "c", "input": value, "output": value, "error": value, "providerMetadata": value});
        let _ = chunk_model::decode(P, shaped.to_string().as_bytes());
    }
}
