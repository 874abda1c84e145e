//! Per-stream ordering: which inputs to apply, drop as duplicates, or park ahead of a gap;
//! and the stream's timers.
//!
//! A stream is (kind, conversation, message). With producer sequence numbers it must be
//! contiguous from 0: `seq < next` is a duplicate, `seq > next` is parked (the store also
//! treats an input already parked as a duplicate: the parked records themselves are the set,
//! so parking costs O(1) per input however far ahead a producer runs), `seq == next`
//! applies (and releases parked successors). With transport sequence numbers
//! (JetStream stream seq: increasing, not contiguous) only `seq <= last` is a duplicate.
//!
//! Gap decision: when a gap stays unfilled for `gap_timeout_ms` after the first input was
//! parked behind it, a *chunk* stream's message ends (open calls `abandoned`, reason `gap`),
//! its parked chunks are discarded (applying them across a hole would assemble wrong text)
//! and the stream is closed: later inputs are consumed without effect. A *result* stream
//! instead skips the gap and applies what is parked (results are independent messages).
//!
//! Times are whatever clock the caller applies inputs and ticks with; the worker applies each
//! input at its publish time and ticks at the time up to which all input is settled, so a
//! redelivered older input never moves a stream's activity back (`max`), and a timer cannot
//! run out while input from before its deadline is still on its way.

use crate::input::{InputKind, Seq};
use chunk_model::wire::DeadLetterCode;
use chunk_model::Provider;
use serde::{Deserialize, Serialize};

/// The ordering state of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamState {
    /// Next expected producer sequence number.
    #[serde(default)]
    pub next: u64,
    /// Highest applied transport sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transport: Option<u64>,
    /// How many inputs are parked ahead of a gap (their records are in the parked keyspace).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub parked: u64,
    /// When the current gap was first waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_since_ms: Option<u64>,
    /// Time of the latest input applied or parked (the newest, not the last to arrive).
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
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// Chunk streams of OpenAI chat with `n > 1`: the highest choice index seen, plus one (0
    /// or 1: one choice). Choice `k > 0` is its own message
    /// (`chunk_model::decode::openai_chat::choice_message`), ended with the stream.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub choices: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// (Fields at their default are not written: every commit of a stream rewrites its state.)
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// What to do with an input, given its stream's state.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Apply it now.
    Apply,
    /// Already applied: change nothing.
    Duplicate,
    /// Ahead of a gap: park it (unless it is parked already).
    Park,
    /// The stream was closed: consume it without effect.
    Closed,
}

impl StreamState {
    /// How many choices the stream has carried (at least one).
    pub fn choice_count(&self) -> u32 {
        self.choices.max(1)
    }

    /// Why a chunk numbered unlike the chunks this stream already has (no `Toolstream-Seq`
    /// in a numbered stream, or the reverse) cannot be placed: its dead-letter reason
    /// (`missing_seq`, `unexpected_seq`), if so. Explicit ends (`has_control`) may come
    /// unnumbered; results are matched by call id and may come either way.
    pub fn numbered_unlike(&self, kind: InputKind, has_control: bool, seq: Seq) -> Option<String> {
        if kind != InputKind::Chunk || has_control {
            return None;
        }
        let numbered = self.next > 0 || self.parked > 0;
        let unnumbered = self.last_transport.is_some();
        match seq {
            Seq::Transport(_) if numbered && !unnumbered => Some(
                DeadLetterCode::MissingSeq
                    .with("no Toolstream-Seq on a chunk of a stream whose chunks are numbered"),
            ),
            Seq::Producer(_) if unnumbered && !numbered => Some(
                DeadLetterCode::UnexpectedSeq
                    .with("a Toolstream-Seq on a chunk of a stream whose chunks are not numbered"),
            ),
            _ => None,
        }
    }

    /// Decides what to do with an input numbered `seq`.
    pub fn admit(&self, seq: Seq) -> Admission {
        match seq {
            Seq::Producer(s) if s < self.next => Admission::Duplicate,
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
        self.last_activity_ms = self.last_activity_ms.max(now_ms);
        if self.parked == 0 {
            self.gap_since_ms = None;
        }
    }

    /// Records that an input was parked.
    pub fn park(&mut self, now_ms: u64) {
        self.parked += 1;
        self.last_activity_ms = self.last_activity_ms.max(now_ms);
        if self.gap_since_ms.is_none() {
            self.gap_since_ms = Some(now_ms);
        }
    }

    /// Records that the parked input numbered `next` was taken out to be applied. When the
    /// last parked input is released the gap timer stops; when inputs stay parked behind a
    /// new gap, the timer restarts at `now_ms`.
    pub fn released(&mut self, now_ms: u64) {
        self.parked = self.parked.saturating_sub(1);
        self.gap_since_ms = if self.parked == 0 { None } else { Some(now_ms) };
    }

    /// Records that every parked input was discarded.
    pub fn discard_parked(&mut self) {
        self.parked = 0;
        self.gap_since_ms = None;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_numbered_unlike_its_stream_is_refused_with_its_code() {
        let numbered = StreamState {
            next: 2,
            ..StreamState::default()
        };
        let unnumbered = StreamState {
            last_transport: Some(7),
            ..StreamState::default()
        };
        let code = |r: Option<String>| r.and_then(|r| DeadLetterCode::of(&r));
        let chunk = InputKind::Chunk;
        assert_eq!(
            code(numbered.numbered_unlike(chunk, false, Seq::Transport(9))),
            Some(DeadLetterCode::MissingSeq)
        );
        assert_eq!(
            code(unnumbered.numbered_unlike(chunk, false, Seq::Producer(0))),
            Some(DeadLetterCode::UnexpectedSeq)
        );
        // ends may come unnumbered, results either way, and a fresh stream takes both
        assert_eq!(
            numbered.numbered_unlike(chunk, true, Seq::Transport(9)),
            None
        );
        assert_eq!(
            numbered.numbered_unlike(InputKind::Result, false, Seq::Transport(9)),
            None
        );
        let fresh = StreamState::default();
        assert_eq!(fresh.numbered_unlike(chunk, false, Seq::Transport(1)), None);
        assert_eq!(fresh.numbered_unlike(chunk, false, Seq::Producer(0)), None);
        assert_eq!(
            numbered.numbered_unlike(chunk, false, Seq::Producer(2)),
            None
        );
    }
}
