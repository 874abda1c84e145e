//! Shared helpers for the decoder tests: decode a JSON literal, build expected events
//! compactly, read the recorded streams under `tests/recordings/` at the repo root, and
//! proptest strategies for arbitrary bytes and arbitrary JSON values.
#![allow(dead_code)]

use chunk_model::{decode, CallEnd, CallFragment, CallRef, ChunkEvent, DecodeError, Provider};
use proptest::prelude::*;
use serde_json::Value;
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
    ChunkEvent::CallEnd(CallEnd {
        at,
        name: name.map(str::to_string),
        arguments: arguments.map(str::to_string),
        ..CallEnd::default()
    })
}

/// The recordings directory at the repository root.
pub fn recordings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings")
}

/// The chunk bodies of a recording: `data:` payloads of an SSE file (`.sse`), or the
/// non-blank lines of an NDJSON file. A deliberately small reader, independent of the
/// crate's own framing module, so these tests pin the decoders alone.
pub fn recording(rel: &str) -> Vec<String> {
    let path = recordings_dir().join(rel);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if rel.ends_with(".sse") {
        let mut bodies = Vec::new();
        let mut data: Option<String> = None;
        for line in text.lines().chain(std::iter::once("")) {
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                if let Some(d) = data.take() {
                    bodies.push(d);
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                data = Some(match data.take() {
                    Some(prev) => format!("{prev}\n{rest}"),
                    None => rest.to_string(),
                });
            }
        }
        bodies
    } else {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// Decodes every chunk of a recording in order and concatenates the events.
pub fn decode_recording(provider: Provider, rel: &str) -> Vec<ChunkEvent> {
    recording(rel)
        .iter()
        .flat_map(|chunk| decode_ok(provider, chunk))
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
