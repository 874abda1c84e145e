//! Shared helpers for the decoder tests: decode a JSON literal, build expected events
//! compactly, read the recorded streams under `tests/recordings/` at the repo root (through
//! the crate's framing reader), and proptest strategies for arbitrary JSON values.
#![allow(dead_code)]

use chunk_model::framing::{self, Frame};
use chunk_model::{
    decode, CallEnd, CallFragment, CallRef, ChunkEvent, DecodeError, Finish, PathValue, Provider,
    ResultInput, ToolResult,
};
use proptest::prelude::*;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Decodes one chunk given as text, panicking (test only) on error.
pub fn decode_ok(provider: Provider, chunk: &str) -> Vec<ChunkEvent> {
    match decode(provider, chunk.as_bytes()) {
        Ok(events) => events,
        Err(e) => panic!("{provider} chunk should decode: {e}\n{chunk}"),
    }
}

/// Decodes one chunk given as text and returns the error (test only).
pub fn decode_err(provider: Provider, chunk: &str) -> DecodeError {
    match decode(provider, chunk.as_bytes()) {
        Ok(events) => panic!("{provider} chunk should fail, got {events:?}\n{chunk}"),
        Err(e) => e,
    }
}

/// A `CallRef` from optional parts.
pub fn at(index: Option<u32>, wire_id: Option<&str>, item_id: Option<&str>) -> CallRef {
    CallRef {
        index,
        wire_id: wire_id.map(str::to_string),
        item_id: item_id.map(str::to_string),
    }
}

/// An expected fragment.
pub fn frag(at: CallRef, name: Option<&str>, arguments: Option<&str>) -> ChunkEvent {
    ChunkEvent::CallFragment(CallFragment {
        at,
        name: name.map(str::to_string),
        arguments: arguments.map(str::to_string),
        ..CallFragment::default()
    })
}

/// An expected end.
pub fn end(at: CallRef, name: Option<&str>, arguments: Option<&str>) -> ChunkEvent {
    end_meta(at, name, arguments, Map::new())
}

/// The recordings directory at the repository root.
pub fn recordings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings")
}

/// The frames of a recording, split with the crate's framing reader (format detected).
pub fn frames(rel: &str) -> Vec<Frame> {
    let path = recordings_dir().join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    framing::split(&bytes).unwrap_or_else(|e| panic!("split {}: {e}", path.display()))
}

/// Decodes every frame of a recording in order and concatenates the events.
pub fn decode_recording(provider: Provider, rel: &str) -> Vec<ChunkEvent> {
    frames(rel)
        .iter()
        .flat_map(|f| match decode(provider, &f.data) {
            Ok(events) => events,
            Err(e) => panic!("{rel} line {}: {e}", f.line),
        })
        .collect()
}

/// Per call key (wire id, else item id, else index), the concatenated fragment argument
/// text, in first-seen order: what a naive assembler would build. Ends are listed apart.
pub fn fragment_text_by_index(events: &[ChunkEvent]) -> Vec<(Option<u32>, String)> {
    let mut out: Vec<(Option<u32>, String)> = Vec::new();
    for e in events {
        if let ChunkEvent::CallFragment(f) = e {
            let text = f.arguments.clone().unwrap_or_default();
            match out.iter_mut().find(|(i, _)| *i == f.at.index) {
                Some((_, t)) => t.push_str(&text),
                None => out.push((f.at.index, text)),
            }
        }
    }
    out
}

/// Arbitrary JSON values, nested a few levels, with unicode and escapes in strings.
pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".*".prop_map(Value::String),
        prop_oneof![
            Just("index"),
            Just("id"),
            Just("type"),
            Just("tool_calls"),
            Just("function_call"),
            Just("arguments"),
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Keys that the decoders look for, mixed with arbitrary ones, so random objects reach
/// the interesting code paths.
pub fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "choices", "index", "delta", "tool_calls", "id", "function", "name", "arguments",
            "function_call", "finish_reason", "error", "type", "item", "item_id", "output_index",
            "call_id", "response", "incomplete_details", "reason", "message", "done",
            "done_reason", "toolCallId", "toolName", "input", "args", "output", "result",
            "inputTextDelta", "argsTextDelta", "finishReason", "errorText", "preliminary",
            "tool_call_id", "tool_use_id", "content", "role", "is_error", "code",
        ])
        .prop_map(str::to_string),
        1 => ".{0,8}",
    ]
}

/// Type values that select the decoders' branches.
pub fn arb_type() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "response.output_item.added",
        "response.output_item.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
        "function_call",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-end",
        "tool-call",
        "tool-input-available",
        "tool-result",
        "tool-output-available",
        "tool-error",
        "finish",
        "abort",
        "tool_result",
        "tool-call-delta",
    ])
    .prop_map(str::to_string)
}

/// The `field` of a `BadField` error (test only).
pub fn bad_field(e: &DecodeError) -> &str {
    match e {
        DecodeError::BadField { field, .. } => field,
        other => panic!("expected BadField, got {other:?}"),
    }
}

/// A reference by index.
pub fn idx(index: u32) -> CallRef {
    CallRef {
        index: Some(index),
        ..CallRef::default()
    }
}

/// A reference by index and wire id.
pub fn idx_id(index: u32, id: &str) -> CallRef {
    CallRef {
        index: Some(index),
        wire_id: Some(id.to_string()),
        item_id: None,
    }
}

/// A reference by wire id only (`None`: no id at all).
pub fn wire(id: Option<&str>) -> CallRef {
    CallRef {
        wire_id: id.map(str::to_string),
        ..CallRef::default()
    }
}

/// An expected fragment with structured pieces and metadata.
pub fn pieces(
    at: CallRef,
    name: Option<&str>,
    path_values: Vec<PathValue>,
    metadata: Map<String, Value>,
) -> ChunkEvent {
    ChunkEvent::CallFragment(CallFragment {
        at,
        name: name.map(str::to_string),
        arguments: None,
        path_values,
        metadata,
        ..CallFragment::default()
    })
}

/// One structured piece.
pub fn pv(path: &str, value: Value, continues: bool) -> PathValue {
    PathValue {
        path: path.to_string(),
        value,
        continues,
    }
}

/// An expected end with metadata.
pub fn end_meta(
    at: CallRef,
    name: Option<&str>,
    arguments: Option<&str>,
    metadata: Map<String, Value>,
) -> ChunkEvent {
    ChunkEvent::CallEnd(CallEnd {
        at,
        name: name.map(str::to_string),
        arguments: arguments.map(str::to_string),
        metadata,
        ..CallEnd::default()
    })
}

/// An expected message end.
pub fn msg_end(finish: Finish, reason: &str) -> ChunkEvent {
    ChunkEvent::MessageEnd {
        finish,
        reason: reason.to_string(),
    }
}

/// An expected complete tool result for call `id`.
pub fn result(id: &str, output: &str, is_error: bool) -> ChunkEvent {
    ChunkEvent::ToolResult(ResultInput::Complete(ToolResult {
        tool_call_id: id.into(),
        output: output.into(),
        is_error,
    }))
}

/// `{"thoughtSignature": sig}`.
pub fn signature(sig: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "thoughtSignature".to_string(),
        Value::String(sig.to_string()),
    );
    m
}

/// `{"thoughtSignature": sig, "model": model}`: a signed call with the model that made it.
pub fn signed_by(sig: &str, model: &str) -> Map<String, Value> {
    let mut m = signature(sig);
    m.insert("model".to_string(), Value::String(model.to_string()));
    m
}

/// Concatenated argument text of all fragments at `index` (what the assembler appends).
pub fn text_at(events: &[ChunkEvent], index: u32) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) if f.at.index == Some(index) => f.arguments.clone(),
            _ => None,
        })
        .collect()
}

/// Arbitrary JSON values whose object keys are mostly `keys`, so random input reaches the
/// decoder's branches; strings include the decoder's type names.
pub fn arb_json_with(
    keys: &'static [&'static str],
    words: &'static [&'static str],
) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(words).prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        let key = prop_oneof![
            4 => prop::sample::select(keys).prop_map(str::to_string),
            1 => ".{0,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Values of every JSON type (and numbers/booleans as strings), put into fields a decoder
/// does not need to show that none of them fails a chunk.
pub fn wrong_typed_values() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Bool(true),
        Value::from(7),
        Value::from(-1),
        Value::from(1.5),
        Value::String(String::new()),
        Value::String("7".to_string()),
        Value::String("true".to_string()),
        serde_json::json!([1, "x", {"y": null}]),
        serde_json::json!({}),
        serde_json::json!({"unified": 3, "raw": [1], "nested": {"deep": [true, {"k": "v"}]}}),
    ]
}

/// `chunk` with the member at JSON pointer `pointer` set to `value` (the member is added
/// when missing; its parent must exist), serialized again.
pub fn with_member(chunk: &str, pointer: &str, value: Value) -> String {
    let mut root: Value = serde_json::from_str(chunk).expect("test chunk is JSON");
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a '/'");
    let target = root
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no parent {parent:?} in {chunk}"));
    match target {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            let i: usize = key.parse().expect("array pointer ends in an index");
            items[i] = value;
        }
        other => panic!("parent {parent:?} is not a container: {other}"),
    }
    serde_json::to_string(&root).expect("serialize")
}

/// For each JSON pointer in `unneeded`, puts each of [`wrong_typed_values`] there and checks
/// that `chunk` still decodes, to exactly the events it decodes to untouched. Returns those
/// events so the caller can check them too.
pub fn assert_unneeded_fields_never_fail(
    provider: Provider,
    chunk: &str,
    unneeded: &[&str],
) -> Vec<ChunkEvent> {
    // Round-trip the untouched chunk too, so key order matches the variants.
    let baseline = decode_ok(provider, &with_member(chunk, "/__probe", Value::Null));
    for pointer in unneeded {
        for value in wrong_typed_values() {
            let variant = with_member(chunk, pointer, value.clone());
            match decode(provider, variant.as_bytes()) {
                Ok(events) => assert_eq!(
                    events, baseline,
                    "{provider}: {pointer} = {value} changed the events\n{variant}"
                ),
                Err(e) => {
                    panic!("{provider}: {pointer} = {value} failed the chunk: {e}\n{variant}")
                }
            }
        }
    }
    baseline
}
