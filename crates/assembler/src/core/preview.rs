//! Argument previews: `tool_call.delta` events for calls still streaming (off by default,
//! [`crate::config::Previews`]).
//!
//! The store runs this after the step(s) of a chunk (never after a timer or a result):
//! [`observe`] carries the text the step appended into the calls' preview buffers, [`due`]
//! says which calls' deltas are due at the chunk's publish time, the store reads back the text
//! of a due call that holds none ([`needs_text`], [`hold`]: a call read from storage), and
//! [`emit`] builds the delta and records it in the call state (`preview_bytes`,
//! `preview_at`), which is stored with the message in the same commit.
//!
//! Cost: each byte of argument text is appended to a buffer once and carried by one delta at
//! most; after a delta the buffer keeps only what `partial_arguments` still needs (the whole
//! text while it is at most `partial_max_bytes`, nothing after). So the text is never scanned
//! again per delta past that bound, and previews of a long argument cost time linear in its
//! length (`benches/benches/previews.rs`). A call read back from storage (a restart, or the
//! message cache let it go) has its text read once when its next delta is due.
//!
//! Determinism: the decision depends on the stored call state, the chunk and its publish time
//! only, so a redelivery or a restart re-applying the same inputs from the same durable state
//! emits the same deltas with the same ids ([`chunk_model::EventSubject::CallDelta`]: the call
//! and the delta's offset).

use super::output::ArgOp;
use super::state::{CallState, MessageState, REASONING_PIECES};
use crate::config::Previews;
use crate::keys::PATH_PIECES;
use chunk_model::{event_id, Event, EventSubject, EventType, ToolCall};
use serde_json::Value;

/// Text waiting for a delta past which the delta is due without waiting for
/// `min_interval_ms` (64 KiB): it bounds the memory a call's preview holds and the size of one
/// delta (plus one chunk's text).
pub const FLUSH_PENDING_BYTES: usize = 64 * 1024;

/// Deepest nesting `partial_arguments` follows (the argument depth bound,
/// [`chunk_model::depth::MAX_ARGUMENT_DEPTH`]); deeper text gets none.
pub const MAX_PARTIAL_DEPTH: usize = chunk_model::depth::MAX_ARGUMENT_DEPTH;

/// Carries the argument text a step appended (its [`ArgOp`]s) into the preview buffers of the
/// calls that hold one. A buffer that no longer ends where the call's text ends (a replaced
/// text), or that grows past what a preview needs while the call has no name yet, is let go
/// (read back from storage if a delta needs it).
pub fn observe(msg: &mut MessageState, ops: &[ArgOp], cfg: &Previews) {
    for op in ops {
        match op {
            ArgOp::Append { call, text, .. } if call & (REASONING_PIECES | PATH_PIECES) == 0 => {
                if let Some(c) = msg.calls.get_mut(*call as usize) {
                    if c.preview_held {
                        c.preview_text.push_str(text);
                    }
                }
            }
            ArgOp::Replace { call, .. } => {
                if let Some(c) = msg.calls.get_mut(*call as usize) {
                    release(c);
                }
            }
            ArgOp::Append { .. } | ArgOp::AppendPath { .. } => {}
        }
    }
    let keep = cfg.partial_max_bytes.max(FLUSH_PENDING_BYTES);
    for c in &mut msg.calls {
        let whole = c.preview_from + c.preview_text.len() == c.args_len;
        if c.preview_held && (!whole || (!c.started && c.preview_text.len() > keep)) {
            release(c);
        }
    }
}

/// Lets go of a call's preview buffer.
fn release(c: &mut CallState) {
    c.preview_text = String::new();
    c.preview_from = 0;
    c.preview_held = false;
}

/// The calls whose delta is due after a chunk published at `now` (ms), in index order: open
/// and started, argument text (not structured pieces), at least `min_bytes` (at least 1) new
/// bytes since the previous delta, and either no delta yet, `min_interval_ms` since the
/// previous one, or [`FLUSH_PENDING_BYTES`] waiting. Calls that ended let go of their buffer.
pub fn due(msg: &mut MessageState, cfg: &Previews, now: u64) -> Vec<usize> {
    let open = msg.is_open();
    let mut out = Vec::new();
    for (pos, call) in msg.calls.iter_mut().enumerate() {
        if !open || call.is_terminal() {
            if call.preview_held && !call.preview_text.is_empty() {
                release(call);
            }
            continue;
        }
        if !cfg.enabled || !call.started || call.path_pieces > 0 {
            continue;
        }
        let pending = call.args_len.saturating_sub(call.preview_bytes);
        if pending == 0 || pending < cfg.min_bytes {
            continue;
        }
        let waited = match call.preview_at {
            None => true,
            Some(at) => now.saturating_sub(at) >= cfg.min_interval_ms,
        };
        if waited || pending >= FLUSH_PENDING_BYTES {
            out.push(pos);
        }
    }
    out
}

/// Whether the call at `pos` needs its argument text read back before [`emit`].
pub fn needs_text(msg: &MessageState, pos: usize) -> bool {
    msg.calls.get(pos).is_some_and(|c| !c.preview_held)
}

/// Holds the whole argument text of the call at `pos` (read back from storage) for its preview.
pub fn hold(msg: &mut MessageState, pos: usize, text: String) {
    if let Some(c) = msg.calls.get_mut(pos) {
        if text.len() == c.args_len {
            c.preview_text = text;
            c.preview_from = 0;
            c.preview_held = true;
        }
    }
}

/// The delta of the call at `pos` (due, see [`due`]), recorded in the call state: the text
/// since the previous delta, its offset, and `partial_arguments` while the text is at most
/// `partial_max_bytes` (never for a free-text call). `None` when the call holds no text for it
/// (the store did not [`hold`] it) or there is nothing new.
pub fn emit(msg: &mut MessageState, pos: usize, cfg: &Previews, now: u64) -> Option<Event> {
    let (conv, mid, provider) = (
        msg.conversation_id.clone(),
        msg.message_id.clone(),
        msg.provider,
    );
    let call = msg.calls.get_mut(pos)?;
    if !call.preview_held || call.preview_from + call.preview_text.len() != call.args_len {
        return None;
    }
    let offset = call.preview_bytes;
    let delta = call
        .preview_text
        .get(offset.checked_sub(call.preview_from)?..)?
        .to_string();
    if delta.is_empty() {
        return None;
    }
    let partial = match call.preview_from == 0
        && call.args_len <= cfg.partial_max_bytes
        && !call.kind.is_free_text()
    {
        true => partial_json(&call.preview_text).filter(|v| !v.is_null()),
        false => None,
    };
    call.preview_bytes = call.args_len;
    call.preview_at = Some(now);
    if call.args_len > cfg.partial_max_bytes {
        // nothing previewed is needed again
        call.preview_text = String::new();
        call.preview_from = call.args_len;
    }
    let ty = EventType::ToolCallDelta;
    let mut ev = Event::new(
        ty,
        event_id(
            &conv,
            &mid,
            EventSubject::CallDelta(pos as u32, offset as u64),
            ty,
        ),
        &conv,
        &mid,
        provider,
    );
    ev.tool_call = Some(ToolCall {
        id: call
            .id
            .clone()
            .unwrap_or_else(|| chunk_model::synthetic_call_id(&conv, &mid, pos as u32)),
        name: call.name.clone().unwrap_or_default(),
        arguments: Value::Null,
        raw_arguments: String::new(),
        index: pos as u32,
        kind: call.kind,
        provider_metadata: serde_json::Map::new(),
    });
    ev.arguments_delta = Some(delta);
    ev.arguments_offset = Some(offset as u64);
    ev.partial_arguments = partial;
    Some(ev)
}

/// What the scanner expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (top level, after `:` or after `,` in an array).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrEnd,
    /// A key (after `,` in an object).
    Key,
    /// A key or `}` (just after `{`).
    KeyOrEnd,
    /// `:` after a key.
    Colon,
    /// `,` or the container's end after a value.
    CommaOrEnd,
    /// Nothing (but whitespace) after a complete top-level value.
    Nothing,
}

/// An unfinished token at the end of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    None,
    /// A string value starting at this byte (its `"`).
    Str(usize),
    /// A number starting here.
    Num(usize),
    /// `t`/`f`/`n`… starting here.
    Lit(usize),
}

/// Best effort: the JSON value of a prefix of a JSON text, with its open strings, arrays and
/// objects closed. An unfinished key (and its `:`) or a dangling `,` is dropped; an unfinished
/// string value is closed (a cut escape, or a lone high surrogate escape, is dropped first); an
/// unfinished number loses a trailing `-`, `+`, `.`, `e` (a lone `-` is dropped); an
/// unfinished `true`/`false`/`null` is completed. `None` when the prefix cannot be the start
/// of a JSON text, holds nothing yet, or nests deeper than [`MAX_PARTIAL_DEPTH`]. One pass
/// over the text and one parse of the closed text: linear, and never panics.
pub fn partial_json(text: &str) -> Option<Value> {
    let b = text.as_bytes();
    // closers of the open containers, innermost last
    let mut stack: Vec<u8> = Vec::new();
    let mut expect = Expect::Value;
    // text[..cut] + closers is valid JSON (when `cut_ok`): after an opening bracket or a
    // complete value; the stack never changes after the last such point (opening and closing
    // both move it)
    let mut cut = 0usize;
    let mut cut_ok = false;
    let mut tail = Tail::None;
    let mut i = 0usize;
    while i < b.len() {
        let c = b[i];
        let wants_value = matches!(expect, Expect::Value | Expect::ValueOrEnd);
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'"' if wants_value || matches!(expect, Expect::Key | Expect::KeyOrEnd) => {
                match string_end(b, i + 1) {
                    Some(end) => {
                        i = end + 1;
                        if wants_value {
                            expect = after_value(&stack);
                            cut = i;
                            cut_ok = true;
                        } else {
                            expect = Expect::Colon;
                        }
                        continue;
                    }
                    None => {
                        if wants_value {
                            tail = Tail::Str(i);
                        }
                        break;
                    }
                }
            }
            b'{' | b'[' if wants_value => {
                if stack.len() >= MAX_PARTIAL_DEPTH {
                    return None;
                }
                let (closer, next) = match c {
                    b'{' => (b'}', Expect::KeyOrEnd),
                    _ => (b']', Expect::ValueOrEnd),
                };
                stack.push(closer);
                expect = next;
                i += 1;
                cut = i;
                cut_ok = true;
                continue;
            }
            b'}' | b']' => {
                let closes = match (c, expect) {
                    (b'}', Expect::KeyOrEnd | Expect::CommaOrEnd) => stack.last() == Some(&b'}'),
                    (b']', Expect::ValueOrEnd | Expect::CommaOrEnd) => stack.last() == Some(&b']'),
                    _ => false,
                };
                if !closes {
                    return None;
                }
                stack.pop();
                i += 1;
                expect = after_value(&stack);
                cut = i;
                cut_ok = true;
                continue;
            }
            b',' if expect == Expect::CommaOrEnd => {
                expect = match stack.last() {
                    Some(b'}') => Expect::Key,
                    _ => Expect::Value,
                };
            }
            b':' if expect == Expect::Colon => expect = Expect::Value,
            b'-' | b'0'..=b'9' if wants_value => {
                let end = scan(b, i, |x| {
                    x.is_ascii_digit() || matches!(x, b'-' | b'+' | b'.' | b'e' | b'E')
                });
                if end == b.len() {
                    tail = Tail::Num(i);
                    break;
                }
                i = end;
                expect = after_value(&stack);
                cut = i;
                cut_ok = true;
                continue;
            }
            b't' | b'f' | b'n' if wants_value => {
                let end = scan(b, i, |x| x.is_ascii_alphabetic());
                if end == b.len() {
                    tail = Tail::Lit(i);
                    break;
                }
                if !matches!(&b[i..end], b"true" | b"false" | b"null") {
                    return None;
                }
                i = end;
                expect = after_value(&stack);
                cut = i;
                cut_ok = true;
                continue;
            }
            _ => return None,
        }
        i += 1;
    }
    let closers: String = stack.iter().rev().map(|&c| c as char).collect();
    let head = |end: usize| text.get(..end).unwrap_or_default();
    let tailed = match tail {
        Tail::None => None,
        Tail::Str(start) => {
            let body = text.get(start + 1..).unwrap_or_default();
            Some(format!(
                "{}\"{}\"{closers}",
                head(start),
                string_prefix(body)
            ))
        }
        Tail::Num(start) => {
            let digits = text
                .get(start..)
                .unwrap_or_default()
                .trim_end_matches(['-', '+', '.', 'e', 'E']);
            (!digits.is_empty()).then(|| format!("{}{digits}{closers}", head(start)))
        }
        Tail::Lit(start) => {
            let partial = text.get(start..).unwrap_or_default();
            // (no literal starts so: the text can never be JSON)
            let lit = ["true", "false", "null"]
                .into_iter()
                .find(|lit| lit.starts_with(partial))?;
            Some(format!("{}{lit}{closers}", head(start)))
        }
    };
    let cut_at = cut_ok.then(|| format!("{}{closers}", head(cut)));
    [tailed, cut_at]
        .into_iter()
        .flatten()
        .find_map(|candidate| serde_json::from_str(&candidate).ok())
}

/// What follows a complete value: `,` or the end inside a container, nothing at the top.
fn after_value(stack: &[u8]) -> Expect {
    match stack.is_empty() {
        true => Expect::Nothing,
        false => Expect::CommaOrEnd,
    }
}

/// The first index at or after `from` whose byte does not satisfy `keep`.
fn scan(b: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut i = from;
    while i < b.len() && keep(b[i]) {
        i += 1;
    }
    i
}

/// The index of the `"` that ends a string whose body starts at `from`, if it ends.
fn string_end(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The body of an unfinished string, cut so that closing it with `"` can be valid: a cut
/// escape (`\`, `\u00`) is dropped, and then a high surrogate escape left without its low half.
fn string_prefix(body: &str) -> &str {
    let b = body.as_bytes();
    let mut i = 0;
    // (start, end) of the latest `\uXXXX` escape that is a high surrogate
    let mut high: Option<(usize, usize)> = None;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let start = i;
        match b.get(i + 1) {
            None => return body.get(..start).unwrap_or_default(),
            Some(b'u') => {
                let hex = b.get(i + 2..i + 6);
                let Some(hex) = hex else {
                    return cut_high(body, start, high);
                };
                let high_half = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                    .is_some_and(|u| (0xD800..0xDC00).contains(&u));
                i += 6;
                high = high_half.then_some((start, i));
            }
            Some(_) => i += 2,
        }
    }
    cut_high(body, b.len(), high)
}

/// `body[..end]`, without a high surrogate escape that ends exactly at `end`.
fn cut_high(body: &str, end: usize, high: Option<(usize, usize)>) -> &str {
    let end = match high {
        Some((start, stop)) if stop == end => start,
        _ => end,
    };
    body.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefixes_close_to_what_they_say_so_far() {
        for (prefix, want) in [
            ("{", json!({})),
            ("{\"", json!({})),
            ("{\"ci", json!({})),
            ("{\"city\"", json!({})),
            ("{\"city\":", json!({})),
            ("{\"city\": \"Par", json!({"city": "Par"})),
            ("{\"city\":\"Paris\",", json!({"city": "Paris"})),
            (
                "{\"city\":\"Paris\", \"n\": 1",
                json!({"city": "Paris", "n": 1}),
            ),
            ("{\"a\":\"x\\", json!({"a": "x"})),
            ("{\"a\":\"x\\\"", json!({"a": "x\""})),
            ("{\"a\":\"x\\u00", json!({"a": "x"})),
            ("{\"a\":\"x\\u00e9", json!({"a": "xé"})),
            ("{\"a\":\"\\ud83d", json!({"a": ""})),
            ("{\"a\":\"\\ud83d\\u", json!({"a": ""})),
            ("{\"a\":\"\\ud83d\\ude00", json!({"a": "😀"})),
            ("{\"a\":-", json!({})),
            ("{\"a\":12", json!({"a": 12})),
            ("{\"a\":1.", json!({"a": 1})),
            ("{\"a\":1.5e-", json!({"a": 1.5})),
            ("{\"a\":tru", json!({"a": true})),
            ("{\"a\":f", json!({"a": false})),
            ("{\"a\":nul", json!({"a": null})),
            ("[1,[2,[3", json!([1, [2, [3]]])),
            ("[1,[2,[", json!([1, [2, []]])),
            ("[1,[2,", json!([1, [2]])),
            ("[{\"a\":[{\"b\":\"c", json!([{"a": [{"b": "c"}]}])),
            ("\"just a str", json!("just a str")),
            ("{\"a\":1}", json!({"a": 1})),
            // a control character is no JSON string: the member is dropped
            ("{\"a\":1,\"b\":\"\u{1}", json!({"a": 1})),
        ] {
            assert_eq!(partial_json(prefix), Some(want), "{prefix}");
        }
    }

    #[test]
    fn what_cannot_start_a_json_text_has_no_partial() {
        for text in [
            "",
            "   ",
            "-",
            "x",
            "{\"date\": 2026-12-01}",
            "{\"a\":truex",
            "{\"a\" 1",
            "[1]]",
            "{]",
            "{\"a\":1}}",
            "{\"a\":1} x",
        ] {
            assert_eq!(partial_json(text), None, "{text:?}");
        }
        let deep = "[".repeat(MAX_PARTIAL_DEPTH + 1);
        assert_eq!(partial_json(&deep), None, "deeper than the bound");
        assert!(partial_json(&"[".repeat(MAX_PARTIAL_DEPTH)).is_some());
    }
}
