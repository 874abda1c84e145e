//! Rendered histories validated by the providers' own SDK request types.
//!
//! Renders every target over histories with parallel calls, results, orphans, truncated
//! results, invalid calls, calls without results, thought signatures, thinking blocks and
//! strict text, under
//! every window size, and checks each with `scripts/sdk-validate/validate.py` (openai,
//! anthropic, google-genai, mistralai, botocore's Converse shape, ollama). The SDKs are
//! installed from PyPI into `target/sdk-venv/<hash>` (pinned in
//! `scripts/sdk-validate/requirements.txt`, the hash of that file) the first time, and again
//! whenever that file changes; a failed install fails the test. The first install takes a few
//! minutes and needs network access to PyPI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{CallKind, CallStatus, MessageSnapshot, ToolResult};
use history_fixtures::{call, cut_call, result, snapshot};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Installs the pinned SDKs into `target/sdk-venv` unless the installed requirements match
/// (once per test process: the tests here share one install).
fn sdk_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install_sdks).clone()
}

/// FNV-1a of the requirements text: names the install, so a changed file gets a new one.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `target/sdk-venv/<hash of requirements>`: installed into a private directory, then renamed
/// into place in one step, so concurrent test processes never see (or write) a half install.
fn install_sdks() -> PathBuf {
    let root = workspace();
    let requirements = root.join("scripts/sdk-validate/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("read requirements.txt");
    let base = root.join("target/sdk-venv");
    let dir = base.join(format!("{:016x}", fnv(&wanted)));
    if dir.is_dir() {
        return dir;
    }
    std::fs::create_dir_all(&base).expect("create target/sdk-venv");
    let staging = base.join(format!("staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let out = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&staging)
        .arg("-r")
        .arg(&requirements)
        .output()
        .expect("run python3 -m pip (python3 with pip is needed for this test)");
    assert!(
        out.status.success(),
        "pip could not install the provider SDKs into {}:\n{}\n{}",
        staging.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if std::fs::rename(&staging, &dir).is_err() {
        // another process installed the same requirements first: use theirs
        let _ = std::fs::remove_dir_all(&staging);
        assert!(
            dir.is_dir(),
            "could not move the SDK install into {}",
            dir.display()
        );
    }
    dir
}

fn histories() -> Vec<(&'static str, Vec<MessageSnapshot>)> {
    let long = "x".repeat(2_000);
    let mut parallel = snapshot(
        "m1",
        vec![
            call("call_a1", "get_weather", 0, json!({"city": "Paris"})),
            call("call_a2", "get_weather", 1, json!({"city": "Rome"})),
            call("call_a3", "get_time", 2, json!({"tz": "CET"})),
        ],
        vec![
            result("call_a3", "12:00"),
            result("call_a1", &long),
            ToolResult {
                tool_call_id: "call_a2".to_string(),
                output: String::new(),
                is_error: true,
            },
        ],
    );
    parallel.calls[0].tool_call.provider_metadata.insert(
        "extra_content".to_string(),
        json!({"google": {"thought_signature": "c2ln"}}),
    );
    parallel.calls[1]
        .tool_call
        .provider_metadata
        .insert("thoughtSignature".to_string(), json!("c2ln"));
    let mut invalid = snapshot(
        "m2",
        vec![
            cut_call("call_bad", "search", 0, CallStatus::Invalid, r#"{"q": "pa"#),
            call("call_ok", "lookup", 1, json!({"id": 7})),
        ],
        vec![result("call_bad", "result of a cut call")],
    );
    invalid.orphaned_results = vec![result("call_gone", "late result")];
    let cut_only = snapshot(
        "m3",
        vec![cut_call("call_x", "", 0, CallStatus::Abandoned, "")],
        vec![],
    );
    let mut orphans = snapshot("m4", vec![], vec![]);
    orphans.orphaned_results = vec![result("call_y", "y"), result("call_z", "z")];
    let non_object = snapshot(
        "m5",
        vec![call("call_n", "echo", 0, json!([1, "two"]))],
        vec![result("call_n", "ok"), result("call_n", "second result")],
    );
    // parallel calls whose signed first call was cut: its signature goes on the first sent call
    let mut signed_cut = snapshot(
        "m6",
        vec![
            cut_call(
                "call_s1",
                "get_weather",
                0,
                CallStatus::Invalid,
                r#"{"city": "Pa"#,
            ),
            call("call_s2", "get_weather", 1, json!({"city": "Rome"})),
        ],
        vec![result("call_s2", "21C")],
    );
    signed_cut.calls[0]
        .tool_call
        .provider_metadata
        .insert("thoughtSignature".to_string(), json!("c2ln"));
    // thinking blocks (a redacted one too) before the tool_use they preceded, one between two
    // parallel calls, a cut call's note after the leading thinking
    let mut thinking = snapshot(
        "m7",
        vec![
            cut_call("toolu_t0", "get_quote", 0, CallStatus::Invalid, r#"{"tick"#),
            call("toolu_t1", "get_quote", 1, json!({"ticker": "ACME"})),
            call("toolu_t2", "get_quote", 2, json!({"ticker": "INIT"})),
        ],
        vec![result("toolu_t1", "12.5")],
    );
    thinking.provider_metadata.insert(
        "reasoning".to_string(),
        json!([
            {"type": "thinking", "thinking": "Two quotes.", "signature": "EqQBCgIYAhIM", "before_call": 0},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix", "before_call": 0},
            {"type": "thinking", "thinking": "", "signature": "c2ln", "before_call": 2}
        ]),
    );
    // every call kind: a custom tool's free text (arguments a JSON string), a server tool with
    // the provider's own result, an MCP call, a signed call with the model that made it
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-old\n+new\n*** End Patch";
    let mut kinds = snapshot(
        "m8",
        vec![
            call("call_custom", "apply_patch", 0, json!(patch)),
            call(
                "srvtoolu_01",
                "web_search",
                1,
                json!({"query": "tokio release"}),
            ),
            call(
                "mcp_68c1a4",
                "ask_question",
                2,
                json!({"repoName": "tokio-rs/tokio"}),
            ),
        ],
        vec![
            result("call_custom", "Done!"),
            result(
                "srvtoolu_01",
                r#"[{"type":"web_search_result","url":"https://crates.io"}]"#,
            ),
            result("mcp_68c1a4", "The scheduler steals work."),
        ],
    );
    kinds.calls[0].tool_call.raw_arguments = patch.to_string();
    kinds.calls[0].tool_call.kind = CallKind::Custom;
    kinds.calls[1].tool_call.kind = CallKind::ServerTool;
    kinds.calls[2].tool_call.kind = CallKind::Mcp;
    kinds.calls[1].tool_call.provider_metadata.extend([
        ("thoughtSignature".to_string(), json!("c2ln")),
        ("model".to_string(), json!("gemini-3-pro-preview")),
    ]);
    vec![
        ("call-kinds", vec![kinds]),
        ("thinking", vec![thinking.clone(), parallel.clone()]),
        ("signature-of-a-cut-call", vec![signed_cut]),
        (
            "mixed",
            vec![
                parallel.clone(),
                invalid.clone(),
                cut_only.clone(),
                orphans.clone(),
                non_object,
            ],
        ),
        ("orphans-first", vec![orphans, parallel, cut_only]),
        ("invalid-only", vec![invalid]),
    ]
}

/// Runs the validator on `cases`; returns (success, stdout).
fn validate(cases: Vec<Value>, file_name: &str) -> (bool, String) {
    let file = workspace().join("target").join(file_name);
    std::fs::write(&file, Value::Array(cases).to_string()).unwrap();
    let dir = sdk_dir();
    let out = Command::new("python3")
        .arg(workspace().join("scripts/sdk-validate/validate.py"))
        .arg(&file)
        .env("PYTHONPATH", &dir)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "validator could not run:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), stdout)
}

/// The validator is not a rubber stamp: one malformed result message per target is rejected.
#[test]
fn provider_sdk_types_reject_a_malformed_result_in_every_target() {
    let bad = [
        ("openai-chat", json!([{"role": "tool", "content": "x"}])),
        ("mistral", json!([{"role": "tool", "content": 5}])),
        ("ollama", json!([{"role": "tool", "content": {"a": 1}}])),
        (
            "openai-responses",
            json!([{"type": "function_call_output", "call_id": "c", "output": 5}]),
        ),
        (
            "anthropic",
            json!([{"role": "user", "content": [{"type": "tool_result"}]}]),
        ),
        (
            "gemini",
            json!([{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "x"}}]}]),
        ),
        (
            "bedrock",
            json!([{"role": "user", "content": [{"toolResult": {"content": [{"text": "x"}]}}]}]),
        ),
        (
            "openai-chat",
            json!([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "f", "arguments": "{}"}, "extra_content": {"other": 1}}]}]),
        ),
        // a thinking block without its signature; a reasoning block without its text
        (
            "anthropic",
            json!([{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"},
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
        ),
        (
            "bedrock",
            json!([{"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"signature": "s"}}}]}]),
        ),
        // a well-formed tool turn, but without the toolConfig Converse needs for it
        (
            "bedrock",
            json!([{"role": "user", "content": [{"text": "hi"}]},
                   {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]},
                   {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "x"}], "status": "success"}}]}]),
        ),
    ];
    let cases: Vec<Value> = bad
        .iter()
        .map(|(target, messages)| json!({"name": format!("bad {target}"), "target": target, "messages": messages}))
        .collect();
    let (ok, stdout) = validate(cases, "sdk-validate-bad.json");
    assert!(!ok, "{stdout}");
    assert_eq!(stdout.matches("FAIL bad ").count(), bad.len(), "{stdout}");
}

#[test]
fn rendered_history_of_every_target_passes_the_provider_sdk_types() {
    let mut cases = Vec::new();
    for (name, snaps) in histories() {
        for target in HistoryFormat::ALL {
            for strict_text in [false, true] {
                let base = HistoryOptions {
                    strict_text,
                    max_result_chars: 120,
                    ..HistoryOptions::default()
                };
                let full = render(&snaps, target, &base).unwrap().messages.len();
                for window in (0..=full).map(Some).chain([None]) {
                    let options = HistoryOptions {
                        window,
                        ..base.clone()
                    };
                    let h = render(&snaps, target, &options).unwrap();
                    cases.push(json!({
                        "name": format!("{name} {target} strict={strict_text} window={window:?}"),
                        "target": target.as_str(),
                        "messages": h.messages,
                        "tool_config": h.tool_config,
                    }));
                }
            }
        }
    }
    let (ok, stdout) = validate(cases, "sdk-validate-cases.json");
    println!("{stdout}");
    assert!(
        ok,
        "provider SDK types rejected rendered histories:\n{stdout}"
    );
    assert!(stdout.contains("validated "), "{stdout}");
}
