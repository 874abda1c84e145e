//! Canonical tool calls and tool results: what consumers see, whatever the provider.

use crate::depth::{json_deeper_than, MAX_ARGUMENT_DEPTH};
use crate::wire::Reason;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A tool call in canonical form.
///
/// `id` is the consumer-facing id: the provider's wire id (Responses: `call_id`), or a
/// deterministic synthetic id (`provider_metadata.synthetic_id == true`) when the provider
/// gives none (Gemini, Ollama). `index` is the call's 0-based position within its message,
/// the same for every provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Consumer-facing id (never empty).
    pub id: String,
    /// Function name (empty only on an `abandoned` call whose name never arrived).
    pub name: String,
    /// Parsed arguments: an object/array/value on `completed`, `null` when the text is not
    /// valid JSON (`invalid`, `abandoned`, `started`).
    pub arguments: Value,
    /// The argument text exactly as assembled from the stream.
    pub raw_arguments: String,
    /// 0-based position of the call within its message.
    pub index: u32,
    /// What sort of call this is (schema version 1, additive): omitted from the JSON when
    /// `function`, so a reader that finds no `kind` reads `function`.
    #[serde(default, skip_serializing_if = "CallKind::is_function")]
    pub kind: CallKind,
    /// Provider details kept so history can be rendered back (Gemini `thoughtSignature`,
    /// Responses `item_id`, `synthetic_id`, ...).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub provider_metadata: Map<String, Value>,
}

/// What sort of tool call a [`ToolCall`] is. Every kind is assembled, matched and ended by the
/// same rules; the kind decides only how the assembled text is judged at a normal end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A function call with JSON arguments (every provider's classic tool call).
    #[default]
    Function,
    /// A tool whose input is free text (OpenAI Responses `custom_tool_call`): never parsed as
    /// JSON. A completed custom call's `arguments` is its input as a JSON string and
    /// `raw_arguments` the same text as is.
    Custom,
    /// A call the provider made to a remote MCP server (Responses `mcp_call`, Anthropic
    /// `mcp_tool_use`): JSON arguments; its result may arrive in the same stream.
    Mcp,
    /// The provider asks for approval before it calls an MCP tool (Responses
    /// `mcp_approval_request`): JSON arguments of the call it would make; `id` is the
    /// approval request's id.
    McpApprovalRequest,
    /// A tool the provider runs itself (Anthropic `server_tool_use`: `web_search`,
    /// `code_execution`, ...): JSON arguments; its result may arrive in the same stream.
    ServerTool,
}

impl CallKind {
    /// Every kind, in schema order.
    pub const ALL: [CallKind; 5] = [
        CallKind::Function,
        CallKind::Custom,
        CallKind::Mcp,
        CallKind::McpApprovalRequest,
        CallKind::ServerTool,
    ];

    /// The wire name (`function`, `custom`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Function => "function",
            CallKind::Custom => "custom",
            CallKind::Mcp => "mcp",
            CallKind::McpApprovalRequest => "mcp_approval_request",
            CallKind::ServerTool => "server_tool",
        }
    }

    /// Whether this is the default kind (`function`), which the JSON form omits.
    pub fn is_function(&self) -> bool {
        *self == CallKind::Function
    }

    /// Whether the call's input is free text, never parsed as JSON.
    pub fn is_free_text(self) -> bool {
        self == CallKind::Custom
    }
}

/// A complete tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The consumer-facing id of the call this answers.
    pub tool_call_id: String,
    /// The result text (non-string JSON outputs are kept as their compact JSON text).
    pub output: String,
    /// Whether the tool reported failure.
    #[serde(default)]
    pub is_error: bool,
}

/// One normalized statement from a message on `toolstream.results.<conv>.<msg>` (or an AI SDK
/// `tool-result` part): see [`crate::decode::decode_result`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultInput {
    /// A whole result in one message.
    Complete(ToolResult),
    /// A piece of a streamed result, appended.
    Delta {
        /// The call this answers.
        tool_call_id: String,
        /// Text to append.
        delta: String,
    },
    /// The end of a streamed result.
    Done {
        /// The call this answers.
        tool_call_id: String,
        /// Whether the tool reported failure.
        #[serde(default)]
        is_error: bool,
    },
}

impl ResultInput {
    /// The id of the call this result answers.
    pub fn tool_call_id(&self) -> &str {
        match self {
            ResultInput::Complete(r) => &r.tool_call_id,
            ResultInput::Delta { tool_call_id, .. } | ResultInput::Done { tool_call_id, .. } => {
                tool_call_id
            }
        }
    }
}

/// The lifecycle status of a call, as stored and as shown in snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Still receiving fragments.
    Streaming,
    /// Ended authoritatively with valid JSON arguments.
    Completed,
    /// Ended, but the arguments are not valid JSON or were cut (length, limit); raw kept.
    Invalid,
    /// The stream ended, errored, broke or timed out before the call finished.
    Abandoned,
}

impl CallStatus {
    /// Whether no further fragment can change the call.
    pub fn is_terminal(self) -> bool {
        !matches!(self, CallStatus::Streaming)
    }
}

/// A call with its status, as listed by `message.completed` and by snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    /// Where the call stands.
    pub status: CallStatus,
    /// Why it is `invalid` or `abandoned` (`truncated`, `invalid_json`, `gap`, `timeout`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The call itself.
    pub tool_call: ToolCall,
}

/// Why argument text is not acceptable arguments.
#[derive(Debug, thiserror::Error)]
pub enum ArgumentsError {
    /// Not valid JSON (reason `invalid_json`).
    #[error("arguments are not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Valid or not, nested deeper than [`MAX_ARGUMENT_DEPTH`] levels (reason
    /// `argument_depth`): such arguments could not be republished inside events, stored
    /// records or history requests that every serde_json reader (127 levels) can read back.
    #[error("arguments nested deeper than {limit} levels (recursion limit)")]
    TooDeep {
        /// The limit ([`MAX_ARGUMENT_DEPTH`]).
        limit: usize,
    },
}

impl ArgumentsError {
    /// The call's reason when it ends `invalid` for this: `invalid_json` or `argument_depth`.
    pub fn reason(&self) -> Reason {
        match self {
            ArgumentsError::Json(_) => Reason::InvalidJson,
            ArgumentsError::TooDeep { .. } => Reason::ArgumentDepth,
        }
    }
}

/// Reason of a call whose argument text is not valid JSON.
pub const INVALID_JSON: &str = Reason::InvalidJson.as_str();
/// Reason of a call whose arguments nest deeper than [`MAX_ARGUMENT_DEPTH`].
pub const ARGUMENT_DEPTH: &str = Reason::ArgumentDepth.as_str();

/// Parses assembled argument text into JSON per the completion rules: `""` (or only
/// whitespace) on a properly ended call means `{}`; anything else must parse completely, and
/// nest at most [`MAX_ARGUMENT_DEPTH`] (64) levels deep (checked on the text before parsing,
/// so no depth of input can exhaust the stack here or where the value is later serialized).
pub fn parse_arguments(raw: &str) -> Result<Value, ArgumentsError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    if json_deeper_than(raw.as_bytes(), MAX_ARGUMENT_DEPTH) {
        return Err(ArgumentsError::TooDeep {
            limit: MAX_ARGUMENT_DEPTH,
        });
    }
    Ok(serde_json::from_str(raw)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_arguments_on_an_ended_call_mean_an_empty_object() {
        assert_eq!(parse_arguments("").unwrap(), serde_json::json!({}));
        assert_eq!(parse_arguments("  \n").unwrap(), serde_json::json!({}));
    }

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn arguments_up_to_the_depth_limit_parse() {
        let v = parse_arguments(&nested(MAX_ARGUMENT_DEPTH)).unwrap();
        assert_eq!(crate::depth::value_depth(&v), MAX_ARGUMENT_DEPTH);
    }

    #[test]
    fn arguments_100000_levels_deep_are_refused_as_too_deep_not_a_stack_overflow() {
        let reason = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                for text in [nested(100_000), "[".repeat(100_000), nested(65)] {
                    let err = parse_arguments(&text).unwrap_err();
                    assert!(
                        matches!(err, ArgumentsError::TooDeep { limit: 64 }),
                        "{err}"
                    );
                }
                parse_arguments(&nested(100_000)).unwrap_err().reason()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(reason.as_str(), ARGUMENT_DEPTH);
    }

    #[test]
    fn call_kinds_serialize_as_their_wire_names_and_function_is_the_default() {
        for kind in CallKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, Value::String(kind.as_str().to_string()));
            assert_eq!(serde_json::from_value::<CallKind>(json).unwrap(), kind);
        }
        assert_eq!(CallKind::default(), CallKind::Function);
        let call: ToolCall = serde_json::from_str(
            r#"{"id":"c","name":"f","arguments":{},"raw_arguments":"{}","index":0}"#,
        )
        .unwrap();
        assert_eq!(call.kind, CallKind::Function);
        let text = serde_json::to_string(&call).unwrap();
        assert!(!text.contains("kind"), "{text}");
        let custom = ToolCall {
            kind: CallKind::Custom,
            ..call
        };
        let text = serde_json::to_string(&custom).unwrap();
        assert!(text.contains(r#""kind":"custom""#), "{text}");
    }

    #[test]
    fn glued_parallel_arguments_are_not_valid() {
        assert!(parse_arguments(r#"{"a":1}{"b":2}"#).is_err());
        assert!(parse_arguments(r#"{"a":"#).is_err());
    }
}
