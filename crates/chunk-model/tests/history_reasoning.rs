//! Reasoning blocks (Anthropic `thinking` / `redacted_thinking`, Bedrock `reasoningContent`)
//! are the message's provider metadata, not calls, and go back in place: before the
//! `tool_use` they preceded in Anthropic and Bedrock history (Anthropic rejects a tool_use
//! turn without its thinking block: "Expected `thinking` or `redacted_thinking`, but found
//! `tool_use`"), dropped with a note for every other target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::{parse_history, HistoryFormat};
use chunk_model::history::{render, HistoryOptions};
use chunk_model::snapshot::{ReasoningBlock, META_REASONING};
use chunk_model::{CallStatus, MessageSnapshot, ReasoningKind};
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::{json, Value};

const SIG: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";

fn thinking(text: &str, signature: &str, before_call: u32) -> ReasoningBlock {
    ReasoningBlock {
        kind: ReasoningKind::Thinking,
        thinking: text.to_string(),
        signature: signature.to_string(),
        data: String::new(),
        before_call,
    }
}

fn redacted(data: &str, before_call: u32) -> ReasoningBlock {
    ReasoningBlock {
        kind: ReasoningKind::RedactedThinking,
        thinking: String::new(),
        signature: String::new(),
        data: data.to_string(),
        before_call,
    }
}

fn with_reasoning(mut s: MessageSnapshot, blocks: Vec<ReasoningBlock>) -> MessageSnapshot {
    s.provider_metadata.insert(
        META_REASONING.to_string(),
        serde_json::to_value(blocks).unwrap(),
    );
    s
}

/// Thinking, a redacted block, then two parallel calls; a second thinking block between them.
fn turn() -> Vec<MessageSnapshot> {
    vec![with_reasoning(
        snapshot(
            "m1",
            vec![
                call("toolu_1", "get_quote", 0, json!({"ticker": "ACME"})),
                call("toolu_2", "get_quote", 1, json!({"ticker": "INIT"})),
            ],
            vec![result("toolu_1", "12.5"), result("toolu_2", "3.1")],
        ),
        vec![
            thinking("I need both quotes.", SIG, 0),
            redacted("EmwKAhgBEgy3va3pzix", 0),
            thinking("Now the second.", "c2ln", 1),
        ],
    )]
}

fn types(content: &Value) -> Vec<String> {
    content
        .as_array()
        .unwrap()
        .iter()
        .map(|b| match b.get("type") {
            Some(t) => t.as_str().unwrap().to_string(),
            None => b.as_object().unwrap().keys().next().unwrap().clone(),
        })
        .collect()
}

#[test]
fn anthropic_history_sends_the_thinking_blocks_back_before_the_tool_use_they_preceded() {
    let h = render(
        &turn(),
        HistoryFormat::Anthropic,
        &HistoryOptions::default(),
    )
    .unwrap();
    let content = &h.messages[0]["content"];
    assert_eq!(
        types(content),
        [
            "thinking",
            "redacted_thinking",
            "tool_use",
            "thinking",
            "tool_use"
        ]
    );
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": "I need both quotes.", "signature": SIG})
    );
    assert_eq!(
        content[1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
    );
    assert_eq!(h.dropped_reasoning, 0);
    assert!(
        !h.notes.iter().any(|n| n.contains("reasoning")),
        "{:?}",
        h.notes
    );
    // the calls read back unchanged: thinking blocks are not calls
    let parsed = parse_history(HistoryFormat::Anthropic, &h.messages).unwrap();
    assert_eq!(parsed[0].calls.len(), 2);
}

#[test]
fn bedrock_history_sends_them_as_reasoning_content() {
    let h = render(&turn(), HistoryFormat::Bedrock, &HistoryOptions::default()).unwrap();
    let content = &h.messages[0]["content"];
    assert_eq!(
        types(content),
        [
            "reasoningContent",
            "reasoningContent",
            "toolUse",
            "reasoningContent",
            "toolUse"
        ]
    );
    assert_eq!(
        content[0],
        json!({"reasoningContent": {"reasoningText": {"text": "I need both quotes.", "signature": SIG}}})
    );
    assert_eq!(
        content[1],
        json!({"reasoningContent": {"redactedContent": "EmwKAhgBEgy3va3pzix"}})
    );
    assert_eq!(h.dropped_reasoning, 0);
}

#[test]
fn the_thinking_goes_ahead_of_a_cut_calls_note() {
    // the first call was cut: its note is a text block; the turn's thinking still comes first
    let s = with_reasoning(
        snapshot(
            "m1",
            vec![
                cut_call("toolu_1", "get_quote", 0, CallStatus::Invalid, r#"{"tick"#),
                call("toolu_2", "get_quote", 1, json!({"ticker": "INIT"})),
            ],
            vec![result("toolu_2", "3.1")],
        ),
        vec![thinking("Two quotes.", SIG, 0)],
    );
    let h = render(&[s], HistoryFormat::Anthropic, &HistoryOptions::default()).unwrap();
    assert_eq!(
        types(&h.messages[0]["content"]),
        ["thinking", "text", "tool_use"]
    );
}

#[test]
fn other_targets_strict_text_and_unsigned_thinking_drop_them_with_a_note() {
    for target in HistoryFormat::ALL {
        if matches!(target, HistoryFormat::Anthropic | HistoryFormat::Bedrock) {
            continue;
        }
        let h = render(&turn(), target, &HistoryOptions::default()).unwrap();
        let text = serde_json::to_string(&h.messages).unwrap();
        assert!(!text.contains("I need both quotes"), "{target}: {text}");
        assert!(!text.contains(SIG), "{target}: {text}");
        assert_eq!(h.dropped_reasoning, 3, "{target}");
        assert!(
            h.notes
                .iter()
                .any(|n| n.contains("3 reasoning block(s) not sent")),
            "{target}: {:?}",
            h.notes
        );
    }
    let strict = HistoryOptions {
        strict_text: true,
        ..HistoryOptions::default()
    };
    let h = render(&turn(), HistoryFormat::Anthropic, &strict).unwrap();
    assert_eq!(h.dropped_reasoning, 3);
    assert!(!serde_json::to_string(&h.messages).unwrap().contains(SIG));
    // a thinking block whose signature never arrived (the stream was cut) is not sent
    let unsigned = vec![with_reasoning(
        snapshot(
            "m1",
            vec![call("toolu_1", "get_quote", 0, json!({"ticker": "ACME"}))],
            vec![result("toolu_1", "12.5")],
        ),
        vec![thinking("half a thought", "", 0)],
    )];
    let h = render(
        &unsigned,
        HistoryFormat::Anthropic,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert_eq!(types(&h.messages[0]["content"]), ["tool_use"]);
    assert_eq!(h.dropped_reasoning, 1);
}

#[test]
fn only_kept_turns_count_in_the_window() {
    let mut snaps = turn();
    snaps.push(snapshot(
        "m2",
        vec![call("toolu_3", "f", 0, json!({}))],
        vec![result("toolu_3", "ok")],
    ));
    let options = HistoryOptions {
        window: Some(2),
        ..HistoryOptions::default()
    };
    let h = render(&snaps, HistoryFormat::OpenaiChat, &options).unwrap();
    assert_eq!(
        h.dropped_reasoning, 0,
        "the thinking turn is outside the window"
    );
    let h = render(
        &snaps,
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert_eq!(h.dropped_reasoning, 3);
}

#[test]
fn a_previous_turns_note_merged_into_the_thinking_turn_goes_after_its_thinking() {
    // turn 1: its only call was cut (an assistant note); turn 2: thinking, then a call. The
    // two assistant messages merge (and the API would join them anyway): thinking first.
    let cut_only = snapshot(
        "m1",
        vec![cut_call(
            "toolu_0",
            "get_quote",
            0,
            CallStatus::Invalid,
            r#"{"t"#,
        )],
        vec![],
    );
    let snaps = vec![cut_only, turn().remove(0)];
    for target in [HistoryFormat::Anthropic, HistoryFormat::Bedrock] {
        let h = render(&snaps, target, &HistoryOptions::default()).unwrap();
        assert_eq!(
            h.messages.len(),
            2,
            "{target}: merged assistant turn, then results"
        );
        let kinds = types(&h.messages[0]["content"]);
        let want: &[&str] = if target == HistoryFormat::Anthropic {
            &[
                "thinking",
                "redacted_thinking",
                "text",
                "tool_use",
                "thinking",
                "tool_use",
            ]
        } else {
            &[
                "reasoningContent",
                "reasoningContent",
                "text",
                "toolUse",
                "reasoningContent",
                "toolUse",
            ]
        };
        assert_eq!(kinds, want, "{target}");
        assert_eq!(kinds[2], "text", "{target}: the note follows the thinking");
    }
}
