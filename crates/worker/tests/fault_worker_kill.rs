//! The worker SIGKILLed at seeded random points while the fault workload flows
//! (`toolstream_testkit::fault`: every provider's recordings, generated streams with parallel
//! calls, two 2,000-chunk streams, a 400 KB argument in small fragments, tool results some of
//! them before their call, six conversations, published over ~25 s) and restarted on the same
//! data directory each time. The checker then compares everything the worker published and
//! answers with a crash-free run of the same inputs through the assembler: every event exactly
//! once by `event_id`, no ghost, same content, same order per message, same query snapshot.
//!
//! Two tests: one with a short ack wait (4 s, the harness default) and one with every timer at
//! the worker's defaults (ack wait 60 s, gap timeout 30 s, idle timeout 300 s). The second is the
//! one a kill can hurt: chunks the killed worker fetched but never acked come back only after
//! the ack wait, while later chunks arrive at once and are parked behind the gap (before
//! f3fb463 this ended long streams `abandoned` / `gap`). Each test runs on both nats-server
//! releases of the fault suite (Debian's 2.9.10 and the pinned current one) at once.
//!
//! The seed is printed; `TOOLSTREAM_FAULT_SEED=<seed>` repeats a run.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, toolstream_bin, wait_provisioned, Producer};
use std::time::{Duration, Instant};
use toolstream_testkit::fault::{
    on_each_server, seed, Checker, KillPlan, Killer, Misbehaviour, Reference, WaitPlan, Workload,
    WorkloadSpec,
};
use toolstream_testkit::harness::{tail, Worker};
use toolstream_testkit::{NatsServer, ServerBin};

/// Publishes the CI workload to `server` while killing the worker `kills` times, then checks
/// everything.
async fn kill_run(server: ServerBin, name: &str, flags: &[&str], kills: usize, ack_wait: Duration) {
    let name = format!("{name}, nats-server {}", server.version);
    let seed = seed();
    eprintln!("{name}: seed {seed} (TOOLSTREAM_FAULT_SEED={seed} repeats this run)");
    let started = Instant::now();
    let server = NatsServer::start_with(&server).expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start_bin(
        toolstream_bin(),
        &server.url(),
        &dir.path().join("store"),
        flags,
        &[],
    );
    let nats = client(&server.url()).await;
    let js = async_nats::jetstream::new(nats.clone());
    wait_provisioned(&js, "toolstream").await;

    let workload = Workload::build(&WorkloadSpec::ci("k", seed)).expect("workload");
    let reference =
        Reference::compute(&workload, &assembler::Config::default()).expect("reference run");
    eprintln!(
        "{name}: {} messages, {} inputs, {} expected events",
        workload.messages.len(),
        workload.input_count(),
        reference.event_count()
    );

    let killer = Killer::start(
        worker,
        KillPlan {
            kills,
            min_gap: Duration::from_millis(200),
            max_gap: Duration::from_millis(2_200),
            early_share: 0.15,
        },
        seed,
    );
    let producer = Producer::new(js.clone());
    let published = workload
        .publish(&producer, &Misbehaviour::default())
        .await
        .expect("publish");
    let publish_time = started.elapsed();
    let kills_while_publishing = killer.kills();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !killer.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut worker, stats) = killer.stop();

    let mut checker = Checker::new(nats.clone(), "toolstream");
    let complete = checker
        .wait(
            &reference,
            &WaitPlan {
                limit: Duration::from_secs(150),
                quiet: ack_wait + Duration::from_secs(10),
                ..WaitPlan::default()
            },
        )
        .await;
    let mut report = checker.check(&reference).await;
    report.complete = complete;
    let terminated = worker.terminate();
    report.add(&checker.late_report().await);
    eprintln!(
        "{name}: seed {seed}, kills {} ({} while publishing, {} before ready), messages {}, \
         inputs {}, events checked {}, lost {}, duplicated {}, ghosts {}, abandoned/invalid \
         that should have completed {}, published in {:.1?}, total {:.1?}\n{report}",
        stats.kills,
        kills_while_publishing,
        stats.early_kills,
        report.messages,
        published.inputs,
        report.events_checked,
        report.lost,
        report.duplicated,
        report.ghosts,
        report.should_have_completed,
        publish_time,
        started.elapsed()
    );
    assert_eq!(stats.kills, kills, "every planned kill happened");
    assert!(
        stats.problems.is_empty(),
        "worker trouble besides the kills: {:#?}",
        stats.problems
    );
    assert!(
        report.ok(),
        "seed {seed}: {report}\n--- worker log (tail) ---\n{}",
        tail(&worker.log(), 40)
    );
    assert!(
        terminated,
        "clean exit after the run:\n{}",
        tail(&worker.log(), 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_15_times_short_ack_wait_loses_duplicates_and_invents_nothing() {
    on_each_server(|server| async move {
        kill_run(
            server,
            "short ack wait",
            &["--ack-wait", "4s"],
            15,
            Duration::from_secs(4),
        )
        .await
    })
    .await;
}

/// Every timer at the worker's default (the flags spell the defaults out, overriding the
/// harness's test-friendly ones): ack wait 60 s > gap timeout 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_8_times_default_timers_loses_duplicates_and_invents_nothing() {
    on_each_server(|server| async move {
        kill_run(
            server,
            "default timers",
            &[
                "--ack-wait",
                "60s",
                "--fetch-expiry",
                "5s",
                "--tick-interval",
                "1s",
                "--relay-interval",
                "1s",
                "--nak-delay",
                "2s",
            ],
            8,
            Duration::from_secs(60),
        )
        .await
    })
    .await;
}
