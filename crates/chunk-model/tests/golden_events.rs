//! Golden events: the JSON form of every event type is pinned by a file in `tests/golden/`, and
//! every golden event validates against the published JSON Schema
//! (`schema/event.v1.schema.json`). Regenerate after an intended change with
//! `UPDATE_GOLDEN=1 cargo test -p chunk-model --test golden_events` and review the diff: any
//! change here is a change of the output contract.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunk_model::wire::Reason;
use chunk_model::{
    event_id, CallKind, CallOutcome, CallStatus, Event, EventSubject, EventType, Offload,
    PayloadRef, Provider, ToolCall, ToolResult,
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
        kind: CallKind::Function,
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
        kind: CallKind::Function,
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
    // (the reason the store writes: `Reason::NoCall`; this file said `no_matching_call`,
    // which no code ever emitted)
    orphaned.reason = Some(Reason::NoCall.as_str().into());

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

    let offloaded = offloaded_write_file();

    // A Responses custom tool: free-form input, never parsed; `arguments` is the text as a
    // JSON string.
    let patch =
        "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-let x = 1;\n+let x = 2;\n*** End Patch";
    let mut custom = Event::new(
        EventType::ToolCallCompleted,
        event_id(
            "conv-1",
            "msg-4",
            EventSubject::Call(0),
            EventType::ToolCallCompleted,
        ),
        "conv-1",
        "msg-4",
        Some(Provider::OpenaiResponses),
    );
    let mut item = serde_json::Map::new();
    item.insert("item_id".into(), json!("ctc_68a1f0"));
    custom.tool_call = Some(ToolCall {
        id: "call_Qm3v".into(),
        name: "apply_patch".into(),
        arguments: Value::String(patch.into()),
        raw_arguments: patch.into(),
        index: 0,
        kind: CallKind::Custom,
        provider_metadata: item,
    });

    // A Responses MCP approval request: the call the model wants to make, awaiting approval.
    let mut approval = Event::new(
        EventType::ToolCallCompleted,
        event_id(
            "conv-1",
            "msg-5",
            EventSubject::Call(0),
            EventType::ToolCallCompleted,
        ),
        "conv-1",
        "msg-5",
        Some(Provider::OpenaiResponses),
    );
    let mut item = serde_json::Map::new();
    item.insert("item_id".into(), json!("mcpr_68a2c4"));
    item.insert("server_label".into(), json!("deepwiki"));
    approval.tool_call = Some(ToolCall {
        id: "mcpr_68a2c4".into(),
        name: "ask_question".into(),
        arguments: json!({"repoName": "rust-lang/rust", "question": "What is MIR?"}),
        raw_arguments: r#"{"repoName":"rust-lang/rust","question":"What is MIR?"}"#.into(),
        index: 0,
        kind: CallKind::McpApprovalRequest,
        provider_metadata: item,
    });

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
        ("tool_call.completed.offloaded.json", offloaded),
        ("tool_call.completed.custom.json", custom),
        ("tool_call.completed.mcp_approval_request.json", approval),
    ]
}

/// A `write_file` call whose arguments are too large for `max_payload` (here only 4 KiB of
/// content, the form is the same): the whole event, exactly as it would have been published,
/// is the object the small event's `payload_ref` names.
fn full_write_file() -> Event {
    let content = "0123456789abcdef".repeat(256);
    let raw =
        serde_json::to_string(&json!({"path": "/tmp/big.bin", "content": content})).expect("json");
    let mut e = Event::new(
        EventType::ToolCallCompleted,
        event_id(
            "conv-1",
            "msg-3",
            EventSubject::Call(0),
            EventType::ToolCallCompleted,
        ),
        "conv-1",
        "msg-3",
        Some(Provider::OpenaiChat),
    );
    e.tool_call = Some(ToolCall {
        id: "call_big1".into(),
        name: "write_file".into(),
        arguments: serde_json::from_str(&raw).expect("valid"),
        raw_arguments: raw,
        index: 0,
        kind: CallKind::Function,
        provider_metadata: serde_json::Map::new(),
    });
    e
}

fn offloaded_write_file() -> Event {
    let full = full_write_file();
    let object = serde_json::to_vec(&full).expect("serialize");
    let payload_ref = PayloadRef::for_bytes("TOOLSTREAM_PAYLOADS", &full.event_id, &object);
    full.offloaded(payload_ref, Offload::Slim)
}

#[test]
fn an_offloaded_event_names_the_full_event_by_size_and_sha256() {
    let full = full_write_file();
    let object = serde_json::to_vec(&full).expect("serialize");
    let small = offloaded_write_file();
    let r = small.payload_ref.as_ref().expect("payload_ref");
    assert_eq!(
        r.object, full.event_id,
        "the object is named by the event id"
    );
    assert_eq!(r.size, object.len() as u64);
    assert_eq!(
        r.sha256,
        chunk_model::event::hex(&chunk_model::event::sha256(&object))
    );
    assert_eq!(r.sha256.len(), 64);
    // same type and ids, large fields emptied
    assert_eq!(small.event_type, full.event_type);
    assert_eq!(small.event_id, full.event_id);
    let call = small.tool_call.as_ref().expect("call kept");
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("call_big1", "write_file")
    );
    assert_eq!(call.arguments, Value::Null);
    assert_eq!(call.raw_arguments, "");
    // the object parses back to the full event
    let back: Event = serde_json::from_slice(&object).expect("object is the event");
    assert_eq!(back, full);
    assert!(back.payload_ref.is_none());
}

#[test]
fn schema_accepts_offloaded_events_only_with_their_large_fields_emptied() {
    let validator = schema();
    let slim = serde_json::to_value(offloaded_write_file()).expect("to value");
    assert!(validator.is_valid(&slim), "slim offloaded event");
    let bare = serde_json::to_value(full_write_file().offloaded(
        offloaded_write_file().payload_ref.expect("ref"),
        Offload::Bare,
    ))
    .expect("to value");
    assert!(validator.is_valid(&bare), "bare offloaded event: {bare}");
    assert!(bare.get("tool_call").is_none());

    let mut with_args = slim.clone();
    with_args["tool_call"]["raw_arguments"] = json!("{}");
    assert!(
        !validator.is_valid(&with_args),
        "an offloaded event carries no argument text"
    );
    let mut bad_sha = slim.clone();
    bad_sha["payload_ref"]["sha256"] = json!("xyz");
    assert!(!validator.is_valid(&bad_sha), "sha256 is 64 hex digits");
    let mut no_size = slim.clone();
    no_size["payload_ref"]
        .as_object_mut()
        .expect("object")
        .remove("size");
    assert!(!validator.is_valid(&no_size), "size is required");
    let mut bare_without_ref = bare.clone();
    bare_without_ref
        .as_object_mut()
        .expect("object")
        .remove("payload_ref");
    assert!(
        !validator.is_valid(&bare_without_ref),
        "without payload_ref a completed event needs its call"
    );
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

/// Every `reason` in a golden event (the event's own and each `calls[].reason`) is one of the
/// contract's [`Reason`]s, byte for byte.
#[test]
fn every_golden_reason_is_a_contract_reason() {
    let mut seen = 0;
    for entry in std::fs::read_dir(golden_dir()).expect("golden dir") {
        let path = entry.expect("entry").path();
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let calls = value["calls"].as_array().cloned().unwrap_or_default();
        let reasons = std::iter::once(&value["reason"])
            .chain(calls.iter().map(|c| &c["reason"]))
            .filter_map(Value::as_str);
        for reason in reasons {
            let parsed: Reason = reason
                .parse()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(parsed.as_str(), reason);
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "expected reasons in the golden files, found {seen}"
    );
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

/// `kind` is optional (absent means `function`, so every event written before it validates),
/// names one of the schema's kinds, and only a `custom` call completes with a string.
#[test]
fn schema_reads_the_call_kind_as_an_optional_known_name() {
    let validator = schema();
    let good: Value = serde_json::to_value(call_event(
        EventType::ToolCallCompleted,
        CallStatus::Completed,
        None,
    ))
    .expect("to value");
    assert!(
        good["tool_call"].get("kind").is_none(),
        "function is omitted"
    );
    for kind in CallKind::ALL {
        let mut with_kind = good.clone();
        with_kind["tool_call"]["kind"] = json!(kind.as_str());
        if kind.is_free_text() {
            with_kind["tool_call"]["arguments"] = json!("the input text");
        }
        assert!(validator.is_valid(&with_kind), "{}", kind.as_str());
    }
    let mut unknown = good.clone();
    unknown["tool_call"]["kind"] = json!("web_search");
    assert!(!validator.is_valid(&unknown), "kinds are the schema's");
    let mut text_function = good.clone();
    text_function["tool_call"]["arguments"] = json!("free text");
    assert!(
        validator.is_valid(&text_function),
        "a JSON string is valid JSON arguments"
    );
    let mut object_custom = good.clone();
    object_custom["tool_call"]["kind"] = json!("custom");
    assert!(
        !validator.is_valid(&object_custom),
        "a custom call's arguments are its text, never parsed"
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
