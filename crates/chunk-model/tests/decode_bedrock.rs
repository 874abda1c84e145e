//! Decoder tests for Bedrock ConverseStream events as JSON (NDJSON recordings in
//! `tests/recordings/bedrock/`, every event with AWS's `p` padding): one test per quirk,
//! named for it, plus no-panic property tests.

mod support;

use chunk_model::{ChunkEvent, DecodeError, Finish, Provider};
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

#[test]
fn text_blocks_without_a_start_decode_to_nothing_but_their_stop() {
    let delta =
        r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}}"#;
    assert_eq!(decode_ok(P, delta), vec![]);
    let reasoning = r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hmm"}}}}"#;
    assert_eq!(decode_ok(P, reasoning), vec![]);
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
