//! The reader against serde_json itself, read by read: for many small inputs (well-formed or
//! not), each read must accept what serde_json accepts, give the same value, and otherwise
//! fail with serde_json's message at the same line and column. (The decoder built on the
//! reader is compared whole with the serde decoder it replaced in
//! `tests/openai_chat_differential.rs`.)

use super::*;
use crate::decode::lenient::{FinishReason, Loose};
use crate::decode::text::{JsonText, Text};
use serde::de::IgnoredAny;
use serde_json::Value;

/// serde_json's error as the reader words it: `<code> at line L column C` for syntax errors,
/// the bare message for data errors.
fn serde_words(e: &serde_json::Error) -> String {
    let full = e.to_string();
    if e.is_data() {
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        return full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    }
    full
}

fn reader_words(fault: &Fault, input: &[u8]) -> String {
    match fault {
        Fault::Syntax { code, at } => {
            let (line, column) = fault::position_of_index(input, *at);
            format!("{code} at line {line} column {column}")
        }
        Fault::Data(_) => match fault.clone().into_error(crate::Provider::Gemini, input) {
            crate::DecodeError::BadField { problem, .. } => problem,
            other => format!("{other}"),
        },
        Fault::TooDeep => "too deep".to_string(),
    }
}

/// Reads all of `input` with `read` (then nothing but whitespace), as `from_slice` does.
fn whole<'a, T>(
    input: &'a [u8],
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, Fault>,
) -> Result<T, Fault> {
    let mut r = Reader::new(input);
    let v = read(&mut r)?;
    r.end()?;
    Ok(v)
}

fn same<T: PartialEq + std::fmt::Debug>(
    input: &[u8],
    what: &str,
    ours: Result<T, Fault>,
    theirs: Result<T, serde_json::Error>,
) {
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{what} {:?}", String::from_utf8_lossy(input)),
        (Err(f), Err(e)) => {
            // Where serde_json points into a string that is not UTF-8, the decoder reports
            // the chunk as not UTF-8 instead: only the kind has to agree.
            if e.to_string().starts_with("invalid unicode code point") {
                assert!(
                    matches!(
                        f,
                        Fault::Syntax {
                            code: Code::InvalidUnicodeCodePoint,
                            ..
                        }
                    ),
                    "{what} {:?}: {f:?} vs {e}",
                    String::from_utf8_lossy(input)
                );
                return;
            }
            assert_eq!(
                reader_words(f, input),
                serde_words(e),
                "{what} {:?}",
                String::from_utf8_lossy(input)
            );
        }
        _ => panic!(
            "{what} {:?}: reader {ours:?}, serde_json {theirs:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

/// Small inputs: every piece of JSON syntax, well-formed and not.
fn inputs() -> Vec<Vec<u8>> {
    let atoms: &[&[u8]] = &[
        b"null",
        b"true",
        b"false",
        b"nul",
        b"tru",
        b"fals",
        b"nulx",
        b"0",
        b"-0",
        b"1",
        b"-1",
        b"01",
        b"1.",
        b"1.5",
        b"-1.5e3",
        b"1e",
        b"1e+",
        b"1E-2",
        b"-",
        b"-x",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"1e99999999999",
        b"0e99999999999",
        b"1e-99999999999",
        b"18446744073709551615",
        b"18446744073709551616",
        b"-9223372036854775808",
        b"-9223372036854775809",
        b"123456789012345678901.25",
        b"1.00000000000000000000001",
        b"\"\"",
        b"\"a\"",
        b"\"a\\\"b\"",
        b"\"\\u00e9\"",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud800\"",
        b"\"\\udc00\"",
        b"\"\\ud800\\u0041\"",
        b"\"\\ud800x\"",
        b"\"\\ud800\\\"",
        b"\"\\ud800\\",
        b"\"\\ud800",
        b"\"\\x\"",
        b"\"\\u12G4\"",
        b"\"\\u12\"",
        b"\"\\u12",
        b"\"a\x01\"",
        b"\"\xff\"",
        b"\"\xc3\xa9\"",
        b"\"abc",
        b"\"",
        b"[]",
        b"[1]",
        b"[1,]",
        b"[,1]",
        b"[1 2]",
        b"[1,2",
        b"[",
        b"{}",
        b"{\"a\":1}",
        b"{\"a\":1,}",
        b"{\"a\" 1}",
        b"{\"a\":}",
        b"{1:2}",
        b"{\"a\":1 \"b\":2}",
        b"{\"a\"",
        b"{\"a\":",
        b"{",
        b"{\"\\ud800\":1}",
        b"{\"\xff\":1}",
        b"[[[]]]",
        b"[{\"a\":[{}]}]",
        b"x",
        b"",
        b" ",
        b"}",
        b"]",
        b",",
    ];
    let mut out: Vec<Vec<u8>> = atoms.iter().map(|a| a.to_vec()).collect();
    for a in atoms {
        for b in atoms.iter().step_by(3) {
            out.push([&b"["[..], a, b",", b, b"]"].concat());
            out.push([&b"{\"k\":"[..], a, b",\"unified\":", b, b"}"].concat());
            out.push([&b" "[..], a, b" \n\t"].concat());
            out.push([*a, *b].concat());
        }
    }
    out
}

#[test]
fn skipping_accepts_and_refuses_what_ignored_any_does() {
    for input in inputs() {
        same(
            &input,
            "skip",
            whole(&input, Reader::skip_value),
            serde_json::from_slice::<IgnoredAny>(&input).map(|_| ()),
        );
    }
}

#[test]
fn loose_values_read_as_loose_does() {
    for input in inputs() {
        same(
            &input,
            "loose",
            whole(&input, Reader::loose),
            serde_json::from_slice::<Loose<'_>>(&input),
        );
    }
}

#[test]
fn finish_reasons_read_as_finish_reason_does() {
    for input in inputs() {
        same(
            &input,
            "finish",
            whole(&input, Reader::finish_reason),
            serde_json::from_slice::<FinishReason<'_>>(&input),
        );
    }
}

#[test]
fn json_text_reads_as_json_text_does() {
    for input in inputs() {
        same(
            &input,
            "json_text",
            whole(&input, Reader::json_text),
            serde_json::from_slice::<JsonText>(&input),
        );
    }
}

#[test]
fn walking_accepts_and_refuses_what_value_does() {
    for input in inputs() {
        same(
            &input,
            "walk",
            whole(&input, Reader::walk),
            serde_json::from_slice::<Value>(&input).map(|_| ()),
        );
    }
}

#[test]
fn string_at_is_value_pointer() {
    let mut all = inputs();
    for sig in [&b"\"s\""[..], b"1", b"null", b"{}", b"[\"s\"]"] {
        for shape in [
            &b"{\"google\":{\"thought_signature\":#}}"[..],
            b"{\"google\":{\"thought_signature\":#,\"thought_signature\":\"t\"}}",
            b"{\"google\":{\"thought_signature\":\"t\",\"thought_signature\":#}}",
            b"{\"google\":{\"thought_signature\":#},\"google\":1}",
            b"{\"google\":1,\"google\":{\"thought_signature\":#}}",
            b"{\"g\\u006fogle\":{\"thought_signature\":#}}",
            b"[{\"google\":{\"thought_signature\":#}}]",
            b"{\"google\":[{\"thought_signature\":#}]}",
        ] {
            let text = String::from_utf8_lossy(shape).replace('#', &String::from_utf8_lossy(sig));
            all.push(text.into_bytes());
        }
    }
    for input in all {
        let ours = whole(&input, |r| {
            r.string_at(&["google", "thought_signature"])
                .map(|s| s.map(|s| s.into_owned()))
        });
        let theirs = serde_json::from_slice::<Value>(&input).map(|v| {
            v.pointer("/google/thought_signature")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        same(&input, "string_at", ours, theirs);
    }
}

#[test]
fn text_reads_as_text_does() {
    for input in inputs() {
        same(
            &input,
            "text",
            whole(&input, |r| r.text().map(|s| s.into_owned())),
            serde_json::from_slice::<Text<'_>>(&input).map(|t| t.into_string()),
        );
    }
}

#[test]
fn options_read_null_as_none() {
    for input in inputs() {
        same(
            &input,
            "opt_loose",
            whole(&input, Reader::opt_loose),
            serde_json::from_slice::<Option<Loose<'_>>>(&input),
        );
    }
}
