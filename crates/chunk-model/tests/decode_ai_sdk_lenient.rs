//! Decoder tests for AI SDK stream parts, the lenient side: finish reasons in every shape
//! (string, the v6 object, `rawFinishReason`), unneeded fields of any shape never failing a
//! chunk, flags written as strings, bad needed fields naming themselves, error and abort
//! parts, parts that are no events. Calls, results and recorded streams are in
//! `decode_ai_sdk.rs`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{CallEnd, ChunkEvent, DecodeError, Finish, Provider};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::AiSdk;

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
