//! Provisioning against a real nats-server: streams and the consumer are created with the
//! settings toolstream needs; existing ones with incompatible settings stop the worker with an
//! error naming the field and are left untouched; with partitions, each worker owns one durable
//! consumer filtered on its partition and together they assemble every stream once; replicas
//! (`--replicas`) are applied, and an existing stream with another count is refused.

mod common;

use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use common::*;
use serde_json::json;
use std::time::Duration;
use toolstream_testkit::NatsServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_server_gets_streams_and_a_bounded_explicit_ack_consumer() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(
        &server.url(),
        &dir.path().join("store"),
        &["--duplicate-window", "30m", "--max-deliver", "7"],
    );
    let js = async_nats::jetstream::new(client(&server.url()).await);
    wait_provisioned(&js, "toolstream").await;

    let mut input = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    let cfg = input.info().await.unwrap().config.clone();
    let mut subjects = cfg.subjects.clone();
    subjects.sort();
    assert_eq!(
        subjects,
        vec!["toolstream.chunks.>", "toolstream.results.>"]
    );
    assert_eq!(cfg.storage, StorageType::File);
    let mut events = js.get_stream("TOOLSTREAM_EVENTS").await.unwrap();
    let ev = events.info().await.unwrap().config.clone();
    assert_eq!(ev.subjects, vec!["toolstream.events.>"]);
    assert_eq!(ev.duplicate_window, Duration::from_secs(1800));
    let mut dlq = js.get_stream("TOOLSTREAM_DLQ").await.unwrap();
    assert_eq!(
        dlq.info().await.unwrap().config.subjects,
        vec!["toolstream.dlq.>"]
    );

    let c = input.consumer_info("toolstream").await.unwrap().config;
    assert_eq!(c.durable_name.as_deref(), Some("toolstream"));
    assert_eq!(c.ack_policy, AckPolicy::Explicit);
    assert_eq!(
        c.max_deliver, -1,
        "the server never drops a message; the worker bounds deliveries (--max-deliver 7)"
    );
    assert_eq!(c.max_ack_pending, 4096);
    assert_eq!(
        c.ack_wait,
        Duration::from_secs(4),
        "the harness passes --ack-wait 4s"
    );
    assert!(c.deliver_subject.is_none(), "a pull consumer");

    // A second start finds everything compatible and runs.
    assert!(worker.terminate());
    worker.restart();
    worker.wait_ready();
    assert!(worker.terminate(), "{}", tail(&worker.log(), 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_existing_stream_stops_the_worker_naming_the_field() {
    let server = NatsServer::start().expect("nats-server");
    let js = async_nats::jetstream::new(client(&server.url()).await);
    js.create_stream(stream::Config {
        name: "TOOLSTREAM_IN".to_string(),
        subjects: vec!["toolstream.chunks.>".into(), "toolstream.results.>".into()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    let exited = worker.wait_exit(WAIT);
    assert_eq!(exited, Some(false), "the worker exits with an error");
    let log = worker.log();
    assert!(log.contains("TOOLSTREAM_IN"), "{log}");
    assert!(log.contains("`retention`"), "{log}");
    assert!(log.contains("`storage`"), "{log}");

    let mut s = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    let cfg = s.info().await.unwrap().config.clone();
    assert_eq!(cfg.retention, RetentionPolicy::WorkQueue, "left untouched");
    assert_eq!(cfg.storage, StorageType::Memory, "left untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_consumer_that_drops_messages_after_max_deliver_is_refused() {
    let server = NatsServer::start().expect("nats-server");
    let js = async_nats::jetstream::new(client(&server.url()).await);
    let input = js
        .create_stream(stream::Config {
            name: "TOOLSTREAM_IN".to_string(),
            subjects: vec!["toolstream.chunks.>".into(), "toolstream.results.>".into()],
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    input
        .create_consumer(pull::Config {
            durable_name: Some("toolstream".into()),
            ack_policy: AckPolicy::Explicit,
            max_deliver: 5,
            ..Default::default()
        })
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    assert_eq!(worker.wait_exit(WAIT), Some(false));
    let log = worker.log();
    assert!(log.contains("consumer toolstream"), "{log}");
    assert!(log.contains("`max_deliver`"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_partitions_two_workers_every_stream_assembled_once() {
    // The deploy mappings (input and queries), with 2 partitions.
    let server = NatsServer::start_with_config(
        r#"mappings = {
  "toolstream.chunks.*.*": "toolstream.p.{{partition(2,1)}}.chunks.{{wildcard(1)}}.{{wildcard(2)}}"
  "toolstream.results.*.*": "toolstream.p.{{partition(2,1)}}.results.{{wildcard(1)}}.{{wildcard(2)}}"
  "toolstream.query.message.*.*": "toolstream.p.{{partition(2,1)}}.query.message.{{wildcard(1)}}.{{wildcard(2)}}"
  "toolstream.query.history.*": "toolstream.p.{{partition(2,1)}}.query.history.{{wildcard(1)}}"
}
"#,
    )
    .expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let mut workers: Vec<Worker> = (0..2)
        .map(|k| {
            Worker::start(
                &server.url(),
                &dir.path().join(format!("w{k}")),
                &["--partitions", "2", "--partition", &k.to_string()],
            )
        })
        .collect();
    for w in &workers {
        w.wait_ready();
    }
    let js = async_nats::jetstream::new(client(&server.url()).await);
    for name in [
        "toolstream-p0-chunks",
        "toolstream-p0-results",
        "toolstream-p1-chunks",
        "toolstream-p1-results",
    ] {
        wait_provisioned(&js, name).await;
    }

    let producer = Producer::new(js.clone());
    const N: usize = 16;
    let calls = |i: usize| {
        vec![Call {
            id: format!("call_p{i}"),
            name: "f".into(),
            args: json!({"i": i}),
        }]
    };
    for i in 0..N {
        producer
            .openai_stream(&format!("conv{i}"), &format!("msg{i}"), &calls(i))
            .await;
        // the result travels through the partition's results consumer
        producer
            .result(
                &format!("conv{i}"),
                &format!("res{i}"),
                0,
                &format!("call_p{i}"),
                "ok",
            )
            .await;
    }
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    let results = |all: &[Read]| {
        all.iter()
            .filter(|e| e.json()["type"] == "tool_result.completed")
            .count()
    };
    events
        .until(
            WAIT,
            "every message.completed and tool_result.completed from two partitions",
            |all| completed_messages(all) >= N && results(all) >= N,
            || {
                workers
                    .iter()
                    .map(|w| w.log())
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
        .await;
    // A query reaches the worker whose partition holds the conversation (and is not
    // swallowed by the input stream).
    let nc = client(&server.url()).await;
    for i in 0..N {
        let reply = tokio::time::timeout(
            WAIT,
            nc.request(
                format!("toolstream.query.message.conv{i}.msg{i}"),
                "".into(),
            ),
        )
        .await
        .expect("query answered in time")
        .expect("query answered");
        let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap_or_else(|e| {
            panic!(
                "conv{i}: not a snapshot ({e}): {:?} {}",
                reply.headers,
                String::from_utf8_lossy(&reply.payload)
            )
        });
        assert_eq!(v["status"], "completed", "conv{i}: {v}");
        assert_eq!(v["calls"][0]["tool_call"]["id"], format!("call_p{i}"));
    }
    for w in workers.iter_mut() {
        assert!(w.terminate(), "{}", tail(&w.log(), 30));
    }
    events.poll().await;
    assert_eq!(events.all.len(), 4 * N, "each stream and result once");
    let grouped = by_message(&events.all);
    for i in 0..N {
        check_message(
            &grouped[&(format!("conv{i}"), format!("msg{i}"))],
            &calls(i),
        )
        .unwrap();
    }

    let mut input = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    let mut subjects = input.info().await.unwrap().config.subjects.clone();
    subjects.sort();
    assert_eq!(
        subjects,
        vec!["toolstream.p.*.chunks.>", "toolstream.p.*.results.>"],
        "the stream holds only input, not the partitioned query subjects"
    );
    let mut delivered = Vec::new();
    for k in 0..2 {
        let info = input
            .consumer_info(format!("toolstream-p{k}-chunks"))
            .await
            .unwrap();
        assert_eq!(
            info.config.filter_subject,
            format!("toolstream.p.{k}.chunks.>")
        );
        delivered.push(info.delivered.consumer_sequence);
    }
    assert!(
        delivered.iter().all(|d| *d > 0),
        "both partitions got work: {delivered:?}"
    );
    let chunks_per_stream = openai_chat_stream(&calls(0)).len() as u64;
    // Redeliveries could add a few, but a chunk seen by both partitions would double the sum.
    let total = N as u64 * chunks_per_stream;
    let sum: u64 = delivered.iter().sum();
    assert!(
        sum >= total && sum < total + total / 2,
        "each chunk goes to one partition: {sum} deliveries for {total} chunks"
    );
    assert!(dir.path().join("w0/partition-0").is_dir());
    assert!(dir.path().join("w1/partition-1").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_above_one_on_a_single_server_stop_the_worker_with_the_servers_reason() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(
        &server.url(),
        &dir.path().join("store"),
        &["--replicas", "3"],
    );
    assert_eq!(worker.wait_exit(WAIT), Some(false), "{}", worker.log());
    let log = worker.log();
    assert!(log.contains("create stream TOOLSTREAM_IN"), "{log}");
    assert!(log.contains("non-clustered"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_r1_stream_on_a_cluster_stops_an_r3_worker_naming_num_replicas() {
    let bin = toolstream_testkit::debian_server().unwrap_or_else(|e| panic!("{e}"));
    let cluster = toolstream_testkit::NatsCluster::start(&bin).expect("cluster");
    let js = async_nats::jetstream::new(client(&cluster.url(0)).await);
    js.create_stream(stream::Config {
        name: "TOOLSTREAM_IN".to_string(),
        subjects: vec!["toolstream.chunks.>".into(), "toolstream.results.>".into()],
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(
        &cluster.urls_joined(),
        &dir.path().join("store"),
        &["--replicas", "3"],
    );
    assert_eq!(worker.wait_exit(WAIT), Some(false), "{}", worker.log());
    let log = worker.log();
    assert!(log.contains("TOOLSTREAM_IN"), "{log}");
    assert!(
        log.contains("`num_replicas` is 1 but toolstream needs 3"),
        "{log}"
    );
    let mut s = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    assert_eq!(
        s.info().await.unwrap().config.num_replicas,
        1,
        "left untouched"
    );
    // refused over the input stream, it creates none of the others
    for other in ["TOOLSTREAM_EVENTS", "TOOLSTREAM_DLQ"] {
        assert!(
            js.get_stream(other).await.is_err(),
            "{other} created by a refused start"
        );
    }
}

/// The static store opens while the client connects (start-up time), before anything is
/// asked of the server: a second worker on a data directory in use is refused, naming the
/// directory, with a server (having created nothing there: here its own consumer) and
/// without one (where provisioning would wait for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_worker_on_a_data_dir_in_use_is_refused_with_or_without_a_server() {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let first = Worker::start(&server.url(), &store, &[]);
    first.wait_ready();

    // (the same directory by another name: the harness keeps each name's log beside it)
    let alias = dir.path().join("alias");
    std::os::unix::fs::symlink(&store, &alias).unwrap();
    let nobody = format!("nats://127.0.0.1:{}", toolstream_testkit::free_port());
    for url in [server.url(), nobody] {
        let mut second = Worker::start(&url, &alias, &["--consumer", "second"]);
        let exit = second.wait_exit(Duration::from_secs(60));
        let log = second.log();
        assert_eq!(exit, Some(false), "refused with a failure ({url}):\n{log}");
        assert!(
            log.contains("each worker needs its own --data-dir"),
            "({url}):\n{log}"
        );
    }
    let js = async_nats::jetstream::new(client(&server.url()).await);
    let input = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    assert!(
        input.consumer_info("second").await.is_err(),
        "a refused start creates no consumer"
    );
    assert!(
        first.is_ready(),
        "the first worker runs on:\n{}",
        first.log()
    );
}
