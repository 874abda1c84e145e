//! Normalized chunk events: what one raw provider chunk says about tool calls.
//!
//! Decoders (see [`crate::decode`]) turn provider bytes into a `Vec<ChunkEvent>`; the
//! assembler applies them to its state. These types are the seam between the two, so they
//! carry exactly the facts the identity and completion rules need and nothing else.
//!
//! Conventions every decoder follows:
//! - blank strings (`""`, whitespace only) and `null` are *absent* (`None`), never values;
//! - a fragment never carries a name or id it did not see on the wire;
//! - an end is emitted only for an *authoritative* end signal, never because text parses.

use crate::call::{CallKind, ResultInput};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a fragment or end signal locates its call. The assembler matches by `wire_id`, then
/// `index`, then `item_id` (`docs/contracts.md`, "Identity and completion rules").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRef {
    /// Position the provider gave the call: OpenAI `tool_calls[].index`, Anthropic/Bedrock
    /// content block index, Responses `output_index`, Gemini part position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The provider's call id: OpenAI `id`, Anthropic `id`, Responses `call_id`, Bedrock
    /// `toolUseId`, AI SDK `toolCallId`, Gemini/Ollama `id` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_id: Option<String>,
    /// A block/item id that later fragments are keyed by (Responses `item_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
}

/// A piece of one tool call. Any field may be absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallFragment {
    /// Which call this belongs to.
    #[serde(flatten)]
    pub at: CallRef,
    /// The function name, when this fragment states it (never blank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The kind of call, when this fragment states it (a call with none stated is a
    /// `function`; the first kind stated sticks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CallKind>,
    /// Argument text to append (may be empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// Structured argument pieces (Vertex `partialArgs`): values at JSON paths, kept in
    /// order by the assembler and turned into argument text with
    /// [`crate::partial_args::build`] when the call ends with no argument text of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_values: Vec<PathValue>,
    /// Provider metadata to merge into the call (Gemini `thoughtSignature`, Responses item
    /// `id`, ...). Later keys overwrite earlier ones.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

/// One structured argument piece: a JSON value at a JSON path (`$.location`, `$.items[0].sku`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathValue {
    /// JSONPath of the value, as the provider sent it.
    pub path: String,
    /// The value (for a string cut into pieces: this piece).
    pub value: Value,
    /// The provider said the string value at this path continues in a later piece.
    #[serde(default)]
    pub continues: bool,
}

/// An authoritative end of one call: `content_block_stop`, `function_call_arguments.done`,
/// `output_item.done`, `contentBlockStop`, `tool-input-end`, or a whole call delivered in one
/// piece (Gemini and Ollama parts, AI SDK `tool-call`). If no call matches, the assembler
/// starts one from this end (whole calls).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallEnd {
    /// Which call ends.
    #[serde(flatten)]
    pub at: CallRef,
    /// The name, when the end signal states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The *complete* argument text, when the end signal carries it (Responses `.done`,
    /// `output_item.done`, whole Gemini/Ollama/AI SDK calls). It replaces what was assembled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// The kind of call, when the end signal states it (see [`CallFragment::kind`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CallKind>,
    /// How the provider says this one call ended, when it says so (Responses item
    /// `status: "incomplete"` is [`Finish::Truncated`]). `None` and [`Finish::Complete`] are a
    /// normal end (the arguments are judged); `Truncated` ends the call `invalid`
    /// (`truncated`), `Filtered` and `Error` end it `abandoned` (`filtered`,
    /// `provider_error`), never `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<Finish>,
    /// Provider metadata to merge into the call.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

/// What sort of reasoning block a [`ReasoningPiece`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningKind {
    /// Reasoning text with a signature (Anthropic `thinking`, Bedrock `reasoningText`).
    Thinking,
    /// Reasoning the provider encrypted (Anthropic `redacted_thinking` `data`, Bedrock
    /// `redactedContent`).
    RedactedThinking,
}

/// A piece of one reasoning block that the provider wants back, unmodified, before the tool
/// calls it preceded (Anthropic `thinking` / `redacted_thinking` blocks with their
/// `signature_delta`, Bedrock `reasoningContent`). Not a call: kept as the message's provider
/// metadata. Every text field is appended to what the block has so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningPiece {
    /// The provider's content block index of the block.
    pub index: u32,
    /// The kind of block, when this piece states it (its start, or Bedrock's first delta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ReasoningKind>,
    /// Reasoning text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Signature text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Redacted (encrypted) data to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// Why the provider ended the message, normalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// A normal end (`stop`, `tool_calls`, `end_turn`, `tool_use`, `STOP`, `completed`):
    /// open calls end and are judged by their arguments.
    Complete,
    /// Output cut by a token limit (`length`, `max_tokens`, `MAX_TOKENS`, `incomplete`):
    /// open calls end `invalid`, never `completed`.
    Truncated,
    /// Stopped by a filter or refusal (`content_filter`, `SAFETY`, `refusal`): open calls end
    /// `abandoned`.
    Filtered,
    /// The provider reported a failure: open calls end `abandoned`.
    Error,
}

/// One normalized statement from a provider chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChunkEvent {
    /// A fragment of a tool call (id/name/argument text).
    CallFragment(CallFragment),
    /// An authoritative end of one call (or a whole call in one piece).
    CallEnd(CallEnd),
    /// The provider ended the message; `reason` is the provider's own word (`tool_calls`,
    /// `max_tokens`, ...). A second one changes nothing.
    MessageEnd {
        /// Normalized meaning of the reason.
        finish: Finish,
        /// The provider's raw reason string.
        reason: String,
    },
    /// End of stream with no reason (`[DONE]`, Ollama `done: true` without `done_reason`).
    StreamEnd,
    /// The provider reported an error in-band (Anthropic `error`, Responses `response.failed`,
    /// AI SDK `error`). Open calls end `abandoned`.
    ProviderError {
        /// The provider's message, shortened.
        message: String,
    },
    /// A tool result carried inside the call stream (AI SDK `tool-result`).
    ToolResult(ResultInput),
    /// A piece of a reasoning block to keep as the message's provider metadata (not a call).
    Reasoning(ReasoningPiece),
    /// A piece of a tool result the provider streams in its own content block (Bedrock
    /// `toolResult` blocks of a server tool): the block's start names the call, later pieces
    /// at its index add output, and the block's end (a [`CallEnd`] at that index) makes it
    /// one whole [`ChunkEvent::ToolResult`].
    ResultBlock(ResultBlockPiece),
}

/// A piece of a tool result streamed as a content block (see [`ChunkEvent::ResultBlock`]).
/// Not a call: the assembler collects the block at its index and, at the block's end, takes
/// it as the provider's own result for the call it names. A block that never ends (the
/// message ended first) gives no result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultBlockPiece {
    /// The provider's content block index of the result block.
    pub index: u32,
    /// The call it answers (the provider's call id), stated by the block's start; a piece
    /// without one adds to the block already started at `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The provider said the tool failed (Bedrock `status: "error"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Output text to append (JSON output as its compact JSON text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl ChunkEvent {
    /// A fragment with only argument text for the call at `index`.
    pub fn args_at(index: u32, text: impl Into<String>) -> ChunkEvent {
        ChunkEvent::CallFragment(CallFragment {
            at: CallRef {
                index: Some(index),
                ..CallRef::default()
            },
            arguments: Some(text.into()),
            ..CallFragment::default()
        })
    }
}

/// Turns a provider string into an id/name: `None` for blank text (blank strings are absent).
pub fn non_blank(s: Option<&str>) -> Option<String> {
    match s {
        Some(t) if !t.trim().is_empty() => Some(t.to_string()),
        _ => None,
    }
}
