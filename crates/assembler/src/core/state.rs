//! The assembly state of one message and its calls.

use chunk_model::{CallKind, CallStatus, PathValue, Provider, ReasoningKind, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::{Arc, OnceLock};

/// Limits the core enforces (a copy of the relevant [`crate::Config`] fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest argument text of one call, in bytes.
    pub max_argument_bytes: usize,
    /// Most calls per message.
    pub max_calls_per_message: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        let c = crate::Config::default();
        Limits {
            max_argument_bytes: c.max_argument_bytes,
            max_calls_per_message: c.max_calls_per_message,
        }
    }
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessagePhase {
    /// Chunks may still change calls.
    Open,
    /// An end was seen (finish, `[DONE]`, error, timeout); every call is terminal, and
    /// `message.completed` has not been emitted yet (transient within one step).
    Ended,
    /// `message.completed` was emitted; nothing changes the calls any more.
    Completed,
}

/// One call being assembled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallState {
    /// The provider's call id, once seen (never blank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_id: Option<String>,
    /// The provider's index of the call (block index, output index, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_index: Option<u32>,
    /// A block/item id later fragments may be keyed by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    /// The consumer-facing id, fixed when `tool_call.started` (or the terminal event) is
    /// emitted: the wire id, else a synthetic id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The function name, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The kind of call: the first one a fragment or end states (`function` until then). It
    /// decides how the text is judged at a normal end ([`CallKind::is_free_text`]).
    #[serde(default, skip_serializing_if = "CallKind::is_function")]
    pub kind: CallKind,
    /// Whether a statement has fixed `kind` (later statements do not change it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kind_stated: bool,
    /// The argument text assembled so far, when it is held in memory (see
    /// [`CallState::text_held`]); empty otherwise. The text is stored as pieces (see
    /// [`crate::core::ArgOp`]); the store reads it back only when a step needs it (an end, a
    /// name arriving, a limit) and lets go of it after each commit, so the memory of open
    /// calls does not grow with their text.
    #[serde(skip)]
    pub args: String,
    /// Bytes of the argument text (held or not): what the argument limit counts.
    #[serde(default)]
    pub args_len: usize,
    /// Whether `args` holds the whole text (a new call does; a call read from storage does
    /// not until its pieces are read back).
    #[serde(skip)]
    pub args_held: bool,
    /// Number of stored argument pieces.
    #[serde(default)]
    pub pieces: u32,
    /// Structured argument pieces (Vertex `partialArgs`), in arrival order, when held in
    /// memory (see [`CallState::paths_held`]); stored as pieces, see
    /// [`crate::core::ArgOp::AppendPath`].
    #[serde(skip)]
    pub path_values: Vec<PathValue>,
    /// Whether `path_values` holds every structured piece.
    #[serde(skip)]
    pub paths_held: bool,
    /// Number of stored structured pieces (not written when 0, as for every call of a
    /// provider without them: each field written costs every commit of the message).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub path_pieces: u32,
    /// Bytes of stored structured pieces (counted against the argument limit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub path_bytes: usize,
    /// Provider metadata, merged.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Lifecycle status.
    pub status: CallStatus,
    /// Why `invalid`/`abandoned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether `tool_call.started` was emitted.
    #[serde(default)]
    pub started: bool,
    /// Parsed arguments of a completed call.
    #[serde(default, skip_serializing_if = "Arguments::is_null")]
    pub arguments: Arguments,
    /// Bytes of argument text carried by the call's `tool_call.delta`s so far: where the next
    /// one starts (see [`crate::core::preview`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preview_bytes: usize,
    /// Publish time (ms) of the input after which the call's latest delta was emitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_at: Option<u64>,
    /// The end of the argument text held in memory for previews, from byte `preview_from` to
    /// `args_len`, when [`CallState::preview_held`] (a call read from storage holds none until
    /// a delta needs it, then the store reads its text back once).
    #[serde(skip)]
    pub preview_text: String,
    /// Where `preview_text` starts in the argument text.
    #[serde(skip)]
    pub preview_from: usize,
    /// Whether `preview_text` holds the text from `preview_from` to the end.
    #[serde(skip)]
    pub preview_held: bool,
}

/// The parsed arguments of a completed call ([`CallState::arguments`]), with their JSON kept
/// once it is made or read; arguments read from storage are parsed when first asked for.
///
/// A message's state is written again at every commit of the message, and a completed call's
/// arguments with it: serializing a large value again for every later input of its message
/// (the fragments of a call after it, its results) was most of what encoding a message cost
/// (profile in the README, "What moved the figures"). The value cannot be changed in place,
/// only replaced, so the JSON kept always encodes it. Serialized, compared and printed as the
/// value alone.
#[derive(Clone, Default)]
pub struct Arguments {
    /// The value; for arguments read from storage, parsed from `json` only when first asked
    /// for (most reads of a message never look at its completed calls' arguments: a later
    /// input of the message only writes them back). Unset with `json` unset: `null`.
    value: OnceLock<Value>,
    json: OnceLock<Arc<[u8]>>,
}

impl Arguments {
    /// Arguments holding `value`; its JSON is made when first asked for.
    pub fn new(value: Value) -> Arguments {
        Arguments {
            value: OnceLock::from(value),
            json: OnceLock::new(),
        }
    }

    /// Arguments read from storage: `json`, which the caller has checked is JSON
    /// (`store::compact`), kept as it is and written again as it is; the value is parsed from
    /// it when first asked for. Every writer of it was `serde_json::to_vec` of the value, so it
    /// is the JSON that would be made (and any other JSON of the same value would still read
    /// back as the same value).
    pub(crate) fn with_json(json: &[u8]) -> Arguments {
        Arguments {
            value: OnceLock::new(),
            json: OnceLock::from(Arc::<[u8]>::from(json)),
        }
    }

    /// The value.
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| {
            // (checked at the read to parse as a value, `store::compact`: `null` only for
            // arguments never set)
            self.json
                .get()
                .and_then(|json| serde_json::from_slice(json).ok())
                .unwrap_or(Value::Null)
        })
    }

    /// Whether there are none (`null`: the call is not completed).
    pub fn is_null(&self) -> bool {
        match (self.value.get(), self.json.get()) {
            (Some(value), _) => value.is_null(),
            (None, Some(json)) => json[..] == *b"null",
            (None, None) => true,
        }
    }

    /// Whether its JSON is kept (made or read) already.
    #[cfg(test)]
    pub(crate) fn is_cached(&self) -> bool {
        self.json.get().is_some()
    }

    /// Whether its value has been parsed (or was given).
    #[cfg(test)]
    pub(crate) fn is_parsed(&self) -> bool {
        self.value.get().is_some()
    }

    /// Bytes of its JSON when kept already, else 0 (a size hint).
    pub(crate) fn json_len(&self) -> usize {
        self.json.get().map_or(0, |json| json.len())
    }

    /// The value as JSON, serialized on the first call only.
    pub(crate) fn json(&self) -> Result<&[u8], serde_json::Error> {
        if let Some(json) = self.json.get() {
            return Ok(json);
        }
        let made: Arc<[u8]> = serde_json::to_vec(self.value())?.into();
        Ok(self.json.get_or_init(|| made))
    }
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Arguments {
        Arguments::new(value)
    }
}

impl std::ops::Deref for Arguments {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl std::fmt::Debug for Arguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Arguments) -> bool {
        self.value() == other.value()
    }
}

impl PartialEq<Value> for Arguments {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl Serialize for Arguments {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Arguments {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Arguments, D::Error> {
        Value::deserialize(deserializer).map(Arguments::new)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl CallState {
    /// A new, streaming call with no facts yet.
    pub fn new() -> CallState {
        CallState {
            wire_id: None,
            wire_index: None,
            item_id: None,
            id: None,
            name: None,
            kind: CallKind::Function,
            kind_stated: false,
            args: String::new(),
            args_len: 0,
            args_held: true,
            pieces: 0,
            path_values: Vec::new(),
            paths_held: true,
            path_pieces: 0,
            path_bytes: 0,
            metadata: Map::new(),
            status: CallStatus::Streaming,
            reason: None,
            started: false,
            arguments: Arguments::default(),
            preview_bytes: 0,
            preview_at: None,
            preview_text: String::new(),
            preview_from: 0,
            preview_held: true,
        }
    }

    /// Whether no further fragment can change the call.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// Whether `args` holds the whole argument text.
    pub fn text_held(&self) -> bool {
        self.args_held || self.args_len == 0
    }

    /// Whether `path_values` holds every structured piece.
    pub fn all_paths_held(&self) -> bool {
        self.paths_held || self.path_pieces == 0
    }

    /// Whether some stored argument text or structured piece is not held in memory.
    pub fn needs_text(&self) -> bool {
        !self.text_held() || !self.all_paths_held()
    }

    /// Lets go of the argument text and structured pieces held in memory (they are stored).
    pub fn release_text(&mut self) {
        self.args = String::new();
        self.args_held = false;
        self.path_values = Vec::new();
        self.paths_held = false;
    }

    /// Holds the whole argument text (read back from storage).
    pub fn hold_text(&mut self, text: String) {
        self.args_len = text.len();
        self.args = text;
        self.args_held = true;
    }

    /// Holds every structured piece (read back from storage).
    pub fn hold_paths(&mut self, values: Vec<PathValue>) {
        self.path_values = values;
        self.paths_held = true;
    }
}

impl Default for CallState {
    fn default() -> CallState {
        CallState::new()
    }
}

/// Bit set on the number under which a reasoning block's text pieces are stored beside the
/// calls' argument pieces (block `k` of a message stores as `REASONING_PIECES | k`; the other
/// bit, `keys::PATH_PIECES`, marks structured argument pieces).
pub const REASONING_PIECES: u32 = 0x4000_0000;

/// One reasoning block of a message (Anthropic `thinking` / `redacted_thinking`, Bedrock
/// `reasoningContent`): kept as the message's provider metadata, never a call. Its text is
/// stored as pieces like argument text ([`REASONING_PIECES`]), so a long thinking block is
/// never rewritten whole per delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningState {
    /// The provider's content block index.
    pub index: u32,
    /// Thinking or redacted.
    pub kind: ReasoningKind,
    /// How many calls the message had when the block started: it goes back before call
    /// `before_call`.
    pub before_call: u32,
    /// Number of stored text pieces.
    #[serde(default)]
    pub pieces: u32,
    /// The text, only when read back from storage for a snapshot.
    #[serde(skip)]
    pub text: String,
    /// The signature, appended as it arrives.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    /// The encrypted reasoning of a redacted block.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
}

/// Everything known about one message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageState {
    /// From the subject.
    pub conversation_id: String,
    /// From the subject.
    pub message_id: String,
    /// The stream format, once known.
    #[serde(default)]
    pub provider: Option<Provider>,
    /// Position of the message in its conversation (first-seen order).
    #[serde(default)]
    pub order: u64,
    /// Open, ended or completed.
    pub phase: MessagePhase,
    /// The finish reason once ended (the provider's, or `timeout`, `gap`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The calls, by 0-based position (the `index` consumers see).
    #[serde(default)]
    pub calls: Vec<CallState>,
    /// Results matched to this message's calls, in match order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<ToolResult>,
    /// Results on this message's results subject that never matched a call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaned_results: Vec<ToolResult>,
    /// Its reasoning blocks, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningState>,
    /// Tool result blocks the provider is streaming (Bedrock server tool results), until
    /// their block ends and they become results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_blocks: Vec<ResultBlockState>,
}

/// A tool result block being streamed by the provider (see
/// [`chunk_model::ChunkEvent::ResultBlock`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultBlockState {
    /// The provider's content block index.
    pub index: u32,
    /// The call it answers.
    pub tool_call_id: String,
    /// The provider said the tool failed.
    #[serde(default)]
    pub is_error: bool,
    /// The output so far.
    #[serde(default)]
    pub output: String,
    /// The output grew past the argument limit: the result says so instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_limit: bool,
}

impl MessageState {
    /// A new, open message with no calls.
    pub fn new(conv: &str, msg: &str, provider: Option<Provider>, order: u64) -> MessageState {
        MessageState {
            conversation_id: conv.to_string(),
            message_id: msg.to_string(),
            provider,
            order,
            phase: MessagePhase::Open,
            finish_reason: None,
            calls: Vec::new(),
            tool_results: Vec::new(),
            orphaned_results: Vec::new(),
            reasoning: Vec::new(),
            result_blocks: Vec::new(),
        }
    }

    /// Whether the message still accepts call fragments.
    pub fn is_open(&self) -> bool {
        self.phase == MessagePhase::Open
    }
}
