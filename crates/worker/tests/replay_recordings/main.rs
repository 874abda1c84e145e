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
//!
//! ## Layout
//! - `main.rs` — the recordings, one `#[test]` per provider, and the coverage check.
//! - `check.rs` — the checker of replayed events against an expectation (and its own test).
//! - `cli.rs` — error paths, `--timeline`, two recordings with the same name.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod check;
mod cli;

use check::check_events;

// Provider directories under `tests/recordings/`, one `#[test]` each.
use toolstream_testkit::RECORDED_PROVIDERS as PROVIDERS;

/// Extensions of recorded streams (the framing).
const RECORDING_EXTENSIONS: [&str; 3] = ["sse", "ndjson", "json"];

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
                "tests/recordings/{dir}/ has no #[test] in replay_recordings/main.rs"
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
