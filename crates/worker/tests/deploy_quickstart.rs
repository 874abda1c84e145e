//! `scripts/quickstart.sh`, the README's main command, run for real: it starts (or reuses) a
//! nats-server, builds and starts the worker, publishes the recorded sample and prints the
//! completed events, then stops what it started and only that. Never on the shared port 4222:
//! each test points it at its own port.
//!
//! One test lets the script build the binary with cargo as a user in this checkout would, the
//! others hand it the binary under test; it picks a free /metrics port; the tests take turns so
//! two scripts never race for the same port.
//!
//! The build shares the workspace's target dir, so it compiles only what the shipped build
//! needs beyond the test build (24 s instead of ~200 s for a build from nothing, 2026-11-27),
//! with cargo's variables for this test process removed (they would make later builds
//! recompile). It replaces `target/debug/toolstream`, the binary under test (built with the
//! test-only `failpoints` feature), with the shipped build, which refuses the failpoints the
//! crash tests arm: nextest runs that test alone (`.config/nextest.toml`, `threads-required`;
//! the test checks the override names it), `cargo test` runs one test binary at a time, and
//! [`PutBack`] restores the binary under test before the test ends, also when it fails.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;
use toolstream_testkit::wait::eventually;
use toolstream_testkit::{free_port, NatsServer};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quickstart.sh")
}

/// Runs the script; `build` makes it build the binary with cargo as a user in this checkout
/// would (the binary under test put back afterwards), otherwise it is handed the binary
/// under test (`QUICKSTART_BIN`).
fn run_quickstart(port: u16, build: bool) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .env("QUICKSTART_NATS_PORT", port.to_string())
        .env("QUICKSTART_TIMEOUT", "60");
    let _put_back = build.then(PutBack::save);
    if build {
        cmd.env_remove("QUICKSTART_BIN");
        // Cargo's variables for this test process (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...) are
        // not the user's: build scripts that watch them (ring's) would run again and rebuild
        // their crate for every later build in this target dir.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if CARGO_SET_FOR_TESTS.iter().any(|p| name.starts_with(p)) {
                cmd.env_remove(&*name);
            }
        }
    } else {
        cmd.env("QUICKSTART_BIN", env!("CARGO_BIN_EXE_toolstream"));
    }
    cmd.output().expect("run scripts/quickstart.sh")
}

/// The variables cargo sets for a test process, by prefix, none of which a user's shell has
/// (`CARGO`, the path of the cargo that built the tests, stays: cargo sets it again for what
/// it runs).
const CARGO_SET_FOR_TESTS: &[&str] = &[
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CRATE_",
    "CARGO_BIN_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
];

/// A copy of the binary under test, renamed back over it when dropped: the script's `cargo
/// build -p toolstream` replaces it with the shipped build. (A test killed meanwhile leaves
/// the shipped build in place until cargo's next build of the tests links the test build
/// again; the crash tests of that run then fail, saying failpoints are refused.)
struct PutBack {
    bin: PathBuf,
    saved: PathBuf,
}

const SAVED_PREFIX: &str = ".toolstream-under-test.";

impl PutBack {
    fn save() -> PutBack {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_toolstream"));
        // copies left by a killed run
        if let Some(Ok(entries)) = bin.parent().map(std::fs::read_dir) {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(SAVED_PREFIX)
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let saved = bin.with_file_name(format!("{SAVED_PREFIX}{}", std::process::id()));
        std::fs::copy(&bin, &saved).expect("copy the binary under test aside");
        PutBack { bin, saved }
    }
}

impl Drop for PutBack {
    fn drop(&mut self) {
        // (a rename: a test starting meanwhile finds the old file or the new, never half)
        if let Err(e) = std::fs::rename(&self.saved, &self.bin) {
            let why = format!(
                "could not put the binary under test back from {}: {e}",
                self.saved.display()
            );
            // (a panic while the test already panics would abort the test binary)
            match std::thread::panicking() {
                true => eprintln!("{why}"),
                false => panic!("{why}"),
            }
        }
    }
}

/// The event lines it printed, as JSON.
fn events(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("event JSON"))
        .collect()
}

fn assert_sample_events(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "quickstart failed:\n{stderr}");
    let events = events(out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // parallel_calls.sse: three calls started, three completed, then the message.
    assert_eq!(
        types,
        [
            "tool_call.started",
            "tool_call.started",
            "tool_call.started",
            "tool_call.completed",
            "tool_call.completed",
            "tool_call.completed",
            "message.completed"
        ],
        "{stderr}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["calls"].as_array().map(Vec::len), Some(3));
    assert!(stderr.contains("toolstream_events_out_total"), "{stderr}");
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn quickstart_starts_its_own_server_shows_the_events_and_stops_it() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Under nextest this test must run alone (it replaces the binary the others run): the
    // override in .config/nextest.toml names it, and a rename would silently drop that.
    fn here() {}
    let name = std::any::type_name_of_val(&here)
        .trim_end_matches("::here")
        .rsplit("::")
        .next()
        .unwrap();
    let nextest = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.config/nextest.toml"),
    )
    .expect("read .config/nextest.toml");
    assert!(
        nextest.contains(&format!("test(={name})")),
        ".config/nextest.toml must run {name} alone (threads-required)"
    );
    let port = free_port();
    let out = run_quickstart(port, true);
    assert_sample_events(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!(
        "starting nats-server with JetStream on 127.0.0.1:{port}"
    )));
    eventually(Duration::from_secs(5), || !listening(port))
        .unwrap_or_else(|| panic!("the server it started is still running"));
}

#[test]
fn quickstart_reuses_a_running_jetstream_server_and_leaves_it_running() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let server = NatsServer::start().expect("nats-server");
    let out = run_quickstart(server.port(), false);
    assert_sample_events(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "reusing the nats-server with JetStream on 127.0.0.1:{}",
            server.port()
        )),
        "{stderr}"
    );
    assert!(
        listening(server.port()),
        "a reused server must not be stopped"
    );
}

#[test]
fn quickstart_works_around_a_port_taken_by_something_else() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Something that is not a NATS server holds the port.
    let squatter = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = squatter.local_addr().expect("addr").port();
    let out = run_quickstart(port, false);
    assert_sample_events(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is taken by something without JetStream"),
        "{stderr}"
    );
}

#[test]
fn quickstart_fails_loudly_when_the_recording_is_missing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new("bash")
        .arg(script())
        .env("QUICKSTART_NATS_PORT", free_port().to_string())
        .env("QUICKSTART_RECORDING", "tests/recordings/nope.sse")
        .env("QUICKSTART_BIN", env!("CARGO_BIN_EXE_toolstream"))
        .output()
        .expect("run scripts/quickstart.sh");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("quickstart FAILED: recording tests/recordings/nope.sse not found"),
        "{stderr}"
    );
}
