//! Reasoning blocks through the store: Anthropic `thinking` (with its `signature_delta`) and
//! Bedrock `reasoningContent` are kept as the message's provider metadata (never calls),
//! stored as pieces like argument text, survive a restart, and render back before the
//! `tool_use` they preceded.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::snapshot::ReasoningBlock;
use chunk_model::{EventType, Provider, ReasoningKind};
use serde_json::json;

fn input<'a>(provider: Provider, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        kind: InputKind::Chunk,
        conversation_id: "c",
        message_id: "m1",
        provider: Some(provider),
        seq: Seq::Producer(seq),
        control: None,
        body,
        origin: None,
    }
}

const SIG: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+1M6QqY8eB3vU9gR6wqbQ==";

#[test]
fn anthropic_thinking_is_the_messages_metadata_and_renders_back_before_its_tool_use() {
    let dir = tempfile::tempdir().unwrap();
    let chunks = common::recording("anthropic/thinking_then_tool.sse");
    {
        let store = Store::open(dir.path(), Config::default()).unwrap();
        // half the stream, then a restart: the pieces stored so far are read back
        for (seq, body) in chunks.iter().enumerate().take(4) {
            let _ = store
                .apply(&input(Provider::Anthropic, seq as u64, body), 1)
                .unwrap();
        }
        store.flush().unwrap();
    }
    let store = common::reopen(dir.path(), Config::default());
    for (seq, body) in chunks.iter().enumerate().skip(4) {
        let _ = store
            .apply(&input(Provider::Anthropic, seq as u64, body), 2)
            .unwrap();
    }
    let evs = common::events(&store);
    // not a call: one call, index 0
    let calls: Vec<_> = evs
        .iter()
        .filter(|e| e.event_type == EventType::ToolCallCompleted)
        .map(|e| e.tool_call.clone().unwrap())
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].index, 0);
    assert_eq!(calls[0].name, "get_quote");

    let snap = store.message_snapshot("c", "m1").unwrap().unwrap();
    assert_eq!(
        snap.reasoning(),
        vec![ReasoningBlock {
            kind: ReasoningKind::Thinking,
            thinking:
                "The user wants the stock price; I should call the quote tool with the ticker."
                    .into(),
            signature: SIG.into(),
            data: String::new(),
            before_call: 0,
        }]
    );
    let h = render(
        &[snap],
        HistoryFormat::Anthropic,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert_eq!(h.messages[0]["content"][0]["type"], "thinking");
    assert_eq!(h.messages[0]["content"][0]["signature"], SIG);
    assert_eq!(h.messages[0]["content"][1]["type"], "tool_use");
    assert_eq!(h.dropped_reasoning, 0);

    // the completed message's pieces were joined; a reopened store still reads the text
    drop(store);
    let store = common::reopen(dir.path(), Config::default());
    let snap = store.message_snapshot("c", "m1").unwrap().unwrap();
    assert_eq!(snap.reasoning()[0].thinking.len(), 77);
}

#[test]
fn bedrock_reasoning_content_is_kept_and_renders_back_as_reasoning_content() {
    let store = Store::open_memory(Config::default()).unwrap();
    let chunks = [
        json!({"messageStart": {"role": "assistant"}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Check the "}}}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "weather first."}}}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "ErcBCkgIAhAB"}}}}),
        json!({"contentBlockStop": {"contentBlockIndex": 0}}),
        json!({"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"city\":\"Paris\"}"}}}}),
        json!({"contentBlockStop": {"contentBlockIndex": 1}}),
        json!({"messageStop": {"stopReason": "tool_use"}}),
    ];
    for (seq, c) in chunks.iter().enumerate() {
        let body = serde_json::to_vec(c).unwrap();
        let _ = store
            .apply(&input(Provider::Bedrock, seq as u64, &body), 1)
            .unwrap();
    }
    let snap = store.message_snapshot("c", "m1").unwrap().unwrap();
    assert_eq!(snap.calls.len(), 1);
    let h = render(&[snap], HistoryFormat::Bedrock, &HistoryOptions::default()).unwrap();
    assert_eq!(
        h.messages[0]["content"][0],
        json!({"reasoningContent": {"reasoningText": {"text": "Check the weather first.", "signature": "ErcBCkgIAhAB"}}})
    );
    assert!(h.messages[0]["content"][1].get("toolUse").is_some());
}
