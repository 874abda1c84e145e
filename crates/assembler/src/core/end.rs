//! Ending calls and messages: judging arguments, reasons, and `message.completed`.

use super::emit;
use super::output::{ArgOp, StepOutput};
use super::state::{MessagePhase, MessageState};
use chunk_model::wire::Reason;
use chunk_model::{parse_arguments, partial_args, CallStatus, Event, EventType};
use serde_json::Value;

/// How a call ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndHow {
    /// An authoritative normal end: valid JSON → `completed`, else `invalid` (`invalid_json`,
    /// or `argument_depth` for arguments nested deeper than 64 levels).
    Judge,
    /// Cut off (token limit), or structured pieces that build no arguments
    /// (`invalid_partial_args`): `invalid` with this reason, raw text kept.
    Invalid(Reason),
    /// Over a limit (`argument_limit`, `call_limit`): `invalid` even without a name.
    Limit(Reason),
    /// The stream ended, errored, broke or timed out first: `abandoned` with this reason.
    Abandon(Reason),
}

/// Ends the call at `pos` (no-op if it is already terminal), emitting `tool_call.started` first
/// when its name is known and it was not emitted yet, then the terminal event.
pub fn end_call(msg: &mut MessageState, pos: usize, how: EndHow, out: &mut StepOutput) {
    let Some(call) = msg.calls.get(pos) else {
        return;
    };
    if call.is_terminal() {
        return;
    }
    let named = call.name.is_some();
    if call.needs_text() {
        out.text_missing = true;
    }
    let (status, reason) = match how {
        EndHow::Limit(r) => (CallStatus::Invalid, Some(r)),
        _ if !named => (CallStatus::Abandoned, Some(Reason::NoName)),
        EndHow::Invalid(r) => (CallStatus::Invalid, Some(r)),
        EndHow::Abandon(r) => (CallStatus::Abandoned, Some(r)),
        EndHow::Judge => judge(msg, pos, out),
    };
    if emit::fix_id(msg, pos) {
        out.registered.push(pos as u32);
    }
    if named {
        emit_started(msg, pos, out);
    }
    let Some(call) = msg.calls.get_mut(pos) else {
        return;
    };
    call.status = status;
    call.reason = reason.map(|r| r.as_str().to_string());
    let ty = match status {
        CallStatus::Completed => EventType::ToolCallCompleted,
        CallStatus::Invalid => EventType::ToolCallInvalid,
        CallStatus::Abandoned | CallStatus::Streaming => EventType::ToolCallAbandoned,
    };
    out.push_event(emit::call_event(msg, pos, ty));
}

/// Emits `tool_call.started` for the call at `pos` once (the name must be known).
pub fn emit_started(msg: &mut MessageState, pos: usize, out: &mut StepOutput) {
    let Some(call) = msg.calls.get_mut(pos) else {
        return;
    };
    if call.started || call.name.is_none() {
        return;
    }
    if !call.text_held() {
        out.text_missing = true;
    }
    call.started = true;
    if emit::fix_id(msg, pos) {
        out.registered.push(pos as u32);
    }
    out.push_event(emit::call_event(msg, pos, EventType::ToolCallStarted));
}

/// Judges a normally ended call's arguments (building them from structured pieces when no
/// text was assembled) and returns its status; stores the parsed value on success.
fn judge(msg: &mut MessageState, pos: usize, out: &mut StepOutput) -> (CallStatus, Option<Reason>) {
    let Some(call) = msg.calls.get_mut(pos) else {
        return (CallStatus::Abandoned, Some(Reason::NoName));
    };
    if call.args_len == 0 && call.path_pieces > 0 {
        match partial_args::build(&call.path_values) {
            Ok(value) => {
                let text = value.to_string();
                out.arg_ops.push(ArgOp::Replace {
                    call: pos as u32,
                    old_pieces: call.pieces,
                    text: text.clone(),
                });
                call.pieces = 1;
                call.hold_text(text);
            }
            Err(_) => return (CallStatus::Invalid, Some(Reason::InvalidPartialArgs)),
        }
    }
    if call.kind.is_free_text() {
        // Free-form input (a custom tool): the text is the input, whatever it holds.
        call.arguments = Value::String(call.args.clone()).into();
        return (CallStatus::Completed, None);
    }
    match parse_arguments(&call.args) {
        Ok(value) => {
            call.arguments = value.into();
            (CallStatus::Completed, None)
        }
        // `invalid_json`, or `argument_depth` past chunk_model's MAX_ARGUMENT_DEPTH (64).
        Err(e) => (CallStatus::Invalid, Some(e.reason())),
    }
}

/// Ends the message (no-op unless it is open): records `finish_reason` and ends every open
/// call with `how`.
pub fn end_message(msg: &mut MessageState, finish_reason: &str, how: EndHow, out: &mut StepOutput) {
    if msg.phase != MessagePhase::Open {
        return;
    }
    msg.phase = MessagePhase::Ended;
    msg.finish_reason = Some(finish_reason.to_string());
    for pos in 0..msg.calls.len() {
        end_call(msg, pos, how.clone(), out);
    }
}

/// Emits `message.completed` once: when the message has ended and every call is terminal.
#[must_use]
pub fn complete_if_done(msg: &mut MessageState) -> Option<Event> {
    if msg.phase != MessagePhase::Ended || msg.calls.iter().any(|c| !c.is_terminal()) {
        return None;
    }
    msg.phase = MessagePhase::Completed;
    Some(emit::message_completed(msg))
}
