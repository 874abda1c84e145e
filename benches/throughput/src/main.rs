//! # throughput — toolstream end to end, measured
//!
//! Starts its own `nats-server` (toolstream-testkit: free port, temp store), starts the real
//! worker binary (`toolstream run`) on a temp data dir, publishes K conversations × M messages
//! of N-chunk openai-chat tool-call streams concurrently (headers as a producer sends them),
//! subscribes to the events and reports:
//!
//! - chunks/s from the first publish to the last expected event received;
//! - latency percentiles (p50/p90/p99/max) from the publish of the chunk that ends a call (the
//!   `finish_reason` chunk) to that call's `tool_call.completed` event, and to the message's
//!   `message.completed`;
//! - the worker's own batch apply / flush figures from its `/metrics`.
//!
//! Bounded: gives up after `--timeout-secs` and exits non-zero with what arrived.
//!
//! ```sh
//! cargo build --release -p toolstream -p toolstream-throughput
//! target/release/throughput --conversations 200 --chunks 100
//! ```
//!
//! ## Layout
//! - `streams` — the generated openai-chat streams.
//! - `stats` — percentiles and formatting.
//! - `worker` — the worker process: start, wait healthy, scrape `/metrics`, stop.

mod stats;
mod streams;
mod worker;

use anyhow::{bail, Context};
use bytes::Bytes;
use chunk_model::wire;
use clap::Parser;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// End-to-end throughput and latency of toolstream on this machine.
#[derive(Debug, Parser)]
#[command(name = "throughput")]
struct Args {
    /// Concurrent conversations (K).
    #[arg(long, default_value_t = 200)]
    conversations: usize,
    /// Messages per conversation, streamed one after the other.
    #[arg(long, default_value_t = 1)]
    messages: usize,
    /// Chunks per message stream (M), `[DONE]` included.
    #[arg(long, default_value_t = 100)]
    chunks: usize,
    /// Parallel tool calls per message.
    #[arg(long, default_value_t = 2)]
    calls: usize,
    /// Pause between two chunks of one stream (0 = as fast as possible: saturation).
    #[arg(long, default_value_t = 0)]
    chunk_interval_ms: u64,
    /// PubAcks a producer may await at once (per conversation).
    #[arg(long, default_value_t = 32)]
    in_flight: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 180)]
    timeout_secs: u64,
    /// The worker binary (default: `toolstream` next to this binary).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Extra argument for `toolstream run` (repeatable), e.g. `--worker-arg=--batch-size=512`.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
}

/// When the chunk that ends each message's calls was published, keyed by (conv, msg).
type FinishTimes = HashMap<(String, String), Instant>;

/// Events that arrived, with arrival times.
#[derive(Debug, Default)]
struct Arrivals {
    /// (conv, msg, call id) → `tool_call.completed` arrival.
    completed: HashMap<(String, String, String), Instant>,
    /// (conv, msg) → `message.completed` arrival.
    messages: HashMap<(String, String), Instant>,
    /// Every event, by type.
    by_type: HashMap<String, usize>,
    /// Event ids seen more than once.
    duplicates: usize,
    /// Time of the last expected event.
    last: Option<Instant>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let worker_bin = match &args.worker_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("current exe")?
            .with_file_name("toolstream"),
    };
    if !worker_bin.is_file() {
        bail!(
            "worker binary {} not found: build it first (cargo build --release -p toolstream) or pass --worker-bin",
            worker_bin.display()
        );
    }
    let server = toolstream_testkit::NatsServer::start().map_err(|e| anyhow::anyhow!("{e}"))?;
    let work = tempfile::tempdir().context("temp dir")?;
    let mut worker =
        worker::Worker::start(&worker_bin, &server.url(), work.path(), &args.worker_args)?;
    worker.wait_healthy(Duration::from_secs(30)).await?;

    let client = async_nats::connect(server.url()).await.context("connect")?;
    // The context's PubAck semaphore (5,000 by default) must hold every producer's window, or
    // producers blocked on a permit starve the acks another producer has not polled yet.
    let js = async_nats::jetstream::ContextBuilder::new()
        .max_ack_inflight(args.conversations * args.in_flight.max(1) + 64)
        .build(client.clone());
    // Provisioning is done once the input stream exists.
    let deadline = Instant::now() + Duration::from_secs(30);
    while js.get_stream("TOOLSTREAM_IN").await.is_err() {
        if Instant::now() > deadline {
            bail!(
                "the worker did not create TOOLSTREAM_IN within 30s; log:\n{}",
                worker.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut events = client
        .subscribe("toolstream.events.>")
        .await
        .context("subscribe to events")?;
    client.flush().await.context("flush")?;

    let streams: Vec<Arc<Vec<streams::Stream>>> = (0..args.conversations)
        .map(|c| {
            Arc::new(
                (0..args.messages)
                    .map(|m| streams::openai_chat(c, m, args.calls, args.chunks))
                    .collect(),
            )
        })
        .collect();
    let chunks_per_message = streams
        .first()
        .and_then(|s| s.first())
        .map_or(0, |s| s.chunks.len());
    let calls_per_message = args.calls.max(1);
    let total_messages = args.conversations * args.messages;
    let total_chunks = total_messages * chunks_per_message;
    let expected_calls = total_messages * calls_per_message;
    let expected_ids: HashSet<(String, String, String)> = streams
        .iter()
        .enumerate()
        .flat_map(|(c, conv)| {
            conv.iter().enumerate().flat_map(move |(m, s)| {
                s.call_ids
                    .iter()
                    .map(move |id| (format!("conv-{c}"), format!("c{c}m{m}"), id.clone()))
            })
        })
        .collect();

    eprintln!(
        "publishing {} conversations x {} message(s) x {} chunks ({} calls each) = {} chunks",
        args.conversations, args.messages, chunks_per_message, calls_per_message, total_chunks
    );
    let hard_deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let collector = tokio::spawn(async move {
        let mut arrivals = Arrivals::default();
        let mut seen_ids = HashSet::new();
        while arrivals.completed.len() < expected_calls || arrivals.messages.len() < total_messages
        {
            let msg = match tokio::time::timeout_at(hard_deadline, events.next()).await {
                Ok(Some(m)) => m,
                _ => break,
            };
            let now = Instant::now();
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&msg.payload) else {
                continue;
            };
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let ty = s("type");
            *arrivals.by_type.entry(ty.clone()).or_default() += 1;
            if !seen_ids.insert(s("event_id")) {
                arrivals.duplicates += 1;
                continue;
            }
            let key = (s("conversation_id"), s("message_id"));
            match ty.as_str() {
                "tool_call.completed" => {
                    let id = v["tool_call"]["id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    arrivals.completed.insert((key.0, key.1, id), now);
                    arrivals.last = Some(now);
                }
                "message.completed" => {
                    arrivals.messages.insert(key, now);
                    arrivals.last = Some(now);
                }
                _ => {}
            }
        }
        arrivals
    });

    let t0 = Instant::now();
    let mut producers = Vec::with_capacity(streams.len());
    for (c, conv_streams) in streams.iter().enumerate() {
        let js = js.clone();
        let conv_streams = Arc::clone(conv_streams);
        let interval = Duration::from_millis(args.chunk_interval_ms);
        let in_flight = args.in_flight.max(1);
        producers.push(tokio::spawn(async move {
            produce(js, c, conv_streams, interval, in_flight).await
        }));
    }
    let mut finish_times = FinishTimes::new();
    let mut publish_errors = Vec::new();
    for p in producers {
        match tokio::time::timeout_at(hard_deadline, p).await {
            Ok(Ok(Ok(times))) => finish_times.extend(times),
            Ok(Ok(Err(e))) => publish_errors.push(format!("{e:#}")),
            Ok(Err(e)) => publish_errors.push(e.to_string()),
            Err(_) => publish_errors.push("publishing did not finish in time".to_string()),
        }
    }
    let published_at = t0.elapsed();
    if let Some(first) = publish_errors.first() {
        eprintln!(
            "{} producer(s) failed; first: {first}",
            publish_errors.len()
        );
    }
    let arrivals = collector.await.context("collector")?;
    let metrics = worker.metrics().await.unwrap_or_default();
    worker.stop(Duration::from_secs(20)).await;

    // Latencies.
    let mut call_lat = Vec::with_capacity(arrivals.completed.len());
    for ((conv, msg, _), at) in &arrivals.completed {
        if let Some(sent) = finish_times.get(&(conv.clone(), msg.clone())) {
            call_lat.push(at.saturating_duration_since(*sent));
        }
    }
    let mut msg_lat = Vec::with_capacity(arrivals.messages.len());
    for (key, at) in &arrivals.messages {
        if let Some(sent) = finish_times.get(key) {
            msg_lat.push(at.saturating_duration_since(*sent));
        }
    }
    let end_to_end = arrivals.last.map(|l| l.saturating_duration_since(t0));
    let unexpected = arrivals
        .completed
        .keys()
        .filter(|k| !expected_ids.contains(*k))
        .count();

    println!();
    println!("toolstream end-to-end throughput");
    println!(
        "  conversations x messages x chunks : {} x {} x {} ({} calls/message)",
        args.conversations, args.messages, chunks_per_message, calls_per_message
    );
    println!(
        "  chunk interval per stream         : {} ms",
        args.chunk_interval_ms
    );
    println!(
        "  chunks published (PubAck'd)       : {total_chunks} in {:.3} s",
        published_at.as_secs_f64()
    );
    if let Some(e2e) = end_to_end {
        println!(
            "  first publish -> last event       : {:.3} s",
            e2e.as_secs_f64()
        );
        println!(
            "  throughput                        : {:.0} chunks/s ({:.0} calls/s)",
            total_chunks as f64 / e2e.as_secs_f64(),
            arrivals.completed.len() as f64 / e2e.as_secs_f64()
        );
    }
    println!(
        "  tool_call.completed               : {} of {expected_calls}",
        arrivals.completed.len()
    );
    println!(
        "  message.completed                 : {} of {total_messages}",
        arrivals.messages.len()
    );
    println!(
        "  duplicate events                  : {}",
        arrivals.duplicates
    );
    println!("  completed calls with unknown ids  : {unexpected}");
    let mut types: Vec<_> = arrivals.by_type.iter().collect();
    types.sort();
    println!("  events by type                    : {types:?}");
    println!();
    println!("  latency from the call-ending chunk's publish (ms)");
    println!(
        "  {:<22} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "event", "n", "p50", "p90", "p99", "max"
    );
    for (name, samples) in [
        ("tool_call.completed", &mut call_lat),
        ("message.completed", &mut msg_lat),
    ] {
        if let Some(p) = stats::percentiles(samples) {
            println!(
                "  {:<22} {:>8} {:>9} {:>9} {:>9} {:>9}",
                name,
                p.count,
                stats::ms(p.p50),
                stats::ms(p.p90),
                stats::ms(p.p99),
                stats::ms(p.max)
            );
        }
    }
    println!();
    println!("  worker /metrics");
    for line in metrics.lines().filter(|l| {
        l.starts_with("toolstream_chunks_in_total")
            || l.starts_with("toolstream_events_out_total")
            || l.starts_with("toolstream_batches_total")
            || l.starts_with("toolstream_duplicates_total")
            || l.starts_with("toolstream_dead_letters_total")
            || l.starts_with("toolstream_batch_apply_seconds_sum")
            || l.starts_with("toolstream_batch_apply_seconds_count")
            || l.starts_with("toolstream_batch_flush_seconds_sum")
            || l.starts_with("toolstream_batch_flush_seconds_count")
    }) {
        println!("    {line}");
    }
    drop(server);

    if arrivals.completed.len() < expected_calls || arrivals.messages.len() < total_messages {
        bail!(
            "timed out after {} s: not every expected event arrived",
            args.timeout_secs
        );
    }
    if unexpected > 0 || arrivals.duplicates > 0 {
        bail!(
            "{unexpected} completed call(s) with unknown ids, {} duplicate event(s)",
            arrivals.duplicates
        );
    }
    if !publish_errors.is_empty() {
        bail!("{} producer(s) failed", publish_errors.len());
    }
    Ok(())
}

/// Publishes one conversation's messages in order, each chunk with the producer headers,
/// awaiting PubAcks with at most `in_flight` outstanding. Returns when each message's
/// call-ending chunk was published.
async fn produce(
    js: async_nats::jetstream::Context,
    conv: usize,
    streams: Arc<Vec<streams::Stream>>,
    interval: Duration,
    in_flight: usize,
) -> anyhow::Result<FinishTimes> {
    let conv_id = format!("conv-{conv}");
    let mut finish = FinishTimes::new();
    let mut pending = FuturesUnordered::new();
    for (m, stream) in streams.iter().enumerate() {
        let msg_id = format!("c{conv}m{m}");
        let subject =
            wire::Subjects::new("toolstream").input(wire::InputKind::Chunk, &conv_id, &msg_id);
        for (seq, body) in stream.chunks.iter().enumerate() {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(wire::headers::PROVIDER, "openai-chat");
            headers.insert(wire::headers::SEQ, seq.to_string().as_str());
            headers.insert(wire::headers::MSG_ID, format!("{msg_id}:{seq}").as_str());
            if seq == stream.finish_index {
                finish.insert((conv_id.clone(), msg_id.clone()), Instant::now());
            }
            let ack = js
                .publish_with_headers(subject.clone(), headers, Bytes::from(body.clone()))
                .await
                .with_context(|| format!("publish {subject} seq {seq}"))?;
            pending.push(ack.into_future());
            while pending.len() >= in_flight {
                if let Some(r) = pending.next().await {
                    r.with_context(|| format!("PubAck on {subject}"))?;
                }
            }
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
        }
    }
    while let Some(r) = pending.next().await {
        r.context("PubAck")?;
    }
    Ok(finish)
}
