//! End-to-end throughput and latency of `toolstream run` on this machine: chunks published to
//! JetStream as fast as one pipelined producer can, events received on a core subscription.
//! Prints figures; asserts only correctness (every message completes), never times.
//!
//! ```text
//! cargo test --release -p toolstream --test e2e_throughput -- --ignored --nocapture
//! ```
//! `E2E_MESSAGES` (default 2000) sets the number of streamed messages of the burst;
//! `E2E_WORKER_ARGS` adds flags to `toolstream run` (e.g. `--batch-size 1024`).

mod common;

use common::*;
use futures::StreamExt;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use toolstream_testkit::NatsServer;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: run explicitly with --ignored --nocapture (see the file docs)"]
async fn end_to_end_throughput_and_latency_under_a_burst() {
    let messages: usize = std::env::var("E2E_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    measure("burst", messages, 1024, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: run explicitly with --ignored --nocapture (see the file docs)"]
async fn end_to_end_latency_one_publish_at_a_time() {
    measure("unloaded", 300, 1, false).await;
}

/// Publishes `messages` streams (chunk-interleaved, or one message after another) with at most
/// `in_flight` unconfirmed publishes, and prints throughput and latency.
async fn measure(label: &str, messages: usize, in_flight: usize, interleave: bool) {
    let server = NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    // the production defaults for the timings that shape latency, unless E2E_WORKER_ARGS
    // sets them; E2E_WORKER_ARGS is appended
    let extra_env = std::env::var("E2E_WORKER_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra_env.split_whitespace().collect();
    let mut args = Vec::new();
    for (flag, value) in [
        ("--fetch-expiry", "5s"),
        ("--relay-interval", "1s"),
        ("--tick-interval", "1s"),
    ] {
        if !extra.contains(&flag) {
            args.extend([flag, value]);
        }
    }
    args.extend(extra.iter().copied());
    println!("e2e {label}: worker flags {args:?}");
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &args);
    let nc = client(&server.url()).await;
    let js = async_nats::jetstream::new(nc.clone());
    wait_provisioned(&js, "toolstream").await;
    worker.wait_ready();

    // Build the streams first: two parallel calls per message, OpenAI Chat format.
    let streams: Vec<Vec<Vec<u8>>> = (0..messages)
        .map(|i| {
            openai_chat_stream(&[
                Call {
                    id: format!("call_{i}_a"),
                    name: "get_weather".into(),
                    args: json!({"city": format!("City {i}"), "unit": "celsius"}),
                },
                Call {
                    id: format!("call_{i}_b"),
                    name: "get_time".into(),
                    args: json!({"tz": "Europe/Paris"}),
                },
            ])
        })
        .collect();
    let total_chunks: usize = streams.iter().map(Vec::len).sum();

    // Events are timestamped on arrival by their own task, while publishing goes on.
    let mut sub = nc.subscribe("toolstream.events.>").await.unwrap();
    nc.flush().await.unwrap();
    let receiver = tokio::spawn(async move {
        let mut completed: HashMap<String, Instant> = HashMap::new();
        let mut events = 0usize;
        let deadline = Instant::now() + Duration::from_secs(600);
        while completed.len() < messages {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let Ok(Some(m)) = tokio::time::timeout(remaining, sub.next()).await else {
                break;
            };
            let at = Instant::now();
            events += 1;
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            if v["type"] == "message.completed" {
                completed.insert(v["message_id"].as_str().unwrap().to_string(), at);
            }
        }
        (completed, events, Instant::now())
    });

    let started = Instant::now();
    let mut last_chunk_sent: HashMap<String, Instant> = HashMap::new();
    let max_len = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut acks = futures::stream::FuturesUnordered::new();
    // interleaved: chunk k of every message, then k+1; sequential: one message after another
    let order: Vec<(usize, usize)> = if interleave {
        (0..max_len)
            .flat_map(|k| (0..messages).map(move |i| (i, k)))
            .collect()
    } else {
        (0..messages)
            .flat_map(|i| (0..max_len).map(move |k| (i, k)))
            .collect()
    };
    for (i, k) in order {
        let s = &streams[i];
        {
            let Some(body) = s.get(k) else { continue };
            let mut h = async_nats::HeaderMap::new();
            h.insert("Toolstream-Provider", "openai-chat");
            h.insert("Toolstream-Seq", k.to_string().as_str());
            let msg = format!("m{i}");
            let publish = async_nats::jetstream::message::PublishMessage::build()
                .headers(h)
                .message_id(format!("{msg}:{k}"))
                .payload(body.clone().into());
            let ack = js
                .send_publish(format!("toolstream.chunks.c{i}.{msg}"), publish)
                .await
                .unwrap();
            if k + 1 == s.len() {
                last_chunk_sent.insert(msg, Instant::now());
            }
            acks.push(std::future::IntoFuture::into_future(ack));
            while acks.len() >= in_flight {
                acks.next().await.unwrap().unwrap();
            }
        }
    }
    while let Some(a) = acks.next().await {
        a.unwrap();
    }
    let published = started.elapsed();

    let (completed, events, finished) = receiver.await.unwrap();
    assert_eq!(
        completed.len(),
        messages,
        "every message completed:\n{}",
        tail(&worker.log(), 30)
    );
    let mut latencies: Vec<Duration> = completed
        .iter()
        .map(|(msg, at)| at.saturating_duration_since(last_chunk_sent[msg]))
        .collect();
    let total = finished - started;
    let metrics = worker.metrics();
    assert!(worker.terminate());
    for line in metrics.lines().filter(|l| {
        l.starts_with("toolstream_batches")
            || l.starts_with("toolstream_batch_flush_seconds_sum")
            || l.starts_with("toolstream_batch_flush_seconds_count")
            || l.starts_with("toolstream_batch_apply_seconds_sum")
            || l.starts_with("toolstream_chunks_in")
            || l.starts_with("toolstream_duplicates")
    }) {
        println!("e2e {label} metric: {line}");
    }

    latencies.sort();
    println!(
        "e2e {label}: {messages} messages, {total_chunks} chunks, {events} events; published in {:.2}s; \
         all completed after {:.2}s",
        published.as_secs_f64(),
        total.as_secs_f64()
    );
    println!(
        "e2e {label} throughput: {:.0} chunks/s publish→event ({:.0} events/s)",
        total_chunks as f64 / total.as_secs_f64(),
        events as f64 / total.as_secs_f64()
    );
    println!(
        "e2e {label} latency last chunk sent → message.completed received: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.90).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}
