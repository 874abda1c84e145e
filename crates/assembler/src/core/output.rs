//! What a core step caused: argument writes and events for the store to persist. Shared by
//! [`super::step`] and [`super::end`], so neither imports the other's types (`step` calls
//! into `end`; `end` needs only these).

use chunk_model::{Event, ResultInput};

/// A write of argument text the store must persist (the core holds the text in memory only
/// while the store lets it: see [`super::CallState::text_held`] and [`super::step::needs_text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgOp {
    /// Append `text` as piece number `piece` of call `call`.
    Append {
        /// Call position.
        call: u32,
        /// Piece number (0-based, consecutive).
        piece: u32,
        /// The text.
        text: String,
    },
    /// Append one structured argument piece (stored as its JSON) as piece number `piece` of
    /// call `call`'s structured pieces.
    AppendPath {
        /// Call position.
        call: u32,
        /// Piece number (0-based, consecutive).
        piece: u32,
        /// The piece as JSON text.
        json: String,
    },
    /// Replace the call's `old_pieces` pieces with one piece (number 0) holding `text`.
    Replace {
        /// Call position.
        call: u32,
        /// How many pieces were stored before.
        old_pieces: u32,
        /// The complete text.
        text: String,
    },
}

/// What one step caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    /// Events, in order.
    pub events: Vec<Event>,
    /// Argument writes, in order.
    pub arg_ops: Vec<ArgOp>,
    /// Calls whose consumer-facing id was fixed (results may now match them).
    pub registered: Vec<u32>,
    /// Tool results carried inside the call stream (AI SDK `tool-result`).
    pub results: Vec<ResultInput>,
    /// A call statement arrived after the message ended and carried something it cannot
    /// take (argument text or structured pieces, or a call the message does not know).
    pub after_end: bool,
    /// A step built an event or judged a call whose argument text was not held in memory
    /// (the store did not read it back first, see [`super::step::needs_text`]): the events are wrong and
    /// the store must not commit them.
    pub text_missing: bool,
}

impl StepOutput {
    /// Appends an event when there is one.
    pub fn push_event(&mut self, ev: Option<Event>) {
        if let Some(ev) = ev {
            self.events.push(ev);
        }
    }

    /// Empties every list, keeping allocations.
    pub fn clear(&mut self) {
        self.events.clear();
        self.arg_ops.clear();
        self.registered.clear();
        self.results.clear();
        self.after_end = false;
        self.text_missing = false;
    }
}
