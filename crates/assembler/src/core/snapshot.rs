//! The snapshot of a message's assembly state ([`chunk_model::MessageSnapshot`], what the
//! query API and history rendering read). The store reads the state and its argument text
//! back; the conversion is here.

use super::emit;
use super::state::{MessagePhase, MessageState};
use chunk_model::{MessageSnapshot, MessageStatus};

/// The snapshot of `m` (its argument text must be held: see
/// [`super::CallState::text_held`]).
pub fn to_snapshot(m: &MessageState) -> MessageSnapshot {
    MessageSnapshot {
        conversation_id: m.conversation_id.clone(),
        message_id: m.message_id.clone(),
        provider: m.provider,
        status: if m.phase == MessagePhase::Completed {
            MessageStatus::Completed
        } else {
            MessageStatus::Streaming
        },
        finish_reason: m.finish_reason.clone(),
        calls: emit::outcomes(m),
        tool_results: m.tool_results.clone(),
        orphaned_results: m.orphaned_results.clone(),
    }
}
