//! Per-stream ordering: which inputs to apply, drop as duplicates, or park ahead of a gap;
//! and the stream's timers.
//!
//! A stream is (kind, conversation, message). With producer sequence numbers it must be
//! contiguous from 0: `seq < next` or already parked is a duplicate, `seq > next` is parked,
//! `seq == next` applies (and releases parked successors). With transport sequence numbers
//! (JetStream stream seq: increasing, not contiguous) only `seq <= last` is a duplicate.
//!
//! Gap decision: when a gap stays unfilled for `gap_timeout_ms` after the first input was
//! parked behind it, a *chunk* stream's message ends (open calls `abandoned`, reason `gap`),
//! its parked chunks are discarded (applying them across a hole would assemble wrong text)
//! and the stream is closed: later inputs are consumed without effect. A *result* stream
//! instead skips the gap and applies what is parked (results are independent messages).

use crate::input::Seq;
use chunk_model::Provider;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The ordering state of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamState {
    /// Next expected producer sequence number.
    #[serde(default)]
    pub next: u64,
    /// Highest applied transport sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transport: Option<u64>,
    /// Producer sequence numbers parked ahead of a gap.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub parked: BTreeSet<u64>,
    /// When the current gap was first waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_since_ms: Option<u64>,
    /// Time of the last input applied or parked.
    #[serde(default)]
    pub last_activity_ms: u64,
    /// Provider named by an earlier input (header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// Chunk streams: the message has not completed yet (counts toward open streams, idle
    /// timeout applies).
    #[serde(default)]
    pub open: bool,
    /// Closed after a gap timeout: later inputs are consumed without effect.
    #[serde(default)]
    pub closed: bool,
}

/// What to do with an input, given its stream's state.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Apply it now.
    Apply,
    /// Already applied or parked: change nothing.
    Duplicate,
    /// Ahead of a gap: park it.
    Park,
    /// The stream was closed: consume it without effect.
    Closed,
}

impl StreamState {
    /// Decides what to do with an input numbered `seq`.
    pub fn admit(&self, seq: Seq) -> Admission {
        match seq {
            Seq::Producer(s) if s < self.next || self.parked.contains(&s) => Admission::Duplicate,
            Seq::Transport(s) if self.last_transport.is_some_and(|l| s <= l) => {
                Admission::Duplicate
            }
            _ if self.closed => Admission::Closed,
            Seq::Producer(s) if s > self.next => Admission::Park,
            Seq::Producer(_) | Seq::Transport(_) => Admission::Apply,
        }
    }

    /// Records that `seq` was consumed (applied, dead-lettered or dropped as closed).
    pub fn consumed(&mut self, seq: Seq, now_ms: u64) {
        match seq {
            Seq::Producer(s) => self.next = self.next.max(s.saturating_add(1)),
            Seq::Transport(s) => {
                self.last_transport = Some(self.last_transport.map_or(s, |l| l.max(s)))
            }
        }
        self.last_activity_ms = now_ms;
        if self.parked.is_empty() {
            self.gap_since_ms = None;
        }
    }

    /// Records that `seq` was parked.
    pub fn park(&mut self, seq: u64, now_ms: u64) {
        self.parked.insert(seq);
        self.last_activity_ms = now_ms;
        if self.gap_since_ms.is_none() {
            self.gap_since_ms = Some(now_ms);
        }
    }

    /// The parked sequence number that may be applied now (`next`), removing it from the
    /// parked set. When the last parked input is released the gap timer stops; when inputs
    /// stay parked behind a new gap, the timer restarts at `now_ms`.
    pub fn release_next(&mut self, now_ms: u64) -> Option<u64> {
        if self.parked.remove(&self.next) {
            let s = self.next;
            self.gap_since_ms = if self.parked.is_empty() {
                None
            } else {
                Some(now_ms)
            };
            Some(s)
        } else {
            None
        }
    }

    /// Whether the gap timer has run out at `now_ms`.
    pub fn gap_expired(&self, now_ms: u64, gap_timeout_ms: u64) -> bool {
        self.gap_since_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= gap_timeout_ms)
    }

    /// Whether an open chunk stream has been idle too long at `now_ms`.
    pub fn idle_expired(&self, now_ms: u64, idle_timeout_ms: u64) -> bool {
        self.open && now_ms.saturating_sub(self.last_activity_ms) >= idle_timeout_ms
    }
}
