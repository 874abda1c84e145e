//! The providers whose stream formats toolstream understands.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A provider stream format. One variant per wire format, not per vendor: every
/// OpenAI-compatible host (Azure, Mistral, Groq, DeepSeek, xAI, OpenRouter, Ollama `/v1`,
/// LiteLLM, vLLM) speaks [`Provider::OpenaiChat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// OpenAI Chat Completions streaming (`choices[].delta.tool_calls`) and compatible hosts.
    OpenaiChat,
    /// OpenAI Responses API streaming events (`response.function_call_arguments.delta`, ...).
    OpenaiResponses,
    /// Anthropic Messages streaming (`content_block_start` / `input_json_delta` / ...).
    Anthropic,
    /// Google Gemini / Vertex `streamGenerateContent` (`candidates[].content.parts[].functionCall`).
    Gemini,
    /// AWS Bedrock ConverseStream events rendered as JSON (`{"contentBlockDelta": {...}}`).
    Bedrock,
    /// Ollama native `/api/chat` NDJSON.
    Ollama,
    /// Vercel AI SDK stream parts (`tool-input-start`, `tool-input-delta`, `tool-call`, ...).
    AiSdk,
}

impl Provider {
    /// Every provider format, in a stable order.
    pub const ALL: [Provider; 7] = [
        Provider::OpenaiChat,
        Provider::OpenaiResponses,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Bedrock,
        Provider::Ollama,
        Provider::AiSdk,
    ];

    /// The canonical name, as used in the `Toolstream-Provider` header and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenaiChat => "openai-chat",
            Provider::OpenaiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
            Provider::Ollama => "ollama",
            Provider::AiSdk => "ai-sdk",
        }
    }

    /// Parses a canonical name or a vendor alias (case-insensitive), from the one table in
    /// [`crate::wire::aliases`]: `openai`, `azure`, `mistral`, `groq`, `deepseek`, `xai`,
    /// `openrouter`, `litellm`, `vllm`, `ollama-v1`, ... all mean [`Provider::OpenaiChat`];
    /// `responses` means [`Provider::OpenaiResponses`]; `vertex` means [`Provider::Gemini`];
    /// `claude` means [`Provider::Anthropic`].
    pub fn parse(name: &str) -> Option<Provider> {
        crate::wire::aliases::lookup(name)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a provider name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider {0:?} (expected one of: openai-chat, openai-responses, anthropic, gemini, bedrock, ollama, ai-sdk, or a vendor alias such as openai, azure, mistral, groq)")]
pub struct UnknownProvider(pub String);

impl FromStr for Provider {
    type Err = UnknownProvider;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::parse(s).ok_or_else(|| UnknownProvider(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_round_trip_through_parse_and_serde() {
        for p in Provider::ALL {
            assert_eq!(Provider::parse(p.as_str()), Some(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Provider>(&json).unwrap(), p);
        }
    }

    #[test]
    fn vendor_aliases_map_to_wire_formats() {
        assert_eq!(Provider::parse("Groq"), Some(Provider::OpenaiChat));
        assert_eq!(Provider::parse("vertex"), Some(Provider::Gemini));
        assert!("nope".parse::<Provider>().is_err());
    }
}
