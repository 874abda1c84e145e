//! `deploy/nats-permissions.conf` on a real server, behind the partition mapping of
//! `deploy/nats-server.conf`, exactly as deployed:
//! - the worker does everything it does (provisions, consumes a backlog, publishes events and
//!   dead letters, large payloads through the object store bucket, answers queries and service
//!   discovery, restarts) with only the worker user's permissions, and nothing it does is
//!   refused; the same file fits an unpartitioned worker on a server without the mapping;
//! - leased workers (leases, a hand-off, checkpoints, a takeover after a SIGKILL) need nothing
//!   beyond the same worker user's grants;
//! - the suite can see a missing grant: without `$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN` the same
//!   run is refused;
//! - a producer allowed one conversation cannot publish another's input (no event appears for
//!   it), forge events or dead letters, call the JetStream API, or read anything but its PubAcks;
//! - nobody but the worker may read the worker's inbox, and a UI reads events and asks queries
//!   but publishes nothing else.
//!
//! ## Layout
//! - `main.rs` — the deployed server, logins that record refusals, the shared steps of the
//!   worker runs.
//! - `worker_grants.rs` — the worker's own runs (partitioned, unpartitioned, a missing grant).
//! - `leased_grants.rs` — leased workers: leases, hand-off, checkpoints, a takeover.
//! - `tenants.rs` — producers and UIs kept to their own conversation and subjects.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod leased_grants;
mod tenants;
mod worker_grants;

use async_nats::jetstream;
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolstream_testkit::NatsServer;

const PARTITIONS: u32 = 4;
const WORKER_PW: &str = "worker-pw-1";
const PRODUCER_PW: &str = "producer-pw-1";
const UI_PW: &str = "ui-pw-1";
/// The read-only browser user's (WebSocket only; `ui_websocket.rs` logs in with it).
const BROWSER_PW: &str = "browser-pw-1";
const ADMIN_PW: &str = "admin-pw-1";
/// The conversation the deploy file's example producer (`producer-acme`) may publish.
const CONV_A: &str = "acme-conv-1";
const WORKER_INBOX: &str = "_INBOX_toolstream";
/// The test server's max_payload (bytes).
const MAX_PAYLOAD: usize = 256 * 1024;

fn deploy_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// deploy/nats-server.conf (minus what the harness sets on the command line) with a
/// `max_payload` of 256 KiB (so that the payload bucket is used without megabytes of input),
/// the passwords as config variables, deploy/nats-permissions.conf with `edit` applied, plus
/// an unrestricted `admin` user the test observes with.
fn server_conf(edit: impl Fn(String) -> String) -> String {
    let server: String = deploy_file("nats-server.conf")
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("port:") || t.starts_with("http_port:") || t.starts_with("store_dir:"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(server.contains("max_payload: 8MB"), "{server}");
    let server = server.replace("max_payload: 8MB", &format!("max_payload: {MAX_PAYLOAD}"));
    format!("{server}\n\n{}", users_conf(edit))
}

/// The passwords as config variables and deploy/nats-permissions.conf with `edit` applied,
/// plus an unrestricted `admin` user the test observes with.
fn users_conf(edit: impl Fn(String) -> String) -> String {
    let permissions = edit(deploy_file("nats-permissions.conf"));
    assert!(permissions.contains("users = ["), "{permissions}");
    let permissions = permissions.replacen(
        "users = [",
        &format!("users = [\n    {{ user: \"admin\", password: \"{ADMIN_PW}\" }}\n"),
        1,
    );
    format!(
        "TOOLSTREAM_WORKER_PASSWORD: \"{WORKER_PW}\"\n\
         TOOLSTREAM_PRODUCER_PASSWORD: \"{PRODUCER_PW}\"\nTOOLSTREAM_UI_PASSWORD: \"{UI_PW}\"\n\
         TOOLSTREAM_BROWSER_PASSWORD: \"{BROWSER_PW}\"\n\n\
         {permissions}\n"
    )
}

/// Server errors (permission violations) one client was told about.
#[derive(Clone, Default)]
struct Refusals(Arc<Mutex<Vec<String>>>);

impl Refusals {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits for a refusal naming `subject`; panics with what was seen if none comes.
    async fn expect(&self, what: &str, subject: &str) {
        let quoted = format!("\"{}\"", subject.to_lowercase());
        let quoted = &quoted;
        eventually_async(Duration::from_secs(10), || async move {
            self.all().iter().any(|e| {
                e.to_lowercase().contains("permissions violation")
                    && e.to_lowercase().contains(quoted)
            })
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{what}: the server did not refuse {subject}; refusals seen: {:#?}",
                self.all()
            )
        });
    }
}

/// A client logged in as `user`, with its own inbox prefix, recording its refusals.
async fn login(
    url: &str,
    user: &str,
    password: &str,
    inbox: &str,
) -> (async_nats::Client, Refusals) {
    let refusals = Refusals::default();
    let seen = refusals.clone();
    let client = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .custom_inbox_prefix(inbox)
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.0.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(url)
        .await
        .expect("connect");
    (client, refusals)
}

/// A server running the deploy configuration (edited by `edit`), the partition of
/// [`CONV_A`], another conversation on the same partition, and an admin client.
struct Deployed {
    server: NatsServer,
    admin: async_nats::Client,
    partition: u32,
    conv_b: String,
    dir: tempfile::TempDir,
}

async fn deploy(edit: impl Fn(String) -> String) -> Deployed {
    let server = NatsServer::start_with_config(&server_conf(edit)).expect("nats-server");
    let (admin, _) = login(&server.url(), "admin", ADMIN_PW, "_INBOX_admin").await;
    let convs: Vec<String> = std::iter::once(CONV_A.to_string())
        .chain((0..40).map(|i| format!("other-conv-{i}")))
        .collect();
    let parts = partitions_of(&admin, &convs).await;
    let conv_b = convs
        .iter()
        .zip(&parts)
        .skip(1)
        .find(|(_, p)| **p == parts[0])
        .map(|(c, _)| c.clone())
        .expect("a second conversation on the same partition");
    Deployed {
        server,
        admin,
        partition: parts[0],
        conv_b,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Deployed {
    /// The worker of [`CONV_A`]'s partition, as `toolstream-worker` with its own inbox.
    fn worker(&self, extra: &[&str]) -> Worker {
        let parts = PARTITIONS.to_string();
        let k = self.partition.to_string();
        let mut args = vec!["--partitions", &parts, "--partition", &k];
        args.extend_from_slice(extra);
        self.worker_user("data", &args)
    }

    /// A worker logged in as `toolstream-worker` with its own inbox, its store in `dir`.
    fn worker_user(&self, dir: &str, args: &[&str]) -> Worker {
        let mut all = vec![
            "--user",
            "toolstream-worker",
            "--inbox-prefix",
            WORKER_INBOX,
        ];
        all.extend_from_slice(args);
        Worker::start_with_env(
            &self.server.url(),
            &self.dir.path().join(dir),
            &all,
            &[("TOOLSTREAM_PASSWORD", WORKER_PW)],
        )
    }

    fn admin_js(&self) -> jetstream::Context {
        jetstream::new(self.admin.clone())
    }

    /// Every permission violation the server logged.
    fn server_violations(&self) -> Vec<String> {
        server_violations(&self.server)
    }
}

fn call(id: &str, secret: &str) -> Call {
    Call {
        id: id.into(),
        name: "lookup".into(),
        args: json!({"q": secret, "n": 1}),
    }
}

/// The worker's log lines that report a refusal by the server.
fn worker_refusals(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.to_lowercase().contains("permissions violation"))
        .collect()
}

/// Every permission violation `server` logged.
fn server_violations(server: &NatsServer) -> Vec<String> {
    server
        .log()
        .lines()
        .filter(|l| l.to_lowercase().contains("violation"))
        .map(str::to_string)
        .collect()
}

/// The tenant's producer (`producer-acme`) and the UI (`toolstream-ui`), each logged in with
/// its own user and inbox, each recording what the server refused it.
async fn tenant_clients(url: &str) -> (Producer, Refusals, async_nats::Client, Refusals) {
    let (producer_client, producer_refusals) =
        login(url, "producer-acme", PRODUCER_PW, "_INBOX_producer-acme").await;
    let (ui, ui_refusals) = login(url, "toolstream-ui", UI_PW, "_INBOX_toolstream-ui").await;
    (
        Producer::new(jetstream::new(producer_client)),
        producer_refusals,
        ui,
        ui_refusals,
    )
}

/// A stream of one call and its result (message `m1` of [`CONV_A`]), and a chunk that must be
/// dead-lettered (message `m2`).
async fn publish_a_stream_its_result_and_a_bad_chunk(producer: &Producer) {
    producer
        .openai_stream(CONV_A, "m1", &[call("call_a1", "x")])
        .await;
    producer
        .result(CONV_A, "m1", 0, "call_a1", "result text")
        .await;
    producer
        .chunk(CONV_A, "m2", "openai-chat", 0, b"this is not json")
        .await;
}

/// A restart finds everything provisioned (the lookup path), then a backlog published while
/// the worker is down is consumed one message per batch, so the watermark finds input
/// outstanding and reads the oldest of it (STREAM.MSG.GET). Stops `w`, publishes the backlog
/// (message `m3`), starts the worker again with `start`, waits in `events` for the backlog's
/// `message.completed` and stops it cleanly. Returns the restarted worker's log.
async fn run_a_backlog_after_a_restart(
    mut w: Worker,
    start: impl FnOnce(&[&str]) -> Worker,
    producer: &Producer,
    events: &mut StreamLog,
) -> String {
    assert!(w.terminate(), "clean exit:\n{}", tail(&w.log(), 30));
    let backlog: Vec<Call> = (0..40).map(|i| call(&format!("call_b{i}"), "y")).collect();
    producer.openai_stream(CONV_A, "m3", &backlog).await;
    let mut w = start(&["--batch-size", "1"]);
    w.wait_ready();
    events
        .until(
            WAIT,
            "the backlog's message.completed",
            |all| {
                all.iter()
                    .any(|r| r.subject.ends_with(".m3") && r.json()["type"] == "message.completed")
            },
            || w.log(),
        )
        .await;
    assert!(w.terminate(), "clean exit:\n{}", tail(&w.log(), 30));
    w.log()
}

/// Nothing anyone did was refused: no refusal in the worker's log, no violation in the
/// server's, none told to the producer or the UI.
fn assert_nothing_refused(
    worker_log: &str,
    violations: &[String],
    producer_refusals: &Refusals,
    ui_refusals: &Refusals,
) {
    assert!(
        worker_refusals(worker_log).is_empty(),
        "{:#?}",
        worker_refusals(worker_log)
    );
    assert!(
        violations.is_empty(),
        "the server refused something:\n{violations:#?}"
    );
    assert!(
        producer_refusals.all().is_empty(),
        "{:?}",
        producer_refusals.all()
    );
    assert!(ui_refusals.all().is_empty(), "{:?}", ui_refusals.all());
}
