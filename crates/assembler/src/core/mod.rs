//! The pure assembly core: no I/O, no clock (time comes in as a value).
//!
//! - [`state`] — [`MessageState`] / [`CallState`]: what is known about a message's calls.
//! - [`mod@step`] — applies one normalized [`chunk_model::ChunkEvent`] to a message: identity
//!   matching, appending, ends, limits. Returns the events and argument writes it caused.
//! - [`end`] — ending calls and messages (judging arguments, reasons) and `message.completed`.
//! - [`emit`] — building [`chunk_model::Event`]s with deterministic ids.
//! - [`order`] — per-stream ordering decisions (apply / duplicate / park) and timers.
//! - [`results`] — assembling tool results and deciding when they match or are orphaned.

pub mod emit;
pub mod end;
pub mod order;
pub mod results;
pub mod state;
pub mod step;

pub use end::{complete_if_done, end_message, EndHow};
pub use order::{Admission, StreamState};
pub use results::PendingResult;
pub use state::{CallState, Limits, MessagePhase, MessageState};
pub use step::{step, ArgOp, StepOutput};
