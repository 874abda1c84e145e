//! Decoder tests for `openai-chat` (OpenAI and compatible hosts): one test per stream quirk,
//! named for it, plus the recorded streams and a no-panic property test.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{ChunkEvent, DecodeError, Finish, Provider};
use proptest::prelude::*;
use support::*;

const P: Provider = Provider::OpenaiChat;

/// Wraps a `delta` and `finish_reason` into a realistic OpenAI chunk envelope.
fn chunk(delta: &str, finish: &str) -> String {
    format!(
        r#"{{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_abc","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
    )
}

fn end_msg(finish: Finish, reason: &str) -> ChunkEvent {
    ChunkEvent::MessageEnd {
        finish,
        reason: reason.to_string(),
    }
}

#[test]
fn id_and_name_only_on_first_fragment() {
    let first = chunk(
        r#"{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_Xy1","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &first),
        vec![frag(
            at(Some(0), Some("call_Xy1"), None),
            Some("get_weather"),
            None
        )]
    );
    let next = chunk(
        r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &next),
        vec![frag(at(Some(0), None, None), None, Some(r#"{"city":"#))]
    );
}

#[test]
fn id_restated_on_every_fragment_is_passed_through_not_concatenated() {
    let same = chunk(
        r#"{"tool_calls":[{"index":0,"id":"call_Xy1","function":{"arguments":"\"Paris\"}"}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &same),
        vec![frag(
            at(Some(0), Some("call_Xy1"), None),
            None,
            Some(r#""Paris"}"#)
        )]
    );
    let blank = chunk(
        r#"{"tool_calls":[{"index":0,"id":"","type":"function","function":{"name":"","arguments":"\"Paris\"}"}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &blank),
        vec![frag(at(Some(0), None, None), None, Some(r#""Paris"}"#))],
        "a blank id and a blank name are absent"
    );
}

#[test]
fn blank_or_null_name_on_continuation_is_absent() {
    for name in [r#""""#, "null", r#""   ""#] {
        let c = chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":0,"function":{{"name":{name},"arguments":"1}}"}}}}]}}"#
            ),
            "null",
        );
        assert_eq!(
            decode_ok(P, &c),
            vec![frag(at(Some(0), None, None), None, Some("1}"))],
            "name {name}"
        );
    }
}

#[test]
fn index_missing_or_null_is_none() {
    let missing = chunk(
        r#"{"tool_calls":[{"id":"call_1","function":{"name":"a","arguments":"{}"}}]}"#,
        "null",
    );
    let null = chunk(
        r#"{"tool_calls":[{"index":null,"id":"call_1","function":{"name":"a","arguments":"{}"}}]}"#,
        "null",
    );
    let want = vec![frag(at(None, Some("call_1"), None), Some("a"), Some("{}"))];
    assert_eq!(decode_ok(P, &missing), want);
    assert_eq!(decode_ok(P, &null), want);
}

#[test]
fn index_starting_at_one_is_passed_through() {
    let c = chunk(
        r#"{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"a","arguments":""}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![frag(at(Some(1), Some("call_1"), None), Some("a"), None)]
    );
}

#[test]
fn same_index_reused_by_new_call_keeps_the_new_id() {
    let events = decode_recording(P, "openai-chat/index_reused_new_id.sse");
    let starts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) if f.at.wire_id.is_some() => {
                Some((f.at.index, f.at.wire_id.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (Some(0), "call_first".to_string()),
            (Some(0), "call_second".to_string())
        ]
    );
}

#[test]
fn whole_call_in_one_delta_with_finish_in_same_chunk() {
    // Mistral / Groq style: the complete call and the finish in one chunk.
    let c = chunk(
        r#"{"role":"assistant","tool_calls":[{"id":"D681PevKs","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"},"index":0}]}"#,
        r#""tool_calls""#,
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![
            frag(
                at(Some(0), Some("D681PevKs"), None),
                Some("get_weather"),
                Some(r#"{"city": "Paris"}"#)
            ),
            end_msg(Finish::Complete, "tool_calls"),
        ]
    );
}

#[test]
fn whole_call_in_one_delta_with_finish_in_next_chunk() {
    let events = decode_recording(P, "openai-chat/whole_call_one_delta.sse");
    assert_eq!(
        events,
        vec![
            frag(
                at(Some(0), Some("call_grok_1"), None),
                Some("get_weather"),
                Some(r#"{"city":"Oslo"}"#)
            ),
            frag(
                at(Some(1), Some("call_grok_2"), None),
                Some("get_time"),
                Some(r#"{"tz":"Europe/Oslo"}"#)
            ),
            end_msg(Finish::Complete, "tool_calls"),
            ChunkEvent::StreamEnd,
        ]
    );
}

#[test]
fn azure_prelude_with_empty_choices_and_empty_ids_is_no_events() {
    let prelude = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#;
    assert_eq!(decode_ok(P, prelude), vec![]);
    let events = decode_recording(P, "openai-chat/azure_prelude.sse");
    assert!(
        matches!(events.first(), Some(ChunkEvent::CallFragment(f)) if f.at.wire_id.as_deref() == Some("call_az_1"))
    );
}

#[test]
fn usage_only_chunk_is_no_events() {
    let usage = r#"{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99,"prompt_tokens_details":{"cached_tokens":0}}}"#;
    assert_eq!(decode_ok(P, usage), vec![]);
}

#[test]
fn obfuscation_padding_field_is_ignored() {
    let c = r#"{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}],"obfuscation":"k3Xb9"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(at(Some(0), None, None), None, Some("{}"))]
    );
}

#[test]
fn finish_reason_omitted_instead_of_null_is_no_end() {
    let c = r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(at(Some(0), None, None), None, Some("{"))]
    );
}

#[test]
fn repeated_finish_chunk_emits_message_end_each_time() {
    let fin = chunk("{}", r#""tool_calls""#);
    assert_eq!(
        decode_ok(P, &fin),
        vec![end_msg(Finish::Complete, "tool_calls")]
    );
    assert_eq!(
        decode_ok(P, &fin),
        vec![end_msg(Finish::Complete, "tool_calls")]
    );
}

#[test]
fn finish_reasons_normalize() {
    for (raw, want) in [
        ("stop", Finish::Complete),
        ("tool_calls", Finish::Complete),
        ("function_call", Finish::Complete),
        ("length", Finish::Truncated),
        ("content_filter", Finish::Filtered),
        ("error", Finish::Error),
        ("eos", Finish::Complete),
    ] {
        let fin = chunk("{}", &format!("\"{raw}\""));
        assert_eq!(decode_ok(P, &fin), vec![end_msg(want, raw)], "{raw}");
    }
}

#[test]
fn openrouter_extra_fields_and_processing_are_ignored() {
    let c = r#"{"id":"gen-1732-abc","provider":"Anthropic","model":"anthropic/claude-3.5-sonnet","object":"chat.completion.chunk","created":1732000000,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":null,"reasoning_details":[],"tool_calls":[{"index":0,"id":"toolu_01","type":"function","function":{"name":"search","arguments":""}}]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(
            at(Some(0), Some("toolu_01"), None),
            Some("search"),
            None
        )]
    );
}

#[test]
fn arguments_given_as_json_object_are_serialized_to_text() {
    let c = chunk(
        r#"{"tool_calls":[{"index":0,"id":"call_obj","type":"function","function":{"name":"f","arguments":{"b":[1,2.5,"x\"y"],"a":{"nested":true}}}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![frag(
            at(Some(0), Some("call_obj"), None),
            Some("f"),
            Some(r#"{"b":[1,2.5,"x\"y"],"a":{"nested":true}}"#)
        )]
    );
}

#[test]
fn legacy_function_call_is_a_fragment_at_index_zero() {
    let a = chunk(
        r#"{"role":"assistant","content":null,"function_call":{"name":"lookup","arguments":""}}"#,
        "null",
    );
    let b = chunk(r#"{"function_call":{"arguments":"{\"q\":1}"}}"#, "null");
    assert_eq!(
        decode_ok(P, &a),
        vec![frag(at(Some(0), None, None), Some("lookup"), None)]
    );
    assert_eq!(
        decode_ok(P, &b),
        vec![frag(at(Some(0), None, None), None, Some(r#"{"q":1}"#))]
    );
}

#[test]
fn choices_other_than_index_zero_are_ignored() {
    let c = r#"{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_n2","function":{"name":"x","arguments":"{}"}}]},"finish_reason":"tool_calls"},{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_n1","function":{"name":"y"}}]},"finish_reason":null}]}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(at(Some(0), Some("call_n1"), None), Some("y"), None)]
    );
}

#[test]
fn openrouter_mid_stream_error_is_provider_error() {
    let c = r#"{"id":"gen-1","object":"chat.completion.chunk","created":1732000000,"model":"openai/gpt-4o","provider":"OpenAI","error":{"code":"server_error","message":"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![
            end_msg(Finish::Error, "error"),
            ChunkEvent::ProviderError {
                message: "server_error: Provider disconnected unexpectedly".to_string()
            },
        ]
    );
}

#[test]
fn whitespace_only_argument_fragment_is_kept() {
    // Inside a JSON string a space is content: it must not be dropped as "blank".
    let c = chunk(
        r#"{"tool_calls":[{"index":0,"function":{"arguments":" "}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![frag(at(Some(0), None, None), None, Some(" "))]
    );
}

#[test]
fn index_as_numeric_string_is_read_as_its_number() {
    // Some OpenAI-compatible servers write numbers as strings; the index is needed, so it is
    // read in that shape too.
    let c = chunk(
        r#"{"tool_calls":[{"index":"0","id":"call_a","function":{"name":"f","arguments":""}},{"index":" 1 ","function":{"arguments":"{}"}}]}"#,
        "null",
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![
            frag(at(Some(0), Some("call_a"), None), Some("f"), None),
            frag(at(Some(1), None, None), None, Some("{}")),
        ]
    );
}

#[test]
fn index_that_is_not_a_number_is_bad_field_naming_its_path() {
    let c = chunk(
        r#"{"tool_calls":[{"index":0},{"index":"one","function":{"arguments":"{}"}}]}"#,
        "null",
    );
    match decode_err(P, &c) {
        DecodeError::BadField {
            provider,
            field,
            problem,
            excerpt,
        } => {
            assert_eq!(provider, P);
            assert_eq!(field, "choices[0].delta.tool_calls[1].index");
            assert!(problem.contains("invalid value"), "{problem}");
            assert!(
                excerpt.starts_with("{\"id\":\"chatcmpl-AbC123\""),
                "{excerpt}"
            );
        }
        other => panic!("expected BadField, got {other:?}"),
    }
    for bad in ["-1", "true", "[0]", "{}", "4294967296", "1.5"] {
        let c = chunk(
            &format!(r#"{{"tool_calls":[{{"index":{bad},"function":{{"arguments":"{{}}"}}}}]}}"#),
            "null",
        );
        assert_eq!(
            bad_field(&decode_err(P, &c)),
            "choices[0].delta.tool_calls[0].index",
            "{bad}"
        );
    }
}

#[test]
fn finish_reason_of_another_shape_never_fails_the_chunk() {
    let delta = r#"{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}"#;
    // The AI SDK v6 object shape (a proxy passing it through) is read.
    assert_eq!(
        decode_ok(P, &chunk(delta, r#"{"unified":"length","raw":"length"}"#)),
        vec![
            frag(at(Some(0), None, None), None, Some("}")),
            end_msg(Finish::Truncated, "length"),
        ]
    );
    // Anything else is no reason: the fragment still decodes, the stream ends on [DONE].
    for reason in ["7", "true", r#"["stop"]"#, "{}", r#""""#] {
        assert_eq!(
            decode_ok(P, &chunk(delta, reason)),
            vec![frag(at(Some(0), None, None), None, Some("}"))],
            "{reason}"
        );
    }
}

#[test]
fn choice_index_as_string_is_read_and_unreadable_counts_as_first_choice() {
    let one = r#"{"id":"x","choices":[{"index":"1","delta":{"tool_calls":[{"index":0,"function":{"arguments":"a"}}]}},{"index":"0","delta":{"tool_calls":[{"index":0,"function":{"arguments":"b"}}]}}]}"#;
    assert_eq!(
        decode_ok(P, one),
        vec![frag(at(Some(0), None, None), None, Some("b"))]
    );
    let odd = r#"{"id":"x","choices":[{"index":{"n":0},"delta":{"tool_calls":[{"index":0,"function":{"arguments":"c"}}]}}]}"#;
    assert_eq!(
        decode_ok(P, odd),
        vec![frag(at(Some(0), None, None), None, Some("c"))]
    );
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let c = r#"{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o","system_fingerprint":"fp_abc","service_tier":"default","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null,"obfuscation":"k3"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        c,
        &[
            "/id",
            "/object",
            "/created",
            "/model",
            "/system_fingerprint",
            "/service_tier",
            "/usage",
            "/obfuscation",
            "/prompt_filter_results",
            "/provider",
            "/x_groq",
            "/choices/0/logprobs",
            "/choices/0/content_filter_results",
            "/choices/0/native_finish_reason",
            "/choices/0/stop_reason",
            "/choices/0/delta/role",
            "/choices/0/delta/content",
            "/choices/0/delta/refusal",
            "/choices/0/delta/reasoning_content",
            "/choices/0/delta/annotations",
            "/choices/0/delta/tool_calls/0/type",
        ],
    );
    assert_eq!(
        events,
        vec![
            frag(at(Some(0), Some("call_a"), None), Some("f"), Some("{}")),
            end_msg(Finish::Complete, "tool_calls"),
        ]
    );
}

#[test]
fn tool_calls_not_an_array_is_bad_field() {
    let c = chunk(r#"{"tool_calls":{"index":0}}"#, "null");
    assert!(
        matches!(decode_err(P, &c), DecodeError::BadField { field, .. } if field == "choices[0].delta.tool_calls")
    );
}

#[test]
fn not_json_is_not_json_error_with_excerpt() {
    match decode_err(P, "data: {\"choices\": [") {
        DecodeError::NotJson {
            provider, excerpt, ..
        } => {
            assert_eq!(provider, P);
            assert_eq!(excerpt, "data: {\"choices\": [");
        }
        other => panic!("expected NotJson, got {other:?}"),
    }
    assert!(matches!(
        decode_err(P, "{\"choices\":[]} trailing"),
        DecodeError::NotJson { .. }
    ));
}

#[test]
fn top_level_not_an_object_is_bad_field_at_root() {
    assert!(matches!(decode_err(P, "[1,2]"), DecodeError::BadField { field, .. } if field == "$"));
}

#[test]
fn done_marker_is_stream_end() {
    assert_eq!(decode_ok(P, "[DONE]"), vec![ChunkEvent::StreamEnd]);
}

#[test]
fn recorded_parallel_calls_keep_each_calls_arguments_apart() {
    let events = decode_recording(P, "openai-chat/parallel_calls.sse");
    let by_index = fragment_text_by_index(&events);
    assert_eq!(
        by_index,
        vec![
            (
                Some(0),
                r#"{"location": "San Francisco, CA", "unit": "celsius"}"#.to_string()
            ),
            (
                Some(1),
                r#"{"location": "Tokyo, JP", "unit": "celsius"}"#.to_string()
            ),
            (
                Some(2),
                r#"{"location": "Paris, FR", "unit": "celsius"}"#.to_string()
            ),
        ]
    );
    for (_, text) in &by_index {
        assert!(
            serde_json::from_str::<serde_json::Value>(text).is_ok(),
            "{text}"
        );
    }
    assert_eq!(
        events[events.len() - 2],
        end_msg(Finish::Complete, "tool_calls")
    );
    assert_eq!(events.last(), Some(&ChunkEvent::StreamEnd));
}

#[test]
fn recorded_truncated_stream_ends_with_length() {
    let events = decode_recording(P, "openai-chat/truncated_length.sse");
    assert!(events.contains(&end_msg(Finish::Truncated, "length")));
    let text = &fragment_text_by_index(&events)[0].1;
    assert!(
        serde_json::from_str::<serde_json::Value>(text).is_err(),
        "cut arguments stay cut: {text}"
    );
}

#[test]
fn every_openai_chat_recording_decodes() {
    let dir = recordings_dir().join("openai-chat");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let events = decode_recording(P, &format!("openai-chat/{name}"));
        assert!(!events.is_empty(), "{name}");
        n += 1;
    }
    assert!(n >= 8, "only {n} recordings");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        let _ = chunk_model::decode(P, value.to_string().as_bytes());
        let wrapped = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [value.clone()]}, "finish_reason": value}]});
        let _ = chunk_model::decode(P, wrapped.to_string().as_bytes());
    }

    #[test]
    fn argument_text_split_anywhere_reassembles_byte_exact(text in "\\PC{0,40}[\"\\\\\n\u{1}é🦀]{0,6}", cuts in prop::collection::vec(0usize..64, 0..6)) {
        let chars: Vec<char> = text.chars().collect();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(chars.len())).collect();
        points.push(0);
        points.push(chars.len());
        points.sort_unstable();
        let mut glued = String::new();
        for w in points.windows(2) {
            let piece: String = chars[w[0]..w[1]].iter().collect();
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, "finish_reason": null}]});
            for e in chunk_model::decode(P, chunk.to_string().as_bytes()).unwrap() {
                if let ChunkEvent::CallFragment(f) = e {
                    glued.push_str(f.arguments.as_deref().unwrap_or(""));
                }
            }
        }
        prop_assert_eq!(glued, text);
    }
}

proptest! {
    /// A finish chunk: envelope members, usage, logprobs and the finish reason of any shape
    /// never fail it.
    #[test]
    fn finish_chunk_never_fails_whatever_its_unneeded_fields_hold(v in arb_json()) {
        let c = serde_json::json!({"id": v, "object": v, "created": v, "model": v, "usage": v, "system_fingerprint": v, "obfuscation": v, "choices": [{"index": 0, "delta": {"role": v, "content": v}, "logprobs": v, "finish_reason": v, "content_filter_results": v}]});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
    }
}
