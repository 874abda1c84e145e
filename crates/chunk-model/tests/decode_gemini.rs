//! Decoder tests for Gemini / Vertex `streamGenerateContent`: whole calls, several calls in
//! one chunk, `thoughtSignature`, Vertex streamed `partialArgs`, the non-SSE JSON array
//! stream, finish reasons, plus no-panic property tests. Recordings live in
//! `tests/recordings/gemini/`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::partial_args;
use chunk_model::{ChunkEvent, DecodeError, Finish, PathValue, Provider};
use proptest::prelude::*;
use serde_json::{json, Map};
use support::*;

const P: Provider = Provider::Gemini;

const SIG1: &str = "CiQB0e2Kb0t4rJm5f3sQn8Xz1YwVh6Lq2DcPa9RuTgEk7ZiNoWMSlQEB0e2Kb6cYx3Tq9LmWn2Hs5Vk8Jd4Rf1Ag7Pu0Ze6Xb3Cw9Nt5Qy2Mv8Kh4Lj6Gs1Fd3Re7Tw0Yx2Up5Io9Pa4Sd6Fg8Hj1Kl3Zx5Cv7Bn9Mq2We4Rt6Yu8Io0Pa==";
const SIG2: &str =
    "CiIB0e2Kb2Yh7Wq4Ls9Tn3Xc6Vb1Md8Rf5Ag2Pk0Ze7Uj4Hs9Nw6Qy3Cv1Bt8Lo5Ik2Mj7Gn4Fd0Re9Tx6Yz3Ua==";

/// A response chunk whose candidate 0 has `parts` (JSON text) and an optional finish.
fn chunk(parts: &str, finish: Option<&str>) -> String {
    let finish = finish
        .map(|f| format!(r#","finishReason":"{f}""#))
        .unwrap_or_default();
    format!(
        r#"{{"candidates":[{{"content":{{"parts":{parts},"role":"model"}}{finish},"index":0}}],"usageMetadata":{{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15}},"modelVersion":"gemini-2.5-flash"}}"#
    )
}

#[test]
fn whole_call_in_one_part_is_an_end_with_compact_args_and_signature() {
    let events = decode_recording(P, "gemini/single_call.sse");
    assert_eq!(
        events,
        vec![
            end_meta(
                wire(None),
                Some("get_weather"),
                Some(r#"{"location":"Boston, MA","unit":"celsius"}"#),
                signed_by(SIG1, "gemini-2.5-flash")
            ),
            msg_end(Finish::Complete, "STOP"),
        ]
    );
}

#[test]
fn args_key_order_is_kept_as_sent() {
    let parts =
        r#"[{"functionCall":{"name":"f","args":{"z":1,"a":{"y":[true,null],"b":"é\"q"}}}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![end(
            wire(None),
            Some("f"),
            Some(r#"{"z":1,"a":{"y":[true,null],"b":"é\"q"}}"#)
        )]
    );
}

#[test]
fn several_calls_in_one_chunk_are_several_ends_in_order() {
    let events = decode_recording(P, "gemini/parallel_calls_one_chunk.sse");
    assert_eq!(
        events,
        vec![
            end_meta(
                wire(None),
                Some("get_weather"),
                Some(r#"{"location":"Boston, MA"}"#),
                signed_by(SIG2, "gemini-2.5-pro")
            ),
            end(
                wire(None),
                Some("get_weather"),
                Some(r#"{"location":"San Francisco, CA"}"#)
            ),
            end(wire(None), Some("get_local_time"), Some("{}")),
            msg_end(Finish::Complete, "STOP"),
        ],
        "the trailing usage-only chunk adds nothing"
    );
}

#[test]
fn call_without_args_gets_empty_object_arguments() {
    let parts = r#"[{"functionCall":{"name":"get_local_time"}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![end(wire(None), Some("get_local_time"), Some("{}"))]
    );
}

#[test]
fn function_call_id_when_present_is_the_wire_id_and_blank_id_is_absent() {
    let parts = r#"[{"functionCall":{"id":"fc_7Hq2","name":"f","args":{}}},{"functionCall":{"id":"","name":"g","args":{}}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![
            end(wire(Some("fc_7Hq2")), Some("f"), Some("{}")),
            end(wire(None), Some("g"), Some("{}")),
        ]
    );
}

#[test]
fn only_candidate_zero_is_read() {
    let text = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{}}}]},"index":0},{"content":{"parts":[{"functionCall":{"name":"b","args":{}}}]},"index":1}]}"#;
    assert_eq!(
        decode_ok(P, text),
        vec![end(wire(None), Some("a"), Some("{}"))]
    );
}

#[test]
fn text_and_thought_parts_and_usage_only_chunks_decode_to_nothing() {
    let parts = r#"[{"text":"thinking about it","thought":true},{"text":"Sure.","thoughtSignature":"abc"}]"#;
    assert_eq!(decode_ok(P, &chunk(parts, None)), vec![]);
    assert_eq!(
        decode_ok(
            P,
            r#"{"usageMetadata":{"promptTokenCount":4,"totalTokenCount":4},"modelVersion":"gemini-2.5-flash"}"#
        ),
        vec![]
    );
}

#[test]
fn vertex_partial_args_stream_into_fragments_closed_by_empty_function_call() {
    let events = decode_recording(P, "gemini/vertex_partial_args.sse");
    let expected = vec![
        pieces(
            wire(None),
            Some("set_light"),
            vec![],
            signed_by(SIG1, "gemini-3-pro-preview"),
        ),
        pieces(
            wire(None),
            None,
            vec![pv("$.room", json!("Living"), true)],
            Map::new(),
        ),
        pieces(
            wire(None),
            None,
            vec![
                pv("$.room", json!(" room"), false),
                pv("$.brightness", json!(50), false),
            ],
            Map::new(),
        ),
        pieces(
            wire(None),
            None,
            vec![
                pv("$.color.rgb[0]", json!(255), false),
                pv("$.color.rgb[1]", json!(180), false),
                pv("$.on", json!(true), false),
                pv("$.scene", json!(null), false),
            ],
            Map::new(),
        ),
        end(wire(None), None, None),
        pieces(
            wire(None),
            Some("get_weather"),
            vec![pv("$.location", json!("Boston"), true)],
            Map::new(),
        ),
        pieces(
            wire(None),
            None,
            vec![pv("$.location", json!(", MA"), false)],
            Map::new(),
        ),
        end(wire(None), None, None),
        msg_end(Finish::Complete, "STOP"),
    ];
    assert_eq!(events, expected);
}

#[test]
fn vertex_partial_args_pieces_rebuild_the_arguments() {
    let events = decode_recording(P, "gemini/vertex_partial_args.sse");
    // Split the pieces per call at each end, as the assembler does.
    let mut calls: Vec<Vec<PathValue>> = vec![Vec::new()];
    for e in &events {
        match e {
            ChunkEvent::CallFragment(f) => {
                if let Some(last) = calls.last_mut() {
                    last.extend(f.path_values.iter().cloned());
                }
            }
            ChunkEvent::CallEnd(_) => calls.push(Vec::new()),
            _ => {}
        }
    }
    assert_eq!(
        partial_args::build(&calls[0]).unwrap(),
        json!({"room": "Living room", "brightness": 50, "color": {"rgb": [255, 180]}, "on": true, "scene": null})
    );
    assert_eq!(
        partial_args::build(&calls[1]).unwrap(),
        json!({"location": "Boston, MA"})
    );
}

#[test]
fn vertex_partial_args_cut_by_max_tokens_have_no_end_and_a_truncated_finish() {
    let events = decode_recording(P, "gemini/vertex_partial_args_truncated.sse");
    assert!(
        !events.iter().any(|e| matches!(e, ChunkEvent::CallEnd(_))),
        "{events:?}"
    );
    assert_eq!(
        events.last(),
        Some(&msg_end(Finish::Truncated, "MAX_TOKENS"))
    );
    assert_eq!(
        events.first(),
        Some(&pieces(wire(None), Some("write_file"), vec![], Map::new()))
    );
}

#[test]
fn partial_args_without_will_continue_are_the_last_piece_and_the_end() {
    let parts = r#"[{"functionCall":{"id":"fc_1","partialArgs":[{"jsonPath":"$.q","stringValue":"end"}]}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![
            pieces(
                wire(Some("fc_1")),
                None,
                vec![pv("$.q", json!("end"), false)],
                Map::new()
            ),
            end(wire(Some("fc_1")), None, None),
        ]
    );
}

#[test]
fn closing_part_with_args_carries_them() {
    let parts = r#"[{"functionCall":{"args":{"q":"x"}}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![end(wire(None), None, Some(r#"{"q":"x"}"#))]
    );
}

#[test]
fn null_value_given_as_json_null_is_a_null_piece_and_valueless_entries_are_skipped() {
    let parts = r#"[{"functionCall":{"partialArgs":[{"jsonPath":"$.a","nullValue":null},{"jsonPath":"$.b"}],"willContinue":true}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![pieces(
            wire(None),
            None,
            vec![pv("$.a", json!(null), false)],
            Map::new()
        )]
    );
}

#[test]
fn partial_arg_without_json_path_is_a_bad_field_naming_it() {
    let parts = r#"[{"text":"x"},{"functionCall":{"partialArgs":[{"stringValue":"v"}],"willContinue":true}}]"#;
    let e = decode_err(P, &chunk(parts, None));
    assert_eq!(
        bad_field(&e),
        "candidates[0].content.parts[1].functionCall.partialArgs[0].jsonPath"
    );
}

#[test]
fn non_sse_json_array_stream_decodes_every_element() {
    let frames = frames("gemini/array_stream.json");
    assert_eq!(frames.len(), 2, "one frame per array element");
    let events = decode_recording(P, "gemini/array_stream.json");
    assert_eq!(
        events,
        vec![
            end(
                wire(None),
                Some("get_weather"),
                Some(r#"{"location":"Tokyo","note":"brackets ] and , inside \"strings\""}"#)
            ),
            end(
                wire(None),
                Some("get_weather"),
                Some(r#"{"location":"Osaka"}"#)
            ),
            msg_end(Finish::Complete, "STOP"),
        ]
    );
    // The whole array as one chunk decodes the same.
    let whole = std::fs::read(recordings_dir().join("gemini/array_stream.json")).unwrap();
    assert_eq!(chunk_model::decode(P, &whole).unwrap(), events);
}

#[test]
fn finish_reasons_map_to_finish() {
    for (reason, finish) in [
        ("STOP", Finish::Complete),
        ("MAX_TOKENS", Finish::Truncated),
        ("SAFETY", Finish::Filtered),
        ("RECITATION", Finish::Filtered),
        ("BLOCKLIST", Finish::Filtered),
        ("PROHIBITED_CONTENT", Finish::Filtered),
        ("SPII", Finish::Filtered),
        ("MALFORMED_FUNCTION_CALL", Finish::Error),
        ("OTHER", Finish::Complete),
        ("FINISH_REASON_UNSPECIFIED", Finish::Complete),
    ] {
        assert_eq!(
            decode_ok(P, &chunk("[]", Some(reason))),
            vec![msg_end(finish, reason)],
            "{reason}"
        );
    }
}

#[test]
fn malformed_function_call_finish_without_content_parts_is_an_error_end() {
    let events = decode_recording(P, "gemini/malformed_function_call.sse");
    assert_eq!(
        events,
        vec![msg_end(Finish::Error, "MALFORMED_FUNCTION_CALL")]
    );
}

#[test]
fn prompt_feedback_block_reason_is_a_filtered_end() {
    let events = decode_recording(P, "gemini/blocked_prompt.sse");
    assert_eq!(
        events,
        vec![msg_end(Finish::Filtered, "PROHIBITED_CONTENT")]
    );
}

#[test]
fn error_object_in_the_stream_is_a_provider_error() {
    let text = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
    assert_eq!(
        decode_ok(P, text),
        vec![ChunkEvent::ProviderError {
            message: "503: The model is overloaded. Please try again later.".to_string()
        }]
    );
}

#[test]
fn args_that_are_not_an_object_is_a_bad_field_naming_its_path() {
    let parts = r#"[{"functionCall":{"name":"f","args":"{\"a\":1}"}}]"#;
    let e = decode_err(P, &chunk(parts, None));
    assert_eq!(
        bad_field(&e),
        "candidates[0].content.parts[0].functionCall.args"
    );
}

#[test]
fn will_continue_of_the_wrong_type_is_a_bad_field_naming_its_path() {
    let parts = r#"[{"functionCall":{"name":"f","willContinue":"yes"}}]"#;
    let e = decode_err(P, &chunk(parts, None));
    assert_eq!(
        bad_field(&e),
        "candidates[0].content.parts[0].functionCall.willContinue"
    );
}

#[test]
fn finish_reason_of_another_shape_never_fails_the_chunk() {
    let parts = r#"[{"functionCall":{"name":"f","args":{"a":1}}}]"#;
    let call = end(wire(None), Some("f"), Some(r#"{"a":1}"#));
    for reason in ["3", "true", r#"["STOP"]"#, "{}"] {
        let c = chunk(parts, None).replacen(
            r#""index":0"#,
            &format!(r#""index":0,"finishReason":{reason}"#),
            1,
        );
        assert_eq!(decode_ok(P, &c), vec![call.clone()], "{c}");
    }
    let c = chunk(parts, None).replacen(
        r#""index":0"#,
        r#""index":0,"finishReason":{"unified":"length","raw":"MAX_TOKENS"}"#,
        1,
    );
    assert_eq!(
        decode_ok(P, &c),
        vec![call, msg_end(Finish::Truncated, "length")]
    );
}

#[test]
fn thought_signature_that_is_not_a_string_is_not_kept_and_never_fails() {
    // Text and thought parts carry signatures too; none of them is needed to assemble calls.
    let parts = r#"[{"text":"hi","thoughtSignature":{"v":1}},{"functionCall":{"name":"f","args":{}},"thoughtSignature":7}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, Some("STOP"))),
        vec![
            end(wire(None), Some("f"), Some("{}")),
            msg_end(Finish::Complete, "STOP"),
        ]
    );
}

#[test]
fn partial_arg_flags_and_numbers_written_as_strings_are_read() {
    let parts = r#"[{"functionCall":{"name":"f","willContinue":"true","partialArgs":[{"jsonPath":"$.n","numberValue":"2.5"},{"jsonPath":"$.b","boolValue":"false","willContinue":"false"},{"jsonPath":"$.i","numberValue":"-3"}]}}]"#;
    assert_eq!(
        decode_ok(P, &chunk(parts, None)),
        vec![pieces(
            wire(None),
            Some("f"),
            vec![
                pv("$.n", json!(2.5), false),
                pv("$.b", json!(false), false),
                pv("$.i", json!(-3), false),
            ],
            Map::new()
        )]
    );
    let parts = r#"[{"functionCall":{"partialArgs":[{"jsonPath":"$.n","numberValue":"NaN"}],"willContinue":true}}]"#;
    assert_eq!(
        bad_field(&decode_err(P, &chunk(parts, None))),
        "candidates[0].content.parts[0].functionCall.partialArgs[0].numberValue"
    );
}

#[test]
fn prompt_feedback_of_another_shape_never_fails_the_chunk() {
    for feedback in [
        "\"BLOCKED\"",
        "[]",
        r#"{"blockReason":9,"safetyRatings":"x"}"#,
    ] {
        let c = format!(
            r#"{{"promptFeedback":{feedback},"usageMetadata":{{"promptTokenCount":"8"}}}}"#
        );
        assert_eq!(decode_ok(P, &c), vec![], "{c}");
    }
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let c = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"id":"fc_1","name":"f","args":{"a":1}},"thoughtSignature":"sig"},{"text":"done","thoughtSignature":"t"}],"role":"model"},"finishReason":"STOP","index":0,"safetyRatings":[],"avgLogprobs":-0.2}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15},"modelVersion":"gemini-2.5-flash","responseId":"r1","createTime":"2025-01-01T00:00:00Z"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        c,
        &[
            "/usageMetadata",
            "/usageMetadata/promptTokenCount",
            "/usageMetadata/candidatesTokensDetails",
            "/responseId",
            "/createTime",
            "/modelStatus",
            "/candidates/0/index",
            "/candidates/0/safetyRatings",
            "/candidates/0/citationMetadata",
            "/candidates/0/groundingMetadata",
            "/candidates/0/urlContextMetadata",
            "/candidates/0/avgLogprobs",
            "/candidates/0/logprobsResult",
            "/candidates/0/finishMessage",
            "/candidates/0/tokenCount",
            "/candidates/0/content/role",
            "/candidates/0/content/parts/1/text",
            "/candidates/0/content/parts/1/thoughtSignature",
            "/candidates/0/content/parts/1/thought",
            "/candidates/0/content/parts/0/videoMetadata",
        ],
    );
    assert_eq!(
        events,
        vec![
            end_meta(
                wire(Some("fc_1")),
                Some("f"),
                Some(r#"{"a":1}"#),
                signed_by("sig", "gemini-2.5-flash")
            ),
            msg_end(Finish::Complete, "STOP"),
        ]
    );
    // the model is only wanted: one that is not a string is left out, never an error
    for odd in ["null", "7", "{}", "[]", "\"\"", "true"] {
        let c = c.replace(
            r#""modelVersion":"gemini-2.5-flash""#,
            &format!(r#""modelVersion":{odd}"#),
        );
        assert_eq!(
            decode_ok(P, &c)[0],
            end_meta(
                wire(Some("fc_1")),
                Some("f"),
                Some(r#"{"a":1}"#),
                signature("sig")
            ),
            "{c}"
        );
    }
}

/// A signed call keeps the model that made it (`modelVersion`), for history to send the
/// signature back only to that model family; an unsigned call keeps no model.
#[test]
fn a_signed_call_keeps_its_model_version_and_an_unsigned_one_none() {
    let c = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{}},"thoughtSignature":"s1"},{"functionCall":{"name":"b","args":{}}}],"role":"model"},"index":0}],"modelVersion":"gemini-3-pro-preview"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![
            end_meta(
                wire(None),
                Some("a"),
                Some("{}"),
                signed_by("s1", "gemini-3-pro-preview")
            ),
            end_meta(wire(None), Some("b"), Some("{}"), Default::default()),
        ]
    );
}

#[test]
fn unknown_fields_everywhere_are_ignored() {
    let text = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{},"newField":1},"newPartField":{"x":[]}}],"role":"model","newContent":true},"index":0,"avgLogprobs":-0.2,"citationMetadata":{}}],"newTop":"x","createTime":"2025-01-01T00:00:00Z"}"#;
    assert_eq!(
        decode_ok(P, text),
        vec![end(wire(None), Some("f"), Some("{}"))]
    );
}

#[test]
fn non_json_chunk_is_a_not_json_error_naming_gemini() {
    let e = decode_err(P, r#"{"candidates":[{"content""#);
    assert!(matches!(e, DecodeError::NotJson { .. }), "{e:?}");
    assert_eq!(e.provider(), Some(P));
}

const KEYS: &[&str] = &[
    "candidates",
    "content",
    "parts",
    "functionCall",
    "name",
    "args",
    "id",
    "partialArgs",
    "jsonPath",
    "stringValue",
    "numberValue",
    "boolValue",
    "nullValue",
    "willContinue",
    "thoughtSignature",
    "finishReason",
    "promptFeedback",
    "blockReason",
    "error",
    "message",
    "usageMetadata",
];
const WORDS: &[&str] = &[
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "MALFORMED_FUNCTION_CALL",
    "$.a",
    "$.a[0]",
    "$['a b']",
    "get_weather",
];

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_values_never_panic(value in arb_json_with(KEYS, WORDS)) {
        let text = value.to_string();
        match chunk_model::decode(P, text.as_bytes()) {
            Ok(events) => {
                // Whatever decodes, its structured pieces never make the rebuild panic.
                for e in events {
                    if let ChunkEvent::CallFragment(f) = e {
                        let _ = partial_args::build(&f.path_values);
                    }
                }
            }
            Err(e) => prop_assert_eq!(e.provider(), Some(P)),
        }
    }
}

#[test]
fn bad_field_in_an_array_element_names_the_element() {
    let text = r#"[{"candidates":[]},{"candidates":[{"content":{"parts":[{"functionCall":{"name":7}}]}}]}]"#;
    let e = decode_err(P, text);
    assert_eq!(
        bad_field(&e),
        "[1].candidates[0].content.parts[0].functionCall.name"
    );
}

#[test]
fn cut_off_array_stream_is_not_json() {
    let e = decode_err(P, r#"[{"candidates":[]},{"candid"#);
    assert!(matches!(e, DecodeError::NotJson { .. }), "{e:?}");
}

proptest! {
    /// Usage, metadata and finish/block reasons of any shape never fail a chunk.
    #[test]
    fn usage_and_metadata_never_fail_whatever_they_hold(v in arb_json()) {
        let c = json!({"candidates": [{"content": {"parts": [{"text": v, "thoughtSignature": v}], "role": v}, "finishReason": v, "index": v, "safetyRatings": v, "citationMetadata": v, "avgLogprobs": v}], "usageMetadata": v, "modelVersion": v, "responseId": v, "promptFeedback": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
    }
}
