//! The snapshot of a message's assembly state ([`chunk_model::MessageSnapshot`], what the
//! query API and history rendering read). The store reads the state and its argument text
//! back; the conversion is here.

use super::emit;
use super::state::{MessagePhase, MessageState};
use chunk_model::snapshot::{ReasoningBlock, META_REASONING};
use chunk_model::{MessageSnapshot, MessageStatus};
use serde_json::Map;

/// The snapshot of `m` (its argument text must be held: see
/// [`super::CallState::text_held`], and its reasoning text read back). Reasoning blocks are
/// the message's provider metadata ([`META_REASONING`]).
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
        provider_metadata: reasoning_metadata(m),
    }
}

fn reasoning_metadata(m: &MessageState) -> Map<String, serde_json::Value> {
    let mut meta = Map::new();
    if m.reasoning.is_empty() {
        return meta;
    }
    let blocks: Vec<ReasoningBlock> = m
        .reasoning
        .iter()
        .map(|b| ReasoningBlock {
            kind: b.kind,
            thinking: b.text.clone(),
            signature: b.signature.clone(),
            data: b.data.clone(),
            before_call: b.before_call,
        })
        .collect();
    if let Ok(v) = serde_json::to_value(blocks) {
        meta.insert(META_REASONING.to_string(), v);
    }
    meta
}
