//! The scale-out of `docs/contracts.md` run for real: a nats-server with deploy/nats-server.conf's
//! mappings and one worker per partition (the compose/Kubernetes shape as plain processes).
//! Producers and agents use the unpartitioned subjects; every conversation's events arrive
//! complete and once, each worker only ever sees its own conversations, and queries reach
//! the worker that holds the conversation.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;

use common::{openai_chat_stream, Call, Producer, StreamLog};
use ops_support::{query, sample, OpsWorker, WAIT};
use serde_json::json;
use std::path::PathBuf;
use toolstream_testkit::NatsServer;

/// The deploy config minus what the harness sets on the command line.
fn harness_conf() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats-server.conf");
    std::fs::read_to_string(path)
        .expect("deploy/nats-server.conf")
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("port:") || t.starts_with("http_port:") || t.starts_with("store_dir:"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn one_worker_per_partition_behind_the_deploy_mapping() {
    const PARTITIONS: u32 = 4;
    const CONVS: usize = 16;
    let server = NatsServer::start_with_config(&harness_conf()).expect("nats-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let parts = PARTITIONS.to_string();
    let workers: Vec<OpsWorker> = (0..PARTITIONS)
        .map(|k| {
            let k = k.to_string();
            OpsWorker::start_with(
                &server.url(),
                &dir.path().join(format!("data-{k}")),
                &["--partitions", &parts, "--partition", &k],
            )
        })
        .collect();
    for w in &workers {
        w.wait_status("/healthz", 200).await;
    }
    let logs = || {
        workers
            .iter()
            .enumerate()
            .map(|(k, w)| format!("--- worker {k} ---\n{}", common::tail(&w.log(), 30)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    ops_support::wait_provisioned(&js, PARTITIONS as usize).await;

    let producer = Producer::new(js.clone());
    for i in 0..CONVS {
        let calls = vec![Call {
            id: format!("call_{i}"),
            name: "lookup".into(),
            args: json!({"n": i}),
        }];
        for (seq, chunk) in openai_chat_stream(&calls).iter().enumerate() {
            producer
                .chunk(
                    &format!("pc{i}"),
                    &format!("pm{i}"),
                    "openai-chat",
                    seq as u64,
                    chunk,
                )
                .await;
        }
    }
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "every conversation completed",
            |all| common::completed_messages(all) == CONVS,
            logs,
        )
        .await;
    let grouped = common::by_message(&events.all);
    assert_eq!(grouped.len(), CONVS);
    for ((conv, _), evs) in &grouped {
        let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "tool_call.started",
                "tool_call.completed",
                "message.completed"
            ],
            "{conv}"
        );
    }

    // Each conversation was handled by exactly one worker, and the work was spread.
    let mut per_worker = Vec::new();
    for w in &workers {
        let (_, body) = w.get("/metrics").await.expect("metrics");
        per_worker.push(sample(&body, "toolstream_chunks_in_total").unwrap_or(0.0));
    }
    let chunks_per_conv = openai_chat_stream(&[Call {
        id: "x".into(),
        name: "lookup".into(),
        args: json!({"n": 0}),
    }])
    .len() as f64;
    assert_eq!(
        per_worker.iter().sum::<f64>(),
        chunks_per_conv * CONVS as f64,
        "every chunk consumed exactly once across partitions: {per_worker:?}"
    );
    assert!(
        per_worker.iter().filter(|n| **n > 0.0).count() >= 2,
        "16 conversations should not all hash to one partition: {per_worker:?}"
    );
    for n in &per_worker {
        assert_eq!(
            n % chunks_per_conv,
            0.0,
            "a conversation was split: {per_worker:?}"
        );
    }

    // Queries on the unpartitioned subjects reach the owner of each conversation.
    for i in 0..CONVS {
        let subject = format!("toolstream.query.message.pc{i}.pm{i}");
        let stored = query(&client, &subject, "")
            .await
            .unwrap_or_else(|e| panic!("{subject}: {e:?}\n{}", logs()));
        assert_eq!(stored["calls"][0]["tool_call"]["id"], format!("call_{i}"));
        let history = query(&client, &format!("toolstream.query.history.pc{i}"), "")
            .await
            .unwrap_or_else(|e| panic!("history pc{i}: {e:?}"));
        assert!(!history["messages"].as_array().unwrap().is_empty());
    }
}
