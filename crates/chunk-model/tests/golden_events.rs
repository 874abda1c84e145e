//! Golden events: the JSON form of every event type is pinned by a file in `tests/golden/`, and
//! every golden event validates against the published JSON Schema
//! (`schema/event.v1.schema.json`). Regenerate after an intended change with
//! `UPDATE_GOLDEN=1 cargo test -p chunk-model --test golden_events` and review the diff: any
//! change here is a change of the output contract.

use chunk_model::{
    event_id, CallOutcome, CallStatus, Event, EventSubject, EventType, Provider, ToolCall,
    ToolResult,
};
use serde_json::{json, Value};
use std::path::PathBuf;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn schema() -> jsonschema::Validator {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/event.v1.schema.json");
    let text = std::fs::read_to_string(path).expect("schema file");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn weather_call(status: CallStatus) -> ToolCall {
    let raw = match status {
        CallStatus::Completed => r#"{"city":"Paris","unit":"c"}"#,
        CallStatus::Invalid => r#"{"city":"Par"#,
        _ => r#"{"ci"#,
    };
    ToolCall {
        id: "call_9Xq2".into(),
        name: "get_weather".into(),
        arguments: if status == CallStatus::Completed {
            serde_json::from_str(raw).expect("valid")
        } else {
            Value::Null
        },
        raw_arguments: raw.into(),
        index: 0,
        provider_metadata: serde_json::Map::new(),
    }
}

fn call_event(ty: EventType, status: CallStatus, reason: Option<&str>) -> Event {
    let mut e = Event::new(
        ty,
        event_id("conv-1", "msg-1", EventSubject::Call(0), ty),
        "conv-1",
        "msg-1",
        Some(Provider::OpenaiChat),
    );
    e.tool_call = Some(weather_call(status));
    e.reason = reason.map(str::to_string);
    e
}

/// Every event type of the contract, built by code, with its golden file name.
fn cases() -> Vec<(&'static str, Event)> {
    let mut started = call_event(EventType::ToolCallStarted, CallStatus::Streaming, None);
    if let Some(c) = started.tool_call.as_mut() {
        c.raw_arguments.clear();
    }

    let mut gemini = Event::new(
        EventType::ToolCallCompleted,
        event_id(
            "conv-1",
            "msg-2",
            EventSubject::Call(1),
            EventType::ToolCallCompleted,
        ),
        "conv-1",
        "msg-2",
        Some(Provider::Gemini),
    );
    let mut meta = serde_json::Map::new();
    meta.insert("synthetic_id".into(), json!(true));
    meta.insert("thoughtSignature".into(), json!("CiQBVKhc7r1xAAAA"));
    gemini.tool_call = Some(ToolCall {
        id: chunk_model::synthetic_call_id("conv-1", "msg-2", 1),
        name: "search_flights".into(),
        arguments: json!({"from": "CDG", "to": "NRT", "passengers": [{"age": 34}, {"age": 3}]}),
        raw_arguments: r#"{"from":"CDG","passengers":[{"age":34},{"age":3}],"to":"NRT"}"#.into(),
        index: 1,
        provider_metadata: meta,
    });

    let result = ToolResult {
        tool_call_id: "call_9Xq2".into(),
        output: "18°C, light rain".into(),
        is_error: false,
    };
    let mut result_completed = Event::new(
        EventType::ToolResultCompleted,
        event_id(
            "conv-1",
            "msg-1",
            EventSubject::Result("call_9Xq2"),
            EventType::ToolResultCompleted,
        ),
        "conv-1",
        "msg-1",
        Some(Provider::OpenaiChat),
    );
    result_completed.tool_result = Some(result.clone());

    let mut orphaned = Event::new(
        EventType::ToolResultOrphaned,
        event_id(
            "conv-1",
            "res-7",
            EventSubject::Result("call_gone"),
            EventType::ToolResultOrphaned,
        ),
        "conv-1",
        "res-7",
        None,
    );
    orphaned.tool_result = Some(ToolResult {
        tool_call_id: "call_gone".into(),
        output: "{\"rows\":3}".into(),
        is_error: false,
    });
    orphaned.reason = Some("no_matching_call".into());

    let mut message = Event::new(
        EventType::MessageCompleted,
        event_id(
            "conv-1",
            "msg-1",
            EventSubject::Message,
            EventType::MessageCompleted,
        ),
        "conv-1",
        "msg-1",
        Some(Provider::OpenaiChat),
    );
    let mut second = weather_call(CallStatus::Invalid);
    second.id = "call_Z7".into();
    second.index = 1;
    message.finish_reason = Some("length".into());
    message.calls = Some(vec![
        CallOutcome {
            status: CallStatus::Completed,
            reason: None,
            tool_call: weather_call(CallStatus::Completed),
        },
        CallOutcome {
            status: CallStatus::Invalid,
            reason: Some("truncated".into()),
            tool_call: second,
        },
    ]);
    message.tool_results = Some(vec![result]);

    vec![
        ("tool_call.started.json", started),
        (
            "tool_call.completed.json",
            call_event(EventType::ToolCallCompleted, CallStatus::Completed, None),
        ),
        ("tool_call.completed.gemini.json", gemini),
        (
            "tool_call.invalid.json",
            call_event(
                EventType::ToolCallInvalid,
                CallStatus::Invalid,
                Some("truncated"),
            ),
        ),
        (
            "tool_call.abandoned.json",
            call_event(
                EventType::ToolCallAbandoned,
                CallStatus::Abandoned,
                Some("timeout"),
            ),
        ),
        ("tool_result.completed.json", result_completed),
        ("tool_result.orphaned.json", orphaned),
        ("message.completed.json", message),
    ]
}

#[test]
fn golden_files_pin_the_json_form_of_every_event_type() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    for (file, event) in cases() {
        let path = golden_dir().join(file);
        let rendered = serde_json::to_string_pretty(&event).expect("serialize") + "\n";
        if update {
            std::fs::write(&path, &rendered).expect("write golden");
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{file}: {e} (run with UPDATE_GOLDEN=1 to create)"));
        assert_eq!(golden, rendered, "{file}: the event JSON form changed");
        let parsed: Event = serde_json::from_str(&golden).expect("golden parses as Event");
        assert_eq!(parsed, event, "{file}: round trip through serde");
    }
}

#[test]
fn every_golden_event_validates_against_the_schema() {
    let validator = schema();
    let mut seen = 0;
    for entry in std::fs::read_dir(golden_dir()).expect("golden dir") {
        let path = entry.expect("entry").path();
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 8,
        "expected a golden file per event type, found {seen}"
    );
}

#[test]
fn schema_rejects_events_that_break_the_contract() {
    let validator = schema();
    let good: Value = serde_json::to_value(call_event(
        EventType::ToolCallCompleted,
        CallStatus::Completed,
        None,
    ))
    .expect("to value");
    assert!(validator.is_valid(&good));

    let mut missing_id = good.clone();
    missing_id
        .as_object_mut()
        .expect("object")
        .remove("event_id");
    assert!(!validator.is_valid(&missing_id), "event_id is required");

    let mut null_args = good.clone();
    null_args["tool_call"]["arguments"] = Value::Null;
    assert!(
        !validator.is_valid(&null_args),
        "completed calls have parsed arguments"
    );

    let mut unknown_type = good.clone();
    unknown_type["type"] = json!("tool_call.finished");
    assert!(!validator.is_valid(&unknown_type));

    let mut empty_id = good.clone();
    empty_id["tool_call"]["id"] = json!("");
    assert!(
        !validator.is_valid(&empty_id),
        "an empty call id is never valid"
    );

    let mut invalid_without_reason: Value = serde_json::to_value(call_event(
        EventType::ToolCallInvalid,
        CallStatus::Invalid,
        None,
    ))
    .expect("to value");
    assert!(
        !validator.is_valid(&invalid_without_reason),
        "invalid needs a reason"
    );
    invalid_without_reason["reason"] = json!("truncated");
    assert!(validator.is_valid(&invalid_without_reason));
}
