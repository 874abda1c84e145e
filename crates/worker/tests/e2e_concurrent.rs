//! `toolstream run` end to end against a real nats-server: many conversations streamed at once
//! with interleaved chunks from two providers (OpenAI Chat and Anthropic), plus tool results —
//! some published before the call they answer. Every expected event arrives exactly once, in
//! order per message, and `message.completed` lists the full set of calls (and the results
//! that were already there).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const MESSAGES: usize = 30;

struct Plan {
    conv: String,
    msg: String,
    provider: &'static str,
    calls: Vec<Call>,
    /// Index of the call whose result is published before the stream starts.
    early_result: Option<usize>,
}

fn plans() -> Vec<Plan> {
    (0..MESSAGES)
        .map(|i| {
            let n_calls = 1 + i % 3;
            let calls = (0..n_calls)
                .map(|k| Call {
                    id: format!("call_{i}_{k}"),
                    name: ["get_weather", "search_docs", "send_email"][k % 3].to_string(),
                    args: json!({"city": format!("City {i}/{k}"), "days": i + k,
                                 "tags": ["a", "b", {"nested": "x\"y"}]}),
                })
                .collect();
            Plan {
                conv: format!("c{i:02}"),
                msg: format!("m{i:02}"),
                provider: if i % 2 == 0 {
                    "openai-chat"
                } else {
                    "anthropic"
                },
                calls,
                early_result: (i % 5 == 0).then_some(0),
            }
        })
        .collect()
}

fn output_of(call: &Call) -> String {
    format!("result of {}", call.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_from_two_providers_yield_each_event_once_in_order() {
    let mut e2e = E2e::start(toolstream_bin(), &[]).await;
    let (worker, js, producer) = e2e.parts();

    let plans = plans();
    let mut tasks = Vec::new();
    for plan in plans.iter() {
        let producer = producer.clone();
        let conv = plan.conv.clone();
        let msg = plan.msg.clone();
        let provider = plan.provider;
        let calls = plan.calls.clone();
        let early = plan.early_result;
        tasks.push(tokio::spawn(async move {
            let result_msg = format!("t{}", &msg[1..]);
            let mut rseq = 0;
            if let Some(k) = early {
                producer
                    .result(
                        &conv,
                        &result_msg,
                        rseq,
                        &calls[k].id,
                        &output_of(&calls[k]),
                    )
                    .await;
                rseq += 1;
            }
            let chunks = if provider == "openai-chat" {
                openai_chat_stream(&calls)
            } else {
                anthropic_stream(&calls)
            };
            for (seq, body) in chunks.iter().enumerate() {
                producer
                    .chunk(&conv, &msg, provider, seq as u64, body)
                    .await;
                // let other conversations interleave
                tokio::task::yield_now().await;
            }
            for (k, call) in calls.iter().enumerate() {
                if Some(k) != early {
                    producer
                        .result(&conv, &result_msg, rseq, &call.id, &output_of(call))
                        .await;
                    rseq += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let total_calls: usize = plans.iter().map(|p| p.calls.len()).sum();
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "every message.completed and every tool_result.completed",
            |all| {
                let results = all
                    .iter()
                    .filter(|e| e.json()["type"] == "tool_result.completed")
                    .count();
                completed_messages(all) == MESSAGES && results == total_calls
            },
            || worker.log(),
        )
        .await;

    // A clean stop drains the outbox: whatever the stream holds now is final.
    assert!(
        worker.terminate(),
        "worker exits cleanly on SIGTERM:\n{}",
        tail(&worker.log(), 40)
    );
    events.poll().await;

    // Nats-Msg-Id is the event id on every event.
    for e in &events.all {
        assert_eq!(
            e.header("Nats-Msg-Id").as_deref(),
            e.json()["event_id"].as_str(),
            "Nats-Msg-Id = event_id"
        );
        let v = e.json();
        assert_eq!(
            e.subject,
            format!(
                "toolstream.events.{}.{}",
                v["conversation_id"].as_str().unwrap(),
                v["message_id"].as_str().unwrap()
            )
        );
    }

    let grouped = by_message(&events.all);
    let expected_total: usize = plans
        .iter()
        .map(|p| 2 * p.calls.len() + 1 + p.calls.len())
        .sum();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events.all {
        *kinds
            .entry(e.json()["type"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    assert_eq!(
        events.all.len(),
        expected_total,
        "no event missing, none extra: {kinds:?}\n{:#?}",
        events
            .all
            .iter()
            .map(|e| e.json())
            .filter(|e| e["type"] == "tool_call.abandoned" || e["type"] == "tool_call.invalid")
            .take(2)
            .collect::<Vec<_>>()
    );

    for plan in &plans {
        let evs = grouped
            .get(&(plan.conv.clone(), plan.msg.clone()))
            .unwrap_or_else(|| panic!("no events for {}/{}", plan.conv, plan.msg));
        check_message(evs, &plan.calls).unwrap_or_else(|e| {
            panic!(
                "{}/{} ({}): {e}\n{evs:#?}",
                plan.conv, plan.msg, plan.provider
            )
        });
        let provider_seen: Vec<&Value> = evs.iter().map(|e| &e["provider"]).collect();
        assert!(
            provider_seen.iter().all(|p| *p == plan.provider),
            "{provider_seen:?}"
        );

        // every result matched to its call, once, with its output
        let results: BTreeMap<&str, &str> = evs
            .iter()
            .filter(|e| e["type"] == "tool_result.completed")
            .map(|e| {
                (
                    e["tool_result"]["tool_call_id"].as_str().unwrap(),
                    e["tool_result"]["output"].as_str().unwrap(),
                )
            })
            .collect();
        for call in &plan.calls {
            assert_eq!(
                results.get(call.id.as_str()).copied(),
                Some(output_of(call).as_str()),
                "{}: result of {}",
                plan.msg,
                call.id
            );
        }

        // the result that came before its call is already on message.completed
        if let Some(k) = plan.early_result {
            let done = evs
                .iter()
                .find(|e| e["type"] == "message.completed")
                .unwrap();
            let listed: Vec<&str> = done["tool_results"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["tool_call_id"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            assert!(
                listed.contains(&plan.calls[k].id.as_str()),
                "{}: message.completed tool_results {listed:?} lacks the early result",
                plan.msg
            );
        }
    }
}
