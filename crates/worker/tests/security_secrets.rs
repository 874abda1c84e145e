//! Users' secrets (tool-call arguments, tool results, provider error texts) stay out of the
//! worker's log and out of other users' reach on disk:
//! - the data directory (and a partition's store directory) is created `0700`; an existing one
//!   that the group or others can access is tightened to `0700` with a warning;
//! - at `RUST_LOG=info` and at the default level (human and JSON format), nothing of what the
//!   inputs carry appears in the log: not from completed calls and results, not from chunks
//!   that are dead-lettered (whose reason quotes the body: that reason stays in the dead
//!   letter's `Toolstream-Reason` header), not from provider errors or a producer's error end.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream;
use async_nats::HeaderMap;
use common::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use toolstream_testkit::NatsServer;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_data_directory_and_its_missing_parents_are_created_0700() {
    let server = NatsServer::start().expect("nats-server");
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("new").join("data");
    let log = t.path().join("worker.log");
    let mut w = Bare::start(&server.url(), &data, &log, &[]);
    eventually(WAIT, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("JetStream ready")
    })
    .unwrap_or_else(|| {
        panic!(
            "not ready:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert_eq!(mode(&data), 0o700, "{}", data.display());
    assert_eq!(mode(&t.path().join("new")), 0o700);
    assert!(w.terminate());
}

#[test]
fn an_open_data_directory_is_tightened_with_a_warning_and_a_partition_store_is_private() {
    let server = NatsServer::start().expect("nats-server");
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut w = Worker::start(
        &server.url(),
        &data,
        &["--partitions", "2", "--partition", "1"],
    );
    w.wait_ready();
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("partition-1")), 0o700);
    let log = w.log();
    let warning = log
        .lines()
        .find(|l| l.contains("tightened to 0700"))
        .unwrap_or_else(|| panic!("no warning:\n{}", tail(&log, 20)));
    assert!(
        warning.contains("WARN") && warning.contains("0755"),
        "{warning}"
    );
    assert!(w.terminate());
}

/// `toolstream run` started by hand, to run it without `RUST_LOG` (the harness always sets it).
struct Bare {
    child: Child,
}

impl Bare {
    fn start(url: &str, data: &Path, log: &Path, extra: &[&str]) -> Bare {
        let mut cmd = Command::new(toolstream_bin());
        cmd.arg("run")
            .args(["--nats-url", url])
            .arg("--data-dir")
            .arg(data);
        for (flag, value) in toolstream_testkit::harness::Worker::TEST_DEFAULTS {
            cmd.args([flag, value]);
        }
        let child = cmd
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("TOOLSTREAM_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn toolstream run");
        Bare { child }
    }

    fn terminate(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        eventually(WAIT, || self.child.try_wait().ok().flatten())
            .is_some_and(|status| status.success())
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn publish(p: &Producer, subject: &str, headers: &[(&str, &str)], id: &str, body: &[u8]) {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, *v);
    }
    p.publish(subject, h, id, body).await;
}

/// Every kind of input that carries user content, each carrying `secret`.
async fn publish_secrets(p: &Producer, secret: &str) {
    // A completed call whose arguments hold the secret, and its result.
    let call = Call {
        id: "call_s1".into(),
        name: "login".into(),
        args: json!({"api_key": secret, "user": "alice"}),
    };
    p.openai_stream("s1", "m1", &[call]).await;
    p.result("s1", "m1", 0, "call_s1", &format!("token={secret}"))
        .await;
    // Chunks that are dead-lettered; the decode error quotes the start of the body.
    let oai = [
        ("Toolstream-Provider", "openai-chat"),
        ("Toolstream-Seq", "0"),
    ];
    let not_json = format!("{{\"choices\":[{{\"delta\":{{\"content\":\"{secret}");
    publish(
        p,
        "toolstream.chunks.s1.m2",
        &oai,
        "s1:m2:0",
        not_json.as_bytes(),
    )
    .await;
    let bad_field = json!({"choices":[{"index":0,"delta":{"tool_calls": secret}}]}).to_string();
    publish(
        p,
        "toolstream.chunks.s1.m3",
        &oai,
        "s1:m3:0",
        bad_field.as_bytes(),
    )
    .await;
    let bad_result = format!("{{\"output\":\"{secret}\"}}");
    publish(
        p,
        "toolstream.results.s1.m4",
        &[("Toolstream-Seq", "0")],
        "s1:m4:r0",
        bad_result.as_bytes(),
    )
    .await;
    // Provider errors carrying the secret in their message.
    let oai_error =
        json!({"error":{"message": format!("quota for {secret} exceeded"),"type":"insufficient_quota"}})
            .to_string();
    publish(
        p,
        "toolstream.chunks.s1.m5",
        &oai,
        "s1:m5:0",
        oai_error.as_bytes(),
    )
    .await;
    let anthropic = anthropic_stream(&[Call {
        id: "toolu_s1".into(),
        name: "login".into(),
        args: json!({"password": secret}),
    }]);
    for (seq, body) in anthropic.iter().take(6).enumerate() {
        p.chunk("s1", "m6", "anthropic", seq as u64, body).await;
    }
    let overloaded =
        json!({"type":"error","error":{"type":"overloaded_error","message": format!("overloaded {secret}")}})
            .to_string();
    p.chunk("s1", "m6", "anthropic", 6, overloaded.as_bytes())
        .await;
    // A producer's error end whose reason carries the secret.
    let open = openai_chat_stream(&[Call {
        id: "call_s7".into(),
        name: "login".into(),
        args: json!({"k": secret}),
    }]);
    for (seq, body) in open.iter().take(3).enumerate() {
        p.chunk("s1", "m7", "openai-chat", seq as u64, body).await;
    }
    publish(
        p,
        "toolstream.chunks.s1.m7",
        &[("Toolstream-Control", "error"), ("Toolstream-Seq", "3")],
        "s1:m7:3",
        format!("upstream failed: {secret}").as_bytes(),
    )
    .await;
}

/// Waits until `consumer` has nothing pending or unacknowledged.
async fn wait_consumed(js: &jetstream::Context, consumer: &str, log: impl Fn() -> String) {
    eventually_async(WAIT, || async move {
        let Ok(stream) = js.get_stream("TOOLSTREAM_IN").await else {
            return false;
        };
        stream.consumer_info(consumer).await.is_ok_and(|info| {
            info.num_pending == 0 && info.num_ack_pending == 0 && info.delivered.stream_sequence > 0
        })
    })
    .await
    .unwrap_or_else(|| panic!("{consumer} did not catch up:\n{}", tail(&log(), 40)));
}

#[tokio::test]
async fn arguments_results_and_error_texts_never_reach_the_log_at_info_or_by_default() {
    let secret = format!(
        "SECRETMARK{}x{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let server = NatsServer::start().expect("nats-server");
    let t = tempfile::tempdir().unwrap();
    let mut info = Worker::start_with_env(
        &server.url(),
        &t.path().join("info"),
        &[],
        &[("RUST_LOG", "info")],
    );
    info.wait_ready();
    let nc = client(&server.url()).await;
    let js = jetstream::new(nc.clone());
    let producer = Producer::new(js.clone());
    publish_secrets(&producer, &secret).await;

    // The content is really there: in the completed call's event and in the dead letters'
    // reasons (which quote the body).
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the completed call carrying the secret",
            |all| {
                all.iter().any(|r| {
                    r.json()["type"] == "tool_call.completed"
                        && String::from_utf8_lossy(&r.payload).contains(&secret)
                })
            },
            || info.log(),
        )
        .await;
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    dlq.until(
        WAIT,
        "a dead letter whose reason quotes the secret",
        |all| {
            all.iter().any(|r| {
                r.header("Toolstream-Reason")
                    .is_some_and(|reason| reason.contains(&secret))
            })
        },
        || info.log(),
    )
    .await;
    // Queries whose requests or answers carry it.
    let _ = nc
        .request("toolstream.query.message.s1.m1", "".into())
        .await
        .expect("answered");
    let _ = nc
        .request(
            "toolstream.query.history.s1",
            format!("{{\"target\":\"{secret}\"}}").into(),
        )
        .await
        .expect("answered");
    wait_consumed(&js, "toolstream", || info.log()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(info.terminate(), "{}", tail(&info.log(), 20));

    // Again, from the start of the input, by a worker at the default level with JSON logs.
    let log_path = t.path().join("default.log");
    let mut default = Bare::start(
        &server.url(),
        &t.path().join("default"),
        &log_path,
        &["--consumer", "second", "--log-format", "json"],
    );
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_consumed(&js, "second", read).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(default.terminate(), "{}", tail(&read(), 20));

    for (name, log) in [("RUST_LOG=info", info.log()), ("default level", read())] {
        assert!(
            log.contains("input dead-lettered"),
            "{name}: the dead-letter path ran and logged:\n{}",
            tail(&log, 40)
        );
        let leaks: Vec<&str> = log.lines().filter(|l| l.contains(&secret)).collect();
        assert!(
            leaks.is_empty(),
            "{name}: the log leaks content:\n{leaks:#?}"
        );
    }
}
