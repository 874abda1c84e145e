//! History policy: turns the stored state of a conversation into a provider-valid request
//! history for a target format, and reports what it had to do.
//!
//! ## Layout
//! - [`render`] (this file) — the entry point: plan → encode → window → merge → count.
//! - [`options`] — [`HistoryOptions`] (result limit, strict text, window, placeholder) and the
//!   query body [`HistoryRequest`].
//! - [`plan`] — the rules: what is sent as a tool call, placeholders, orphans, cut calls.
//! - [`truncate`] — result truncation on a character boundary with `... [truncated]`.
//! - [`window`] — keeping the last N messages without separating a call from its results, even
//!   where merged messages hold several turns.
//! - [`tokens`] — the token estimate of exactly the returned payload.
//!
//! The id mapping ([`crate::encode::ids`]) is keyed by (turn, stored id), so a call and its
//! result always carry the same mapped id.

pub mod options;
pub mod plan;
pub mod tokens;
pub mod truncate;
pub mod window;

pub use options::{HistoryOptions, HistoryRequest};
pub use plan::{Block, Plan, ORPHAN_HEADER};
pub use truncate::TRUNCATION_MARKER;

use crate::decode::openai_chat::is_other_choice;
use crate::encode::{
    encode_calls, encode_results, encode_text, insert_reasoning, merge_roles_tagged, model_family,
    renders_signature, EncCall, EncResult, HistoryFormat, IdMap, IdRule, META_EXTRA_CONTENT,
    META_SIGNATURE_MODEL, META_THOUGHT_SIGNATURE,
};
use crate::snapshot::MessageSnapshot;
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;

/// A rendered history and what the policy did to produce it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderedHistory {
    /// The format rendered into.
    pub target: HistoryFormat,
    /// The messages (Chat/Anthropic/Bedrock/Ollama `messages`, Gemini `contents`, Responses
    /// `input` items), in order.
    pub messages: Vec<Value>,
    /// Tokens of `serde_json::to_string(&messages)`, exactly what is returned.
    pub token_estimate: usize,
    /// How `token_estimate` was counted (`o200k_base` or `chars/4`).
    pub tokenizer: &'static str,
    /// Results cut to the limit.
    pub truncated_results: usize,
    /// Calls answered with the placeholder.
    pub placeholders: usize,
    /// Results rendered as `[Tool Result - Previous Context]` text.
    pub orphans: usize,
    /// Gemini thought signatures of kept calls that are not sent: the target does not carry
    /// them (any target but `gemini`, and `openai-chat` for signatures from Gemini's native
    /// API), or the caller's `model` is of another family than the model that made them
    /// ([`HistoryOptions::model`]); see `notes`.
    pub dropped_signatures: usize,
    /// Reasoning blocks (Anthropic `thinking` / `redacted_thinking`, Bedrock
    /// `reasoningContent`) of kept turns that are not sent: any target but `anthropic` and
    /// `bedrock`, strict text, turns without a sent call, thinking without its signature.
    pub dropped_reasoning: usize,
    /// What the caller should know about this history (signatures dropped or moved, an
    /// ordering rule of the target that only the caller can satisfy, ...), in words.
    pub notes: Vec<String>,
    /// `bedrock` only: the Converse `toolConfig` the request needs when its history holds
    /// `toolUse` / `toolResult` blocks (Bedrock rejects such a request without one), listing
    /// every tool the kept history calls, in order of first use, each with an open input schema
    /// (`{"type":"object"}`: toolstream never sees the tool definitions). A caller with its own
    /// `toolConfig` sends that instead (it must name these tools). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<Value>,
}

/// Why a history could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The payload could not be serialized for counting (not expected for JSON values).
    #[error("serializing the rendered history: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Renders `snapshots` (stored messages, in conversation order) as `target` history under
/// `options`. See [`plan`] for the rules and [`window`] for windows.
pub fn render(
    snapshots: &[MessageSnapshot],
    target: HistoryFormat,
    options: &HistoryOptions,
) -> Result<RenderedHistory, HistoryError> {
    // Other choices of an OpenAI chat `n > 1` request are alternatives of their message,
    // not turns after it: the history follows choice 0.
    let alternatives = snapshots
        .iter()
        .filter(|s| is_other_choice(&s.message_id))
        .count();
    let followed: Vec<MessageSnapshot>;
    let snapshots = if alternatives > 0 {
        followed = snapshots
            .iter()
            .filter(|s| !is_other_choice(&s.message_id))
            .cloned()
            .collect();
        &followed[..]
    } else {
        snapshots
    };
    let plan = Plan::build(snapshots, options);
    let ids = IdMap::build(
        IdRule::for_format(target),
        plan.blocks.iter().flat_map(|b| match b {
            Block::Calls { turn, calls, .. } => calls
                .iter()
                .map(|c| (*turn, c.id.as_str()))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        }),
    );

    let mut tagged: Vec<(std::ops::RangeInclusive<usize>, Value)> = Vec::new();
    // (turn, signatures the target drops in that turn's calls)
    let mut dropped: Vec<(usize, usize)> = Vec::new();
    // (turn, reasoning blocks not sent), from the plan's turns without a sent call too
    let mut reasoning_dropped: Vec<(usize, usize)> = plan.unsent_reasoning.clone();
    // (turn, the cut call whose signature the first sent call carries, and that call; only
    // where the target renders it)
    let mut moved: Vec<(usize, &str, &str)> = Vec::new();
    // (turn of each signature the format carries but another model family made)
    let mut foreign: Vec<usize> = Vec::new();
    for block in &plan.blocks {
        let turn = block.turn();
        let messages = match block {
            Block::Calls {
                note,
                calls,
                signature_from,
                reasoning,
                ..
            } => {
                // The first sent call with the turn's signature from a call that is not sent
                // (plan rule 5): its own metadata plus the signature keys.
                let carried: Option<serde_json::Map<String, Value>> =
                    signature_from.zip(calls.first()).map(|(from, first)| {
                        let mut meta = first.provider_metadata.clone();
                        for key in [
                            META_THOUGHT_SIGNATURE,
                            META_EXTRA_CONTENT,
                            META_SIGNATURE_MODEL,
                        ] {
                            if let Some(v) = from.provider_metadata.get(key) {
                                meta.insert(key.to_string(), v.clone());
                            }
                        }
                        if renders_signature(target, &meta) == Some(true)
                            && !signed_by_other_family(&meta, options.model.as_deref())
                        {
                            moved.push((turn, from.id.as_str(), first.id.as_str()));
                        }
                        meta
                    });
                let metadata: Vec<Cow<'_, serde_json::Map<String, Value>>> = calls
                    .iter()
                    .enumerate()
                    .map(|(k, c)| match (&carried, k) {
                        (Some(meta), 0) => Cow::Borrowed(meta),
                        _ => Cow::Borrowed(&c.provider_metadata),
                    })
                    .map(|meta| {
                        // a signature the format carries, made by another model family than
                        // the one the caller says the history is for: not sent
                        if renders_signature(target, &meta) == Some(true)
                            && signed_by_other_family(&meta, options.model.as_deref())
                        {
                            let mut meta = meta.into_owned();
                            meta.remove(META_THOUGHT_SIGNATURE);
                            meta.remove(META_EXTRA_CONTENT);
                            foreign.push(turn);
                            Cow::Owned(meta)
                        } else {
                            meta
                        }
                    })
                    .collect();
                let n = metadata
                    .iter()
                    .filter(|m| renders_signature(target, m) == Some(false))
                    .count();
                dropped.push((turn, n));
                let enc: Vec<EncCall<'_>> = calls
                    .iter()
                    .zip(&metadata)
                    .map(|(c, meta)| EncCall {
                        id: ids.get(turn, &c.id).to_string(),
                        name: &c.name,
                        arguments: &c.arguments,
                        metadata: meta.as_ref(),
                        kind: c.kind,
                        send_item_id: options.send_item_ids,
                    })
                    .collect();
                let mut messages = encode_calls(target, note.as_deref(), &enc);
                let sent = match (options.strict_text, messages.first_mut()) {
                    (false, Some(first)) => {
                        insert_reasoning(target, first, note.is_some(), reasoning)
                    }
                    _ => 0,
                };
                reasoning_dropped.push((turn, reasoning.len() - sent));
                messages
            }
            Block::Results { results, .. } => {
                let enc: Vec<EncResult<'_>> = results
                    .iter()
                    .map(|a| EncResult {
                        id: ids.get(turn, &a.call.id).to_string(),
                        name: &a.call.name,
                        id_sent: !is_synthetic(a.call),
                        output: a.output.clone(),
                        is_error: a.is_error,
                        kind: a.call.kind,
                    })
                    .collect();
                encode_results(target, &enc)
            }
            Block::Text { role, text, .. } => vec![encode_text(target, *role, text)],
        };
        tagged.extend(messages.into_iter().map(|m| (turn..=turn, m)));
    }

    // Merge first (the window counts messages as finally rendered), each merged message
    // tagged with every turn it holds, so the window never cuts inside a merged turn.
    let merged = merge_roles_tagged(target, tagged);
    let kept = window::last(merged, options.window);
    // The window is a suffix widened to a turn boundary: every turn from the first kept is kept.
    let first_kept = kept.first().map(|(turns, _)| *turns.start());
    let foreign_signatures = foreign
        .iter()
        .filter(|turn| first_kept.is_some_and(|f| **turn >= f))
        .count();
    let dropped_signatures: usize = dropped
        .iter()
        .filter(|(turn, _)| first_kept.is_some_and(|f| *turn >= f))
        .map(|(_, n)| n)
        .sum::<usize>()
        + foreign_signatures;
    let mut notes = Vec::new();
    if alternatives > 0 {
        notes.push(format!(
            "{alternatives} alternative choice message(s) (`<msg>~choice<k>`, OpenAI chat with \
             n > 1) left out: the history follows choice 0 of each message"
        ));
    }
    if let (true, Some(model)) = (foreign_signatures > 0, options.model.as_deref()) {
        notes.push(format!(
            "{foreign_signatures} Gemini thought signature(s) dropped: made by a model of \
             another family than {model} ({}), which would reject them; its function calls \
             go without",
            model_family(model)
        ));
    }
    if dropped_signatures > foreign_signatures {
        let dropped_signatures = dropped_signatures - foreign_signatures;
        notes.push(format!(
            "{dropped_signatures} Gemini thought signature(s) dropped: the {target} format \
             does not carry them (only gemini does, and openai-chat for signatures from \
             Gemini's OpenAI-compatible endpoint); sent to a Gemini 3 model, this history's \
             function calls would lack the signatures it requires"
        ));
    }
    for (_, from, to) in moved
        .iter()
        .filter(|(turn, _, _)| first_kept.is_some_and(|f| *turn >= f))
    {
        notes.push(format!(
            "the thought signature of call {from} (not sent: see its note) is sent on call \
             {to}, the first function call of its turn: Gemini signs only the first call of a \
             turn and Gemini 3 rejects a turn whose first function call has none"
        ));
    }
    let dropped_reasoning: usize = reasoning_dropped
        .iter()
        .filter(|(turn, _)| first_kept.is_some_and(|f| *turn >= f))
        .map(|(_, n)| n)
        .sum();
    if dropped_reasoning > 0 {
        notes.push(format!(
            "{dropped_reasoning} reasoning block(s) not sent: only anthropic and bedrock \
             histories carry thinking blocks (with their signature) back before the tool calls \
             they preceded; a turn without a sent tool call or in strict text needs none, and a \
             thinking block whose signature never arrived would be rejected"
        ));
    }
    let messages: Vec<Value> = kept.into_iter().map(|(_, m)| m).collect();
    notes.extend(ordering_notes(target, &messages));
    let tool_config = (target == HistoryFormat::Bedrock)
        .then(|| bedrock_tool_config(&messages))
        .flatten();
    let payload = serde_json::to_string(&messages)?;
    let (token_estimate, tokenizer) = tokens::count(&payload);
    Ok(RenderedHistory {
        target,
        messages,
        token_estimate,
        tokenizer,
        truncated_results: plan.truncated_results,
        placeholders: plan.placeholders,
        orphans: plan.orphans,
        dropped_signatures,
        dropped_reasoning,
        notes,
        tool_config,
    })
}

/// Whether a signed call's signature was made by a model of another family than `target_model`
/// (unknown on either side: no).
fn signed_by_other_family(
    metadata: &serde_json::Map<String, Value>,
    target_model: Option<&str>,
) -> bool {
    let made_by = metadata.get(META_SIGNATURE_MODEL).and_then(Value::as_str);
    match (made_by, target_model) {
        (Some(made_by), Some(target)) if !target.trim().is_empty() => {
            model_family(made_by) != model_family(target)
        }
        _ => false,
    }
}

/// The role of a rendered message (`assistant` for Gemini's `model`); Responses items without
/// a role are function calls (`assistant`) or outputs (`user`).
fn role_of(message: &Value) -> Option<&str> {
    match message.get("role").and_then(Value::as_str) {
        Some("model") => Some("assistant"),
        Some(role) => Some(role),
        None => match message.get("type").and_then(Value::as_str) {
            Some("function_call" | "custom_tool_call") => Some("assistant"),
            Some(_) => Some("user"),
            None => None,
        },
    }
}

/// The target's ordering rules that only the caller can satisfy, stated: toolstream never
/// sees the user's prompts, so a history may start with the model's turn, and may end with an
/// assistant note.
fn ordering_notes(target: HistoryFormat, messages: &[Value]) -> Vec<String> {
    let mut notes = Vec::new();
    let first = messages.first().and_then(role_of);
    let last = messages.last().and_then(role_of);
    if first == Some("assistant")
        && matches!(
            target,
            HistoryFormat::Anthropic | HistoryFormat::Bedrock | HistoryFormat::Gemini
        )
    {
        notes.push(format!(
            "the history starts with the model's turn: {target} needs the conversation to start \
             with a user turn, and toolstream never sees the user's prompts; put the user \
             message that led to it first"
        ));
    }
    if last == Some("assistant") && target == HistoryFormat::Mistral {
        notes.push(
            "the history ends with an assistant message: Mistral needs a request to end with a \
             user or tool message (append the next user message, or send this one with \
             `prefix: true`)"
                .to_string(),
        );
    }
    notes
}

/// Bedrock's `toolConfig` for the tools the rendered history calls (`None` without any
/// `toolUse` block).
fn bedrock_tool_config(messages: &[Value]) -> Option<Value> {
    let mut names: Vec<&str> = Vec::new();
    let blocks = messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten();
    for block in blocks {
        if let Some(name) = block.pointer("/toolUse/name").and_then(Value::as_str) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if names.is_empty() {
        return None;
    }
    let tools: Vec<Value> = names
        .into_iter()
        .map(|name| {
            serde_json::json!({"toolSpec": {
                "name": name,
                "inputSchema": {"json": {"type": "object"}}
            }})
        })
        .collect();
    Some(serde_json::json!({ "tools": tools }))
}

fn is_synthetic(call: &crate::call::ToolCall) -> bool {
    call.provider_metadata
        .get(crate::encode::META_SYNTHETIC_ID)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}
