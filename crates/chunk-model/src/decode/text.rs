//! Field types the decoders share: [`Text`], a string that borrows from the chunk when it
//! can, and [`JsonText`], any JSON value as text (strings kept as they are, everything else
//! as compact JSON in the order it arrived), plus [`provider_message`] for in-band errors.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Longest provider error message kept in a [`crate::ChunkEvent::ProviderError`].
pub const MESSAGE_CHARS: usize = 300;

/// A JSON string field, borrowed from the input when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'a> Text<'a> {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text as an owned string (no copy when it was already owned).
    pub fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v)))
    }
}

/// Blank-is-absent for an optional [`Text`]: `None` for a missing, null, empty or
/// whitespace-only string (see [`crate::chunk::non_blank`]).
pub fn non_blank_text(t: Option<Text<'_>>) -> Option<String> {
    match t {
        Some(t) if !t.as_str().trim().is_empty() => Some(t.into_string()),
        _ => None,
    }
}

/// Any JSON value as text: a string is kept as it is (it already *is* the text, e.g. OpenAI
/// argument text); an object, array, number or boolean becomes its compact JSON, keys in the
/// order they arrived (some hosts send `arguments` as an object; Ollama always does).
/// A JSON `null` in an `Option<JsonText>` field is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText {
    /// The text.
    pub text: String,
    /// Whether the value was a JSON string (as opposed to JSON rendered as text).
    pub was_string: bool,
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl TopVisitor {
    fn rendered(text: String) -> JsonText {
        JsonText {
            text,
            was_string: false,
        }
    }
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = JsonText;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(JsonText {
            text: v.to_string(),
            was_string: true,
        })
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(JsonText {
            text: v,
            was_string: true,
        })
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        let mut out = String::new();
        Compact(&mut out).visit_bool::<E>(v)?;
        Ok(Self::rendered(out))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Self::rendered(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Self::rendered(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        let mut out = String::new();
        Compact(&mut out).visit_f64::<E>(v)?;
        Ok(Self::rendered(out))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Self::rendered("null".to_string()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(TopVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let mut out = String::new();
        Compact(&mut out).visit_seq(seq)?;
        Ok(Self::rendered(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut out = String::new();
        Compact(&mut out).visit_map(map)?;
        Ok(Self::rendered(out))
    }
}

/// Writes the value it visits into the string as compact JSON, preserving key order.
/// Nesting depth is bounded by serde_json's recursion limit, so deep input errors, never
/// overflows the stack.
struct Compact<'s>(&'s mut String);

/// Appends `s` as a JSON string literal, escaped exactly as serde_json does (`"`, `\\` and
/// control characters only), without an intermediate allocation.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every byte matched above is ASCII, so `start..i` are char boundaries.
        out.push_str(s.get(start..i).unwrap_or_default());
        if escape.is_empty() {
            // Writing into a String cannot fail.
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

impl<'de> DeserializeSeed<'de> for Compact<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Compact<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        // Writing into a String cannot fail.
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => self.0.push_str(&n.to_string()),
            None => self.0.push_str("null"),
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        push_json_string(self.0, v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            if !first {
                // Tentatively add the comma; removed again if the sequence has ended.
                self.0.push(',');
            }
            match seq.next_element_seed(Compact(self.0))? {
                Some(()) => first = false,
                None => {
                    if !first {
                        self.0.pop();
                    }
                    break;
                }
            }
        }
        self.0.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        loop {
            if !first {
                // Tentatively add the comma; removed again if the map has ended.
                self.0.push(',');
            }
            if map.next_key_seed(Key(self.0))?.is_none() {
                if !first {
                    self.0.pop();
                }
                break;
            }
            first = false;
            self.0.push(':');
            map.next_value_seed(Compact(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

/// Writes an object key it visits into the string as a JSON string literal, without an
/// intermediate `String`.
struct Key<'s>(&'s mut String);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        push_json_string(self.0, v);
        Ok(())
    }
}

/// The message of an in-band provider error, shortened to [`MESSAGE_CHARS`]: the `message`
/// of an error object (prefixed by its `code`/`type` when present), a string error as it is,
/// anything else as its compact JSON.
pub fn provider_message(error: &JsonText) -> String {
    let full = if error.was_string {
        error.text.clone()
    } else {
        message_of_object(&error.text).unwrap_or_else(|| error.text.clone())
    };
    shorten(&full)
}

fn message_of_object(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let obj = value.as_object()?;
    let message = obj
        .get("message")
        .and_then(|m| m.as_str())
        .filter(|m| !m.trim().is_empty())?;
    let code = ["code", "type"].iter().find_map(|k| match obj.get(*k) {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    });
    Some(match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_string(),
    })
}

/// `text` cut to [`MESSAGE_CHARS`] characters on a char boundary, `…` marking a cut.
pub fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(MESSAGE_CHARS).collect();
    if text.chars().nth(MESSAGE_CHARS).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_text_is_compact_and_keeps_key_order() {
        let t: JsonText =
            serde_json::from_str(r#"{ "z": 1, "a": [true, null, 2.5, "x\"y"] }"#).unwrap();
        assert_eq!(t.text, r#"{"z":1,"a":[true,null,2.5,"x\"y"]}"#);
        assert!(!t.was_string);
    }

    #[test]
    fn string_text_is_kept_verbatim() {
        let t: JsonText = serde_json::from_str(r#""{\"a\":""#).unwrap();
        assert_eq!(t.text, r#"{"a":"#);
        assert!(t.was_string);
    }

    #[test]
    fn string_escaping_matches_serde_json() {
        for s in [
            "plain",
            "q\"uote",
            "back\\slash",
            "nl\n\r\t\u{8}\u{c}",
            "\u{1}\u{1f}\u{7f}",
            "é🦀/<>",
            "",
        ] {
            let mut out = String::new();
            push_json_string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn keys_needing_escapes_are_escaped() {
        let t: JsonText = serde_json::from_str(r#"{"a\"b\n": {"\\": 1}}"#).unwrap();
        assert_eq!(t.text, r#"{"a\"b\n":{"\\":1}}"#);
    }

    #[test]
    fn empty_containers_render_as_empty() {
        let t: JsonText = serde_json::from_str(r#"{"a":[],"b":{}}"#).unwrap();
        assert_eq!(t.text, r#"{"a":[],"b":{}}"#);
    }

    #[test]
    fn provider_message_prefers_code_and_message() {
        let t: JsonText =
            serde_json::from_str(r#"{"code":502,"message":"Provider disconnected"}"#).unwrap();
        assert_eq!(provider_message(&t), "502: Provider disconnected");
    }
}
