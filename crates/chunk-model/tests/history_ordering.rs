//! Provider ordering rules the caller must satisfy, stated in the history answer (issue 10):
//! toolstream never sees the user's prompts, so a history may start with the model's turn
//! (Anthropic, Bedrock and Gemini need a user turn first) or end with an assistant note
//! (Mistral needs the last message to be a user or tool one); and Bedrock's tool history comes
//! with the `toolConfig` Converse needs for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{CallStatus, MessageSnapshot};
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::json;

fn calls_first() -> Vec<MessageSnapshot> {
    vec![
        snapshot(
            "m1",
            vec![
                call("call_1", "get_weather", 0, json!({"city": "Paris"})),
                call("call_2", "get_time", 1, json!({})),
            ],
            vec![result("call_1", "18C"), result("call_2", "12:00")],
        ),
        snapshot(
            "m2",
            vec![call("call_3", "get_weather", 0, json!({"city": "Rome"}))],
            vec![result("call_3", "21C")],
        ),
    ]
}

fn starts_with_model(notes: &[String]) -> bool {
    notes
        .iter()
        .any(|n| n.contains("starts with the model's turn"))
}

#[test]
fn a_history_that_starts_with_the_models_turn_says_so_where_the_target_needs_a_user_turn() {
    for target in HistoryFormat::ALL {
        let h = render(&calls_first(), target, &HistoryOptions::default()).unwrap();
        let needs_user_first = matches!(
            target,
            HistoryFormat::Anthropic | HistoryFormat::Bedrock | HistoryFormat::Gemini
        );
        assert_eq!(
            starts_with_model(&h.notes),
            needs_user_first,
            "{target}: {:?}",
            h.notes
        );
        if needs_user_first {
            assert!(
                h.notes.iter().any(|n| n.contains(target.as_str())),
                "{:?}",
                h.notes
            );
        }
    }
    // a history that starts with a user message (an orphaned result's text) needs nothing
    let mut orphan_first = snapshot("m0", vec![], vec![]);
    orphan_first.orphaned_results = vec![result("call_0", "late")];
    let mut snaps = vec![orphan_first];
    snaps.extend(calls_first());
    for target in [
        HistoryFormat::Anthropic,
        HistoryFormat::Bedrock,
        HistoryFormat::Gemini,
    ] {
        let h = render(&snaps, target, &HistoryOptions::default()).unwrap();
        assert!(!starts_with_model(&h.notes), "{target}: {:?}", h.notes);
    }
}

#[test]
fn the_note_follows_the_window() {
    // the window may start the kept history with a call turn even when the whole one does not
    let mut orphan_first = snapshot("m0", vec![], vec![]);
    orphan_first.orphaned_results = vec![result("call_0", "late")];
    let mut snaps = vec![orphan_first];
    snaps.extend(calls_first());
    let options = HistoryOptions {
        window: Some(2),
        ..HistoryOptions::default()
    };
    let h = render(&snaps, HistoryFormat::Anthropic, &options).unwrap();
    assert_eq!(h.messages[0]["role"], "assistant");
    assert!(starts_with_model(&h.notes), "{:?}", h.notes);
}

#[test]
fn a_mistral_history_that_ends_with_an_assistant_message_says_so() {
    let mut snaps = calls_first();
    let h = render(&snaps, HistoryFormat::Mistral, &HistoryOptions::default()).unwrap();
    assert_eq!(h.messages.last().unwrap()["role"], "tool");
    assert!(h.notes.is_empty(), "{:?}", h.notes);
    // a last turn whose only call was cut is an assistant note
    snaps.push(snapshot(
        "m3",
        vec![cut_call(
            "call_4",
            "search",
            0,
            CallStatus::Invalid,
            r#"{"q": "to"#,
        )],
        vec![],
    ));
    let h = render(&snaps, HistoryFormat::Mistral, &HistoryOptions::default()).unwrap();
    assert_eq!(h.messages.last().unwrap()["role"], "assistant");
    assert_eq!(h.notes.len(), 1, "{:?}", h.notes);
    assert!(h.notes[0].contains("Mistral"), "{:?}", h.notes);
    // other targets take it (OpenAI chat ends with whatever came last)
    let h = render(
        &snaps,
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert!(h.notes.is_empty(), "{:?}", h.notes);
}

#[test]
fn a_bedrock_tool_history_comes_with_the_tool_config_it_needs() {
    let h = render(
        &calls_first(),
        HistoryFormat::Bedrock,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert_eq!(
        h.tool_config,
        Some(json!({"tools": [
            {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}},
            {"toolSpec": {"name": "get_time", "inputSchema": {"json": {"type": "object"}}}},
        ]}))
    );
    // only the tools the kept history calls
    let options = HistoryOptions {
        window: Some(2),
        ..HistoryOptions::default()
    };
    let h = render(&calls_first(), HistoryFormat::Bedrock, &options).unwrap();
    let names: Vec<&str> = h.tool_config.as_ref().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather"]);
    // no tool blocks, no toolConfig; and no other target gets one
    let strict = HistoryOptions {
        strict_text: true,
        ..HistoryOptions::default()
    };
    let h = render(&calls_first(), HistoryFormat::Bedrock, &strict).unwrap();
    assert_eq!(h.tool_config, None);
    for target in HistoryFormat::ALL {
        if target != HistoryFormat::Bedrock {
            let h = render(&calls_first(), target, &HistoryOptions::default()).unwrap();
            assert_eq!(h.tool_config, None, "{target}");
            let text = serde_json::to_value(&h).unwrap();
            assert!(
                text.get("tool_config").is_none(),
                "{target}: absent from the answer"
            );
        }
    }
}
