//! Why the [`Reader`](super::Reader) stopped, and the [`DecodeError`] that says so in the words
//! the serde path used: serde_json's message with its line and column for malformed JSON,
//! serde's message and `serde_path_to_error`'s path for a field of the wrong shape.

use crate::depth::{json_deeper_than, MAX_JSON_DEPTH};
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::de::{Error as _, Unexpected};
use std::fmt;

/// serde_json's syntax and end-of-input errors (its `ErrorCode`s that a read can raise), with
/// its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    EofWhileParsingList,
    EofWhileParsingObject,
    EofWhileParsingString,
    EofWhileParsingValue,
    ExpectedColon,
    ExpectedListCommaOrEnd,
    ExpectedObjectCommaOrEnd,
    ExpectedSomeIdent,
    ExpectedSomeValue,
    InvalidEscape,
    InvalidNumber,
    NumberOutOfRange,
    InvalidUnicodeCodePoint,
    ControlCharacterWhileParsingString,
    KeyMustBeAString,
    LoneLeadingSurrogateInHexEscape,
    TrailingComma,
    TrailingCharacters,
    UnexpectedEndOfHexEscape,
}

impl Code {
    fn is_eof(self) -> bool {
        matches!(
            self,
            Code::EofWhileParsingList
                | Code::EofWhileParsingObject
                | Code::EofWhileParsingString
                | Code::EofWhileParsingValue
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Code::EofWhileParsingList => "EOF while parsing a list",
            Code::EofWhileParsingObject => "EOF while parsing an object",
            Code::EofWhileParsingString => "EOF while parsing a string",
            Code::EofWhileParsingValue => "EOF while parsing a value",
            Code::ExpectedColon => "expected `:`",
            Code::ExpectedListCommaOrEnd => "expected `,` or `]`",
            Code::ExpectedObjectCommaOrEnd => "expected `,` or `}`",
            Code::ExpectedSomeIdent => "expected ident",
            Code::ExpectedSomeValue => "expected value",
            Code::InvalidEscape => "invalid escape",
            Code::InvalidNumber => "invalid number",
            Code::NumberOutOfRange => "number out of range",
            Code::InvalidUnicodeCodePoint => "invalid unicode code point",
            Code::ControlCharacterWhileParsingString => {
                "control character (\\u0000-\\u001F) found while parsing a string"
            }
            Code::KeyMustBeAString => "key must be a string",
            Code::LoneLeadingSurrogateInHexEscape => "lone leading surrogate in hex escape",
            Code::TrailingComma => "trailing comma",
            Code::TrailingCharacters => "trailing characters",
            Code::UnexpectedEndOfHexEscape => "unexpected end of hex escape",
        })
    }
}

/// One step of the path to a field, as `serde_path_to_error` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A member of an object (`.name`).
    Key(&'static str),
    /// An element of an array, or a struct's field written by position (`[i]`).
    Index(usize),
}

/// Why a read stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    /// Malformed JSON: serde_json's error, at the byte index its line and column are computed
    /// from.
    Syntax { code: Code, at: usize },
    /// A field of the wrong type or shape (boxed: the error path may be slow, the `Result`s of
    /// the good path stay small).
    Data(Box<DataFault>),
    /// Nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
}

/// A field of the wrong type or shape: serde's message and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DataFault {
    message: String,
    /// Innermost first (segments are added as the fault travels out).
    path: Vec<Segment>,
}

impl Fault {
    /// serde's `invalid type: <unexpected>, expected <expected>`.
    pub(crate) fn invalid_type(unexpected: Unexpected<'_>, expected: &str) -> Fault {
        Fault::data(serde_json::Error::invalid_type(unexpected, &expected).to_string())
    }

    /// serde's ``duplicate field `name` `` for the field `name`.
    pub(crate) fn duplicate_field(name: &'static str) -> Fault {
        Fault::data(serde_json::Error::duplicate_field(name).to_string())
    }

    /// A data fault with this message (serde's `Error::custom`).
    pub(crate) fn data(message: String) -> Fault {
        Fault::Data(Box::new(DataFault {
            message,
            path: Vec::new(),
        }))
    }

    /// The fault, located one step further out (`segment` then what it had).
    pub(crate) fn within(self, segment: Segment) -> Fault {
        match self {
            Fault::Data(mut d) => {
                d.path.push(segment);
                Fault::Data(d)
            }
            other => other,
        }
    }

    /// The error the serde path gave for `chunk`: [`DecodeError::TooDeep`] whenever the chunk
    /// nests deeper than [`MAX_JSON_DEPTH`] (checked first there, wherever the deep part is),
    /// else the syntax error ([`DecodeError::NotJson`]) or the field of the wrong shape
    /// ([`DecodeError::BadField`], `$` for the top).
    pub(crate) fn into_error(self, provider: Provider, chunk: &[u8]) -> DecodeError {
        if matches!(self, Fault::TooDeep) || json_deeper_than(chunk, MAX_JSON_DEPTH) {
            return DecodeError::too_deep(provider, chunk);
        }
        match self {
            Fault::Syntax { code, at } => {
                let (line, column) = position_of_index(chunk, at);
                DecodeError::not_json_message(
                    provider,
                    format!("{code} at line {line} column {column}"),
                    code.is_eof(),
                    chunk,
                )
            }
            Fault::Data(d) => {
                let field = if d.path.is_empty() {
                    "$".to_string()
                } else {
                    path_text(&d.path)
                };
                DecodeError::bad_field(provider, field, d.message, chunk)
            }
            Fault::TooDeep => DecodeError::too_deep(provider, chunk),
        }
    }
}

/// The path as `serde_path_to_error` prints it (`choices[0].delta.tool_calls[1].index`);
/// `reversed` holds the innermost segment first.
fn path_text(reversed: &[Segment]) -> String {
    let mut out = String::new();
    for segment in reversed.iter().rev() {
        match segment {
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

/// serde_json's line (1-based) and column of byte index `i` (`SliceRead::position_of_index`).
pub(super) fn position_of_index(bytes: &[u8], i: usize) -> (usize, usize) {
    let before = bytes.get(..i).unwrap_or(bytes);
    let start_of_line = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let lines = before
        .get(..start_of_line)
        .unwrap_or_default()
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    (1 + lines, i - start_of_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_columns_as_serde_json_does() {
        assert_eq!(position_of_index(b"abc", 0), (1, 0));
        assert_eq!(position_of_index(b"abc", 2), (1, 2));
        assert_eq!(position_of_index(b"a\nbc", 3), (2, 1));
        assert_eq!(position_of_index(b"a\n\nb", 4), (3, 1));
        assert_eq!(position_of_index(b"\n", 1), (2, 0));
    }

    #[test]
    fn paths_print_like_serde_path_to_error() {
        let reversed = vec![
            Segment::Key("index"),
            Segment::Index(1),
            Segment::Key("tool_calls"),
            Segment::Index(0),
            Segment::Key("choices"),
        ];
        assert_eq!(path_text(&reversed), "choices[0].tool_calls[1].index");
        assert_eq!(
            path_text(&[Segment::Key("a"), Segment::Index(2), Segment::Index(0)]),
            "[0][2].a"
        );
    }
}
