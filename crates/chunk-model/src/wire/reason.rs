//! Every `reason` toolstream writes: [`Reason`] on events and calls (`tool_call.invalid`,
//! `tool_call.abandoned`, `tool_result.orphaned`, `calls[].reason` of `message.completed`),
//! [`DeadLetterCode`] as the code of a dead letter's `Toolstream-Reason: code: detail`, and
//! [`finish`], the finish reasons toolstream writes itself (providers' own pass through).
//!
//! The strings are the wire contract (README "Contracts", `schema/event.v1.schema.json`):
//! serde and [`Reason::as_str`] write the same snake_case names, pinned by a test.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Why a call ended `invalid` or `abandoned`, or a result was orphaned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The provider cut the message at its token limit (`length`, `max_tokens`, ...).
    Truncated,
    /// The argument text is not valid JSON.
    InvalidJson,
    /// The arguments nest deeper than 64 levels.
    ArgumentDepth,
    /// A sequence gap did not fill within `gap_timeout_ms`.
    Gap,
    /// The stream was idle longer than `idle_timeout_ms`.
    Timeout,
    /// The arguments grew past `max_argument_bytes`.
    ArgumentLimit,
    /// The message has more than `max_calls_per_message` calls.
    CallLimit,
    /// The call ended before its function name was known.
    NoName,
    /// The provider's content filter stopped the message.
    Filtered,
    /// The provider reported an error in the stream.
    ProviderError,
    /// An explicit `Toolstream-Control: end` arrived with the call still open.
    StreamEnded,
    /// An explicit `Toolstream-Control: error` arrived.
    StreamError,
    /// Structured argument pieces (Vertex `partialArgs`) do not build arguments.
    InvalidPartialArgs,
    /// A result whose call never appeared within `orphan_grace_ms`.
    NoCall,
    /// A chunk of the stream was dead-lettered (the stream has a hole).
    LostChunk,
}

impl Reason {
    /// Every reason, in a stable order.
    pub const ALL: [Reason; 15] = [
        Reason::Truncated,
        Reason::InvalidJson,
        Reason::ArgumentDepth,
        Reason::Gap,
        Reason::Timeout,
        Reason::ArgumentLimit,
        Reason::CallLimit,
        Reason::NoName,
        Reason::Filtered,
        Reason::ProviderError,
        Reason::StreamEnded,
        Reason::StreamError,
        Reason::InvalidPartialArgs,
        Reason::NoCall,
        Reason::LostChunk,
    ];

    /// The wire string (`argument_limit`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Truncated => "truncated",
            Reason::InvalidJson => "invalid_json",
            Reason::ArgumentDepth => "argument_depth",
            Reason::Gap => "gap",
            Reason::Timeout => "timeout",
            Reason::ArgumentLimit => "argument_limit",
            Reason::CallLimit => "call_limit",
            Reason::NoName => "no_name",
            Reason::Filtered => "filtered",
            Reason::ProviderError => "provider_error",
            Reason::StreamEnded => "stream_ended",
            Reason::StreamError => "stream_error",
            Reason::InvalidPartialArgs => "invalid_partial_args",
            Reason::NoCall => "no_call",
            Reason::LostChunk => "lost_chunk",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is no [`Reason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason {0:?}")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

/// The code of a dead letter's `Toolstream-Reason` (`code: detail`, or the code alone). The
/// log shows only the code: the detail may quote the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterCode {
    /// Does not decode as its provider's format (or as a tool result).
    DecodeError,
    /// No `Toolstream-Provider` on it or on any earlier chunk of its stream.
    NoProvider,
    /// A `Toolstream-Provider` nobody knows.
    UnknownProvider,
    /// An unreadable `Toolstream-Seq`.
    BadSeq,
    /// An unreadable `Toolstream-Control`.
    BadControl,
    /// Unnumbered in a numbered stream.
    MissingSeq,
    /// Numbered in an unnumbered stream.
    UnexpectedSeq,
    /// Reuses a `Toolstream-Seq` taken by other bytes (the first stays applied).
    ConflictingDuplicate,
    /// A call statement after its message ended.
    AfterMessageEnd,
    /// Its stream was already ended by a gap, a lost chunk, or retention.
    StreamClosed,
    /// Would open more than `max_open_streams` streams.
    OpenStreamLimit,
    /// A tool result carrying `Toolstream-Control`.
    ControlOnResults,
    /// Stopped the worker `max_deliver - 1` times while applied alone.
    Poison,
    /// Could not be stored after `max_deliver` deliveries.
    StoreError,
    /// Its subject names no conversation and message.
    UnroutableSubject,
    /// A row that could not be published even cut down (the relay's replacement).
    EventTooLarge,
    /// A tool result for a call that already has one, or that lost to the provider's own
    /// result for it (the result that stands is decided once and never changes, see README
    /// "Dead letters").
    DuplicateResult,
}

impl DeadLetterCode {
    /// Every code, in a stable order.
    pub const ALL: [DeadLetterCode; 17] = [
        DeadLetterCode::DecodeError,
        DeadLetterCode::NoProvider,
        DeadLetterCode::UnknownProvider,
        DeadLetterCode::BadSeq,
        DeadLetterCode::BadControl,
        DeadLetterCode::MissingSeq,
        DeadLetterCode::UnexpectedSeq,
        DeadLetterCode::ConflictingDuplicate,
        DeadLetterCode::AfterMessageEnd,
        DeadLetterCode::StreamClosed,
        DeadLetterCode::OpenStreamLimit,
        DeadLetterCode::ControlOnResults,
        DeadLetterCode::Poison,
        DeadLetterCode::StoreError,
        DeadLetterCode::UnroutableSubject,
        DeadLetterCode::EventTooLarge,
        DeadLetterCode::DuplicateResult,
    ];

    /// The wire string (`decode_error`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterCode::DecodeError => "decode_error",
            DeadLetterCode::NoProvider => "no_provider",
            DeadLetterCode::UnknownProvider => "unknown_provider",
            DeadLetterCode::BadSeq => "bad_seq",
            DeadLetterCode::BadControl => "bad_control",
            DeadLetterCode::MissingSeq => "missing_seq",
            DeadLetterCode::UnexpectedSeq => "unexpected_seq",
            DeadLetterCode::ConflictingDuplicate => "conflicting_duplicate",
            DeadLetterCode::AfterMessageEnd => "after_message_end",
            DeadLetterCode::StreamClosed => "stream_closed",
            DeadLetterCode::OpenStreamLimit => "open_stream_limit",
            DeadLetterCode::ControlOnResults => "control_on_results",
            DeadLetterCode::Poison => "poison",
            DeadLetterCode::StoreError => "store_error",
            DeadLetterCode::UnroutableSubject => "unroutable_subject",
            DeadLetterCode::EventTooLarge => "event_too_large",
            DeadLetterCode::DuplicateResult => "duplicate_result",
        }
    }

    /// The `Toolstream-Reason` value `code: detail`.
    pub fn with(self, detail: impl fmt::Display) -> String {
        format!("{}: {detail}", self.as_str())
    }

    /// The code a `Toolstream-Reason` value starts with, if it is one of ours.
    pub fn of(reason: &str) -> Option<DeadLetterCode> {
        let code = reason.split_once(':').map_or(reason, |(code, _)| code);
        code.trim().parse().ok()
    }
}

impl fmt::Display for DeadLetterCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeadLetterCode {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeadLetterCode::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

/// The finish reasons (`message.completed`'s `finish_reason`) toolstream writes itself. A
/// message ended by the provider keeps the provider's own (`tool_calls`, `max_tokens`, ...);
/// one ended by a timer or a hole gets the call [`Reason`] (`gap`, `timeout`, `lost_chunk`).
pub mod finish {
    /// A provider end that named no finish reason.
    pub const STOP: &str = "stop";
    /// The provider's end-of-stream marker (`[DONE]`, ...) ended the message.
    pub const STREAM_END: &str = "stream_end";
    /// `Toolstream-Control: end` ended the message.
    pub const CONTROL_END: &str = "control_end";
    /// `Toolstream-Control: error` ended the message.
    pub const CONTROL_ERROR: &str = "control_error";
    /// The provider reported an error in the stream.
    pub const PROVIDER_ERROR: &str = "provider_error";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_as_str_write_the_same_strings() {
        for r in Reason::ALL {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{r}\""));
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            let back: Reason = serde_json::from_str(&format!("\"{r}\"")).unwrap();
            assert_eq!(back, r);
        }
        for c in DeadLetterCode::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
            assert_eq!(c.as_str().parse::<DeadLetterCode>(), Ok(c));
        }
    }

    #[test]
    fn the_contract_strings_are_pinned() {
        // README "Contracts": the reasons of events, then the dead-letter codes.
        let reasons: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "truncated",
                "invalid_json",
                "argument_depth",
                "gap",
                "timeout",
                "argument_limit",
                "call_limit",
                "no_name",
                "filtered",
                "provider_error",
                "stream_ended",
                "stream_error",
                "invalid_partial_args",
                "no_call",
                "lost_chunk",
            ]
        );
        let codes: Vec<&str> = DeadLetterCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes,
            [
                "decode_error",
                "no_provider",
                "unknown_provider",
                "bad_seq",
                "bad_control",
                "missing_seq",
                "unexpected_seq",
                "conflicting_duplicate",
                "after_message_end",
                "stream_closed",
                "open_stream_limit",
                "control_on_results",
                "poison",
                "store_error",
                "unroutable_subject",
                "event_too_large",
                "duplicate_result",
            ]
        );
    }

    #[test]
    fn a_reason_header_names_its_code() {
        let header = DeadLetterCode::DecodeError.with("expected value at line 1");
        assert_eq!(header, "decode_error: expected value at line 1");
        assert_eq!(
            DeadLetterCode::of(&header),
            Some(DeadLetterCode::DecodeError)
        );
        assert_eq!(
            DeadLetterCode::of("open_stream_limit"),
            Some(DeadLetterCode::OpenStreamLimit)
        );
        assert_eq!(DeadLetterCode::of("something: else"), None);
        assert!("no_matching_call".parse::<Reason>().is_err());
    }
}
