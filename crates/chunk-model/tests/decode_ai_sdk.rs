//! Decoder tests for AI SDK stream parts (v6 LanguageModelV3 stream parts, v5/v6 fullStream,
//! v5 UI message stream, v4 fullStream): calls keyed by wire id only, whole calls, in-stream
//! results, finish reasons in every shape, unneeded fields of any shape, errors, recorded
//! streams, and a no-panic property test.

mod support;

use chunk_model::{CallEnd, ChunkEvent, DecodeError, Finish, Provider, ResultInput, ToolResult};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::AiSdk;

fn result(id: &str, output: &str, is_error: bool) -> ChunkEvent {
    ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
        tool_call_id: id.into(),
        output: output.into(),
        is_error,
    }))
}

fn msg_end(finish: Finish, reason: &str) -> ChunkEvent {
    ChunkEvent::MessageEnd {
        finish,
        reason: reason.into(),
    }
}

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
fn finish_reasons_normalize() {
    for (raw, want) in [
        ("tool-calls", Finish::Complete),
        ("stop", Finish::Complete),
        ("length", Finish::Truncated),
        ("content-filter", Finish::Filtered),
        ("error", Finish::Error),
        ("other", Finish::Complete),
    ] {
        let c = format!(
            r#"{{"type":"finish","finishReason":"{raw}","totalUsage":{{"inputTokens":1}}}}"#
        );
        assert_eq!(decode_ok(P, &c), vec![msg_end(want, raw)], "{raw}");
    }
    assert_eq!(
        decode_ok(P, r#"{"type":"finish"}"#),
        vec![ChunkEvent::StreamEnd],
        "UI stream finish has no reason"
    );
}

#[test]
fn ai_sdk_v6_finish_reason_object_is_read_not_dead_lettered() {
    // A LanguageModelV3 stream `finish` part, as AI SDK 6 providers emit it: the finish
    // reason is an object and the usage nests token counts in objects.
    let c = r#"{"type":"finish","finishReason":{"unified":"tool-calls","raw":"tool_calls"},"usage":{"inputTokens":{"total":96,"noCache":96,"cacheRead":0,"cacheWrite":0},"outputTokens":{"total":41,"text":41,"reasoning":0},"raw":{"prompt_tokens":96}},"providerMetadata":{"openai":{"responseId":"chatcmpl-v6"}}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![msg_end(Finish::Complete, "tool-calls")]
    );
    for (unified, raw, want) in [
        ("stop", "end_turn", Finish::Complete),
        ("length", "max_tokens", Finish::Truncated),
        ("content-filter", "SAFETY", Finish::Filtered),
        ("error", "error", Finish::Error),
        ("other", "pause_turn", Finish::Complete),
    ] {
        let c = format!(
            r#"{{"type":"finish","finishReason":{{"unified":"{unified}","raw":"{raw}"}},"usage":{{"inputTokens":{{"total":1}},"outputTokens":{{"total":2}}}}}}"#
        );
        assert_eq!(decode_ok(P, &c), vec![msg_end(want, unified)], "{c}");
    }
}

#[test]
fn ai_sdk_v6_finish_reason_object_without_unified_falls_back_to_raw() {
    // `raw` is the provider's own word: normalized with every provider's vocabulary.
    for (raw, want) in [
        ("max_tokens", Finish::Truncated),
        ("MAX_TOKENS", Finish::Truncated),
        ("content_filter", Finish::Filtered),
        ("tool_use", Finish::Complete),
    ] {
        let c = format!(r#"{{"type":"finish","finishReason":{{"unified":null,"raw":"{raw}"}}}}"#);
        assert_eq!(decode_ok(P, &c), vec![msg_end(want, raw)], "{c}");
    }
    // Nothing readable in it: a finish without a reason, never an error.
    for reason in [
        r#"{}"#,
        r#"{"raw":null}"#,
        "42",
        "true",
        r#"["stop"]"#,
        r#""  ""#,
    ] {
        let c = format!(r#"{{"type":"finish","finishReason":{reason}}}"#);
        assert_eq!(decode_ok(P, &c), vec![ChunkEvent::StreamEnd], "{c}");
    }
}

#[test]
fn ai_sdk_v6_stream_text_finish_with_raw_finish_reason_and_total_usage_is_read() {
    // AI SDK 6 `streamText` fullStream: a string reason plus `rawFinishReason`.
    let c = r#"{"type":"finish","finishReason":"tool-calls","rawFinishReason":"tool_calls","totalUsage":{"inputTokens":96,"inputTokenDetails":{"noCacheTokens":96,"cacheReadTokens":0,"cacheWriteTokens":0},"outputTokens":41,"outputTokenDetails":{"textTokens":41,"reasoningTokens":0},"totalTokens":137}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![msg_end(Finish::Complete, "tool-calls")]
    );
}

#[test]
fn ai_sdk_v6_language_model_stream_ends_its_calls_and_the_message() {
    let events = decode_recording(P, "ai-sdk/v6_language_model_stream.sse");
    let ends: Vec<&CallEnd> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(end) => Some(end),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2, "{events:#?}");
    assert_eq!(ends[0].at, wire(Some("call_v6_weather")));
    assert_eq!(ends[0].name.as_deref(), Some("get_weather"));
    assert_eq!(
        ends[0].arguments.as_deref(),
        Some(r#"{"city":"Paris","unit":"celsius"}"#)
    );
    assert_eq!(ends[1].at, wire(Some("call_v6_time")));
    assert_eq!(
        ends[1].arguments.as_deref(),
        Some(r#"{"zone":"Europe/Paris"}"#)
    );
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Complete, "tool-calls")),
        "the object finish reason ends the message"
    );
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let start = r#"{"type":"tool-input-start","id":"c1","toolName":"f"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        start,
        &[
            "/providerExecuted",
            "/dynamic",
            "/title",
            "/_meta",
            "/delta",
            "/inputTextDelta",
            "/input",
            "/output",
            "/preliminary",
            "/isError",
            "/finishReason",
            "/errorText",
            "/usage",
        ],
    );
    assert_eq!(events, vec![frag(wire(Some("c1")), Some("f"), None)]);

    let delta = r#"{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{\"a\""}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        delta,
        &[
            "/providerMetadata",
            "/input",
            "/output",
            "/preliminary",
            "/isError",
            "/finishReason",
            "/error",
        ],
    );
    assert_eq!(events, vec![frag(wire(Some("c1")), None, Some("{\"a\""))]);

    let call = r#"{"type":"tool-call","toolCallId":"c1","toolName":"f","input":"{\"a\":1}"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        call,
        &[
            "/providerExecuted",
            "/dynamic",
            "/invalid",
            "/error",
            "/delta",
            "/preliminary",
            "/isError",
            "/finishReason",
            "/output",
            "/title",
        ],
    );
    assert_eq!(
        events,
        vec![ChunkEvent::CallEnd(CallEnd {
            at: wire(Some("c1")),
            name: Some("f".into()),
            arguments: Some(r#"{"a":1}"#.into()),
            ..CallEnd::default()
        })]
    );

    let result_part = r#"{"type":"tool-result","toolCallId":"c1","output":"ok"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        result_part,
        &[
            "/toolName",
            "/input",
            "/delta",
            "/finishReason",
            "/providerMetadata",
            "/providerExecuted",
            "/dynamic",
        ],
    );
    assert_eq!(events, vec![result("c1", "ok", false)]);

    let finish = r#"{"type":"finish","finishReason":{"unified":"length","raw":"length"}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        finish,
        &[
            "/usage",
            "/totalUsage",
            "/rawFinishReason",
            "/providerMetadata",
            "/messageMetadata",
            "/response",
            "/id",
            "/toolCallId",
            "/toolName",
            "/delta",
            "/preliminary",
            "/isError",
            "/finishReason/raw",
            "/finishReason/extra",
        ],
    );
    assert_eq!(events, vec![msg_end(Finish::Truncated, "length")]);

    let error = r#"{"type":"error","errorText":"Overloaded"}"#;
    assert_unneeded_fields_never_fail(P, error, &["/toolCallId", "/finishReason", "/delta"]);
}

#[test]
fn result_flags_as_strings_are_read() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-result","toolCallId":"c1","output":"boom","isError":"true"}"#
        ),
        vec![result("c1", "boom", true)]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"tool-output-available","toolCallId":"c1","output":1,"preliminary":"true"}"#
        ),
        vec![]
    );
    assert!(matches!(
        decode_err(P, r#"{"type":"tool-result","toolCallId":"c1","output":1,"isError":"maybe"}"#),
        DecodeError::BadField { field, .. } if field == "isError"
    ));
}

#[test]
fn tool_part_with_non_string_id_or_name_is_bad_field_naming_it() {
    assert!(matches!(
        decode_err(P, r#"{"type":"tool-call","toolCallId":12,"toolName":"f","input":{}}"#),
        DecodeError::BadField { field, .. } if field == "toolCallId"
    ));
    assert!(matches!(
        decode_err(P, r#"{"type":"tool-input-start","id":"c","toolName":{"n":1}}"#),
        DecodeError::BadField { field, .. } if field == "toolName"
    ));
}

#[test]
fn error_and_abort_parts_are_provider_errors() {
    assert_eq!(
        decode_ok(P, r#"{"type":"error","errorText":"Overloaded"}"#),
        vec![ChunkEvent::ProviderError {
            message: "Overloaded".into()
        }]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"error","error":{"name":"AI_APICallError","message":"Rate limited"}}"#
        ),
        vec![ChunkEvent::ProviderError {
            message: "Rate limited".into()
        }]
    );
    assert_eq!(
        decode_ok(P, r#"{"type":"abort"}"#),
        vec![ChunkEvent::ProviderError {
            message: "aborted".into()
        }]
    );
}

#[test]
fn text_reasoning_start_and_step_parts_are_no_events() {
    for c in [
        r#"{"type":"start","messageId":"m1"}"#,
        r#"{"type":"start-step","request":{},"warnings":[]}"#,
        r#"{"type":"text-delta","id":"t","delta":"hi"}"#,
        r#"{"type":"reasoning-delta","id":"r","delta":"hmm"}"#,
        r#"{"type":"finish-step","finishReason":"tool-calls"}"#,
        r#"{"type":"source-url","sourceId":"s","url":"https://x"}"#,
        r#"{"type":"data-weather","data":{"input":5,"output":[]}}"#,
    ] {
        assert_eq!(decode_ok(P, c), vec![], "{c}");
    }
}

#[test]
fn unknown_part_with_odd_fields_is_ignored_but_handled_part_with_wrong_type_is_bad_field() {
    assert_eq!(
        decode_ok(P, r#"{"type":"data-x","toolCallId":5,"delta":[1]}"#),
        vec![]
    );
    assert!(matches!(
        decode_err(P, r#"{"type":"tool-input-delta","id":"c","delta":7}"#),
        DecodeError::BadField { field, .. } if field == "delta"
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

proptest! {
    /// The finish part: whatever its members hold, it ends the message or the stream, never
    /// an error (issue 7: the v6 object finishReason was dead-lettered).
    #[test]
    fn finish_part_never_fails_whatever_its_fields_hold(v in arb_json()) {
        let c = json!({"type": "finish", "finishReason": v, "usage": v, "totalUsage": v, "rawFinishReason": v, "providerMetadata": v, "messageMetadata": v, "response": v, "id": v, "toolCallId": v, "delta": v, "preliminary": v, "isError": v, "errorText": v});
        let events = chunk_model::decode(P, c.to_string().as_bytes());
        prop_assert!(matches!(events.as_deref(), Ok([ChunkEvent::MessageEnd { .. } | ChunkEvent::StreamEnd])), "{:?}", events);
    }
}
