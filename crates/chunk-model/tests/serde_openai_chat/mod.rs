//! The OpenAI chat decoder as it was before the reader (`src/decode/reader/`): serde_json
//! into borrowed derived structs through `typed::parse`, errors located by
//! `serde_path_to_error`. Kept verbatim (imports aside) as the oracle of
//! `openai_chat_differential.rs`: the decoder must say exactly what this says, for every
//! input.

use chunk_model::chunk::{CallFragment, CallRef, ChunkEvent};
use chunk_model::decode::gemini::SIGNATURE_MODEL;
use chunk_model::decode::lenient::{opt_index, FinishReason, Loose, SoftIndex};
use chunk_model::decode::openai_chat::{finish_of, Route, EXTRA_CONTENT};
use chunk_model::decode::text::{non_blank_text, provider_message, JsonText, Text};
use chunk_model::decode::typed::parse;
use chunk_model::error::DecodeError;
use chunk_model::provider::Provider;
use serde::Deserialize;
use serde_json::{json, Map, Value};

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
