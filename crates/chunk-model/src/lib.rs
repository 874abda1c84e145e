//! # chunk-model
//!
//! Wire types and pure conversions for toolstream. No I/O, no async, no clock: every function
//! here is a deterministic transformation of its inputs, pinned by golden fixtures.
//!
//! ## Layout
//! - [`provider`] — the [`Provider`] stream formats and their names/aliases.
//! - [`chunk`] — normalized chunk events ([`ChunkEvent`]): the seam between decoders and the
//!   assembler.
//! - [`call`] — canonical [`ToolCall`], [`ToolResult`], [`CallStatus`], results as input.
//! - [`event`] — the output contract: [`Event`], [`EventType`], deterministic event ids.
//! - [`decode`] — one file per provider: raw chunk bytes → `Vec<ChunkEvent>`; tool results;
//!   provider detection; `decode/reader/`, the JSON reader the OpenAI chat decoder walks a
//!   chunk with (serde_json's acceptance and errors, without serde's cost).
//! - [`depth`] — nesting bounds (input JSON, arguments, metadata): no input drives an
//!   unbounded recursion.
//! - [`partial_args`] — rebuilds arguments from structured pieces (Vertex `partialArgs`).
//! - [`framing`] — splits a recorded stream (SSE or NDJSON, detected) into chunk bodies.
//! - [`encode`] — renders stored calls and results back into each provider's request format,
//!   with per-provider id mapping.
//! - [`history`] — history policy: truncation, windows that keep calls with results, orphan and
//!   placeholder handling, strict text mode, token estimate.
//! - [`snapshot`] — [`MessageSnapshot`]: the stored state of a message (query API, history input).
//! - [`error`] — typed [`DecodeError`]s naming provider, field and an excerpt.
//! - [`wire`] — the wire contract in one place: header names, subjects (builders and
//!   parsers), the one subject-token rule, `Nats-Msg-Id` formats, [`wire::Reason`] and
//!   dead-letter codes, the one provider alias table. Every crate and the CLI use it.
//!
//! The JSON Schema of events lives in `schema/event.v1.schema.json`; golden events in
//! `tests/golden/`.

pub mod call;
pub mod chunk;
pub mod decode;
pub mod depth;
pub mod encode;
pub mod error;
pub mod event;
pub mod framing;
pub mod history;
pub mod partial_args;
pub mod provider;
pub mod snapshot;
pub mod wire;

pub use call::{
    parse_arguments, ArgumentsError, CallKind, CallOutcome, CallStatus, ResultInput, ToolCall,
    ToolResult,
};
pub use chunk::{
    CallEnd, CallFragment, CallRef, ChunkEvent, Finish, PathValue, ReasoningKind, ReasoningPiece,
    ResultBlockPiece,
};
pub use decode::{decode, decode_result, detect_provider};
pub use error::DecodeError;
pub use event::{
    event_id, synthetic_call_id, Event, EventSubject, EventType, Offload, PayloadRef,
    SCHEMA_VERSION,
};
pub use provider::{Provider, UnknownProvider};
pub use snapshot::{MessageSnapshot, MessageStatus};
