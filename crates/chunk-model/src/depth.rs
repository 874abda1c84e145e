//! Nesting bounds: no input may drive an unbounded recursion.
//!
//! serde_json parses with a recursion limit, but a `serde_json::Value` built by hand (the
//! Vertex `partialArgs` builder) has none, and *serializing* or *dropping* a `Value` recurses
//! once per level with no limit at all: a value 100,000 levels deep overflows the stack. So
//! every place where input decides the depth of something toolstream builds, keeps or
//! republishes is bounded here, with a clear error:
//!
//! - [`MAX_JSON_DEPTH`] (127): raw input, i.e. chunk and tool-result bodies. Checked before
//!   parsing ([`json_deeper_than`]), so a deep part that a decoder would skip is refused
//!   too, and the reason says `recursion limit` (see [`crate::DecodeError::TooDeep`]).
//! - [`MAX_ARGUMENT_DEPTH`] (64): what toolstream keeps and republishes, i.e. a call's parsed
//!   arguments ([`crate::parse_arguments`]), the paths of structured argument pieces
//!   ([`crate::partial_args`]) and provider metadata kept on a call. These values travel
//!   inside envelopes (events nest arguments 4 levels deep in `message.completed`
//!   `calls[].tool_call.arguments`, the store's message record 3, history requests up to 6),
//!   and every reader of those (the store reading its own records back, the relay, a
//!   consumer using serde_json's defaults) refuses JSON deeper than 127 levels. 64 leaves room
//!   for every envelope, and is far deeper than any real tool schema.

use serde_json::Value;

/// Deepest raw input (chunk or tool-result JSON) accepted: 127 nested arrays/objects, exactly
/// what serde_json's default recursion limit parses (its 128th level fails).
pub const MAX_JSON_DEPTH: usize = 127;

/// Deepest value toolstream keeps and republishes: parsed arguments (a call nested deeper
/// ends `invalid` with reason `argument_depth`), structured argument paths, provider
/// metadata.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Whether the JSON text `bytes` nests arrays/objects more than `limit` levels deep. A scan
/// of the bytes (brackets inside strings do not count), no parsing and no recursion; text
/// that is not JSON is judged by its brackets only. Cheap on ordinary input: text with at
/// most `limit` opening brackets is answered by one counting pass ([`opening_brackets`]).
#[must_use]
pub fn json_deeper_than(bytes: &[u8], limit: usize) -> bool {
    if bytes.len() <= limit || opening_brackets(bytes) <= limit {
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// How many `[` and `{` `bytes` holds. Written to vectorize: `b | 0x20` is `{` exactly for
/// `[` (0x5B) and `{` (0x7B), and counts of blocks of at most 255 bytes fit a `u8`.
fn opening_brackets(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|block| {
            usize::from(
                block
                    .iter()
                    .fold(0u8, |n, &b| n + u8::from(b | 0x20 == b'{')),
            )
        })
        .sum()
}

/// Nesting depth of `value`: 0 for a scalar, 1 for `[]`/`{}` or a container of scalars.
/// Iterative (an explicit stack), so any value can be measured.
#[must_use]
pub fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, above)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(above + 1);
                stack.extend(items.iter().map(|item| (item, above + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(above + 1);
                stack.extend(map.values().map(|item| (item, above + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Drops `value` without recursion (a deep `Value`'s own drop recurses once per level).
pub fn drop_deep(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn the_limit_is_exactly_what_serde_json_parses() {
        assert!(!json_deeper_than(
            nested(MAX_JSON_DEPTH).as_bytes(),
            MAX_JSON_DEPTH
        ));
        assert!(serde_json::from_str::<Value>(&nested(MAX_JSON_DEPTH)).is_ok());
        assert!(json_deeper_than(
            nested(MAX_JSON_DEPTH + 1).as_bytes(),
            MAX_JSON_DEPTH
        ));
        assert!(serde_json::from_str::<Value>(&nested(MAX_JSON_DEPTH + 1)).is_err());
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(500), "{".repeat(500));
        assert!(!json_deeper_than(text.as_bytes(), 2));
        assert!(json_deeper_than(br#"{"a":"\\",  "b":[[1]]}"#, 2));
    }

    #[test]
    fn mixed_objects_and_arrays_count_together() {
        let text = format!("{}1{}", r#"{"a":["#.repeat(40), "]}".repeat(40));
        assert!(json_deeper_than(text.as_bytes(), 79));
        assert!(!json_deeper_than(text.as_bytes(), 80));
    }

    #[test]
    fn opening_brackets_counts_both_kinds_and_nothing_else() {
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(opening_brackets(&all), 2);
        let long = "[{a".repeat(1000);
        assert_eq!(opening_brackets(long.as_bytes()), 2000);
        assert_eq!(opening_brackets(b""), 0);
    }

    #[test]
    fn value_depth_counts_containers() {
        assert_eq!(value_depth(&json!(1)), 0);
        assert_eq!(value_depth(&json!({})), 1);
        assert_eq!(value_depth(&json!({"a": [1, {"b": []}], "c": 2})), 4);
    }

    #[test]
    fn a_value_100000_levels_deep_is_measured_and_dropped_without_recursion() {
        let result = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let mut v = Value::Null;
                for _ in 0..100_000 {
                    v = Value::Array(vec![v]);
                }
                let depth = value_depth(&v);
                drop_deep(v);
                depth
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(result, 100_000);
    }
}
