//! `toolstream run` configuration through the real binary: the sample `deploy/toolstream.toml`
//! parses and documents every setting at its default; environment variables override the file
//! and flags override both; `--help` lists every flag the sample names; misspelt keys fail.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/toolstream.toml")
}

/// Runs `toolstream run <args>` with no TOOLSTREAM_* variables but `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolstream"));
    cmd.arg("run").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLSTREAM_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run toolstream")
}

fn printed(args: &[&str], env: &[(&str, &str)]) -> toml::Value {
    let mut all = vec!["--print-config"];
    all.extend_from_slice(args);
    let out = run(&all, env);
    assert!(
        out.status.success(),
        "toolstream run {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("printed config is TOML")
}

#[test]
fn the_sample_config_parses_and_states_every_default() {
    let path = sample();
    let from_sample = printed(&["--config", path.to_str().unwrap()], &[]);
    let defaults = printed(&[], &[]);
    assert_eq!(
        from_sample, defaults,
        "deploy/toolstream.toml shows the defaults"
    );

    // and the file itself sets every key there is (none only implied)
    let text = std::fs::read_to_string(&path).unwrap();
    let raw: toml::Value = toml::from_str(&text).unwrap();
    for (section, value) in defaults.as_table().unwrap() {
        match value.as_table() {
            Some(table) => {
                for key in table.keys() {
                    assert!(
                        raw.get(section).and_then(|s| s.get(key)).is_some(),
                        "deploy/toolstream.toml does not set [{section}] {key}"
                    );
                }
            }
            None => assert!(raw.get(section).is_some(), "sample lacks {section}"),
        }
    }

    // settings without a default are documented (commented out) too
    for key in [
        "token",
        "user",
        "password",
        "nkey_seed_file",
        "creds_file",
        "ca_file",
        "cert_file",
        "key_file",
    ] {
        assert!(
            text.contains(&format!("# {key} = ")),
            "deploy/toolstream.toml does not document `{key}`"
        );
    }
}

#[test]
fn help_lists_every_flag_the_sample_config_names() {
    let text = std::fs::read_to_string(sample()).unwrap();
    let flags: BTreeSet<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == '/')
        .map(|w| w.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    assert!(flags.len() >= 35, "sample names {} flags", flags.len());
    let help = run(&["--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in &flags {
        assert!(help.contains(flag), "`toolstream run --help` lacks {flag}");
    }
    let envs: BTreeSet<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| {
            w.starts_with("TOOLSTREAM_")
                && !w.ends_with("_IN")
                && !w.ends_with("_EVENTS")
                && !w.ends_with("_DLQ")
        })
        .filter(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_') && !w.ends_with('_'))
        .collect();
    assert!(envs.len() >= 35, "sample names {} variables", envs.len());
    for env in &envs {
        assert!(help.contains(env), "`--help` does not name {env}");
    }
}

#[test]
fn environment_overrides_the_file_and_flags_override_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "subject_prefix = \"fromfile\"\n[consumer]\nbatch_size = 7\nmax_deliver = 3\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();

    let c = printed(&["--config", f], &[]);
    assert_eq!(c["consumer"]["batch_size"].as_integer(), Some(7));

    let c = printed(&["--config", f], &[("TOOLSTREAM_BATCH_SIZE", "8")]);
    assert_eq!(
        c["consumer"]["batch_size"].as_integer(),
        Some(8),
        "env beats file"
    );
    assert_eq!(
        c["consumer"]["max_deliver"].as_integer(),
        Some(3),
        "file stays"
    );
    assert_eq!(c["subject_prefix"].as_str(), Some("fromfile"));

    let c = printed(
        &["--config", f, "--batch-size", "9"],
        &[("TOOLSTREAM_BATCH_SIZE", "8")],
    );
    assert_eq!(
        c["consumer"]["batch_size"].as_integer(),
        Some(9),
        "flag beats env"
    );

    // the config file itself can come from the environment
    let c = printed(&[], &[("TOOLSTREAM_CONFIG", f)]);
    assert_eq!(c["subject_prefix"].as_str(), Some("fromfile"));

    let c = printed(&["--ack-wait", "90s", "--duplicate-window", "2h"], &[]);
    assert_eq!(c["consumer"]["ack_wait"].as_str(), Some("90s"));
    assert_eq!(c["streams"]["duplicate_window"].as_str(), Some("2h"));
}

#[test]
fn printed_config_never_shows_secrets() {
    let c = printed(
        &["--user", "u"],
        &[("TOOLSTREAM_PASSWORD", "hunter2-secret")],
    );
    assert_eq!(c["auth"]["user"].as_str(), Some("u"));
    assert_eq!(c["auth"]["password"].as_str(), Some("<redacted>"));
    let out = run(&["--print-config", "--token", "tok-secret-9"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("tok-secret-9"), "{text}");
    assert!(text.contains("<redacted>"));
}

#[test]
fn a_misspelt_key_or_a_bad_value_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[consumer]\nbatch_sise = 3\n").unwrap();
    let out = run(&["--print-config", "--config", file.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("batch_sise"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = run(&["--print-config", "--max-deliver", "0"], &[]);
    assert!(
        !out.status.success(),
        "an unbounded/zero max_deliver is refused"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_deliver"));

    let out = run(&["--print-config", "--ack-wait", "soon"], &[]);
    assert!(!out.status.success());
}

#[test]
fn json_logs_are_one_object_per_line() {
    // no server on this port: the worker logs its retries, then stops on SIGTERM
    let port = toolstream_testkit::free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut w = common::Worker::start(
        &format!("nats://127.0.0.1:{port}"),
        &dir.path().join("s"),
        &["--log-format", "json"],
    );
    common::eventually(common::WAIT, || w.log().lines().count() >= 3)
        .unwrap_or_else(|| panic!("no logs: {}", w.log()));
    assert!(w.terminate(), "stops on SIGTERM before ever connecting");
    let log = w.log();
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    assert!(log.contains("\"message\":\"store open\""), "{log}");
}
