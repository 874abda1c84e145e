//! Review of 509b632 ("leased partitions: poison detection survives a takeover"): a write of
//! the poison note that timed out but was stored after all leaves the owner's cached revision
//! behind the key's, and every later write of the note is refused as a compare-and-set
//! conflict, which `Attempts::put` reports as `Deposed` although the lease still holds. The
//! owner never re-reads the note, so from then on every input it must apply alone (the rest of
//! its suspects, and any redelivered input) is nak'd forever: the partition keeps its lease and
//! stalls; the inputs' calls never complete and the poison is never reached again.
//!
//! The lease driver handles the same situation for renewals ("a renewal given up on was
//! stored after all; continuing from it", `ownership::driver::renewal_refused`); the note does
//! not.
//!
//! How: one worker, partition 0 gets a poison chunk (failpoint
//! `TOOLSTREAM_FAILPOINT_ABORT_ON_BODY`) followed by ~1000 good chunks, all published before the
//! first owner pulls them, so they are all in its first delivery. Owner 1 stops on the poison in
//! a batch, owner 2 in its group, owner 3 alone (the note open), owner 4 dead-letters the poison
//! and applies the rest of the suspects alone, one note write before and after each. While it
//! does, the nats-server is paused (SIGSTOP) for longer than the note's write timeout (5 s) and
//! shorter than what the lease survives (TTL 15 s): a note write in flight times out in the
//! worker and is stored when the server resumes.
//!
//! Expected: the owner goes on (it still holds its lease; nobody else wrote the note), every
//! good message completes. Before a fix: the good messages after the pause never complete and
//! the log repeats "cannot note the attempt ... belongs to another owner now".
//!
//! Second test (`chunks_acknowledged_by_every_owner_are_not_suspects_after_two_sigkills`): a
//! partition's results consumer that acked nothing reports `delivered.stream_sequence` at the
//! stream's end (the server skips what its filter does not match) and its ack floor where it
//! was, so `[ack_floor + 1, delivered]` of the results filter spans every chunk since; and
//! `Note::is_suspect` matches a sequence against every filter's ranges. Two plain SIGKILLs in a
//! row, with every input acked by both owners, make the third owner apply every chunk alone.
//!
//! Run: `cargo nextest run -p toolstream --test leased_poison_review --no-capture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream;
use common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};
use toolstream_testkit::{openai, NatsServer};

const MARKER: &str = "POISON_REVIEW_7d1e";
const PARTITIONS: u32 = 2;
/// Good conversations on partition 0 (about 9 chunks each).
const GOOD: usize = 130;

fn flags(id: &str) -> Vec<String> {
    [
        "--partitions",
        "2",
        "--assignment",
        "leases",
        "--lease-ttl",
        "15s",
        "--worker-id",
        id,
        "--checkpoint-interval",
        "1h",
        "--ack-wait",
        "120s",
        "--max-deliver",
        "3",
        "--batch-size",
        "1000",
    ]
    .map(String::from)
    .to_vec()
}

fn good_calls(conv: &str) -> Vec<Call> {
    vec![Call {
        id: format!("call_{conv}"),
        name: "lookup".to_string(),
        args: json!({"q": format!("query {conv}")}),
    }]
}

/// The pid of the nats-server listening on `port` (started by this test through the testkit).
fn server_pid(port: u16) -> u32 {
    let port = port.to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_server = args.iter().any(|a| a == "-js")
            && args.windows(2).any(|w| w[0] == "-p" && w[1] == port);
        if is_server {
            return pid;
        }
    }
    panic!("no nats-server on port {port}");
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

fn completed(events: &[Read], good: &[String]) -> usize {
    let grouped = by_message(events);
    good.iter()
        .filter(|c| {
            grouped
                .get(&(c.to_string(), "m".to_string()))
                .is_some_and(|evs| evs.iter().any(|e| e["type"] == "message.completed"))
        })
        .count()
}

/// What [`poison_given_up_on`] leaves running.
struct Setup {
    server: NatsServer,
    js: jetstream::Context,
    dir: tempfile::TempDir,
    w: Worker,
    good: Vec<String>,
}

/// A worker ("a") whose partition 0 got the poison call, then ~1000 good chunks, all in its
/// first delivery; restarted whenever the poison stops it, until an owner (the fourth) has
/// dead-lettered the poison and goes on applying the rest of its suspects alone.
async fn poison_given_up_on() -> Setup {
    let server = NatsServer::start().expect("nats-server");
    let nats = client(&server.url()).await;
    let js = jetstream::new(nats.clone());
    let producer = Producer::new(js.clone());
    let dir = tempfile::tempdir().unwrap();
    let env = [("TOOLSTREAM_FAILPOINT_ABORT_ON_BODY", MARKER)];
    let flags = flags("a");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut w = Worker::start_with_env(&server.url(), &dir.path().join("a"), &flags, &env);

    // provisioned and both partitions owned once; then a clean stop (lease released), so the
    // next owner's first pull finds every input below already in the stream
    let deadline = Instant::now() + Duration::from_secs(60);
    while w.log().matches("partition caught up").count() < 2 {
        assert!(Instant::now() < deadline, "owned\n{}", tail(&w.log(), 40));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(w.terminate(), "clean stop\n{}", tail(&w.log(), 40));

    // the poison call first, then the good ones, all on partition 0
    let poison_conv = conversations_of(PARTITIONS, 0, 1, "poison").remove(0);
    let mut poison_stream = openai_chat_stream(&[Call {
        id: "call_p".to_string(),
        name: "exec".to_string(),
        args: json!({"cmd": "make"}),
    }]);
    let mut poison: Value = serde_json::from_slice(&openai::args_chunk(0, "")).unwrap();
    poison["system_fingerprint"] = MARKER.into();
    poison_stream.insert(2, serde_json::to_vec(&poison).unwrap());
    for (seq, body) in poison_stream.iter().enumerate() {
        producer
            .partitioned_chunk(
                PARTITIONS,
                &poison_conv,
                "m",
                "openai-chat",
                seq as u64,
                body,
            )
            .await;
    }
    let good = conversations_of(PARTITIONS, 0, GOOD, "good");
    let mut published = 0;
    for conv in &good {
        for (seq, body) in openai_chat_stream(&good_calls(conv)).iter().enumerate() {
            producer
                .partitioned_chunk(PARTITIONS, conv, "m", "openai-chat", seq as u64, body)
                .await;
            published += 1;
        }
    }
    eprintln!(
        "published {} poison-stream chunks, then {published} good chunks",
        poison_stream.len()
    );

    // restart the worker whenever the poison stops it, until an owner dead-letters the poison
    w.restart();
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut stops = 0;
    loop {
        if w.current_log().contains("input dead-lettered") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "poison given up on ({stops} stops)\n{}",
            tail(&w.log(), 60)
        );
        if !w.is_running() {
            assert!(
                w.current_log()
                    .contains("aborting while applying a poison input"),
                "{}",
                tail(&w.current_log(), 40)
            );
            stops += 1;
            w.restart();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("poison dead-lettered after {stops} stops");
    Setup {
        server,
        js,
        dir,
        w,
        good,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_write_stored_after_its_timeout_does_not_stall_the_partition() {
    let Setup {
        server,
        js,
        dir: _dir,
        mut w,
        good,
    } = poison_given_up_on().await;
    let pid = server_pid(server.port());
    eprintln!("pausing the nats-server for 7 s");

    // the owner is applying the rest of its suspects alone: pause the server past the note's
    // write timeout (5 s), well within the lease (15 s TTL, renewed every 3 s)
    signal(pid, "-STOP");
    tokio::time::sleep(Duration::from_secs(7)).await;
    signal(pid, "-CONT");

    let log_now = w.current_log();
    let caught = log_now.contains("cannot note the attempt")
        || log_now.contains("cannot close the attempt note");
    eprintln!("a note write failed during the pause: {caught}");

    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        events.poll().await;
        let done = completed(&events.all, &good);
        if done == good.len() {
            break;
        }
        if Instant::now() > deadline {
            let log = w.current_log();
            let refused = log
                .lines()
                .filter(|l| l.contains("belongs to another owner now"))
                .count();
            let lost = log.contains("lease revoked") || log.contains("lease lost");
            let first_failures: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("cannot note the attempt") || l.contains("cannot close the attempt")
                })
                .take(3)
                .collect();
            panic!(
                "{done}/{} good messages completed 90 s after the pause; the owner still runs: \
                 {}, its lease lost: {lost}; note writes refused as 'deposed' meanwhile: \
                 {refused}\nthe first failed note writes:\n{}\n--- log tail ---\n{}",
                good.len(),
                w.is_running(),
                first_failures.join("\n"),
                tail(&log, 10)
            );
        }
        if !w.is_running() {
            // the poison again (the owner reached it after the pause), or any other exit
            w.restart();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // the run proves something only if the pause caught a note write
    assert!(
        caught,
        "inconclusive: no note write was in flight during the pause"
    );
    assert!(w.terminate(), "clean stop\n{}", tail(&w.log(), 40));
}

/// The results consumer of a partition that got no tool result at all is charged with every
/// chunk of the partition. Its `delivered.stream_sequence` follows the stream's end (the server
/// skips the sequences its filter does not match), while its ack floor stays where its last ack
/// left it: so `[ack_floor + 1, delivered]` of the results filter spans the chunks, and
/// `Note::is_suspect` matches a sequence against the ranges of *every* filter. After two
/// non-clean stops in a row (no poison at all: two SIGKILLs) the third owner applies every chunk
/// since the results filter's last ack alone, two note writes and a flush each, although both
/// earlier owners had acknowledged all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_acknowledged_by_every_owner_are_not_suspects_after_two_sigkills() {
    let server = NatsServer::start().expect("nats-server");
    let nats = client(&server.url()).await;
    let js = jetstream::new(nats.clone());
    let producer = Producer::new(js.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut flags = flags("a");
    let ttl = flags.iter().position(|f| f == "--lease-ttl").unwrap() + 1;
    flags[ttl] = "3s".to_string();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut w = Worker::start(&server.url(), &dir.path().join("a"), &flags);
    let owned = |w: &Worker, n: usize| w.current_log().matches("partition caught up").count() >= n;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !owned(&w, 2) {
        assert!(Instant::now() < deadline, "owned\n{}", tail(&w.log(), 40));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let good = conversations_of(PARTITIONS, 0, 30, "good");
    for conv in &good {
        for (seq, body) in openai_chat_stream(&good_calls(conv)).iter().enumerate() {
            producer
                .partitioned_chunk(PARTITIONS, conv, "m", "openai-chat", seq as u64, body)
                .await;
        }
    }
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let all_done = |events: &StreamLog| completed(&events.all, &good) == good.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !all_done(&events) {
        assert!(
            Instant::now() < deadline,
            "completed\n{}",
            tail(&w.log(), 40)
        );
        events.poll().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // everything applied and acknowledged (the acks follow the flush)
    tokio::time::sleep(Duration::from_secs(3)).await;

    // two SIGKILLs in a row, each after the owner rebuilt the partition and acked everything
    for _ in 0..2 {
        w.kill();
        w.restart();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !owned(&w, 2) {
            assert!(Instant::now() < deadline, "owned\n{}", tail(&w.log(), 40));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    let bucket = js.get_stream("KV_TOOLSTREAM_ATTEMPTS").await.unwrap();
    let stored = bucket
        .get_last_raw_message_by_subject("$KV.TOOLSTREAM_ATTEMPTS.p.0")
        .await
        .expect("note p.0");
    let note: Value = serde_json::from_slice(&stored.payload).unwrap();
    let takeover = w
        .current_log()
        .lines()
        .find(|l| l.contains("inputs earlier owners were delivered and never acked"))
        .unwrap_or("")
        .to_string();
    assert!(
        note["suspects"].as_object().is_none_or(|m| m.is_empty()),
        "nothing was ever delivered and left unacked, yet the third owner applies these alone: \
         {}\nnote: {note}\n{takeover}",
        note["suspects"]
    );
    assert!(w.terminate(), "clean stop\n{}", tail(&w.log(), 40));
}
