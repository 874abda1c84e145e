//! The checker of replayed events against an expectation: per-event schema and identity
//! checks, calls and results of `message.completed`, finish reason, truncation.

use super::*;
use std::sync::OnceLock;

/// Finish reasons toolstream itself writes when the provider gave none.
const TOOLSTREAM_FINISH_WORDS: [&str; 4] = [
    "stream_end",
    "provider_error",
    "control_end",
    "control_error",
];

/// Provider words that mean "cut by a token limit".
const TRUNCATION_WORDS: [&str; 5] = [
    "length",
    "max_tokens",
    "MAX_TOKENS",
    "max_output_tokens",
    "incomplete",
];
fn schema_validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let path = repo_root().join("crates/chunk-model/schema/event.v1.schema.json");
        let text = std::fs::read_to_string(&path).expect("read event schema");
        let schema: Value = serde_json::from_str(&text).expect("event schema is JSON");
        jsonschema::validator_for(&schema).expect("event schema compiles")
    })
}

/// The `type` of an event.
fn ty(e: &Value) -> &str {
    e["type"].as_str().unwrap_or("")
}

fn call_index(e: &Value) -> Option<u64> {
    e["tool_call"]["index"].as_u64()
}

fn is_terminal_call_event(e: &Value) -> bool {
    matches!(
        ty(e),
        "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned"
    )
}

fn status_of_event_type(t: &str) -> &str {
    t.strip_prefix("tool_call.").unwrap_or(t)
}

pub(super) fn check_events(
    provider: &str,
    message: &str,
    expected: &Value,
    events: &[Value],
    problems: &mut Vec<String>,
) {
    // Schema, envelope, unique event ids.
    let validator = schema_validator();
    let mut seen_ids = BTreeSet::new();
    for (n, e) in events.iter().enumerate() {
        let errors: Vec<String> = validator
            .iter_errors(e)
            .map(|err| err.to_string())
            .collect();
        if !errors.is_empty() {
            problems.push(format!(
                "event {n} ({}) violates the schema: {}",
                ty(e),
                errors.join("; ")
            ));
        }
        let id = e["event_id"].as_str().unwrap_or("").to_string();
        if !seen_ids.insert(id.clone()) {
            problems.push(format!(
                "event_id {id} appears twice (event {n}, {})",
                ty(e)
            ));
        }
        if e["conversation_id"] != "replay" || e["message_id"] != message {
            problems.push(format!(
                "event {n} is for {}/{}, expected replay/{message}",
                e["conversation_id"], e["message_id"]
            ));
        }
        if e["provider"] != provider {
            problems.push(format!(
                "event {n} ({}) has provider {}, expected {provider:?} (format detection?)",
                ty(e),
                e["provider"]
            ));
        }
    }

    // Started / terminal bookkeeping per call index.
    let mut started: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut terminal: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (n, e) in events.iter().enumerate() {
        let Some(i) = call_index(e) else { continue };
        if ty(e) == "tool_call.started" {
            started.entry(i).or_default().push(n);
        } else if is_terminal_call_event(e) {
            terminal.entry(i).or_default().push(n);
        }
    }
    for (i, at) in &terminal {
        if at.len() != 1 {
            problems.push(format!(
                "call #{i} has {} terminal events ({}), expected exactly one",
                at.len(),
                at.iter()
                    .map(|&n| ty(&events[n]).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (i, at) in &started {
        if !terminal.contains_key(i) {
            problems.push(format!("call #{i} was started but never ended"));
        }
        if at.len() != 1 {
            problems.push(format!(
                "call #{i} has {} tool_call.started events",
                at.len()
            ));
        }
    }
    for (i, at) in &terminal {
        let Some(&end) = at.first() else { continue };
        let named = events[end]["tool_call"]["name"]
            .as_str()
            .is_some_and(|s| !s.is_empty());
        if !named {
            continue;
        }
        match started.get(i).and_then(|s| s.first()) {
            Some(&s) if s < end => {}
            Some(_) => problems.push(format!(
                "call #{i}: tool_call.started comes after its terminal event"
            )),
            None => problems.push(format!(
                "call #{i} ({}) has a name but no tool_call.started",
                events[end]["tool_call"]["name"]
            )),
        }
    }

    // The message's calls: message.completed, or the terminal events when it never completes.
    let completed_msgs: Vec<(usize, &Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| ty(e) == "message.completed")
        .collect();
    let want_completed = expected["message_completed"].as_bool().unwrap_or(true);
    if completed_msgs.len() > 1 {
        problems.push(format!(
            "message.completed appears {} times",
            completed_msgs.len()
        ));
    }
    let actual_calls: Vec<Value> = match completed_msgs.first() {
        Some((at, m)) => {
            if !want_completed {
                problems.push("message.completed was emitted but not expected".to_string());
            }
            for (n, e) in events.iter().enumerate().skip(at + 1) {
                if ty(e).starts_with("tool_call.") {
                    problems.push(format!("event {n} ({}) follows message.completed", ty(e)));
                }
            }
            check_finish_reason(&expected["finish_reason"], &m["finish_reason"], problems);
            check_terminals_agree(m, events, &terminal, problems);
            m["calls"].as_array().cloned().unwrap_or_default()
        }
        None => {
            if want_completed {
                problems.push(
                    "no message.completed (every call should be terminal at end of file)"
                        .to_string(),
                );
            }
            terminal
                .values()
                .filter_map(|at| at.first())
                .map(|&n| {
                    let e = &events[n];
                    serde_json::json!({
                        "status": status_of_event_type(ty(e)),
                        "reason": e["reason"],
                        "tool_call": e["tool_call"],
                    })
                })
                .collect()
        }
    };

    let want_calls = expected["calls"].as_array().cloned().unwrap_or_default();
    compare_calls(&want_calls, &actual_calls, problems);

    // Parallel calls stay apart.
    let mut ids = BTreeSet::new();
    for c in &actual_calls {
        let id = c["tool_call"]["id"].as_str().unwrap_or("");
        if !ids.insert(id.to_string()) {
            problems.push(format!("two calls share the id {id:?}"));
        }
        let raw = c["tool_call"]["raw_arguments"].as_str().unwrap_or("");
        if raw.contains("}{") {
            problems.push(format!("call {id} has glued arguments: {raw:?}"));
        }
    }

    // Cut calls never completed, not even for a moment.
    let cut_by_limit = match &expected["finish_reason"] {
        Value::String(s) => TRUNCATION_WORDS.contains(&s.as_str()),
        Value::Array(words) => words
            .iter()
            .any(|w| w.as_str().is_some_and(|s| TRUNCATION_WORDS.contains(&s))),
        _ => false,
    };
    for (pos, want) in want_calls.iter().enumerate() {
        if want["status"] == "completed" {
            continue;
        }
        let early = events
            .iter()
            .find(|e| ty(e) == "tool_call.completed" && call_index(e) == Some(pos as u64));
        if early.is_some() {
            problems.push(format!(
                "call #{pos} was published as tool_call.completed although the provider never \
                 finished it{}",
                if cut_by_limit { " (truncated)" } else { "" }
            ));
        }
    }

    compare_results(
        expected,
        events,
        completed_msgs.first().map(|(_, m)| *m),
        problems,
    );
}

/// `want` is the provider's word, a list of acceptable words, or `null` (no provider word:
/// only toolstream's own words are acceptable).
fn check_finish_reason(want: &Value, got: &Value, problems: &mut Vec<String>) {
    let ok = match want {
        Value::String(s) => got.as_str() == Some(s.as_str()),
        Value::Array(words) => words.iter().any(|w| w == got),
        Value::Null => match got {
            Value::Null => true,
            Value::String(s) => TOOLSTREAM_FINISH_WORDS.contains(&s.as_str()),
            _ => false,
        },
        _ => false,
    };
    if !ok {
        problems.push(format!(
            "message.completed finish_reason is {got}, expected {}",
            if want.is_null() {
                format!(
                    "none from the provider (one of toolstream's {:?})",
                    TOOLSTREAM_FINISH_WORDS
                )
            } else {
                want.to_string()
            }
        ));
    }
}

/// The terminal `tool_call.*` events and the list in `message.completed` tell the same story.
fn check_terminals_agree(
    msg: &Value,
    events: &[Value],
    terminal: &BTreeMap<u64, Vec<usize>>,
    problems: &mut Vec<String>,
) {
    let listed = msg["calls"].as_array().cloned().unwrap_or_default();
    let listed_indices: BTreeSet<u64> = listed
        .iter()
        .filter_map(|c| c["tool_call"]["index"].as_u64())
        .collect();
    let terminal_indices: BTreeSet<u64> = terminal.keys().copied().collect();
    if listed_indices != terminal_indices {
        problems.push(format!(
            "message.completed lists calls {listed_indices:?} but terminal events exist for \
             {terminal_indices:?}"
        ));
    }
    for c in &listed {
        let Some(i) = c["tool_call"]["index"].as_u64() else {
            continue;
        };
        let Some(&n) = terminal.get(&i).and_then(|v| v.first()) else {
            continue;
        };
        let e = &events[n];
        if status_of_event_type(ty(e)) != c["status"].as_str().unwrap_or("")
            || e["tool_call"] != c["tool_call"]
        {
            problems.push(format!(
                "call #{i}: terminal event {} {} disagrees with message.completed {} {}",
                ty(e),
                e["tool_call"],
                c["status"],
                c["tool_call"]
            ));
        }
    }
}

fn is_synthetic_id(id: &str) -> bool {
    id.len() == 29
        && id.starts_with("call_")
        && id[5..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

fn compare_calls(want: &[Value], got: &[Value], problems: &mut Vec<String>) {
    if want.len() != got.len() {
        problems.push(format!(
            "{} call(s), expected {}: got [{}], expected [{}]",
            got.len(),
            want.len(),
            got.iter()
                .map(|c| format!(
                    "{} {} {}",
                    c["tool_call"]["id"], c["tool_call"]["name"], c["status"]
                ))
                .collect::<Vec<_>>()
                .join("; "),
            want.iter()
                .map(|c| format!("{} {} {}", c["id"], c["name"], c["status"]))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        // Position by position would only repeat the same difference.
        return;
    }
    for (pos, (w, g)) in want.iter().zip(got).enumerate() {
        let call = &g["tool_call"];
        let label = format!("call #{pos} ({})", w["name"]);
        if call["index"].as_u64() != Some(pos as u64) {
            problems.push(format!("{label}: index {}, expected {pos}", call["index"]));
        }
        match &w["id"] {
            Value::Null => {
                let id = call["id"].as_str().unwrap_or("");
                if call["provider_metadata"]["synthetic_id"] != true || !is_synthetic_id(id) {
                    problems.push(format!(
                        "{label}: the provider sent no id, expected a synthetic id \
                         (call_ + 24 hex, provider_metadata.synthetic_id = true), got id {} \
                         metadata {}",
                        call["id"], call["provider_metadata"]
                    ));
                }
            }
            id => {
                if &call["id"] != id {
                    problems.push(format!("{label}: id {}, expected {id}", call["id"]));
                }
                if call["provider_metadata"]["synthetic_id"] == true {
                    problems.push(format!(
                        "{label}: marked synthetic although the provider sent id {id}"
                    ));
                }
            }
        }
        if call["name"] != w["name"] {
            problems.push(format!(
                "{label}: name {}, expected {}",
                call["name"], w["name"]
            ));
        }
        if g["status"] != w["status"] {
            problems.push(format!(
                "{label}: status {} (reason {}), expected {}",
                g["status"], g["reason"], w["status"]
            ));
        }
        if w["status"] == "completed" && call["arguments"] != w["arguments"] {
            problems.push(format!(
                "{label}: arguments {}, expected {}",
                call["arguments"], w["arguments"]
            ));
        }
        if w["status"] != "completed" && !call["arguments"].is_null() {
            problems.push(format!(
                "{label}: a call that is not completed has parsed arguments {}",
                call["arguments"]
            ));
        }
        if let Some(raw) = w.get("raw_arguments") {
            if &call["raw_arguments"] != raw {
                problems.push(format!(
                    "{label}: raw_arguments {}, expected {raw}",
                    call["raw_arguments"]
                ));
            }
        }
        if let Some(reason) = w.get("reason") {
            if &g["reason"] != reason {
                problems.push(format!(
                    "{label}: reason {}, expected {reason}",
                    g["reason"]
                ));
            }
        }
        if let Some(Value::Object(meta)) = w.get("provider_metadata") {
            let got_meta = call["provider_metadata"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for (k, v) in meta {
                if got_meta.get(k) != Some(v) {
                    problems.push(format!(
                        "{label}: provider_metadata.{k} is {}, expected {v}",
                        got_meta.get(k).cloned().unwrap_or(Value::Null)
                    ));
                }
            }
        }
    }
}

/// A result as a comparable key: outputs that are JSON compare as JSON (key order and spacing
/// of a serialized object output are not the provider's).
fn result_key(r: &Value) -> (String, String, bool) {
    let output = r["output"].as_str().unwrap_or("");
    let normalized = match serde_json::from_str::<Value>(output) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => v.to_string(),
        _ => output.to_string(),
    };
    (
        r["tool_call_id"].as_str().unwrap_or("").to_string(),
        normalized,
        r["is_error"].as_bool().unwrap_or(false),
    )
}

fn compare_results(
    expected: &Value,
    events: &[Value],
    msg: Option<&Value>,
    problems: &mut Vec<String>,
) {
    let mut want: Vec<_> = expected["results"]
        .as_array()
        .map(|a| a.iter().map(result_key).collect())
        .unwrap_or_default();
    want.sort();
    let mut got: Vec<_> = events
        .iter()
        .filter(|e| ty(e) == "tool_result.completed")
        .map(|e| result_key(&e["tool_result"]))
        .collect();
    got.sort();
    if got != want {
        problems.push(format!(
            "tool_result.completed events {got:?}, expected {want:?}"
        ));
    }
    for e in events.iter().filter(|e| ty(e) == "tool_result.orphaned") {
        problems.push(format!(
            "unexpected tool_result.orphaned {}",
            e["tool_result"]
        ));
    }
    if let Some(m) = msg {
        let mut listed: Vec<_> = m["tool_results"]
            .as_array()
            .map(|a| a.iter().map(result_key).collect())
            .unwrap_or_default();
        listed.sort();
        if listed != want {
            problems.push(format!(
                "message.completed tool_results {listed:?}, expected {want:?} (every result \
                 precedes the end of the stream in this recording)"
            ));
        }
    }
}

/// The event-level checks can fail: starting from the real replay of a clean recording, each
/// fault a broken assembler could produce is planted and must be reported.
#[test]
fn checker_reports_duplicates_missing_started_glued_calls_and_schema_violations() {
    let file = recordings_dir().join("openai-chat/parallel_calls.sse");
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(expectation_path("openai-chat", &file)).expect("expectation"),
    )
    .expect("expectation JSON");
    let out = replay(&file, &[]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let problems_with = |events: &[Value]| {
        let mut problems = Vec::new();
        check_events(
            "openai-chat",
            "parallel_calls",
            &expected,
            events,
            &mut problems,
        );
        problems.join("\n")
    };
    assert_eq!(problems_with(&events), "", "the clean replay passes");
    let position = |t: &str, index: u64| {
        events
            .iter()
            .position(|e| ty(e) == t && call_index(e) == Some(index))
            .expect("event present")
    };

    // A re-published terminal event: duplicate event id and two terminal events.
    let mut dup = events.clone();
    dup.insert(0, events[position("tool_call.completed", 1)].clone());
    let report = problems_with(&dup);
    assert!(report.contains("appears twice"), "{report}");
    assert!(report.contains("2 terminal events"), "{report}");

    // A named call whose started event never came.
    let mut unstarted = events.clone();
    unstarted.remove(position("tool_call.started", 2));
    let report = problems_with(&unstarted);
    assert!(report.contains("no tool_call.started"), "{report}");

    // Started after the end.
    let mut late = events.clone();
    let started = late.remove(position("tool_call.started", 0));
    let end = late
        .iter()
        .position(|e| ty(e) == "tool_call.completed" && call_index(e) == Some(0))
        .expect("end");
    late.insert(end + 1, started);
    let report = problems_with(&late);
    assert!(report.contains("after its terminal event"), "{report}");

    // Two parallel calls glued into one and sharing an id.
    let mut glued = events.clone();
    for e in glued.iter_mut().filter(|e| ty(e) == "message.completed") {
        e["calls"][0]["tool_call"]["raw_arguments"] = Value::from(r#"{"a":1}{"b":2}"#);
        e["calls"][1]["tool_call"]["id"] = e["calls"][0]["tool_call"]["id"].clone();
    }
    let report = problems_with(&glued);
    assert!(report.contains("glued arguments"), "{report}");
    assert!(report.contains("share the id"), "{report}");

    // A field the schema does not know.
    let mut off_schema = events.clone();
    off_schema[0]["surprise"] = Value::from(true);
    let report = problems_with(&off_schema);
    assert!(report.contains("violates the schema"), "{report}");
}
