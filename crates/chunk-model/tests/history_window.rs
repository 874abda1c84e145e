#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Windows never separate a call from its result, in any target.
//!
//! The bug these pin: for Anthropic, Gemini and Bedrock the rendered messages are merged so
//! roles alternate, and a turn's results merged with the next turn's orphaned-result text
//! became one message tagged with the later turn; `window::last` then cut between that message
//! and the calls it answers, so the history started with results whose calls were gone.
//! Every window size is tried over histories with parallel calls, results, orphans, duplicate
//! results, calls cut short and calls with no result.

mod history_fixtures;

use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{CallStatus, MessageSnapshot};
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::{json, Value};

/// Histories whose turns end in user messages that merge with the next turn's (orphans,
/// cut-only turns, turns of orphans only), with parallel calls answered out of order.
fn histories() -> Vec<Vec<MessageSnapshot>> {
    let parallel = |msg: &str, ids: &[&str], answered: &[&str]| {
        snapshot(
            msg,
            ids.iter()
                .enumerate()
                .map(|(k, id)| call(id, &format!("tool_{id}"), k as u32, json!({"k": k})))
                .collect(),
            answered
                .iter()
                .map(|id| result(id, &format!("out {id}")))
                .collect(),
        )
    };
    let with_orphans = |mut s: MessageSnapshot, ids: &[&str]| {
        s.orphaned_results = ids.iter().map(|id| result(id, "late")).collect();
        s
    };
    let orphans_only = |msg: &str, ids: &[&str]| with_orphans(snapshot(msg, vec![], vec![]), ids);
    let cut_only = |msg: &str, id: &str| {
        let mut s = snapshot(
            msg,
            vec![cut_call(id, "search", 0, CallStatus::Invalid, "{\"q\":")],
            vec![],
        );
        s.tool_results = vec![result(id, "result of a cut call")];
        s
    };

    vec![
        // results, then the next turn's orphan text: merged into one user message
        vec![
            parallel("m1", &["call_a1", "call_a2"], &["call_a2", "call_a1"]),
            orphans_only("m2", &["call_gone"]),
            parallel(
                "m3",
                &["call_b1", "call_b2", "call_b3"],
                &["call_b3", "call_b1"],
            ),
            with_orphans(
                parallel(
                    "m4",
                    &["call_c1", "call_c2"],
                    &["call_c1", "call_c2", "call_zz"],
                ),
                &["call_old"],
            ),
            orphans_only("m5", &["call_x", "call_y"]),
        ],
        // cut-only turns between call turns (assistant note + user orphan of the cut call)
        vec![
            parallel("m1", &["call_a1", "call_a2"], &["call_a1", "call_a2"]),
            cut_only("m2", "call_cut"),
            parallel("m3", &["call_b1", "call_b2"], &["call_b2"]),
            cut_only("m4", "call_cut2"),
            orphans_only("m5", &["call_o1"]),
            parallel("m6", &["call_c1"], &["call_c1", "call_c1"]),
        ],
        // many consecutive orphan-only turns after parallel calls, then calls again
        vec![
            parallel("m1", &["call_a1", "call_a2", "call_a3"], &["call_a3"]),
            orphans_only("m2", &["call_p"]),
            orphans_only("m3", &["call_q"]),
            orphans_only("m4", &["call_r"]),
            parallel("m5", &["call_b1", "call_b2"], &["call_b1", "call_b2"]),
            orphans_only("m6", &["call_s"]),
        ],
    ]
}

/// A message's tool calls and tool results, as (mapped) ids in the target's fields.
struct Tools {
    calls: Vec<String>,
    results: Vec<String>,
}

fn ids_at(items: Option<&Value>, f: impl Fn(&Value) -> Option<&Value>) -> Vec<String> {
    items
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| f(x).and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn tools(target: HistoryFormat, m: &Value) -> Tools {
    match target {
        HistoryFormat::OpenaiChat | HistoryFormat::Mistral => Tools {
            calls: ids_at(m.get("tool_calls"), |c| c.get("id")),
            results: if m["role"] == "tool" {
                vec![m["tool_call_id"].as_str().unwrap_or("").to_string()]
            } else {
                vec![]
            },
        },
        HistoryFormat::OpenaiResponses => {
            let id = m["call_id"].as_str().unwrap_or("").to_string();
            match m["type"].as_str() {
                Some("function_call") => Tools {
                    calls: vec![id],
                    results: vec![],
                },
                Some("function_call_output") => Tools {
                    calls: vec![],
                    results: vec![id],
                },
                _ => Tools {
                    calls: vec![],
                    results: vec![],
                },
            }
        }
        HistoryFormat::Anthropic => Tools {
            calls: ids_at(m.get("content"), |b| {
                (b["type"] == "tool_use").then(|| b.get("id")).flatten()
            }),
            results: ids_at(m.get("content"), |b| {
                (b["type"] == "tool_result")
                    .then(|| b.get("tool_use_id"))
                    .flatten()
            }),
        },
        HistoryFormat::Bedrock => Tools {
            calls: ids_at(m.get("content"), |b| b.pointer("/toolUse/toolUseId")),
            results: ids_at(m.get("content"), |b| b.pointer("/toolResult/toolUseId")),
        },
        HistoryFormat::Gemini => Tools {
            calls: ids_at(m.get("parts"), |p| p.pointer("/functionCall/id")),
            results: ids_at(m.get("parts"), |p| p.pointer("/functionResponse/id")),
        },
        // no ids: a call is named by its function, results answer calls in order
        HistoryFormat::Ollama => Tools {
            calls: ids_at(m.get("tool_calls"), |c| c.pointer("/function/name")),
            results: if m["role"] == "tool" {
                vec![m["tool_name"].as_str().unwrap_or("").to_string()]
            } else {
                vec![]
            },
        },
    }
}

/// Asserts that every result in `messages` answers a call kept before it (in the message right
/// before it where the target requires that) and every kept call has its result after it.
fn assert_calls_and_results_together(target: HistoryFormat, messages: &[Value], what: &str) {
    let per_message: Vec<Tools> = messages.iter().map(|m| tools(target, m)).collect();
    let mut open: Vec<String> = Vec::new(); // calls of the latest call message not yet answered
    let mut after_calls = false; // Responses: parallel calls are consecutive items
    for (i, t) in per_message.iter().enumerate() {
        if !t.calls.is_empty() {
            let same_turn = after_calls && target == HistoryFormat::OpenaiResponses;
            assert!(
                open.is_empty() || same_turn,
                "{what}: message {i} makes calls while {open:?} are unanswered:\n{messages:#?}"
            );
            open.extend(t.calls.iter().cloned());
        }
        after_calls = !t.calls.is_empty();
        for r in &t.results {
            let Some(pos) = open.iter().position(|c| c == r) else {
                panic!(
                    "{what}: message {i} holds a result for {r} whose call is not kept right \
                     before it:\n{messages:#?}"
                );
            };
            // in call order, each answered once
            assert_eq!(pos, 0, "{what}: result {r} out of call order");
            open.remove(pos);
        }
        if target.merges_roles() && t.calls.is_empty() && t.results.is_empty() {
            assert!(
                open.is_empty(),
                "{what}: message {i} comes between calls {open:?} and their results"
            );
        }
    }
    assert!(
        open.is_empty(),
        "{what}: calls {open:?} kept without their results:\n{messages:#?}"
    );
}

fn check_every_window(target: HistoryFormat) {
    for (h, snaps) in histories().iter().enumerate() {
        let full = render(snaps, target, &HistoryOptions::default()).unwrap();
        assert_calls_and_results_together(target, &full.messages, &format!("{target} #{h} full"));
        for n in 0..=full.messages.len() + 1 {
            let options = HistoryOptions {
                window: Some(n),
                ..HistoryOptions::default()
            };
            let kept = render(snaps, target, &options).unwrap().messages;
            let what = format!("{target} history #{h} window {n}");
            assert_calls_and_results_together(target, &kept, &what);
            // a suffix of the full history, never shorter than asked
            assert!(
                kept.len() >= n.min(full.messages.len()),
                "{what}: too short"
            );
            assert_eq!(
                kept[..],
                full.messages[full.messages.len() - kept.len()..],
                "{what}: not a suffix of the full history"
            );
        }
    }
}

#[test]
fn window_never_separates_call_from_result_openai_chat() {
    check_every_window(HistoryFormat::OpenaiChat);
}

#[test]
fn window_never_separates_call_from_result_openai_responses() {
    check_every_window(HistoryFormat::OpenaiResponses);
}

#[test]
fn window_never_separates_call_from_result_anthropic() {
    check_every_window(HistoryFormat::Anthropic);
}

#[test]
fn window_never_separates_call_from_result_gemini() {
    check_every_window(HistoryFormat::Gemini);
}

#[test]
fn window_never_separates_call_from_result_mistral() {
    check_every_window(HistoryFormat::Mistral);
}

#[test]
fn window_never_separates_call_from_result_bedrock() {
    check_every_window(HistoryFormat::Bedrock);
}

#[test]
fn window_never_separates_call_from_result_ollama() {
    check_every_window(HistoryFormat::Ollama);
}

/// The measured case, spelled out: Anthropic, window 1 over call turn + orphan-only turn.
#[test]
fn window_over_merged_results_and_orphan_keeps_the_calls() {
    let snaps = vec![
        snapshot(
            "m1",
            vec![
                call("call_1", "a", 0, json!({})),
                call("call_2", "b", 1, json!({})),
            ],
            vec![result("call_1", "r1"), result("call_2", "r2")],
        ),
        {
            let mut s = snapshot("m2", vec![], vec![]);
            s.orphaned_results = vec![result("call_old", "late")];
            s
        },
    ];
    for target in [
        HistoryFormat::Anthropic,
        HistoryFormat::Gemini,
        HistoryFormat::Bedrock,
    ] {
        let options = HistoryOptions {
            window: Some(1),
            ..HistoryOptions::default()
        };
        let h = render(&snaps, target, &options).unwrap();
        // the results + orphan text are one user message; the window widens to its calls
        assert_eq!(h.messages.len(), 2, "{target}: {:#?}", h.messages);
        assert_eq!(
            h.messages[0]["role"],
            if target == HistoryFormat::Gemini {
                "model"
            } else {
                "assistant"
            }
        );
        assert_eq!(h.messages[1]["role"], "user");
    }
}
