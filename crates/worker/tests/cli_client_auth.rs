//! Every client command takes the worker's connection and auth flags (issue 12, item 5):
//! against a server that requires a token, `publish`, `tail`, `record`, `replay --from-nats`,
//! `inspect` and `query` get in with `--token` (or `TOOLSTREAM_TOKEN`), and a wrong token is
//! one clear error, not a hang; over mutual TLS, `publish` and `query` take the worker's TLS
//! flags. One server and worker per test.

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

/// Runs openssl in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl CLI is needed for the TLS test (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ca.pem`, and `server.pem`/`client.pem` with their keys signed by it, in `dir`.
fn certificates(dir: &std::path::Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=toolstream cli test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    let uses = [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ];
    for (name, ext) in uses {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let (key, csr, pem, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &extfile,
                "-out",
                &pem,
            ],
        );
    }
}

#[test]
fn client_commands_take_the_workers_tls_flags() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let p = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let server = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        p("server.pem"),
        p("server.key"),
        p("ca.pem")
    ))
    .expect("nats-server with TLS");
    let url = format!("tls://127.0.0.1:{}", server.port());
    let tls = [
        "--tls-ca-file".to_string(),
        p("ca.pem"),
        "--tls-cert-file".to_string(),
        p("client.pem"),
        "--tls-key-file".to_string(),
        p("client.key"),
    ];
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let mut worker = Worker::start(&url, &dir.path().join("store"), &tls);
    worker.wait_ready();
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/recordings/anthropic/single_call.sse");
    let mut args = vec!["publish", "--nats-url", &url];
    args.extend(&tls);
    args.extend(["--conversation", "t1", "--message", "m1", "--end"]);
    args.push(sample.to_str().unwrap());
    ok(toolstream(&args, &[]), "publish over mutual TLS");
    let mut args = vec!["query", "--nats-url", &url];
    args.extend(&tls);
    args.extend(["--json", "message", "t1", "m1"]);
    eventually(WAIT, || {
        toolstream(&args, &[]).status.success().then_some(())
    })
    .unwrap_or_else(|| panic!("query over mutual TLS never answered:\n{}", worker.log()));
    // without its client certificate the server refuses the client: one line, at once
    let out = toolstream(
        &[
            "query",
            "--nats-url",
            &url,
            "--tls-ca-file",
            &p("ca.pem"),
            "message",
            "t1",
            "m1",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to NATS at tls://"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(worker.terminate());
}
