//! Rebuilds a call's argument JSON from structured pieces (Vertex `partialArgs`).
//!
//! With `streamFunctionCallArguments`, Vertex streams a function call's arguments as
//! `partialArgs` entries: a JSONPath (RFC 9535 subset: `$.a`, `$.a.b`, `$.a[0]`, `$['a b']`)
//! and one typed value. A long string arrives cut into consecutive pieces at the same path,
//! every piece but the last marked `willContinue`. The decoder keeps each entry as a
//! [`PathValue`]; the assembler keeps them in arrival order and calls [`build`] (or
//! [`build_text`]) when the call ends without argument text of its own.
//!
//! Rules:
//! - pieces are applied in order; objects and arrays on the way are created as needed;
//! - a string piece appends to the string already at its path when the previous piece had
//!   the same path, or when the last piece at that path said it continues; otherwise a
//!   piece replaces the value at its path;
//! - an array index past the end pads the gap with `null` (tolerant of skipped elements), up
//!   to [`MAX_INDEX_GAP`] missing elements per piece and [`MAX_PADDING`] in all (so many
//!   pieces each skipping ahead cannot grow arrays without bound);
//! - a piece may not make the arguments deeper than
//!   [`MAX_ARGUMENT_DEPTH`](crate::depth::MAX_ARGUMENT_DEPTH) (64) levels: its path's
//!   segments plus its value's own depth. A deeper piece is [`PartialArgsError::BadPath`]
//!   (`... (recursion limit)`), so no path, however long, builds a value whose serialization
//!   or drop could exhaust the stack.

use crate::chunk::PathValue;
use crate::depth::{value_depth, MAX_ARGUMENT_DEPTH};
use crate::error::excerpt;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Largest gap of missing array elements padded with `null`; a larger index is refused so a
/// hostile path cannot allocate without bound.
pub const MAX_INDEX_GAP: usize = 1024;

/// Most `null`s padded into arrays over all pieces of one call.
pub const MAX_PADDING: usize = 65_536;

/// Why pieces could not be turned into arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartialArgsError {
    /// The JSONPath is not in the supported subset (`$`, `.name`, `[n]`, `['name']`).
    #[error("unsupported JSONPath {path:?}: {problem}")]
    BadPath {
        /// The path as the provider sent it.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Two pieces disagree about the shape (a path goes through a value that is not an
    /// object/array of the needed kind), or a piece replaces the root with a non-object.
    #[error("piece at {path:?} conflicts with an earlier piece: {problem}")]
    Conflict {
        /// The path of the conflicting piece.
        path: String,
        /// What conflicts.
        problem: String,
    },
}

/// One step of a parsed JSONPath.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    /// An object member (`.name` or `['name']`).
    Key(String),
    /// An array element (`[n]`).
    Index(usize),
}

/// Builds the arguments object from path/value pieces in arrival order; consecutive string
/// pieces at the same path concatenate. No pieces give `{}`.
pub fn build(pieces: &[PathValue]) -> Result<Value, PartialArgsError> {
    let mut root = Value::Object(Map::new());
    let mut previous: Option<Vec<Segment>> = None;
    // Paths whose last piece said it continues (a set: a call may hold very many pieces).
    let mut continuing: HashSet<Vec<Segment>> = HashSet::new();
    let mut padded = 0usize;
    for piece in pieces {
        let segments = parse_path(&piece.path)?;
        if segments.len() + value_depth(&piece.value) > MAX_ARGUMENT_DEPTH {
            return Err(too_deep(&piece.path));
        }
        let is_continuation =
            previous.as_ref() == Some(&segments) || continuing.contains(&segments);
        let slot = slot_at(&mut root, &segments, &piece.path, &mut padded)?;
        match (&mut *slot, &piece.value) {
            (Value::String(existing), Value::String(more)) if is_continuation => {
                existing.push_str(more);
            }
            _ => *slot = piece.value.clone(),
        }
        if piece.continues {
            continuing.insert(segments.clone());
        } else {
            continuing.remove(&segments);
        }
        previous = Some(segments);
    }
    if !root.is_object() {
        return Err(PartialArgsError::Conflict {
            path: "$".to_string(),
            problem: "the arguments root must be an object".to_string(),
        });
    }
    Ok(root)
}

/// [`build`], rendered as compact JSON text (what a [`crate::ToolCall`]'s `raw_arguments`
/// holds).
pub fn build_text(pieces: &[PathValue]) -> Result<String, PartialArgsError> {
    build(pieces).map(|value| value.to_string())
}

/// Walks `segments` from `root`, creating objects/arrays as needed, and returns the slot.
fn slot_at<'v>(
    root: &'v mut Value,
    segments: &[Segment],
    path: &str,
    padded: &mut usize,
) -> Result<&'v mut Value, PartialArgsError> {
    let mut node = root;
    for segment in segments {
        if node.is_null() {
            *node = match segment {
                Segment::Key(_) => Value::Object(Map::new()),
                Segment::Index(_) => Value::Array(Vec::new()),
            };
        }
        node = match (segment, node) {
            (Segment::Key(key), Value::Object(map)) => {
                map.entry(key.clone()).or_insert(Value::Null)
            }
            (Segment::Index(i), Value::Array(items)) => {
                if *i > items.len().saturating_add(MAX_INDEX_GAP) {
                    return Err(conflict(path, "array index far past the end"));
                }
                if items.len() <= *i {
                    *padded = padded.saturating_add(*i - items.len());
                    if *padded > MAX_PADDING {
                        return Err(conflict(path, "too many skipped array elements in all"));
                    }
                    items.resize(i.saturating_add(1), Value::Null);
                }
                match items.get_mut(*i) {
                    Some(item) => item,
                    None => return Err(conflict(path, "array index out of range")),
                }
            }
            (Segment::Key(key), other) => {
                return Err(conflict(
                    path,
                    &format!("member {key:?} of a {}", kind(other)),
                ))
            }
            (Segment::Index(i), other) => {
                return Err(conflict(
                    path,
                    &format!("element [{i}] of a {}", kind(other)),
                ))
            }
        };
    }
    Ok(node)
}

fn too_deep(path: &str) -> PartialArgsError {
    PartialArgsError::BadPath {
        path: excerpt(path.as_bytes()),
        problem: format!("nests deeper than {MAX_ARGUMENT_DEPTH} levels (recursion limit)"),
    }
}

fn conflict(path: &str, problem: &str) -> PartialArgsError {
    PartialArgsError::Conflict {
        path: excerpt(path.as_bytes()),
        problem: problem.to_string(),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses the supported JSONPath subset: `$` then any of `.name`, `[n]`, `['name']`,
/// `["name"]` (quoted names may escape their quote and backslash).
fn parse_path(path: &str) -> Result<Vec<Segment>, PartialArgsError> {
    let bad = |problem: &str| PartialArgsError::BadPath {
        path: excerpt(path.as_bytes()),
        problem: problem.to_string(),
    };
    let trimmed = path.trim();
    let mut chars = trimmed.chars().peekable();
    if chars.next() != Some('$') {
        return Err(bad("must start with `$`"));
    }
    let mut segments = Vec::new();
    while let Some(c) = chars.next() {
        if segments.len() >= MAX_ARGUMENT_DEPTH {
            // Already too deep for any value: stop before reading the rest of the path.
            return Err(too_deep(path));
        }
        match c {
            '.' => {
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n == '.' || n == '[' {
                        break;
                    }
                    name.push(n);
                    chars.next();
                }
                if name.is_empty() {
                    return Err(bad("empty member name after `.`"));
                }
                segments.push(Segment::Key(name));
            }
            '[' => match chars.peek().copied() {
                Some(quote @ ('\'' | '"')) => {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('\\') => match chars.next() {
                                Some(escaped) => name.push(escaped),
                                None => return Err(bad("unterminated escape")),
                            },
                            Some(q) if q == quote => break,
                            Some(other) => name.push(other),
                            None => return Err(bad("unterminated quoted name")),
                        }
                    }
                    if chars.next() != Some(']') {
                        return Err(bad("expected `]` after a quoted name"));
                    }
                    segments.push(Segment::Key(name));
                }
                _ => {
                    let mut digits = String::new();
                    loop {
                        match chars.next() {
                            Some(']') => break,
                            Some(d) if d.is_ascii_digit() => digits.push(d),
                            Some(_) => {
                                return Err(bad("array index must be a non-negative integer"))
                            }
                            None => return Err(bad("unterminated `[`")),
                        }
                    }
                    let index = digits
                        .parse::<usize>()
                        .map_err(|_| bad("array index must be a non-negative integer"))?;
                    segments.push(Segment::Index(index));
                }
            },
            _ => return Err(bad("expected `.` or `[`")),
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn piece(path: &str, value: Value, continues: bool) -> PathValue {
        PathValue {
            path: path.to_string(),
            value,
            continues,
        }
    }

    #[test]
    fn no_pieces_build_an_empty_object() {
        assert_eq!(build(&[]).unwrap(), json!({}));
    }

    #[test]
    fn string_cut_into_pieces_concatenates_at_its_path() {
        let pieces = [
            piece("$.location", json!("Boston"), true),
            piece("$.location", json!(", MA"), false),
            piece("$.brightness", json!(50), false),
        ];
        assert_eq!(
            build(&pieces).unwrap(),
            json!({"location": "Boston, MA", "brightness": 50})
        );
        assert_eq!(
            build_text(&pieces).unwrap(),
            r#"{"brightness":50,"location":"Boston, MA"}"#
        );
    }

    #[test]
    fn nested_members_and_array_elements_are_created() {
        let pieces = [
            piece("$.order.items[0].sku", json!("A-1"), false),
            piece("$.order.items[0].qty", json!(2), false),
            piece("$.order.items[1].sku", json!("B-"), true),
            piece("$.order.items[1].sku", json!("2"), false),
            piece("$.order.gift", json!(true), false),
            piece("$.order.note", Value::Null, false),
        ];
        assert_eq!(
            build(&pieces).unwrap(),
            json!({"order": {"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-2"}], "gift": true, "note": null}})
        );
    }

    #[test]
    fn bracket_quoted_names_allow_spaces_dots_and_escapes() {
        let pieces = [
            piece("$['a b']", json!(1), false),
            piece("$[\"x.y\"]", json!(2), false),
            piece("$['it\\'s']", json!(3), false),
        ];
        assert_eq!(
            build(&pieces).unwrap(),
            json!({"a b": 1, "x.y": 2, "it's": 3})
        );
    }

    #[test]
    fn same_path_in_dot_and_bracket_form_is_one_path() {
        let pieces = [
            piece("$.city", json!("San "), true),
            piece("$['city']", json!("Francisco"), false),
        ];
        assert_eq!(build(&pieces).unwrap(), json!({"city": "San Francisco"}));
    }

    #[test]
    fn continued_string_resumes_after_an_interleaved_path() {
        let pieces = [
            piece("$.a", json!("he"), true),
            piece("$.b", json!(1), false),
            piece("$.a", json!("llo"), false),
        ];
        assert_eq!(build(&pieces).unwrap(), json!({"a": "hello", "b": 1}));
    }

    #[test]
    fn finished_string_is_replaced_not_extended_by_a_later_non_consecutive_piece() {
        let pieces = [
            piece("$.a", json!("old"), false),
            piece("$.b", json!(1), false),
            piece("$.a", json!("new"), false),
        ];
        assert_eq!(build(&pieces).unwrap(), json!({"a": "new", "b": 1}));
    }

    #[test]
    fn skipped_array_elements_pad_with_null() {
        let pieces = [piece("$.xs[2]", json!(7), false)];
        assert_eq!(build(&pieces).unwrap(), json!({"xs": [null, null, 7]}));
    }

    #[test]
    fn huge_array_index_is_refused_instead_of_allocating() {
        let pieces = [piece("$.xs[18446744073709551615]", json!(1), false)];
        assert!(matches!(
            build(&pieces),
            Err(PartialArgsError::Conflict { .. })
        ));
    }

    fn deep_path(levels: usize) -> String {
        format!("${}", ".a".repeat(levels))
    }

    fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn a_partial_args_path_100000_levels_deep_is_refused_not_a_stack_overflow() {
        let err = on_a_small_stack(|| {
            let pieces = [piece(&deep_path(100_000), json!("x"), false)];
            (
                build(&pieces).unwrap_err(),
                build_text(&pieces).unwrap_err(),
            )
        });
        for e in [err.0, err.1] {
            assert!(
                matches!(&e, PartialArgsError::BadPath { problem, path }
                    if problem.contains("recursion limit") && path.len() < 200),
                "{e}"
            );
        }
        let brackets = format!("${}", "[0]".repeat(100_000));
        let e = on_a_small_stack(move || build(&[piece(&brackets, json!(1), false)]));
        assert!(matches!(e, Err(PartialArgsError::BadPath { .. })), "{e:?}");
    }

    #[test]
    fn a_path_as_deep_as_the_limit_builds_and_one_level_more_is_refused() {
        let ok = build(&[piece(&deep_path(MAX_ARGUMENT_DEPTH), json!(1), false)]).unwrap();
        assert_eq!(value_depth(&ok), MAX_ARGUMENT_DEPTH);
        assert!(build(&[piece(&deep_path(MAX_ARGUMENT_DEPTH + 1), json!(1), false)]).is_err());
        // the value's own depth counts too
        let ten = serde_json::from_str::<Value>(&format!("{}{}", "[".repeat(10), "]".repeat(10)))
            .unwrap();
        let fits = [piece(
            &deep_path(MAX_ARGUMENT_DEPTH - 10),
            ten.clone(),
            false,
        )];
        assert_eq!(value_depth(&build(&fits).unwrap()), MAX_ARGUMENT_DEPTH);
        let over = [piece(&deep_path(MAX_ARGUMENT_DEPTH - 9), ten, false)];
        assert!(build(&over).is_err());
    }

    #[test]
    fn many_pieces_each_skipping_ahead_cannot_grow_an_array_without_bound() {
        // 1,000 pieces each 1,000 past the end would pad a million nulls
        let pieces: Vec<PathValue> = (1..=1000)
            .map(|k| piece(&format!("$.xs[{}]", k * 1000), json!(k), false))
            .collect();
        assert!(matches!(
            build(&pieces),
            Err(PartialArgsError::Conflict { problem, .. }) if problem.contains("in all")
        ));
    }

    #[test]
    fn a_call_with_100000_continued_pieces_builds_in_linear_time() {
        // each at its own path, each saying it continues: the old list made this quadratic
        let pieces: Vec<PathValue> = (0..100_000)
            .map(|k| piece(&format!("$.k{k}"), json!("v"), true))
            .collect();
        let started = std::time::Instant::now();
        let built = build(&pieces).unwrap();
        assert_eq!(built.as_object().map(|m| m.len()), Some(100_000));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn path_without_dollar_is_rejected() {
        let err = build(&[piece("location", json!("x"), false)]).unwrap_err();
        assert!(matches!(err, PartialArgsError::BadPath { .. }), "{err}");
    }

    #[test]
    fn malformed_paths_are_rejected_not_panicking() {
        for path in [
            "$.", "$[", "$[x]", "$['a", "$['a'", "$..a", "$a", "$[-1]", "$['a\\",
        ] {
            let err = build(&[piece(path, json!(1), false)]);
            assert!(
                matches!(err, Err(PartialArgsError::BadPath { .. })),
                "{path}: {err:?}"
            );
        }
    }

    #[test]
    fn member_of_a_string_is_a_conflict() {
        let pieces = [
            piece("$.a", json!("s"), false),
            piece("$.a.b", json!(1), false),
        ];
        assert!(matches!(
            build(&pieces),
            Err(PartialArgsError::Conflict { .. })
        ));
    }

    #[test]
    fn non_object_root_is_a_conflict() {
        let pieces = [piece("$", json!("just a string"), false)];
        assert!(matches!(
            build(&pieces),
            Err(PartialArgsError::Conflict { .. })
        ));
    }
}
