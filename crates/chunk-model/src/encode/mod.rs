//! Encoders: stored calls and results rendered back into each provider's request (history)
//! format, and the inverse parsers used to prove the round trip.
//!
//! ## Layout
//! - [`HistoryFormat`] (this file) — the target request formats and their names.
//! - [`ids`] — per-target id rules and the deterministic, collision-free [`ids::IdMap`].
//! - [`parse`] — [`HistoryParseError`] and the builder the inverse parsers share.
//! - one file per format: [`openai_chat`] (also Mistral), [`openai_responses`], [`anthropic`],
//!   [`gemini`], [`bedrock`], [`ollama`]. Each has `calls`, `results`, `text` and `parse`.
//!
//! The building blocks here are policy-free: [`EncCall`]s carry already-mapped ids and
//! [`EncResult`]s already-truncated output. [`crate::history::render`] applies the policy
//! (placeholders, orphans, truncation, windows, strict text) and calls these.
//!
//! Provider metadata keys read and written: [`META_THOUGHT_SIGNATURE`] (Gemini, rendered back on
//! the same part), [`META_EXTRA_CONTENT`] (Gemini's OpenAI-compatible endpoint:
//! `{"google":{"thought_signature":…}}`, rendered back on the same chat `tool_calls` entry),
//! [`META_ITEM_ID`] (Responses item id), [`META_SYNTHETIC_ID`] (the id was invented by
//! toolstream, so it is never sent to a provider whose ids are optional).
//!
//! Thought signatures ([`thought_signature`], [`renders_signature`]) are rendered only where a
//! Gemini model reads them: the `gemini` target (either kind, on the `functionCall` part) and
//! the `openai-chat` target for a signature that came from Gemini's OpenAI-compatible endpoint
//! (as `extra_content`, where it came from). Every other target drops them, and the history
//! says so ([`crate::history::RenderedHistory::dropped_signatures`]).

pub mod anthropic;
pub mod bedrock;
pub mod gemini;
pub mod ids;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
pub mod parse;

pub use ids::{IdMap, IdRule};
pub use parse::HistoryParseError;

use crate::call::CallKind;
use crate::provider::Provider;
use crate::snapshot::MessageSnapshot;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// Metadata key of Gemini's `thoughtSignature` (a string), kept on the call.
pub const META_THOUGHT_SIGNATURE: &str = "thoughtSignature";
/// Metadata key of Gemini's OpenAI-compatible `extra_content` (`{"google":{"thought_signature":
/// "…"}}`), kept on the call by the openai-chat decoder.
pub const META_EXTRA_CONTENT: &str = "extra_content";
/// Metadata key of the Responses API output item id (`fc_…`), kept on the call.
pub const META_ITEM_ID: &str = "item_id";
/// Metadata key set to `true` when the call id was invented by toolstream.
pub const META_SYNTHETIC_ID: &str = "synthetic_id";
/// Metadata key of the model that produced a signed call (Gemini `modelVersion`, the
/// OpenAI-compatible chunk's `model`), kept beside its thought signature.
pub const META_SIGNATURE_MODEL: &str = crate::decode::gemini::SIGNATURE_MODEL;

/// The family of a model name, for deciding whether a thought signature may go back to it:
/// the name without a `models/` (or `publishers/google/models/`) path prefix, lowercase, up to
/// and including its first dash-separated part that starts with a digit (its version), so
/// `gemini-3-pro-preview` and `models/gemini-3-flash` are `gemini-3`, `gemini-2.5-flash-lite`
/// is `gemini-2.5`, and a name without a version part is its own family. Signatures are made
/// by one model generation for itself: a signature of another family is not sent back.
pub fn model_family(model: &str) -> String {
    let name = model
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_lowercase();
    let mut family: Vec<&str> = Vec::new();
    for part in name.split('-') {
        family.push(part);
        if part.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
    }
    family.join("-")
}

/// A provider request format that history can be rendered into.
///
/// Parsed (from a string or JSON) by its canonical name, then by the provider alias table
/// ([`crate::wire::aliases`]): a vendor name means the history format of its stream format
/// (`groq` → `openai-chat`, `vertex` → `gemini`), except `mistral`, a format of its own here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryFormat {
    /// Chat Completions `messages` (OpenAI, Azure, Groq, DeepSeek, xAI, OpenRouter, vLLM, ...).
    OpenaiChat,
    /// Responses API `input` items (`function_call` / `function_call_output`).
    OpenaiResponses,
    /// Anthropic Messages (`tool_use` / `tool_result` blocks).
    Anthropic,
    /// Gemini / Vertex `contents` (`functionCall` / `functionResponse` parts).
    Gemini,
    /// Mistral chat: OpenAI-like, ids exactly 9 alphanumerics.
    Mistral,
    /// Bedrock Converse `messages` (`toolUse` / `toolResult` blocks).
    Bedrock,
    /// Ollama native `/api/chat` (`tool_calls` with object arguments, `tool_name` on results).
    Ollama,
}

impl HistoryFormat {
    /// Every format, in a stable order.
    pub const ALL: [HistoryFormat; 7] = [
        HistoryFormat::OpenaiChat,
        HistoryFormat::OpenaiResponses,
        HistoryFormat::Anthropic,
        HistoryFormat::Gemini,
        HistoryFormat::Mistral,
        HistoryFormat::Bedrock,
        HistoryFormat::Ollama,
    ];

    /// The canonical name (`openai-chat`, `mistral`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryFormat::OpenaiChat => "openai-chat",
            HistoryFormat::OpenaiResponses => "openai-responses",
            HistoryFormat::Anthropic => "anthropic",
            HistoryFormat::Gemini => "gemini",
            HistoryFormat::Mistral => "mistral",
            HistoryFormat::Bedrock => "bedrock",
            HistoryFormat::Ollama => "ollama",
        }
    }

    /// The stream format whose messages this history format answers (set on parsed snapshots).
    pub fn provider(self) -> Provider {
        match self {
            HistoryFormat::OpenaiChat | HistoryFormat::Mistral => Provider::OpenaiChat,
            HistoryFormat::OpenaiResponses => Provider::OpenaiResponses,
            HistoryFormat::Anthropic => Provider::Anthropic,
            HistoryFormat::Gemini => Provider::Gemini,
            HistoryFormat::Bedrock => Provider::Bedrock,
            HistoryFormat::Ollama => Provider::Ollama,
        }
    }

    /// The history format that answers messages streamed in `provider`'s format (none for
    /// the AI SDK, whose requests are built by the SDK itself).
    pub fn for_provider(provider: Provider) -> Option<HistoryFormat> {
        match provider {
            Provider::OpenaiChat => Some(HistoryFormat::OpenaiChat),
            Provider::OpenaiResponses => Some(HistoryFormat::OpenaiResponses),
            Provider::Anthropic => Some(HistoryFormat::Anthropic),
            Provider::Gemini => Some(HistoryFormat::Gemini),
            Provider::Bedrock => Some(HistoryFormat::Bedrock),
            Provider::Ollama => Some(HistoryFormat::Ollama),
            Provider::AiSdk => None,
        }
    }

    /// Whether consecutive messages of one role must be merged into one (the provider wants
    /// strictly alternating roles, or all results of a turn in one message).
    pub fn merges_roles(self) -> bool {
        matches!(
            self,
            HistoryFormat::Anthropic | HistoryFormat::Gemini | HistoryFormat::Bedrock
        )
    }
}

impl fmt::Display for HistoryFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a history format nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown history format {0:?} (expected one of: openai-chat, openai-responses, anthropic, gemini, mistral, bedrock, ollama)")]
pub struct UnknownHistoryFormat(pub String);

impl FromStr for HistoryFormat {
    type Err = UnknownHistoryFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim();
        HistoryFormat::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(name))
            .or_else(|| crate::wire::aliases::lookup(name).and_then(HistoryFormat::for_provider))
            .ok_or_else(|| UnknownHistoryFormat(s.to_string()))
    }
}

impl<'de> Deserialize<'de> for HistoryFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The Gemini thought signature of a call, from either metadata key: the native
/// `thoughtSignature`, else the OpenAI-compatible `extra_content.google.thought_signature`.
pub fn thought_signature(metadata: &Map<String, Value>) -> Option<&Value> {
    metadata
        .get(META_THOUGHT_SIGNATURE)
        .or_else(|| {
            metadata
                .get(META_EXTRA_CONTENT)
                .and_then(|e| e.pointer("/google/thought_signature"))
        })
        .filter(|s| s.is_string())
}

/// Whether `format` renders the thought signature of a call with `metadata`: `None` when the
/// call has none, `Some(false)` when the target drops it (not a Gemini model's format).
pub fn renders_signature(format: HistoryFormat, metadata: &Map<String, Value>) -> Option<bool> {
    thought_signature(metadata)?;
    Some(match format {
        HistoryFormat::Gemini => true,
        HistoryFormat::OpenaiChat => compat_extra_content(metadata).is_some(),
        _ => false,
    })
}

/// The `extra_content` to send back on an openai-chat tool call: a signature object from
/// Gemini's OpenAI-compatible endpoint, never a native signature (that target may be OpenAI).
pub(crate) fn compat_extra_content(metadata: &Map<String, Value>) -> Option<&Value> {
    metadata.get(META_EXTRA_CONTENT).filter(|e| {
        e.pointer("/google/thought_signature")
            .is_some_and(Value::is_string)
    })
}

/// Who speaks a plain text message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user (also carries orphaned results and strict-mode results).
    User,
    /// The model (also carries notes about cut calls and strict-mode calls).
    Assistant,
}

/// A call ready to encode: id already mapped to the target's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct EncCall<'a> {
    /// The id to send (mapped).
    pub id: String,
    /// Function name.
    pub name: &'a str,
    /// Parsed arguments (a completed call's).
    pub arguments: &'a Value,
    /// The call's provider metadata (signatures, item ids, synthetic flag).
    pub metadata: &'a Map<String, Value>,
    /// The kind of call (the Responses target renders a `custom` call as the
    /// `custom_tool_call` item it came as; other formats know only function calls).
    pub kind: CallKind,
    /// Responses only: send the stored item id (`fc_…`) as the item `id`. Off in the history
    /// policy by default, see [`crate::history::HistoryOptions::send_item_ids`].
    pub send_item_id: bool,
}

impl EncCall<'_> {
    /// Whether the id was invented by toolstream (never sent where ids are optional).
    pub fn synthetic(&self) -> bool {
        self.metadata.get(META_SYNTHETIC_ID) == Some(&Value::Bool(true))
    }

    /// The arguments as a JSON object, for formats that only take objects: a non-object value
    /// is wrapped as `{"value": v}` (lossy; completed tool arguments are objects in practice).
    pub fn arguments_object(&self) -> Value {
        match self.arguments {
            Value::Object(_) => self.arguments.clone(),
            other => {
                let mut m = Map::new();
                m.insert("value".to_string(), other.clone());
                Value::Object(m)
            }
        }
    }
}

/// A result ready to encode, answering the call with the same (mapped) id.
#[derive(Debug, Clone, PartialEq)]
pub struct EncResult<'a> {
    /// The mapped id of the call it answers.
    pub id: String,
    /// The call's function name (Gemini and Ollama name results by function).
    pub name: &'a str,
    /// Whether the id of the call was sent (Gemini: omitted for synthetic ids).
    pub id_sent: bool,
    /// Output text, already truncated by the history policy.
    pub output: String,
    /// Whether the tool reported failure.
    pub is_error: bool,
    /// The kind of the call it answers (a `custom` call's result is a Responses
    /// `custom_tool_call_output`).
    pub kind: CallKind,
}

/// Renders one assistant turn: optional text (notes about cut calls) and its calls.
pub fn encode_calls(
    format: HistoryFormat,
    text: Option<&str>,
    calls: &[EncCall<'_>],
) -> Vec<Value> {
    match format {
        HistoryFormat::OpenaiChat => openai_chat::calls(text, calls, false),
        HistoryFormat::Mistral => openai_chat::calls(text, calls, true),
        HistoryFormat::OpenaiResponses => openai_responses::calls(text, calls),
        HistoryFormat::Anthropic => anthropic::calls(text, calls),
        HistoryFormat::Gemini => gemini::calls(text, calls),
        HistoryFormat::Bedrock => bedrock::calls(text, calls),
        HistoryFormat::Ollama => ollama::calls(text, calls),
    }
}

/// Puts a turn's reasoning blocks into its rendered assistant `message` (the one
/// [`encode_calls`] made, `note`: with a leading text block), in place: the blocks placed
/// before the first sent call go first (ahead of the note: Anthropic wants a turn's thinking
/// first), the others right before the call they preceded. Only Anthropic (`thinking` /
/// `redacted_thinking`) and Bedrock (`reasoningContent`) carry them, and only a `thinking`
/// block with its signature (the API rejects one without) or a redacted block with its data.
/// Returns how many were put in.
pub fn insert_reasoning(
    format: HistoryFormat,
    message: &mut Value,
    note: bool,
    placed: &[(usize, crate::snapshot::ReasoningBlock)],
) -> usize {
    let block_of = match format {
        HistoryFormat::Anthropic => anthropic::reasoning_block,
        HistoryFormat::Bedrock => bedrock::reasoning_block,
        _ => return 0,
    };
    let Some(content) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let mut rest = std::mem::take(content).into_iter();
    let note_block = if note { rest.next() } else { None };
    let calls: Vec<Value> = rest.collect();
    let mut sent = 0;
    let mut out = Vec::with_capacity(calls.len() + placed.len() + 1);
    let mut put = |out: &mut Vec<Value>, at: usize| {
        for (_, b) in placed.iter().filter(|(k, _)| *k == at) {
            if let Some(block) = block_of(b) {
                out.push(block);
                sent += 1;
            }
        }
    };
    put(&mut out, 0);
    out.extend(note_block);
    let n = calls.len();
    for (k, call) in calls.into_iter().enumerate() {
        if k > 0 {
            put(&mut out, k);
        }
        out.push(call);
    }
    if n > 0 {
        put(&mut out, n);
    }
    *content = out;
    sent
}

/// Renders the results of one assistant turn, in call order, to follow it directly.
pub fn encode_results(format: HistoryFormat, results: &[EncResult<'_>]) -> Vec<Value> {
    match format {
        HistoryFormat::OpenaiChat => openai_chat::results(results, false),
        HistoryFormat::Mistral => openai_chat::results(results, true),
        HistoryFormat::OpenaiResponses => openai_responses::results(results),
        HistoryFormat::Anthropic => anthropic::results(results),
        HistoryFormat::Gemini => gemini::results(results),
        HistoryFormat::Bedrock => bedrock::results(results),
        HistoryFormat::Ollama => ollama::results(results),
    }
}

/// Renders a plain text message.
pub fn encode_text(format: HistoryFormat, role: Role, text: &str) -> Value {
    match format {
        HistoryFormat::OpenaiChat | HistoryFormat::Mistral | HistoryFormat::Ollama => {
            openai_chat::text(role, text)
        }
        HistoryFormat::OpenaiResponses => openai_responses::text(role, text),
        HistoryFormat::Anthropic => anthropic::text(role, text),
        HistoryFormat::Gemini => gemini::text(role, text),
        HistoryFormat::Bedrock => bedrock::text(role, text),
    }
}

/// Merges consecutive messages of the same role into one (content arrays / parts concatenated)
/// for formats that need it ([`HistoryFormat::merges_roles`]); other formats pass unchanged.
pub fn merge_roles(format: HistoryFormat, messages: Vec<Value>) -> Vec<Value> {
    let tagged = messages.into_iter().map(|m| (0..=0, m)).collect();
    merge_roles_tagged(format, tagged)
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// [`merge_roles`] over messages tagged with the turns they render; a merged message covers
/// every turn of the messages merged into it (from the first one's first turn to the last
/// one's last), so a window cut at it keeps every turn it holds
/// ([`crate::history::window::last`]).
pub fn merge_roles_tagged(
    format: HistoryFormat,
    messages: Vec<(RangeInclusive<usize>, Value)>,
) -> Vec<(RangeInclusive<usize>, Value)> {
    if !format.merges_roles() {
        return messages;
    }
    let list_key = if format == HistoryFormat::Gemini {
        "parts"
    } else {
        "content"
    };
    let mut out: Vec<(RangeInclusive<usize>, Value)> = Vec::with_capacity(messages.len());
    for (turns, msg) in messages {
        if let Some((prev_turns, prev)) = out.last_mut() {
            if prev.get("role").is_some() && prev.get("role") == msg.get("role") {
                let extra = msg.get(list_key).and_then(Value::as_array).cloned();
                let target = prev.get_mut(list_key).and_then(Value::as_array_mut);
                if let (Some(extra), Some(target)) = (extra, target) {
                    // Anthropic wants an assistant turn that holds thinking to start with it
                    // (the API joins consecutive turns the same way): the reasoning blocks
                    // that open the merged message go ahead of a previous turn's note.
                    let lead =
                        if matches!(format, HistoryFormat::Anthropic | HistoryFormat::Bedrock) {
                            extra.iter().take_while(|b| is_reasoning(b)).count()
                        } else {
                            0
                        };
                    let at = target.iter().take_while(|b| is_reasoning(b)).count();
                    let mut extra = extra;
                    let rest = extra.split_off(lead);
                    target.splice(at..at, extra);
                    target.extend(rest);
                    *prev_turns = (*prev_turns.start()).min(*turns.start())
                        ..=(*prev_turns.end()).max(*turns.end());
                    continue;
                }
            }
        }
        out.push((turns, msg));
    }
    out
}

/// Whether a content block is a reasoning block (Anthropic `thinking` / `redacted_thinking`,
/// Bedrock `reasoningContent`).
fn is_reasoning(b: &Value) -> bool {
    matches!(
        b.get("type").and_then(Value::as_str),
        Some("thinking" | "redacted_thinking")
    ) || b.get("reasoningContent").is_some()
}

/// Parses a history in `format` back into canonical snapshots (one per assistant turn with
/// calls). Plain text messages are skipped (see each format's `parse` for what is lossy).
pub fn parse_history(
    format: HistoryFormat,
    messages: &[Value],
) -> Result<Vec<MessageSnapshot>, HistoryParseError> {
    match format {
        HistoryFormat::OpenaiChat | HistoryFormat::Mistral => openai_chat::parse(format, messages),
        HistoryFormat::OpenaiResponses => openai_responses::parse(messages),
        HistoryFormat::Anthropic => anthropic::parse(messages),
        HistoryFormat::Gemini => gemini::parse(messages),
        HistoryFormat::Bedrock => bedrock::parse(messages),
        HistoryFormat::Ollama => ollama::parse(messages),
    }
}
