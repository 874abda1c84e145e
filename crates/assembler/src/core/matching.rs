//! Matching tool results to calls, and orphaning the ones whose call never appears: the
//! decisions, as pure functions over what the store read. The store (`store::results`) only
//! carries them out (reads, writes, events).
//!
//! The rules (README "Contracts", `tool_result.*` events):
//! - Results are matched by call id within the conversation: a call is indexed
//!   ([`CallIndex`]) once its consumer-facing id is fixed; a result waits ([`PendingResult`])
//!   until it is complete *and* its call is indexed, whichever comes last.
//! - The first complete result of a call wins: once the call is `resolved`, later results for
//!   the same id change nothing, and a blank id is no result at all.
//! - A result whose call is not indexed within `orphan_grace_ms` of its first piece is
//!   orphaned: `tool_result.orphaned` (`no_call`) on the message it arrived on. A second
//!   result for an id already orphaned in that message is dropped (the first stays, and the
//!   same event is not emitted twice).
//! - A result whose call *is* indexed but which is still incomplete when its timer runs out
//!   is kept: it is matched when it completes.

use super::emit;
use super::results::PendingResult;
use super::state::MessageState;
use chunk_model::wire::Reason;
use chunk_model::{Event, EventType, Provider, ToolResult};
use serde::{Deserialize, Serialize};

/// A registered call, for matching results by consumer-facing id within a conversation
/// (stored per (conversation, id)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallIndex {
    /// The call's message.
    pub message_id: String,
    /// The call's position.
    pub index: u32,
    /// A result was matched to it (later results for the same id change nothing).
    #[serde(default)]
    pub resolved: bool,
}

/// What a result input leads to, once absorbed into its pending result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultDecision {
    /// Complete, and its call is indexed: emit `tool_result.completed` on the call's message
    /// (`message_id`, call `index`), mark the call resolved, drop the pending result.
    Match {
        /// The call's message.
        message_id: String,
        /// The call's position.
        index: u32,
    },
    /// Incomplete, or its call is not known yet: keep it pending (the orphan timer runs from
    /// its first piece).
    Wait,
}

/// Whether a result input for call `id` is taken at all: not with a blank id, nor for a call
/// already answered (its first result stays).
pub fn takes_result(id: &str, index: Option<&CallIndex>) -> bool {
    !id.trim().is_empty() && !index.is_some_and(|i| i.resolved)
}

/// Where a taken result input leaves its `pending` result (after
/// [`PendingResult::absorb`]), given the call's index.
pub fn on_result(index: Option<&CallIndex>, pending: &PendingResult) -> ResultDecision {
    match index {
        Some(i) if pending.done => ResultDecision::Match {
            message_id: i.message_id.clone(),
            index: i.index,
        },
        _ => ResultDecision::Wait,
    }
}

/// What registering a call (its id just fixed) leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterDecision {
    /// The id is already answered (a call of another message with the same id got its
    /// result): nothing changes.
    Skip,
    /// Index the call (unresolved); with `matches`, the complete result already waiting for
    /// it is matched now ([`ResultDecision::Match`] on this call).
    Index {
        /// A complete result is pending for the id.
        matches: bool,
    },
}

/// The decision for registering a call, given the id's current index and pending result.
pub fn on_register(
    existing: Option<&CallIndex>,
    pending: Option<&PendingResult>,
) -> RegisterDecision {
    if existing.is_some_and(|i| i.resolved) {
        return RegisterDecision::Skip;
    }
    RegisterDecision::Index {
        matches: pending.is_some_and(|p| p.done),
    }
}

/// What the orphan timer of a pending result leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrphanDecision {
    /// Its call is indexed (the result is incomplete and will match when complete): leave it;
    /// the timer is done.
    Keep,
    /// Nothing is pending any more (matched or orphaned since): nothing to do.
    Nothing,
    /// Orphan it on the message it arrived on (`message_id`), unless
    /// [`orphan_is_repeat`] (then drop it without an event).
    Orphan {
        /// The message of the results subject it arrived on.
        message_id: String,
    },
}

/// The decision when the orphan timer of the result for a call id runs out.
pub fn on_orphan_timer(call_indexed: bool, pending: Option<&PendingResult>) -> OrphanDecision {
    match pending {
        _ if call_indexed => OrphanDecision::Keep,
        None => OrphanDecision::Nothing,
        Some(p) => OrphanDecision::Orphan {
            message_id: p.message_id.clone(),
        },
    }
}

/// Whether `message` (the one an orphan goes to) already lists an orphaned result for `id`:
/// the new one is then dropped (found by cargo fuzz: the same `event_id` was written again).
pub fn orphan_is_repeat(message: Option<&MessageState>, id: &str) -> bool {
    message.is_some_and(|m| m.orphaned_results.iter().any(|r| r.tool_call_id == id))
}

/// The `tool_result.completed` event of a result matched to a call of message `call_msg`.
pub fn matched_event(
    conv: &str,
    call_msg: &str,
    provider: Option<Provider>,
    result: &ToolResult,
) -> Event {
    emit::result_event(
        conv,
        call_msg,
        provider,
        result,
        EventType::ToolResultCompleted,
        None,
    )
}

/// The `tool_result.orphaned` event (`no_call`) of a result orphaned on message `msg`.
pub fn orphaned_event(
    conv: &str,
    msg: &str,
    provider: Option<Provider>,
    result: &ToolResult,
) -> Event {
    emit::result_event(
        conv,
        msg,
        provider,
        result,
        EventType::ToolResultOrphaned,
        Some(Reason::NoCall.as_str()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(resolved: bool) -> CallIndex {
        CallIndex {
            message_id: "m1".into(),
            index: 2,
            resolved,
        }
    }

    fn pending(done: bool) -> PendingResult {
        let mut p = PendingResult::new("r1", 5);
        p.done = done;
        p
    }

    #[test]
    fn a_result_matches_only_when_complete_and_its_call_is_indexed() {
        let i = index(false);
        assert_eq!(
            on_result(Some(&i), &pending(true)),
            ResultDecision::Match {
                message_id: "m1".into(),
                index: 2
            }
        );
        assert_eq!(on_result(Some(&i), &pending(false)), ResultDecision::Wait);
        assert_eq!(on_result(None, &pending(true)), ResultDecision::Wait);
    }

    #[test]
    fn the_first_result_of_a_call_wins_and_blank_ids_are_no_result() {
        assert!(takes_result("call_1", None));
        assert!(takes_result("call_1", Some(&index(false))));
        assert!(!takes_result("call_1", Some(&index(true))));
        assert!(!takes_result("  ", None));
    }

    #[test]
    fn registering_matches_a_waiting_complete_result() {
        assert_eq!(
            on_register(Some(&index(true)), Some(&pending(true))),
            RegisterDecision::Skip
        );
        assert_eq!(
            on_register(None, Some(&pending(true))),
            RegisterDecision::Index { matches: true }
        );
        assert_eq!(
            on_register(Some(&index(false)), Some(&pending(false))),
            RegisterDecision::Index { matches: false }
        );
        assert_eq!(
            on_register(None, None),
            RegisterDecision::Index { matches: false }
        );
    }

    #[test]
    fn only_a_result_without_a_call_is_orphaned_once() {
        assert_eq!(
            on_orphan_timer(true, Some(&pending(false))),
            OrphanDecision::Keep
        );
        assert_eq!(on_orphan_timer(false, None), OrphanDecision::Nothing);
        assert_eq!(
            on_orphan_timer(false, Some(&pending(true))),
            OrphanDecision::Orphan {
                message_id: "r1".into()
            }
        );
        let mut m = MessageState::new("c", "r1", None, 0);
        assert!(!orphan_is_repeat(Some(&m), "call_1"));
        m.orphaned_results.push(ToolResult {
            tool_call_id: "call_1".into(),
            output: "x".into(),
            is_error: false,
        });
        assert!(orphan_is_repeat(Some(&m), "call_1"));
        assert!(!orphan_is_repeat(None, "call_1"));
        let ev = orphaned_event("c", "r1", None, &m.orphaned_results[0]);
        assert_eq!(ev.reason.as_deref(), Some("no_call"));
    }
}
