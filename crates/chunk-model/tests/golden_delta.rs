//! The argument preview event (`tool_call.delta`): its JSON form is pinned by
//! `tests/golden/tool_call.delta.json` (regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p chunk-model --test golden_delta` and review the diff), and the
//! schema accepts a delta only in its own shape: the text in `arguments_delta` at
//! `arguments_offset`, the call's identity with no arguments, and the preview fields on no other
//! event type. (`golden_events.rs` validates every golden file, this one included.)

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunk_model::{
    event_id, CallKind, Event, EventSubject, EventType, Offload, PayloadRef, Provider, ToolCall,
};
use serde_json::{json, Value};
use std::path::PathBuf;

fn schema() -> jsonschema::Validator {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/event.v1.schema.json");
    let text = std::fs::read_to_string(path).expect("schema file");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

/// The second preview of `get_weather`'s arguments: `{"city":` came first (offset 0), this one
/// appends `"Par` (offset 8), and the text so far closes to `{"city":"Par"}`.
fn delta() -> Event {
    let ty = EventType::ToolCallDelta;
    let mut e = Event::new(
        ty,
        event_id("conv-1", "msg-1", EventSubject::CallDelta(0, 8), ty),
        "conv-1",
        "msg-1",
        Some(Provider::OpenaiChat),
    );
    e.tool_call = Some(ToolCall {
        id: "call_9Xq2".into(),
        name: "get_weather".into(),
        arguments: Value::Null,
        raw_arguments: String::new(),
        index: 0,
        kind: CallKind::Function,
        provider_metadata: serde_json::Map::new(),
    });
    e.arguments_delta = Some("\"Par".into());
    e.arguments_offset = Some(8);
    e.partial_arguments = Some(json!({"city": "Par"}));
    e
}

#[test]
fn the_delta_golden_file_pins_its_json_form() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/tool_call.delta.json");
    let rendered = serde_json::to_string_pretty(&delta()).expect("serialize") + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &rendered).expect("write golden");
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(golden, rendered, "the tool_call.delta JSON form changed");
    let parsed: Event = serde_json::from_str(&golden).expect("golden parses as Event");
    assert_eq!(parsed, delta(), "round trip through serde");
    let errors: Vec<String> = schema()
        .iter_errors(&serde_json::from_str(&golden).expect("json"))
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn schema_accepts_a_delta_only_in_its_own_shape() {
    let validator = schema();
    let good = serde_json::to_value(delta()).expect("to value");
    assert!(validator.is_valid(&good));

    let mut no_partial = good.clone();
    no_partial
        .as_object_mut()
        .unwrap()
        .remove("partial_arguments");
    assert!(
        validator.is_valid(&no_partial),
        "partial_arguments is optional"
    );
    for field in ["arguments_delta", "arguments_offset", "tool_call"] {
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove(field);
        assert!(!validator.is_valid(&missing), "a delta needs {field}");
    }
    let mut negative = good.clone();
    negative["arguments_offset"] = json!(-1);
    assert!(!validator.is_valid(&negative), "offsets are bytes, >= 0");
    let mut with_args = good.clone();
    with_args["tool_call"]["arguments"] = json!({"city": "Par"});
    assert!(
        !validator.is_valid(&with_args),
        "a delta is never a completion: its call has no arguments"
    );
    let mut with_raw = good.clone();
    with_raw["tool_call"]["raw_arguments"] = json!("{\"city\":\"Par");
    assert!(
        !validator.is_valid(&with_raw),
        "the text travels in arguments_delta only"
    );

    // the preview fields belong to tool_call.delta alone
    for field in ["arguments_delta", "arguments_offset", "partial_arguments"] {
        let mut started = good.clone();
        started["type"] = json!("tool_call.started");
        let keep = started[field].clone();
        for f in ["arguments_delta", "arguments_offset", "partial_arguments"] {
            started.as_object_mut().unwrap().remove(f);
        }
        assert!(validator.is_valid(&started), "{started}");
        started[field] = keep;
        assert!(
            !validator.is_valid(&started),
            "{field} on tool_call.started"
        );
    }
}

#[test]
fn an_offloaded_delta_carries_no_text() {
    let validator = schema();
    let full = delta();
    let object = serde_json::to_vec(&full).expect("serialize");
    let r = PayloadRef::for_bytes("TOOLSTREAM_PAYLOADS", &full.event_id, &object);
    let slim = full.offloaded(r.clone(), Offload::Slim);
    assert_eq!(slim.arguments_delta.as_deref(), Some(""));
    assert_eq!(slim.arguments_offset, Some(8), "the offset stays");
    assert!(slim.partial_arguments.is_none());
    let slim = serde_json::to_value(&slim).expect("to value");
    assert!(validator.is_valid(&slim), "{slim}");
    let mut with_text = slim.clone();
    with_text["arguments_delta"] = json!("\"Par");
    assert!(!validator.is_valid(&with_text));

    let bare = serde_json::to_value(full.offloaded(r, Offload::Bare)).expect("to value");
    assert!(validator.is_valid(&bare), "{bare}");
    assert!(bare.get("arguments_delta").is_none());
}

#[test]
fn each_preview_of_a_call_has_its_own_id_and_none_is_another_events() {
    let ty = EventType::ToolCallDelta;
    let at = |pos, offset| event_id("c", "m", EventSubject::CallDelta(pos, offset), ty);
    assert_eq!(at(0, 8), at(0, 8), "deterministic");
    assert_ne!(at(0, 8), at(0, 9));
    assert_ne!(at(0, 8), at(1, 8));
    for other in [
        EventType::ToolCallStarted,
        EventType::ToolCallDelta,
        EventType::ToolCallCompleted,
    ] {
        assert_ne!(at(0, 0), event_id("c", "m", EventSubject::Call(0), other));
    }
}
