//! The history policy knobs, as read from a query request body
//! (`{"target":"openai-chat","max_result_chars":800}`).

use crate::encode::HistoryFormat;
use serde::{Deserialize, Serialize};

/// Default result limit in characters.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 500;
/// Smallest accepted result limit (smaller requests are raised to it).
pub const MIN_RESULT_CHARS: usize = 100;
/// Largest accepted result limit (larger requests are lowered to it).
pub const MAX_RESULT_CHARS: usize = 10_000;
/// Default text of the result given to a call that has none.
pub const DEFAULT_PLACEHOLDER: &str = "[No result recorded]";

/// How history is rendered. Every field has a default, so `{}` is a valid body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryOptions {
    /// Longest result text sent, in characters, marker included; clamped to 100..=10,000
    /// (see [`HistoryOptions::result_limit`]). Default 500.
    pub max_result_chars: usize,
    /// Render all tool history as plain text messages (for providers that reject tool
    /// history, or a target switched mid-conversation). Default false.
    pub strict_text: bool,
    /// Keep only the last N messages (counted as finally rendered), widened so that no call
    /// is separated from its results. Default: everything.
    pub window: Option<usize>,
    /// The result text sent for a call with no recorded result. Default `[No result recorded]`.
    pub placeholder: String,
    /// Responses target: send each call's stored item id (`fc_…`) as the `function_call`
    /// item `id`. Default false: the API rejects item ids it did not store, or whose
    /// `reasoning` item is missing from the input, and toolstream keeps no reasoning items.
    /// Turn on only when the conversation is stored server-side with its reasoning.
    pub send_item_ids: bool,
    /// The model the history is for (`gemini-3-pro-preview`, `gpt-4.1`, ...), when the caller
    /// says. A Gemini thought signature is sent back only where the target format carries it
    /// *and* the model that made it (kept with the signature) is of this model's family
    /// ([`crate::encode::model_family`]); one of another family is dropped and counted, with a
    /// note. Default: not said, every signature the format carries is sent.
    pub model: Option<String>,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            strict_text: false,
            window: None,
            placeholder: DEFAULT_PLACEHOLDER.to_string(),
            send_item_ids: false,
            model: None,
        }
    }
}

impl HistoryOptions {
    /// The effective result limit: `max_result_chars` clamped to 100..=10,000.
    pub fn result_limit(&self) -> usize {
        self.max_result_chars
            .clamp(MIN_RESULT_CHARS, MAX_RESULT_CHARS)
    }
}

/// A history query body: the target format plus the options, flattened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRequest {
    /// The format to render into (`openai-chat`, `anthropic`, `mistral`, ...).
    pub target: HistoryFormat,
    /// The policy; absent fields take their defaults.
    #[serde(flatten)]
    pub options: HistoryOptions,
}

impl HistoryRequest {
    /// Every field a request body may carry, for callers that refuse unknown fields (serde
    /// cannot deny unknown fields through `flatten`). Kept in sync by a test.
    pub const FIELDS: [&'static str; 7] = [
        "target",
        "max_result_chars",
        "strict_text",
        "window",
        "placeholder",
        "send_item_ids",
        "model",
    ];
}
