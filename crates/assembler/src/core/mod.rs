//! The pure assembly core: no I/O, no clock (time comes in as a value).
//!
//! - [`state`] — [`MessageState`] / [`CallState`]: what is known about a message's calls.
//! - [`mod@step`] — applies one normalized [`chunk_model::ChunkEvent`] to a message: identity
//!   matching, appending, ends, limits. Returns the events and argument writes it caused.
//! - [`end`] — ending calls and messages (judging arguments, reasons) and `message.completed`.
//! - [`output`] — [`StepOutput`] / [`ArgOp`]: what a step caused (shared by `step` and `end`,
//!   which calls nothing in `step`: the dependency runs one way).
//! - [`emit`] — building [`chunk_model::Event`]s with deterministic ids.
//! - [`order`] — per-stream ordering decisions (apply / duplicate / park) and timers.
//! - [`results`] — tool results assembled while they wait for their call.
//! - [`matching`] — matching results to calls, deciding which result of a call stands, and
//!   orphaning them: pure decisions ([`matching::Intake`], [`matching::ResultDecision`],
//!   [`matching::RegisterDecision`], [`matching::OrphanDecision`]) the store carries out.
//! - [`snapshot`] — a message's state as a [`chunk_model::MessageSnapshot`].
//! - [`preview`] — argument previews (`tool_call.delta`): which calls' deltas are due, their
//!   text and `partial_arguments` (best-effort parse of a JSON prefix).

pub mod emit;
pub mod end;
pub mod matching;
pub mod order;
pub mod output;
pub mod preview;
pub mod results;
pub mod snapshot;
pub mod state;
pub mod step;

pub use end::{complete_if_done, end_message, EndHow};
pub use matching::{
    CallIndex, DuplicateWhy, Intake, OrphanDecision, RegisterDecision, ResultDecision,
};
pub use order::{Admission, StreamState};
pub use output::{ArgOp, StepOutput};
pub use results::{PendingResult, ResultSource};
pub use state::{
    Arguments, CallState, Limits, MessagePhase, MessageState, ReasoningState, REASONING_PIECES,
};
pub use step::step;
