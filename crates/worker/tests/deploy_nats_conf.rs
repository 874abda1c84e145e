//! `deploy/nats-server.conf`: the server accepts it, and a real server started with its
//! mappings partitions toolstream's input by conversation the way design.md says (chunks and
//! results of one conversation on one partition, stable, spread over all partitions), also for
//! JetStream publishes.

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

/// Parses `toolstream.p.<N>.<kind>.<conv>.<msg>`.
fn parse_mapped(subject: &str) -> (u32, String, String, String) {
    let parts: Vec<&str> = subject.split('.').collect();
    assert_eq!(parts.len(), 6, "unexpected mapped subject {subject}");
    assert_eq!(parts[0], "toolstream");
    assert_eq!(parts[1], "p");
    let n: u32 = parts[2].parse().expect("partition number");
    (n, parts[3].into(), parts[4].into(), parts[5].into())
}

#[tokio::test]
async fn partition_mapping_keeps_a_conversation_on_one_partition() {
    let server = NatsServer::start_with_config(&harness_conf()).expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut sub = client.subscribe("toolstream.p.>").await.expect("subscribe");
    // Nothing may arrive on the unpartitioned subjects: the mapping rewrites all of them.
    let mut unmapped = client
        .subscribe("toolstream.chunks.>")
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");

    const CONVS: usize = 40;
    for round in 0..2 {
        for i in 0..CONVS {
            for kind in ["chunks", "results"] {
                let subject = format!("toolstream.{kind}.conv-{i}.msg-{round}");
                client.publish(subject, "x".into()).await.expect("publish");
            }
        }
    }
    client.flush().await.expect("flush");

    let mut partition_of: BTreeMap<String, u32> = BTreeMap::new();
    let mut used = BTreeSet::new();
    for _ in 0..(CONVS * 2 * 2) {
        let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("mapped message within 5s")
            .expect("subscription open");
        let (n, kind, conv, _msg) = parse_mapped(msg.subject.as_str());
        assert!(
            n < PARTITIONS,
            "partition {n} out of range in {}",
            msg.subject
        );
        assert!(kind == "chunks" || kind == "results");
        let first = *partition_of.entry(conv.clone()).or_insert(n);
        assert_eq!(
            first, n,
            "conversation {conv} moved partitions ({} vs {n}) between chunks/results/messages",
            first
        );
        used.insert(n);
    }
    assert_eq!(partition_of.len(), CONVS);
    assert_eq!(
        used.len(),
        PARTITIONS as usize,
        "40 conversations should spread over all {PARTITIONS} partitions: {partition_of:?}"
    );
    let stray = tokio::time::timeout(Duration::from_millis(200), unmapped.next()).await;
    assert!(stray.is_err(), "a message escaped the mapping: {stray:?}");
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
    let (n, kind, conv, msg) = parse_mapped(stored.subject.as_str());
    assert!(n < PARTITIONS);
    assert_eq!(
        (kind.as_str(), conv.as_str(), msg.as_str()),
        ("chunks", "c1", "m1")
    );
    let info = stream.info().await.expect("info");
    assert_eq!(info.state.messages, 1);
}
