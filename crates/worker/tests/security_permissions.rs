//! `deploy/nats-permissions.conf` on a real server, behind the partition mapping of
//! `deploy/nats-server.conf`, exactly as deployed:
//! - the worker does everything it does (provisions, consumes a backlog, publishes events and
//!   dead letters, large payloads through the object store bucket, answers queries and service
//!   discovery, restarts) with only the worker user's permissions, and nothing it does is
//!   refused; the same file fits an unpartitioned worker on a server without the mapping;
//! - the suite can see a missing grant: without `$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN` the same
//!   run is refused;
//! - a producer allowed one conversation cannot publish another's input (no event appears for
//!   it), forge events or dead letters, call the JetStream API, or read anything but its PubAcks;
//! - nobody but the worker may read the worker's inbox, and a UI reads events and asks queries
//!   but publishes nothing else.

mod common;

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
         TOOLSTREAM_PRODUCER_PASSWORD: \"{PRODUCER_PW}\"\nTOOLSTREAM_UI_PASSWORD: \"{UI_PW}\"\n\n\
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.all().iter().any(|e| {
                e.to_lowercase().contains("permissions violation")
                    && e.to_lowercase().contains(&quoted)
            }) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the server did not refuse {subject}; refusals seen: {:#?}",
                self.all()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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

/// The partition the server's mapping puts each conversation on (asked with core requests to
/// the mapped query subjects, nobody answering).
async fn partitions_of(admin: &async_nats::Client, convs: &[String]) -> Vec<u32> {
    use futures::StreamExt;
    let mut sub = admin
        .subscribe("toolstream.p.*.query.history.*")
        .await
        .unwrap();
    admin.flush().await.unwrap();
    let mut out = Vec::new();
    for conv in convs {
        admin
            .publish(format!("toolstream.query.history.{conv}"), "".into())
            .await
            .unwrap();
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("mapped subject")
            .expect("subscription open");
        let tokens: Vec<&str> = m.subject.split('.').collect();
        assert_eq!(tokens.last(), Some(&conv.as_str()), "{}", m.subject);
        out.push(tokens[2].parse().expect("partition token"));
    }
    out
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
        let mut args = vec![
            "--user",
            "toolstream-worker",
            "--inbox-prefix",
            WORKER_INBOX,
            "--partitions",
            &parts,
            "--partition",
            &k,
        ];
        args.extend_from_slice(extra);
        Worker::start_with_env(
            &self.server.url(),
            &self.dir.path().join("data"),
            &args,
            &[("TOOLSTREAM_PASSWORD", WORKER_PW)],
        )
    }

    fn admin_js(&self) -> jetstream::Context {
        jetstream::new(self.admin.clone())
    }

    /// Every permission violation the server logged.
    fn server_violations(&self) -> Vec<String> {
        self.server
            .log()
            .lines()
            .filter(|l| l.to_lowercase().contains("violation"))
            .map(str::to_string)
            .collect()
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

#[tokio::test]
async fn the_worker_needs_nothing_beyond_its_documented_permissions() {
    let d = deploy(|p| p).await;
    let mut w = d.worker(&[]);
    w.wait_ready();

    let (producer_client, producer_refusals) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let producer = Producer::new(jetstream::new(producer_client));
    let (ui, ui_refusals) = login(
        &d.server.url(),
        "toolstream-ui",
        UI_PW,
        "_INBOX_toolstream-ui",
    )
    .await;
    let mut ui_events = ui
        .subscribe(format!("toolstream.events.{CONV_A}.>"))
        .await
        .unwrap();
    ui.flush().await.unwrap();

    // A stream, its result, and a chunk that must be dead-lettered.
    producer
        .openai_stream(CONV_A, "m1", &[call("call_a1", "x")])
        .await;
    producer
        .result(CONV_A, "m1", 0, "call_a1", "result text")
        .await;
    producer
        .chunk(CONV_A, "m2", "openai-chat", 0, b"this is not json")
        .await;

    // The UI sees the events live, through its own permissions.
    let mut types = Vec::new();
    let deadline = Instant::now() + WAIT;
    use futures::StreamExt;
    while !(types.iter().any(|t: &String| t == "message.completed")
        && types.iter().any(|t| t.starts_with("tool_result.")))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = tokio::time::timeout(left, ui_events.next())
            .await
            .unwrap_or_else(|_| panic!("events: {types:?}\n{}", tail(&w.log(), 40)))
            .expect("subscription open");
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        types.push(v["type"].as_str().unwrap_or_default().to_string());
    }
    assert!(
        types.contains(&"tool_call.completed".to_string()),
        "{types:?}"
    );

    // The dead letter was published.
    let mut dlq = StreamLog::new(&d.admin_js(), "TOOLSTREAM_DLQ");
    let dlq_subject = format!("toolstream.dlq.{CONV_A}.m2");
    dlq.until(
        WAIT,
        "the dead letter",
        |all| all.iter().any(|r| r.subject == dlq_subject),
        || w.log(),
    )
    .await;

    // Queries (mapped to the worker's partition) and service discovery are answered.
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m1"), "".into())
        .await
        .expect("message query answered");
    let snapshot: Value = serde_json::from_slice(&answer.payload).expect("snapshot JSON");
    assert!(snapshot.to_string().contains("call_a1"), "{snapshot}");
    let history = ui
        .request(format!("toolstream.query.history.{CONV_A}"), "{}".into())
        .await
        .expect("history query answered");
    assert!(
        String::from_utf8_lossy(&history.payload).contains("call_a1"),
        "{:?}",
        history
    );
    let ping = d
        .admin
        .request("$SRV.PING.toolstream", "".into())
        .await
        .expect("service discovery answered");
    assert!(String::from_utf8_lossy(&ping.payload).contains("toolstream"));

    // An event larger than max_payload goes through the payload bucket (its object written
    // and checked, the small form published), and so does the message query's answer.
    let big = Call {
        id: "call_big".into(),
        name: "lookup".into(),
        args: json!({"blob": "z".repeat(MAX_PAYLOAD * 3 / 4)}),
    };
    for (seq, body) in openai_chat_stream_cut(&[big], |_| 16 * 1024)
        .iter()
        .enumerate()
    {
        producer
            .chunk(CONV_A, "m4", "openai-chat", seq as u64, body)
            .await;
    }
    loop {
        let m = tokio::time::timeout(WAIT, ui_events.next())
            .await
            .unwrap_or_else(|_| panic!("no offloaded event\n{}", tail(&w.log(), 40)))
            .expect("subscription open");
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        if v["message_id"] == "m4" && !v["payload_ref"].is_null() {
            break;
        }
    }
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m4"), "".into())
        .await
        .expect("large message query answered");
    assert!(
        String::from_utf8_lossy(&answer.payload).contains("payload_ref"),
        "answered by reference: {:?}",
        answer
    );

    // A restart finds everything provisioned (the lookup path), then a backlog published
    // while it is down is consumed one message per batch, so the watermark finds input
    // outstanding and reads the oldest of it (STREAM.MSG.GET).
    assert!(w.terminate(), "clean exit:\n{}", tail(&w.log(), 30));
    let backlog: Vec<Call> = (0..40).map(|i| call(&format!("call_b{i}"), "y")).collect();
    producer.openai_stream(CONV_A, "m3", &backlog).await;
    let mut w = d.worker(&["--batch-size", "1"]);
    w.wait_ready();
    let mut events = StreamLog::new(&d.admin_js(), "TOOLSTREAM_EVENTS");
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

    let log = w.log();
    assert!(
        worker_refusals(&log).is_empty(),
        "{:#?}",
        worker_refusals(&log)
    );
    assert!(
        d.server_violations().is_empty(),
        "the server refused something:\n{:#?}",
        d.server_violations()
    );
    assert!(
        producer_refusals.all().is_empty(),
        "{:?}",
        producer_refusals.all()
    );
    assert!(ui_refusals.all().is_empty(), "{:?}", ui_refusals.all());
}

/// The same permissions fit a plain server without the partition mapping, where one worker
/// reads the whole input through one unfiltered consumer.
#[tokio::test]
async fn an_unpartitioned_worker_needs_nothing_beyond_the_same_permissions() {
    let conf = format!("max_payload: {MAX_PAYLOAD}\n\n{}", users_conf(|p| p));
    let server = NatsServer::start_with_config(&conf).expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let start = |extra: &[&str]| {
        let mut args = vec![
            "--user",
            "toolstream-worker",
            "--inbox-prefix",
            WORKER_INBOX,
        ];
        args.extend_from_slice(extra);
        Worker::start_with_env(
            &server.url(),
            &dir.path().join("data"),
            &args,
            &[("TOOLSTREAM_PASSWORD", WORKER_PW)],
        )
    };
    let mut w = start(&[]);
    w.wait_ready();
    let (admin, _) = login(&server.url(), "admin", ADMIN_PW, "_INBOX_admin").await;
    let js = jetstream::new(admin);
    let (producer_client, producer_refusals) = login(
        &server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let producer = Producer::new(jetstream::new(producer_client));
    let (ui, ui_refusals) = login(
        &server.url(),
        "toolstream-ui",
        UI_PW,
        "_INBOX_toolstream-ui",
    )
    .await;

    producer
        .openai_stream(CONV_A, "m1", &[call("call_a1", "x")])
        .await;
    producer
        .result(CONV_A, "m1", 0, "call_a1", "result text")
        .await;
    producer
        .chunk(CONV_A, "m2", "openai-chat", 0, b"this is not json")
        .await;
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the call's result event",
            |all| {
                all.iter().any(|r| {
                    r.json()["type"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("tool_result.")
                })
            },
            || w.log(),
        )
        .await;
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    dlq.until(WAIT, "the dead letter", |all| !all.is_empty(), || w.log())
        .await;
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m1"), "".into())
        .await
        .expect("message query answered");
    assert!(String::from_utf8_lossy(&answer.payload).contains("call_a1"));

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

    let log = w.log();
    assert!(
        worker_refusals(&log).is_empty(),
        "{:#?}",
        worker_refusals(&log)
    );
    let server_log = server.log();
    let violations: Vec<&str> = server_log
        .lines()
        .filter(|l| l.to_lowercase().contains("violation"))
        .collect();
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        producer_refusals.all().is_empty(),
        "{:?}",
        producer_refusals.all()
    );
    assert!(ui_refusals.all().is_empty(), "{:?}", ui_refusals.all());
}

/// Proves the backlog runs above exercise the watermark's read: the same backlog without
/// `$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN` is refused, and the worker's log says so.
#[tokio::test]
async fn without_the_stream_msg_get_grant_the_backlog_run_is_refused() {
    let grant = "\"$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN\"";
    let d = deploy(|p| {
        assert!(p.contains(grant), "the deploy file grants {grant}");
        p.replace(grant, "")
    })
    .await;
    let (producer_client, _) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let producer = Producer::new(jetstream::new(producer_client));
    let mut w = d.worker(&[]);
    w.wait_ready();
    assert!(w.terminate());
    let backlog: Vec<Call> = (0..40).map(|i| call(&format!("call_b{i}"), "y")).collect();
    producer.openai_stream(CONV_A, "m3", &backlog).await;
    let w = d.worker(&["--batch-size", "1"]);
    let deadline = Instant::now() + WAIT;
    while worker_refusals(&w.log()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            tail(&w.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        worker_refusals(&w.log())
            .iter()
            .any(|l| l.contains("STREAM.MSG.GET.TOOLSTREAM_IN")),
        "{:#?}",
        worker_refusals(&w.log())
    );
}

#[tokio::test]
async fn a_producer_cannot_touch_another_conversation_forge_events_or_call_the_jetstream_api() {
    let d = deploy(|p| p).await;
    let mut w = d.worker(&[]);
    w.wait_ready();
    let b = d.conv_b.clone();
    let k = d.partition;
    let (client, refusals) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let chunk = openai_chat_stream(&[call("call_x", "forged")]);
    let forged_event = json!({"schema_version": 1, "type": "tool_call.completed",
        "conversation_id": b, "message_id": "m1"})
    .to_string();

    // Publishes: another conversation's input (directly and behind the mapping), events and
    // dead letters (even of its own conversation), and JetStream API calls that would delete,
    // purge or read what is not its own.
    // (subject, the subject the server refuses: it checks permissions after the mapping,
    // body)
    let denied_publishes: Vec<(String, String, Vec<u8>)> = vec![
        (
            format!("toolstream.chunks.{b}.m1"),
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            chunk[1].clone(),
        ),
        (
            format!("toolstream.results.{b}.m1"),
            format!("toolstream.p.{k}.results.{b}.m1"),
            br#"{"tool_call_id":"call_x","output":"x"}"#.to_vec(),
        ),
        (
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            chunk[1].clone(),
        ),
        (
            format!("toolstream.events.{b}.m1"),
            format!("toolstream.events.{b}.m1"),
            forged_event.clone().into_bytes(),
        ),
        (
            format!("toolstream.events.{CONV_A}.m1"),
            format!("toolstream.events.{CONV_A}.m1"),
            forged_event.clone().into_bytes(),
        ),
        (
            format!("toolstream.dlq.{CONV_A}.m1"),
            format!("toolstream.dlq.{CONV_A}.m1"),
            b"x".to_vec(),
        ),
        (
            format!("toolstream.query.history.{b}"),
            format!("toolstream.p.{k}.query.history.{b}"),
            b"{}".to_vec(),
        ),
    ];
    let api = [
        "$JS.API.STREAM.DELETE.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.PURGE.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
        "$JS.API.STREAM.PURGE.OBJ_TOOLSTREAM_PAYLOADS".to_string(),
        format!("$JS.API.CONSUMER.DELETE.TOOLSTREAM_IN.toolstream-p{k}-chunks"),
        "$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.MSG.GET.TOOLSTREAM_EVENTS".to_string(),
        "$O.TOOLSTREAM_PAYLOADS.M.forged".to_string(),
    ];
    let denied_publishes = denied_publishes.into_iter().chain(
        api.into_iter()
            .map(|s| (s.clone(), s, br#"{"seq":1}"#.to_vec())),
    );
    for (subject, refused, body) in denied_publishes {
        client.publish(subject.clone(), body.into()).await.unwrap();
        client.flush().await.unwrap();
        refusals
            .expect(&format!("publish to {subject}"), &refused)
            .await;
    }
    // The server logs refusals too (what the worker test checks for its own user).
    assert!(
        d.server_violations()
            .iter()
            .any(|l| l.contains("producer-acme")),
        "refusals are in the server log: {:#?}",
        d.server_violations()
    );
    // Subscriptions: other conversations' events and input, and the worker's inbox.
    for subject in [
        "toolstream.events.>".to_string(),
        format!("toolstream.events.{b}.>"),
        "toolstream.p.*.chunks.>".to_string(),
        format!("{WORKER_INBOX}.>"),
        "_INBOX.>".to_string(),
    ] {
        let _sub = client.subscribe(subject.clone()).await.unwrap();
        client.flush().await.unwrap();
        refusals.expect("subscribe", &subject).await;
    }

    // Its own conversation works, and its events are all that appears.
    let producer = Producer::new(jetstream::new(client.clone()));
    producer
        .openai_stream(CONV_A, "m1", &[call("call_a1", "x")])
        .await;
    let js = d.admin_js();
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the producer's own message.completed",
            |all| all.iter().any(|r| r.json()["type"] == "message.completed"),
            || w.log(),
        )
        .await;
    // Give a refused input time to have been processed, were it stored.
    tokio::time::sleep(Duration::from_secs(2)).await;
    events.poll().await;
    for e in &events.all {
        let v = e.json();
        assert_eq!(v["conversation_id"], CONV_A, "{v}");
        assert!(
            !v.to_string().contains("forged"),
            "a forged event got in: {v}"
        );
    }
    let mut input = StreamLog::new(&js, "TOOLSTREAM_IN");
    input.poll().await;
    assert!(!input.all.is_empty());
    assert!(
        input.all.iter().all(|r| r.subject.contains(CONV_A)),
        "{:?}",
        input.all.iter().map(|r| &r.subject).collect::<Vec<_>>()
    );
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    dlq.poll().await;
    assert!(dlq.all.is_empty(), "{:?}", dlq.all);
    // Nothing was deleted.
    let mut stream = js.get_stream("TOOLSTREAM_IN").await.expect("input stream");
    stream
        .consumer_info(format!("toolstream-p{k}-chunks"))
        .await
        .expect("the worker's consumer");
    for name in ["TOOLSTREAM_EVENTS", "TOOLSTREAM_DLQ"] {
        js.get_stream(name).await.expect(name);
    }

    // A result on its own conversation naming the other conversation's call id does not reach
    // that call: results are matched within their conversation.
    Producer::new(js.clone())
        .openai_stream(&b, "m1", &[call("call_b1", "b")])
        .await;
    let b_completed = |all: &[Read]| {
        all.iter().any(|r| {
            let v = r.json();
            v["conversation_id"] == b.as_str() && v["type"] == "message.completed"
        })
    };
    events
        .until(WAIT, "the other conversation's events", b_completed, || {
            w.log()
        })
        .await;
    producer
        .result(CONV_A, "m1", 0, "call_b1", "stolen-result")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    events.poll().await;
    for v in events.all.iter().map(Read::json) {
        if v["conversation_id"] == b.as_str() {
            assert!(
                !v["type"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("tool_result")
                    && !v.to_string().contains("stolen"),
                "another conversation's result reached {b}: {v}"
            );
        }
    }
    let snapshot = d
        .admin
        .request(format!("toolstream.query.message.{b}.m1"), "".into())
        .await
        .expect("answered");
    let snapshot = String::from_utf8_lossy(&snapshot.payload);
    assert!(snapshot.contains("call_b1"), "{snapshot}");
    assert!(!snapshot.contains("stolen"), "{snapshot}");
    assert!(stream.info().await.unwrap().state.messages as usize >= input.all.len());
    assert!(w.terminate());
}

#[tokio::test]
async fn only_the_worker_reads_its_inbox_and_a_ui_publishes_nothing_but_queries() {
    let d = deploy(|p| p).await;
    let (ui, refusals) = login(
        &d.server.url(),
        "toolstream-ui",
        UI_PW,
        "_INBOX_toolstream-ui",
    )
    .await;
    for subject in [
        format!("{WORKER_INBOX}.>"),
        "_INBOX.>".to_string(),
        "_INBOX_producer-acme.>".to_string(),
        "toolstream.chunks.>".to_string(),
        "toolstream.p.*.chunks.>".to_string(),
        "toolstream.dlq.>".to_string(),
    ] {
        let _sub = ui.subscribe(subject.clone()).await.unwrap();
        ui.flush().await.unwrap();
        refusals.expect("ui subscribe", &subject).await;
    }
    let k = d.partition;
    for (subject, refused) in [
        (
            format!("toolstream.chunks.{CONV_A}.m1"),
            format!("toolstream.p.{k}.chunks.{CONV_A}.m1"),
        ),
        (
            format!("toolstream.events.{CONV_A}.m1"),
            format!("toolstream.events.{CONV_A}.m1"),
        ),
        (
            "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
            "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
        ),
    ] {
        ui.publish(subject.clone(), "{}".into()).await.unwrap();
        ui.flush().await.unwrap();
        refusals.expect("ui publish", &refused).await;
    }
    // What the UI may do is not refused.
    let before = refusals.all().len();
    let _events = ui.subscribe("toolstream.events.>").await.unwrap();
    ui.publish(format!("toolstream.query.history.{CONV_A}"), "{}".into())
        .await
        .unwrap();
    ui.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(refusals.all().len(), before, "{:?}", refusals.all());
    // The producer cannot read the worker's inbox either.
    let (producer, refusals) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let _sub = producer
        .subscribe(format!("{WORKER_INBOX}.>"))
        .await
        .unwrap();
    producer.flush().await.unwrap();
    refusals
        .expect("producer subscribe", &format!("{WORKER_INBOX}.>"))
        .await;
}

/// `toolstream publish` as the tenant's producer user.
fn publish_as_producer(d: &Deployed, conv: &str) -> std::process::Output {
    let recording = toolstream_testkit::recordings_dir().join("openai-chat/parallel_calls.sse");
    let mut cmd = std::process::Command::new(toolstream_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLSTREAM_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(["publish", "--nats-url", &d.server.url()])
        .args([
            "--user",
            "producer-acme",
            "--inbox-prefix",
            "_INBOX_producer-acme",
        ])
        .args(["--conversation", conv, "--message", "m1"])
        .arg(&recording)
        .env("TOOLSTREAM_PASSWORD", PRODUCER_PW)
        .output()
        .expect("run toolstream publish")
}

#[tokio::test]
async fn the_publish_command_works_as_a_tenant_producer_and_is_refused_another_conversation() {
    let d = deploy(|p| p).await;
    let mut w = d.worker(&[]);
    w.wait_ready();
    let own = publish_as_producer(&d, CONV_A);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let js = d.admin_js();
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the published recording's message.completed",
            |all| all.iter().any(|r| r.json()["type"] == "message.completed"),
            || w.log(),
        )
        .await;

    let other = publish_as_producer(&d, &d.conv_b);
    assert!(
        !other.status.success(),
        "publishing another conversation must fail: {}",
        String::from_utf8_lossy(&other.stdout)
    );
    let mut input = StreamLog::new(&js, "TOOLSTREAM_IN");
    input.poll().await;
    assert!(
        input.all.iter().all(|r| r.subject.contains(CONV_A)),
        "{:?}",
        input.all.iter().map(|r| &r.subject).collect::<Vec<_>>()
    );
    assert!(d
        .server_violations()
        .iter()
        .any(|l| l.contains(&format!("chunks.{}.m1", d.conv_b))));
    assert!(w.terminate());
}
