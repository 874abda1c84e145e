//! History policy: every rule is pinned by a test named for the bug it prevents.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions, HistoryRequest, TRUNCATION_MARKER};
use chunk_model::CallStatus;
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::{json, Value};

fn opts() -> HistoryOptions {
    HistoryOptions::default()
}

fn roles(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn tool_message_without_call_is_never_sent() {
    // The call was cut by max_tokens (invalid), yet its tool result was stored, and another
    // result arrived for an id nobody called: none may become a role:tool message.
    let mut snap = snapshot(
        "m1",
        vec![cut_call(
            "call_a",
            "search",
            0,
            CallStatus::Invalid,
            "{\"q\":\"par",
        )],
        vec![result("call_a", "partial result")],
    );
    snap.orphaned_results.push(result("call_zz", "late"));
    for format in [HistoryFormat::OpenaiChat, HistoryFormat::Mistral] {
        let h = render(std::slice::from_ref(&snap), format, &opts()).unwrap();
        assert!(
            h.messages.iter().all(|m| m["role"] != "tool"),
            "{format}: {:?}",
            h.messages
        );
        assert!(h.messages.iter().all(|m| m.get("tool_calls").is_none()));
        assert_eq!(h.orphans, 2);
        let texts: Vec<&str> = h
            .messages
            .iter()
            .filter_map(|m| m["content"].as_str())
            .collect();
        assert!(texts
            .iter()
            .any(|t| t.starts_with("[Tool Result - Previous Context]\npartial result")));
        assert!(texts.iter().any(|t| t.contains("late")));
        assert!(texts
            .iter()
            .any(|t| t.contains("[Tool call not sent: search (id call_a) was invalid")));
    }
}

#[test]
fn every_tool_message_follows_its_call_in_openai_chat() {
    let snaps = vec![
        snapshot(
            "m1",
            vec![
                call("call_1", "a", 0, json!({})),
                cut_call("call_2", "b", 1, CallStatus::Abandoned, "{"),
            ],
            vec![
                result("call_2", "x"),
                result("call_1", "one"),
                result("call_1", "dup"),
            ],
        ),
        snapshot("m2", vec![call("call_3", "c", 0, json!({"k": 1}))], vec![]),
    ];
    let h = render(&snaps, HistoryFormat::OpenaiChat, &opts()).unwrap();
    let mut open: Vec<String> = Vec::new();
    for m in &h.messages {
        if let Some(tcs) = m.get("tool_calls").and_then(Value::as_array) {
            open = tcs
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_string())
                .collect();
        } else if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap();
            assert!(
                open.contains(&id.to_string()),
                "tool message {id} without call"
            );
        } else {
            open.clear();
        }
    }
    assert_eq!(h.placeholders, 1, "call_3 had no result");
    assert_eq!(h.orphans, 2, "call_2's result and the duplicate of call_1");
}

#[test]
fn call_without_result_gets_a_placeholder() {
    let snap = snapshot("m1", vec![call("call_1", "a", 0, json!({}))], vec![]);
    let mut o = opts();
    o.placeholder = "[tool still running]".to_string();
    let h = render(&[snap], HistoryFormat::Anthropic, &o).unwrap();
    assert_eq!(h.placeholders, 1);
    assert_eq!(
        h.messages[1],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
            "content": "[tool still running]", "is_error": false}]})
    );
}

#[test]
fn truncation_never_splits_a_multibyte_char() {
    // 600 chars of 4-byte emoji and 2-byte letters: a byte-based cut would panic or split.
    let long: String = "é😀".repeat(300);
    let snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({}))],
        vec![result("call_1", &long)],
    );
    for limit in [100, 101, 333, 500] {
        let mut o = opts();
        o.max_result_chars = limit;
        let h = render(std::slice::from_ref(&snap), HistoryFormat::OpenaiChat, &o).unwrap();
        let out = h.messages[1]["content"].as_str().unwrap();
        assert_eq!(out.chars().count(), limit);
        assert!(out.ends_with(TRUNCATION_MARKER));
        let head = out.strip_suffix(TRUNCATION_MARKER).unwrap();
        assert!(long.starts_with(head));
        assert_eq!(h.truncated_results, 1);
    }
}

#[test]
fn result_limit_is_clamped_to_100_through_10000() {
    let long = "x".repeat(20_000);
    let snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({}))],
        vec![result("call_1", &long)],
    );
    for (asked, got) in [(0, 100), (5, 100), (500, 500), (50_000, 10_000)] {
        let mut o = opts();
        o.max_result_chars = asked;
        let h = render(std::slice::from_ref(&snap), HistoryFormat::OpenaiChat, &o).unwrap();
        assert_eq!(
            h.messages[1]["content"].as_str().unwrap().chars().count(),
            got
        );
    }
}

#[test]
fn short_results_are_not_marked_truncated() {
    let exact = "y".repeat(500);
    let snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({}))],
        vec![result("call_1", &exact)],
    );
    let h = render(&[snap], HistoryFormat::OpenaiChat, &opts()).unwrap();
    assert_eq!(h.messages[1]["content"], json!(exact));
    assert_eq!(h.truncated_results, 0);
}

#[test]
fn window_keeps_call_with_its_result() {
    let snaps = vec![
        snapshot(
            "m1",
            vec![call("call_1", "a", 0, json!({}))],
            vec![result("call_1", "r1")],
        ),
        snapshot(
            "m2",
            vec![
                call("call_2", "b", 0, json!({})),
                call("call_3", "c", 1, json!({})),
            ],
            vec![result("call_2", "r2"), result("call_3", "r3")],
        ),
    ];
    for n in 1..=3 {
        let mut o = opts();
        o.window = Some(n);
        let h = render(&snaps, HistoryFormat::OpenaiChat, &o).unwrap();
        // the last turn is assistant + 2 tool messages: a window of 1..=3 keeps all three
        assert_eq!(
            roles(&h.messages),
            ["assistant", "tool", "tool"],
            "window {n}"
        );
        assert_eq!(h.messages[0]["tool_calls"].as_array().unwrap().len(), 2);
    }
    let mut o = opts();
    o.window = Some(4);
    let h = render(&snaps, HistoryFormat::OpenaiChat, &o).unwrap();
    assert_eq!(
        roles(&h.messages),
        ["assistant", "tool", "assistant", "tool", "tool"]
    );
}

#[test]
fn window_never_starts_with_an_anthropic_tool_result() {
    let snaps = vec![
        snapshot(
            "m1",
            vec![call("call_1", "a", 0, json!({}))],
            vec![result("call_1", "r1")],
        ),
        snapshot(
            "m2",
            vec![call("call_2", "b", 0, json!({}))],
            vec![result("call_2", "r2")],
        ),
    ];
    let mut o = opts();
    o.window = Some(1);
    let h = render(&snaps, HistoryFormat::Anthropic, &o).unwrap();
    assert_eq!(h.messages.len(), 2);
    assert_eq!(h.messages[0]["content"][0]["type"], "tool_use");
    assert_eq!(h.messages[0]["content"][0]["id"], "call_2");
}

#[test]
fn orphaned_result_becomes_context_text_not_dropped() {
    let mut snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({}))],
        vec![result("call_1", "ok")],
    );
    snap.orphaned_results
        .push(result("call_gone", "the weather is 18C"));
    let h = render(&[snap], HistoryFormat::Anthropic, &opts()).unwrap();
    // tool_result first, then the orphan text, merged into the one user message
    assert_eq!(h.messages.len(), 2);
    let blocks = h.messages[1]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[1]["type"], "text");
    assert_eq!(
        blocks[1]["text"],
        "[Tool Result - Previous Context]\nthe weather is 18C"
    );
    assert_eq!(h.orphans, 1);
}

#[test]
fn abandoned_call_is_a_note_not_a_tool_call() {
    let snap = snapshot(
        "m1",
        vec![
            call("call_1", "ok_tool", 0, json!({"a": 1})),
            cut_call("call_2", "cut_tool", 1, CallStatus::Abandoned, "{\"a\":"),
        ],
        vec![result("call_1", "fine")],
    );
    let h = render(&[snap], HistoryFormat::OpenaiChat, &opts()).unwrap();
    let tcs = h.messages[0]["tool_calls"].as_array().unwrap();
    assert_eq!(tcs.len(), 1);
    assert_eq!(tcs[0]["function"]["name"], "ok_tool");
    let note = h.messages[0]["content"].as_str().unwrap();
    assert!(
        note.contains("cut_tool (id call_2) was abandoned (truncated); raw arguments: {\"a\":"),
        "{note}"
    );
}

#[test]
fn strict_text_mode_sends_no_tool_structures() {
    let snap = snapshot(
        "m1",
        vec![call("call_1", "get_weather", 0, json!({"city": "Paris"}))],
        vec![result("call_1", "18C")],
    );
    let mut o = opts();
    o.strict_text = true;
    for format in HistoryFormat::ALL {
        let h = render(std::slice::from_ref(&snap), format, &o).unwrap();
        let text = serde_json::to_string(&h.messages).unwrap();
        for banned in [
            "tool_calls",
            "tool_use",
            "tool_result",
            "functionCall",
            "functionResponse",
            "toolUse",
            "toolResult",
            "function_call",
            "\"tool\"",
        ] {
            assert!(!text.contains(banned), "{format}: {banned} in {text}");
        }
        assert!(
            text.contains("[Tool call] get_weather(id call_1)"),
            "{format}"
        );
        assert!(text.contains("18C"));
        assert_eq!(h.messages.len(), 2, "{format}");
    }
}

#[test]
fn token_estimate_counts_exactly_the_returned_payload() {
    let snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({"q": "x"}))],
        vec![result("call_1", &"z ".repeat(2000))],
    );
    let mut small = opts();
    small.max_result_chars = 100;
    let mut big = opts();
    big.max_result_chars = 4000;
    let hs = render(
        std::slice::from_ref(&snap),
        HistoryFormat::OpenaiChat,
        &small,
    )
    .unwrap();
    let hb = render(&[snap], HistoryFormat::OpenaiChat, &big).unwrap();
    assert!(
        hb.token_estimate > hs.token_estimate + 500,
        "{} vs {}",
        hb.token_estimate,
        hs.token_estimate
    );
    let payload = serde_json::to_string(&hs.messages).unwrap();
    if hs.tokenizer == "chars/4" {
        assert_eq!(hs.token_estimate, payload.chars().count().div_ceil(4));
    } else {
        assert_eq!(hs.tokenizer, "o200k_base");
        assert!(hs.token_estimate > 0 && hs.token_estimate < payload.len());
    }
}

#[test]
fn history_request_parses_target_names_and_defaults() {
    let r: HistoryRequest =
        serde_json::from_str(r#"{"target":"openai-chat","max_result_chars":800}"#).unwrap();
    assert_eq!(r.target, HistoryFormat::OpenaiChat);
    assert_eq!(r.options.max_result_chars, 800);
    assert_eq!(r.options.placeholder, "[No result recorded]");
    for (name, f) in [
        ("anthropic", HistoryFormat::Anthropic),
        ("mistral", HistoryFormat::Mistral),
        ("gemini", HistoryFormat::Gemini),
        ("bedrock", HistoryFormat::Bedrock),
        ("openai-responses", HistoryFormat::OpenaiResponses),
        ("ollama", HistoryFormat::Ollama),
        ("openai", HistoryFormat::OpenaiChat),
    ] {
        let r: HistoryRequest =
            serde_json::from_value(json!({"target": name, "strict_text": true, "window": 4}))
                .unwrap();
        assert_eq!(r.target, f);
        assert!(r.options.strict_text);
        assert_eq!(r.options.window, Some(4));
        assert_eq!(name.parse::<HistoryFormat>().unwrap(), f);
    }
    assert!(serde_json::from_value::<HistoryRequest>(json!({"target": "nope"})).is_err());
    assert_eq!(HistoryOptions::default().result_limit(), 500);
}

#[test]
fn request_field_list_matches_the_struct() {
    // A caller that refuses unknown fields uses FIELDS: a new option missing from it would be
    // refused as a typo.
    let r = HistoryRequest {
        target: HistoryFormat::Gemini,
        options: HistoryOptions {
            window: Some(3),
            ..HistoryOptions::default()
        },
    };
    let v = serde_json::to_value(&r).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut fields = HistoryRequest::FIELDS.to_vec();
    keys.sort_unstable();
    fields.sort_unstable();
    assert_eq!(keys, fields);
}

#[cfg(feature = "tokenizer")]
#[test]
fn default_build_counts_with_the_o200k_tokenizer() {
    // The BPE ranks are embedded in tiktoken-rs: this must work offline.
    let snap = snapshot(
        "m1",
        vec![call("call_1", "a", 0, json!({"q": "x"}))],
        vec![],
    );
    let h = render(&[snap], HistoryFormat::OpenaiChat, &opts()).unwrap();
    assert_eq!(h.tokenizer, "o200k_base");
    let payload = serde_json::to_string(&h.messages).unwrap();
    assert_eq!(
        h.token_estimate,
        chunk_model::history::tokens::count(&payload).0
    );
}

/// The bug this pins: a Responses `custom_tool_call` (free-form input, e.g. `apply_patch`) went
/// back as a `function_call` whose `arguments` were its text JSON-quoted, a call of another
/// type than the custom tool the model made. It goes back as the item it came as.
#[test]
fn a_custom_call_goes_back_to_responses_as_a_custom_tool_call_with_its_text() {
    let patch = "*** Begin Patch\n*** Update File: a.rs\n@@\n-x\n+y\n*** End Patch";
    let mut s = snapshot(
        "m1",
        vec![
            call("call_p", "apply_patch", 0, json!(patch)),
            call("call_f", "get_time", 1, json!({"tz": "CET"})),
        ],
        vec![result("call_p", "Done!"), result("call_f", "12:00")],
    );
    s.calls[0].tool_call.raw_arguments = patch.to_string();
    s.calls[0].tool_call.kind = chunk_model::CallKind::Custom;
    let snaps = vec![s];
    let h = render(&snaps, HistoryFormat::OpenaiResponses, &opts()).unwrap();
    let types: Vec<&str> = h
        .messages
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "custom_tool_call",
            "function_call",
            "custom_tool_call_output",
            "function_call_output"
        ]
    );
    assert_eq!(
        h.messages[0]["input"], patch,
        "the text itself, never JSON-quoted"
    );
    assert_eq!(h.messages[0]["call_id"], "call_p");
    assert_eq!(h.messages[2]["call_id"], "call_p");
    // read back: the same custom call and its result
    let parsed =
        chunk_model::encode::parse_history(HistoryFormat::OpenaiResponses, &h.messages).unwrap();
    let back = &parsed[0];
    assert_eq!(back.calls[0].tool_call.kind, chunk_model::CallKind::Custom);
    assert_eq!(back.calls[0].tool_call.raw_arguments, patch);
    assert_eq!(back.calls[0].status, CallStatus::Completed);
    assert_eq!(back.tool_results[0].output, "Done!");
    // formats without custom tools keep it a function call
    let chat = render(&snaps, HistoryFormat::OpenaiChat, &opts()).unwrap();
    assert_eq!(chat.messages[0]["tool_calls"][0]["type"], "function");
}
