//! Typed parsing of one chunk with precise errors: the fast path is a single serde pass
//! into borrowed structs; only when it fails is the chunk parsed again to say *where*
//! (the JSON path of the offending field), so diagnostics cost nothing on good input.
//!
//! A chunk that is UTF-8 (all but broken ones) is checked as such once, in one pass, and
//! parsed as text: serde_json then skips checking each string it reads again, the costliest
//! part of its work on short strings, and says exactly what it says over the bytes.

use crate::depth::{json_deeper_than, MAX_JSON_DEPTH};
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;

/// Parses `chunk` into `T`. Not JSON → [`DecodeError::NotJson`]; valid JSON with a field of
/// the wrong type or shape → [`DecodeError::BadField`] naming its path (`$` for the top).
pub fn parse<'a, T: Deserialize<'a>>(
    provider: Provider,
    chunk: &'a [u8],
) -> Result<T, DecodeError> {
    require_object(provider, chunk)?;
    from_chunk::<T>(chunk).map_err(|e| diagnose::<T>(provider, chunk, &e))
}

/// serde_json over `chunk`: from its text when it is UTF-8 (serde_json's `StrRead` is its
/// `SliceRead` without the check of each string, which the one check here makes
/// redundant: the same values and errors), else from its bytes.
fn from_chunk<'a, T: Deserialize<'a>>(chunk: &'a [u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(chunk) {
        Ok(text) => serde_json::from_str::<T>(text),
        Err(_) => serde_json::from_slice::<T>(chunk),
    }
}

/// Every chunk is a JSON object nested at most [`MAX_JSON_DEPTH`] levels deep. Deeper JSON
/// is [`DecodeError::TooDeep`] wherever the deep part is (even in a field no decoder reads).
/// serde would read a struct from an array too (by position), so anything but an object is
/// refused up front: `BadField` at `$` naming what it is, if it is JSON, else `NotJson`.
pub fn require_object(provider: Provider, chunk: &[u8]) -> Result<(), DecodeError> {
    if json_deeper_than(chunk, MAX_JSON_DEPTH) {
        return Err(DecodeError::too_deep(provider, chunk));
    }
    if chunk.trim_ascii_start().first() == Some(&b'{') {
        return Ok(());
    }
    Err(not_an_object(provider, chunk))
}

/// The error [`require_object`] gives for a chunk that does not start with `{`.
pub fn not_an_object(provider: Provider, chunk: &[u8]) -> DecodeError {
    if json_deeper_than(chunk, MAX_JSON_DEPTH) {
        return DecodeError::too_deep(provider, chunk);
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(chunk) {
        Ok(_) => DecodeError::bad_field(
            provider,
            "$",
            format!("expected a JSON object, found {}", json_kind(chunk)),
            chunk,
        ),
        Err(e) => DecodeError::not_json(provider, &e, chunk),
    }
}

/// What the (valid) JSON text `json` is, by its first byte: `an array`, `a string`, ...
pub fn json_kind(json: &[u8]) -> &'static str {
    match json.trim_ascii_start().first() {
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// Like [`parse`], but a chunk whose `type` is not one `handled` accepts is `Ok(None)` even
/// when its other fields do not fit `T`: unknown event types are ignored, never errors.
pub fn parse_typed_event<'a, T: Deserialize<'a>>(
    provider: Provider,
    chunk: &'a [u8],
    handled: fn(&str) -> bool,
) -> Result<Option<T>, DecodeError> {
    require_object(provider, chunk)?;
    match from_chunk::<T>(chunk) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_data() => {
            #[derive(Deserialize)]
            struct TypeOnly {
                #[serde(rename = "type")]
                ty: Option<serde_json::Value>,
            }
            match serde_json::from_slice::<TypeOnly>(chunk) {
                Ok(TypeOnly {
                    ty: Some(serde_json::Value::String(ty)),
                }) if !handled(&ty) => Ok(None),
                _ => Err(diagnose::<T>(provider, chunk, &e)),
            }
        }
        Err(e) => Err(DecodeError::not_json(provider, &e, chunk)),
    }
}

fn diagnose<'a, T: Deserialize<'a>>(
    provider: Provider,
    chunk: &'a [u8],
    fast: &serde_json::Error,
) -> DecodeError {
    if !fast.is_data() {
        return DecodeError::not_json(provider, fast, chunk);
    }
    let mut de = serde_json::Deserializer::from_slice(chunk);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) => {
            let path = e.path().to_string();
            let field = if path == "." { "$".to_string() } else { path };
            DecodeError::bad_field(provider, field, without_position(e.inner()), chunk)
        }
        Ok(_) => DecodeError::bad_field(provider, "$", without_position(fast), chunk),
    }
}

/// serde_json's message without its ` at line L column C` suffix.
fn without_position(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&suffix) {
        Some(s) => s.to_string(),
        None => full,
    }
}
