//! Fencing of leased partitions against a real nats-server and real leased workers (the gaps an
//! independent review of issue 14 found, each fixed and pinned here):
//!
//! 1. A starting owner deleted every consumer of the partition whose epoch differed from its
//!    own, a NEWER epoch's too: a deposed owner resuming inside `Engine::start_leased` deleted
//!    the live owner's consumers. Now only older epochs' are deleted, and a lease lost during
//!    the restore touches no consumer.
//! 2. A live owner whose consumer was deleted retried a missing consumer forever while its
//!    lease was renewed. Now its consume loop ends and the lease is given back, so the
//!    partition's next owner rebuilds it.
//! 3. A dead letter published straight from the consume loop (`dead_letter_now`: an
//!    unroutable subject or bad headers) went out without `Toolstream-Owner` and without a
//!    fence check.
//!
//! Run: `cargo nextest run -p toolstream --test leased_fencing --no-capture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream::{self, consumer};
use common::{client, tail, Worker};
use futures::TryStreamExt;
use std::time::Duration;
use toolstream_testkit::NatsServer;

const WAIT: Duration = Duration::from_secs(60);

async fn consumer_names(js: &jetstream::Context) -> Vec<String> {
    let Ok(stream) = js.get_stream("TOOLSTREAM_IN").await else {
        return Vec::new();
    };
    stream
        .consumer_names()
        .try_collect()
        .await
        .unwrap_or_default()
}

/// The leased chunk consumers of partition `k`, by epoch.
fn epochs_of(names: &[String], k: u32) -> Vec<u64> {
    let suffix = format!("-p{k}-chunks");
    let mut out: Vec<u64> = names
        .iter()
        .filter_map(|n| {
            n.strip_prefix("toolstream-e")?
                .strip_suffix(&suffix)?
                .parse()
                .ok()
        })
        .collect();
    out.sort();
    out
}

async fn wait_for<F, Fut>(what: &str, mut check: F, logs: impl Fn() -> String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what} did not happen in time\n{}", logs());
}

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
        "2s",
    ]
    .map(String::from)
    .to_vec()
}

/// A conversation of partition `k` (of 2).
fn conv_of(k: u32) -> String {
    toolstream_testkit::harness::conversations_of(2, k, 1, "conv").remove(0)
}

/// One call's openai-chat stream as message `m` of `conv`, on its partition's subject.
async fn publish_a_call(js: &jetstream::Context, conv: &str) {
    let calls = vec![toolstream_testkit::harness::Call {
        id: "call_1".into(),
        name: "f".into(),
        args: serde_json::json!({"x": 1}),
    }];
    let producer = toolstream_testkit::harness::Producer::new(js.clone());
    for (seq, body) in toolstream_testkit::harness::openai_chat_stream(&calls)
        .iter()
        .enumerate()
    {
        producer
            .partitioned_chunk(2, conv, "m", "openai-chat", seq as u64, body)
            .await;
    }
}

/// Waits until message `m` of `conv` has an event in the events stream.
async fn message_published(
    js: &jetstream::Context,
    conv: &str,
    what: &str,
    logs: impl Fn() -> String,
) {
    let events = js.get_stream("TOOLSTREAM_EVENTS").await.unwrap();
    let subject = format!("toolstream.events.{conv}.m");
    wait_for(
        what,
        || async {
            events
                .get_last_raw_message_by_subject(&subject)
                .await
                .is_ok()
        },
        logs,
    )
    .await;
}

/// A nats-server, a client, and leased worker `a` owning both partitions (its consumers exist).
async fn one_leased_worker() -> (
    NatsServer,
    async_nats::Client,
    jetstream::Context,
    tempfile::TempDir,
    Worker,
) {
    let server = NatsServer::start().expect("nats-server");
    let nats = client(&server.url()).await;
    let js = jetstream::new(nats.clone());
    let dir = tempfile::tempdir().unwrap();
    let flags = leased("a");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let a = Worker::start(&server.url(), &dir.path().join("a"), &flags);
    wait_for(
        "worker a owning both partitions",
        || async {
            let names = consumer_names(&js).await;
            !epochs_of(&names, 0).is_empty() && !epochs_of(&names, 1).is_empty()
        },
        || tail(&a.log(), 40),
    )
    .await;
    (server, nats, js, dir, a)
}

#[tokio::test]
async fn a_starting_owner_does_not_delete_the_consumers_of_a_newer_epoch() {
    let (server, _nats, js, dir, a) = one_leased_worker().await;

    // Consumers of an epoch above any the bucket has issued: what a later owner would read
    // through (here made by hand, standing in for the live owner of a partition).
    const NEWER: u64 = 999_999_999;
    let input = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    for k in 0..2u32 {
        input
            .create_consumer(consumer::pull::Config {
                durable_name: Some(format!("toolstream-e{NEWER}-p{k}-chunks")),
                filter_subject: format!("toolstream.p.{k}.chunks.>"),
                ack_policy: consumer::AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .expect("create the newer epoch's consumer");
    }
    let before = consumer_names(&js).await;
    let a_epochs: Vec<Vec<u64>> = (0..2).map(|k| epochs_of(&before, k)).collect();

    // A second worker joins: a hands one partition off, b acquires it and starts its engine.
    let flags = leased("b");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let b = Worker::start(&server.url(), &dir.path().join("b"), &flags);
    let taken = std::cell::Cell::new(None::<u32>);
    wait_for(
        "worker b starting an engine for a partition",
        || async {
            let names = consumer_names(&js).await;
            for k in 0..2u32 {
                let now = epochs_of(&names, k);
                if now
                    .iter()
                    .any(|e| *e != NEWER && !a_epochs[k as usize].contains(e))
                {
                    taken.set(Some(k));
                    return true;
                }
            }
            false
        },
        || format!("{}\n---\n{}", tail(&a.log(), 40), tail(&b.log(), 40)),
    )
    .await;
    let k = taken.get().unwrap();
    let after = consumer_names(&js).await;
    assert!(
        after.contains(&format!("toolstream-e{NEWER}-p{k}-chunks")),
        "worker b, starting partition {k} under an older epoch, deleted the consumer of the \
         newer epoch {NEWER}: a deposed owner resuming in start_leased does this to the live \
         owner. consumers now: {after:?}"
    );
}

#[tokio::test]
async fn a_dead_letter_published_straight_from_the_consume_loop_names_its_owner() {
    let (_server, _nats, js, _dir, a) = one_leased_worker().await;
    // On partition 0's chunk filter, but with no message token: unroutable, dead-lettered by
    // the consume loop itself (`dead_letter_now`).
    js.publish("toolstream.p.0.chunks.only-a-conversation", "{}".into())
        .await
        .unwrap()
        .await
        .expect("stored in the input stream");
    let dlq = js.get_stream("TOOLSTREAM_DLQ").await.unwrap();
    let found = std::cell::RefCell::new(None);
    wait_for(
        "the unroutable input's dead letter",
        || async {
            if let Ok(m) = dlq
                .get_last_raw_message_by_subject("toolstream.dlq.unroutable")
                .await
            {
                *found.borrow_mut() = Some(m);
                return true;
            }
            false
        },
        || tail(&a.log(), 40),
    )
    .await;
    let m = found.into_inner().unwrap();
    let owner = m
        .headers
        .get(sink::guarded::OWNER_HEADER)
        .map(|v| v.as_str().to_string());
    assert!(
        owner.is_some(),
        "a leased worker's dead letter carries no {}: headers {:?}",
        sink::guarded::OWNER_HEADER,
        m.headers
    );
}

/// What the deposed owner's delete does to the live owner: its consumer gone, the live owner
/// (lease held and renewed) never recreates it, never releases the lease, and the partition's
/// input is never assembled. Expected: the partition recovers (events arrive) or the lease is
/// given up so another owner rebuilds it.
#[tokio::test]
async fn a_live_owner_whose_consumer_was_deleted_recovers() {
    let (_server, _nats, js, _dir, a) = one_leased_worker().await;
    let conv = conv_of(0);
    let epoch = epochs_of(&consumer_names(&js).await, 0)[0];
    let input = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    input
        .delete_consumer(&format!("toolstream-e{epoch}-p0-chunks"))
        .await
        .expect("delete (what a deposed owner's delete_other_epochs does)");
    publish_a_call(&js, &conv).await;
    message_published(
        &js,
        &conv,
        "the message's events (the partition recovering)",
        || format!("lease still held by a; worker log:\n{}", tail(&a.log(), 30)),
    )
    .await;
}

/// A checkpoint written by an owner whose own consumer had acked nothing yet (a partition
/// handed to it and straight back) recorded floor 0: the next owner then read the partition's
/// whole input again (found by a new user's run of the README). The floors it was restored
/// from are kept.
#[tokio::test]
async fn a_partition_handed_back_and_forth_without_input_reads_nothing_again() {
    let (server, _nats, js, dir, mut a) = one_leased_worker().await;
    // input on partition 1 (the one a second worker's share takes), assembled by a
    let conv = conv_of(1);
    publish_a_call(&js, &conv).await;
    message_published(&js, &conv, "the message's events", || tail(&a.log(), 30)).await;
    // b joins: partition 1 is handed to it (a's final checkpoint has a real floor)
    let flags = leased("b");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut b = Worker::start(&server.url(), &dir.path().join("b"), &flags);
    wait_for(
        "b rebuilt partition 1 from a's checkpoint",
        || async { !caught_up(&b.log(), 1).is_empty() },
        || tail(&b.log(), 30),
    )
    .await;
    // b leaves at once, having acked nothing: partition 1 goes back to a. a's own first
    // ownership may have logged no caught-up line (handed off before its first look returned),
    // so the take-back is the line of an epoch above b's, not the second line.
    let b_epoch = caught_up(&b.log(), 1)
        .last()
        .map(|(e, _)| *e)
        .expect("b's caught-up line names its epoch");
    assert!(b.terminate(), "b stops cleanly:\n{}", tail(&b.log(), 30));
    let back = |log: &str| caught_up(log, 1).into_iter().find(|(e, _)| *e > b_epoch);
    wait_for(
        "a took partition 1 back",
        || async { back(&a.log()).is_some() },
        || tail(&a.log(), 30),
    )
    .await;
    let (_, last) = back(&a.log()).unwrap();
    assert!(
        last.contains("inputs=0 "),
        "a read partition 1's input again after b's checkpoint: {last}\n{}",
        tail(&a.log(), 40)
    );
    assert!(a.terminate());
}

/// The `partition caught up` lines of partition `k` in `log`, with their epochs.
fn caught_up(log: &str, k: u32) -> Vec<(u64, String)> {
    let of_k = format!("partition={k} ");
    log.lines()
        .filter(|l| l.contains("partition caught up") && l.contains(&of_k))
        .filter_map(|l| {
            let e = l.split("epoch=").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((e, l.to_string()))
        })
        .collect()
}

/// A worker started with another `--partitions` than the running ones used to take leases
/// under its own count and make the others hand partitions off to it, leaving some unowned
/// (found by a new user's run of the README). It now acquires nothing and says why; the
/// running worker keeps serving every partition.
#[tokio::test]
async fn a_worker_with_another_partition_count_takes_nothing_and_says_so() {
    let (server, _nats, js, dir, mut a) = one_leased_worker().await;
    let mut flags = leased("x");
    let at = flags.iter().position(|f| f == "--partitions").unwrap();
    flags[at + 1] = "3".to_string();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut x = Worker::start(&server.url(), &dir.path().join("x"), &flags);
    wait_for(
        "x refuses to acquire",
        || async { x.log().contains("another partition count") },
        || tail(&x.log(), 30),
    )
    .await;
    // a is not asked to hand anything off, and still serves partition 1
    let conv = conv_of(1);
    publish_a_call(&js, &conv).await;
    message_published(&js, &conv, "partition 1's events, from a", || {
        tail(&a.log(), 30)
    })
    .await;
    assert!(!a.log().contains("handing off"), "{}", tail(&a.log(), 30));
    assert!(
        !x.log().contains("lease acquired"),
        "{}",
        tail(&x.log(), 30)
    );
    assert!(x.terminate());
    assert!(a.terminate());
}
