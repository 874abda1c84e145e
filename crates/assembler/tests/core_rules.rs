//! The identity and completion rules (`docs/contracts.md`, "Identity and completion rules"),
//! pinned on the pure core with hand-built chunk events (one test per quirk peers got wrong).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::core::Limits;
use chunk_model::{CallEnd, CallFragment, CallRef, CallStatus, ChunkEvent, EventType, Finish};
use common::Msg;
use serde_json::json;

fn frag(index: Option<u32>, id: Option<&str>, name: Option<&str>, args: &str) -> ChunkEvent {
    ChunkEvent::CallFragment(CallFragment {
        at: CallRef {
            index,
            wire_id: id.map(str::to_string),
            item_id: None,
        },
        name: name.map(str::to_string),
        arguments: Some(args.to_string()),
        ..CallFragment::default()
    })
}

fn finish(f: Finish, reason: &str) -> ChunkEvent {
    ChunkEvent::MessageEnd {
        finish: f,
        reason: reason.to_string(),
    }
}

fn whole(name: &str, args: &str) -> ChunkEvent {
    ChunkEvent::CallEnd(CallEnd {
        name: Some(name.to_string()),
        arguments: Some(args.to_string()),
        ..CallEnd::default()
    })
}

#[test]
fn parallel_calls_reusing_index_zero_with_new_ids_are_not_glued() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("call_a"), Some("get_weather"), ""));
    m.feed(frag(Some(0), None, None, r#"{"city":"Paris"}"#));
    m.feed(frag(Some(0), Some("call_b"), Some("get_time"), ""));
    m.feed(frag(Some(0), None, None, r#"{"tz":"CET"}"#));
    m.feed(finish(Finish::Complete, "tool_calls"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].tool_call.id, "call_a");
    assert_eq!(calls[0].tool_call.arguments, json!({"city":"Paris"}));
    assert_eq!(calls[1].tool_call.id, "call_b");
    assert_eq!(calls[1].tool_call.raw_arguments, r#"{"tz":"CET"}"#);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
}

#[test]
fn blank_ids_are_absent_and_never_start_or_rename_a_call() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("call_a"), Some("f"), "{\"a\":"));
    m.feed(frag(Some(0), Some(""), Some(" "), "1}"));
    m.feed(finish(Finish::Complete, "tool_calls"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.id, "call_a");
    assert_eq!(calls[0].tool_call.name, "f");
    assert_eq!(calls[0].tool_call.arguments, json!({"a":1}));
}

#[test]
fn restated_ids_are_never_concatenated() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("call_a"), Some("f"), "{\"a\":"));
    m.feed(frag(Some(0), Some("call_a"), None, "2}"));
    m.feed(ChunkEvent::StreamEnd);
    let call = &m.completed().calls.clone().unwrap()[0];
    assert_eq!(call.tool_call.id, "call_a");
    assert_eq!(call.tool_call.arguments, json!({"a":2}));
}

#[test]
fn an_id_less_index_less_fragment_continues_the_latest_open_call() {
    let mut m = Msg::new();
    m.feed(frag(None, None, Some("f"), "{\"x\""));
    m.feed(frag(None, None, None, ":true}"));
    m.feed(finish(Finish::Complete, "stop"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.arguments, json!({"x":true}));
}

#[test]
fn gemini_whole_calls_without_ids_get_distinct_deterministic_synthetic_ids() {
    let mut m = Msg::new();
    m.feed(whole("a", r#"{"n":1}"#));
    m.feed(whole("a", r#"{"n":2}"#));
    m.feed(finish(Finish::Complete, "STOP"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].tool_call.id, calls[1].tool_call.id);
    assert_eq!(
        calls[0].tool_call.id,
        chunk_model::synthetic_call_id("conv", "msg", 0)
    );
    assert_eq!(
        calls[1].tool_call.provider_metadata.get("synthetic_id"),
        Some(&json!(true))
    );
    assert_eq!(calls[1].tool_call.arguments, json!({"n":2}));
}

#[test]
fn a_second_end_signal_changes_nothing() {
    let mut m = Msg::new();
    let end = ChunkEvent::CallEnd(CallEnd {
        at: CallRef {
            index: Some(0),
            wire_id: Some("call_1".into()),
            item_id: Some("fc_1".into()),
        },
        name: Some("f".into()),
        arguments: Some(r#"{"a":1}"#.into()),
        ..CallEnd::default()
    });
    m.feed(end.clone());
    let mut again = end;
    if let ChunkEvent::CallEnd(e) = &mut again {
        e.arguments = Some(r#"{"a":2}"#.into());
    }
    assert!(m.feed(again).is_empty());
    m.feed(finish(Finish::Complete, "completed"));
    assert!(m.feed(finish(Finish::Truncated, "length")).is_empty());
    assert!(m.feed(ChunkEvent::StreamEnd).is_empty());
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.arguments, json!({"a":1}));
    assert_eq!(
        m.events
            .iter()
            .filter(|e| e.event_type == EventType::MessageCompleted)
            .count(),
        1
    );
}

#[test]
fn a_prefix_that_parses_is_not_completed_before_an_authoritative_end() {
    let mut m = Msg::new();
    let evs = m.feed(frag(Some(0), Some("c"), Some("f"), r#"{"a":1}"#));
    assert!(evs
        .iter()
        .all(|e| e.event_type == EventType::ToolCallStarted));
    m.feed(frag(Some(0), None, None, r#"{"b":2}"#));
    m.feed(finish(Finish::Complete, "tool_calls"));
    let call = &m.completed().calls.clone().unwrap()[0];
    assert_eq!(call.status, CallStatus::Invalid);
    assert_eq!(call.reason.as_deref(), Some("invalid_json"));
    assert_eq!(call.tool_call.raw_arguments, r#"{"a":1}{"b":2}"#);
}

#[test]
fn length_truncated_calls_are_invalid_with_raw_text_never_completed() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("c"), Some("f"), r#"{"a":1}"#));
    m.feed(finish(Finish::Truncated, "length"));
    let call = &m.completed().calls.clone().unwrap()[0];
    assert_eq!(call.status, CallStatus::Invalid);
    assert_eq!(call.reason.as_deref(), Some("truncated"));
    assert_eq!(call.tool_call.raw_arguments, r#"{"a":1}"#);
    assert_eq!(m.completed().finish_reason.as_deref(), Some("length"));
}

#[test]
fn empty_arguments_on_a_properly_ended_call_mean_an_empty_object() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("c"), Some("now"), ""));
    m.feed(ChunkEvent::StreamEnd);
    let call = &m.completed().calls.clone().unwrap()[0];
    assert_eq!(call.status, CallStatus::Completed);
    assert_eq!(call.tool_call.arguments, json!({}));
}

#[test]
fn a_call_that_ends_without_a_name_is_abandoned_no_name() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("c"), None, "{}"));
    m.feed(finish(Finish::Complete, "tool_calls"));
    assert_eq!(
        m.types(),
        vec![
            (EventType::ToolCallAbandoned, Some(0)),
            (EventType::MessageCompleted, None)
        ]
    );
    assert_eq!(m.events[0].reason.as_deref(), Some("no_name"));
}

#[test]
fn started_is_emitted_once_before_the_terminal_event() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("c"), Some("f"), ""));
    m.feed(frag(Some(0), Some("c"), Some("f"), "{}"));
    m.feed(finish(Finish::Complete, "tool_calls"));
    assert_eq!(
        m.types(),
        vec![
            (EventType::ToolCallStarted, Some(0)),
            (EventType::ToolCallCompleted, Some(0)),
            (EventType::MessageCompleted, None)
        ]
    );
}

#[test]
fn errors_and_filters_abandon_open_calls() {
    for (ev, reason) in [
        (finish(Finish::Filtered, "content_filter"), "filtered"),
        (finish(Finish::Error, "error"), "provider_error"),
        (
            ChunkEvent::ProviderError {
                message: "overloaded".into(),
            },
            "provider_error",
        ),
    ] {
        let mut m = Msg::new();
        m.feed(frag(Some(0), Some("c"), Some("f"), "{\"a\":"));
        m.feed(ev);
        let call = &m.completed().calls.clone().unwrap()[0];
        assert_eq!(call.status, CallStatus::Abandoned);
        assert_eq!(call.reason.as_deref(), Some(reason));
        assert_eq!(call.tool_call.raw_arguments, "{\"a\":");
    }
}

#[test]
fn the_argument_limit_ends_only_that_call_invalid() {
    let mut m = Msg::with_limits(Limits {
        max_argument_bytes: 8,
        max_calls_per_message: 256,
    });
    m.feed(frag(Some(0), Some("big"), Some("f"), "{\"a\":"));
    m.feed(frag(Some(1), Some("small"), Some("g"), "{}"));
    m.feed(frag(Some(0), None, None, "\"xxxxxxxx\"}"));
    m.feed(finish(Finish::Complete, "tool_calls"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls[0].status, CallStatus::Invalid);
    assert_eq!(calls[0].reason.as_deref(), Some("argument_limit"));
    assert_eq!(calls[0].tool_call.raw_arguments, "{\"a\":");
    assert_eq!(calls[1].status, CallStatus::Completed);
}

#[test]
fn calls_past_the_call_limit_end_invalid_and_the_rest_complete() {
    let mut m = Msg::with_limits(Limits {
        max_argument_bytes: 1024,
        max_calls_per_message: 2,
    });
    for i in 0..3 {
        m.feed(frag(Some(i), Some(&format!("c{i}")), Some("f"), "{}"));
    }
    m.feed(finish(Finish::Complete, "tool_calls"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[1].status, CallStatus::Completed);
    assert_eq!(calls[2].status, CallStatus::Invalid);
    assert_eq!(calls[2].reason.as_deref(), Some("call_limit"));
}

#[test]
fn responses_done_text_replaces_deltas_and_call_id_is_the_consumer_id() {
    let mut m = Msg::new();
    let at = |wire: Option<&str>| CallRef {
        index: Some(1),
        wire_id: wire.map(str::to_string),
        item_id: Some("fc_item".into()),
    };
    m.feed(ChunkEvent::CallFragment(CallFragment {
        at: at(Some("call_xyz")),
        name: Some("f".into()),
        arguments: Some(String::new()),
        ..CallFragment::default()
    }));
    m.feed(ChunkEvent::CallFragment(CallFragment {
        at: at(None),
        arguments: Some("{\"q\":".into()),
        ..CallFragment::default()
    }));
    m.feed(ChunkEvent::CallEnd(CallEnd {
        at: at(None),
        arguments: Some("{\"q\":\"full\"}".into()),
        ..CallEnd::default()
    }));
    m.feed(finish(Finish::Complete, "completed"));
    let call = &m.completed().calls.clone().unwrap()[0];
    assert_eq!(call.tool_call.id, "call_xyz");
    assert_eq!(call.tool_call.index, 0);
    assert_eq!(call.tool_call.arguments, json!({"q":"full"}));
}

#[test]
fn fragments_after_the_message_ended_change_nothing() {
    let mut m = Msg::new();
    m.feed(frag(Some(0), Some("c"), Some("f"), "{}"));
    m.feed(finish(Finish::Complete, "tool_calls"));
    assert!(m.feed(frag(Some(1), Some("d"), Some("g"), "{}")).is_empty());
    assert_eq!(m.state.calls.len(), 1);
}

#[test]
fn a_message_without_calls_still_completes_once() {
    let mut m = Msg::new();
    m.feed(finish(Finish::Complete, "stop"));
    m.feed(ChunkEvent::StreamEnd);
    assert_eq!(m.types(), vec![(EventType::MessageCompleted, None)]);
    assert_eq!(m.completed().calls.clone().unwrap().len(), 0);
}

#[test]
fn event_ids_are_deterministic_per_fact() {
    let run = || {
        let mut m = Msg::new();
        m.feed(frag(Some(0), Some("c"), Some("f"), "{}"));
        m.feed(finish(Finish::Complete, "tool_calls"));
        m.events
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    let mut unique = a.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), a.len());
}

#[test]
fn the_stop_of_a_text_block_is_not_a_nameless_call() {
    // Anthropic/Bedrock: content_block_stop of text block 0, then a tool_use block 1.
    let mut m = Msg::new();
    let stop = |i: u32| {
        ChunkEvent::CallEnd(CallEnd {
            at: CallRef {
                index: Some(i),
                ..CallRef::default()
            },
            ..CallEnd::default()
        })
    };
    m.feed(stop(0));
    m.feed(frag(Some(1), Some("toolu_1"), Some("get_weather"), ""));
    m.feed(frag(Some(1), None, None, "{}"));
    m.feed(stop(1));
    m.feed(finish(Finish::Complete, "tool_use"));
    let calls = m.completed().calls.clone().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool_call.id, "toolu_1");
    assert_eq!(calls[0].status, CallStatus::Completed);
}
