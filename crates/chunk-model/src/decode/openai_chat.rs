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

use crate::chunk::{non_blank, CallFragment, CallRef, ChunkEvent, Finish};
use crate::decode::gemini::SIGNATURE_MODEL;
use crate::decode::lenient::{FinishReason, Loose};
use crate::decode::reader::{Fault, Fields, Reader, Segment};
use crate::decode::text::{provider_message, JsonText};
use crate::decode::typed::not_an_object;
use crate::error::DecodeError;
use crate::provider::Provider;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// Metadata key of Gemini's OpenAI-compatible `extra_content` on a tool call, kept as
/// `{"google":{"thought_signature":"…"}}` (only that field; anything else in it is ignored).
pub const EXTRA_CONTENT: &str = "extra_content";

/// The separator of a choice message id: choice `k > 0` of message `<msg>` is
/// `<msg>~choice<k>`.
pub const CHOICE_SEPARATOR: &str = "~choice";

/// The message id of choice `k` of message `msg` (`n > 1`): `msg` itself for choice 0,
/// `<msg>~choice<k>` for the others (a valid subject token whenever `msg` is one). Choice 0,
/// every chunk of a stream with one choice, borrows `msg`.
pub fn choice_message(msg: &str, k: u32) -> Cow<'_, str> {
    if k == 0 {
        Cow::Borrowed(msg)
    } else {
        Cow::Owned(format!("{msg}{CHOICE_SEPARATOR}{k}"))
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
    if chunk.trim_ascii_start().first() != Some(&b'{') {
        return Err(not_an_object(Provider::OpenaiChat, chunk));
    }
    let mut out = Vec::new();
    read_chunk(&mut Reader::new(chunk), &mut out)
        .map_err(|fault| fault.into_error(Provider::OpenaiChat, chunk))?;
    Ok(out)
}

// How a chunk is read: one walk with the reader, each struct below read as serde read the
// derived struct of that name ([`Fields`]: fields by name, or by position when written as
// an array; a field twice is `duplicate field`; a member it does not know is skipped; `null`
// is an absent field). Events go straight into `out` in the order the serde decoder made them: per
// choice its tool call fragments, its `function_call` fragment, its end; then the chunk's
// error. Two things are only known at the end, so they are settled there: a choice's index
// (its events' routes), and the chunk's `model` (on fragments with a thought signature).

/// `Chunk`: `choices`, `error`, `model`.
fn read_chunk(r: &mut Reader<'_>, out: &mut Vec<(Route, ChunkEvent)>) -> Result<(), Fault> {
    const FIELDS: [&str; 3] = ["choices", "error", "model"];
    let shape = r.struct_start("struct Chunk")?;
    let mut signed = Vec::new();
    let mut error = None;
    let mut model = None;
    let mut fields = Fields::new(shape, &FIELDS);
    while let Some(field) = fields.next(r, chunk_field)? {
        match field {
            // `choices`: a sequence of `Choice`
            0 => fields.value(r, |r| read_seq(r, out, &mut signed, read_choice))?,
            1 => error = fields.value(r, Reader::opt_json_text)?,
            _ => model = fields.value(r, Reader::opt_loose)?,
        }
    }
    r.struct_end(shape)?;
    r.end()?;
    if !signed.is_empty() {
        let model = model
            .and_then(Loose::into_text)
            .filter(|m| !m.trim().is_empty());
        if let Some(model) = model {
            for i in signed {
                if let Some((_, ChunkEvent::CallFragment(f))) = out.get_mut(i) {
                    f.metadata.insert(
                        SIGNATURE_MODEL.to_string(),
                        Value::String(model.to_string()),
                    );
                }
            }
        }
    }
    if let Some(error) = error {
        out.push((
            Route::All,
            ChunkEvent::ProviderError {
                message: provider_message(&error),
            },
        ));
    }
    Ok(())
}

/// A sequence (or `null`) whose elements `element` reads; a fault names its element's index.
#[inline(always)]
fn read_seq(
    r: &mut Reader<'_>,
    out: &mut Vec<(Route, ChunkEvent)>,
    signed: &mut Vec<usize>,
    mut element: impl FnMut(
        &mut Reader<'_>,
        &mut Vec<(Route, ChunkEvent)>,
        &mut Vec<usize>,
    ) -> Result<(), Fault>,
) -> Result<(), Fault> {
    if r.null()? {
        return Ok(());
    }
    r.seq_start()?;
    let mut first = true;
    let mut i = 0;
    while r.next_element(&mut first)? {
        element(r, out, signed).map_err(|f| f.within(Segment::Index(i)))?;
        i += 1;
    }
    r.seq_end()
}

/// `Choice`: `index`, `delta`, `finish_reason`.
#[inline(always)]
fn read_choice(
    r: &mut Reader<'_>,
    out: &mut Vec<(Route, ChunkEvent)>,
    signed: &mut Vec<usize>,
) -> Result<(), Fault> {
    const FIELDS: [&str; 3] = ["index", "delta", "finish_reason"];
    let start = out.len();
    let shape = r.struct_start("struct Choice")?;
    let mut index = None;
    let mut finish = None;
    let mut fields = Fields::new(shape, &FIELDS);
    while let Some(field) = fields.next(r, choice_field)? {
        match field {
            0 => index = fields.value(r, Reader::opt_loose)?,
            1 => fields.value(r, |r| read_delta(r, out, signed))?,
            _ => finish = fields.value(r, Reader::opt_finish_reason)?,
        }
    }
    r.struct_end(shape)?;
    if let Some((finish, reason)) = finish.and_then(|f: FinishReason<'_>| f.read(finish_of)) {
        out.push((Route::Choice(0), ChunkEvent::MessageEnd { finish, reason }));
    }
    // A choice index that is not a readable number counts as the first choice.
    let k = match index.map(|i: Loose<'_>| i.index()) {
        Some(Ok(Some(k))) => k,
        _ => 0,
    };
    if k != 0 {
        for (route, _) in out.iter_mut().skip(start) {
            *route = Route::Choice(k);
        }
    }
    Ok(())
}

/// `Delta`: `tool_calls`, `function_call` (optional itself).
#[inline(always)]
fn read_delta(
    r: &mut Reader<'_>,
    out: &mut Vec<(Route, ChunkEvent)>,
    signed: &mut Vec<usize>,
) -> Result<(), Fault> {
    const FIELDS: [&str; 2] = ["tool_calls", "function_call"];
    if r.null()? {
        return Ok(());
    }
    let shape = r.struct_start("struct Delta")?;
    let mut function_call = None;
    let mut fields = Fields::new(shape, &FIELDS);
    while let Some(field) = fields.next(r, delta_field)? {
        match field {
            // `tool_calls`: a sequence of `ToolCallDelta`
            0 => fields.value(r, |r| read_seq(r, out, signed, read_tool_call))?,
            _ => function_call = fields.value(r, read_function)?,
        }
    }
    r.struct_end(shape)?;
    if let Some(f) = function_call {
        push_fragment(out, Some(0), None, f.name, f.arguments, Map::new());
    }
    Ok(())
}

/// `ToolCallDelta`: `index`, `id`, `function`, `extra_content`; pushes its fragment.
#[inline(always)]
fn read_tool_call(
    r: &mut Reader<'_>,
    out: &mut Vec<(Route, ChunkEvent)>,
    signed: &mut Vec<usize>,
) -> Result<(), Fault> {
    const FIELDS: [&str; 4] = ["index", "id", "function", "extra_content"];
    let shape = r.struct_start("struct ToolCallDelta")?;
    let (mut index, mut id, mut function, mut signature) = (None, None, None, None);
    let mut fields = Fields::new(shape, &FIELDS);
    while let Some(field) = fields.next(r, tool_call_field)? {
        match field {
            0 => index = fields.value(r, Reader::opt_index)?,
            1 => id = fields.value(r, Reader::opt_text)?,
            2 => function = fields.value(r, read_function)?,
            _ => {
                signature = fields.value(r, |r| {
                    if r.null()? {
                        return Ok(None);
                    }
                    r.string_at(&["google", "thought_signature"])
                })?
            }
        }
    }
    r.struct_end(shape)?;
    let (name, arguments) = function.map_or((None, None), |f: Function| (f.name, f.arguments));
    let mut metadata = Map::new();
    let signature = signature.filter(|s: &Cow<'_, str>| !s.trim().is_empty());
    if let Some(signature) = &signature {
        metadata.insert(
            EXTRA_CONTENT.to_string(),
            json!({"google": {"thought_signature": signature}}),
        );
    }
    let wire_id = non_blank(id.as_deref());
    if push_fragment(out, index, wire_id, name, arguments, metadata) && signature.is_some() {
        signed.push(out.len() - 1);
    }
    Ok(())
}

/// A `FunctionDelta` read: its name (blank is absent) and argument text (empty is absent).
struct Function {
    name: Option<String>,
    arguments: Option<String>,
}

/// `FunctionDelta` (optional): `name`, `arguments`.
#[inline(always)]
fn read_function(r: &mut Reader<'_>) -> Result<Option<Function>, Fault> {
    const FIELDS: [&str; 2] = ["name", "arguments"];
    if r.null()? {
        return Ok(None);
    }
    let shape = r.struct_start("struct FunctionDelta")?;
    let (mut name, mut arguments) = (None, None);
    let mut fields = Fields::new(shape, &FIELDS);
    while let Some(field) = fields.next(r, function_field)? {
        match field {
            0 => name = fields.value(r, Reader::opt_text)?,
            _ => arguments = fields.value(r, Reader::opt_json_text)?,
        }
    }
    r.struct_end(shape)?;
    Ok(Some(Function {
        name: non_blank(name.as_deref()),
        arguments: arguments
            .map(|a: JsonText| a.text)
            .filter(|a| !a.is_empty()),
    }))
}

// Each struct's fields by key (a `match` on the bytes, the fastest way to tell them apart).

fn chunk_field(key: &[u8]) -> Option<usize> {
    match key {
        b"choices" => Some(0),
        b"error" => Some(1),
        b"model" => Some(2),
        _ => None,
    }
}

fn choice_field(key: &[u8]) -> Option<usize> {
    match key {
        b"index" => Some(0),
        b"delta" => Some(1),
        b"finish_reason" => Some(2),
        _ => None,
    }
}

fn delta_field(key: &[u8]) -> Option<usize> {
    match key {
        b"tool_calls" => Some(0),
        b"function_call" => Some(1),
        _ => None,
    }
}

fn tool_call_field(key: &[u8]) -> Option<usize> {
    match key {
        b"index" => Some(0),
        b"id" => Some(1),
        b"function" => Some(2),
        b"extra_content" => Some(3),
        _ => None,
    }
}

fn function_field(key: &[u8]) -> Option<usize> {
    match key {
        b"name" => Some(0),
        b"arguments" => Some(1),
        _ => None,
    }
}

/// Pushes a fragment of call `index` for choice 0 (the choice's route is settled when the
/// choice ends) unless it says nothing; whether it did.
fn push_fragment(
    out: &mut Vec<(Route, ChunkEvent)>,
    index: Option<u32>,
    wire_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    metadata: Map<String, Value>,
) -> bool {
    if wire_id.is_none() && name.is_none() && arguments.is_none() && metadata.is_empty() {
        // Nothing said about the call (Azure prelude placeholders, empty keep-alive deltas).
        return false;
    }
    out.push((
        Route::Choice(0),
        // (every field written out: `..CallFragment::default()` would build and drop a
        // default of the others)
        ChunkEvent::CallFragment(CallFragment {
            at: CallRef {
                index,
                wire_id,
                item_id: None,
            },
            name,
            kind: None,
            arguments,
            path_values: Vec::new(),
            metadata,
        }),
    ));
    true
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
