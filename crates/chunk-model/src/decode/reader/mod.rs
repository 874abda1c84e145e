//! A JSON reader for decoders that walk a chunk once, reading what they need as they go,
//! instead of deserializing it with serde into borrowed structs.
//!
//! Why: on the hot path (an OpenAI argument fragment) serde's machinery costs several times
//! what the walk does: every key is validated and matched through visitors, every nested
//! struct and `Vec` is built and dropped, every ignored member is skipped value by value.
//!
//! The contract: for the reads a decoder makes, the reader accepts exactly what
//! `serde_json::from_slice` (1.0, features `std` and `float_roundtrip`) accepted for the
//! same reads, reads the same values, and refuses the rest with the same error: serde_json's
//! message at the same line and column for malformed JSON ([`Code`]), serde's message and the
//! field's path for a value of the wrong shape, so no output and no dead-letter reason
//! changes. It is a port of the parts of serde_json that such reads use (`de.rs` and
//! `read.rs`: whitespace, `null`/`true`/`false`, numbers, strings with their escapes and
//! UTF-8 check, sequences and maps with their comma, colon and end rules, skipping a value),
//! each function naming the serde_json one it follows; what a *derived* struct adds (fields
//! by name or by position, duplicate fields, `Option` as `null`) is [`Fields`] and the
//! decoder that reads the struct. The differential test `tests/openai_chat_differential.rs`
//! holds the serde decoder this replaced and compares the two on mutated recordings.
//!
//! Strictness follows serde_json's: a string read as a string (every key, every string value
//! a decoder reads) has its escapes, surrogate pairs and UTF-8 checked; a value skipped
//! ([`Reader::skip_value`], serde's `IgnoredAny`) only has to be well-formed. Numbers read as
//! values are range-checked, skipped ones are not.
//!
//! Depth: the serde path refused JSON nested deeper than [`MAX_JSON_DEPTH`] before parsing
//! (`depth::json_deeper_than`). The reader counts every array and object it enters, read or
//! skipped, and stops at the first too deep; on a good chunk the pre-scan is then not
//! needed (a chunk read whole was at most that deep), and on a bad one [`Fault::into_error`]
//! runs it first, as the serde path did.
//!
//! Files: [`fault`] (why a read stopped, and the error that says so), [`string`], [`number`],
//! [`skip`] (skipping a value), [`value`] (reading any value: as a [`Loose`], a
//! [`FinishReason`], a [`JsonText`], or walked as a `serde_json::Value` would be),
//! [`fields`] (reading a struct as a derived `Deserialize` does).
//!
//! [`Loose`]: crate::decode::lenient::Loose
//! [`FinishReason`]: crate::decode::lenient::FinishReason
//! [`JsonText`]: crate::decode::text::JsonText

mod fault;
mod fields;
mod number;
mod skip;
mod string;
mod value;

pub(crate) use fault::{Code, Fault, Segment};
pub(crate) use fields::Fields;

use crate::depth::MAX_JSON_DEPTH;
use serde::de::Unexpected;
use std::borrow::Cow;

/// A position in one chunk's bytes. Every read starts at the reader's position, skips the
/// whitespace serde_json skips, and leaves the reader after what it read.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    /// The chunk as text, when it is UTF-8 (almost always): then every string in it is, and
    /// strings are sliced from it without checking each one.
    text: Option<&'a str>,
    index: usize,
    /// Arrays and objects open around the position.
    depth: usize,
}

/// How a struct is written: an object (fields by name) or an array (fields by position: a
/// derived serde struct reads both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Object,
    Array,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            text: std::str::from_utf8(bytes).ok(),
            index: 0,
            depth: 0,
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.index).copied()
    }

    /// serde_json's `peek_or_null`.
    #[inline]
    fn peek_or_null(&self) -> u8 {
        self.peek().unwrap_or(0)
    }

    #[inline]
    fn eat(&mut self) {
        self.index += 1;
    }

    #[inline]
    fn next_char(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.index += 1;
        Some(b)
    }

    /// serde_json's `parse_whitespace`: skips ` `, `\n`, `\t`, `\r`; the next byte, not
    /// consumed.
    #[inline]
    pub(crate) fn ws(&mut self) -> Option<u8> {
        loop {
            match self.peek() {
                Some(b' ' | b'\n' | b'\t' | b'\r') => self.index += 1,
                other => return other,
            }
        }
    }

    /// serde_json's `error`: at the position after the last byte read.
    #[cold]
    fn err(&self, code: Code) -> Fault {
        Fault::Syntax {
            code,
            at: self.index,
        }
    }

    /// serde_json's `peek_error`: at the position of the byte peeked.
    #[cold]
    fn peek_err(&self, code: Code) -> Fault {
        Fault::Syntax {
            code,
            at: self.bytes.len().min(self.index + 1),
        }
    }

    /// serde_json's `parse_ident`: the rest of `null`, `true` or `false`.
    fn ident(&mut self, rest: &[u8]) -> Result<(), Fault> {
        for &expected in rest {
            match self.next_char() {
                None => return Err(self.err(Code::EofWhileParsingValue)),
                Some(b) if b != expected => return Err(self.err(Code::ExpectedSomeIdent)),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Enters an array or object (its opening byte is next): too deep past
    /// [`MAX_JSON_DEPTH`].
    #[inline]
    fn enter(&mut self) -> Result<(), Fault> {
        self.depth += 1;
        if self.depth > MAX_JSON_DEPTH {
            return Err(Fault::TooDeep);
        }
        self.eat();
        Ok(())
    }

    /// Leaves the array or object entered last (its end is checked by [`Reader::end_seq`]
    /// or [`Reader::end_map`]).
    #[inline]
    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// serde_json's `SeqAccess::has_next_element`: whether another element follows (the
    /// reader is then at it). `first` is the sequence's own flag, `true` at its start.
    #[inline]
    pub(crate) fn next_element(&mut self, first: &mut bool) -> Result<bool, Fault> {
        let peek = match self.ws() {
            Some(b) => b,
            None => return Err(self.peek_err(Code::EofWhileParsingList)),
        };
        if peek == b']' {
            Ok(false)
        } else if *first {
            *first = false;
            Ok(true)
        } else if peek == b',' {
            self.eat();
            match self.ws() {
                Some(b']') => Err(self.peek_err(Code::TrailingComma)),
                Some(_) => Ok(true),
                None => Err(self.peek_err(Code::EofWhileParsingValue)),
            }
        } else {
            Err(self.peek_err(Code::ExpectedListCommaOrEnd))
        }
    }

    /// serde_json's `MapAccess::has_next_key`: whether another member follows (the reader is
    /// then at its key's opening quote). `first` is the map's own flag, `true` at its start.
    #[inline]
    pub(crate) fn next_key(&mut self, first: &mut bool) -> Result<bool, Fault> {
        let peek = match self.ws() {
            Some(b) => b,
            None => return Err(self.peek_err(Code::EofWhileParsingObject)),
        };
        if peek == b'}' {
            Ok(false)
        } else if *first {
            *first = false;
            if peek == b'"' {
                Ok(true)
            } else {
                Err(self.peek_err(Code::KeyMustBeAString))
            }
        } else if peek == b',' {
            self.eat();
            match self.ws() {
                Some(b'"') => Ok(true),
                Some(b'}') => Err(self.peek_err(Code::TrailingComma)),
                Some(_) => Err(self.peek_err(Code::KeyMustBeAString)),
                None => Err(self.peek_err(Code::EofWhileParsingValue)),
            }
        } else {
            Err(self.peek_err(Code::ExpectedObjectCommaOrEnd))
        }
    }

    /// A member's key (after [`Reader::next_key`]), read as a string (serde_json's `MapKey`),
    /// as its UTF-8 bytes.
    #[inline]
    pub(crate) fn key(&mut self) -> Result<Cow<'a, [u8]>, Fault> {
        self.eat();
        self.bytes_strict()
    }

    /// serde_json's `parse_object_colon`: the `:` between a key and its value.
    #[inline]
    pub(crate) fn colon(&mut self) -> Result<(), Fault> {
        match self.ws() {
            Some(b':') => {
                self.eat();
                Ok(())
            }
            Some(_) => Err(self.peek_err(Code::ExpectedColon)),
            None => Err(self.peek_err(Code::EofWhileParsingObject)),
        }
    }

    /// serde_json's `end_seq`, after the elements a visitor took.
    #[inline]
    fn end_seq(&mut self) -> Result<(), Fault> {
        match self.ws() {
            Some(b']') => {
                self.eat();
                Ok(())
            }
            Some(b',') => {
                self.eat();
                match self.ws() {
                    Some(b']') => Err(self.peek_err(Code::TrailingComma)),
                    _ => Err(self.peek_err(Code::TrailingCharacters)),
                }
            }
            Some(_) => Err(self.peek_err(Code::TrailingCharacters)),
            None => Err(self.peek_err(Code::EofWhileParsingList)),
        }
    }

    /// serde_json's `end_map`, after the members a visitor took.
    #[inline]
    fn end_map(&mut self) -> Result<(), Fault> {
        match self.ws() {
            Some(b'}') => {
                self.eat();
                Ok(())
            }
            Some(b',') => Err(self.peek_err(Code::TrailingComma)),
            Some(_) => Err(self.peek_err(Code::TrailingCharacters)),
            None => Err(self.peek_err(Code::EofWhileParsingObject)),
        }
    }

    /// serde_json's `Deserializer::end`: nothing but whitespace after the value.
    pub(crate) fn end(&mut self) -> Result<(), Fault> {
        match self.ws() {
            Some(_) => Err(self.peek_err(Code::TrailingCharacters)),
            None => Ok(()),
        }
    }

    /// serde_json's `deserialize_option`: `true` (and the `null` read) when the value is
    /// `null`, else `false` with the value still to read.
    #[inline]
    pub(crate) fn null(&mut self) -> Result<bool, Fault> {
        if self.ws() == Some(b'n') {
            self.eat();
            self.ident(b"ull")?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The start of a struct (a derived serde struct, `expecting` its `struct Name`): its
    /// opening byte read, how it is written.
    #[inline]
    pub(crate) fn struct_start(&mut self, expecting: &str) -> Result<Shape, Fault> {
        match self.ws() {
            Some(b'{') => {
                self.enter()?;
                Ok(Shape::Object)
            }
            Some(b'[') => {
                self.enter()?;
                Ok(Shape::Array)
            }
            Some(_) => Err(self.invalid_type(expecting)),
            None => Err(self.peek_err(Code::EofWhileParsingValue)),
        }
    }

    /// The end of a struct opened by [`Reader::struct_start`], after its fields.
    #[inline]
    pub(crate) fn struct_end(&mut self, shape: Shape) -> Result<(), Fault> {
        self.leave();
        match shape {
            Shape::Object => self.end_map(),
            Shape::Array => self.end_seq(),
        }
    }

    /// The start of a sequence (serde's `Vec`): its `[` read.
    #[inline]
    pub(crate) fn seq_start(&mut self) -> Result<(), Fault> {
        match self.ws() {
            Some(b'[') => self.enter(),
            Some(_) => Err(self.invalid_type("a sequence")),
            None => Err(self.peek_err(Code::EofWhileParsingValue)),
        }
    }

    /// The end of a sequence opened by [`Reader::seq_start`], after its elements.
    #[inline]
    pub(crate) fn seq_end(&mut self) -> Result<(), Fault> {
        self.leave();
        self.end_seq()
    }

    /// A string value (serde_json's `deserialize_str`; anything else is `invalid type: …,
    /// expected a string`).
    #[inline]
    pub(crate) fn text(&mut self) -> Result<Cow<'a, str>, Fault> {
        match self.ws() {
            Some(b'"') => {
                self.eat();
                self.str_strict()
            }
            Some(_) => Err(self.invalid_type("a string")),
            None => Err(self.peek_err(Code::EofWhileParsingValue)),
        }
    }

    /// serde_json's `peek_invalid_type`: the value at the reader is not what `expected` says.
    /// Reads the value's start to name it (and fails on it, like serde_json, if that much is
    /// malformed).
    #[cold]
    fn invalid_type(&mut self, expected: &str) -> Fault {
        let start = self.index;
        let unexpected = match self.peek_or_null() {
            b'n' => {
                self.eat();
                if let Err(e) = self.ident(b"ull") {
                    return e;
                }
                Unexpected::Unit
            }
            b't' => {
                self.eat();
                if let Err(e) = self.ident(b"rue") {
                    return e;
                }
                Unexpected::Bool(true)
            }
            b'f' => {
                self.eat();
                if let Err(e) = self.ident(b"alse") {
                    return e;
                }
                Unexpected::Bool(false)
            }
            b'-' => {
                self.eat();
                match self.number(false, start) {
                    Ok(n) => n.unexpected(),
                    Err(e) => return e,
                }
            }
            b'0'..=b'9' => match self.number(true, start) {
                Ok(n) => n.unexpected(),
                Err(e) => return e,
            },
            b'"' => {
                self.eat();
                return match self.str_strict() {
                    Ok(s) => Fault::invalid_type(Unexpected::Str(&s), expected),
                    Err(e) => e,
                };
            }
            b'[' => Unexpected::Seq,
            b'{' => Unexpected::Map,
            _ => return self.peek_err(Code::ExpectedSomeValue),
        };
        Fault::invalid_type(unexpected, expected)
    }
}

/// A number as serde_json parses it (`ParserNumber`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Num {
    fn unexpected(self) -> Unexpected<'static> {
        match self {
            Num::U64(n) => Unexpected::Unsigned(n),
            Num::I64(n) => Unexpected::Signed(n),
            Num::F64(f) => Unexpected::Float(f),
        }
    }
}

#[cfg(test)]
mod tests;
