//! `partial_json` (the best-effort parse behind a `tool_call.delta`'s `partial_arguments`,
//! `assembler::core::preview::partial_json`) on every prefix of a fuzzer-chosen text.
//!
//! Input format: the bytes, read as UTF-8 (invalid sequences replaced), at most
//! [`MAX_TEXT_BYTES`] of them. Every prefix ending on a char boundary is fed to
//! `partial_json`, as a call's argument text grows one chunk at a time.
//!
//! Invariants:
//! - no panic;
//! - a value it returns serializes, and that text parses back to the same value, nesting no
//!   deeper than [`MAX_PARTIAL_DEPTH`];
//! - when the whole text is a JSON text nesting at most [`MAX_PARTIAL_DEPTH`] deep,
//!   `partial_json` of it is exactly that value (a delta holding a whole argument previews
//!   it as it is).

use assembler::core::preview::{partial_json, MAX_PARTIAL_DEPTH};
use chunk_model::depth::{json_deeper_than, value_depth};
use serde_json::Value;

/// The longest text read (bytes): every prefix is parsed, so one input costs quadratic time
/// in its length.
pub const MAX_TEXT_BYTES: usize = 1024;

/// Runs `partial_json` on every prefix of `data` and checks the invariants (module docs).
pub fn previews(data: &[u8]) {
    let _ = previews_checked(data);
}

/// What [`previews_checked`] checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreviewsChecked {
    /// Prefixes that had a value.
    pub values: usize,
    /// Whether the whole text was JSON and compared with its parse.
    pub whole_compared: bool,
}

/// [`previews`], saying how much it checked (so tests can show the checks are not vacuous).
pub fn previews_checked(data: &[u8]) -> PreviewsChecked {
    let mut checked = PreviewsChecked::default();
    let data = data.get(..MAX_TEXT_BYTES).unwrap_or(data);
    let text = String::from_utf8_lossy(data);
    let ends = text
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain(std::iter::once(text.len()));
    for end in ends {
        let prefix = &text[..end];
        let Some(value) = partial_json(prefix) else {
            continue;
        };
        checked.values += 1;
        // `value_depth` counts a scalar as 0 and each container as one level
        assert!(
            value_depth(&value) <= MAX_PARTIAL_DEPTH,
            "partial value deeper than the bound for {prefix:?}"
        );
        let written = serde_json::to_string(&value).expect("a partial value serializes");
        let back: Value = serde_json::from_str(&written).expect("its text parses");
        assert_eq!(
            back, value,
            "a partial value reads back as itself: {prefix:?}"
        );
    }
    if let Ok(whole) = serde_json::from_str::<Value>(&text) {
        if !json_deeper_than(text.as_bytes(), MAX_PARTIAL_DEPTH) {
            assert_eq!(
                partial_json(&text),
                Some(whole),
                "a whole JSON text previews as itself: {text:?}"
            );
            checked.whole_compared = true;
        }
    }
    checked
}
