//! Every client command takes the worker's connection and auth flags (issue 12, item 5):
//! against a server that requires a token, `publish`, `tail`, `record`, `replay --from-nats`,
//! `inspect` and `query` get in with `--token` (or `TOOLSTREAM_TOKEN`), and a wrong token is
//! one clear error, not a hang. One server and worker for the file.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::process::{Command, Output};
use toolstream_testkit::NatsServer;

const TOKEN: &str = "cli-s3cret";

fn toolstream(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolstream"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLSTREAM_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run toolstream")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_client_command_connects_with_the_workers_auth_flags() {
    let server =
        NatsServer::start_with_config(&format!("authorization {{ token: \"{TOKEN}\" }}\n"))
            .expect("nats-server");
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&url, &dir.path().join("store"), &["--token", TOKEN]);
    worker.wait_ready();

    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/recordings/openai-chat/parallel_calls.sse");
    let sample = sample.to_str().unwrap();
    let auth = ["--nats-url", url.as_str(), "--token", TOKEN];
    let with = |cmd: &[&str], rest: &[&str]| -> Vec<String> {
        cmd.iter()
            .chain(auth.iter())
            .chain(rest.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        toolstream(&refs, &[])
    };

    ok(
        run(with(
            &["publish"],
            &["--conversation", "c1", "--message", "m1", "--end", sample],
        )),
        "publish --token",
    );
    // the worker applied it: the query service answers
    eventually(WAIT, || {
        run(with(&["query"], &["--json", "message", "c1", "m1"]))
            .status
            .success()
            .then_some(())
    })
    .unwrap_or_else(|| panic!("query --token never answered:\n{}", worker.log()));
    let events = ok(
        run(with(
            &["tail"],
            &[
                "--conversation",
                "c1",
                "--from-start",
                "--count",
                "5",
                "--timeout",
                "30s",
            ],
        )),
        "tail --token",
    );
    assert_eq!(events.lines().count(), 5, "{events}");
    let file = dir.path().join("c1.recording");
    ok(
        run(with(
            &["record"],
            &["--conversation", "c1", file.to_str().unwrap()],
        )),
        "record --token",
    );
    let diff = ok(
        run(with(
            &["replay"],
            &["--from-nats", "--diff", "--conversation", "c1"],
        )),
        "replay --from-nats --diff --token",
    );
    assert!(diff.contains("no difference"), "{diff}");
    let report = ok(
        run(with(&["inspect"], &["c1", "m1", "--json"])),
        "inspect --token",
    );
    assert!(report.contains("call_qZx8Kd2VbN"), "{report}");

    // the token from the environment, like `run`'s
    let out = toolstream(
        &["query", "--nats-url", &url, "message", "c1", "m1"],
        &[("TOOLSTREAM_TOKEN", TOKEN)],
    );
    ok(out, "query with TOOLSTREAM_TOKEN");

    // a wrong token: one line saying so, at once
    let out = toolstream(
        &["inspect", "--nats-url", &url, "--token", "wrong", "c1"],
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(err.contains("authorization"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(worker.terminate());
}
