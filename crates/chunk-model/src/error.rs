//! Typed decode errors: every one names the provider, the field and a short excerpt.

use crate::provider::Provider;

/// Longest excerpt of the offending input kept in an error.
pub const EXCERPT_CHARS: usize = 120;

/// Why a chunk could not be decoded. Decoders never panic; they return one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not JSON (or not UTF-8).
    #[error("{provider}: chunk is not valid JSON ({detail}): {excerpt:?}")]
    NotJson {
        /// Which decoder.
        provider: Provider,
        /// serde_json's message.
        detail: String,
        /// The start of the input.
        excerpt: String,
    },
    /// A field that matters has the wrong type or shape.
    #[error("{provider}: field `{field}` {problem}: {excerpt:?}")]
    BadField {
        /// Which decoder.
        provider: Provider,
        /// JSON path of the field, e.g. `choices[0].delta.tool_calls[1].index`.
        field: String,
        /// What is wrong with it.
        problem: String,
        /// The start of the input.
        excerpt: String,
    },
    /// A tool-result message in none of the accepted shapes.
    #[error("tool result: {problem}: {excerpt:?}")]
    BadResult {
        /// What is wrong.
        problem: String,
        /// The start of the input.
        excerpt: String,
    },
}

impl DecodeError {
    /// The decoder that raised it, if any.
    pub fn provider(&self) -> Option<Provider> {
        match self {
            DecodeError::NotJson { provider, .. } | DecodeError::BadField { provider, .. } => {
                Some(*provider)
            }
            DecodeError::BadResult { .. } => None,
        }
    }

    /// Builds a [`DecodeError::NotJson`].
    pub fn not_json(provider: Provider, err: &serde_json::Error, input: &[u8]) -> DecodeError {
        DecodeError::NotJson {
            provider,
            detail: err.to_string(),
            excerpt: excerpt(input),
        }
    }

    /// Builds a [`DecodeError::BadField`].
    pub fn bad_field(
        provider: Provider,
        field: impl Into<String>,
        problem: impl Into<String>,
        input: &[u8],
    ) -> DecodeError {
        DecodeError::BadField {
            provider,
            field: field.into(),
            problem: problem.into(),
            excerpt: excerpt(input),
        }
    }
}

/// The first [`EXCERPT_CHARS`] characters of `input`, lossily decoded, cut on a char boundary.
pub fn excerpt(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if text.chars().nth(EXCERPT_CHARS).is_some() {
        out.push('…');
    }
    out
}
