//! Reading any JSON value, the ways the decoders' serde fields did (each a `deserialize_any`):
//!
//! - [`Reader::loose`]: a [`Loose`] (scalars read, arrays and objects skipped, their keys read
//!   as strings), and [`Reader::opt_index`], one read as a needed index;
//! - [`Reader::finish_reason`]: a [`FinishReason`] (a word, or the `{unified, raw}` object);
//! - [`Reader::json_text`]: a [`JsonText`] (a string as it is, anything else as compact JSON
//!   in the order it arrived);
//! - [`Reader::walk`]: read and dropped as a `serde_json::Value` would be (every string,
//!   key and number read and checked), and [`Reader::string_at`], the same keeping the string
//!   at a path of keys (`Value::pointer`, the last of duplicate keys winning as in a
//!   `serde_json::Map`).
//!
//! The `opt_` readers are the same for an `Option` field: `null` is `None`.

use super::{Code, Fault, Num, Reader};
use crate::decode::lenient::{FinishReason, Loose};
use crate::decode::text::{push_json_string, JsonText};
use std::borrow::Cow;
use std::fmt::Write as _;

/// What a value starts with, its first byte read (and for a string, the string; for a
/// number, the number): the part every `deserialize_any` shares.
enum Start<'a> {
    Null,
    Bool(bool),
    Num(Num),
    Str(Cow<'a, str>),
    /// An array, its `[` read (and entered).
    Array,
    /// An object, its `{` read (and entered).
    Object,
}

impl<'a> Reader<'a> {
    /// serde_json's `deserialize_any` up to the visitor: the value's start.
    fn start(&mut self) -> Result<Start<'a>, Fault> {
        let peek = match self.ws() {
            Some(b) => b,
            None => return Err(self.peek_err(Code::EofWhileParsingValue)),
        };
        Ok(match peek {
            b'n' => {
                self.eat();
                self.ident(b"ull")?;
                Start::Null
            }
            b't' => {
                self.eat();
                self.ident(b"rue")?;
                Start::Bool(true)
            }
            b'f' => {
                self.eat();
                self.ident(b"alse")?;
                Start::Bool(false)
            }
            b'-' => {
                let start = self.index;
                self.eat();
                Start::Num(self.number(false, start)?)
            }
            b'0'..=b'9' => Start::Num(self.number(true, self.index)?),
            b'"' => {
                self.eat();
                Start::Str(self.str_strict()?)
            }
            b'[' => {
                self.enter()?;
                Start::Array
            }
            b'{' => {
                self.enter()?;
                Start::Object
            }
            _ => return Err(self.peek_err(Code::ExpectedSomeValue)),
        })
    }

    /// The elements of an array entered by [`Reader::start`], skipped, and its end.
    fn skip_elements(&mut self) -> Result<(), Fault> {
        let mut first = true;
        while self.next_element(&mut first)? {
            self.skip_value()?;
        }
        self.seq_end()
    }

    /// The members of an object entered by [`Reader::start`], keys read, values skipped,
    /// and its end.
    fn skip_members(&mut self) -> Result<(), Fault> {
        let mut first = true;
        while self.next_key(&mut first)? {
            self.key()?;
            self.colon()?;
            self.skip_value()?;
        }
        self.leave();
        self.end_map()
    }

    /// Any value as a [`Loose`] (its `Deserialize`).
    pub(crate) fn loose(&mut self) -> Result<Loose<'a>, Fault> {
        // (the usual cases first: an index, a string)
        match self.ws() {
            Some(b'0'..=b'9') => {
                return Ok(match self.number(true, self.index)? {
                    Num::U64(n) => Loose::Unsigned(n),
                    Num::I64(n) => Loose::Signed(n),
                    Num::F64(f) => Loose::Float(f),
                })
            }
            Some(b'"') => {
                self.eat();
                return self.str_strict().map(Loose::Str);
            }
            _ => {}
        }
        Ok(match self.start()? {
            Start::Null => Loose::Null,
            Start::Bool(b) => Loose::Bool(b),
            Start::Num(Num::U64(n)) => Loose::Unsigned(n),
            Start::Num(Num::I64(n)) => match u64::try_from(n) {
                Ok(u) => Loose::Unsigned(u),
                Err(_) => Loose::Signed(n),
            },
            Start::Num(Num::F64(f)) => Loose::Float(f),
            Start::Str(s) => Loose::Str(s),
            Start::Array => {
                self.skip_elements()?;
                Loose::Array
            }
            Start::Object => {
                self.skip_members()?;
                Loose::Object
            }
        })
    }

    /// An optional [`Loose`]: `null` is `None`.
    pub(crate) fn opt_loose(&mut self) -> Result<Option<Loose<'a>>, Fault> {
        if self.null()? {
            return Ok(None);
        }
        self.loose().map(Some)
    }

    /// An optional string (serde's `Option<Text>`).
    pub(crate) fn opt_text(&mut self) -> Result<Option<Cow<'a, str>>, Fault> {
        if self.null()? {
            return Ok(None);
        }
        self.text().map(Some)
    }

    /// An optional [`JsonText`].
    pub(crate) fn opt_json_text(&mut self) -> Result<Option<JsonText>, Fault> {
        if self.null()? {
            return Ok(None);
        }
        self.json_text().map(Some)
    }

    /// An optional [`FinishReason`].
    pub(crate) fn opt_finish_reason(&mut self) -> Result<Option<FinishReason<'a>>, Fault> {
        if self.null()? {
            return Ok(None);
        }
        self.finish_reason().map(Some)
    }

    /// A needed index (serde's `lenient::opt_index`): a number, or one written as a string;
    /// anything else is an error (at the field).
    pub(crate) fn opt_index(&mut self) -> Result<Option<u32>, Fault> {
        if self.null()? {
            return Ok(None);
        }
        self.loose()?.index().map_err(Fault::data)
    }

    /// Any value as a [`FinishReason`] (its `Deserialize`).
    pub(crate) fn finish_reason(&mut self) -> Result<FinishReason<'a>, Fault> {
        Ok(match self.start()? {
            Start::Str(s) => FinishReason::Word(s),
            Start::Null | Start::Bool(_) | Start::Num(_) => FinishReason::Unreadable,
            Start::Array => {
                self.skip_elements()?;
                FinishReason::Unreadable
            }
            Start::Object => {
                let (mut unified, mut raw) = (None, None);
                let mut first = true;
                while self.next_key(&mut first)? {
                    let key = self.key()?;
                    self.colon()?;
                    match &*key {
                        b"unified" => unified = self.opt_loose()?,
                        b"raw" => raw = self.opt_loose()?,
                        _ => self.skip_value()?,
                    }
                }
                self.leave();
                self.end_map()?;
                FinishReason::Pair {
                    unified: unified.and_then(Loose::into_text),
                    raw: raw.and_then(Loose::into_text),
                }
            }
        })
    }

    /// Any value as a [`JsonText`] (its `Deserialize`).
    pub(crate) fn json_text(&mut self) -> Result<JsonText, Fault> {
        if self.ws() == Some(b'"') {
            // (the usual case: argument text)
            self.eat();
            return Ok(JsonText {
                text: self.str_strict()?.into_owned(),
                was_string: true,
            });
        }
        let mut text = String::new();
        let was_string = match self.start()? {
            Start::Str(s) => {
                text = s.into_owned();
                true
            }
            Start::Num(Num::U64(n)) => {
                text = n.to_string();
                false
            }
            Start::Num(Num::I64(n)) => {
                text = n.to_string();
                false
            }
            start => {
                self.render(start, &mut text)?;
                false
            }
        };
        Ok(JsonText { text, was_string })
    }

    /// Writes the value that starts with `start` as compact JSON (`text.rs`'s `Compact`).
    fn render(&mut self, start: Start<'a>, out: &mut String) -> Result<(), Fault> {
        match start {
            Start::Null => out.push_str("null"),
            Start::Bool(b) => out.push_str(if b { "true" } else { "false" }),
            Start::Num(Num::U64(n)) => {
                let _ = write!(out, "{n}");
            }
            Start::Num(Num::I64(n)) => {
                let _ = write!(out, "{n}");
            }
            Start::Num(Num::F64(f)) => match serde_json::Number::from_f64(f) {
                Some(n) => out.push_str(&n.to_string()),
                None => out.push_str("null"),
            },
            Start::Str(s) => push_json_string(out, &s),
            Start::Array => {
                out.push('[');
                let mut first = true;
                let mut any = false;
                while self.next_element(&mut first)? {
                    if any {
                        out.push(',');
                    }
                    any = true;
                    let start = self.start()?;
                    self.render(start, out)?;
                }
                self.seq_end()?;
                out.push(']');
            }
            Start::Object => {
                out.push('{');
                let mut first = true;
                let mut any = false;
                while self.next_key(&mut first)? {
                    if any {
                        out.push(',');
                    }
                    any = true;
                    let key = self.key()?;
                    // (a key read is UTF-8)
                    push_json_string(out, &String::from_utf8_lossy(&key));
                    out.push(':');
                    self.colon()?;
                    let start = self.start()?;
                    self.render(start, out)?;
                }
                self.leave();
                self.end_map()?;
                out.push('}');
            }
        }
        Ok(())
    }

    /// Any value, read and dropped as a `serde_json::Value` would be.
    pub(crate) fn walk(&mut self) -> Result<(), Fault> {
        self.walk_from(None)
    }

    /// Like [`Reader::walk`], for a value whose start is already read.
    fn walk_from(&mut self, start: Option<Start<'a>>) -> Result<(), Fault> {
        let start = match start {
            Some(s) => s,
            None => self.start()?,
        };
        match start {
            Start::Array => {
                let mut first = true;
                while self.next_element(&mut first)? {
                    self.walk()?;
                }
                self.seq_end()
            }
            Start::Object => {
                let mut first = true;
                while self.next_key(&mut first)? {
                    self.key()?;
                    self.colon()?;
                    self.walk()?;
                }
                self.leave();
                self.end_map()
            }
            _ => Ok(()),
        }
    }

    /// Any value, read as a `serde_json::Value` would be, and the string at `path` in it
    /// (`Value::pointer` of those keys, then `as_str`): `None` when there is none. Of
    /// duplicate keys the last counts, as in a `serde_json::Map`.
    pub(crate) fn string_at(&mut self, path: &[&str]) -> Result<Option<Cow<'a, str>>, Fault> {
        let start = self.start()?;
        let Some((name, rest)) = path.split_first() else {
            return Ok(match start {
                Start::Str(s) => Some(s),
                other => {
                    self.walk_from(Some(other))?;
                    None
                }
            });
        };
        let Start::Object = start else {
            self.walk_from(Some(start))?;
            return Ok(None);
        };
        let mut found = None;
        let mut first = true;
        while self.next_key(&mut first)? {
            let key = self.key()?;
            self.colon()?;
            if *key == *name.as_bytes() {
                found = self.string_at(rest)?;
            } else {
                self.walk()?;
            }
        }
        self.leave();
        self.end_map()?;
        Ok(found)
    }
}
