//! Building events from state, with deterministic ids (`chunk_model::event_id`).

use super::state::{CallState, MessageState};
use chunk_model::{
    event_id, synthetic_call_id, CallOutcome, CallStatus, Event, EventSubject, EventType, ToolCall,
    ToolResult,
};
use serde_json::Value;

/// Fixes the consumer-facing id of the call at `pos` if it is not fixed yet: the wire id,
/// else a synthetic id (marked `synthetic_id: true` in the metadata). Returns whether it was
/// fixed now.
pub fn fix_id(msg: &mut MessageState, pos: usize) -> bool {
    let (conv, mid) = (&msg.conversation_id, &msg.message_id);
    let Some(call) = msg.calls.get_mut(pos) else {
        return false;
    };
    if call.id.is_some() {
        return false;
    }
    match &call.wire_id {
        Some(w) => call.id = Some(w.clone()),
        None => {
            call.id = Some(synthetic_call_id(conv, mid, pos as u32));
            call.metadata.insert(
                chunk_model::encode::META_SYNTHETIC_ID.to_string(),
                Value::Bool(true),
            );
        }
    }
    true
}

/// The canonical [`ToolCall`] of a call as it stands.
pub fn tool_call(msg: &MessageState, pos: usize, call: &CallState) -> ToolCall {
    ToolCall {
        id: call.id.clone().unwrap_or_else(|| {
            synthetic_call_id(&msg.conversation_id, &msg.message_id, pos as u32)
        }),
        name: call.name.clone().unwrap_or_default(),
        arguments: if call.status == CallStatus::Completed {
            call.arguments.value().clone()
        } else {
            Value::Null
        },
        raw_arguments: call.args.clone(),
        index: pos as u32,
        kind: call.kind,
        provider_metadata: call.metadata.clone(),
    }
}

/// A `tool_call.*` event for the call at `pos`.
pub fn call_event(msg: &MessageState, pos: usize, ty: EventType) -> Option<Event> {
    let call = msg.calls.get(pos)?;
    let mut ev = Event::new(
        ty,
        event_id(
            &msg.conversation_id,
            &msg.message_id,
            EventSubject::Call(pos as u32),
            ty,
        ),
        &msg.conversation_id,
        &msg.message_id,
        msg.provider,
    );
    ev.tool_call = Some(tool_call(msg, pos, call));
    if ty != EventType::ToolCallStarted {
        ev.reason = call.reason.clone();
    }
    Some(ev)
}

/// The outcome list of a message (every call, in index order).
pub fn outcomes(msg: &MessageState) -> Vec<CallOutcome> {
    msg.calls
        .iter()
        .enumerate()
        .map(|(pos, call)| CallOutcome {
            status: call.status,
            reason: call.reason.clone(),
            tool_call: tool_call(msg, pos, call),
        })
        .collect()
}

/// The `message.completed` event.
pub fn message_completed(msg: &MessageState) -> Event {
    let ty = EventType::MessageCompleted;
    let mut ev = Event::new(
        ty,
        event_id(
            &msg.conversation_id,
            &msg.message_id,
            EventSubject::Message,
            ty,
        ),
        &msg.conversation_id,
        &msg.message_id,
        msg.provider,
    );
    ev.finish_reason = msg.finish_reason.clone();
    ev.calls = Some(outcomes(msg));
    ev.tool_results = Some(msg.tool_results.clone());
    ev
}

/// A `tool_result.completed` (matched: ids of the call's message) or `tool_result.orphaned`
/// (ids of the result's own message) event.
pub fn result_event(
    conv: &str,
    msg: &str,
    provider: Option<chunk_model::Provider>,
    result: &ToolResult,
    ty: EventType,
    reason: Option<&str>,
) -> Event {
    let mut ev = Event::new(
        ty,
        event_id(conv, msg, EventSubject::Result(&result.tool_call_id), ty),
        conv,
        msg,
        provider,
    );
    ev.tool_result = Some(result.clone());
    ev.reason = reason.map(str::to_string);
    ev
}
