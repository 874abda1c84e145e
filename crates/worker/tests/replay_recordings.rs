//! Acceptance test for `toolstream replay` (issue 3, "tried as a new user would"): every
//! recorded provider stream under `tests/recordings/<provider>/` is replayed by the real binary
//! and its events are checked against an expectation written by hand from the raw recording
//! (`tests/recordings/expected/<provider>/<file stem>.json`), never copied from replay output.
//!
//! Per recording it checks: the calls of `message.completed` (ids, names, status, parsed
//! arguments, raw text and reason where the expectation gives them, synthetic ids), the
//! finish reason, in-stream tool results, exactly one `tool_call.started` before each named
//! call's single terminal event, unique event ids, every event valid against
//! `crates/chunk-model/schema/event.v1.schema.json`, parallel calls kept apart, and calls the
//! provider cut never `completed`. One `#[test]` per provider directory, so a failure names the
//! provider; its message names the file and the difference. A recording without an expectation
//! (or a directory without a test) fails, so new recordings cannot slip by.
//!
//! Expectation file shape:
//! `{"note"?, "finish_reason": "<provider word>" | null | ["<word>", ...], "calls": [{"id":
//! "<wire id>" | null (synthetic), "name", "status", "arguments"?, "raw_arguments"?, "reason"?,
//! "provider_metadata"? (subset)}], "results"?: [{"tool_call_id", "output", "is_error"}],
//! "message_completed": bool}`. `finish_reason: null` means the provider sent no finish reason:
//! the event may then carry only one of toolstream's own words (stream end, error, control end).
//!
//! Also covers the CLI's error paths (one line on stderr, non-zero exit) and `--timeline`.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Provider directories under `tests/recordings/`, one `#[test]` each.
const PROVIDERS: [&str; 7] = [
    "openai-chat",
    "openai-responses",
    "anthropic",
    "gemini",
    "bedrock",
    "ollama",
    "ai-sdk",
];

/// Extensions of recorded streams (the framing).
const RECORDING_EXTENSIONS: [&str; 3] = ["sse", "ndjson", "json"];

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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn recordings_dir() -> PathBuf {
    repo_root().join("tests/recordings")
}

fn expected_dir() -> PathBuf {
    recordings_dir().join("expected")
}

fn toolstream() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolstream"))
}

fn schema_validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let path = repo_root().join("crates/chunk-model/schema/event.v1.schema.json");
        let text = std::fs::read_to_string(&path).expect("read event schema");
        let schema: Value = serde_json::from_str(&text).expect("event schema is JSON");
        jsonschema::validator_for(&schema).expect("event schema compiles")
    })
}

/// Recorded streams in one provider directory, sorted.
fn recordings_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| RECORDING_EXTENSIONS.contains(&x))
        })
        .collect();
    files.sort();
    files
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .expect("file stem")
        .to_string_lossy()
        .into_owned()
}

fn expectation_path(provider: &str, recording: &Path) -> PathBuf {
    expected_dir()
        .join(provider)
        .join(format!("{}.json", stem(recording)))
}

/// Runs `toolstream replay [extra args] FILE`.
fn replay(file: &Path, extra: &[&str]) -> Output {
    toolstream()
        .arg("replay")
        .args(extra)
        .arg(file)
        .output()
        .expect("run toolstream replay")
}

fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// Checks every recording of one provider directory; panics with every difference found.
fn check_provider(provider: &str) {
    let dir = recordings_dir().join(provider);
    let files = recordings_in(&dir);
    assert!(!files.is_empty(), "no recordings in {}", dir.display());
    let mut failures = Vec::new();
    for file in &files {
        let name = format!(
            "{provider}/{}",
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let problems = check_recording(provider, file);
        if !problems.is_empty() {
            failures.push(format!("{name}:\n    - {}", problems.join("\n    - ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {provider} recording(s) differ from their expectation:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// Every difference between the replay of `file` and its expectation.
fn check_recording(provider: &str, file: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let exp_path = expectation_path(provider, file);
    let expected: Value = match std::fs::read_to_string(&exp_path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return vec![format!("{} is not JSON: {e}", exp_path.display())],
        },
        Err(_) => {
            return vec![format!(
                "no expectation file {} (write it from the raw recording)",
                exp_path.display()
            )]
        }
    };

    // As a new user would: no --provider, the format is detected.
    let detected = replay(file, &[]);
    let output = if !detected.status.success() {
        problems.push(format!(
            "replay without --provider failed ({}): {}",
            detected.status,
            stderr_text(&detected)
        ));
        replay(file, &["--provider", provider])
    } else {
        detected
    };
    if !output.status.success() {
        problems.push(format!(
            "replay --provider {provider} failed ({}): {}",
            output.status,
            stderr_text(&output)
        ));
        return problems;
    }
    let stderr = stderr_text(&output);
    if !stderr.is_empty() {
        problems.push(format!(
            "replay reported on stderr (dead letters?): {stderr}"
        ));
    }

    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut events = Vec::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => events.push(v),
            Err(e) => problems.push(format!("stdout line is not JSON ({e}): {line}")),
        }
    }
    check_events(provider, &stem(file), &expected, &events, &mut problems);
    problems
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

fn check_events(
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

#[test]
fn openai_chat_recordings_replay_as_sent() {
    check_provider("openai-chat");
}

#[test]
fn openai_responses_recordings_replay_as_sent() {
    check_provider("openai-responses");
}

#[test]
fn anthropic_recordings_replay_as_sent() {
    check_provider("anthropic");
}

#[test]
fn gemini_recordings_replay_as_sent() {
    check_provider("gemini");
}

#[test]
fn bedrock_recordings_replay_as_sent() {
    check_provider("bedrock");
}

#[test]
fn ollama_recordings_replay_as_sent() {
    check_provider("ollama");
}

#[test]
fn ai_sdk_recordings_replay_as_sent() {
    check_provider("ai-sdk");
}

/// New recordings cannot slip by: every directory is a tested provider, every recording has an
/// expectation, and no expectation is left without its recording.
#[test]
fn every_recording_has_an_expectation_and_a_test() {
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(recordings_dir()).expect("read tests/recordings") {
        let path = entry.expect("dir entry").path();
        if !path.is_dir() {
            continue;
        }
        let dir = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if dir == "expected" {
            continue;
        }
        if !PROVIDERS.contains(&dir.as_str()) {
            problems.push(format!(
                "tests/recordings/{dir}/ has no #[test] in replay_recordings.rs"
            ));
            continue;
        }
        for file in recordings_in(&path) {
            if !expectation_path(&dir, &file).is_file() {
                problems.push(format!(
                    "{dir}/{} has no expectation {}",
                    file.file_name().unwrap_or_default().to_string_lossy(),
                    expectation_path(&dir, &file).display()
                ));
            }
        }
    }
    for provider in PROVIDERS {
        let recorded: BTreeSet<String> = recordings_in(&recordings_dir().join(provider))
            .iter()
            .map(|p| stem(p))
            .collect();
        let Ok(entries) = std::fs::read_dir(expected_dir().join(provider)) else {
            problems.push(format!("no expectations for {provider}"));
            continue;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if !recorded.contains(&stem(&path)) {
                problems.push(format!("expectation {} has no recording", path.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// An error is one clear line on stderr, nothing on stdout, and a non-zero exit.
fn assert_one_line_error(out: &Output, what: &str, mentions: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !out.status.success(),
        "{what}: exit status {} (expected failure)",
        out.status
    );
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one stderr line, got {stderr:?}"
    );
    assert!(
        lines[0].contains(mentions),
        "{what}: stderr {:?} does not mention {mentions:?}",
        lines[0]
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: printed on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn replay_of_an_unreadable_file_is_one_stderr_line_and_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no_such_recording.sse");
    let out = replay(&missing, &[]);
    assert_one_line_error(&out, "missing file", "no_such_recording.sse");
}

#[test]
fn replay_with_an_unknown_provider_is_one_stderr_line_and_a_failure() {
    let file = recordings_dir().join("openai-chat/parallel_calls.sse");
    let out = replay(&file, &["--provider", "not-a-provider"]);
    assert_one_line_error(&out, "unknown --provider", "not-a-provider");
}

#[test]
fn replay_of_an_undetectable_format_is_one_stderr_line_and_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "these are meeting notes,\nnot a provider stream\n").expect("write");
    let out = replay(&file, &[]);
    assert_one_line_error(&out, "undetectable format", "notes.txt");

    // A stream of well-formed JSON that no provider sends is just as undetectable.
    let json = dir.path().join("unknown.ndjson");
    std::fs::write(&json, "{\"hello\":1}\n{\"hello\":2}\n").expect("write");
    let out = replay(&json, &[]);
    assert_one_line_error(&out, "JSON of no provider", "unknown.ndjson");
}

#[test]
fn timeline_prints_a_line_per_chunk_and_the_end_of_the_recording() {
    let file = recordings_dir().join("openai-chat/parallel_calls.sse");
    let text = std::fs::read_to_string(&file).expect("read recording");
    // Every SSE `data:` line is one chunk (including the literal [DONE]).
    let chunks = text.lines().filter(|l| l.starts_with("data:")).count();
    assert!(chunks > 20, "recording has {chunks} chunks");

    let out = replay(&file, &["--timeline"]);
    assert!(
        out.status.success(),
        "timeline failed: {}",
        stderr_text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Chunk lines start with the chunk number in brackets: `[   0] ...`.
    let numbered: Vec<u64> = stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (num, _) = rest.split_once(']')?;
            num.trim().parse().ok()
        })
        .collect();
    let per_chunk: Vec<u64> = (0..chunks as u64).collect();
    let with_end: Vec<u64> = (0..=chunks as u64).collect();
    assert!(
        numbered == per_chunk || numbered == with_end,
        "expected one numbered line per chunk (0..{chunks}, optionally one for the end), got \
         {numbered:?}:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .all(|l| serde_json::from_str::<Map<String, Value>>(l).is_err()),
        "--timeline is for people, not JSON lines:\n{stdout}"
    );
    // The three parallel calls are visible to the person reading it.
    for id in ["call_qZx8Kd2VbN", "call_Lm3pKd2VbN", "call_Tr7wKd2VbN"] {
        assert!(
            stdout.contains(id),
            "timeline does not show {id}:\n{stdout}"
        );
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

/// `toolstream replay a/parallel_calls.sse b/parallel_calls.ndjson`: both files become message
/// `parallel_calls` of conversation `replay`, so the second one's chunks look like duplicates of
/// the first one's. A user must see both replays, or one clear error — never a silent half.
#[test]
fn replay_of_two_files_with_the_same_name_does_not_silently_drop_one() {
    let anthropic = recordings_dir().join("anthropic/parallel_calls.sse");
    let bedrock = recordings_dir().join("bedrock/parallel_calls.ndjson");
    let out = toolstream()
        .arg("replay")
        .arg(&anthropic)
        .arg(&bedrock)
        .output()
        .expect("run toolstream replay");
    if !out.status.success() {
        assert_one_line_error(&out, "two files, one message id", "parallel_calls");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for id in [
        "toolu_01A09q90qw90lq917835lq9a",
        "tooluse_Hq3vPz8sT0K2mWc6Xn4Ryw",
    ] {
        assert!(
            stdout.contains(id),
            "the replay of both files does not show call {id} (exit 0, stderr {:?}):\n{stdout}",
            stderr_text(&out)
        );
    }
}
