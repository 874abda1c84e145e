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

/// The notes about thought signatures (a history may also carry ordering notes: see
/// `history_ordering.rs`).
fn signature_notes(notes: &[String]) -> Vec<&String> {
    notes
        .iter()
        .filter(|n| n.contains("thought signature"))
        .collect()
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
        assert!(signature_notes(&h.notes).is_empty(), "{what}");
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
        let notes = signature_notes(&h.notes);
        assert_eq!(notes.len(), 1, "{target}");
        assert!(notes[0].contains(target.as_str()), "{:?}", h.notes);
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

/// A Gemini 3 stream (`streamGenerateContent?alt=sse` data lines) of two parallel calls that
/// arrive in separate chunks, only the first signed, with a thought part and a text part
/// before them (thought parts carry no signature of a call; the text part's is not a call's).
fn gemini3_parallel_stream() -> Vec<String> {
    vec![
        r#"{"candidates":[{"content":{"parts":[{"text":"Comparing both cities","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":61,"thoughtsTokenCount":48},"modelVersion":"gemini-3-pro-preview","responseId":"r1"}"#.to_string(),
        format!(r#"{{"candidates":[{{"content":{{"parts":[{{"functionCall":{{"name":"get_weather","args":{{"city":"Paris"}}}},"thoughtSignature":"{SIG}"}}],"role":"model"}},"index":0}}],"modelVersion":"gemini-3-pro-preview","responseId":"r1"}}"#),
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":61,"candidatesTokenCount":24,"thoughtsTokenCount":48},"modelVersion":"gemini-3-pro-preview","responseId":"r1"}"#.to_string(),
    ]
}

#[test]
fn gemini3_parallel_calls_keep_the_signature_on_the_first_call_only_from_stream_to_history() {
    let mut calls = Vec::new();
    for chunk in gemini3_parallel_stream() {
        for ev in decode(Provider::Gemini, chunk.as_bytes()).unwrap() {
            if let ChunkEvent::CallEnd(end) = ev {
                calls.push(end);
            }
        }
    }
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].metadata.get("thoughtSignature"), Some(&json!(SIG)));
    assert!(
        calls[1].metadata.get("thoughtSignature").is_none(),
        "the second call is unsigned"
    );
    // stored as decoded (synthetic ids: Gemini gave none), then rendered back
    let outcomes = calls
        .iter()
        .enumerate()
        .map(|(k, end)| {
            let args: Value = serde_json::from_str(end.arguments.as_deref().unwrap()).unwrap();
            let mut c = call(&format!("call_{k}"), "get_weather", k as u32, args);
            c.tool_call.provider_metadata = end.metadata.clone();
            c.tool_call
                .provider_metadata
                .insert("synthetic_id".into(), json!(true));
            c
        })
        .collect();
    let mut s = snapshot(
        "m1",
        outcomes,
        vec![result("call_0", "18C"), result("call_1", "21C")],
    );
    s.provider = Some(Provider::Gemini);
    let h = render(&[s], HistoryFormat::Gemini, &HistoryOptions::default()).unwrap();
    let parts = h.messages[0]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0]["thoughtSignature"], SIG);
    assert_eq!(parts[0]["functionCall"]["args"], json!({"city": "Paris"}));
    assert!(parts[1].get("thoughtSignature").is_none());
    assert!(
        parts.iter().all(|p| p["functionCall"].get("id").is_none()),
        "synthetic ids are never sent"
    );
    assert!(signature_notes(&h.notes).is_empty(), "{:?}", h.notes);
}

/// Parallel calls, the signed first one cut by the token limit.
fn first_call_cut(key: &str, value: Value) -> Vec<MessageSnapshot> {
    let mut cut = cut_call(
        "function-call-1",
        "get_weather",
        0,
        CallStatus::Invalid,
        r#"{"city": "Par"#,
    );
    cut.tool_call
        .provider_metadata
        .insert(key.to_string(), value);
    vec![snapshot(
        "m1",
        vec![
            cut,
            call("function-call-2", "get_weather", 1, json!({"city": "Rome"})),
        ],
        vec![result("function-call-2", "21C")],
    )]
}

#[test]
fn the_signature_of_a_cut_first_call_goes_to_the_first_call_sent_in_its_turn() {
    // Gemini 3 rejects a turn whose first function call has no signature: the signed call is
    // not sent (its raw text is a note), so the first sent call carries its turn's signature.
    let native = first_call_cut("thoughtSignature", json!(SIG));
    let h = render(&native, HistoryFormat::Gemini, &HistoryOptions::default()).unwrap();
    let parts = h.messages[0]["parts"].as_array().unwrap();
    assert!(parts[0]["text"]
        .as_str()
        .unwrap()
        .contains("Tool call not sent"));
    assert_eq!(parts[1]["functionCall"]["id"], "function-call-2");
    assert_eq!(parts[1]["thoughtSignature"], SIG);
    assert_eq!(h.dropped_signatures, 0);
    let notes = signature_notes(&h.notes);
    assert_eq!(notes.len(), 1, "{:?}", h.notes);
    assert!(
        notes[0].contains("function-call-1") && notes[0].contains("function-call-2"),
        "{:?}",
        h.notes
    );

    let compat = first_call_cut(
        "extra_content",
        json!({"google": {"thought_signature": SIG}}),
    );
    let h = render(
        &compat,
        HistoryFormat::OpenaiChat,
        &HistoryOptions::default(),
    )
    .unwrap();
    let calls = h.messages[0]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0]["extra_content"]["google"]["thought_signature"],
        SIG
    );
    assert_eq!(signature_notes(&h.notes).len(), 1, "{:?}", h.notes);

    // other targets: dropped, counted once, no word of moving it
    let h = render(
        &native,
        HistoryFormat::Anthropic,
        &HistoryOptions::default(),
    )
    .unwrap();
    assert!(!serde_json::to_string(&h.messages).unwrap().contains(SIG));
    assert_eq!(h.dropped_signatures, 1);
    let notes = signature_notes(&h.notes);
    assert_eq!(notes.len(), 1, "{:?}", h.notes);
    assert!(!notes[0].contains("first function call of its turn"));

    // a sent call with a signature of its own keeps it, and nothing moves
    let mut own = first_call_cut("thoughtSignature", json!(SIG));
    own[0].calls[1]
        .tool_call
        .provider_metadata
        .insert("thoughtSignature".into(), json!("own"));
    let h = render(&own, HistoryFormat::Gemini, &HistoryOptions::default()).unwrap();
    assert_eq!(h.messages[0]["parts"][1]["thoughtSignature"], "own");
    assert!(signature_notes(&h.notes).is_empty(), "{:?}", h.notes);
}

/// The bug this pins: a signature went back to whatever model the history was sent to; a
/// signature is made by one model family for itself. The model that made a signed call is
/// kept from the stream (`modelVersion`, the compat chunk's `model`), and when the caller
/// says which model the history is for, a signature of another family is dropped with a note.
#[test]
fn a_signature_goes_back_only_to_the_model_family_that_made_it() {
    // from the stream: the compat chunk's model is kept beside the signature
    let events = decode(Provider::OpenaiChat, compat_chunk().as_bytes()).unwrap();
    let signed_meta = events
        .iter()
        .find_map(|e| match e {
            ChunkEvent::CallFragment(f) if !f.metadata.is_empty() => Some(f.metadata.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        signed_meta.get("model"),
        Some(&json!("gemini-3-pro-preview"))
    );
    for (target, key, value) in [
        (HistoryFormat::Gemini, "thoughtSignature", json!(SIG)),
        (
            HistoryFormat::OpenaiChat,
            "extra_content",
            json!({"google": {"thought_signature": SIG}}),
        ),
    ] {
        let mut snaps = parallel_signed(key, value);
        snaps[0].calls[0]
            .tool_call
            .provider_metadata
            .insert("model".into(), json!("gemini-3-pro-preview"));
        let with = |model: Option<&str>| HistoryOptions {
            model: model.map(str::to_string),
            ..HistoryOptions::default()
        };
        // same family (another tier, a models/ path): sent, no note
        for model in [
            None,
            Some("gemini-3-flash"),
            Some("models/gemini-3-pro-preview"),
        ] {
            let h = render(&snaps, target, &with(model)).unwrap();
            let text = serde_json::to_string(&h.messages).unwrap();
            assert!(text.contains(SIG), "{target} {model:?}: {text}");
            assert_eq!(h.dropped_signatures, 0, "{target} {model:?}");
            assert!(signature_notes(&h.notes).is_empty(), "{:?}", h.notes);
        }
        // another family: dropped, counted, said
        for model in ["gemini-2.5-pro", "gpt-4.1"] {
            let h = render(&snaps, target, &with(Some(model))).unwrap();
            let text = serde_json::to_string(&h.messages).unwrap();
            assert!(!text.contains(SIG), "{target} {model}: {text}");
            assert!(text.contains("get_weather"), "the calls are still sent");
            assert_eq!(h.dropped_signatures, 1, "{target} {model}");
            let notes = signature_notes(&h.notes);
            assert_eq!(notes.len(), 1, "{notes:?}");
            assert!(
                notes[0].contains(model) && notes[0].contains("another family"),
                "{notes:?}"
            );
        }
    }
    // a signature whose model was never stored (stored before it was kept) is sent as before
    let snaps = parallel_signed("thoughtSignature", json!(SIG));
    let options = HistoryOptions {
        model: Some("gemini-2.5-pro".to_string()),
        ..HistoryOptions::default()
    };
    let h = render(&snaps, HistoryFormat::Gemini, &options).unwrap();
    assert_eq!(h.messages[0]["parts"][0]["thoughtSignature"], SIG);
}

#[test]
fn a_model_family_is_its_name_up_to_its_version() {
    use chunk_model::encode::model_family;
    for (model, family) in [
        ("gemini-3-pro-preview", "gemini-3"),
        ("models/gemini-3-flash", "gemini-3"),
        (
            "publishers/google/models/gemini-2.5-flash-lite",
            "gemini-2.5",
        ),
        ("Gemini-2.5-Pro", "gemini-2.5"),
        ("gpt-4.1", "gpt-4.1"),
        ("gemini-pro-latest", "gemini-pro-latest"),
    ] {
        assert_eq!(model_family(model), family, "{model}");
    }
}
