//! Gemini / Vertex `streamGenerateContent`: one `GenerateContentResponse` JSON (an SSE `data:`
//! line with `alt=sse`) or a JSON array of them (the non-SSE stream is one array) → chunk
//! events.
//!
//! Only candidate 0 is read. Gemini gives calls no index across chunks, so every call event
//! has `index: None`; the consumer id is the `functionCall.id` when present (Vertex, newer
//! Gemini), otherwise the assembler makes a synthetic one.
//!
//! A part's `functionCall` is read in one of three ways:
//! - **whole call** (the Gemini API and Vertex by default): a `name` and no `willContinue` →
//!   one [`CallEnd`] with the compact JSON of `args` (`{}` when absent) and the part's
//!   `thoughtSignature` in metadata. Several calls in one chunk → several ends, in order.
//! - **streamed arguments** (Vertex `streamFunctionCallArguments`): a `functionCall` with
//!   `willContinue: true` and/or `partialArgs` → a [`CallFragment`] carrying one
//!   [`PathValue`] per `partialArgs` entry (the entry's `willContinue` becomes `continues`),
//!   the name when given and the signature. The first part states the name, later ones only
//!   pieces.
//! - **closing part** of streamed arguments: no `willContinue` and no name, typically an
//!   empty `functionCall: {}` → a [`CallEnd`] with no name and arguments only when `args` is
//!   present, so the assembler rebuilds the text from the pieces
//!   ([`crate::partial_args::build`]). A part with `partialArgs` and no `willContinue` is
//!   the last piece *and* the end: a fragment followed by an end.
//!
//! A stateless decoder cannot tell a closing part that restates the name from a whole
//! zero-argument call; it reads a named part without `willContinue` as a whole call (`{}`),
//! which is what the documented streams send (the close is an empty `functionCall`).
//!
//! `finishReason` → message end (`STOP` → complete, `MAX_TOKENS` → truncated, safety family →
//! filtered, `MALFORMED_FUNCTION_CALL` → error, anything else → complete);
//! `promptFeedback.blockReason` → filtered; a top-level `error` object → provider error;
//! usage-only chunks, text and thought parts → nothing.
//!
//! A signed call also keeps the response's `modelVersion` as its metadata
//! [`SIGNATURE_MODEL`] (`model`): history sends a signature back only to the model family that
//! made it.
//!
//! Fields toolstream does not need never fail a chunk: a `thoughtSignature` or `modelVersion`
//! that is not a string is not kept, a `promptFeedback` or `finishReason` of another shape reads as no
//! reason, and `usageMetadata`, safety ratings, citations, grounding, logprobs and the like
//! are not read at all. Needed fields accept the shapes protobuf JSON allows: `willContinue`
//! and `boolValue` as a boolean or `"true"`/`"false"`, `numberValue` as a number or a number
//! written as a string.

use serde::de::{Deserializer, IgnoredAny};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::chunk::{CallEnd, CallFragment, CallRef, ChunkEvent, Finish, PathValue};
use crate::decode::lenient::{opt_flag, opt_number, opt_object, FinishReason, Loose};
use crate::decode::text::{non_blank_text, provider_message, JsonText, Text};
use crate::decode::typed::parse;
use crate::depth::{json_deeper_than, MAX_JSON_DEPTH};
use crate::error::DecodeError;
use crate::framing::{self, Framing};
use crate::provider::Provider;

/// Metadata key under which a part's `thoughtSignature` is kept verbatim.
pub const THOUGHT_SIGNATURE: &str = "thoughtSignature";

/// Metadata key under which the model that produced a signed call is kept: the response's
/// `modelVersion` (Gemini) or the chunk's `model` (Gemini's OpenAI-compatible endpoint), on
/// calls that carry a thought signature only. History drops a signature when the caller says
/// the history is for a model of another family ([`crate::encode::model_family`]).
pub const SIGNATURE_MODEL: &str = "model";

/// One `GenerateContentResponse`; only the fields toolstream reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    #[serde(borrow, default)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(borrow, default, deserialize_with = "opt_object")]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(default)]
    error: Option<JsonText>,
    /// The model that produced the response (kept on signed calls); not needed, read loosely.
    #[serde(borrow, default)]
    model_version: Option<Loose<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(borrow, default)]
    content: Option<Content<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<FinishReason<'a>>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    parts: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow, default)]
    function_call: Option<FunctionCall<'a>>,
    /// Kept on calls when it is a string; text and thought parts carry one too.
    #[serde(borrow, default)]
    thought_signature: Option<Loose<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(default)]
    args: Option<JsonText>,
    #[serde(borrow, default)]
    partial_args: Option<Vec<PartialArg<'a>>>,
    #[serde(default, deserialize_with = "opt_flag")]
    will_continue: Option<bool>,
}

/// One Vertex `PartialArg`: a JSONPath and one of four typed values.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialArg<'a> {
    #[serde(borrow, default)]
    json_path: Option<Text<'a>>,
    #[serde(borrow, default)]
    string_value: Option<Text<'a>>,
    #[serde(default, deserialize_with = "opt_number")]
    number_value: Option<Number>,
    #[serde(default, deserialize_with = "opt_flag")]
    bool_value: Option<bool>,
    /// `nullValue` is present (its JSON is `"NULL_VALUE"` or `null`).
    #[serde(default, deserialize_with = "present")]
    null_value: bool,
    #[serde(default, deserialize_with = "opt_flag")]
    will_continue: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(borrow, default)]
    block_reason: Option<FinishReason<'a>>,
}

/// `true` whenever the field is present, whatever its value (`null` included).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// Decodes one Gemini chunk (already trimmed, never `[DONE]`): a response object or a JSON
/// array of them.
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    let mut out = Vec::new();
    if chunk.first() != Some(&b'[') {
        let response: Response<'_> = parse(Provider::Gemini, chunk)?;
        decode_response(response, "", chunk, &mut out)?;
        return Ok(out);
    }
    if json_deeper_than(chunk, MAX_JSON_DEPTH) {
        return Err(DecodeError::too_deep(Provider::Gemini, chunk));
    }
    // A whole non-SSE stream: split the array into its elements (exact bytes), decode each.
    let elements = match framing::split_as(Framing::JsonArray, chunk) {
        Ok(elements) => elements,
        Err(framing_error) => {
            return Err(match serde_json::from_slice::<IgnoredAny>(chunk) {
                Err(e) => DecodeError::not_json(Provider::Gemini, &e, chunk),
                Ok(_) => {
                    DecodeError::bad_field(Provider::Gemini, "$", framing_error.to_string(), chunk)
                }
            })
        }
    };
    for (i, element) in elements.iter().enumerate() {
        let prefix = format!("[{i}]");
        let response: Response<'_> =
            parse(Provider::Gemini, &element.data).map_err(|e| under(&prefix, e, chunk))?;
        decode_response(response, &format!("{prefix}."), chunk, &mut out)?;
    }
    Ok(out)
}

/// Re-roots an element's error under its array position, with the whole chunk's excerpt.
fn under(prefix: &str, error: DecodeError, chunk: &[u8]) -> DecodeError {
    match error {
        DecodeError::BadField {
            provider,
            field,
            problem,
            ..
        } => {
            let field = match field.as_str() {
                "$" => prefix.to_string(),
                _ => format!("{prefix}.{field}"),
            };
            DecodeError::bad_field(provider, field, problem, chunk)
        }
        other => other,
    }
}

/// Appends the events of one response; `prefix` is its JSON path prefix for errors.
fn decode_response(
    response: Response<'_>,
    prefix: &str,
    chunk: &[u8],
    out: &mut Vec<ChunkEvent>,
) -> Result<(), DecodeError> {
    let model = response
        .model_version
        .and_then(Loose::into_text)
        .filter(|m| !m.trim().is_empty());
    if let Some(candidate) = response.candidates.and_then(|c| c.into_iter().next()) {
        let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
        for (i, part) in parts.into_iter().enumerate() {
            let path = format!("{prefix}candidates[0].content.parts[{i}].functionCall");
            decode_part(part, model.as_deref(), &path, chunk, out)?;
        }
        if let Some((finish, reason)) = candidate.finish_reason.and_then(|r| r.read(finish_of)) {
            out.push(ChunkEvent::MessageEnd { finish, reason });
        }
    }
    if let Some((_, reason)) = response
        .prompt_feedback
        .and_then(|f| f.block_reason)
        .and_then(|r| r.read(|_| Finish::Filtered))
    {
        out.push(ChunkEvent::MessageEnd {
            finish: Finish::Filtered,
            reason,
        });
    }
    if let Some(error) = response.error {
        out.push(ChunkEvent::ProviderError {
            message: provider_message(&error),
        });
    }
    Ok(())
}

/// Appends the events of one part (nothing for text/thought parts).
fn decode_part(
    part: Part<'_>,
    model: Option<&str>,
    path: &str,
    chunk: &[u8],
    out: &mut Vec<ChunkEvent>,
) -> Result<(), DecodeError> {
    let Some(call) = part.function_call else {
        return Ok(());
    };
    let mut metadata = Map::new();
    if let Some(signature) = part.thought_signature.and_then(Loose::into_text) {
        metadata.insert(
            THOUGHT_SIGNATURE.to_string(),
            Value::String(signature.into_owned()),
        );
        if let Some(model) = model {
            metadata.insert(
                SIGNATURE_MODEL.to_string(),
                Value::String(model.to_string()),
            );
        }
    }
    let arguments = match call.args {
        Some(args) if args.was_string || !args.text.starts_with('{') => {
            return Err(DecodeError::bad_field(
                Provider::Gemini,
                format!("{path}.args"),
                "expected a JSON object",
                chunk,
            ))
        }
        Some(args) => Some(args.text),
        None => None,
    };
    let at = CallRef {
        wire_id: non_blank_text(call.id),
        ..CallRef::default()
    };
    let name = non_blank_text(call.name);
    let will_continue = call.will_continue == Some(true);
    let pieces = path_values(call.partial_args.unwrap_or_default(), path, chunk)?;
    let streamed = will_continue || !pieces.is_empty();
    if streamed {
        out.push(ChunkEvent::CallFragment(CallFragment {
            at: at.clone(),
            name: name.clone(),
            arguments: None,
            path_values: pieces,
            metadata: std::mem::take(&mut metadata),
            ..CallFragment::default()
        }));
        if will_continue {
            return Ok(());
        }
    }
    // An end: a whole call (named, not streamed) gets `{}` for absent args; the closing
    // part of streamed arguments only carries args it actually has.
    let whole = !streamed && name.is_some();
    out.push(ChunkEvent::CallEnd(CallEnd {
        at,
        name: if streamed { None } else { name },
        arguments: match arguments {
            Some(text) => Some(text),
            None if whole => Some("{}".to_string()),
            None => None,
        },
        metadata,
        ..CallEnd::default()
    }));
    Ok(())
}

/// One [`PathValue`] per `partialArgs` entry; entries without a value are skipped.
fn path_values(
    entries: Vec<PartialArg<'_>>,
    path: &str,
    chunk: &[u8],
) -> Result<Vec<PathValue>, DecodeError> {
    let mut out = Vec::with_capacity(entries.len());
    for (k, entry) in entries.into_iter().enumerate() {
        let Some(json_path) = non_blank_text(entry.json_path) else {
            return Err(DecodeError::bad_field(
                Provider::Gemini,
                format!("{path}.partialArgs[{k}].jsonPath"),
                "missing: every partial argument names its JSONPath",
                chunk,
            ));
        };
        let value = if let Some(s) = entry.string_value {
            Value::String(s.into_string())
        } else if let Some(n) = entry.number_value {
            Value::Number(n)
        } else if let Some(b) = entry.bool_value {
            Value::Bool(b)
        } else if entry.null_value {
            Value::Null
        } else {
            continue;
        };
        out.push(PathValue {
            path: json_path,
            value,
            continues: entry.will_continue == Some(true),
        });
    }
    Ok(out)
}

/// Normalizes `finishReason`.
fn finish_of(reason: &str) -> Finish {
    match reason {
        "MAX_TOKENS" => Finish::Truncated,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            Finish::Filtered
        }
        "MALFORMED_FUNCTION_CALL" => Finish::Error,
        // STOP, FINISH_REASON_UNSPECIFIED, OTHER, LANGUAGE, reasons added later.
        _ => Finish::Complete,
    }
}
