//! Decoder for OpenAI Chat Completions streaming chunks (`chat.completion.chunk`) and every
//! host that speaks the same format: Azure, Mistral, Groq, DeepSeek, xAI, OpenRouter,
//! Ollama `/v1`, LiteLLM, vLLM.
//!
//! What it reads: `choices[i].delta.tool_calls[j]` (`index`, `id`, `function.name`,
//! `function.arguments`), the legacy `delta.function_call`, `choices[i].finish_reason`, a
//! top-level `error` object (OpenRouter's mid-stream error), and Gemini's OpenAI-compatible
//! `tool_calls[j].extra_content.google.thought_signature`, kept as the call's metadata
//! [`EXTRA_CONTENT`] (`{"google":{"thought_signature":…}}`) so history can send it back, with
//! the chunk's `model` as [`SIGNATURE_MODEL`] (history sends a signature back only to the
//! model family that made it).
//! Everything else (`content`, `usage`, `obfuscation`, `logprobs`, Azure's
//! `prompt_filter_results`, OpenRouter's `provider`/`native_finish_reason`, ...) is ignored.
//!
//! Fields it does not need never fail a chunk, whatever they hold; of those it reads, a
//! choice `index` it cannot read counts as choice 0, a `finish_reason` that is not a string
//! is read as the AI SDK v6 object `{unified, raw}` or else as no reason, and a tool call
//! `index` may be a number or a number written as a string.
//!
//! A request with `n > 1` streams several alternative completions, told apart by
//! `choices[i].index`. [`decode_by_choice`] routes every event to its choice ([`Route`]); each
//! choice is assembled as its own message: choice 0 (or a choice without a readable index) is
//! the message of the subject, choice `k > 0` the message [`choice_message`]`(msg, k)` =
//! `<msg>~choice<k>` (README "Contracts"). A top-level `error` concerns every choice.
//! [`decode`] gives choice 0's events (and the stream-wide ones) only.
//!
//! The decoder passes what it sees through faithfully (indices missing, `null`, starting at
//! 1, or reused by a new id; ids restated on every fragment); matching fragments to calls is
//! the assembler's job. Blank or `null` ids and names are absent.

use crate::chunk::{CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::gemini::SIGNATURE_MODEL;
use crate::decode::lenient::{opt_index, FinishReason, Loose, SoftIndex};
use crate::decode::text::{non_blank_text, provider_message, JsonText, Text};
use crate::decode::typed::parse;
use crate::error::DecodeError;
use crate::provider::Provider;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Metadata key of Gemini's OpenAI-compatible `extra_content` on a tool call, kept as
/// `{"google":{"thought_signature":"…"}}` (only that field; anything else in it is ignored).
pub const EXTRA_CONTENT: &str = "extra_content";

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    error: Option<JsonText>,
    /// The model of the stream, kept on calls that carry a Gemini thought signature; not
    /// needed, read loosely.
    #[serde(borrow, default)]
    model: Option<Loose<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    /// Which alternative completion (`n > 1`); only used to skip the others.
    #[serde(default)]
    index: Option<SoftIndex>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<FinishReason<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default, deserialize_with = "opt_index")]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
    /// Gemini (OpenAI-compatible endpoint): `{"google":{"thought_signature":"…"}}`. Any JSON.
    #[serde(default)]
    extra_content: Option<Value>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(default)]
    arguments: Option<JsonText>,
}

/// The separator of a choice message id: choice `k > 0` of message `<msg>` is
/// `<msg>~choice<k>`.
pub const CHOICE_SEPARATOR: &str = "~choice";

/// The message id of choice `k` of message `msg` (`n > 1`): `msg` itself for choice 0,
/// `<msg>~choice<k>` for the others (a valid subject token whenever `msg` is one).
pub fn choice_message(msg: &str, k: u32) -> String {
    if k == 0 {
        msg.to_string()
    } else {
        format!("{msg}{CHOICE_SEPARATOR}{k}")
    }
}

/// Whether `msg` is the message of a choice `k > 0` (an alternative completion of another
/// message, [`choice_message`]).
pub fn is_other_choice(msg: &str) -> bool {
    msg.rsplit_once(CHOICE_SEPARATOR).is_some_and(|(base, k)| {
        !base.is_empty() && k.parse::<u32>().is_ok_and(|k| k > 0) && !k.starts_with('0')
    })
}

/// Which message an event of a chunk belongs to: one choice's, or every choice's (a
/// stream-wide end or error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Choice `k`'s message.
    Choice(u32),
    /// Every choice's message.
    All,
}

/// Decodes one chunk (already trimmed, never `[DONE]`): choice 0's events and the stream-wide
/// ones (see [`decode_by_choice`] for every choice).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    Ok(decode_by_choice(chunk)?
        .into_iter()
        .filter(|(route, _)| matches!(route, Route::Choice(0) | Route::All))
        .map(|(_, ev)| ev)
        .collect())
}

/// Decodes one chunk (already trimmed, never `[DONE]`), each event with the choice it belongs
/// to.
pub fn decode_by_choice(chunk: &[u8]) -> Result<Vec<(Route, ChunkEvent)>, DecodeError> {
    let parsed: Chunk<'_> = parse(Provider::OpenaiChat, chunk)?;
    let model = parsed
        .model
        .and_then(Loose::into_text)
        .filter(|m| !m.trim().is_empty());
    let mut all = Vec::new();
    for choice in parsed.choices.into_iter().flatten() {
        // A choice index that is not a readable number counts as the first choice.
        let k = match choice.index.as_ref().map(SoftIndex::get) {
            Some(Ok(Some(i))) => i,
            _ => 0,
        };
        let mut out = Vec::new();
        if let Some(delta) = choice.delta {
            for call in delta.tool_calls.into_iter().flatten() {
                let (name, arguments) = split_function(call.function);
                push_fragment(
                    &mut out,
                    call.index,
                    non_blank_text(call.id),
                    name,
                    arguments,
                    signature_metadata(call.extra_content.as_ref(), model.as_deref()),
                );
            }
            if delta.function_call.is_some() {
                let (name, arguments) = split_function(delta.function_call);
                push_fragment(&mut out, Some(0), None, name, arguments, Map::new());
            }
        }
        if let Some((finish, reason)) = choice.finish_reason.and_then(|r| r.read(finish_of)) {
            out.push(ChunkEvent::MessageEnd { finish, reason });
        }
        all.extend(out.into_iter().map(|ev| (Route::Choice(k), ev)));
    }
    if let Some(error) = parsed.error {
        all.push((
            Route::All,
            ChunkEvent::ProviderError {
                message: provider_message(&error),
            },
        ));
    }
    Ok(all)
}

fn split_function(f: Option<FunctionDelta<'_>>) -> (Option<String>, Option<String>) {
    match f {
        Some(f) => (
            non_blank_text(f.name),
            f.arguments.map(|a| a.text).filter(|a| !a.is_empty()),
        ),
        None => (None, None),
    }
}

/// The call metadata for a Gemini `extra_content` holding a non-blank string
/// `google.thought_signature`, with the chunk's `model` that made it (empty for anything
/// else).
fn signature_metadata(extra_content: Option<&Value>, model: Option<&str>) -> Map<String, Value> {
    let mut metadata = Map::new();
    let signature = extra_content
        .and_then(|e| e.pointer("/google/thought_signature"))
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty());
    if let Some(signature) = signature {
        metadata.insert(
            EXTRA_CONTENT.to_string(),
            json!({"google": {"thought_signature": signature}}),
        );
        if let Some(model) = model {
            metadata.insert(
                SIGNATURE_MODEL.to_string(),
                Value::String(model.to_string()),
            );
        }
    }
    metadata
}

fn push_fragment(
    out: &mut Vec<ChunkEvent>,
    index: Option<u32>,
    wire_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    metadata: Map<String, Value>,
) {
    if wire_id.is_none() && name.is_none() && arguments.is_none() && metadata.is_empty() {
        // Nothing said about the call (Azure prelude placeholders, empty keep-alive deltas).
        return;
    }
    out.push(ChunkEvent::CallFragment(CallFragment {
        at: CallRef {
            index,
            wire_id,
            item_id: None,
        },
        name,
        arguments,
        metadata,
        ..CallFragment::default()
    }));
}

/// Normalizes a `finish_reason`. `error` (OpenRouter) is [`Finish::Error`]; a reason nobody
/// documents is a normal end, its raw word kept in the event.
#[must_use]
pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "length" => Finish::Truncated,
        "content_filter" => Finish::Filtered,
        "error" => Finish::Error,
        _ => Finish::Complete,
    }
}
