//! Matching tool results to calls, deciding which result of a call stands, and orphaning the
//! ones whose call never appears: the decisions, as pure functions over what the store read.
//! The store (`store::results`) only carries them out (reads, writes, events, dead letters).
//!
//! The rules (README "Contracts", `tool_result.*` events and "Dead letters"):
//! - Results are matched by call id within the conversation: a call is indexed
//!   ([`CallIndex`]) once its consumer-facing id is fixed; a result waits ([`PendingResult`])
//!   until it is complete *and* its call is indexed, whichever comes last.
//! - **One result per call, decided once.** A call has at most one result, and which one it
//!   is never depends on how inputs of different subjects interleave (so a crash and
//!   redelivery cannot change it):
//!   - the provider's own result, carried in the call's stream ([`ResultSource::Stream`]),
//!     stands over any producer-published one. So a producer result for a call whose message
//!     may still carry one ([`awaits_stream`]: the message is open and its provider's streams
//!     carry results: Anthropic, OpenAI Responses, AI SDK, Bedrock) waits until that message ends
//!     ([`releases`]); if the provider's result arrives meanwhile it takes the call and the
//!     waiting one is dead-lettered ([`Intake::Displace`]);
//!   - otherwise the first result taken stands: every later one for the same id (a second
//!     whole result, pieces of a second streamed result, any result once the call is
//!     answered) is dead-lettered `duplicate_result` ([`Intake::Duplicate`]). "First" is
//!     the order inputs become durable in the store, which a crash never reorders: what was
//!     flushed stays, what was not is redelivered in its stream's order.
//! - A blank id is no result at all (decoders never produce one).
//! - A result whose call is not indexed within `orphan_grace_ms` of its first piece is
//!   orphaned: `tool_result.orphaned` (`no_call`) on the message it arrived on. A second
//!   result for an id already orphaned in that message is dead-lettered `duplicate_result`
//!   (the first stays, and the same event is not emitted twice).
//! - A result whose call *is* indexed but which is still incomplete (or waiting for its
//!   call's message to end) when its timer runs out is kept: it is matched when it can be.

use super::emit;
use super::results::{PendingResult, ResultSource};
use super::state::MessageState;
use chunk_model::wire::Reason;
use chunk_model::{Event, EventType, Provider, ResultInput, ToolResult};
use serde::{Deserialize, Serialize};

/// A registered call, for matching results by consumer-facing id within a conversation
/// (stored per (conversation, id)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallIndex {
    /// The call's message.
    pub message_id: String,
    /// The call's position.
    pub index: u32,
    /// A result was matched to it (later results for the same id are `duplicate_result`).
    #[serde(default)]
    pub resolved: bool,
    /// The result matched to it is the provider's own (carried in the call's stream).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_stream: bool,
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
    /// Incomplete, its call is not known yet, or (a producer result) its call's message may
    /// still carry the provider's own result: keep it pending (the orphan timer runs from its
    /// first piece).
    Wait,
}

/// Why a result does not stand (the detail of its `duplicate_result` dead letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DuplicateWhy {
    /// The call already has its result: matched, or complete and waiting (for its call, or
    /// for the call's message to end). The same words either way, so the dead letter does
    /// not depend on when the first result was matched.
    Answered,
    /// A whole result while a streamed result for the id is under way.
    Streaming,
    /// A piece of a streamed result while another message's streamed result for the id is
    /// under way.
    OtherStream,
    /// The provider's own result for the call, carried in its stream, stands over this
    /// producer result (whether it came before or after it).
    Displaced,
    /// A result for the id was already orphaned on the same message.
    Orphaned,
}

impl DuplicateWhy {
    /// The dead letter's detail for a result of call `id`.
    pub fn detail(self, id: &str) -> String {
        match self {
            DuplicateWhy::Answered => {
                format!("call {id} already has a result (the first one stands)")
            }
            DuplicateWhy::Streaming => {
                format!("a streamed result for call {id} is under way (the first one stands)")
            }
            DuplicateWhy::OtherStream => format!(
                "a streamed result for call {id} from another message is under way (the \
                 first one stands)"
            ),
            DuplicateWhy::Displaced => format!(
                "the provider's own result for call {id}, carried in its stream, stands over \
                 this one"
            ),
            DuplicateWhy::Orphaned => format!(
                "a result for call {id} was already orphaned on this message (the first one \
                 stands)"
            ),
        }
    }
}

/// What becomes of a result input, before it is absorbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// A blank id: no result at all.
    Ignore,
    /// Taken: absorbed into the pending result of its id (a new one when there is none).
    Take,
    /// The provider's own result, while a producer result for the id is pending: the pending
    /// one is dead-lettered ([`DuplicateWhy::Displaced`]), then this one is taken as new.
    Displace,
    /// It does not stand: dead-lettered `duplicate_result`, nothing else changes.
    Duplicate(DuplicateWhy),
}

/// The intake of result `input` from `source`, arrived on message `rmsg`, given the id's
/// call index and pending result.
pub fn on_intake(
    input: &ResultInput,
    rmsg: &str,
    source: ResultSource,
    index: Option<&CallIndex>,
    pending: Option<&PendingResult>,
) -> Intake {
    if input.tool_call_id().trim().is_empty() {
        return Intake::Ignore;
    }
    if let Some(i) = index.filter(|i| i.resolved) {
        // (the same words whether the provider's own result came before or after this one)
        return Intake::Duplicate(if i.by_stream && source == ResultSource::Producer {
            DuplicateWhy::Displaced
        } else {
            DuplicateWhy::Answered
        });
    }
    let Some(p) = pending else {
        return Intake::Take;
    };
    if source == ResultSource::Stream && p.source == ResultSource::Producer {
        return Intake::Displace;
    }
    if p.done {
        return Intake::Duplicate(DuplicateWhy::Answered);
    }
    match input {
        ResultInput::Complete(_) => Intake::Duplicate(DuplicateWhy::Streaming),
        ResultInput::Delta { .. } | ResultInput::Done { .. } if p.message_id != rmsg => {
            Intake::Duplicate(DuplicateWhy::OtherStream)
        }
        ResultInput::Delta { .. } | ResultInput::Done { .. } => Intake::Take,
    }
}

/// Whether `provider`'s call streams carry tool results of their own (Anthropic server and
/// MCP tool result blocks, Responses `mcp_call` output, AI SDK `tool-result` parts, Bedrock
/// server tools' `toolResult` blocks).
pub fn streams_results(provider: Option<Provider>) -> bool {
    matches!(
        provider,
        Some(Provider::Anthropic | Provider::OpenaiResponses | Provider::AiSdk | Provider::Bedrock)
    )
}

/// Whether a call of `message` may still get the provider's own result: the message is open
/// and its provider's streams carry results. A producer result for such a call waits for the
/// message to end. A message no longer stored (retention) has ended.
pub fn awaits_stream(message: Option<&MessageState>) -> bool {
    message.is_some_and(|m| m.is_open() && streams_results(m.provider))
}

/// Whether a complete `pending` result may be matched now: the provider's own always; a
/// producer's unless its call's message `awaits_stream`.
fn may_match(pending: &PendingResult, awaits_stream: bool) -> bool {
    pending.done && (pending.source == ResultSource::Stream || !awaits_stream)
}

/// Where a taken result input leaves its `pending` result (after
/// [`PendingResult::absorb`]), given the call's index and whether the call's message
/// [`awaits_stream`].
pub fn on_result(
    index: Option<&CallIndex>,
    pending: &PendingResult,
    awaits_stream: bool,
) -> ResultDecision {
    match index {
        Some(i) if may_match(pending, awaits_stream) => ResultDecision::Match {
            message_id: i.message_id.clone(),
            index: i.index,
        },
        _ => ResultDecision::Wait,
    }
}

/// Whether the message `msg` ending releases the `pending` result of one of its calls: the
/// id is indexed to a call of `msg`, unanswered, and the result is complete.
pub fn releases(index: Option<&CallIndex>, msg: &str, pending: Option<&PendingResult>) -> bool {
    index.is_some_and(|i| !i.resolved && i.message_id == msg) && pending.is_some_and(|p| p.done)
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

/// The decision for registering a call, given the id's current index and pending result and
/// whether the call's message [`awaits_stream`].
pub fn on_register(
    existing: Option<&CallIndex>,
    pending: Option<&PendingResult>,
    awaits_stream: bool,
) -> RegisterDecision {
    if existing.is_some_and(|i| i.resolved) {
        return RegisterDecision::Skip;
    }
    RegisterDecision::Index {
        matches: pending.is_some_and(|p| may_match(p, awaits_stream)),
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
    /// Orphan it on the message it arrived on (`message_id`), unless [`orphan_is_repeat`]
    /// (then it is dead-lettered [`DuplicateWhy::Orphaned`], without an event).
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
/// the new one is then dead-lettered, never orphaned again (found by cargo fuzz: the same
/// `event_id` was written again).
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
            by_stream: false,
        }
    }

    fn pending(done: bool) -> PendingResult {
        let mut p = PendingResult::new("r1", 5);
        p.done = done;
        p
    }

    fn whole(id: &str) -> ResultInput {
        ResultInput::Complete(ToolResult {
            tool_call_id: id.into(),
            output: "x".into(),
            is_error: false,
        })
    }

    fn delta(id: &str) -> ResultInput {
        ResultInput::Delta {
            tool_call_id: id.into(),
            delta: "x".into(),
        }
    }

    fn from_stream(mut p: PendingResult) -> PendingResult {
        p.source = ResultSource::Stream;
        p
    }

    #[test]
    fn a_result_matches_only_when_complete_and_its_call_is_indexed() {
        let i = index(false);
        assert_eq!(
            on_result(Some(&i), &pending(true), false),
            ResultDecision::Match {
                message_id: "m1".into(),
                index: 2
            }
        );
        assert_eq!(
            on_result(Some(&i), &pending(false), false),
            ResultDecision::Wait
        );
        assert_eq!(on_result(None, &pending(true), false), ResultDecision::Wait);
    }

    #[test]
    fn a_producer_result_waits_while_the_calls_message_may_carry_the_providers_own() {
        let i = index(false);
        assert_eq!(
            on_result(Some(&i), &pending(true), true),
            ResultDecision::Wait
        );
        assert_eq!(
            on_result(Some(&i), &from_stream(pending(true)), true),
            ResultDecision::Match {
                message_id: "m1".into(),
                index: 2
            }
        );
        assert!(releases(Some(&i), "m1", Some(&pending(true))));
        assert!(!releases(Some(&i), "m2", Some(&pending(true))));
        assert!(!releases(Some(&index(true)), "m1", Some(&pending(true))));
        assert!(!releases(Some(&i), "m1", Some(&pending(false))));
        assert!(!releases(None, "m1", Some(&pending(true))));
        let mut m = MessageState::new("c", "m1", Some(Provider::Anthropic), 0);
        assert!(awaits_stream(Some(&m)));
        m.phase = crate::core::MessagePhase::Completed;
        assert!(!awaits_stream(Some(&m)));
        let chat = MessageState::new("c", "m1", Some(Provider::OpenaiChat), 0);
        assert!(!awaits_stream(Some(&chat)));
        assert!(!awaits_stream(None));
    }

    #[test]
    fn the_first_result_of_a_call_stands_and_blank_ids_are_no_result() {
        use ResultSource::{Producer, Stream};
        let (fresh, answered) = (index(false), index(true));
        assert_eq!(
            on_intake(&whole("  "), "r1", Producer, None, None),
            Intake::Ignore
        );
        assert_eq!(
            on_intake(&whole("c1"), "r1", Producer, None, None),
            Intake::Take
        );
        assert_eq!(
            on_intake(&whole("c1"), "r1", Producer, Some(&fresh), None),
            Intake::Take
        );
        for source in [Producer, Stream] {
            assert_eq!(
                on_intake(&whole("c1"), "r1", source, Some(&answered), None),
                Intake::Duplicate(DuplicateWhy::Answered)
            );
        }
        let by_stream = CallIndex {
            by_stream: true,
            ..index(true)
        };
        assert_eq!(
            on_intake(&whole("c1"), "r1", Producer, Some(&by_stream), None),
            Intake::Duplicate(DuplicateWhy::Displaced)
        );
        assert_eq!(
            on_intake(&whole("c1"), "r1", Stream, Some(&by_stream), None),
            Intake::Duplicate(DuplicateWhy::Answered)
        );
        // a complete result waiting: the next one does not stand, unless it is the provider's
        // own and the waiting one a producer's
        assert_eq!(
            on_intake(
                &whole("c1"),
                "r1",
                Producer,
                Some(&fresh),
                Some(&pending(true))
            ),
            Intake::Duplicate(DuplicateWhy::Answered)
        );
        assert_eq!(
            on_intake(
                &whole("c1"),
                "r1",
                Stream,
                Some(&fresh),
                Some(&pending(true))
            ),
            Intake::Displace
        );
        assert_eq!(
            on_intake(
                &whole("c1"),
                "r1",
                Stream,
                None,
                Some(&from_stream(pending(true)))
            ),
            Intake::Duplicate(DuplicateWhy::Answered)
        );
        assert_eq!(
            on_intake(
                &whole("c1"),
                "r1",
                Producer,
                None,
                Some(&from_stream(pending(true)))
            ),
            Intake::Duplicate(DuplicateWhy::Answered)
        );
        // a streamed result under way (on message r1) goes on; nothing else joins it
        let streaming = pending(false);
        assert_eq!(
            on_intake(&delta("c1"), "r1", Producer, None, Some(&streaming)),
            Intake::Take
        );
        assert_eq!(
            on_intake(&delta("c1"), "r2", Producer, None, Some(&streaming)),
            Intake::Duplicate(DuplicateWhy::OtherStream)
        );
        assert_eq!(
            on_intake(&whole("c1"), "r1", Producer, None, Some(&streaming)),
            Intake::Duplicate(DuplicateWhy::Streaming)
        );
        assert_eq!(
            on_intake(&whole("c1"), "r1", Stream, None, Some(&streaming)),
            Intake::Displace
        );
    }

    #[test]
    fn registering_matches_a_waiting_complete_result() {
        assert_eq!(
            on_register(Some(&index(true)), Some(&pending(true)), false),
            RegisterDecision::Skip
        );
        assert_eq!(
            on_register(None, Some(&pending(true)), false),
            RegisterDecision::Index { matches: true }
        );
        assert_eq!(
            on_register(None, Some(&pending(true)), true),
            RegisterDecision::Index { matches: false }
        );
        assert_eq!(
            on_register(None, Some(&from_stream(pending(true))), true),
            RegisterDecision::Index { matches: true }
        );
        assert_eq!(
            on_register(Some(&index(false)), Some(&pending(false)), false),
            RegisterDecision::Index { matches: false }
        );
        assert_eq!(
            on_register(None, None, false),
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
