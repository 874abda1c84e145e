//! The bad-input corpus (`tests/bad-inputs/*.toml`) against ONE real worker, beside valid
//! streams of every provider (the fault workload: every recording plus generated streams).
//!
//! Every case of the corpus writes down its inputs (subject, headers, body) and what the
//! README's contract says must come of them: for each input, applied (the default), a
//! `duplicate`, or a `dead_letter` whose `Toolstream-Reason` starts with a given code (on the
//! case's `<prefix>.dlq.<conv>.<msg>`, or `<prefix>.dlq.unroutable`); for the case, the exact
//! events of its conversation, per message in order. This test publishes every case (and the
//! workload, concurrently), waits for every outcome under one deadline, and then asserts:
//! - each dead letter expected, exactly once, with its reason, on its subject, matched to its
//!   input by `Toolstream-Stream-Seq`; no dead letter for any other input;
//! - each case's events exactly as written;
//! - inputs marked `duplicate` are exactly the worker's duplicates (`toolstream_duplicates_total`);
//! - the valid streams complete exactly (the fault checker against the crash-free reference:
//!   events by `event_id`, content, order, query snapshots, dead letters);
//! - the worker process never stopped: one start, one "JetStream ready", still running.
//!
//! A failure lists every case whose outcome differs (case, expected, actual). The summary table
//! (cases per class and how they ended) is printed either way. Manifest format:
//! `tests/bad-inputs/README.md`.
//!
//! ## Layout
//! - `main.rs` — the corpus (manifests, planned inputs), matching events to what a case
//!   wrote down, publishing, the summary table.
//! - `run.rs` — the test: one worker, the corpus and the workload, every outcome checked.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod run;

use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::HeaderMap;
use common::*;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use toolstream_testkit::fault::{
    Checker, Misbehaviour, Reference, WaitPlan, Workload, WorkloadSpec,
};

const PREFIX: &str = "toolstream";
/// Worker settings the corpus is written for (the manifests' README names them too).
const MAX_ARGUMENT_BYTES: usize = 262_144;
const GAP_TIMEOUT_MS: u64 = 2_000;
const ORPHAN_GRACE_MS: u64 = 8_000;
/// The one deadline for every outcome (corpus and workload).
const DEADLINE: Duration = Duration::from_secs(100);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassFile {
    class: String,
    #[serde(default)]
    about: String,
    #[serde(rename = "case")]
    cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    id: String,
    what: String,
    /// Conversation token (default: the id).
    conv: Option<String>,
    /// Message token (default `m`).
    msg: Option<String>,
    /// `Toolstream-Provider` of its chunks unless an input says otherwise.
    provider: Option<String>,
    /// Chunks get `Toolstream-Seq` 0, 1, 2, … unless an input sets `seq` or `no_seq`.
    #[serde(default = "yes")]
    numbered: bool,
    #[serde(rename = "input")]
    inputs: Vec<InputSpec>,
    /// The exact events of the case's conversation (required: may be empty).
    events: Vec<ExpectedEvent>,
    #[serde(skip)]
    class: String,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct InputSpec {
    /// `chunk` (default) or `result`.
    kind: Option<String>,
    /// Whole subject (placeholders `{conv}`, `{msg}`); default from kind, conv and msg.
    subject: Option<String>,
    /// Message token for this input (default: the case's).
    msg: Option<String>,
    seq: Option<u64>,
    #[serde(default)]
    no_seq: bool,
    provider: Option<String>,
    #[serde(default)]
    no_provider: bool,
    control: Option<String>,
    /// Extra headers, exactly as written (names and values).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    body_hex: Option<String>,
    body_file: Option<String>,
    body_parts: Option<Vec<Part>>,
    /// Several inputs at once, one body each (same settings; consecutive `Toolstream-Seq`).
    chunks: Option<Vec<String>>,
    /// Expected: dead-lettered with a reason starting with this.
    dead_letter: Option<String>,
    /// Expected dead-letter subject: `unroutable` for `<prefix>.dlq.unroutable`.
    dlq: Option<String>,
    /// Expected: recognized as a duplicate of the same bytes.
    #[serde(default)]
    duplicate: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Part {
    text: Option<String>,
    hex: Option<String>,
    #[serde(default = "one")]
    repeat: usize,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedEvent {
    #[serde(rename = "type")]
    ty: String,
    /// Message token (default: the case's).
    msg: Option<String>,
    /// `tool_call.id`.
    call: Option<String>,
    /// `tool_call.name`.
    name: Option<String>,
    /// `reason` (abandoned / invalid / orphaned).
    reason: Option<String>,
    /// `finish_reason` of `message.completed`.
    finish_reason: Option<String>,
    /// `message.completed`: the status of each call, in order.
    statuses: Option<Vec<String>>,
    /// `tool_call.completed`: the parsed arguments.
    arguments: Option<toml::Value>,
    /// `tool_result.*`: `tool_result.tool_call_id`.
    result_for: Option<String>,
    /// `tool_result.*`: `tool_result.output`.
    output: Option<String>,
}

/// One input ready to publish.
#[derive(Debug, Clone)]
struct Planned {
    label: String,
    subject: String,
    headers: Vec<(String, String)>,
    msg_id: String,
    body: Vec<u8>,
    dead_letter: Option<String>,
    dlq_subject: String,
    duplicate: bool,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad-inputs")
}

fn load_corpus() -> Vec<Case> {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let file: ClassFile =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!file.about.is_empty() || !file.cases.is_empty());
        for mut c in file.cases {
            c.class = file.class.clone();
            cases.push(c);
        }
    }
    cases
}

fn expand(text: &str, conv: &str, msg: &str) -> String {
    text.replace("{conv}", conv).replace("{msg}", msg)
}

fn hex(text: &str) -> Vec<u8> {
    let clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(clean.len().is_multiple_of(2), "odd hex {text:?}");
    (0..clean.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&clean[i..i + 2], 16).expect("hex"))
        .collect()
}

impl Case {
    fn conv(&self) -> String {
        self.conv.clone().unwrap_or_else(|| self.id.clone())
    }
    fn msg(&self) -> String {
        self.msg.clone().unwrap_or_else(|| "m".to_string())
    }

    /// The case's inputs in publish order.
    fn plan(&self) -> Vec<Planned> {
        let conv = self.conv();
        let mut next_seq: BTreeMap<String, u64> = BTreeMap::new();
        let mut out = Vec::new();
        for (k, spec) in self.inputs.iter().enumerate() {
            let msg = spec.msg.clone().unwrap_or_else(|| self.msg());
            let kind = spec.kind.as_deref().unwrap_or("chunk");
            let kind_token = match kind {
                "chunk" => "chunks",
                "result" => "results",
                other => panic!("{}: input kind {other:?}", self.id),
            };
            let subject = match &spec.subject {
                Some(s) => expand(s, &conv, &msg),
                None => format!("{PREFIX}.{kind_token}.{conv}.{msg}"),
            };
            let bodies: Vec<Vec<u8>> = if let Some(chunks) = &spec.chunks {
                chunks
                    .iter()
                    .map(|c| expand(c, &conv, &msg).into_bytes())
                    .collect()
            } else {
                vec![self.body(spec, &conv, &msg)]
            };
            let dlq_subject = match spec.dlq.as_deref() {
                Some("unroutable") => format!("{PREFIX}.dlq.unroutable"),
                Some(other) => expand(other, &conv, &msg),
                None => format!("{PREFIX}.dlq.{conv}.{msg}"),
            };
            for (j, body) in bodies.into_iter().enumerate() {
                let mut headers: Vec<(String, String)> = Vec::new();
                if kind == "chunk" && !spec.no_provider {
                    if let Some(p) = spec.provider.as_ref().or(self.provider.as_ref()) {
                        headers.push(("Toolstream-Provider".into(), p.clone()));
                    }
                }
                let counter = next_seq.entry(subject.clone()).or_insert(0);
                let seq = match spec.seq {
                    Some(s) => Some(s + j as u64),
                    None if kind == "chunk" && self.numbered && !spec.no_seq => Some(*counter),
                    None => None,
                };
                if let Some(s) = seq {
                    if kind == "chunk" {
                        *counter = s.saturating_add(1);
                    }
                    headers.push(("Toolstream-Seq".into(), s.to_string()));
                }
                if let Some(c) = &spec.control {
                    headers.push(("Toolstream-Control".into(), c.clone()));
                }
                for (name, value) in &spec.headers {
                    headers.retain(|(n, _)| n != name);
                    headers.push((name.clone(), expand(value, &conv, &msg)));
                }
                out.push(Planned {
                    label: format!("{}#{}", self.id, out.len()),
                    subject: subject.clone(),
                    headers,
                    msg_id: format!("bad:{}:{k}:{j}", self.id),
                    body,
                    dead_letter: spec.dead_letter.clone(),
                    dlq_subject: dlq_subject.clone(),
                    duplicate: spec.duplicate,
                });
            }
        }
        out
    }

    fn body(&self, spec: &InputSpec, conv: &str, msg: &str) -> Vec<u8> {
        let given = [
            spec.body.is_some(),
            spec.body_hex.is_some(),
            spec.body_file.is_some(),
            spec.body_parts.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        assert!(given <= 1, "{}: more than one body form", self.id);
        if let Some(b) = &spec.body {
            return expand(b, conv, msg).into_bytes();
        }
        if let Some(h) = &spec.body_hex {
            return hex(h);
        }
        if let Some(f) = &spec.body_file {
            let path = corpus_dir().join(f);
            return std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        if let Some(parts) = &spec.body_parts {
            let mut out = Vec::new();
            for p in parts {
                let piece = match (&p.text, &p.hex) {
                    (Some(t), None) => expand(t, conv, msg).into_bytes(),
                    (None, Some(h)) => hex(h),
                    _ => panic!("{}: a part is text or hex", self.id),
                };
                for _ in 0..p.repeat {
                    out.extend_from_slice(&piece);
                }
            }
            return out;
        }
        Vec::new()
    }
}

/// What an event must be (the fields a manifest names), or why not.
fn event_matches(want: &ExpectedEvent, got: &Value) -> Result<(), String> {
    let mut diffs = Vec::new();
    let mut check = |field: &str, want: Option<&str>, got: &Value| {
        if let Some(w) = want {
            if got.as_str() != Some(w) {
                diffs.push(format!("{field} {got} (want {w:?})"));
            }
        }
    };
    check("type", Some(&want.ty), &got["type"]);
    check("call", want.call.as_deref(), &got["tool_call"]["id"]);
    check("name", want.name.as_deref(), &got["tool_call"]["name"]);
    check("reason", want.reason.as_deref(), &got["reason"]);
    check(
        "finish_reason",
        want.finish_reason.as_deref(),
        &got["finish_reason"],
    );
    check(
        "result_for",
        want.result_for.as_deref(),
        &got["tool_result"]["tool_call_id"],
    );
    check(
        "output",
        want.output.as_deref(),
        &got["tool_result"]["output"],
    );
    if let Some(statuses) = &want.statuses {
        let have: Vec<&str> = got["calls"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["status"].as_str().unwrap_or("?"))
                    .collect()
            })
            .unwrap_or_default();
        if have != *statuses {
            diffs.push(format!("statuses {have:?} (want {statuses:?})"));
        }
    }
    if let Some(args) = &want.arguments {
        let want_json = serde_json::to_value(args).expect("toml to json");
        if got["tool_call"]["arguments"] != want_json {
            diffs.push(format!(
                "arguments {} (want {want_json})",
                short(&got["tool_call"]["arguments"].to_string())
            ));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join(", "))
    }
}

fn short(text: &str) -> String {
    if text.len() <= 160 {
        return text.to_string();
    }
    let mut end = 160;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

fn describe(e: &Value) -> String {
    let mut s = e["type"].as_str().unwrap_or("?").to_string();
    if let Some(id) = e["tool_call"]["id"].as_str() {
        s.push_str(&format!(" {id}"));
    }
    if let Some(id) = e["tool_result"]["tool_call_id"].as_str() {
        s.push_str(&format!(" for {id}"));
    }
    if let Some(r) = e["reason"].as_str() {
        s.push_str(&format!(" ({r})"));
    }
    if let Some(r) = e["finish_reason"].as_str() {
        s.push_str(&format!(" finish {r}"));
    }
    s
}

fn describe_want(e: &ExpectedEvent) -> String {
    let mut s = e.ty.clone();
    if let Some(c) = &e.call {
        s.push_str(&format!(" {c}"));
    }
    if let Some(c) = &e.result_for {
        s.push_str(&format!(" for {c}"));
    }
    if let Some(r) = &e.reason {
        s.push_str(&format!(" ({r})"));
    }
    if let Some(r) = &e.finish_reason {
        s.push_str(&format!(" finish {r}"));
    }
    s
}

/// Publishes one input and returns its stream sequence (PubAck), retrying while the server
/// is busy; panics when it is refused.
async fn publish(js: &jetstream::Context, p: &Planned) -> u64 {
    let mut headers = HeaderMap::new();
    for (name, value) in &p.headers {
        headers.insert(name.as_str(), value.as_str());
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let msg = PublishMessage::build()
            .headers(headers.clone())
            .message_id(p.msg_id.as_str())
            .payload(p.body.clone().into());
        let result = match js.send_publish(p.subject.clone(), msg).await {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(ack) => {
                assert!(
                    !ack.duplicate,
                    "{}: the server took it for a duplicate",
                    p.label
                );
                return ack.sequence;
            }
            // a subject no stream captures never reaches the worker: a mistake in the corpus
            Err(e) if e.contains("no stream found") => {
                panic!("{}: {:?} is captured by no stream: {e}", p.label, p.subject)
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("{}: publish failed ({e}); retrying", p.label);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{}: publish to {:?} failed: {e}", p.label, p.subject),
        }
    }
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// How one case ended, for the summary table.
fn outcome_kind(case: &Case, planned: &[&Planned]) -> String {
    let mut codes: BTreeSet<String> = BTreeSet::new();
    let mut duplicates = 0;
    for p in planned {
        if let Some(d) = &p.dead_letter {
            codes.insert(d.split(':').next().unwrap_or(d).to_string());
        }
        if p.duplicate {
            duplicates += 1;
        }
    }
    let mut ends: BTreeSet<String> = BTreeSet::new();
    for e in &case.events {
        match e.ty.as_str() {
            "tool_call.completed" => {
                ends.insert("completed".into());
            }
            "tool_call.abandoned" | "tool_call.invalid" => {
                ends.insert(format!(
                    "{}:{}",
                    e.ty.trim_start_matches("tool_call."),
                    e.reason.as_deref().unwrap_or("?")
                ));
            }
            "tool_result.orphaned" => {
                ends.insert("orphaned".into());
            }
            _ => {}
        }
    }
    let mut parts = Vec::new();
    if duplicates > 0 {
        parts.push("duplicate".to_string());
    }
    if !codes.is_empty() {
        parts.push(format!(
            "DLQ {}",
            codes.into_iter().collect::<Vec<_>>().join("+")
        ));
    }
    if !ends.is_empty() {
        parts.push(format!(
            "calls {}",
            ends.into_iter().collect::<Vec<_>>().join("+")
        ));
    }
    if parts.is_empty() {
        if case.events.is_empty() {
            "no-op".to_string()
        } else {
            "message only".to_string()
        }
    } else {
        parts.join("; ")
    }
}
