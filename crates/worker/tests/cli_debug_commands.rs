//! The debugging commands against a real nats-server and the real worker (issue 12):
//! - `record` and `replay --from-nats [--diff]`: a conversation's inputs recorded into a file
//!   and replayed reproduce the published events exactly; the same straight from JetStream
//!   with `--diff` finds no difference, and finds one in an event deliberately changed on the
//!   events stream;
//! - `inspect`: an invalid call's break point located (offset, marked excerpt, the chunk that
//!   carried it), through the query service and read-only on the stopped worker's data dir;
//! - `query message|history`: the query service from the command line, errors included.
//!
//! Each test starts one server and worker and runs every command against them.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::{Command, Output};
use toolstream_testkit::openai;

/// Runs `toolstream <args>` (no TOOLSTREAM_* from the environment).
async fn toolstream(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolstream"));
        for (k, _) in std::env::vars() {
            if k.starts_with("TOOLSTREAM_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(&args).output().expect("run toolstream")
    })
    .await
    .expect("toolstream task")
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Events of conversation `conv` on the events stream, per message, in stream order.
fn published_of(all: &[Read], conv: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in all.iter().map(Read::json) {
        if e["conversation_id"] == conv {
            out.entry(e["message_id"].as_str().unwrap().to_string())
                .or_default()
                .push(e);
        }
    }
    out
}

/// JSON lines per message, in order.
fn lines_by_message(stdout: &[u8]) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in text(stdout).lines().filter(|l| !l.trim().is_empty()) {
        let e: Value = serde_json::from_str(line).expect("a JSON event line");
        out.entry(e["message_id"].as_str().unwrap().to_string())
            .or_default()
            .push(e);
    }
    out
}

/// The sample every test here reads: conversation `c1` with two parallel calls and a result
/// (`m1`) and a call whose arguments break as JSON (`m2`); conversation `c2` beside it, which
/// no command about `c1` may show.
async fn publish_sample(producer: &Producer) {
    let calls = vec![
        Call {
            id: "call_a".into(),
            name: "lookup".into(),
            args: json!({"q": "weather in Paris", "n": 1}),
        },
        Call {
            id: "call_b".into(),
            name: "fetch".into(),
            args: json!({"url": "https://example.com/x"}),
        },
    ];
    producer.openai_stream("c1", "m1", &calls).await;
    producer.result("c1", "m1", 0, "call_a", "sunny, 21C").await;
    let broken = [
        openai::role_chunk(),
        openai::call_start(0, "call_bad", "book"),
        openai::args_chunk(0, "{\"city\": \"Paris\", "),
        openai::args_chunk(0, "\"days\": }"),
        openai::finish_chunk("tool_calls"),
        openai::DONE.to_vec(),
    ];
    for (seq, body) in broken.iter().enumerate() {
        producer
            .chunk("c1", "m2", "openai-chat", seq as u64, body)
            .await;
    }
    producer.openai_stream("c2", "m1", &calls[..1]).await;
}

/// Waits until the sample's events are all published; returns the events stream read.
async fn wait_sample(
    js: &async_nats::jetstream::Context,
    worker_log: impl Fn() -> String,
) -> Vec<Read> {
    let mut log = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    log.until(
        WAIT,
        "the sample's events",
        |all| {
            let done = |conv: &str, msg: &str, ty: &str| {
                all.iter().map(Read::json).any(|e| {
                    e["conversation_id"] == conv && e["message_id"] == msg && e["type"] == ty
                })
            };
            done("c1", "m1", "message.completed")
                && done("c1", "m1", "tool_result.completed")
                && done("c1", "m2", "message.completed")
                && done("c2", "m1", "message.completed")
        },
        worker_log,
    )
    .await;
    log.all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_replay_and_diff_reproduce_the_published_events_and_find_a_changed_one() {
    let s = E2e::start(toolstream_bin(), &[]).await;
    publish_sample(&s.producer).await;
    let events = wait_sample(&s.js, || s.worker.log()).await;
    let published = published_of(&events, "c1");
    assert!(
        published["m2"]
            .iter()
            .any(|e| e["type"] == "tool_call.invalid" && e["reason"] == "invalid_json"),
        "the sample's broken call ends invalid: {:#?}",
        published["m2"]
    );
    let url = s.server.url();

    // record: the conversation's inputs, nothing of c2, subjects/headers/seqs kept
    let file = s.dir.path().join("c1.recording");
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &url,
        "--conversation",
        "c1",
        file.to_str().unwrap(),
    ]))
    .await;
    assert!(out.status.success(), "record: {}", text(&out.stderr));
    let recorded = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = recorded
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["toolstream_recording"], 1, "{}", lines[0]);
    assert_eq!(lines[0]["conversation"], "c1");
    let inputs = &lines[1..];
    // 2 calls in 5-char pieces + role + finish + DONE for m1, its result, 6 chunks of m2
    let m1_chunks = openai_chat_stream(&[]).len(); // role, finish, DONE
    assert!(inputs.len() > m1_chunks + 1 + 6, "{} inputs", inputs.len());
    assert!(inputs
        .iter()
        .all(|i| i["subject"].as_str().unwrap().contains(".c1.")));
    assert!(inputs
        .iter()
        .any(|i| i["subject"] == "toolstream.results.c1.m1"
            && i["body"].as_str().unwrap().contains("sunny")));
    let seqs: Vec<u64> = inputs
        .iter()
        .map(|i| i["stream_seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "stream order: {seqs:?}"
    );
    assert!(inputs.iter().all(|i| i["headers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h[0] == "Nats-Msg-Id")));

    // record of one message only
    let m2_file = s.dir.path().join("m2.recording");
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &url,
        "--conversation",
        "c1",
        "--message",
        "m2",
        m2_file.to_str().unwrap(),
    ]))
    .await;
    assert!(
        out.status.success(),
        "record --message: {}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&m2_file).unwrap().lines().count(),
        1 + 6
    );

    // record → replay: the same events, per message, in the same order, byte for byte
    let out = toolstream(argv(&["replay", file.to_str().unwrap()])).await;
    assert!(out.status.success(), "replay: {}", text(&out.stderr));
    assert_eq!(
        lines_by_message(&out.stdout),
        published,
        "replay of the recording differs from what the worker published"
    );

    // replay --from-nats: the same, straight from JetStream
    let out = toolstream(argv(&[
        "replay",
        "--from-nats",
        "--nats-url",
        &url,
        "--conversation",
        "c1",
    ]))
    .await;
    assert!(
        out.status.success(),
        "replay --from-nats: {}",
        text(&out.stderr)
    );
    assert_eq!(lines_by_message(&out.stdout), published);

    // --diff: nothing changed
    let diff = |msg: Option<&'static str>| {
        let mut a = argv(&[
            "replay",
            "--from-nats",
            "--diff",
            "--nats-url",
            &url,
            "--conversation",
            "c1",
        ]);
        if let Some(m) = msg {
            a.extend(argv(&["--message", m]));
        }
        toolstream(a)
    };
    let out = diff(None).await;
    assert!(
        out.status.success(),
        "--diff on untouched events: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("no difference"),
        "{}",
        text(&out.stdout)
    );

    // a deliberately changed event: the last event of c1/m2 (its message.completed) replaced
    // on the events stream by one with another finish_reason
    let last = events
        .iter()
        .rev()
        .find(|r| r.json()["conversation_id"] == "c1" && r.json()["message_id"] == "m2")
        .unwrap();
    let mut changed = last.json();
    assert_eq!(changed["type"], "message.completed");
    changed["finish_reason"] = json!("stop");
    let stream = s.js.get_stream("TOOLSTREAM_EVENTS").await.unwrap();
    stream.delete_message(last.seq).await.unwrap();
    s.js.publish(last.subject.clone(), changed.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    let out = diff(Some("m2")).await;
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "--diff missed the change: {stdout}");
    assert!(
        stdout.contains("c1/m2") && stdout.contains("finish_reason"),
        "--diff does not name the changed field: {stdout}"
    );
    // m1 was not touched
    let out = diff(Some("m1")).await;
    assert!(out.status.success(), "m1: {}", text(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_of_an_unknown_conversation_or_an_unreachable_server_fails_saying_why() {
    let s = E2e::start(toolstream_bin(), &[]).await;
    let file = s.dir.path().join("none.recording");
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &s.server.url(),
        "--conversation",
        "nobody",
        file.to_str().unwrap(),
    ]))
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("nothing recorded"),
        "{}",
        text(&out.stderr)
    );
    // nothing stored since a time to come
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &s.server.url(),
        "--conversation",
        "nobody",
        "--since",
        "2099-01-01T00:00:00Z",
        file.to_str().unwrap(),
    ]))
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("since then"),
        "{}",
        text(&out.stderr)
    );

    // a port nothing listens on: refused, said once, no retry loop
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &format!("nats://127.0.0.1:{port}"),
        "--conversation",
        "c1",
        file.to_str().unwrap(),
    ]))
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("connection refused to 127.0.0.1:{port}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_locates_where_an_invalid_call_breaks_and_query_answers_from_the_command_line() {
    let mut s = E2e::start(toolstream_bin(), &[]).await;
    publish_sample(&s.producer).await;
    wait_sample(&s.js, || s.worker.log()).await;
    // m3: its third chunk is not JSON: a decode_error dead letter, and its call ends
    // abandoned (lost_chunk)
    let lost = [
        openai::role_chunk(),
        openai::call_start(0, "call_lost", "lookup"),
        b"{not json".to_vec(),
        openai::args_chunk(0, "{}"),
    ];
    for (seq, body) in lost.iter().enumerate() {
        s.producer
            .chunk("c1", "m3", "openai-chat", seq as u64, body)
            .await;
    }
    StreamLog::new(&s.js, "TOOLSTREAM_EVENTS")
        .until(
            WAIT,
            "m3's message.completed",
            |all| {
                all.iter()
                    .map(Read::json)
                    .any(|e| e["message_id"] == "m3" && e["type"] == "message.completed")
            },
            || s.worker.log(),
        )
        .await;
    let url = s.server.url();
    let inspect = |extra: &[&str]| {
        let mut a = argv(&["inspect", "--nats-url", &url, "--timeout", "30s"]);
        a.extend(argv(extra));
        toolstream(a)
    };

    // through the query service, for scripts
    let out = inspect(&["c1", "m2", "--json"]).await;
    assert!(out.status.success(), "inspect: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    let check_m2 = |report: &Value| {
        let m = &report["messages"][0];
        assert_eq!(m["snapshot"]["message_id"], "m2", "{report:#}");
        let call = &m["snapshot"]["calls"][0];
        assert_eq!(call["status"], "invalid", "{report:#}");
        assert_eq!(call["reason"], "invalid_json");
        let c = &m["calls"][0];
        let fragments: Vec<(u64, &str)> = c["fragments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["seq"].as_u64().unwrap(), f["text"].as_str().unwrap()))
            .collect();
        assert_eq!(
            fragments,
            [(2, "{\"city\": \"Paris\", "), (3, "\"days\": }")],
            "{report:#}"
        );
        let b = &c["json_break"];
        // `{"city": "Paris", "days": }`: the `}` at byte 26 cannot follow `:`
        assert_eq!(b["offset"], 26, "{report:#}");
        assert_eq!(b["line"], 1);
        assert_eq!(b["fragment"], 1, "the break is in the chunk numbered 3");
        let excerpt = b["excerpt"].as_str().unwrap();
        let marker = b["marker"].as_str().unwrap();
        assert_eq!(excerpt.chars().nth(marker.len() - 1), Some('}'), "{b}");
    };
    check_m2(&report);

    // a dead letter says why a call was cut
    let out = inspect(&["c1", "m3", "--json"]).await;
    assert!(out.status.success(), "inspect m3: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &report["messages"][0];
    assert_eq!(
        m["snapshot"]["calls"][0]["reason"], "lost_chunk",
        "{report:#}"
    );
    // the chunk that is not JSON, and the one after it (its stream was closed)
    let dead = m["dead_letters"].as_array().unwrap();
    let reasons: Vec<&str> = dead
        .iter()
        .map(|d| d["reason"].as_str().unwrap().split(':').next().unwrap())
        .collect();
    assert_eq!(reasons, ["decode_error", "stream_closed"], "{report:#}");
    // the later chunk's fragment is shown, marked as not in the call
    let fragment = &m["calls"][0]["fragments"][0];
    assert_eq!(fragment["seq"], 3, "{report:#}");
    assert_eq!(fragment["dead_lettered"], true, "{report:#}");
    assert_eq!(fragment["stream_seq"], dead[1]["stream_seq"], "{report:#}");
    assert!(
        m["calls"][0]["json_break"].is_null(),
        "only invalid calls: {report:#}"
    );

    // for a person: every message of the conversation, no color codes when redirected
    let out = inspect(&["c1"]).await;
    assert!(out.status.success(), "inspect: {}", text(&out.stderr));
    let page = text(&out.stdout);
    for want in [
        "message m1",
        "message m2",
        "call_a",
        "call_b",
        "result for call_a: sunny, 21C",
        "JSON breaks at offset 26 (line 1, column 27)",
        "in the fragment of chunk seq 3",
        "message m3",
        "dead letter stream #",
    ] {
        assert!(page.contains(want), "{want:?} missing:\n{page}");
    }
    assert!(
        !page.contains('\u{1b}'),
        "color codes in redirected output:\n{page}"
    );
    assert!(!page.contains("c2"), "another conversation shown:\n{page}");

    // query message / history
    let query = |extra: &[&str]| {
        // the answers are checked here, not how fast they come on a loaded machine (the
        // default 5 s ran out once in a parallel CI run)
        let mut a = argv(&["query", "--nats-url", &url, "--timeout", "30s"]);
        a.extend(argv(extra));
        toolstream(a)
    };
    let out = query(&["--json", "message", "c1", "m1"]).await;
    assert!(out.status.success(), "query: {}", text(&out.stderr));
    let snapshot: Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses: Vec<(&str, &str)> = snapshot["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["tool_call"]["id"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(statuses, [("call_a", "completed"), ("call_b", "completed")]);
    assert_eq!(snapshot["tool_results"][0]["output"], "sunny, 21C");
    let out = query(&["message", "c1", "m1"]).await;
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(
        page.contains("call_a") && page.contains("completed") && page.contains("sunny"),
        "{page}"
    );
    let out = query(&["history", "c1", "--target", "anthropic", "--json"]).await;
    assert!(out.status.success(), "history: {}", text(&out.stderr));
    let history: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rendered = history.to_string();
    assert!(
        rendered.contains("tool_use") && rendered.contains("call_a") && rendered.contains("sunny"),
        "{history:#}"
    );
    let out = query(&["message", "c1", "no_such_message"]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
    let out = query(&["history", "c1", "--target", "no-such-api"]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no-such-api"),
        "{}",
        text(&out.stderr)
    );

    // the worker running: its store is refused, pointing at the query service
    let store = s.store();
    let out = inspect(&["c1", "--data-dir", store.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("in use by a running worker"),
        "{}",
        text(&out.stderr)
    );

    // the worker stopped: the same report, read-only from its data directory
    assert!(s.worker.terminate(), "worker did not stop cleanly");
    let out = inspect(&["c1", "m2", "--json", "--data-dir", store.to_str().unwrap()]).await;
    assert!(
        out.status.success(),
        "inspect --data-dir: {}",
        text(&out.stderr)
    );
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_m2(&offline);
    assert!(offline["source"].as_str().unwrap().starts_with("data dir"));
    // an empty directory is not a store, and is not made into one
    let empty = s.dir.path().join("empty");
    let out = inspect(&["c1", "--data-dir", empty.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("holds no toolstream store"),
        "{}",
        text(&out.stderr)
    );
    assert!(!empty.exists());
}

/// deploy/nats-server.conf without what the testkit sets itself.
fn partitioned_server_conf() -> String {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats-server.conf");
    std::fs::read_to_string(path)
        .expect("deploy/nats-server.conf")
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("port:") || t.starts_with("http_port:") || t.starts_with("store_dir:"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_replay_diff_and_inspect_work_behind_the_partition_mapping() {
    let server = toolstream_testkit::NatsServer::start_with_config(&partitioned_server_conf())
        .expect("nats-server with the deploy mapping");
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let workers: Vec<Worker> = (0..4)
        .map(|k| {
            let k = k.to_string();
            Worker::start(
                &url,
                &dir.path().join(format!("data-{k}")),
                &["--partitions", "4", "--partition", &k],
            )
        })
        .collect();
    let js = async_nats::jetstream::new(client(&url).await);
    publish_sample(&Producer::new(js.clone())).await;
    let logs = || {
        workers
            .iter()
            .map(|w| w.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let events = wait_sample(&js, logs).await;
    let published = published_of(&events, "c1");

    let file = dir.path().join("c1.recording");
    let out = toolstream(argv(&[
        "record",
        "--nats-url",
        &url,
        "--conversation",
        "c1",
        file.to_str().unwrap(),
    ]))
    .await;
    assert!(out.status.success(), "record: {}", text(&out.stderr));
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(
        recorded.contains("toolstream.p."),
        "partitioned subjects kept: {recorded}"
    );
    // A partitioned worker reads chunks and results through two consumers, so where m1's
    // result lands among its chunks is not the stream order a replay applies (README,
    // "Debugging a tool call"); m2 has no result and replays exactly.
    let out = toolstream(argv(&["replay", file.to_str().unwrap()])).await;
    assert!(out.status.success(), "replay: {}", text(&out.stderr));
    assert_eq!(lines_by_message(&out.stdout)["m2"], published["m2"]);
    let out = toolstream(argv(&[
        "replay",
        "--from-nats",
        "--diff",
        "--nats-url",
        &url,
        "--conversation",
        "c1",
        "--message",
        "m2",
    ]))
    .await;
    assert!(
        out.status.success(),
        "--diff: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let out = toolstream(argv(&[
        "inspect",
        "--nats-url",
        &url,
        "--timeout",
        "30s",
        "c1",
        "m2",
        "--json",
    ]))
    .await;
    assert!(out.status.success(), "inspect: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["messages"][0]["calls"][0]["json_break"]["offset"], 26,
        "{report:#}"
    );
}
