//! Decoder tests for Anthropic Messages streaming: one test per stream quirk, named for it,
//! on recorded streams (`tests/recordings/anthropic/`, SSE with `event:` lines) and single
//! chunks, plus no-panic property tests.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{
    CallFragment, CallKind, ChunkEvent, DecodeError, Finish, Provider, ReasoningKind,
    ReasoningPiece,
};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::Anthropic;

#[test]
fn single_call_recording_decodes_to_start_deltas_and_ends() {
    let events = decode_recording(P, "anthropic/single_call.sse");
    assert_eq!(
        events,
        vec![
            end(idx(0), None, None), // the text block stops too
            frag(
                idx_id(1, "toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
                Some("get_weather"),
                None
            ),
            frag(idx(1), None, Some("")),
            frag(idx(1), None, Some(r#"{"location": "San Fra"#)),
            frag(idx(1), None, Some(r#"ncisco, CA", "unit": "fahrenheit"}"#)),
            end(idx(1), None, None),
            msg_end(Finish::Complete, "tool_use"),
            ChunkEvent::StreamEnd,
        ]
    );
    let args: serde_json::Value = serde_json::from_str(&text_at(&events, 1)).unwrap();
    assert_eq!(args["location"], "San Francisco, CA");
}

#[test]
fn ping_anywhere_decodes_to_nothing() {
    assert_eq!(decode_ok(P, r#"{"type": "ping"}"#), vec![]);
    assert_eq!(
        decode_ok(P, r#"{"type":"ping","extra":{"nested":[1,2]}}"#),
        vec![]
    );
    // Pings between the deltas of a call do not disturb its text.
    let events = decode_recording(P, "anthropic/single_call.sse");
    assert_eq!(
        text_at(&events, 1),
        r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
    );
}

#[test]
fn first_partial_json_is_empty_string_and_is_kept_as_empty_fragment() {
    let chunk = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#;
    assert_eq!(decode_ok(P, chunk), vec![frag(idx(1), None, Some(""))]);
}

#[test]
fn tool_with_no_deltas_at_all_is_a_start_and_an_end() {
    let events = decode_recording(P, "anthropic/tool_without_input.sse");
    assert_eq!(
        events,
        vec![
            frag(
                idx_id(0, "toolu_01Nn4kVb8Zt2Hs6Qy9Rm1Wc5"),
                Some("get_current_time"),
                None
            ),
            end(idx(0), None, None),
            msg_end(Finish::Complete, "tool_use"),
            ChunkEvent::StreamEnd,
        ]
    );
    assert_eq!(text_at(&events, 0), "", "empty text: `{{}}` downstream");
}

#[test]
fn start_block_input_object_is_ignored_in_favour_of_deltas() {
    let chunk = r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_X","name":"f","input":{"a":1}}}"#;
    assert_eq!(
        decode_ok(P, chunk),
        vec![frag(idx_id(2, "toolu_X"), Some("f"), None)]
    );
}

#[test]
fn max_tokens_cut_without_content_block_stop_gives_truncated_end_and_no_call_end() {
    let events = decode_recording(P, "anthropic/truncated_max_tokens.sse");
    assert!(
        !events.iter().any(|e| matches!(e, ChunkEvent::CallEnd(_))),
        "no content_block_stop arrived: {events:?}"
    );
    assert_eq!(
        events[events.len() - 2..],
        [
            msg_end(Finish::Truncated, "max_tokens"),
            ChunkEvent::StreamEnd
        ]
    );
    assert_eq!(
        text_at(&events, 0),
        r##"{"path": "notes.md", "content": "# Notes\n\nThe first section covers"##
    );
}

#[test]
fn parallel_tool_use_blocks_keep_their_own_index_id_and_text() {
    let events = decode_recording(P, "anthropic/parallel_calls.sse");
    let starts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) if f.name.is_some() => {
                Some((f.at.index, f.at.wire_id.clone(), f.name.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (
                Some(0),
                Some("toolu_01A09q90qw90lq917835lq9a".to_string()),
                Some("get_weather".to_string())
            ),
            (
                Some(1),
                Some("toolu_01B7zX2mQp4Rk8sLd3Vn6Wy1".to_string()),
                Some("get_time".to_string())
            ),
        ]
    );
    assert_eq!(text_at(&events, 0), r#"{"location": "Paris"}"#);
    assert_eq!(text_at(&events, 1), r#"{"timezone": "Europe/Paris"}"#);
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(c) => c.at.index,
            _ => None,
        })
        .collect();
    assert_eq!(ends, vec![0, 1]);
}

fn reasoning(index: u32, kind: Option<ReasoningKind>, text: &str, signature: &str) -> ChunkEvent {
    let some = |t: &str| (!t.is_empty()).then(|| t.to_string());
    ChunkEvent::Reasoning(ReasoningPiece {
        index,
        kind,
        text: some(text),
        signature: some(signature),
        data: None,
    })
}

#[test]
fn thinking_block_with_signature_before_the_tool_block_is_reasoning_then_its_stop() {
    let events = decode_recording(P, "anthropic/thinking_then_tool.sse");
    assert_eq!(
        events,
        vec![
            reasoning(0, Some(ReasoningKind::Thinking), "", ""),
            reasoning(
                0,
                None,
                "The user wants the stock price; I should call the quote tool with the ticker.",
                ""
            ),
            reasoning(
                0,
                None,
                "",
                "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+1M6QqY8eB3vU9gR6wqbQ=="
            ),
            end(idx(0), None, None),
            frag(
                idx_id(1, "toolu_01Cv6Jm2Sx9Pq4Fz8Kt3Hn7D"),
                Some("get_quote"),
                None
            ),
            frag(idx(1), None, Some("")),
            frag(idx(1), None, Some(r#"{"ticker":"ACME"}"#)),
            end(idx(1), None, None),
            msg_end(Finish::Complete, "tool_use"),
            ChunkEvent::StreamEnd,
        ]
    );
}

#[test]
fn server_tool_use_block_is_a_call_of_kind_server_tool() {
    let chunk = r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}}"#;
    assert_eq!(
        decode_ok(P, chunk),
        vec![ChunkEvent::CallFragment(CallFragment {
            at: idx_id(1, "srvtoolu_014hJH82Qum7Td6UV8gDXThB"),
            name: Some("web_search".into()),
            kind: Some(CallKind::ServerTool),
            ..CallFragment::default()
        })]
    );
}

#[test]
fn mcp_tool_use_block_is_a_call_of_kind_mcp_with_its_server_kept() {
    let chunk = r#"{"type":"content_block_start","index":0,"content_block":{"type":"mcp_tool_use","id":"mcptoolu_01A","name":"echo","server_name":"example-mcp","input":{}}}"#;
    let mut metadata = serde_json::Map::new();
    metadata.insert("server_name".into(), json!("example-mcp"));
    assert_eq!(
        decode_ok(P, chunk),
        vec![ChunkEvent::CallFragment(CallFragment {
            at: idx_id(0, "mcptoolu_01A"),
            name: Some("echo".into()),
            kind: Some(CallKind::Mcp),
            metadata,
            ..CallFragment::default()
        })]
    );
    // a plain tool_use states no kind (function)
    let chunk = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#;
    assert!(matches!(&decode_ok(P, chunk)[..], [ChunkEvent::CallFragment(f)] if f.kind.is_none()));
}

#[test]
fn server_tool_result_blocks_are_results_for_their_call() {
    let search = r#"{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"Rust 1.90","url":"https://blog.rust-lang.org/","encrypted_content":"EqgfCioIARgB","page_age":"September 18, 2025"}]}}"#;
    assert_eq!(
        decode_ok(P, search),
        vec![result(
            "srvtoolu_1",
            r#"[{"encrypted_content":"EqgfCioIARgB","page_age":"September 18, 2025","title":"Rust 1.90","type":"web_search_result","url":"https://blog.rust-lang.org/"}]"#,
            false
        )]
    );
    let failed = r#"{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}}}"#;
    assert_eq!(
        decode_ok(P, failed),
        vec![result(
            "srvtoolu_1",
            r#"{"error_code":"max_uses_exceeded","type":"web_search_tool_result_error"}"#,
            true
        )]
    );
    let mcp = r#"{"type":"content_block_start","index":1,"content_block":{"type":"mcp_tool_result","tool_use_id":"mcptoolu_01A","is_error":false,"content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]}}"#;
    assert_eq!(
        decode_ok(P, mcp),
        vec![result("mcptoolu_01A", "Hello, world", false)]
    );
    let mcp_error = r#"{"type":"content_block_start","index":1,"content_block":{"type":"mcp_tool_result","tool_use_id":"mcptoolu_01A","is_error":true,"content":"tool crashed"}}"#;
    assert_eq!(
        decode_ok(P, mcp_error),
        vec![result("mcptoolu_01A", "tool crashed", true)]
    );
    // a result block without a usable tool_use_id, or with odd fields, never fails the chunk
    for c in [
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"mcp_tool_result","content":[]}}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"code_execution_tool_result","tool_use_id":7,"is_error":"yes"}}"#,
    ] {
        assert_eq!(decode_ok(P, c), vec![], "{c}");
    }
    // its stop is the stop of a block that holds no call
    let stop = r#"{"type":"content_block_stop","index":2}"#;
    assert!(matches!(&decode_ok(P, stop)[..], [ChunkEvent::CallEnd(_)]));
}

#[test]
fn recorded_server_and_mcp_tool_streams_decode_calls_and_results() {
    let events = decode_recording(P, "anthropic/server_tool_web_search.sse");
    let kinds: Vec<Option<CallKind>> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) if f.name.is_some() => Some(f.kind),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec![Some(CallKind::ServerTool), None]);
    let results: Vec<&ChunkEvent> = events
        .iter()
        .filter(|e| matches!(e, ChunkEvent::ToolResult(_)))
        .collect();
    assert_eq!(results.len(), 1);
    let events = decode_recording(P, "anthropic/mcp_tool_use.sse");
    assert!(events.contains(&result(
        "mcptoolu_014Zx8bQm2KcV5nR7tYp3L9d",
        "Tokio 1.47.1 is the latest release.",
        false
    )));
}

#[test]
fn text_block_start_and_text_deltas_decode_to_nothing() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
        ),
        vec![]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#
        ),
        vec![]
    );
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}"#
        ),
        vec![]
    );
}

#[test]
fn blank_tool_id_and_name_are_absent() {
    let chunk = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"","name":"  ","input":{}}}"#;
    assert_eq!(decode_ok(P, chunk), vec![frag(idx(0), None, None)]);
}

#[test]
fn stop_reasons_map_to_finish() {
    for (reason, finish) in [
        ("end_turn", Finish::Complete),
        ("tool_use", Finish::Complete),
        ("stop_sequence", Finish::Complete),
        ("pause_turn", Finish::Complete),
        ("max_tokens", Finish::Truncated),
        ("refusal", Finish::Filtered),
        ("some_future_reason", Finish::Complete),
    ] {
        let chunk = format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}","stop_sequence":null}},"usage":{{"output_tokens":3}}}}"#
        );
        assert_eq!(
            decode_ok(P, &chunk),
            vec![msg_end(finish, reason)],
            "{reason}"
        );
    }
}

#[test]
fn message_delta_without_stop_reason_decodes_to_nothing() {
    let chunk =
        r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":3}}"#;
    assert_eq!(decode_ok(P, chunk), vec![]);
}

#[test]
fn error_event_mid_stream_is_a_provider_error() {
    let events = decode_recording(P, "anthropic/overloaded_error.sse");
    assert_eq!(
        events.last(),
        Some(&ChunkEvent::ProviderError {
            message: "overloaded_error: Overloaded".to_string()
        })
    );
}

#[test]
fn message_start_and_unknown_event_types_decode_to_nothing() {
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"message_start","message":{"id":"msg_1","content":[],"stop_reason":null}}"#
        ),
        vec![]
    );
    // An event type added later, with fields shaped unlike anything known.
    assert_eq!(
        decode_ok(
            P,
            r#"{"type":"content_block_annotation","index":"zero","delta":[1,2]}"#
        ),
        vec![]
    );
}

#[test]
fn unknown_fields_everywhere_are_ignored() {
    let chunk = r#"{"type":"content_block_delta","index":3,"new_top":{"x":1},"delta":{"type":"input_json_delta","partial_json":"{}","new_inner":[null]}}"#;
    assert_eq!(decode_ok(P, chunk), vec![frag(idx(3), None, Some("{}"))]);
}

#[test]
fn block_index_as_numeric_string_is_read_as_its_number() {
    let c = r#"{"type":"content_block_delta","index":"2","delta":{"type":"input_json_delta","partial_json":"{}"}}"#;
    assert_eq!(decode_ok(P, c), vec![frag(idx(2), None, Some("{}"))]);
    let c = r#"{"type":"content_block_stop","index":"one"}"#;
    assert_eq!(bad_field(&decode_err(P, c)), "index");
}

#[test]
fn stop_reason_of_another_shape_never_fails_message_delta() {
    let c = r#"{"type":"message_delta","delta":{"stop_reason":{"unified":"length","raw":"max_tokens"},"stop_sequence":null},"usage":{"output_tokens":12}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Truncated,
            reason: "length".into()
        }]
    );
    for reason in ["1", "false", "[]", "{}"] {
        let c = format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":{reason}}},"usage":{{"output_tokens":1}}}}"#
        );
        assert_eq!(decode_ok(P, &c), vec![], "{c}");
    }
}

#[test]
fn tool_block_with_non_string_id_is_a_bad_field_naming_it() {
    let c = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":42,"name":"f","input":{}}}"#;
    assert_eq!(bad_field(&decode_err(P, c)), "content_block.id");
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let message_delta = r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":10,"output_tokens":89,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"server_tool_use":{"web_search_requests":1}}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        message_delta,
        &[
            "/usage",
            "/usage/output_tokens",
            "/usage/server_tool_use",
            "/index",
            "/content_block",
            "/context_management",
            "/delta/stop_sequence",
            "/delta/type",
            "/delta/partial_json",
            "/delta/container",
            "/delta/stop_details",
        ],
    );
    assert_eq!(
        events,
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "tool_use".into()
        }]
    );

    let tool_start = r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        tool_start,
        &[
            "/content_block/input",
            "/content_block/caller",
            "/content_block/cache_control",
            "/delta",
            "/usage",
            "/message",
        ],
    );
    assert_eq!(events, vec![frag(idx_id(1, "toolu_1"), Some("f"), None)]);

    // A text or server-tool-result block: nothing in it is needed, not even the index.
    let text_start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"","citations":null}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        text_start,
        &[
            "/index",
            "/content_block/text",
            "/content_block/id",
            "/content_block/name",
            "/content_block/citations",
            "/content_block/type",
            "/content_block",
        ],
    );
    assert_eq!(events, vec![]);

    let json_delta = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a"}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        json_delta,
        &[
            "/delta/stop_reason",
            "/content_block",
            "/usage",
            "/delta/text",
        ],
    );
    assert_eq!(events, vec![frag(idx(1), None, Some("{\"a"))]);

    let thinking_delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        thinking_delta,
        &["/delta/partial_json", "/delta/signature", "/usage"],
    );
    assert_eq!(events, vec![reasoning(0, None, "hmm", "")]);
    // reasoning is wanted, not needed: an index or text it cannot read skips the piece
    for pointer in ["/index", "/delta/thinking"] {
        for value in wrong_typed_values() {
            let variant = with_member(thinking_delta, pointer, value.clone());
            let events = decode_ok(P, &variant);
            assert!(
                events.len() <= 1
                    && events
                        .iter()
                        .all(|e| matches!(e, ChunkEvent::Reasoning(r) if r.signature.is_none())),
                "{pointer} = {value}: {events:?}"
            );
        }
    }
}

#[test]
fn redacted_thinking_block_is_reasoning_with_its_data() {
    let chunk = r#"{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj"}}"#;
    assert_eq!(
        decode_ok(P, chunk),
        vec![ChunkEvent::Reasoning(ReasoningPiece {
            index: 0,
            kind: Some(ReasoningKind::RedactedThinking),
            text: None,
            signature: None,
            data: Some(
                "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj"
                    .to_string()
            ),
        })]
    );
}

#[test]
fn non_json_chunk_is_a_not_json_error_naming_anthropic() {
    let e = decode_err(P, "{\"type\":\"content_block_delta\",");
    assert!(matches!(e, DecodeError::NotJson { .. }), "{e:?}");
    assert_eq!(e.provider(), Some(P));
}

#[test]
fn negative_index_is_a_bad_field_naming_index() {
    let e = decode_err(P, r#"{"type":"content_block_stop","index":-1}"#);
    assert_eq!(bad_field(&e), "index");
}

#[test]
fn partial_json_that_is_not_a_string_is_a_bad_field_naming_its_path() {
    let e = decode_err(
        P,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":{"a":1}}}"#,
    );
    assert_eq!(bad_field(&e), "delta.partial_json");
}

#[test]
fn block_stop_without_index_is_a_bad_field() {
    let e = decode_err(P, r#"{"type":"content_block_stop"}"#);
    assert_eq!(bad_field(&e), "index");
}

#[test]
fn top_level_array_is_a_bad_field_at_the_root() {
    let e = decode_err(P, r#"[{"type":"ping"}]"#);
    assert_eq!(bad_field(&e), "$");
}

const KEYS: &[&str] = &[
    "type",
    "index",
    "content_block",
    "delta",
    "id",
    "name",
    "input",
    "partial_json",
    "stop_reason",
    "error",
    "message",
    "text",
];
const WORDS: &[&str] = &[
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "message_start",
    "error",
    "ping",
    "tool_use",
    "server_tool_use",
    "input_json_delta",
    "text_delta",
    "max_tokens",
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
            Ok(_) => {}
            Err(e) => prop_assert_eq!(e.provider(), Some(P)),
        }
    }
}

proptest! {
    /// `message_delta`: usage, index, content_block and a stop_reason of any shape never
    /// fail the chunk.
    #[test]
    fn message_delta_never_fails_whatever_its_fields_hold(v in arb_json()) {
        let c = serde_json::json!({"type": "message_delta", "delta": {"stop_reason": v, "stop_sequence": v, "type": v, "partial_json": v}, "usage": v, "index": v, "content_block": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
        let c = serde_json::json!({"type": "message_delta", "delta": v, "usage": v});
        prop_assert!(chunk_model::decode(P, c.to_string().as_bytes()).is_ok());
    }
}
