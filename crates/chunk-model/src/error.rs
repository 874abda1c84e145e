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
    /// The JSON nests arrays/objects deeper than [`crate::depth::MAX_JSON_DEPTH`] levels
    /// (checked before parsing, wherever the deep part is).
    #[error("{provider}: JSON nested deeper than {limit} levels (recursion limit): {excerpt:?}")]
    TooDeep {
        /// Which decoder.
        provider: Provider,
        /// The limit it is over.
        limit: usize,
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
            DecodeError::NotJson { provider, .. }
            | DecodeError::BadField { provider, .. }
            | DecodeError::TooDeep { provider, .. } => Some(*provider),
            DecodeError::BadResult { .. } => None,
        }
    }

    /// Builds the error for input serde_json could not parse: [`DecodeError::TooDeep`] for
    /// its recursion limit, else [`DecodeError::NotJson`] whose detail says what is wrong
    /// (see [`json_problem`]).
    pub fn not_json(provider: Provider, err: &serde_json::Error, input: &[u8]) -> DecodeError {
        DecodeError::not_json_message(provider, err.to_string(), err.is_eof(), input)
    }

    /// Like [`DecodeError::not_json`], from serde_json's `message` (with its ` at line L column
    /// C`) and whether it is an end-of-input error: for readers that word serde_json's errors
    /// themselves (the decoders' JSON reader, `decode/reader/`).
    pub(crate) fn not_json_message(
        provider: Provider,
        message: String,
        is_eof: bool,
        input: &[u8],
    ) -> DecodeError {
        match json_problem_of(message, is_eof, input) {
            JsonProblem::TooDeep => DecodeError::too_deep(provider, input),
            JsonProblem::Other(detail) => DecodeError::NotJson {
                provider,
                detail,
                excerpt: excerpt(input),
            },
        }
    }

    /// Builds a [`DecodeError::TooDeep`] at [`crate::depth::MAX_JSON_DEPTH`].
    pub fn too_deep(provider: Provider, input: &[u8]) -> DecodeError {
        DecodeError::TooDeep {
            provider,
            limit: crate::depth::MAX_JSON_DEPTH,
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

/// What is wrong with input serde_json refused, in words a producer can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonProblem {
    /// Over serde_json's recursion limit ([`crate::depth::MAX_JSON_DEPTH`]).
    TooDeep,
    /// Anything else: `empty`, `not UTF-8 (invalid byte 0xFF at offset 9)`, `truncated (EOF
    /// while parsing a string at line 1 column 95)`, or serde_json's own message.
    Other(String),
}

/// Classifies a serde_json error on `input`. Only called on the error path, so good input
/// pays nothing for it.
pub fn json_problem(err: &serde_json::Error, input: &[u8]) -> JsonProblem {
    json_problem_of(err.to_string(), err.is_eof(), input)
}

/// [`json_problem`] from serde_json's message and whether it is an end-of-input error.
fn json_problem_of(message: String, is_eof: bool, input: &[u8]) -> JsonProblem {
    if input.trim_ascii().is_empty() {
        return JsonProblem::Other("empty".to_string());
    }
    if message.starts_with("recursion limit exceeded") {
        return JsonProblem::TooDeep;
    }
    if let Err(bad) = std::str::from_utf8(input) {
        let offset = bad.valid_up_to();
        let byte = input.get(offset).copied().unwrap_or_default();
        return JsonProblem::Other(format!(
            "not UTF-8: invalid byte 0x{byte:02X} at offset {offset}"
        ));
    }
    if is_eof {
        return JsonProblem::Other(format!("truncated: {message}"));
    }
    JsonProblem::Other(message)
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
