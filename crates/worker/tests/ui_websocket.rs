//! Browsers on NATS directly (issue 13, item 4): a real nats-server runs `deploy/nats-server.conf`
//! (its WebSocket listener and partition mapping) with `deploy/nats-permissions.conf`, a real
//! worker runs as `toolstream-worker`, and the NATS JavaScript client in Node
//! (`tests/ui-clients/nats-ws.mjs`: `@nats-io/nats-core` over `ws`, an ordered consumer of
//! `@nats-io/jetstream`) logs in over WebSocket as the read-only `toolstream-browser`:
//! - it reads the conversation's events, equal to those on the events stream, each once and in
//!   stream order, and nothing of another conversation; resumed after an event, exactly the rest;
//! - it is refused publishing input or events, subscribing to other clients' inboxes and any
//!   JetStream call outside its four grants, and none of it has an effect; a consumer whose
//!   filter differs from the one its create subject names is refused by the server (what lets
//!   a per-tenant grant bound what a browser reads);
//! - the same user cannot log in over plain TCP (WebSocket only);
//! - a browser following the conversation keeps going through a nats-server restart (its
//!   in-memory consumer is found gone with `CONSUMER.INFO` and recreated after the last event
//!   it had) and sees a message published after it, every event once. Without the
//!   `CONSUMER.INFO` grant it stalls there; without `STREAM.INFO` it never starts (both tried).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ui_support;

use common::{tail, Call, Producer, StreamLog, Worker, WAIT};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use toolstream_testkit::{free_port, NatsServer};

const WORKER_PW: &str = "worker-pw-ws";
const BROWSER_PW: &str = "browser-pw-ws";
const ADMIN_PW: &str = "admin-pw-ws";
const CONV: &str = "ws-conv";

fn deploy_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// deploy/nats-server.conf as deployed, except: the client port, monitoring port and store dir
/// come from the harness's command line, and the WebSocket listener's port is `ws_port` on
/// 127.0.0.1; then the passwords, deploy/nats-permissions.conf and an unrestricted `admin`.
fn server_conf(ws_port: u16) -> String {
    let mut out = Vec::new();
    let (mut in_ws, mut ws_ports) = (false, 0);
    for line in deploy_file("nats-server.conf").lines() {
        let t = line.trim_start();
        if line.starts_with("websocket {") {
            in_ws = true;
        } else if in_ws && line.starts_with('}') {
            in_ws = false;
        }
        if in_ws && t.starts_with("port:") {
            ws_ports += 1;
            out.push(format!("  port: {ws_port}\n  host: \"127.0.0.1\""));
        } else if in_ws && t.starts_with("no_tls:") {
            assert_eq!(t, "no_tls: true", "the dev listener is plain ws://");
            out.push(line.to_string());
        } else if !(t.starts_with("port:")
            || t.starts_with("http_port:")
            || t.starts_with("store_dir:"))
        {
            out.push(line.to_string());
        }
    }
    assert_eq!(
        ws_ports, 1,
        "deploy/nats-server.conf has one websocket {{ port }}"
    );
    let permissions = deploy_file("nats-permissions.conf").replacen(
        "users = [",
        &format!("users = [\n    {{ user: \"admin\", password: \"{ADMIN_PW}\" }}\n"),
        1,
    );
    format!(
        "{}\n\nTOOLSTREAM_WORKER_PASSWORD: \"{WORKER_PW}\"\nTOOLSTREAM_PRODUCER_PASSWORD: \"p\"\n\
         TOOLSTREAM_UI_PASSWORD: \"u\"\nTOOLSTREAM_BROWSER_PASSWORD: \"{BROWSER_PW}\"\n\n{permissions}\n",
        out.join("\n")
    )
}

/// The partition the server's mapping puts `conv` on ([`common::partitions_of`]).
async fn partition_of(admin: &async_nats::Client, conv: &str) -> u32 {
    common::partitions_of(admin, &[conv.to_string()]).await[0]
}

fn calls(msg: &str, n: usize) -> Vec<Call> {
    (0..n)
        .map(|i| Call {
            id: format!("call_{msg}_{i}"),
            name: "lookup".into(),
            args: json!({"q": format!("{msg} {i}"), "n": i}),
        })
        .collect()
}

/// `target/ui-clients` (npm ci done) with the NATS subscriber script next to its packages.
fn ws_client() -> PathBuf {
    let dir = ui_support::ui_clients();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ui-clients/nats-ws.mjs");
    std::fs::copy(&src, dir.join("nats-ws.mjs")).expect("copy nats-ws.mjs");
    dir
}

/// What the script printed: the events (sequence, event), where it caught up, what the server
/// told it (with `probe`).
struct Seen {
    events: Vec<(u64, Value)>,
    caught_up: Option<u64>,
    told: Vec<String>,
    /// Connection changes (`disconnect`, `reconnect`).
    statuses: Vec<String>,
}

/// The subscriber as `toolstream-browser` over the WebSocket listener, from `after`, with
/// `mode` (`""`, `probe` or `follow:<n>`): the command.
fn subscriber(dir: &Path, ws_port: u16, after: u64, mode: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join("nats-ws.mjs"))
        .arg(format!("ws://127.0.0.1:{ws_port}"))
        .arg(CONV)
        .arg(after.to_string())
        .arg(mode)
        .current_dir(dir)
        .env("NATS_USER", "toolstream-browser")
        .env("NATS_PASS", BROWSER_PW)
        .kill_on_drop(true);
    cmd
}

/// Runs the subscriber to its end; what it printed.
async fn subscribe(dir: &Path, ws_port: u16, after: u64, probe: bool) -> Seen {
    let mode = if probe { "probe" } else { "" };
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        subscriber(dir, ws_port, after, mode).output(),
    )
    .await
    .expect("the subscriber finishes within 90 s")
    .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nats-ws.mjs failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&stdout.lines().map(str::to_string).collect::<Vec<_>>())
}

/// The subscriber's JSON lines.
fn parse(lines: &[String]) -> Seen {
    let mut read = Seen {
        events: Vec::new(),
        caught_up: None,
        told: Vec::new(),
        statuses: Vec::new(),
    };
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(seq) = v["seq"].as_u64() {
            read.events.push((seq, v["event"].clone()));
        } else if let Some(seq) = v["caught_up"].as_u64() {
            read.caught_up = Some(seq);
        } else if let Some(told) = v["told"].as_array() {
            read.told = told
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect();
        } else if let Some(status) = v["status"].as_str() {
            read.statuses.push(status.to_string());
        } else {
            panic!("unexpected line {line}");
        }
    }
    read
}

/// The deployment under test: the server with both deploy files, an admin client, the worker
/// of [`CONV`]'s partition as `toolstream-worker`, the events stream read so far, and
/// `target/ui-clients` with the subscriber.
struct Deployed {
    server: NatsServer,
    ws_port: u16,
    admin: async_nats::Client,
    partition: u32,
    worker: Worker,
    producer: Producer,
    events: StreamLog,
    clients: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the deployment and publishes two messages of [`CONV`] with their results and one
/// message of another conversation on the same partition (whose events must not be read);
/// returns once all their events are on the events stream.
async fn deploy() -> Deployed {
    let clients = tokio::task::spawn_blocking(ws_client);
    let ws_port = free_port();
    let server = NatsServer::start_with_config(&server_conf(ws_port)).expect("nats-server");
    assert!(
        server
            .log()
            .contains(&format!("websocket clients on ws://127.0.0.1:{ws_port}")),
        "the WebSocket listener of the deploy config is up:\n{}",
        server.log()
    );
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), ADMIN_PW.into())
        .custom_inbox_prefix("_INBOX_admin")
        .connect(server.url())
        .await
        .expect("admin connects");
    let partition = partition_of(&admin, CONV).await;
    // another conversation on the same partition: the worker publishes its events too
    let mut i = 0;
    let other = loop {
        let candidate = format!("ws-other-{i}");
        if partition_of(&admin, &candidate).await == partition {
            break candidate;
        }
        i += 1;
    };
    let dir = tempfile::tempdir().unwrap();
    let (parts, k) = ("4".to_string(), partition.to_string());
    let worker = Worker::start_with_env(
        &server.url(),
        &dir.path().join("data"),
        &[
            "--user",
            "toolstream-worker",
            "--inbox-prefix",
            "_INBOX_toolstream",
            "--partitions",
            &parts,
            "--partition",
            &k,
        ],
        &[("TOOLSTREAM_PASSWORD", WORKER_PW)],
    );
    worker.wait_ready();

    // --- a workload: two messages of CONV with their results, one message of another
    // conversation (its events must not be read)
    let js = async_nats::jetstream::new(admin.clone());
    let producer = Producer::new(js.clone());
    producer.openai_stream(CONV, "m1", &calls("m1", 2)).await;
    producer.openai_stream(&other, "m1", &calls("o1", 1)).await;
    producer.result(CONV, "m1", 0, "call_m1_0", "first").await;
    producer.openai_stream(CONV, "m2", &calls("m2", 1)).await;
    producer.result(CONV, "m1", 1, "call_m1_1", "second").await;
    producer.result(CONV, "m2", 0, "call_m2_0", "third").await;
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let of = |all: &[common::Read], conv: &str, ty: &str| {
        all.iter()
            .map(|r| r.json())
            .filter(|e| e["conversation_id"] == conv && e["type"] == ty)
            .count()
    };
    events
        .until(
            WAIT,
            "both messages of the conversation completed with their 3 results",
            |all| {
                of(all, CONV, "message.completed") == 2
                    && of(all, CONV, "tool_result.completed") == 3
                    && of(all, &other, "message.completed") == 1
            },
            || worker.log(),
        )
        .await;
    Deployed {
        server,
        ws_port,
        admin,
        partition,
        worker,
        producer,
        events,
        clients: clients.await.unwrap(),
        _dir: dir,
    }
}

/// The events of [`CONV`] on the events stream read so far: (sequence, event).
fn events_of_conv(events: &StreamLog) -> Vec<(u64, Value)> {
    events
        .all
        .iter()
        .filter(|r| r.subject.starts_with(&format!("toolstream.events.{CONV}.")))
        .map(|r| (r.seq, r.json()))
        .collect()
}

#[tokio::test]
async fn a_browser_reads_a_conversation_over_websocket_as_the_read_only_user_and_nothing_more() {
    let Deployed {
        server,
        ws_port,
        admin,
        partition,
        worker,
        mut events,
        clients,
        ..
    } = deploy().await;
    let want = events_of_conv(&events);
    assert_eq!(
        want.len(),
        2 * 3 + 2 + 3,
        "3 calls (started, completed), 2 messages, 3 results"
    );

    // --- from the start: every event of the conversation, as on the stream, once -------------
    let read = subscribe(&clients, ws_port, 0, false).await;
    assert_eq!(
        read.events, want,
        "the browser's events are the events stream's, in order"
    );
    let ids: HashSet<&str> = read
        .events
        .iter()
        .map(|(_, e)| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), want.len(), "each event once");
    assert_eq!(read.caught_up, want.last().map(|(s, _)| *s));

    // --- resumed after the 4th event: exactly the rest; then what it must not do ------------
    let mut watch = admin.subscribe("toolstream.>").await.unwrap();
    admin.flush().await.unwrap();
    let resume_after = want[3].0;
    let read = subscribe(&clients, ws_port, resume_after, true).await;
    assert_eq!(
        read.events,
        want[4..].to_vec(),
        "resumed strictly after {resume_after}"
    );
    let told = read.told.join("\n");
    for refused in [
        // input, after the partition mapping (the server checks the mapped subject)
        format!("Publish to \"toolstream.p.{partition}.chunks.{CONV}.forged\""),
        format!("Publish to \"toolstream.events.{CONV}.forged\""),
        // the worker's inbox (every conversation's input) and the default inbox
        "Subscription to \"_INBOX_toolstream.>\"".to_string(),
        "Subscription to \"_INBOX.>\"".to_string(),
        // JetStream beyond its four grants
        "Publish to \"$JS.API.STREAM.INFO.TOOLSTREAM_IN\"".to_string(),
        "Publish to \"$JS.API.CONSUMER.DELETE.TOOLSTREAM_EVENTS.x\"".to_string(),
    ] {
        assert!(
            told.contains(&format!("Permissions Violation for {refused}")),
            "the server did not refuse {refused}; the client was told:\n{told}"
        );
    }
    assert!(!told.contains("answered:"), "{told}");
    assert!(
        told.contains("create: Consumer create request did not match filtered subject"),
        "a consumer reading another conversation under a subject naming this one: {told}"
    );
    // ... and none of it had an effect: nothing forged went by, nothing new on the stream
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, watch.next()).await {
        assert!(
            !m.subject.ends_with(".forged"),
            "{} went through",
            m.subject
        );
    }
    let before = events.all.len();
    events.poll().await;
    assert_eq!(events.all.len(), before, "no event was added");

    // every refusal was the browser's, on its WebSocket connection; the worker was refused nothing
    let violations: Vec<String> = server
        .log()
        .lines()
        .filter(|l| l.contains("Violation"))
        .map(str::to_string)
        .collect();
    assert!(!violations.is_empty());
    for v in &violations {
        assert!(
            // 2.9: `User "toolstream-browser"`; 2.15: `"$G/user:toolstream-browser"`
            v.contains("toolstream-browser") && v.contains(" - wid:"),
            "a refusal that is not the browser's over WebSocket: {v}"
        );
    }
    assert!(
        !worker
            .log()
            .to_lowercase()
            .contains("permissions violation"),
        "{}",
        tail(&worker.log(), 30)
    );

    // --- WebSocket only: the same user over plain TCP is not let in ---------------------------
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        async_nats::ConnectOptions::with_user_and_password(
            "toolstream-browser".into(),
            BROWSER_PW.into(),
        )
        .connect(server.url()),
    )
    .await
    .expect("the TCP login is answered");
    assert!(tcp.is_err(), "toolstream-browser logged in over TCP");
}

/// The browser's connection survives a nats-server restart: its ordered consumer (in memory,
/// gone with the server) is found missing through `CONSUMER.INFO` and recreated after the last
/// event it printed, so a message published after the restart arrives, and every event of the
/// conversation is seen once. (Without the `CONSUMER.INFO` grant the client stalls here.)
#[tokio::test]
async fn a_browser_following_over_websocket_resumes_after_a_nats_server_restart_seeing_each_event_once(
) {
    let Deployed {
        mut server,
        ws_port,
        worker,
        producer,
        mut events,
        clients,
        ..
    } = deploy().await;
    let before = events_of_conv(&events);
    // m3 after the restart: one call and its result = started, completed, message.completed,
    // tool_result.completed
    let total = before.len() + 4;
    let mut child = subscriber(&clients, ws_port, 0, &format!("follow:{total}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run node");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let caught_up = line.contains("caught_up");
            printed.push(line);
            if caught_up {
                return;
            }
        }
        panic!("the subscriber ended before catching up: {printed:#?}");
    })
    .await
    .expect("the subscriber catches up");

    server
        .restart()
        .expect("nats-server restarts on its ports with its store");
    producer.openai_stream(CONV, "m3", &calls("m3", 1)).await;
    producer.result(CONV, "m3", 0, "call_m3_0", "fourth").await;
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push(line);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the subscriber did not get m3 after the restart: {printed:#?}"));
    let status = child.wait().await.unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert!(status.success(), "{status}: {printed:#?}\n{stderr}");

    events
        .until(
            WAIT,
            "m3 on the events stream",
            |all| {
                all.iter()
                    .filter(|r| r.subject.starts_with(&format!("toolstream.events.{CONV}.")))
                    .count()
                    == total
            },
            || worker.log(),
        )
        .await;
    let want = events_of_conv(&events);
    let seen = parse(&printed);
    assert!(
        seen.statuses.iter().any(|s| s == "reconnect"),
        "the connection went down with the server and came back: {:?}",
        seen.statuses
    );
    assert_eq!(
        seen.events, want,
        "before and after the restart: every event once, in stream order"
    );
}
