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

mod common;

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
use toolstream_testkit::NatsServer;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_has_its_written_outcome_beside_valid_streams_of_every_provider() {
    let started = Instant::now();
    let cases = load_corpus();
    assert!(cases.len() >= 80, "the corpus has {} cases", cases.len());
    let mut ids = BTreeSet::new();
    let mut convs = BTreeSet::new();
    for c in &cases {
        assert!(ids.insert(c.id.clone()), "case id {} twice", c.id);
        assert!(
            convs.insert(c.conv()),
            "conversation {:?} used by two cases",
            c.conv()
        );
        assert!(
            !c.conv().starts_with("wl-"),
            "{}: wl- is the workload's",
            c.id
        );
        assert!(!c.what.is_empty(), "{}: say what it is", c.id);
    }
    let planned: Vec<Vec<Planned>> = cases.iter().map(Case::plan).collect();
    let classes: BTreeSet<&str> = cases.iter().map(|c| c.class.as_str()).collect();
    for want in [
        "providers",
        "headers",
        "subjects",
        "sizes",
        "encodings",
        "results",
        "control",
    ] {
        assert!(classes.contains(want), "no case of class {want}");
    }

    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let max_arg = MAX_ARGUMENT_BYTES.to_string();
    let gap = GAP_TIMEOUT_MS.to_string();
    let orphan = ORPHAN_GRACE_MS.to_string();
    let flags = [
        "--max-argument-bytes",
        max_arg.as_str(),
        "--gap-timeout-ms",
        gap.as_str(),
        "--orphan-grace-ms",
        orphan.as_str(),
        "--ack-wait",
        "30s",
    ];
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &flags);
    let nats = client(&server.url()).await;
    let js = jetstream::new(nats.clone());
    wait_provisioned(&js, "toolstream").await;

    // the valid streams: every recording of every provider and generated ones, concurrently
    let seed = toolstream_testkit::fault::seed();
    let mut spec = WorkloadSpec::small("wl", seed, 12);
    spec.recordings = true;
    spec.spread = Duration::from_secs(3);
    let workload = Workload::build(&spec).expect("workload");
    let config = assembler::Config {
        max_argument_bytes: MAX_ARGUMENT_BYTES,
        gap_timeout_ms: GAP_TIMEOUT_MS,
        orphan_grace_ms: ORPHAN_GRACE_MS,
        ..assembler::Config::default()
    };
    let reference = Reference::compute(&workload, &config).expect("reference");
    let producer = Producer::new(js.clone());
    let valid = {
        let workload = workload.clone();
        tokio::spawn(async move {
            workload
                .publish(&producer, &Misbehaviour::default())
                .await
                .expect("workload published")
        })
    };

    // the corpus, case after case
    let mut seq_of: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (ci, inputs) in planned.iter().enumerate() {
        for (k, p) in inputs.iter().enumerate() {
            let seq = publish(&js, p).await;
            seq_of.insert(seq, (ci, k));
        }
    }
    let published = valid.await.unwrap();
    eprintln!(
        "published {} corpus inputs ({} cases) and {} workload inputs (seed {seed}) in {:?}",
        seq_of.len(),
        cases.len(),
        published.inputs,
        started.elapsed()
    );

    // wait for every outcome under one deadline
    let deadline = started + DEADLINE;
    let expected_dead: usize = planned
        .iter()
        .flatten()
        .filter(|p| p.dead_letter.is_some())
        .count();
    let expected_events: BTreeMap<String, usize> =
        cases.iter().map(|c| (c.conv(), c.events.len())).collect();
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    loop {
        events.poll().await;
        dlq.poll().await;
        let corpus_dead = dlq
            .all
            .iter()
            .filter(|r| {
                r.header("Toolstream-Stream-Seq")
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|s| seq_of.contains_key(&s))
            })
            .count();
        let mut per_conv: BTreeMap<String, usize> = BTreeMap::new();
        for e in &events.all {
            if let Ok(v) = serde_json::from_slice::<Value>(&e.payload) {
                if let Some(c) = v["conversation_id"].as_str() {
                    *per_conv.entry(c.to_string()).or_default() += 1;
                }
            }
        }
        let events_done = expected_events
            .iter()
            .all(|(c, n)| per_conv.get(c).copied().unwrap_or(0) >= *n);
        if (corpus_dead >= expected_dead && events_done) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut checker = Checker::new(nats.clone(), PREFIX);
    let left = deadline.saturating_duration_since(Instant::now());
    let complete = checker
        .wait(
            &reference,
            &WaitPlan {
                limit: left.max(Duration::from_secs(5)),
                quiet: Duration::from_secs(10),
                ..WaitPlan::default()
            },
        )
        .await;
    // settled: nothing pending, nothing left in the outbox; then a last look for stragglers
    let stream = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    let settle_by = Instant::now().max(deadline) + Duration::from_secs(5);
    loop {
        let info = stream.consumer_info("toolstream").await.unwrap();
        if !worker.is_running() {
            break;
        }
        let outbox = metric(&worker.metrics(), "toolstream_outbox_depth").unwrap_or(1);
        if info.num_pending == 0 && info.num_ack_pending == 0 && outbox == 0 {
            break;
        }
        if Instant::now() > settle_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    events.poll().await;
    dlq.poll().await;
    let mut report = checker.check(&reference).await;
    report.complete = complete;
    let running = worker.is_running();
    // (a worker that stopped has no /metrics to read: the verdict below names the stop)
    let metrics = if running {
        worker.metrics()
    } else {
        String::new()
    };
    let elapsed = started.elapsed();

    // ---- compare
    let mut failures: Vec<String> = Vec::new();
    // dead letters by the input they name
    let mut dead_of: BTreeMap<(usize, usize), Vec<&Read>> = BTreeMap::new();
    for r in &dlq.all {
        let seq = r
            .header("Toolstream-Stream-Seq")
            .and_then(|s| s.parse::<u64>().ok());
        match seq.and_then(|s| seq_of.get(&s)) {
            Some(at) => dead_of.entry(*at).or_default().push(r),
            None => {
                let workload_conv = r
                    .subject
                    .strip_prefix("toolstream.dlq.")
                    .is_some_and(|rest| rest.starts_with("wl-"));
                if !workload_conv {
                    failures.push(format!(
                        "a dead letter on {} (reason {:?}, stream seq {:?}) names no input of the run",
                        r.subject,
                        r.header("Toolstream-Reason"),
                        seq
                    ));
                }
            }
        }
    }
    let mut by_conv: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in &events.all {
        let v = e.json();
        let conv = v["conversation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        by_conv.entry(conv).or_default().push(v);
    }
    let mut case_failed = vec![false; cases.len()];
    for (ci, case) in cases.iter().enumerate() {
        let mut fail = |what: String| {
            case_failed[ci] = true;
            failures.push(format!(
                "[{}] {} ({}): {what}",
                case.class, case.id, case.what
            ));
        };
        for (k, p) in planned[ci].iter().enumerate() {
            let got = dead_of.get(&(ci, k)).cloned().unwrap_or_default();
            let reasons: Vec<String> = got
                .iter()
                .map(|r| r.header("Toolstream-Reason").unwrap_or_default())
                .collect();
            match &p.dead_letter {
                Some(prefix) => {
                    if got.len() != 1 {
                        fail(format!(
                            "input {} expected one dead letter `{prefix}…`, actual {} dead letter(s) {:?}",
                            p.label,
                            got.len(),
                            reasons.iter().map(|r| short(r)).collect::<Vec<_>>()
                        ));
                    } else {
                        if !reasons[0].starts_with(prefix.as_str()) {
                            fail(format!(
                                "input {} expected dead letter `{prefix}…`, actual `{}`",
                                p.label,
                                short(&reasons[0])
                            ));
                        }
                        if got[0].subject != p.dlq_subject {
                            fail(format!(
                                "input {} dead letter expected on {}, actual on {}",
                                p.label, p.dlq_subject, got[0].subject
                            ));
                        }
                        let original = got[0].header("Toolstream-Subject");
                        if original.as_deref() != Some(p.subject.as_str()) {
                            fail(format!(
                                "input {} dead letter names subject {original:?}, not {:?}",
                                p.label, p.subject
                            ));
                        }
                        // the body is kept (a body too large for the DLQ is cut and referenced)
                        let cut = got[0].header("Toolstream-Body-Truncated").is_some();
                        if !cut && got[0].payload != p.body {
                            fail(format!(
                                "input {} dead letter body differs from the input ({} vs {} bytes)",
                                p.label,
                                got[0].payload.len(),
                                p.body.len()
                            ));
                        }
                    }
                }
                None => {
                    if !got.is_empty() {
                        fail(format!(
                            "input {} expected {}, actual dead letter(s) {:?}",
                            p.label,
                            if p.duplicate { "duplicate" } else { "applied" },
                            reasons.iter().map(|r| short(r)).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
        // events, per message in order
        let conv = case.conv();
        let actual = by_conv.get(&conv).cloned().unwrap_or_default();
        let mut want_by: BTreeMap<String, Vec<&ExpectedEvent>> = BTreeMap::new();
        for e in &case.events {
            want_by
                .entry(e.msg.clone().unwrap_or_else(|| case.msg()))
                .or_default()
                .push(e);
        }
        let mut got_by: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for e in &actual {
            got_by
                .entry(e["message_id"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(e);
        }
        // per message: call and message events in order, and tool_result events in order
        // (where a result lands among its message's call events is not part of the contract)
        let mut keys: BTreeSet<(String, bool)> = BTreeSet::new();
        for (m, evs) in &want_by {
            for e in evs {
                keys.insert((m.clone(), e.ty.starts_with("tool_result.")));
            }
        }
        for (m, evs) in &got_by {
            for e in evs {
                let is_result = e["type"].as_str().unwrap_or("").starts_with("tool_result.");
                keys.insert((m.clone(), is_result));
            }
        }
        for (m, results) in &keys {
            let want: Vec<&ExpectedEvent> = want_by
                .get(m)
                .into_iter()
                .flatten()
                .copied()
                .filter(|e| e.ty.starts_with("tool_result.") == *results)
                .collect();
            let got: Vec<&Value> = got_by
                .get(m)
                .into_iter()
                .flatten()
                .copied()
                .filter(|e| {
                    e["type"].as_str().unwrap_or("").starts_with("tool_result.") == *results
                })
                .collect();
            let mismatch = want.len() != got.len()
                || want
                    .iter()
                    .zip(&got)
                    .any(|(w, g)| event_matches(w, g).is_err());
            if mismatch {
                let detail: Vec<String> = want
                    .iter()
                    .zip(&got)
                    .filter_map(|(w, g)| event_matches(w, g).err())
                    .take(2)
                    .collect();
                fail(format!(
                    "message {m}: expected events {:?}, actual {:?}{}",
                    want.iter().map(|w| describe_want(w)).collect::<Vec<_>>(),
                    got.iter().map(|g| describe(g)).collect::<Vec<_>>(),
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" — {}", detail.join("; "))
                    }
                ));
            }
        }
    }
    let want_duplicates = planned.iter().flatten().filter(|p| p.duplicate).count() as u64;
    let duplicates = metric(&metrics, "toolstream_duplicates_total");
    if duplicates != Some(want_duplicates) {
        failures.push(format!(
            "duplicates: expected {want_duplicates} (the inputs marked duplicate), actual {duplicates:?}"
        ));
    }

    // ---- summary table: per class, how the cases end (as written, ✗ where the run differed)
    let mut table: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut per_class: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (ci, case) in cases.iter().enumerate() {
        let refs: Vec<&Planned> = planned[ci].iter().collect();
        let kind = outcome_kind(case, &refs);
        let cell = table.entry((case.class.clone(), kind)).or_default();
        cell.0 += 1;
        let row = per_class.entry(case.class.clone()).or_default();
        row.0 += 1;
        row.1 += refs.len();
        if case_failed[ci] {
            cell.1 += 1;
            row.2 += 1;
        }
    }
    eprintln!("\n| class | cases | inputs | differing |\n| --- | --- | --- | --- |");
    for (class, (n, inputs, bad)) in &per_class {
        eprintln!("| {class} | {n} | {inputs} | {bad} |");
    }
    eprintln!("\n| class | outcome (as the contract says) | cases | differing |\n| --- | --- | --- | --- |");
    for ((class, kind), (n, bad)) in &table {
        eprintln!("| {class} | {kind} | {n} | {bad} |");
    }
    eprintln!(
        "\ncorpus: {} cases, {} inputs, {} dead letters expected; workload: {report}run time {elapsed:?}",
        cases.len(),
        seq_of.len(),
        expected_dead
    );

    // ---- verdict
    assert_eq!(worker.starts(), 1, "the worker was started more than once");
    assert_eq!(
        worker.ready_count(),
        1,
        "the worker became ready more than once (it restarted):\n{}",
        tail(&worker.log(), 40)
    );
    assert!(
        running,
        "the worker process stopped during the run:\n{}",
        tail(&worker.log(), 60)
    );
    assert!(
        failures.is_empty(),
        "{} problem(s) in {} case(s):\n{}\n--- worker log (tail) ---\n{}",
        failures.len(),
        case_failed.iter().filter(|f| **f).count(),
        failures.join("\n"),
        tail(&worker.log(), 30)
    );
    assert!(report.ok(), "valid streams beside the corpus: {report}");
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
}
