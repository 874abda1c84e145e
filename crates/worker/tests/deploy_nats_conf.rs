//! `deploy/nats-server.conf`: the server accepts it, and a real server started with its
//! mappings partitions toolstream's input by conversation as `docs/contracts.md` ("Scale-out")
//! says (chunks and results of one conversation on one partition, stable, spread over all
//! partitions), queries routed to the same partition as the conversation's input, also for
//! JetStream publishes.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use toolstream_testkit::{nats_server_bin, NatsServer};

const PARTITIONS: u32 = 4;

fn deploy_conf_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats-server.conf")
}

/// The deploy config minus what the harness sets on the command line (port, monitoring port,
/// JetStream store dir), so a test server runs exactly the deploy mappings on a free port.
fn harness_conf() -> String {
    let text = std::fs::read_to_string(deploy_conf_path()).expect("read deploy/nats-server.conf");
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("port:") || t.starts_with("http_port:") || t.starts_with("store_dir:"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn nats_server_accepts_the_deploy_config() {
    let bin = nats_server_bin().expect("nats-server must be installed for the tests");
    let out = Command::new(bin)
        .arg("-t")
        .arg("-c")
        .arg(deploy_conf_path())
        .output()
        .expect("run nats-server -t");
    assert!(
        out.status.success(),
        "nats-server rejected deploy/nats-server.conf: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Parses `toolstream.p.<N>.<kind>.<conv>.<msg>` (input) or `toolstream.p.<N>.query.<what>.<conv>[.<msg>]`
/// (queries) into (N, kind, conv).
fn parse_mapped(subject: &str) -> (u32, String, String) {
    let parts: Vec<&str> = subject.split('.').collect();
    assert!(parts.len() >= 6, "unexpected mapped subject {subject}");
    assert_eq!(&parts[..2], ["toolstream", "p"], "{subject}");
    let n: u32 = parts[2].parse().expect("partition number");
    match parts[3] {
        "chunks" | "results" => {
            assert_eq!(parts.len(), 6, "{subject}");
            (n, parts[3].into(), parts[4].into())
        }
        "query" => {
            let want = if parts[4] == "message" { 7 } else { 6 };
            assert_eq!(parts.len(), want, "{subject}");
            (n, format!("query.{}", parts[4]), parts[5].into())
        }
        other => panic!("unexpected kind {other} in {subject}"),
    }
}

#[tokio::test]
async fn partition_mapping_keeps_a_conversation_and_its_queries_on_one_partition() {
    let server = NatsServer::start_with_config(&harness_conf()).expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut sub = client.subscribe("toolstream.p.>").await.expect("subscribe");
    // Nothing may arrive on the unpartitioned subjects: the mapping rewrites all of them.
    let mut unmapped = client.subscribe("toolstream.*.>").await.expect("subscribe");
    client.flush().await.expect("flush");

    const CONVS: usize = 40;
    let mut sent = 0;
    for round in 0..2 {
        for i in 0..CONVS {
            for subject in [
                format!("toolstream.chunks.conv-{i}.msg-{round}"),
                format!("toolstream.results.conv-{i}.msg-{round}"),
                format!("toolstream.query.message.conv-{i}.msg-{round}"),
                format!("toolstream.query.history.conv-{i}"),
            ] {
                client.publish(subject, "x".into()).await.expect("publish");
                sent += 1;
            }
        }
    }
    client.flush().await.expect("flush");

    let mut partition_of: BTreeMap<String, u32> = BTreeMap::new();
    let mut kinds = BTreeSet::new();
    let mut used = BTreeSet::new();
    for _ in 0..sent {
        let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("mapped message within 5s")
            .expect("subscription open");
        let (n, kind, conv) = parse_mapped(msg.subject.as_str());
        assert!(
            n < PARTITIONS,
            "partition {n} out of range in {}",
            msg.subject
        );
        kinds.insert(kind.clone());
        let first = *partition_of.entry(conv.clone()).or_insert(n);
        assert_eq!(
            first, n,
            "conversation {conv} moved partitions ({first} vs {n}) on {}",
            msg.subject
        );
        used.insert(n);
    }
    assert_eq!(partition_of.len(), CONVS);
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["chunks", "query.history", "query.message", "results"]
    );
    assert_eq!(
        used.len(),
        PARTITIONS as usize,
        "40 conversations should spread over all {PARTITIONS} partitions: {partition_of:?}"
    );
    // The catch-all also sees toolstream.p.…; only an unmapped subject would be a failure.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, unmapped.next()).await {
        assert!(
            m.subject.starts_with("toolstream.p."),
            "a message escaped the mapping: {}",
            m.subject
        );
    }
}

#[tokio::test]
async fn a_query_request_through_the_mapping_gets_its_reply() {
    let server = NatsServer::start_with_config(&harness_conf()).expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut responder = client
        .subscribe("toolstream.p.*.query.message.*.*")
        .await
        .expect("subscribe");
    let echo = client.clone();
    tokio::spawn(async move {
        while let Some(m) = responder.next().await {
            if let Some(reply) = m.reply {
                let _ = echo.publish(reply, m.subject.to_string().into()).await;
            }
        }
    });
    client.flush().await.expect("flush");
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        client.request("toolstream.query.message.c7.m1", "".into()),
    )
    .await
    .expect("reply within 5s")
    .expect("request");
    let mapped = String::from_utf8(answer.payload.to_vec()).expect("utf8");
    let (n, kind, conv) = parse_mapped(&mapped);
    assert!(n < PARTITIONS);
    assert_eq!((kind.as_str(), conv.as_str()), ("query.message", "c7"));
}

#[tokio::test]
async fn jetstream_publishes_through_the_mapping_are_stored_and_acked() {
    let server = NatsServer::start_with_config(&harness_conf()).expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "MAPPED_IN".into(),
        subjects: vec![
            "toolstream.p.*.chunks.>".into(),
            "toolstream.p.*.results.>".into(),
        ],
        ..Default::default()
    })
    .await
    .expect("create stream");
    let ack = js
        .publish("toolstream.chunks.c1.m1", "{}".into())
        .await
        .expect("publish")
        .await
        .expect("PubAck from the stream capturing the mapped subject");
    assert_eq!(ack.stream, "MAPPED_IN");
    let mut stream = js.get_stream("MAPPED_IN").await.expect("stream");
    let stored = stream
        .get_raw_message(ack.sequence)
        .await
        .expect("stored message");
    let (n, kind, conv) = parse_mapped(stored.subject.as_str());
    assert!(n < PARTITIONS);
    assert_eq!((kind.as_str(), conv.as_str()), ("chunks", "c1"));
    assert!(
        stored.subject.ends_with(".chunks.c1.m1"),
        "{}",
        stored.subject
    );
    let info = stream.info().await.expect("info");
    assert_eq!(info.state.messages, 1);
}
