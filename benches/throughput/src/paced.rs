//! A paced (or burst) end-to-end run: K conversations publish M-chunk openai-chat streams
//! concurrently against a fresh nats-server and the real worker; the latency from each
//! message's call-ending chunk to its `tool_call.completed` / `message.completed`, and the
//! end-to-end rate. `throughput` prints one; `perf` runs several at fractions of the drain rate.
//!
//! Staggered (the default): conversation `c` starts at a random offset within one message's
//! duration, so messages complete at a steady rate, as they do when conversations are
//! independent; the latency counted is that of the messages streamed while every
//! conversation is (each conversation's first and last are left out when it streams three or
//! more). In lockstep (`stagger: false`) every conversation starts within one chunk interval:
//! all K messages end within that interval (at 15 ms per chunk, K = 200: 800 events in 15 ms,
//! ~13,000 completions/s for a moment at an average of ~130/s), which measures how a burst is
//! absorbed rather than latency under a steady load.

use crate::stats::{self, Percentiles};
use crate::{streams, worker};
use anyhow::{bail, Context};
use bytes::Bytes;
use chunk_model::wire;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::future::IntoFuture;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolstream_testkit::{NatsServer, ServerBin};

/// What one paced run publishes.
#[derive(Debug, Clone)]
pub struct PacedArgs {
    /// Concurrent conversations (K).
    pub conversations: usize,
    /// Messages per conversation, streamed one after the other.
    pub messages: usize,
    /// Chunks per message stream, `[DONE]` included.
    pub chunks: usize,
    /// Parallel tool calls per message.
    pub calls: usize,
    /// Pause between two chunks of one stream (zero: as fast as possible).
    pub chunk_interval: Duration,
    /// PubAcks a producer may await at once.
    pub in_flight: usize,
    /// Give up after this long.
    pub timeout: Duration,
    /// Extra arguments for `toolstream run`.
    pub worker_args: Vec<String>,
    /// Conversations start at random offsets within a message's duration (see the module
    /// docs); `false`: within one chunk interval, in lockstep.
    pub stagger: bool,
}

/// What one paced run measured.
#[derive(Debug, Clone)]
pub struct PacedReport {
    /// Chunks per message as generated.
    pub chunks_per_message: usize,
    /// Calls per message.
    pub calls_per_message: usize,
    /// Every chunk published.
    pub total_chunks: usize,
    /// Time to publish them all (PubAck'd).
    pub published_in: Duration,
    /// First publish to the last expected event.
    pub end_to_end: Option<Duration>,
    /// `tool_call.completed` received / expected.
    pub calls_completed: (usize, usize),
    /// `message.completed` received / expected.
    pub messages_completed: (usize, usize),
    /// Events received twice (by `event_id`).
    pub duplicates: usize,
    /// Completed calls whose ids were never published.
    pub unexpected: usize,
    /// Events by type.
    pub by_type: Vec<(String, usize)>,
    /// Call-ending chunk published → `tool_call.completed` received.
    pub call_latency: Option<Percentiles>,
    /// Call-ending chunk published → `message.completed` received.
    pub message_latency: Option<Percentiles>,
    /// Producers that failed, first error.
    pub publish_errors: Vec<String>,
    /// The worker's `/metrics` at the end.
    pub metrics: String,
}

impl PacedReport {
    /// The offered rate in chunks/s (chunks over the time publishing took).
    pub fn offered_rate(&self) -> f64 {
        self.total_chunks as f64 / self.published_in.as_secs_f64().max(1e-9)
    }

    /// Every expected event arrived, once, with no unknown ids and no publish error.
    pub fn check(&self, timeout: Duration) -> anyhow::Result<()> {
        if self.calls_completed.0 < self.calls_completed.1
            || self.messages_completed.0 < self.messages_completed.1
        {
            bail!(
                "timed out after {} s: not every expected event arrived",
                timeout.as_secs()
            );
        }
        if self.unexpected > 0 || self.duplicates > 0 {
            bail!(
                "{} completed call(s) with unknown ids, {} duplicate event(s)",
                self.unexpected,
                self.duplicates
            );
        }
        if !self.publish_errors.is_empty() {
            bail!("{} producer(s) failed", self.publish_errors.len());
        }
        Ok(())
    }
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

/// One run on a fresh `server` binary (default: the testkit's) and a fresh worker `worker_bin`.
pub async fn run(
    args: &PacedArgs,
    worker_bin: &Path,
    server_bin: Option<&ServerBin>,
) -> anyhow::Result<PacedReport> {
    let server = match server_bin {
        Some(bin) => NatsServer::start_with(bin),
        None => NatsServer::start(),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let work = tempfile::tempdir().context("temp dir")?;
    let mut worker =
        worker::Worker::start(worker_bin, &server.url(), work.path(), &args.worker_args)?;
    worker.wait_healthy(Duration::from_secs(30)).await?;

    let client = async_nats::connect(server.url()).await.context("connect")?;
    // The context's PubAck semaphore (5,000 by default) must hold every producer's window, or
    // producers blocked on a permit starve the acks another producer has not polled yet.
    let js = async_nats::jetstream::ContextBuilder::new()
        .max_ack_inflight(args.conversations * args.in_flight.max(1) + 64)
        .build(client.clone());
    let mut events = crate::drain::subscribe_events(&client).await?;

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

    let hard_deadline = Instant::now() + args.timeout;
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
    let conversations = streams.len().max(1);
    let message_duration = args.chunk_interval * chunks_per_message as u32;
    for (c, conv_streams) in streams.iter().enumerate() {
        let js = js.clone();
        let conv_streams = Arc::clone(conv_streams);
        let interval = args.chunk_interval;
        let in_flight = args.in_flight.max(1);
        let phase = match args.stagger {
            true => message_duration.mul_f64(unit_fraction(c)),
            false => interval.mul_f64(c as f64 / conversations as f64),
        };
        producers.push(tokio::spawn(async move {
            produce(js, c, conv_streams, interval, phase, in_flight).await
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
    let published_in = t0.elapsed();
    let arrivals = collector.await.context("collector")?;
    let metrics = worker.metrics().await.unwrap_or_default();
    worker.stop(Duration::from_secs(20)).await;
    drop(server);

    // staggered, the first and last message of a conversation stream while others have not
    // started or have ended: left out of the latency (see the module docs)
    let counted = |msg: &str| {
        let m: Option<usize> = msg.rsplit('m').next().and_then(|m| m.parse().ok());
        !args.stagger || args.messages < 3 || m.is_some_and(|m| m > 0 && m + 1 < args.messages)
    };
    let mut call_lat = Vec::with_capacity(arrivals.completed.len());
    for ((conv, msg, _), at) in &arrivals.completed {
        if let Some(sent) = finish_times.get(&(conv.clone(), msg.clone())) {
            if counted(msg) {
                call_lat.push(at.saturating_duration_since(*sent));
            }
        }
    }
    let mut msg_lat = Vec::with_capacity(arrivals.messages.len());
    for (key, at) in &arrivals.messages {
        if let Some(sent) = finish_times.get(key) {
            if counted(&key.1) {
                msg_lat.push(at.saturating_duration_since(*sent));
            }
        }
    }
    let unexpected = arrivals
        .completed
        .keys()
        .filter(|k| !expected_ids.contains(*k))
        .count();
    let mut by_type: Vec<(String, usize)> = arrivals.by_type.into_iter().collect();
    by_type.sort();
    Ok(PacedReport {
        chunks_per_message,
        calls_per_message,
        total_chunks,
        published_in,
        end_to_end: arrivals.last.map(|l| l.saturating_duration_since(t0)),
        calls_completed: (arrivals.completed.len(), expected_calls),
        messages_completed: (arrivals.messages.len(), total_messages),
        duplicates: arrivals.duplicates,
        unexpected,
        by_type,
        call_latency: stats::percentiles(&mut call_lat),
        message_latency: stats::percentiles(&mut msg_lat),
        publish_errors,
        metrics,
    })
}

/// A fraction in [0, 1) for conversation `c`: spread like uniform random draws (a fixed hash,
/// so a run is repeatable), not in `c`'s order.
fn unit_fraction(c: usize) -> f64 {
    let mut x = (c as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Publishes one conversation's messages in order, each chunk with the producer headers,
/// awaiting PubAcks with at most `in_flight` outstanding. Returns when each message's
/// call-ending chunk was published.
async fn produce(
    js: async_nats::jetstream::Context,
    conv: usize,
    streams: Arc<Vec<streams::Stream>>,
    interval: Duration,
    phase: Duration,
    in_flight: usize,
) -> anyhow::Result<FinishTimes> {
    let conv_id = format!("conv-{conv}");
    let mut finish = FinishTimes::new();
    let mut pending = FuturesUnordered::new();
    // Paced on a schedule (not sleep-after-publish), so the offered rate does not drift down
    // by the time each publish takes; conversation `conv` of K starts `conv/K` of an interval
    // late, so the K streams' chunks are spread over the interval, not sent in K-sized bursts
    // (with every stream in step, all K call-ending chunks arrived at once and the latency
    // measured was that of a K-message burst).
    let mut next_at = Instant::now() + phase;
    tokio::time::sleep_until(next_at).await;
    for (m, stream) in streams.iter().enumerate() {
        let msg_id = format!("c{conv}m{m}");
        let subject =
            wire::Subjects::new("toolstream").input(wire::InputKind::Chunk, &conv_id, &msg_id);
        for (seq, body) in stream.chunks.iter().enumerate() {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(wire::headers::PROVIDER, "openai-chat");
            headers.insert(wire::headers::SEQ, seq.to_string().as_str());
            headers.insert(
                wire::headers::MSG_ID,
                wire::msg_id::msg_id(&conv_id, &msg_id, wire::msg_id::Input::Chunk(seq as u64))
                    .as_str(),
            );
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
                next_at += interval;
                tokio::time::sleep_until(next_at).await;
            }
        }
    }
    while let Some(r) = pending.next().await {
        r.context("PubAck")?;
    }
    Ok(finish)
}
