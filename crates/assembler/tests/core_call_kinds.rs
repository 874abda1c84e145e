//! Call kinds on the pure core: the kind a decoder states is kept on the call and in every
//! event, and decides how the text is judged at a normal end (a `custom` call's free text is
//! never parsed); a call end that says the call was cut ends it `invalid`/`abandoned`, never
//! `completed`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::core::{self, Limits, MessageState, StepOutput};
use chunk_model::{
    CallEnd, CallFragment, CallKind, CallRef, CallStatus, ChunkEvent, EventType, Finish, Provider,
};
use common::Msg;
use serde_json::{json, Value};

fn item(id: &str) -> CallRef {
    CallRef {
        item_id: Some(id.to_string()),
        ..CallRef::default()
    }
}

fn start(at: CallRef, name: &str, kind: Option<CallKind>) -> ChunkEvent {
    ChunkEvent::CallFragment(CallFragment {
        at,
        name: Some(name.to_string()),
        kind,
        ..CallFragment::default()
    })
}

fn text(at: CallRef, t: &str) -> ChunkEvent {
    ChunkEvent::CallFragment(CallFragment {
        at,
        arguments: Some(t.to_string()),
        ..CallFragment::default()
    })
}

fn end(at: CallRef, arguments: Option<&str>, finish: Option<Finish>) -> ChunkEvent {
    ChunkEvent::CallEnd(CallEnd {
        at,
        arguments: arguments.map(str::to_string),
        finish,
        ..CallEnd::default()
    })
}

fn finish(f: Finish, reason: &str) -> ChunkEvent {
    ChunkEvent::MessageEnd {
        finish: f,
        reason: reason.to_string(),
    }
}

#[test]
fn a_custom_call_completes_with_its_free_text_never_parsed() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("ctc_1"), "apply_patch", Some(CallKind::Custom)));
    m.feed(text(item("ctc_1"), "*** Begin Patch\n{not json"));
    m.feed(text(item("ctc_1"), "\n*** End Patch"));
    m.feed(end(item("ctc_1"), None, None));
    m.feed(finish(Finish::Complete, "completed"));
    let ended = m.terminal();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].event_type, EventType::ToolCallCompleted);
    let call = ended[0].tool_call.as_ref().expect("call");
    assert_eq!(call.kind, CallKind::Custom);
    assert_eq!(
        call.raw_arguments,
        "*** Begin Patch\n{not json\n*** End Patch"
    );
    assert_eq!(
        call.arguments,
        Value::String("*** Begin Patch\n{not json\n*** End Patch".into())
    );
    let calls = m.completed().calls.clone().expect("calls");
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].tool_call.kind, CallKind::Custom);
    // `tool_call.started` names the kind too
    let started = m
        .events
        .iter()
        .find(|e| e.event_type == EventType::ToolCallStarted)
        .and_then(|e| e.tool_call.as_ref())
        .expect("started");
    assert_eq!(started.kind, CallKind::Custom);
}

#[test]
fn a_custom_input_that_looks_like_json_stays_text() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("ctc_1"), "run_sql", Some(CallKind::Custom)));
    m.feed(end(item("ctc_1"), Some(r#"{"a":1}"#), None));
    m.feed(finish(Finish::Complete, "completed"));
    let call = m.terminal()[0].tool_call.clone().expect("call");
    assert_eq!(
        call.arguments,
        json!(r#"{"a":1}"#),
        "a string, not an object"
    );
    // and an empty input is an empty text, not `{}`
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("ctc_2"), "noop", Some(CallKind::Custom)));
    m.feed(end(item("ctc_2"), Some(""), None));
    m.feed(finish(Finish::Complete, "completed"));
    let call = m.terminal()[0].tool_call.clone().expect("call");
    assert_eq!(call.arguments, json!(""));
}

#[test]
fn a_function_call_with_the_same_text_is_judged_as_json() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("fc_1"), "apply_patch", None));
    m.feed(text(item("fc_1"), "*** Begin Patch"));
    m.feed(end(item("fc_1"), None, None));
    m.feed(finish(Finish::Complete, "completed"));
    let ended = m.terminal();
    assert_eq!(ended[0].event_type, EventType::ToolCallInvalid);
    assert_eq!(ended[0].reason.as_deref(), Some("invalid_json"));
    assert_eq!(
        ended[0].tool_call.as_ref().map(|c| c.kind),
        Some(CallKind::Function)
    );
}

#[test]
fn the_first_stated_kind_sticks_and_an_end_may_state_it() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(ChunkEvent::CallEnd(CallEnd {
        at: item("mcpr_1"),
        name: Some("ask_question".into()),
        arguments: Some(r#"{"q":"x"}"#.into()),
        kind: Some(CallKind::McpApprovalRequest),
        ..CallEnd::default()
    }));
    m.feed(start(item("mcp_1"), "ask_question", Some(CallKind::Mcp)));
    m.feed(text(item("mcp_1"), r#"{"q":"#));
    m.feed(ChunkEvent::CallEnd(CallEnd {
        at: item("mcp_1"),
        arguments: Some(r#"{"q":"y"}"#.into()),
        kind: Some(CallKind::Custom),
        ..CallEnd::default()
    }));
    m.feed(finish(Finish::Complete, "completed"));
    let calls = m.completed().calls.clone().expect("calls");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].tool_call.kind, CallKind::McpApprovalRequest);
    assert_eq!(calls[0].tool_call.arguments, json!({"q":"x"}));
    assert_eq!(calls[1].tool_call.kind, CallKind::Mcp, "first kind sticks");
    assert_eq!(calls[1].tool_call.arguments, json!({"q":"y"}));
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
}

#[test]
fn a_call_end_that_says_the_call_was_cut_never_completes_it() {
    for (cut, ty, reason) in [
        (Finish::Truncated, EventType::ToolCallInvalid, "truncated"),
        (Finish::Filtered, EventType::ToolCallAbandoned, "filtered"),
        (
            Finish::Error,
            EventType::ToolCallAbandoned,
            "provider_error",
        ),
    ] {
        let mut m = Msg::with_provider(Provider::OpenaiResponses);
        m.feed(start(item("fc_1"), "get_weather", None));
        m.feed(text(item("fc_1"), r#"{"city":"Paris"}"#));
        // even with arguments that parse
        m.feed(end(item("fc_1"), Some(r#"{"city":"Paris"}"#), Some(cut)));
        m.feed(finish(Finish::Complete, "completed"));
        let ended = m.terminal();
        assert_eq!(ended.len(), 1, "{cut:?}");
        assert_eq!(ended[0].event_type, ty, "{cut:?}");
        assert_eq!(ended[0].reason.as_deref(), Some(reason), "{cut:?}");
        let call = ended[0].tool_call.as_ref().expect("call");
        assert_eq!(call.arguments, Value::Null);
        assert_eq!(call.raw_arguments, r#"{"city":"Paris"}"#, "raw text kept");
    }
    // `Complete` is a normal end
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("fc_1"), "get_weather", None));
    m.feed(end(item("fc_1"), Some("{}"), Some(Finish::Complete)));
    assert_eq!(m.terminal()[0].event_type, EventType::ToolCallCompleted);
}

#[test]
fn a_cut_custom_call_is_invalid_not_completed() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("ctc_1"), "apply_patch", Some(CallKind::Custom)));
    m.feed(text(item("ctc_1"), "*** Begin Pat"));
    m.feed(finish(Finish::Truncated, "max_output_tokens"));
    let ended = m.terminal();
    assert_eq!(ended[0].event_type, EventType::ToolCallInvalid);
    assert_eq!(ended[0].reason.as_deref(), Some("truncated"));
    assert_eq!(
        ended[0].tool_call.as_ref().map(|c| c.kind),
        Some(CallKind::Custom)
    );
}

#[test]
fn the_kind_survives_the_stored_form_of_a_message() {
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    m.feed(start(item("ctc_1"), "apply_patch", Some(CallKind::Custom)));
    m.feed(text(item("ctc_1"), "free"));
    let stored = serde_json::to_string(&m.state).expect("serialize");
    let mut back: MessageState = serde_json::from_str(&stored).expect("deserialize");
    assert_eq!(back.calls[0].kind, CallKind::Custom);
    // a later statement of another kind does not change it after a reload either
    back.calls[0].hold_text("free".into());
    let mut out = StepOutput::default();
    core::step(
        &mut back,
        ChunkEvent::CallEnd(CallEnd {
            at: item("ctc_1"),
            kind: Some(CallKind::Function),
            ..CallEnd::default()
        }),
        &Limits::default(),
        &mut out,
    );
    let ended = out
        .events
        .iter()
        .find(|e| e.event_type == EventType::ToolCallCompleted)
        .and_then(|e| e.tool_call.as_ref())
        .expect("completed");
    assert_eq!(ended.kind, CallKind::Custom);
    assert_eq!(ended.arguments, json!("free"));
    // a message stored before kinds existed reads as function calls
    let old = stored
        .replace(r#""kind":"custom","#, "")
        .replace(r#""kind_stated":true,"#, "");
    assert!(!old.contains("kind"), "{old}");
    let old: MessageState = serde_json::from_str(&old).expect("old form");
    assert_eq!(old.calls[0].kind, CallKind::Function);
}

/// A recorded stream under `tests/recordings/`, decoded and stepped through the core: the
/// `message.completed` calls and the in-stream results the step handed on.
fn replay(rel: &str) -> (Vec<chunk_model::CallOutcome>, Vec<chunk_model::ResultInput>) {
    replay_as(Provider::OpenaiResponses, rel)
}

fn replay_as(
    provider: Provider,
    rel: &str,
) -> (Vec<chunk_model::CallOutcome>, Vec<chunk_model::ResultInput>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/recordings")
        .join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let frames = chunk_model::framing::split(&bytes).expect("frames");
    let mut m = Msg::with_provider(Provider::OpenaiResponses);
    let mut results = Vec::new();
    for f in frames {
        for ev in chunk_model::decode(provider, &f.data).expect("decodes") {
            let mut out = StepOutput::default();
            core::step(&mut m.state, ev, &Limits::default(), &mut out);
            m.events.extend(out.events);
            results.extend(out.results);
            m.events.extend(core::complete_if_done(&mut m.state));
        }
    }
    (m.completed().calls.clone().expect("calls"), results)
}

#[test]
fn recorded_responses_streams_of_the_new_call_shapes_assemble() {
    let (calls, _) = replay("openai-responses/custom_tool_call.sse");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].tool_call.kind, CallKind::Custom);
    assert_eq!(calls[0].tool_call.id, "call_Xq7LmN2pR4");
    let text = calls[0].tool_call.raw_arguments.clone();
    assert!(text.starts_with("*** Begin Patch\n") && text.ends_with("*** End Patch"));
    assert_eq!(calls[0].tool_call.arguments, Value::String(text));

    let (calls, _) = replay("openai-responses/function_call_item_incomplete.sse");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Invalid);
    assert_eq!(calls[0].reason.as_deref(), Some("truncated"));

    let (calls, results) = replay("openai-responses/mcp_call.sse");
    assert_eq!(
        calls.len(),
        1,
        "mcp_list_tools and the message are not calls"
    );
    assert_eq!(calls[0].tool_call.kind, CallKind::Mcp);
    assert_eq!(
        calls[0].tool_call.id,
        "mcp_68c1a4135e4c8190a3b5c7d9e1f3a5b7"
    );
    assert_eq!(
        calls[0].tool_call.arguments,
        json!({"repoName":"tokio-rs/tokio","question":"How does the scheduler steal work?"})
    );
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].tool_call_id(), calls[0].tool_call.id);

    let (calls, results) = replay("openai-responses/mcp_approval_request.sse");
    let kinds: Vec<CallKind> = calls.iter().map(|c| c.tool_call.kind).collect();
    assert_eq!(kinds, vec![CallKind::Mcp, CallKind::McpApprovalRequest]);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
    assert_eq!(
        calls[1].tool_call.id,
        "mcpr_68c1a5027d3c8190b4c6d8e0f2a4c6e8"
    );
    assert!(matches!(
        &results[..],
        [chunk_model::ResultInput::Complete(r)] if r.is_error && r.tool_call_id == calls[0].tool_call.id
    ));
}

#[test]
fn recorded_anthropic_server_and_mcp_tool_streams_assemble_with_their_results() {
    let (calls, results) = replay_as(Provider::Anthropic, "anthropic/server_tool_web_search.sse");
    let kinds: Vec<CallKind> = calls.iter().map(|c| c.tool_call.kind).collect();
    assert_eq!(kinds, vec![CallKind::ServerTool, CallKind::Function]);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
    assert_eq!(
        calls[0].tool_call.arguments,
        json!({"query": "tokio latest release"})
    );
    assert_eq!(calls[0].tool_call.index, 0, "text blocks are not calls");
    assert!(matches!(
        &results[..],
        [chunk_model::ResultInput::Complete(r)]
            if r.tool_call_id == calls[0].tool_call.id && !r.is_error
    ));

    let (calls, results) = replay_as(Provider::Anthropic, "anthropic/mcp_tool_use.sse");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.kind, CallKind::Mcp);
    assert_eq!(
        calls[0].tool_call.provider_metadata.get("server_name"),
        Some(&json!("deepwiki"))
    );
    assert!(matches!(
        &results[..],
        [chunk_model::ResultInput::Complete(r)]
            if r.tool_call_id == calls[0].tool_call.id && r.output == "Tokio 1.47.1 is the latest release."
    ));
}

#[test]
fn recorded_bedrock_server_tool_stream_assembles_with_its_streamed_tool_result_block() {
    let (calls, results) = replay_as(Provider::Bedrock, "bedrock/server_tool_result.ndjson");
    let kinds: Vec<CallKind> = calls.iter().map(|c| c.tool_call.kind).collect();
    assert_eq!(kinds, vec![CallKind::ServerTool, CallKind::Function]);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
    assert_eq!(
        calls[1].tool_call.index, 1,
        "result and text blocks are not calls"
    );
    assert!(matches!(
        &results[..],
        [chunk_model::ResultInput::Complete(r)]
            if r.tool_call_id == calls[0].tool_call.id
                && !r.is_error
                && r.output.ends_with("]} Latest: tokio-1.47.1")
    ));
}

fn result_piece(index: u32, id: Option<&str>, text: Option<&str>) -> ChunkEvent {
    ChunkEvent::ResultBlock(chunk_model::ResultBlockPiece {
        index,
        tool_call_id: id.map(str::to_string),
        is_error: false,
        text: text.map(str::to_string),
    })
}

fn at(index: u32) -> CallRef {
    CallRef {
        index: Some(index),
        ..CallRef::default()
    }
}

/// Steps `events` on a new Bedrock message: the results handed on.
fn results_of(events: Vec<ChunkEvent>, limits: &Limits) -> Vec<chunk_model::ResultInput> {
    let mut m = Msg::with_provider(Provider::Bedrock);
    let mut results = Vec::new();
    for ev in events {
        let mut out = StepOutput::default();
        core::step(&mut m.state, ev, limits, &mut out);
        results.extend(out.results);
    }
    results
}

#[test]
fn a_result_block_gives_its_result_only_at_its_end_and_never_a_shortened_one() {
    // no end of the block before the message ends: no result (never a partial one)
    let unended = results_of(
        vec![
            result_piece(1, Some("t1"), None),
            result_piece(1, None, Some("half")),
            finish(Finish::Complete, "end_turn"),
            end(at(1), None, None),
        ],
        &Limits::default(),
    );
    assert!(unended.is_empty(), "{unended:?}");
    // a piece at an index with no start has no call to go to
    let unstarted = results_of(
        vec![result_piece(2, None, Some("x")), end(at(2), None, None)],
        &Limits::default(),
    );
    assert!(unstarted.is_empty(), "{unstarted:?}");
    // past the argument limit: an error result that says so, not the first bytes
    let limits = Limits {
        max_argument_bytes: 8,
        ..Limits::default()
    };
    let big = results_of(
        vec![
            result_piece(1, Some("t1"), None),
            result_piece(1, None, Some("12345")),
            result_piece(1, None, Some("67890")),
            result_piece(1, None, Some("ab")),
            end(at(1), None, None),
        ],
        &limits,
    );
    assert!(matches!(
        &big[..],
        [chunk_model::ResultInput::Complete(r)]
            if r.tool_call_id == "t1" && r.is_error && r.output.contains("exceeded 8 bytes")
    ));
}

#[test]
fn a_result_block_survives_the_stored_form_of_a_message() {
    let mut m = Msg::with_provider(Provider::Bedrock);
    let mut out = StepOutput::default();
    core::step(
        &mut m.state,
        result_piece(1, Some("t1"), Some("part one, ")),
        &Limits::default(),
        &mut out,
    );
    let stored = serde_json::to_vec(&m.state).unwrap();
    let mut back: MessageState = serde_json::from_slice(&stored).unwrap();
    for ev in [
        result_piece(1, None, Some("part two")),
        end(at(1), None, None),
    ] {
        core::step(&mut back, ev, &Limits::default(), &mut out);
    }
    assert!(matches!(
        &out.results[..],
        [chunk_model::ResultInput::Complete(r)] if r.output == "part one, part two"
    ));
}
