//! Comparing what the worker published with the reference: one event against the reference's
//! (with the first difference described), a message's source, and per-message order.

use super::super::reference::{normalize_event, Reference};
use super::Seen;
use crate::harness::message_key;
use serde_json::Value;
use std::collections::BTreeSet;

/// The source of the message an event belongs to.
pub(super) fn message_source(reference: &Reference, event: &Value) -> String {
    let key = message_key(event);
    reference
        .messages
        .get(&key)
        .map(|m| m.source.clone())
        .unwrap_or_else(|| "not in the workload".to_string())
}

/// ` call #i <id>` for call events.
pub(super) fn call_of(event: &Value) -> String {
    match event.get("tool_call") {
        Some(c) => format!(" call #{} {}", c["index"], c["id"]),
        None => match event.get("tool_result") {
            Some(r) => format!(" result for {}", r["tool_call_id"]),
            None => String::new(),
        },
    }
}

/// Whether `event` ends a call `abandoned`/`invalid` that the reference completes.
pub(super) fn should_have_completed(reference: &Reference, event: &Value) -> bool {
    let ty = event["type"].as_str().unwrap_or_default();
    if ty != "tool_call.abandoned" && ty != "tool_call.invalid" {
        return false;
    }
    reference.events.values().any(|e| {
        e["type"] == "tool_call.completed"
            && e["conversation_id"] == event["conversation_id"]
            && e["message_id"] == event["message_id"]
            && e["tool_call"]["index"] == event["tool_call"]["index"]
    })
}

/// Equal after normalization; `message.completed`'s results must be among the message's
/// final results.
pub(super) fn same_event(
    reference: &Reference,
    expected: &Value,
    actual: &Value,
) -> Result<(), String> {
    let (e, a) = (normalize_event(expected), normalize_event(actual));
    if e != a {
        return Err(first_difference(&e, &a));
    }
    if actual["type"] == "message.completed" {
        let key = (
            actual["conversation_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            actual["message_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let known: BTreeSet<String> = reference
            .messages
            .get(&key)
            .and_then(|m| m.snapshot.as_ref())
            .and_then(|s| s["tool_results"].as_array())
            .map(|l| l.iter().map(|r| r.to_string()).collect())
            .unwrap_or_default();
        for r in actual["tool_results"].as_array().into_iter().flatten() {
            if !known.contains(&r.to_string()) {
                return Err(format!(
                    "tool_results has {}, not a result of the message",
                    excerpt(&Some(r.clone()))
                ));
            }
        }
    }
    Ok(())
}

/// Where two JSON values first differ, briefly.
pub(super) fn first_difference(want: &Value, got: &Value) -> String {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    None => return format!("field {k} missing"),
                    Some(gv) if gv != wv => {
                        return format!("{k}: {}", first_difference(wv, gv));
                    }
                    _ => {}
                }
            }
            for k in g.keys() {
                if !w.contains_key(k) {
                    return format!("unexpected field {k}");
                }
            }
            "equal".to_string()
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                if wv != gv {
                    return format!("[{i}]: {}", first_difference(wv, gv));
                }
            }
            "equal".to_string()
        }
        _ => format!(
            "want {}, got {}",
            excerpt(&Some(want.clone())),
            excerpt(&Some(got.clone()))
        ),
    }
}

pub(super) fn excerpt(v: &Option<Value>) -> String {
    let text = match v {
        Some(v) => v.to_string(),
        None => "nothing (404)".to_string(),
    };
    if text.len() > 300 {
        let mut end = 300;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &text[..end], text.len())
    } else {
        text
    }
}

pub(super) fn is_call_or_message_event(e: &Value) -> bool {
    e["type"]
        .as_str()
        .is_some_and(|t| t.starts_with("tool_call.") || t == "message.completed")
}

/// Per message: call and `message.completed` events in the reference's order, each call's
/// `started` before its terminal event, `message.completed` after every call event, results
/// after their call's `started`.
pub(super) fn check_order(
    reference: &Reference,
    expected_ids: &[String],
    actual: &[&Seen],
) -> Result<(), String> {
    let present: BTreeSet<&str> = actual.iter().map(|s| s.id.as_str()).collect();
    let want: Vec<&str> = expected_ids
        .iter()
        .filter(|id| {
            reference
                .events
                .get(*id)
                .is_some_and(is_call_or_message_event)
                && present.contains(id.as_str())
        })
        .map(String::as_str)
        .collect();
    let mut firsts = BTreeSet::new();
    let got: Vec<&str> = actual
        .iter()
        .filter(|s| reference.events.contains_key(&s.id) && is_call_or_message_event(&s.event))
        .filter(|s| firsts.insert(s.id.as_str()))
        .map(|s| s.id.as_str())
        .collect();
    if want != got {
        let at = want
            .iter()
            .zip(&got)
            .position(|(w, g)| w != g)
            .unwrap_or_else(|| want.len().min(got.len()));
        return Err(format!(
            "call/message events out of order at position {at}: want {:?}, got {:?}",
            want.get(at),
            got.get(at)
        ));
    }
    // rules that hold for ghosts too
    let mut started: BTreeSet<String> = BTreeSet::new();
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let mut completed_msg = false;
    for s in actual {
        let ty = s.event["type"].as_str().unwrap_or_default();
        let index = s.event["tool_call"]["index"].to_string();
        let call_id = s.event["tool_call"]["id"].as_str().unwrap_or_default();
        match ty {
            "tool_call.started" => {
                if ended.contains(&index) {
                    return Err(format!("call #{index} started after its end"));
                }
                started.insert(call_id.to_string());
            }
            "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned" => {
                if completed_msg {
                    return Err(format!("{ty} of call #{index} after message.completed"));
                }
                ended.insert(index);
            }
            "message.completed" => completed_msg = true,
            "tool_result.completed" => {
                let id = s.event["tool_result"]["tool_call_id"]
                    .as_str()
                    .unwrap_or_default();
                let named_here = actual.iter().any(|o| {
                    o.event["type"] == "tool_call.started" && o.event["tool_call"]["id"] == id
                });
                if named_here && !started.contains(id) {
                    return Err(format!(
                        "tool_result.completed for {id} before its tool_call.started"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
