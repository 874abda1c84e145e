//! Gemini thought signatures in history, and invalid calls shown to the model.
//!
//! The bugs these pin: tool calls from Gemini's OpenAI-compatible endpoint lost
//! `extra_content.google.thought_signature` (decoded nowhere, rendered nowhere), so Gemini 3
//! rejected the next request; a signature rendered into a format whose model never made it
//! was dropped silently. And an invalid call must reach the model as its raw text, never as a
//! tool call with `{}` arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::{parse_history, HistoryFormat};
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{decode, CallStatus, ChunkEvent, MessageSnapshot, Provider};
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::{json, Value};

const SIG: &str = "CiQBjz1rX3sigA==";

/// A Gemini OpenAI-compatible chunk: two parallel calls, only the first signed (as Gemini 3
/// signs only the first of parallel calls).
fn compat_chunk() -> String {
    format!(
        r#"{{"id":"x","object":"chat.completion.chunk","created":1,"model":"gemini-3-pro-preview","choices":[{{"index":0,"delta":{{"role":"assistant","tool_calls":[{{"extra_content":{{"google":{{"thought_signature":"{SIG}"}}}},"function":{{"arguments":"{{\"city\":\"Paris\"}}","name":"get_weather"}},"id":"function-call-1","index":0,"type":"function"}},{{"function":{{"arguments":"{{\"city\":\"Rome\"}}","name":"get_weather"}},"id":"function-call-2","index":1,"type":"function"}}]}},"finish_reason":"tool_calls"}}]}}"#
    )
}

fn signed(mut s: MessageSnapshot, key: &str, value: Value) -> MessageSnapshot {
    s.calls[0]
        .tool_call
        .provider_metadata
        .insert(key.to_string(), value);
    s
}

/// One turn of two parallel calls, the first carrying `value` under metadata `key`.
fn parallel_signed(key: &str, value: Value) -> Vec<MessageSnapshot> {
    let s = snapshot(
        "m1",
        vec![
            call(
                "function-call-1",
                "get_weather",
                0,
                json!({"city": "Paris"}),
            ),
            call("function-call-2", "get_weather", 1, json!({"city": "Rome"})),
        ],
        vec![
            result("function-call-1", "18C"),
            result("function-call-2", "21C"),
        ],
    );
    vec![signed(s, key, value)]
}

fn compat() -> Vec<MessageSnapshot> {
    parallel_signed(
        "extra_content",
        json!({"google": {"thought_signature": SIG}}),
    )
}

fn native() -> Vec<MessageSnapshot> {
    parallel_signed("thoughtSignature", json!(SIG))
}

#[test]
fn gemini_openai_compat_signature_is_decoded_onto_its_call_only() {
    let events = decode(Provider::OpenaiChat, compat_chunk().as_bytes()).unwrap();
    let fragments: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChunkEvent::CallFragment(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(fragments.len(), 2);
    assert_eq!(
        fragments[0].metadata.get("extra_content"),
        Some(&json!({"google": {"thought_signature": SIG}}))
    );
    assert!(fragments[1].metadata.is_empty(), "{:?}", fragments[1]);
}

#[test]
fn gemini_openai_compat_extra_content_of_any_shape_never_fails_the_chunk() {
    for extra in [
        json!(null),
        json!("text"),
        json!(7),
        json!([1, 2]),
        json!({"google": null}),
        json!({"google": {"thought_signature": 5}}),
        json!({"google": {"thought_signature": "  "}}),
        json!({"other_vendor": {"x": 1}}),
    ] {
        let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "id": "call_1", "extra_content": extra,
            "function": {"name": "f", "arguments": "{}"}}]}}]});
        let events = decode(Provider::OpenaiChat, chunk.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{extra}: {e}"));
        let ChunkEvent::CallFragment(f) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(f.at.wire_id.as_deref(), Some("call_1"));
        assert!(f.metadata.is_empty(), "{extra}: {:?}", f.metadata);
    }
}

#[test]
fn gemini_openai_compat_signature_is_rendered_back_on_the_same_openai_chat_call() {
    let h = render(
        &compat(),
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    let calls = h.messages[0]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["id"], "function-call-1");
    assert_eq!(
        calls[0]["extra_content"],
        json!({"google": {"thought_signature": SIG}})
    );
    assert!(calls[1].get("extra_content").is_none(), "{:?}", calls[1]);
    assert_eq!(h.dropped_signatures, 0);
    assert!(h.notes.is_empty(), "{:?}", h.notes);
    // and parsed back into the same metadata
    let back = parse_history(HistoryFormat::OpenaiChat, &h.messages).unwrap();
    assert_eq!(
        back[0].calls[0]
            .tool_call
            .provider_metadata
            .get("extra_content"),
        Some(&json!({"google": {"thought_signature": SIG}}))
    );
}

#[test]
fn gemini_signatures_render_on_the_gemini_part_they_came_from() {
    for (what, snaps) in [("native", native()), ("openai-compatible", compat())] {
        let h = render(&snaps, HistoryFormat::Gemini, &HistoryOptions::default()).unwrap();
        let parts = h.messages[0]["parts"].as_array().unwrap();
        assert_eq!(parts[0]["functionCall"]["id"], "function-call-1", "{what}");
        assert_eq!(parts[0]["thoughtSignature"], SIG, "{what}");
        // the second parallel call had none and gets none
        assert!(parts[1].get("thoughtSignature").is_none(), "{what}");
        assert_eq!(h.dropped_signatures, 0, "{what}");
        assert!(h.notes.is_empty(), "{what}");
    }
}

#[test]
fn gemini_signatures_are_dropped_with_a_note_for_other_providers() {
    let cases = [
        // a native signature never goes into openai-chat: that target may be OpenAI itself
        (native(), HistoryFormat::OpenaiChat),
        (native(), HistoryFormat::OpenaiResponses),
        (native(), HistoryFormat::Anthropic),
        (native(), HistoryFormat::Mistral),
        (native(), HistoryFormat::Bedrock),
        (native(), HistoryFormat::Ollama),
        (compat(), HistoryFormat::OpenaiResponses),
        (compat(), HistoryFormat::Anthropic),
        (compat(), HistoryFormat::Mistral),
        (compat(), HistoryFormat::Bedrock),
        (compat(), HistoryFormat::Ollama),
    ];
    for (snaps, target) in cases {
        let h = render(&snaps, target, &HistoryOptions::default()).unwrap();
        let text = serde_json::to_string(&h.messages).unwrap();
        assert!(!text.contains(SIG), "{target}: signature rendered: {text}");
        assert!(!text.contains("extra_content"), "{target}: {text}");
        assert_eq!(h.dropped_signatures, 1, "{target}");
        assert_eq!(h.notes.len(), 1, "{target}");
        assert!(h.notes[0].contains("thought signature"), "{:?}", h.notes);
        assert!(h.notes[0].contains(target.as_str()), "{:?}", h.notes);
    }
}

#[test]
fn dropped_signatures_count_only_calls_the_window_keeps() {
    let mut snaps = native();
    snaps.push(signed(
        snapshot(
            "m2",
            vec![call("call_b", "f", 0, json!({}))],
            vec![result("call_b", "ok")],
        ),
        "thoughtSignature",
        json!("second"),
    ));
    let all = render(&snaps, HistoryFormat::Anthropic, &HistoryOptions::default()).unwrap();
    assert_eq!(all.dropped_signatures, 2);
    let options = HistoryOptions {
        window: Some(2),
        ..HistoryOptions::default()
    };
    let last = render(&snaps, HistoryFormat::Anthropic, &options).unwrap();
    assert_eq!(last.messages.len(), 2);
    assert_eq!(last.dropped_signatures, 1);
}

#[test]
fn invalid_call_is_shown_with_its_raw_text_never_as_empty_arguments() {
    let raw = r#"{"city": "Par"#;
    let mut s = snapshot(
        "m1",
        vec![
            cut_call("call_bad", "get_weather", 0, CallStatus::Invalid, raw),
            call("call_ok", "get_time", 1, json!({"tz": "CET"})),
        ],
        vec![result("call_ok", "12:00")],
    );
    s.finish_reason = Some("length".to_string());
    let snaps = vec![s];
    for target in HistoryFormat::ALL {
        let h = render(&snaps, target, &HistoryOptions::default()).unwrap();
        let text = serde_json::to_string(&h.messages).unwrap();
        // the raw text reaches the model, as JSON-escaped text in some message
        let escaped = serde_json::to_string(raw).unwrap();
        let escaped = &escaped[1..escaped.len() - 1];
        assert!(text.contains(escaped), "{target}: raw text missing: {text}");
        assert!(text.contains("get_weather"), "{target}: {text}");
        // and it is never a tool call (which would be sent with `{}` or rejected)
        let parsed = parse_history(target, &h.messages).unwrap();
        let names: Vec<&str> = parsed
            .iter()
            .flat_map(|m| m.calls.iter().map(|c| c.tool_call.name.as_str()))
            .collect();
        assert_eq!(names, ["get_time"], "{target}: {text}");
    }
}
