//! Result truncation for history: on a character boundary, marked consistently.

use std::borrow::Cow;

/// Appended to every truncated text; counted in the limit.
pub const TRUNCATION_MARKER: &str = "... [truncated]";

/// Whether a text was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Truncation {
    /// The text fit and is unchanged.
    Kept,
    /// The text was cut and ends with [`TRUNCATION_MARKER`].
    Cut,
}

/// `text` if it has at most `max_chars` characters; otherwise its first
/// `max_chars - marker length` characters followed by [`TRUNCATION_MARKER`], so the result has
/// exactly `max_chars` characters and never splits a multi-byte character.
pub fn truncate(text: &str, max_chars: usize) -> (Cow<'_, str>, Truncation) {
    let Some((limit_byte, _)) = text.char_indices().nth(max_chars) else {
        return (Cow::Borrowed(text), Truncation::Kept);
    };
    let keep = max_chars.saturating_sub(TRUNCATION_MARKER.chars().count());
    let cut_at = text
        .char_indices()
        .nth(keep)
        .map(|(i, _)| i)
        .unwrap_or(limit_byte);
    let head = text.get(..cut_at).unwrap_or_default();
    let mut out = String::with_capacity(cut_at + TRUNCATION_MARKER.len());
    out.push_str(head);
    out.push_str(TRUNCATION_MARKER);
    (Cow::Owned(out), Truncation::Cut)
}
