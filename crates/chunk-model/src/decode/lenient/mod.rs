//! Field readers for the rule every decoder follows: a field toolstream does not strictly need
//! never fails a chunk, and a field it needs is read in every shape providers have shipped.
//!
//! - [`Loose`]: any JSON value, read without ever failing (strings borrowed from the chunk,
//!   scalars kept, arrays and objects skipped). Fields that only some event types need are
//!   read as `Loose` and checked where they are needed, so the same field on another event
//!   type, whatever it holds, changes nothing.
//! - [`SoftIndex`]: the same for an index, holding the position or the problem to report.
//! - [`FinishReason`]: a finish/stop reason as a string (`"tool_calls"`), or as the AI SDK v6
//!   (`LanguageModelV3`) object `{"unified": "tool-calls", "raw": "tool_calls"}`; any other
//!   shape reads as no reason, never as an error.
//!   (In [`finish`], re-exported here.)
//! - [`opt_index`], [`opt_flag`], [`opt_number`]: serde readers for needed indices, booleans
//!   and numbers that also accept them written as strings (`"1"`, `"true"`); anything else
//!   is still an error naming the field.
//! - [`opt_object`]: a nested object read for some of its fields only: any other JSON value
//!   reads as the object's default (nothing in it), never as an error.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

mod finish;

pub use finish::{finish_of_any_word, FinishReason};

/// Any JSON value, read without failing. Strings borrow from the chunk when they can.
#[derive(Debug, Clone, PartialEq)]
pub enum Loose<'a> {
    /// A string.
    Str(Cow<'a, str>),
    /// A non-negative integer.
    Unsigned(u64),
    /// A negative integer.
    Signed(i64),
    /// A number with a fraction or exponent.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `null` (only seen outside an `Option`).
    Null,
    /// An array (its contents skipped).
    Array,
    /// An object (its contents skipped).
    Object,
}

const INDEX: &str = "a non-negative integer (or one written as a string)";
const FLAG: &str = "a boolean (or \"true\"/\"false\")";
const NUMBER: &str = "a number (or one written as a string)";
const STRING: &str = "a string";

impl<'a> Loose<'a> {
    fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Loose::Str(s) => Unexpected::Str(s),
            Loose::Unsigned(n) => Unexpected::Unsigned(*n),
            Loose::Signed(n) => Unexpected::Signed(*n),
            Loose::Float(f) => Unexpected::Float(*f),
            Loose::Bool(b) => Unexpected::Bool(*b),
            Loose::Null => Unexpected::Unit,
            Loose::Array => Unexpected::Seq,
            Loose::Object => Unexpected::Map,
        }
    }

    fn invalid_type(&self, expected: &str) -> String {
        format!("invalid type: {}, expected {expected}", self.unexpected())
    }

    fn invalid_value(&self, expected: &str) -> String {
        format!("invalid value: {}, expected {expected}", self.unexpected())
    }

    /// The problem with this value where a string is needed.
    pub fn not_a_string(&self) -> String {
        self.invalid_type(STRING)
    }

    /// The string, if the value is one (any other value is `None`: not needed, not read).
    pub fn into_text(self) -> Option<Cow<'a, str>> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string for a field that must be one; blank strings are absent. Any other value is
    /// the problem to report.
    pub fn need_text(self) -> Result<Option<String>, String> {
        match self {
            Loose::Str(s) if s.trim().is_empty() => Ok(None),
            Loose::Str(s) => Ok(Some(s.into_owned())),
            Loose::Null => Ok(None),
            other => Err(other.invalid_type(STRING)),
        }
    }

    /// The value as a position: an integer that fits `u32`, an integral float, or such an
    /// integer written as a string. Blank strings are absent.
    #[inline]
    pub fn index(&self) -> Result<Option<u32>, String> {
        match self {
            Loose::Unsigned(n) => u32::try_from(*n)
                .map(Some)
                .map_err(|_| self.invalid_value(INDEX)),
            Loose::Float(f) if f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX) => {
                // Integral and in range: the cast is exact.
                Ok(Some(*f as u32))
            }
            Loose::Str(s) if s.trim().is_empty() => Ok(None),
            Loose::Str(s) => s
                .trim()
                .parse::<u32>()
                .map(Some)
                .map_err(|_| self.invalid_value(INDEX)),
            Loose::Null => Ok(None),
            Loose::Signed(_) | Loose::Float(_) => Err(self.invalid_value(INDEX)),
            Loose::Bool(_) | Loose::Array | Loose::Object => Err(self.invalid_type(INDEX)),
        }
    }

    /// The value as a flag: a boolean, `"true"`/`"false"` in any case, or `0`/`1`. Blank
    /// strings are absent.
    pub fn flag(&self) -> Result<Option<bool>, String> {
        match self {
            Loose::Bool(b) => Ok(Some(*b)),
            Loose::Unsigned(0) => Ok(Some(false)),
            Loose::Unsigned(1) => Ok(Some(true)),
            Loose::Str(s) => {
                let t = s.trim();
                if t.is_empty() {
                    Ok(None)
                } else if t.eq_ignore_ascii_case("true") {
                    Ok(Some(true))
                } else if t.eq_ignore_ascii_case("false") {
                    Ok(Some(false))
                } else {
                    Err(self.invalid_value(FLAG))
                }
            }
            Loose::Null => Ok(None),
            Loose::Unsigned(_) | Loose::Signed(_) | Loose::Float(_) => {
                Err(self.invalid_value(FLAG))
            }
            Loose::Array | Loose::Object => Err(self.invalid_type(FLAG)),
        }
    }

    /// The value as a JSON number: a number, or a finite number written as a string.
    pub fn number(&self) -> Result<Option<serde_json::Number>, String> {
        match self {
            Loose::Unsigned(n) => Ok(Some((*n).into())),
            Loose::Signed(n) => Ok(Some((*n).into())),
            Loose::Float(f) => serde_json::Number::from_f64(*f)
                .map(Some)
                .ok_or_else(|| self.invalid_value(NUMBER)),
            Loose::Str(s) if s.trim().is_empty() => Ok(None),
            Loose::Str(s) => s
                .trim()
                .parse::<serde_json::Number>()
                .map(Some)
                .map_err(|_| self.invalid_value(NUMBER)),
            Loose::Null => Ok(None),
            Loose::Bool(_) | Loose::Array | Loose::Object => Err(self.invalid_type(NUMBER)),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Loose<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseVisitor)
    }
}

pub(super) struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Loose::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Loose::Unsigned(u),
            Err(_) => Loose::Signed(v),
        })
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Loose::Float(v))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Loose::Bool(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(LooseVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Loose::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Object)
    }
}

/// An index read without failing (see [`Loose::index`]): the position, or the problem to
/// report where the index is needed. Smaller than a [`Loose`], so the structs that hold one
/// stay cheap to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftIndex(Result<Option<u32>, Box<str>>);

impl SoftIndex {
    /// The index (`None` for a blank string), or the problem with the value.
    pub fn get(&self) -> Result<Option<u32>, String> {
        match &self.0 {
            Ok(i) => Ok(*i),
            Err(problem) => Err(problem.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for SoftIndex {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Loose::deserialize(deserializer)?;
        Ok(SoftIndex(value.index().map_err(String::into_boxed_str)))
    }
}

/// serde reader for a needed index: see [`Loose::index`]. Anything else is an error that
/// names the field.
pub fn opt_index<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<Loose<'de>>::deserialize(d)? {
        Some(v) => v.index().map_err(de::Error::custom),
        None => Ok(None),
    }
}

/// serde reader for a needed flag: see [`Loose::flag`].
pub fn opt_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Option::<Loose<'de>>::deserialize(d)? {
        Some(v) => v.flag().map_err(de::Error::custom),
        None => Ok(None),
    }
}

/// serde reader for a needed number: see [`Loose::number`].
pub fn opt_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<serde_json::Number>, D::Error> {
    match Option::<Loose<'de>>::deserialize(d)? {
        Some(v) => v.number().map_err(de::Error::custom),
        None => Ok(None),
    }
}

/// serde reader for an optional nested object of which only some members matter: an object
/// is read as `T` (whose fields must themselves never fail), `null` is `None`, and any other
/// value is `Some(T::default())`.
pub fn opt_object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    d.deserialize_option(OptObject(std::marker::PhantomData))
}

struct OptObject<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for OptObject<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ObjectOrDefault(std::marker::PhantomData))
            .map(Some)
    }
}

struct ObjectOrDefault<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for ObjectOrDefault<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        LooseVisitor.visit_seq(seq).map(|_| T::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
}

#[cfg(test)]
mod tests;
