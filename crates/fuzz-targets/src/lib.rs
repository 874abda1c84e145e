//! # toolstream-fuzz-targets
//!
//! The logic of toolstream's fuzz targets, as plain functions of the fuzzer's bytes. Each
//! panics when an invariant breaks, and is called by
//! - the cargo-fuzz targets in `fuzz/fuzz_targets/` (nightly, coverage-guided, see
//!   `fuzz/README.md`), and
//! - the stable test `tests/replay_corpus.rs`, which replays every seed (made from
//!   `tests/recordings/` by [`seeds`]) and every crash regression
//!   (`fuzz/regressions/<target>/`) through its target, so CI runs them on every change.
//!
//! ## Layout
//! - [`decode`] — one chunk through a provider's decoder (first byte picks the provider).
//! - [`framing`] — a recording through the SSE / NDJSON / JSON-array splitter.
//! - [`partial_args`] — Vertex `partialArgs` pieces through the argument builder.
//! - [`result`] — one tool-result message through its decoder.
//! - [`history`] — a provider history (JSON messages) parsed back into calls and results,
//!   and rendered again into every format (the history encoders).
//! - [`assembler`] — a generated sequence of chunks, results, controls and ticks for a few
//!   messages through the real [`assembler::Store`] (in memory), checking that a completed
//!   call's arguments are exactly what was sent when nothing was lost, and that every event
//!   id is unique; with previews on (a header flag), the `tool_call.delta` contract.
//! - [`previews`] — `partial_json` (a delta's `partial_arguments`) on every prefix of a text.
//! - [`checkpoint`] — store checkpoints: arbitrary or damaged files imported (an error or a
//!   store, never a panic), an undamaged export imported equal to its original.
//! - [`seeds`] — seed inputs for each target, made from `tests/recordings/`.
//! - [`TARGETS`] — every target by name, as the corpus directories are named.

// A fuzz target's panic is its finding (cargo-fuzz reports it, the corpus test fails on it):
// unwrap/expect state what must hold. The workspace denies them in runtime code only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod assembler_target;
pub mod checkpoint_target;
pub mod previews_target;
pub mod seeds;

pub use assembler_target::{assembler, assembler_checked, Checked};
pub use checkpoint_target::{checkpoint, checkpoint_checked, CheckpointChecked};
pub use previews_target::{previews, previews_checked, PreviewsChecked};

use chunk_model::depth::{value_depth, MAX_ARGUMENT_DEPTH};
use chunk_model::encode::{parse_history, HistoryFormat};
use chunk_model::framing::{self as fr, Framing};
use chunk_model::history::{render, HistoryOptions};
use chunk_model::partial_args as pa;
use chunk_model::{ChunkEvent, PathValue, Provider, ResultInput};
use serde_json::Value;

/// Every provider, in the order the first byte of a [`decode`] input picks them
/// (`byte % 7`).
pub const PROVIDERS: [Provider; 7] = [
    Provider::OpenaiChat,
    Provider::OpenaiResponses,
    Provider::Anthropic,
    Provider::Gemini,
    Provider::Bedrock,
    Provider::Ollama,
    Provider::AiSdk,
];

/// A fuzz target: its name (the corpus directory's) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: [Target; 8] = [
    ("decode", decode),
    ("framing", framing),
    ("partial_args", partial_args),
    ("result", result),
    ("history", history),
    ("assembler", assembler),
    ("previews", previews),
    ("checkpoint", checkpoint),
];

/// Reads `data[1..]` as a JSON array of history messages in format
/// `HistoryFormat::ALL[data[0] % 7]`, parses it back into snapshots and renders those into
/// every format. Invariants: no panic; parsed arguments are no deeper than
/// `MAX_ARGUMENT_DEPTH`; every rendering succeeds and its messages serialize.
pub fn history(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let format = HistoryFormat::ALL[usize::from(first) % HistoryFormat::ALL.len()];
    let Ok(messages) = serde_json::from_slice::<Vec<Value>>(rest) else {
        return;
    };
    let Ok(snapshots) = parse_history(format, &messages) else {
        return;
    };
    for snap in &snapshots {
        for call in &snap.calls {
            assert!(value_depth(&call.tool_call.arguments) <= MAX_ARGUMENT_DEPTH);
        }
    }
    let options = HistoryOptions::default();
    for target in HistoryFormat::ALL {
        let rendered = render(&snapshots, target, &options).expect("renders");
        assert!(serde_json::to_vec(&rendered.messages).is_ok());
    }
}

/// The provider byte that makes [`decode`] use `provider`.
pub fn provider_byte(provider: Provider) -> u8 {
    PROVIDERS
        .iter()
        .position(|p| *p == provider)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0)
}

/// Decodes `data[1..]` as a chunk of provider `PROVIDERS[data[0] % 7]`, through the public
/// entry point and the provider's own decoder, and detects its provider. Invariants: no
/// panic; what decodes keeps no value deeper than `MAX_ARGUMENT_DEPTH` and serializes; an
/// error renders, and names the decoder.
pub fn decode(data: &[u8]) {
    let Some((&first, chunk)) = data.split_first() else {
        return;
    };
    let provider = PROVIDERS[usize::from(first) % PROVIDERS.len()];
    let _ = chunk_model::detect_provider(chunk);
    match chunk_model::decode(provider, chunk) {
        Ok(events) => check_events(&events),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.starts_with(provider.as_str()),
                "an error names its decoder: {text}"
            );
            assert_eq!(e.provider(), Some(provider));
        }
    }
}

fn check_events(events: &[ChunkEvent]) {
    for ev in events {
        match ev {
            ChunkEvent::CallFragment(f) => {
                for pv in &f.path_values {
                    assert!(value_depth(&pv.value) <= MAX_ARGUMENT_DEPTH);
                }
                for v in f.metadata.values() {
                    assert!(value_depth(v) <= MAX_ARGUMENT_DEPTH, "metadata too deep");
                }
            }
            ChunkEvent::CallEnd(e) => {
                for v in e.metadata.values() {
                    assert!(value_depth(v) <= MAX_ARGUMENT_DEPTH, "metadata too deep");
                }
                if let Some(text) = &e.arguments {
                    // judging the text must not crash either
                    let _ = chunk_model::parse_arguments(text);
                }
            }
            _ => {}
        }
        assert!(serde_json::to_vec(ev).is_ok(), "a decoded event serializes");
    }
}

/// Splits `data` as a recording: detected, and as each framing. Invariants: no panic; every
/// frame's data is trimmed and non-empty for NDJSON, frames start on line 1 or later and in
/// order.
pub fn framing(data: &[u8]) {
    let _ = fr::detect(data);
    if let Ok(frames) = fr::split(data) {
        check_frames(&frames);
    }
    for framing in [Framing::Sse, Framing::Ndjson, Framing::JsonArray] {
        if let Ok(frames) = fr::split_as(framing, data) {
            check_frames(&frames);
            if framing == Framing::Ndjson {
                for f in &frames {
                    assert!(!f.data.is_empty() && !f.data.contains(&b'\n'));
                }
            }
        }
    }
}

fn check_frames(frames: &[fr::Frame]) {
    let mut last_line = 0;
    for f in frames {
        assert_eq!(f.data.trim_ascii(), &f.data[..], "frame data is trimmed");
        assert!(f.line >= 1 && f.line >= last_line, "lines ascend");
        last_line = f.line;
    }
}

/// Reads `data` as Vertex `partialArgs` pieces, one per line: a flag byte (bit 0: the
/// string continues; bits 1-2: the value is the text as a string, a number, a boolean, or
/// null), then `<JSONPath>=<text>`. Builds them. Invariants: no panic; a built value is an
/// object no deeper than `MAX_ARGUMENT_DEPTH`, and its text is accepted by `parse_arguments`
/// as the same value.
pub fn partial_args(data: &[u8]) {
    let pieces = pieces_of(data);
    match pa::build(&pieces) {
        Ok(value) => {
            assert!(value.is_object());
            assert!(value_depth(&value) <= MAX_ARGUMENT_DEPTH);
            let text = value.to_string();
            assert_eq!(pa::build_text(&pieces).as_ref(), Ok(&text));
            let back = chunk_model::parse_arguments(&text).expect("built text parses");
            assert_eq!(back, value);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The pieces [`partial_args`] reads from `data`.
pub fn pieces_of(data: &[u8]) -> Vec<PathValue> {
    let mut pieces = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        let Some((&flags, rest)) = line.split_first() else {
            continue;
        };
        let rest = String::from_utf8_lossy(rest);
        let (path, text) = rest.split_once('=').unwrap_or((&rest, ""));
        let value = match (flags >> 1) & 3 {
            0 => Value::String(text.to_string()),
            1 => text
                .trim()
                .parse::<serde_json::Number>()
                .map(Value::Number)
                .unwrap_or(Value::Null),
            2 => Value::Bool(text.starts_with('t')),
            _ => Value::Null,
        };
        pieces.push(PathValue {
            path: path.to_string(),
            value,
            continues: flags & 1 == 1,
        });
    }
    pieces
}

/// The line [`partial_args`] reads as `piece` (string, number, boolean and null values).
pub fn piece_line(piece: &PathValue) -> Vec<u8> {
    let (kind, text) = match &piece.value {
        Value::String(s) => (0u8, s.clone()),
        Value::Number(n) => (1, n.to_string()),
        Value::Bool(b) => (2, b.to_string()),
        _ => (3, String::new()),
    };
    let mut line = vec![(kind << 1) | u8::from(piece.continues)];
    line.extend_from_slice(piece.path.as_bytes());
    line.push(b'=');
    line.extend_from_slice(text.as_bytes());
    line
}

/// Decodes `data` as a tool-result message. Invariants: no panic; every result names a
/// non-blank call id; an error renders.
pub fn result(data: &[u8]) {
    match chunk_model::decode_result(data) {
        Ok(results) => {
            assert!(!results.is_empty());
            for r in &results {
                assert!(!r.tool_call_id().trim().is_empty(), "{r:?}");
                if let ResultInput::Complete(done) = r {
                    assert!(serde_json::to_vec(done).is_ok());
                }
            }
        }
        Err(e) => {
            assert!(e.to_string().starts_with("tool result: "), "{e}");
        }
    }
}
