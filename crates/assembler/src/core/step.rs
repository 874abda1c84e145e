//! Applying one normalized chunk event to a message: identity matching, appending, ends and
//! limits (`docs/contracts.md`, "Identity and completion rules").
//!
//! Matching: by wire id, then provider index, then item id; blank strings are absent. The
//! same index with a new non-empty wire id starts a new call. A fragment with no reference at
//! all continues the latest open call. A call end with no reference ends the latest open
//! call, or starts a new whole call when the latest one has ended (Gemini). A whole-call end
//! (one that names the function) matched to an already ended call only by index or item id
//! is a new call; any other end of an ended call is a second end and changes nothing. An end
//! with no name and no arguments that matches no call (the stop of a text block) changes
//! nothing. Once the message has ended, call statements change nothing; one that carries
//! something the ended message cannot take (argument text, or a call it does not know) is
//! reported in [`StepOutput::after_end`] so the store can dead-letter its input instead of
//! dropping it without a trace.

use super::end::{emit_started, end_call, end_message, EndHow};
use super::output::{ArgOp, StepOutput};
use super::state::{
    CallState, Limits, MessageState, ReasoningState, ResultBlockState, REASONING_PIECES,
};
use crate::input::Control;
use chunk_model::depth::{value_depth, MAX_ARGUMENT_DEPTH};
use chunk_model::wire::reason::finish;
use chunk_model::wire::Reason;
use chunk_model::{
    CallEnd, CallFragment, CallKind, CallRef, ChunkEvent, Finish, ReasoningKind, ReasoningPiece,
    ResultBlockPiece, ResultInput, ToolResult,
};
use serde_json::{Map, Value};

/// How a reference matched a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    WireId,
    Index,
    ItemId,
}

fn present(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|t| !t.trim().is_empty())
}

fn has_refs(at: &CallRef) -> bool {
    present(&at.wire_id).is_some() || at.index.is_some() || present(&at.item_id).is_some()
}

/// Finds the newest call matching `at` by wire id, then index, then item id.
fn find(msg: &MessageState, at: &CallRef) -> Option<(usize, By)> {
    if let Some(w) = present(&at.wire_id) {
        if let Some(p) = msg
            .calls
            .iter()
            .rposition(|c| c.wire_id.as_deref() == Some(w))
        {
            return Some((p, By::WireId));
        }
    }
    if let Some(i) = at.index {
        if let Some(p) = msg.calls.iter().rposition(|c| c.wire_index == Some(i)) {
            return Some((p, By::Index));
        }
    }
    if let Some(it) = present(&at.item_id) {
        if let Some(p) = msg
            .calls
            .iter()
            .rposition(|c| c.item_id.as_deref() == Some(it))
        {
            return Some((p, By::ItemId));
        }
    }
    None
}

/// Whether `at` names a wire id different from the call's own (a new call at the same index).
fn other_wire_id(msg: &MessageState, pos: usize, at: &CallRef) -> bool {
    match (
        present(&at.wire_id),
        msg.calls.get(pos).and_then(|c| c.wire_id.as_deref()),
    ) {
        (Some(new), Some(old)) => new != old,
        _ => false,
    }
}

/// Whether `name` is given and differs from the call's known name.
fn names_other(msg: &MessageState, pos: usize, name: Option<&str>) -> bool {
    match (name, msg.calls.get(pos).and_then(|c| c.name.as_deref())) {
        (Some(new), Some(old)) => new != old,
        _ => false,
    }
}

fn latest_open(msg: &MessageState) -> Option<usize> {
    match msg.calls.last() {
        Some(c) if !c.is_terminal() => Some(msg.calls.len() - 1),
        _ => None,
    }
}

fn new_call(msg: &mut MessageState, at: &CallRef) -> usize {
    let mut call = CallState::new();
    call.wire_id = present(&at.wire_id).map(str::to_string);
    call.wire_index = at.index;
    call.item_id = present(&at.item_id).map(str::to_string);
    msg.calls.push(call);
    msg.calls.len() - 1
}

/// Copies the facts of a reference, name, kind and metadata onto a call (never overwriting an
/// id, name or kind it already has).
fn learn(
    call: &mut CallState,
    at: &CallRef,
    name: Option<&str>,
    kind: Option<CallKind>,
    metadata: Map<String, Value>,
) {
    if let (false, Some(kind)) = (call.kind_stated, kind) {
        call.kind = kind;
        call.kind_stated = true;
    }
    if call.wire_id.is_none() {
        call.wire_id = present(&at.wire_id).map(str::to_string);
    }
    if call.wire_index.is_none() {
        call.wire_index = at.index;
    }
    if call.item_id.is_none() {
        call.item_id = present(&at.item_id).map(str::to_string);
    }
    if call.name.is_none() {
        call.name = name.filter(|n| !n.trim().is_empty()).map(str::to_string);
    }
    for (k, v) in metadata {
        call.metadata.insert(k, v);
    }
}

/// Applies one chunk event to `msg`, appending what it caused to `out`. Does not emit
/// `message.completed`: call [`super::complete_if_done`] after the step (and after matching
/// results), so that the completed message lists them.
pub fn step(msg: &mut MessageState, ev: ChunkEvent, limits: &Limits, out: &mut StepOutput) {
    match ev {
        ChunkEvent::CallFragment(f) => fragment(msg, f, limits, out),
        ChunkEvent::CallEnd(e) if ends_result_block(msg, &e) => {
            if let Some(pos) = msg
                .result_blocks
                .iter()
                .position(|b| Some(b.index) == e.at.index)
            {
                let block = msg.result_blocks.remove(pos);
                out.results.push(ResultInput::Complete(ToolResult {
                    tool_call_id: block.tool_call_id,
                    output: block.output,
                    is_error: block.is_error,
                }));
            }
        }
        ChunkEvent::CallEnd(e) => call_end(msg, e, limits, out),
        ChunkEvent::MessageEnd { finish, reason } => {
            let how = end_how(finish);
            let reason = if reason.trim().is_empty() {
                finish::STOP
            } else {
                reason.as_str()
            };
            end_message(msg, reason, how, out);
        }
        ChunkEvent::StreamEnd => end_message(msg, finish::STREAM_END, EndHow::Judge, out),
        ChunkEvent::ProviderError { .. } => end_message(
            msg,
            finish::PROVIDER_ERROR,
            EndHow::Abandon(Reason::ProviderError),
            out,
        ),
        ChunkEvent::ToolResult(r) => out.results.push(r),
        ChunkEvent::Reasoning(r) => reasoning(msg, r, limits, out),
        ChunkEvent::ResultBlock(r) => result_block(msg, r, limits),
    }
}

/// Whether `e` is the bare end of a result block being streamed (no call has its index).
fn ends_result_block(msg: &MessageState, e: &CallEnd) -> bool {
    msg.is_open()
        && e.name.is_none()
        && e.arguments.is_none()
        && e.at.wire_id.is_none()
        && e.at.index.is_some()
        && msg
            .result_blocks
            .iter()
            .any(|b| Some(b.index) == e.at.index)
        && !msg.calls.iter().any(|c| c.wire_index == e.at.index)
}

/// Keeps a piece of a result block the provider streams: a start opens the block for its
/// call, later pieces append output. Nothing changes once the message has ended, nor past
/// `max_calls_per_message` open blocks. Output past `max_argument_bytes` makes the result an
/// error that says so, never a silently shortened output.
fn result_block(msg: &mut MessageState, r: ResultBlockPiece, limits: &Limits) {
    if !msg.is_open() {
        return;
    }
    let slot = match (
        msg.result_blocks.iter().position(|b| b.index == r.index),
        r.tool_call_id,
    ) {
        (_, Some(id)) if !id.trim().is_empty() => {
            // a start (a restarted index begins a new block)
            msg.result_blocks.retain(|b| b.index != r.index);
            if msg.result_blocks.len() >= limits.max_calls_per_message {
                return;
            }
            msg.result_blocks.push(ResultBlockState {
                index: r.index,
                tool_call_id: id,
                is_error: r.is_error,
                output: String::new(),
                over_limit: false,
            });
            msg.result_blocks.len() - 1
        }
        (Some(slot), _) => slot,
        // a piece of a block whose start was not seen: no call to give it to
        (None, _) => return,
    };
    let Some(block) = msg.result_blocks.get_mut(slot) else {
        return;
    };
    block.is_error |= r.is_error;
    if let Some(text) = r.text.filter(|t| !t.is_empty()) {
        if block.over_limit {
            return;
        }
        if block.output.len() + text.len() > limits.max_argument_bytes {
            block.over_limit = true;
            block.is_error = true;
            block.output = format!(
                "[the provider's tool result exceeded {} bytes and was not kept]",
                limits.max_argument_bytes
            );
        } else {
            block.output.push_str(&text);
        }
    }
}

/// Keeps a piece of a reasoning block: its text as a stored piece, its signature and data on
/// the block. A block is placed by the calls started before it. Nothing changes once the
/// message has ended, nor past `max_calls_per_message` blocks (a bound on the state; the
/// blocks are not calls and are never an error).
fn reasoning(msg: &mut MessageState, r: ReasoningPiece, limits: &Limits, out: &mut StepOutput) {
    if !msg.is_open() {
        return;
    }
    let slot = match msg.reasoning.iter().position(|b| b.index == r.index) {
        Some(slot) => slot,
        None if msg.reasoning.len() < limits.max_calls_per_message => {
            msg.reasoning.push(ReasoningState {
                index: r.index,
                kind: r.kind.unwrap_or(ReasoningKind::Thinking),
                before_call: u32::try_from(msg.calls.len()).unwrap_or(u32::MAX),
                pieces: 0,
                text: String::new(),
                signature: String::new(),
                data: String::new(),
            });
            msg.reasoning.len() - 1
        }
        None => return,
    };
    let Some(block) = msg.reasoning.get_mut(slot) else {
        return;
    };
    if let Some(text) = r.text.filter(|t| !t.is_empty()) {
        out.arg_ops.push(ArgOp::Append {
            call: REASONING_PIECES | slot as u32,
            piece: block.pieces,
            text,
        });
        block.pieces += 1;
    }
    if let Some(signature) = r.signature {
        block.signature.push_str(&signature);
    }
    if let Some(data) = r.data {
        block.data.push_str(&data);
    }
}

/// How calls end on a provider's finish: judged on a normal end, `invalid` (`truncated`) when
/// cut, `abandoned` when filtered or failed.
fn end_how(finish: Finish) -> EndHow {
    match finish {
        Finish::Complete => EndHow::Judge,
        Finish::Truncated => EndHow::Invalid(Reason::Truncated),
        Finish::Filtered => EndHow::Abandon(Reason::Filtered),
        Finish::Error => EndHow::Abandon(Reason::ProviderError),
    }
}

/// Applies an explicit stream end (`Toolstream-Control`).
pub fn control(msg: &mut MessageState, control: &Control, out: &mut StepOutput) {
    match control {
        Control::End => end_message(
            msg,
            finish::CONTROL_END,
            EndHow::Abandon(Reason::StreamEnded),
            out,
        ),
        Control::Error(_) => end_message(
            msg,
            finish::CONTROL_ERROR,
            EndHow::Abandon(Reason::StreamError),
            out,
        ),
    }
}

/// Whether a call statement about `at` (naming `name`) that arrives after the message ended
/// names a call the message does not know.
fn unknown_after_end(msg: &MessageState, at: &CallRef, name: Option<&str>) -> bool {
    find(msg, at).is_none() && (has_refs(at) || name.is_some_and(|n| !n.trim().is_empty()))
}

fn fragment(msg: &mut MessageState, f: CallFragment, limits: &Limits, out: &mut StepOutput) {
    if !msg.is_open() {
        let payload =
            f.arguments.as_deref().is_some_and(|t| !t.is_empty()) || !f.path_values.is_empty();
        out.after_end |= payload || unknown_after_end(msg, &f.at, f.name.as_deref());
        return;
    }
    let pos = match find(msg, &f.at) {
        Some((p, By::Index | By::ItemId)) if other_wire_id(msg, p, &f.at) => new_call(msg, &f.at),
        Some((p, _)) => p,
        None if !has_refs(&f.at) => match latest_open(msg) {
            Some(p) => p,
            None => new_call(msg, &f.at),
        },
        None => new_call(msg, &f.at),
    };
    let Some(call) = msg.calls.get_mut(pos) else {
        return;
    };
    if call.is_terminal() {
        return;
    }
    learn(call, &f.at, f.name.as_deref(), f.kind, f.metadata);
    if pos >= limits.max_calls_per_message {
        end_call(msg, pos, EndHow::Limit(Reason::CallLimit), out);
        return;
    }
    emit_started(msg, pos, out);
    let Some(call) = msg.calls.get_mut(pos) else {
        return;
    };
    if let Some(text) = f.arguments.filter(|t| !t.is_empty()) {
        if call.args_len + text.len() > limits.max_argument_bytes {
            end_call(msg, pos, EndHow::Limit(Reason::ArgumentLimit), out);
            return;
        }
        if call.text_held() {
            call.args.push_str(&text);
            call.args_held = true;
        }
        call.args_len += text.len();
        out.arg_ops.push(ArgOp::Append {
            call: pos as u32,
            piece: call.pieces,
            text,
        });
        call.pieces += 1;
    }
    for pv in f.path_values {
        // Serializing a value recurses once per level: one deeper than any acceptable
        // argument value is refused before it is stored (decoders only send scalars).
        if value_depth(&pv.value) > MAX_ARGUMENT_DEPTH {
            end_call(msg, pos, EndHow::Invalid(Reason::InvalidPartialArgs), out);
            return;
        }
        let json = serde_json::to_string(&pv).unwrap_or_default();
        if call.args_len + call.path_bytes + json.len() > limits.max_argument_bytes {
            end_call(msg, pos, EndHow::Limit(Reason::ArgumentLimit), out);
            return;
        }
        call.path_bytes += json.len();
        out.arg_ops.push(ArgOp::AppendPath {
            call: pos as u32,
            piece: call.path_pieces,
            json,
        });
        if call.all_paths_held() {
            call.path_values.push(pv);
            call.paths_held = true;
        }
        call.path_pieces += 1;
    }
}

fn call_end(msg: &mut MessageState, e: CallEnd, limits: &Limits, out: &mut StepOutput) {
    if !msg.is_open() {
        // a restatement of a known call (Responses' `response.completed`) is no news
        out.after_end |= unknown_after_end(msg, &e.at, e.name.as_deref());
        return;
    }
    let found = find(msg, &e.at);
    // An end that names no function and carries no arguments can only end a call we know;
    // with none to end it is the end of something else (an Anthropic/Bedrock text block).
    let bare = e.name.is_none() && e.arguments.is_none();
    if bare && found.is_none() && (has_refs(&e.at) || latest_open(msg).is_none()) {
        return;
    }
    let terminal = |p: usize| msg.calls.get(p).is_some_and(|c| c.is_terminal());
    let pos = match found {
        Some((p, By::WireId)) if terminal(p) => return,
        Some((p, By::WireId)) => p,
        Some((p, _)) if other_wire_id(msg, p, &e.at) => new_call(msg, &e.at),
        Some((p, _)) if terminal(p) && e.name.is_some() => new_call(msg, &e.at),
        Some((p, _)) if terminal(p) => return,
        Some((p, _)) => p,
        // A whole call that names another function than the open one is its own call.
        None if !has_refs(&e.at) => match latest_open(msg) {
            Some(p) if !names_other(msg, p, e.name.as_deref()) => p,
            _ => new_call(msg, &e.at),
        },
        None => new_call(msg, &e.at),
    };
    let Some(call) = msg.calls.get_mut(pos) else {
        return;
    };
    learn(call, &e.at, e.name.as_deref(), e.kind, e.metadata);
    if pos >= limits.max_calls_per_message {
        end_call(msg, pos, EndHow::Limit(Reason::CallLimit), out);
        return;
    }
    if let Some(text) = e.arguments {
        if text.len() > limits.max_argument_bytes {
            end_call(msg, pos, EndHow::Limit(Reason::ArgumentLimit), out);
            return;
        }
        // (text not held: replace it without comparing, which writes the same result)
        if !call.text_held() || text != call.args {
            out.arg_ops.push(ArgOp::Replace {
                call: pos as u32,
                old_pieces: call.pieces,
                text: text.clone(),
            });
            call.pieces = 1;
            call.hold_text(text);
        }
    }
    // (the provider's own word on this call, e.g. a Responses item `status: "incomplete"`)
    end_call(msg, pos, end_how(e.finish.unwrap_or(Finish::Complete)), out);
}

/// Whether stepping `ev` on `msg` may need argument text that is not held in memory, so the
/// store must read the message's stored text back first ([`CallState::needs_text`]). True
/// for every statement that may end a call or the message (ends build events and judge
/// arguments, and `message.completed` lists every call), for a fragment that names a
/// function (it may emit `tool_call.started`, which carries the text so far, for a call that
/// had text before its name), and for a fragment that may push a call over the argument
/// limit (its terminal event carries the text). A plain fragment of a started call, the
/// bulk of every stream, needs nothing: its text is appended to storage only.
pub fn needs_text(msg: &MessageState, ev: &ChunkEvent, limits: &Limits) -> bool {
    // (an ended message changes no more: nothing is judged or emitted)
    let unheld = |c: &CallState| c.needs_text();
    if !msg.is_open() || !msg.calls.iter().any(unheld) {
        return false;
    }
    match ev {
        ChunkEvent::CallFragment(f) => {
            let names = f.name.as_deref().is_some_and(|n| !n.trim().is_empty());
            let bytes = f.arguments.as_deref().map_or(0, str::len)
                + f.path_values
                    .iter()
                    .map(|pv| serde_json::to_vec(pv).map_or(usize::MAX / 4, |j| j.len()))
                    .sum::<usize>();
            msg.calls.iter().any(|c| {
                !c.is_terminal()
                    && unheld(c)
                    && ((names && !c.started)
                        || c.args_len + c.path_bytes + bytes > limits.max_argument_bytes)
            })
        }
        ChunkEvent::ToolResult(_) | ChunkEvent::Reasoning(_) | ChunkEvent::ResultBlock(_) => false,
        ChunkEvent::CallEnd(_)
        | ChunkEvent::MessageEnd { .. }
        | ChunkEvent::StreamEnd
        | ChunkEvent::ProviderError { .. } => true,
    }
}

/// Ends the message because of a toolstream decision (idle `timeout`, sequence `gap`, a
/// `lost_chunk`): open calls `abandoned` with `reason`, which is also the finish reason.
pub fn abandon(msg: &mut MessageState, reason: Reason, out: &mut StepOutput) {
    end_message(msg, reason.as_str(), EndHow::Abandon(reason), out);
}
