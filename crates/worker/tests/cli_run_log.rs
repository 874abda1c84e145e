//! What `toolstream run` says and refuses at start, as a new user met it (issue 12, item 7):
//! a log redirected to a file has no color codes and no Debug forms, a normal start warns about
//! nothing, a refused connection says "connection refused to …" (not "IO error"), and a second
//! worker on a taken metrics port refuses to start instead of running without health checks.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `toolstream run <args>` with its stderr in a file; `None` if it is still running after
/// `limit` (then it is killed). Returns (exit success, stderr).
fn run_for(args: &[&str], limit: Duration) -> (Option<bool>, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("worker.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolstream"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLSTREAM_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .arg("run")
        .arg("--data-dir")
        .arg(dir.path().join("store"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn toolstream run");
    let exited = eventually(limit, || child.try_wait().ok().flatten());
    let status = match exited {
        Some(s) => Some(s.success()),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    (status, std::fs::read_to_string(&log).unwrap())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirected_log_is_plain_text_and_a_normal_start_warns_about_nothing() {
    let mut s = E2e::start(toolstream_bin(), &[]).await;
    assert!(s.worker.terminate(), "worker did not stop cleanly");
    let log = s.worker.log();
    assert!(
        !log.contains('\u{1b}'),
        "color codes in a redirected log:\n{log}"
    );
    for debug_form in ["=Some(", "=None", "drained=", "filter= ", "filter=\n"] {
        assert!(
            !log.contains(debug_form),
            "{debug_form:?} in the log:\n{log}"
        );
    }
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(warnings.is_empty(), "a normal start warned: {warnings:#?}");
    assert!(log.contains("stopped; every event published"), "{log}");
}

#[test]
fn a_refused_connection_names_the_address_and_its_cause() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let metrics = format!("127.0.0.1:{}", free_port());
    let (status, log) = run_for(
        &["--nats-url", &url, "--metrics-listen", &metrics],
        Duration::from_secs(2),
    );
    assert_eq!(
        status, None,
        "the worker keeps waiting for its server:\n{log}"
    );
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("connection refused to 127.0.0.1:{port}")))
        .collect();
    assert!(!refused.is_empty(), "no 'connection refused to …':\n{log}");
    assert!(
        !log.lines().any(|l| l.trim_end().ends_with("IO error")),
        "a bare 'IO error':\n{log}"
    );
}

#[test]
fn a_second_worker_on_a_taken_metrics_port_refuses_to_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let url = format!("nats://127.0.0.1:{}", free_port());
    let (status, log) = run_for(
        &["--nats-url", &url, "--metrics-listen", &addr],
        Duration::from_secs(20),
    );
    assert_eq!(
        status,
        Some(false),
        "started without its metrics port:\n{log}"
    );
    assert!(
        log.contains(&format!("cannot listen on metrics_listen {addr}")),
        "{log}"
    );
}
