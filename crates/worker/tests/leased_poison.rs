//! Issue 14's gap: poison detection did not survive a takeover. A static worker applies a
//! redelivered input alone behind a note in its own store and gives up on it (`poison`) after
//! `max_deliver - 1` stops. A leased partition moves instead: its next owner rebuilds it through
//! a consumer of its own epoch, where every input is a first delivery, in a fresh store with no
//! note. So an input that crashed its owner crashed every next owner too, one takeover after
//! another, forever, and the partition's other streams never finished.
//!
//! Now the note lives in NATS (`crate::ownership::attempts`, bucket `TOOLSTREAM_ATTEMPTS`): a
//! new owner records what the earlier owner's consumer delivered and never acked, applies those
//! inputs alone behind the note, and the input an owner stopped on is dead-lettered as `poison`
//! after `max_deliver - 1` stops, whichever worker counted them.
//!
//! The crash is the test failpoint `TOOLSTREAM_FAILPOINT_ABORT_ON_BODY` (the process aborts
//! while applying an input whose body holds the marker, as a stack overflow would).
//!
//! Run: `cargo nextest run -p toolstream --test leased_poison --no-capture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toolstream_testkit::{openai, NatsServer};

const MARKER: &str = "POISON_LEASED_51c2";
const PARTITIONS: u32 = 2;
/// Good messages per partition.
const GOOD: usize = 4;
/// `--max-deliver`: the poison is given up on after `MAX_DELIVER - 1` stops while applied alone.
const MAX_DELIVER: usize = 3;

fn leased(id: &str) -> Vec<String> {
    [
        "--partitions",
        "2",
        "--assignment",
        "leases",
        "--lease-ttl",
        "3s",
        "--worker-id",
        id,
        "--checkpoint-interval",
        "1h",
        "--ack-wait",
        "30s",
        "--max-deliver",
        "3",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_input_on_a_leased_partition_is_given_up_on_across_takeovers() {
    let server = NatsServer::start().expect("nats-server");
    let nats = client(&server.url()).await;
    let js = jetstream::new(nats.clone());
    let producer = Producer::new(js.clone());
    let dir = tempfile::tempdir().unwrap();
    let env = [("TOOLSTREAM_FAILPOINT_ABORT_ON_BODY", MARKER)];
    let mut workers: Vec<Worker> = ["a", "b"]
        .iter()
        .map(|id| {
            let flags = leased(id);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            Worker::start_with_env(&server.url(), &dir.path().join(id), &flags, &env)
        })
        .collect();
    let logs = |workers: &[Worker]| {
        workers
            .iter()
            .map(|w| tail(&w.log(), 40))
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    // both partitions owned before any input: the poison reaches a live owner
    let deadline = Instant::now() + Duration::from_secs(60);
    while workers
        .iter()
        .map(|w| w.log().matches("partition caught up").count())
        .sum::<usize>()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "both partitions owned\n{}",
            logs(&workers)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // the poison call on partition 0, beside good messages on both partitions, interleaved
    let poison_conv = conversations_of(PARTITIONS, 0, 1, "poison").remove(0);
    let mut poison_stream = openai_chat_stream(&[Call {
        id: "call_p".to_string(),
        name: "exec".to_string(),
        args: json!({"cmd": "make"}),
    }]);
    let mut poison: Value = serde_json::from_slice(&openai::args_chunk(0, "")).unwrap();
    poison["system_fingerprint"] = MARKER.into();
    poison_stream.insert(2, serde_json::to_vec(&poison).unwrap());
    let good: Vec<String> = (0..PARTITIONS)
        .flat_map(|k| conversations_of(PARTITIONS, k, GOOD, &format!("good{k}")))
        .collect();
    let streams: Vec<Vec<Vec<u8>>> = good
        .iter()
        .map(|c| openai_chat_stream(&good_calls(c)))
        .collect();
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    for seq in 0..longest.max(poison_stream.len()) {
        for (conv, chunks) in good.iter().zip(&streams) {
            if let Some(body) = chunks.get(seq) {
                producer
                    .partitioned_chunk(PARTITIONS, conv, "m", "openai-chat", seq as u64, body)
                    .await;
            }
        }
        if let Some(body) = poison_stream.get(seq) {
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
    }

    // supervise: restart any worker the poison stops
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    let deadline = Instant::now() + Duration::from_secs(180);
    // stops on the poison, and any other exit (a loaded machine can cost a worker its
    // connection to the lease bucket: it exits and is restarted too, but is no poison stop)
    let mut stops = 0;
    let mut other_exits = Vec::new();
    loop {
        events.poll().await;
        dlq.poll().await;
        let grouped = by_message(&events.all);
        let completed = good
            .iter()
            .filter(|c| {
                grouped
                    .get(&(c.to_string(), "m".to_string()))
                    .is_some_and(|evs| evs.iter().any(|e| e["type"] == "message.completed"))
            })
            .count();
        let poison_dead = dlq.all.iter().any(|r| {
            r.header("Toolstream-Reason")
                .is_some_and(|why| why.starts_with("poison"))
        });
        let poison_done = grouped
            .get(&(poison_conv.clone(), "m".to_string()))
            .is_some_and(|evs| evs.iter().any(|e| e["type"] == "message.completed"));
        if completed == good.len() && poison_dead && poison_done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{completed}/{} good messages, poison dead-lettered: {poison_dead}, poison message \
             completed: {poison_done}, {stops} stops\n{}",
            good.len(),
            logs(&workers)
        );
        for w in workers.iter_mut() {
            if !w.is_running() {
                let log = w.log();
                if log.contains("aborting while applying a poison input") {
                    stops += 1;
                } else {
                    other_exits.push(tail(&log, 20));
                }
                w.restart();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "poison given up on after {stops} stops, {:.1} s after it was published; other \
         exits: {other_exits:#?}",
        (Instant::now() + Duration::from_secs(180) - deadline).as_secs_f64()
    );
    // once in a batch, then alone by each next owner until given up on
    assert!(
        (1..=MAX_DELIVER).contains(&stops),
        "the poison stopped {stops} workers; at most {MAX_DELIVER} (1 in its batch, then \
         {} alone)\n{}",
        MAX_DELIVER - 1,
        logs(&workers)
    );
    let dead: Vec<_> = dlq
        .all
        .iter()
        .filter(|r| {
            r.header("Toolstream-Reason")
                .is_some_and(|why| why.starts_with("poison"))
        })
        .collect();
    assert_eq!(dead.len(), 1, "one poison dead letter");
    assert!(
        String::from_utf8_lossy(&dead[0].payload).contains(MARKER),
        "the dead letter carries the poison input's body"
    );
    for w in workers.iter_mut() {
        assert!(w.terminate(), "clean stop\n{}", tail(&w.log(), 40));
    }
    events.poll().await;

    assert_each_event_once(&events.all);
    let grouped = by_message(&events.all);
    for conv in &good {
        let evs = &grouped[&(conv.clone(), "m".to_string())];
        check_message(evs, &good_calls(conv)).unwrap_or_else(|e| panic!("{conv}: {e}\n{evs:#?}"));
    }
    let poisoned = &grouped[&(poison_conv.clone(), "m".to_string())];
    assert!(
        !poisoned.iter().any(|e| e["type"] == "tool_call.completed"),
        "the call that lost its poison chunk never completes: {poisoned:#?}"
    );
    assert!(
        poisoned
            .iter()
            .any(|e| e["type"] == "tool_call.abandoned" && e["reason"] == "lost_chunk"),
        "{poisoned:#?}"
    );
}
