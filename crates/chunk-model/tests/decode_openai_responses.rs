//! Decoder tests for `openai-responses`: call items keyed by `item_id`, the consumer id is
//! `call_id`, ends from `.done` events, message ends, errors, recorded streams, and a no-panic
//! property test. The other call kinds (custom, mcp, mcp_approval_request) and items ending
//! `incomplete` are in `decode_openai_responses_kinds.rs`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chunk_model::{CallEnd, CallFragment, ChunkEvent, DecodeError, Finish, Provider};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: Provider = Provider::OpenaiResponses;

fn meta(item_id: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("item_id".into(), json!(item_id));
    m
}

#[test]
fn output_item_added_function_call_starts_call_keyed_by_call_id_and_item_id() {
    let c = r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"fc_123","type":"function_call","status":"in_progress","arguments":"","call_id":"call_abc","name":"get_weather"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallFragment(CallFragment {
            at: at(Some(0), Some("call_abc"), Some("fc_123")),
            name: Some("get_weather".into()),
            metadata: meta("fc_123"),
            ..CallFragment::default()
        })]
    );
}

#[test]
fn argument_deltas_are_keyed_by_item_id_not_call_id() {
    let c = r#"{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_123","output_index":0,"delta":"{\"loc","obfuscation":"x1"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(
            at(Some(0), None, Some("fc_123")),
            None,
            Some("{\"loc")
        )]
    );
}

#[test]
fn arguments_done_ends_call_with_full_text() {
    let c = r#"{"type":"response.function_call_arguments.done","sequence_number":9,"item_id":"fc_123","output_index":0,"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![end(
            at(Some(0), None, Some("fc_123")),
            Some("get_weather"),
            Some(r#"{"location":"Paris"}"#)
        )]
    );
}

#[test]
fn output_item_done_ends_call_with_call_id_name_and_arguments() {
    let c = r#"{"type":"response.output_item.done","sequence_number":10,"output_index":0,"item":{"id":"fc_123","type":"function_call","status":"completed","arguments":"{\"location\":\"Paris\"}","call_id":"call_abc","name":"get_weather"}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::CallEnd(CallEnd {
            at: at(Some(0), Some("call_abc"), Some("fc_123")),
            name: Some("get_weather".into()),
            arguments: Some(r#"{"location":"Paris"}"#.into()),
            metadata: meta("fc_123"),
            ..CallEnd::default()
        })]
    );
}

#[test]
fn reasoning_item_before_the_call_is_no_events() {
    for c in [
        r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
        r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"hmm"}"#,
        r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAA"}}"#,
        r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hi","logprobs":[]}"#,
        r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
    ] {
        assert_eq!(decode_ok(P, c), vec![], "{c}");
    }
}

#[test]
fn unknown_event_type_with_odd_fields_is_ignored_not_an_error() {
    let c = r#"{"type":"response.some_future_event","output_index":"zero","item":[1,2],"delta":{"x":1}}"#;
    assert_eq!(decode_ok(P, c), vec![]);
}

#[test]
fn handled_event_with_wrong_type_is_bad_field_naming_its_path() {
    let c = r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":"zero","delta":"x"}"#;
    assert!(
        matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "output_index")
    );
    let c = r#"{"type":"response.function_call_arguments.delta","item_id":["fc_1"],"output_index":0,"delta":"x"}"#;
    assert!(matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "item_id"));
    let c = r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":{"x":1}}"#;
    assert!(matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "delta"));
    let c = r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","call_id":7}}"#;
    assert!(
        matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "item.call_id")
    );
}

#[test]
fn output_index_as_numeric_string_is_read_as_its_number() {
    let c = r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":"2","delta":"x"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![frag(at(Some(2), None, Some("fc_1")), None, Some("x"))]
    );
}

#[test]
fn non_function_items_with_odd_fields_never_fail_a_chunk() {
    // Only `function_call` items are read: another item's id, name or call_id of any shape,
    // and an odd output_index next to it, change nothing.
    for c in [
        r#"{"type":"response.output_item.added","output_index":"first","item":{"id":17,"type":"message","role":"assistant","content":[]}}"#,
        // (`mcp_call` items are calls now: see below; another non-call item stands here)
        r#"{"type":"response.output_item.done","output_index":-1,"item":{"id":"ig_1","type":"image_generation_call","name":{"server":"x"},"arguments":"{}","call_id":5}}"#,
        r#"{"type":"response.output_item.added","output_index":0,"item":{"type":["web_search_call"],"id":null,"action":{"query":"x"}}}"#,
        r#"{"type":"response.output_item.added","output_index":0,"item":"not an object"}"#,
    ] {
        assert_eq!(decode_ok(P, c), vec![], "{c}");
    }
    // A call item (`mcp_call` included) needs its name as a string, like a `function_call`;
    // an `mcp_call`'s `call_id` is not read (it has none: its id is the item id).
    let c = r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"mcp_1","type":"mcp_call","name":{"server":"x"},"arguments":"{}","call_id":5}}"#;
    assert!(
        matches!(decode_err(P, c), DecodeError::BadField { field, .. } if field == "item.name")
    );
    let c = r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"mcp_1","type":"mcp_call","name":"ask","arguments":"{}","call_id":5}}"#;
    assert!(matches!(
        &decode_ok(P, c)[..],
        [ChunkEvent::CallEnd(e)] if e.at.wire_id.as_deref() == Some("mcp_1")
    ));
}

#[test]
fn response_object_of_any_shape_never_fails_completed_or_incomplete() {
    let c = r#"{"type":"response.completed","sequence_number":"20","response":{"id":1,"status":["completed"],"usage":"n/a","incomplete_details":"none","output":{"x":1},"error":null}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".into()
        }]
    );
    let c = r#"{"type":"response.completed","response":"done"}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".into()
        }]
    );
    // incomplete_details of another shape: still a truncation, with the generic reason.
    for details in [r#""max_output_tokens""#, r#"{"reason":7}"#, "[1]"] {
        let c = format!(
            r#"{{"type":"response.incomplete","response":{{"status":"incomplete","incomplete_details":{details},"usage":{{"output_tokens":"12"}}}}}}"#
        );
        assert_eq!(
            decode_ok(P, &c),
            vec![ChunkEvent::MessageEnd {
                finish: Finish::Truncated,
                reason: "incomplete".into()
            }],
            "{c}"
        );
    }
}

#[test]
fn unneeded_fields_of_the_wrong_type_never_fail_a_chunk() {
    let delta = r#"{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":0,"delta":"{\"a","obfuscation":"x1"}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        delta,
        &[
            "/sequence_number",
            "/obfuscation",
            "/logprobs",
            "/name",
            "/arguments",
            "/item",
            "/response",
            "/message",
            "/code",
            "/content_index",
        ],
    );
    assert_eq!(
        events,
        vec![frag(at(Some(0), None, Some("fc_1")), None, Some("{\"a"))]
    );

    let added = r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_a","name":"f"}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        added,
        &[
            "/sequence_number",
            "/item_id",
            "/delta",
            "/name",
            "/response",
            "/item/status",
            "/item/namespace",
        ],
    );
    assert_eq!(
        events,
        vec![ChunkEvent::CallFragment(CallFragment {
            at: at(Some(0), Some("call_a"), Some("fc_1")),
            name: Some("f".into()),
            metadata: meta("fc_1"),
            ..CallFragment::default()
        })]
    );

    let completed = r#"{"type":"response.completed","sequence_number":20,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0}},"incomplete_details":null,"error":null}}"#;
    let events = assert_unneeded_fields_never_fail(
        P,
        completed,
        &[
            "/sequence_number",
            "/output_index",
            "/item_id",
            "/item",
            "/delta",
            "/response/id",
            "/response/created_at",
            "/response/status",
            "/response/output",
            "/response/usage",
            "/response/usage/output_tokens_details",
            "/response/incomplete_details",
            "/response/metadata",
            "/response/reasoning",
        ],
    );
    assert_eq!(
        events,
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".into()
        }]
    );
}

#[test]
fn completed_is_message_end_complete() {
    let c = r#"{"type":"response.completed","sequence_number":20,"response":{"id":"resp_1","status":"completed","output":[{"id":"fc_1","type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}],"usage":{"input_tokens":1}}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".into()
        }]
    );
}

#[test]
fn incomplete_max_output_tokens_is_truncated_with_reason() {
    let c = r#"{"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#;
    assert_eq!(
        decode_ok(P, c),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Truncated,
            reason: "max_output_tokens".into()
        }]
    );
    let filtered = r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"content_filter"}}}"#;
    assert_eq!(
        decode_ok(P, filtered),
        vec![ChunkEvent::MessageEnd {
            finish: Finish::Filtered,
            reason: "content_filter".into()
        }]
    );
}

#[test]
fn failed_and_error_events_are_provider_errors() {
    let failed = r#"{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The model failed."}}}"#;
    assert_eq!(
        decode_ok(P, failed),
        vec![ChunkEvent::ProviderError {
            message: "server_error: The model failed.".into()
        }]
    );
    let numeric = r#"{"type":"error","code":429,"message":"Too many requests"}"#;
    assert_eq!(
        decode_ok(P, numeric),
        vec![ChunkEvent::ProviderError {
            message: "429: Too many requests".into()
        }]
    );
    let error = r#"{"type":"error","code":"ERR_SOMETHING","message":"Something went wrong","param":null,"sequence_number":1}"#;
    assert_eq!(
        decode_ok(P, error),
        vec![ChunkEvent::ProviderError {
            message: "ERR_SOMETHING: Something went wrong".into()
        }]
    );
}

#[test]
fn recorded_parallel_calls_use_call_id_as_wire_id() {
    let events = decode_recording(P, "openai-responses/parallel_calls.sse");
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(end) if end.at.wire_id.is_some() => Some((
                end.at.wire_id.clone().unwrap(),
                end.arguments.clone().unwrap(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        vec![
            (
                "call_8PmWqx1".to_string(),
                r#"{"location": "Paris, France"}"#.to_string()
            ),
            (
                "call_K2nDf0z".to_string(),
                r#"{"location": "Bogot\u00e1, Colombia"}"#.to_string()
            ),
        ]
    );
    // The deltas of each item, glued in order, are exactly the final arguments.
    for (item, want) in [
        ("fc_67ccd2c1a0f08190a1b2c3d4", &ends[0].1),
        ("fc_67ccd2c1b2e48190e5f6a7b8", &ends[1].1),
    ] {
        let glued: String = events
            .iter()
            .filter_map(|e| match e {
                ChunkEvent::CallFragment(f) if f.at.item_id.as_deref() == Some(item) => {
                    f.arguments.clone()
                }
                _ => None,
            })
            .collect();
        assert_eq!(&glued, want);
    }
    assert_eq!(
        events.last(),
        Some(&ChunkEvent::MessageEnd {
            finish: Finish::Complete,
            reason: "completed".into()
        })
    );
}

#[test]
fn recorded_stream_without_arguments_done_ends_on_output_item_done() {
    let events = decode_recording(
        P,
        "openai-responses/reasoning_then_call_no_arguments_done.sse",
    );
    let ends: Vec<&CallEnd> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallEnd(end) => Some(end),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(
        ends[0].at,
        at(
            Some(1),
            Some("call_Rz4u0Lk"),
            Some("fc_67ccd2c2c3d48190aa11bb22")
        )
    );
    assert_eq!(
        ends[0].arguments.as_deref(),
        Some(r#"{"order_id":"A-1042","include":["items","status"]}"#)
    );
}

#[test]
fn recorded_truncated_stream_ends_truncated_without_call_end() {
    let events = decode_recording(P, "openai-responses/truncated_max_output_tokens.sse");
    assert!(!events.iter().any(|e| matches!(e, ChunkEvent::CallEnd(_))));
    assert_eq!(
        events.last(),
        Some(&ChunkEvent::MessageEnd {
            finish: Finish::Truncated,
            reason: "max_output_tokens".into()
        })
    );
}

#[test]
fn recorded_failed_and_error_streams_end_in_provider_error() {
    for f in [
        "openai-responses/failed.sse",
        "openai-responses/error_event.sse",
    ] {
        let events = decode_recording(P, f);
        assert!(
            matches!(events.last(), Some(ChunkEvent::ProviderError { .. })),
            "{f}: {events:?}"
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = chunk_model::decode(P, &bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json(), ty in arb_type(), item_ty in arb_type()) {
        let _ = chunk_model::decode(P, value.to_string().as_bytes());
        let shaped = json!({"type": ty, "output_index": value, "item": {"type": item_ty, "id": value, "arguments": value}, "response": value, "delta": value});
        let _ = chunk_model::decode(P, shaped.to_string().as_bytes());
        let shaped = json!({"type": ty, "item": {"type": "function_call", "arguments": value}, "response": {"error": value, "incomplete_details": value}});
        let _ = chunk_model::decode(P, shaped.to_string().as_bytes());
    }
}

proptest! {
    /// `response.completed` always completes the message, whatever `response` and the other
    /// members hold.
    #[test]
    fn completed_never_fails_whatever_its_fields_hold(v in arb_json()) {
        let c = json!({"type": "response.completed", "sequence_number": v, "response": v, "output_index": v, "item_id": v, "delta": v, "item": v, "name": v, "arguments": v});
        prop_assert_eq!(
            chunk_model::decode(P, c.to_string().as_bytes()),
            Ok(vec![ChunkEvent::MessageEnd { finish: Finish::Complete, reason: "completed".into() }])
        );
    }
}
