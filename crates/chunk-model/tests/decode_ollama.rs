//! Decoder tests for Ollama's native `/api/chat` NDJSON: whole calls, `done` handling,
//! errors, recorded streams, and a no-panic property test.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{ChunkEvent, DecodeError, Finish, Provider};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::Ollama;

#[test]
fn whole_calls_in_one_line_are_call_ends_with_compact_arguments() {
    let c = r#"{"model":"qwen3","created_at":"2025-05-27T22:54:58.100509Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_current_weather","arguments":{"format":"celsius","location":"Toronto"}}},{"function":{"name":"get_current_weather","arguments":{"location":"Ottawa", "format": "celsius"}}}]},"done":false}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![
            end(
                at(Some(0), None, None),
                Some("get_current_weather"),
                Some(r#"{"format":"celsius","location":"Toronto"}"#)
            ),
            end(
                at(Some(1), None, None),
                Some("get_current_weather"),
                Some(r#"{"location":"Ottawa","format":"celsius"}"#)
            ),
        ]
    );
}

#[test]
fn function_index_and_id_win_over_position() {
    let c = r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"id":"call_x1","function":{"index":3,"name":"f","arguments":{}}}]},"done":false}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![end(
            at(Some(3), Some("call_x1"), None),
            Some("f"),
            Some("{}")
        )]
    );
}

#[test]
fn missing_arguments_on_a_whole_call_mean_empty_object() {
    let c = r#"{"model":"m","message":{"role":"assistant","tool_calls":[{"function":{"name":"now"}}]},"done":false}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![end(at(Some(0), None, None), Some("now"), Some("{}"))]
    );
}

#[test]
fn arguments_given_as_string_are_kept() {
    let c = r#"{"model":"m","message":{"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]},"done":false}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![end(at(Some(0), None, None), Some("f"), Some(r#"{"a":1}"#))]
    );
}

#[test]
fn done_reason_stop_is_complete_and_length_is_truncated() {
    let stop = r#"{"model":"m","created_at":"x","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":1}"#;
    assert_eq!(
        decode_ok(P, stop),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "stop".into()
        }]
    );
    let length = r#"{"model":"m","message":{"role":"assistant","content":""},"done_reason":"length","done":true}"#;
    assert_eq!(
        decode_ok(P, length),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Truncated,
            reason: "length".into()
        }]
    );
}

#[test]
fn done_without_done_reason_is_stream_end() {
    let c = r#"{"model":"m","message":{"role":"assistant","content":""},"done":true}"#;
    assert_eq!(decode_ok(P, c), vec![ChunkEvent::StreamEnd]);
}

#[test]
fn content_and_thinking_lines_are_no_events() {
    let c = r#"{"model":"m","created_at":"x","message":{"role":"assistant","content":"Hel","thinking":"hmm","images":null},"done":false}"#;
    assert_eq!(decode_ok(P, c), vec![]);
}

#[test]
fn error_line_is_provider_error() {
    let c = r#"{"error":"model 'nope' not found"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::ProviderError {
            message: "model 'nope' not found".into()
        }]
    );
}

#[test]
fn tool_calls_not_an_array_is_bad_field() {
    let c = r#"{"model":"m","message":{"tool_calls":{"function":{}}},"done":false}"#;
    assert!(
        matches!(decode_err(P, c), DecodeError::BadField { field, provider, .. } if field == "message.tool_calls" && provider == P)
    );
    let c = r#"{"model":"m","message":{"tool_calls":[{"function":{"index":-1}}]},"done":false}"#;
    assert!(
        matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "message.tool_calls[0].function.index")
    );
}

#[test]
fn done_and_function_index_written_as_strings_are_read() {
    let c = r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"index":"1","name":"f","arguments":{}}}]},"done":"true","done_reason":"stop"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![
            end(at(Some(1), None, None), Some("f"), Some("{}")),
            ChunkEvent::MessageEnd {
                finish: Finish::Complete,
                reason: "stop".into()
            },
        ]
    );
    let c = r#"{"model":"m","message":{"role":"assistant","content":"hi"},"done":"no"}"#;
    assert_eq!(bad_field(&decode_err(P, c)), "done");
}

#[test]
fn done_reason_of_another_shape_is_a_plain_stream_end() {
    for reason in ["1", "[]", "{}", "false"] {
        let c = format!(
            r#"{{"model":"m","message":{{"role":"assistant","content":""}},"done":true,"done_reason":{reason}}}"#
        );
        assert_eq!(decode_ok(P, &c), vec![ChunkEvent::StreamEnd], "{c}");
    }
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let c = r#"{"model":"qwen3:8b","created_at":"2025-05-27T22:54:57.644317Z","message":{"role":"assistant","content":"","thinking":"","tool_calls":[{"id":"call_1","type":"function","function":{"index":0,"name":"f","arguments":{"a":1}}}]},"done":true,"done_reason":"stop","total_duration":123,"load_duration":4,"prompt_eval_count":10,"prompt_eval_duration":5,"eval_count":20,"eval_duration":6}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        c,
        &[
            "/model",
            "/created_at",
            "/total_duration",
            "/load_duration",
            "/prompt_eval_count",
            "/prompt_eval_duration",
            "/eval_count",
            "/eval_duration",
            "/context",
            "/logprobs",
            "/remote_model",
            "/message/role",
            "/message/content",
            "/message/thinking",
            "/message/images",
            "/message/tool_name",
            "/message/tool_calls/0/type",
        ],
    );
    assert_eq!(
        events,
        vec![
            end(
                at(Some(0), Some("call_1"), None),
                Some("f"),
                Some(r#"{"a":1}"#)
            ),
            ChunkEvent::MessageEnd {
                finish: Finish::Complete,
                reason: "stop".into()
            },
        ]
    );
}

#[test]
fn recorded_parallel_calls_keep_ids_indices_and_unicode() {
    let events = decode_recording(P, "ollama/parallel_calls.ndjson");
    assert_eq!(
        events,
        vec![
            end(
                at(Some(0), Some("call_hy6pzfs1"), None),
                Some("get_current_weather"),
                Some(r#"{"location":"Toronto","format":"celsius"}"#)
            ),
            end(
                at(Some(1), Some("call_m2x0q7vd"), None),
                Some("get_current_weather"),
                Some(r#"{"location":"Montréal","format":"celsius"}"#)
            ),
            ChunkEvent::MessageEnd {
                finish: Finish::Complete,
                reason: "stop".into()
            },
        ]
    );
}

#[test]
fn recorded_calls_in_separate_lines_without_ids_are_whole_calls() {
    let events = decode_recording(P, "ollama/separate_chunks_no_ids.ndjson");
    assert_eq!(
        events,
        vec![
            end(
                at(Some(0), None, None),
                Some("add"),
                Some(r#"{"a":2,"b":3}"#)
            ),
            end(
                at(Some(0), None, None),
                Some("multiply"),
                Some(r#"{"a":5,"b":{"nested":[1,2.5,"x"]}}"#)
            ),
            ChunkEvent::MessageEnd {
                finish: Finish::Complete,
                reason: "stop".into()
            },
        ]
    );
}

#[test]
fn recorded_truncated_done_without_reason_and_error_streams() {
    assert_eq!(
        decode_recording(P, "ollama/truncated_length.ndjson").last(),
        Some(&ChunkEvent::MessageEnd {
            finish: Finish::Truncated,
            reason: "length".into()
        })
    );
    assert_eq!(
        decode_recording(P, "ollama/done_without_reason.ndjson").last(),
        Some(&ChunkEvent::StreamEnd)
    );
    assert!(matches!(
        decode_recording(P, "ollama/error.ndjson").last(),
        Some(ChunkEvent::ProviderError { .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        let _ = chunk_model::decode(P, value.to_string().as_bytes());
        let shaped = json!({"model": "m", "message": {"tool_calls": [{"id": value, "function": {"name": "f", "arguments": value, "index": value}}]}, "done": true, "done_reason": value});
        let _ = chunk_model::decode(P, shaped.to_string().as_bytes());
    }

    #[test]
    fn object_arguments_round_trip_to_equal_json(value in arb_json()) {
        let line = json!({"model": "m", "message": {"tool_calls": [{"function": {"name": "f", "arguments": {"v": value}}}]}, "done": false});
        let events = chunk_model::decode(P, line.to_string().as_bytes()).unwrap();
        match &events[..] {
            [ChunkEvent::CallEnd(e)] => {
                let text = e.arguments.as_deref().unwrap();
                let back: serde_json::Value = serde_json::from_str(text).unwrap();
                prop_assert_eq!(back, json!({"v": value}));
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

proptest! {
    /// Timings, model, content and a done_reason of any shape never fail the final line.
    #[test]
    fn final_line_never_fails_whatever_its_unneeded_fields_hold(v in arb_json()) {
        let c = json!({"model": v, "created_at": v, "message": {"role": v, "content": v, "thinking": v, "images": v}, "done": true, "done_reason": v, "total_duration": v, "eval_count": v, "context": v});
        let events = chunk_model::decode(P, c.to_string().as_bytes());
        prop_assert!(matches!(events.as_deref(), Ok([ChunkEvent::MessageEnd { .. } | ChunkEvent::StreamEnd])), "{:?}", events);
    }
}

/// Ollama with a thinking model and `logprobs` requested (top-level `logprobs` on every line:
/// token arrays with `top_logprobs`, an empty array, `null` on the last), calls in separate
/// lines each with its `id` and `function.index`.
#[test]
fn thinking_and_logprobs_lines_add_nothing_and_calls_across_lines_keep_their_index_and_id() {
    let events = decode_recording(P, "ollama/thinking_logprobs_calls_across_chunks.ndjson");
    assert_eq!(
        events,
        vec![
            end(
                at(Some(0), Some("call_7k2m9xqe"), None),
                Some("read_file"),
                Some(r#"{"path":"Cargo.toml"}"#)
            ),
            end(
                at(Some(1), Some("call_q1w8v3zc"), None),
                Some("read_file"),
                Some(r#"{"path":"src/main.rs","range":{"start":1,"end":40}}"#)
            ),
            msg_end(Finish::Complete, "stop"),
        ]
    );
}
