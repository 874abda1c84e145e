//! Draining a preloaded backlog: the worker against the two baselines, on the same server
//! binary, stream and durable consumer.
//!
//! Each drain gets a fresh nats-server (free port, temp store). The worker provisions it (its
//! streams and its durable consumer `toolstream`, then it stops), the backlog is published with
//! PubAcks, and only then does the measured contender start:
//! - [`Contender::Worker`] — `toolstream run`: fetch → decode → apply → flush → ack → publish
//!   events. Done when the consumer has nothing pending or unacked **and** every message's
//!   `message.completed` arrived.
//! - [`Contender::BareConsumer`] — the same async-nats pull stream on the same durable
//!   consumer with the worker's batch size and expiry, acking each message, nothing else.
//! - [`Contender::BareRelay`] — the same pull stream, each batch re-published to another stream
//!   with the input's `Nats-Msg-Id`, PubAcks awaited, then acked: the least a
//!   transform-and-forward service must do.
//!
//! CPU is the worker process's (from `/proc`), or this process's for the baselines (it runs
//! nothing else while they drain).

use crate::procfs;
use crate::worker::Worker;
use crate::workloads::Backlog;
use anyhow::{bail, Context};
use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures::{FutureExt, StreamExt};
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;
use toolstream_testkit::{NatsServer, ServerBin};

/// What drains the backlog.
#[derive(Debug, Clone)]
pub enum Contender {
    /// The worker binary at this path, under this label.
    Worker {
        /// Shown in the report (`worker`, or `worker:<name>` when comparing builds).
        label: String,
        /// `toolstream`.
        bin: PathBuf,
    },
    /// Fetch + ack.
    BareConsumer,
    /// Fetch + republish with `Nats-Msg-Id` + await PubAcks + ack.
    BareRelay,
}

impl Contender {
    /// Its name in the report.
    pub fn label(&self) -> &str {
        match self {
            Contender::Worker { label, .. } => label,
            Contender::BareConsumer => "bare consumer",
            Contender::BareRelay => "bare relay",
        }
    }
}

/// One drain, measured.
#[derive(Debug, Clone)]
pub struct Drained {
    /// Inputs drained.
    pub inputs: usize,
    /// Start of the contender to done.
    pub elapsed: Duration,
    /// CPU time used while draining (start to done).
    pub cpu: Option<Duration>,
    /// CPU time nats-server used meanwhile (it shares the machine's cores with the contender).
    pub server_cpu: Option<Duration>,
    /// Peak resident memory of the worker process.
    pub peak_rss: Option<u64>,
    /// Worker only: fetched batches and inputs in them (from `/metrics`).
    pub batches: Option<(u64, u64)>,
    /// Worker only: seconds in batch apply and in batch flush (from `/metrics`).
    pub apply_flush_secs: Option<(f64, f64)>,
}

impl Drained {
    /// Inputs per second.
    pub fn rate(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU seconds per million inputs.
    pub fn cpu_per_million(&self) -> Option<f64> {
        self.cpu
            .map(|c| c.as_secs_f64() * 1e6 / self.inputs.max(1) as f64)
    }

    /// nats-server's CPU seconds per million inputs.
    pub fn server_cpu_per_million(&self) -> Option<f64> {
        self.server_cpu
            .map(|c| c.as_secs_f64() * 1e6 / self.inputs.max(1) as f64)
    }
}

/// The consumer's settings as the worker uses them (its defaults).
const BATCH: usize = 256;
const EXPIRES: Duration = Duration::from_secs(5);
const CONSUMER: &str = "toolstream";
const INPUT_STREAM: &str = "TOOLSTREAM_IN";

/// Drains `backlog` once with `contender` on a fresh `server`; `provisioner` is the worker
/// binary that creates the streams and the consumer first. A worker has `stop_grace` to exit
/// after SIGTERM before it is killed.
pub async fn drain(
    contender: &Contender,
    backlog: &Backlog,
    server: &ServerBin,
    provisioner: &Path,
    worker_args: &[String],
    stop_grace: Duration,
) -> anyhow::Result<Drained> {
    let (server, dir) = provisioned(server, provisioner, worker_args, stop_grace).await?;
    let client = async_nats::connect(server.url()).await.context("connect")?;
    preload(&client, backlog).await?;
    let limit = Duration::from_secs(60 + backlog.inputs.len() as u64 / 1_000);
    let server_cpu = || server.pid().and_then(procfs::cpu_time);
    let server_before = server_cpu();
    let drained = match contender {
        Contender::Worker { bin, .. } => {
            drain_worker(
                &client,
                backlog,
                bin,
                &server.url(),
                dir.path(),
                worker_args,
                (limit, stop_grace),
            )
            .await
        }
        Contender::BareConsumer => drain_bare(&client, backlog, None, limit).await,
        Contender::BareRelay => {
            let js = jetstream::new(client.clone());
            js.create_stream(jetstream::stream::Config {
                name: "RELAY_OUT".to_string(),
                subjects: vec!["relay.>".to_string()],
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .context("create RELAY_OUT")?;
            drain_bare(&client, backlog, Some(js), limit).await
        }
    };
    // (to the end of the drain, the contender's shutdown included: a few ms)
    drained.map(|d| Drained {
        server_cpu: server_cpu()
            .zip(server_before)
            .map(|(b, a)| b.saturating_sub(a)),
        ..d
    })
}

/// A fresh nats-server (free port, temp store) provisioned by the worker binary
/// `provisioner` (its streams and its durable consumer `toolstream`; then it stops), with the
/// directory that worker kept its store in.
pub async fn provisioned(
    server: &ServerBin,
    provisioner: &Path,
    worker_args: &[String],
    stop_grace: Duration,
) -> anyhow::Result<(NatsServer, tempfile::TempDir)> {
    let server = NatsServer::start_with(server).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = tempfile::tempdir().context("temp dir")?;
    let mut w = Worker::start(provisioner, &server.url(), dir.path(), worker_args)?;
    w.wait_healthy(Duration::from_secs(30)).await?;
    w.stop(stop_grace).await;
    Ok((server, dir))
}

/// The pull stream the baselines read: the worker's durable consumer, with the worker's
/// default batch size, expiry and heartbeat (a quarter of the expiry).
pub async fn bare_stream(
    js: &jetstream::Context,
) -> anyhow::Result<(jetstream::consumer::PullConsumer, pull::Stream)> {
    let consumer = durable_consumer(js).await?;
    let messages = consumer
        .stream()
        .max_messages_per_batch(BATCH)
        .expires(EXPIRES)
        .heartbeat(EXPIRES / 4)
        .messages()
        .await
        .context("pull stream")?;
    Ok((consumer, messages))
}

/// A subscription to every event the workers publish (`toolstream.events.>`), in place at the
/// server (flushed) when this returns, so that nothing published afterwards is missed.
pub async fn subscribe_events(
    client: &async_nats::Client,
) -> anyhow::Result<async_nats::Subscriber> {
    let events = client
        .subscribe("toolstream.events.>")
        .await
        .context("subscribe to events")?;
    client.flush().await.context("flush")?;
    Ok(events)
}

/// Publishes every input, at most 4,096 PubAcks outstanding, and checks the stream holds them
/// all (none dropped as a duplicate).
pub async fn preload(client: &async_nats::Client, backlog: &Backlog) -> anyhow::Result<()> {
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(8_192)
        .build(client.clone());
    let mut pending = futures::stream::FuturesUnordered::new();
    for input in &backlog.inputs {
        let ack = js
            .publish_with_headers(
                input.subject.clone(),
                input.headers.clone(),
                input.body.clone(),
            )
            .await
            .with_context(|| format!("publish {}", input.subject))?;
        pending.push(ack.into_future());
        while pending.len() >= 4_096 {
            if let Some(r) = pending.next().await {
                r.context("PubAck")?;
            }
        }
    }
    while let Some(r) = pending.next().await {
        r.context("PubAck")?;
    }
    let mut stream = js.get_stream(INPUT_STREAM).await.context("input stream")?;
    let held = stream
        .info()
        .await
        .context("input stream info")?
        .state
        .messages;
    if held != backlog.inputs.len() as u64 {
        bail!(
            "{INPUT_STREAM} holds {held} messages after publishing {}: ids collided",
            backlog.inputs.len()
        );
    }
    Ok(())
}

/// The worker's durable consumer on the input stream, looked up.
async fn durable_consumer(
    js: &jetstream::Context,
) -> anyhow::Result<jetstream::consumer::PullConsumer> {
    let stream = js.get_stream(INPUT_STREAM).await.context("input stream")?;
    stream
        .get_consumer(CONSUMER)
        .await
        .map_err(|e| anyhow::anyhow!("consumer {CONSUMER}: {e}"))
}

/// Whether the durable consumer has delivered and seen acked every message.
async fn consumer_done(js: &jetstream::Context) -> anyhow::Result<bool> {
    let mut consumer = durable_consumer(js).await?;
    let info = consumer.info().await.context("consumer info")?;
    Ok(info.num_pending == 0 && info.num_ack_pending == 0)
}

async fn drain_worker(
    client: &async_nats::Client,
    backlog: &Backlog,
    bin: &Path,
    url: &str,
    dir: &Path,
    worker_args: &[String],
    (limit, stop_grace): (Duration, Duration),
) -> anyhow::Result<Drained> {
    let js = jetstream::new(client.clone());
    let mut events = subscribe_events(client).await?;
    let t0 = Instant::now();
    let mut worker = Worker::start(bin, url, dir, worker_args)?;
    let pid = worker.pid().context("worker pid")?;
    let deadline = t0 + limit;
    let mut completed = 0usize;
    let mut last_completed = t0;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    let mut drained_at = None;
    loop {
        tokio::select! {
            msg = events.next() => {
                let Some(msg) = msg else { bail!("event subscription ended") };
                if msg.payload.windows(19).any(|w| w == b"\"message.completed\"") {
                    completed += 1;
                    last_completed = Instant::now();
                }
            }
            _ = poll.tick() => {
                if drained_at.is_none() && consumer_done(&js).await? {
                    drained_at = Some(Instant::now());
                }
                if Instant::now() > deadline {
                    bail!(
                        "not drained within {limit:?}: {completed} of {} messages completed; log:\n{}",
                        backlog.messages,
                        worker.log_tail()
                    );
                }
            }
        }
        if let Some(at) = drained_at {
            if completed >= backlog.messages {
                let end = at.max(last_completed);
                let cpu = procfs::cpu_time(pid);
                let peak_rss = procfs::peak_rss(pid);
                let metrics = worker.metrics().await.unwrap_or_default();
                keep_metrics(&metrics);
                worker.stop(stop_grace).await;
                return Ok(Drained {
                    inputs: backlog.inputs.len(),
                    elapsed: end - t0,
                    cpu,
                    server_cpu: None,
                    peak_rss,
                    batches: batches(&metrics),
                    apply_flush_secs: metric(&metrics, "toolstream_batch_apply_seconds_sum")
                        .zip(metric(&metrics, "toolstream_batch_flush_seconds_sum")),
                });
            }
        }
    }
}

/// With `THROUGHPUT_METRICS_DIR` set, keeps the worker's `/metrics` at the end of each drain
/// there (`drain-<unix ms>.txt`), for the histograms the report leaves out.
fn keep_metrics(metrics: &str) {
    let Some(dir) = std::env::var_os("THROUGHPUT_METRICS_DIR") else {
        return;
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = std::path::Path::new(&dir).join(format!("drain-{ms}.txt"));
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, metrics)) {
        eprintln!(
            "cannot keep the worker's metrics in {}: {e}",
            path.display()
        );
    }
}

/// `(batches, inputs)` from the worker's `/metrics`.
fn batches(metrics: &str) -> Option<(u64, u64)> {
    let batches = metric(metrics, "toolstream_batches_total")?;
    let chunks = metric(metrics, "toolstream_chunks_in_total")?;
    let results = metric(metrics, "toolstream_results_in_total").unwrap_or(0.0);
    Some((batches as u64, (chunks + results) as u64))
}

fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// The baselines: the same pull stream, ack (after re-publishing, when `relay_to` is set).
async fn drain_bare(
    client: &async_nats::Client,
    backlog: &Backlog,
    relay_to: Option<jetstream::Context>,
    limit: Duration,
) -> anyhow::Result<Drained> {
    let js = jetstream::new(client.clone());
    let cpu0 = procfs::own_cpu_time();
    let t0 = Instant::now();
    let (_, mut messages) = bare_stream(&js).await?;
    let total = backlog.inputs.len();
    let mut acked = 0usize;
    let deadline = t0 + limit;
    while acked < total {
        let first = match tokio::time::timeout_at(deadline, messages.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(e))) => {
                // a pull-stream status (missed heartbeat and the like): the stream re-issues
                // its requests itself
                eprintln!("pull stream status: {e}");
                continue;
            }
            Ok(None) => bail!("pull stream ended"),
            Err(_) => bail!("not drained within {limit:?}: {acked} of {total} acked"),
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match messages.next().now_or_never() {
                Some(Some(Ok(m))) => batch.push(m),
                _ => break,
            }
        }
        if let Some(out) = &relay_to {
            let mut acks = Vec::with_capacity(batch.len());
            for m in &batch {
                let mut headers = async_nats::HeaderMap::new();
                if let Some(id) = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                    headers.insert("Nats-Msg-Id", id.as_str());
                }
                let ack = out
                    .publish_with_headers("relay.out", headers, m.payload.clone())
                    .await
                    .context("relay publish")?;
                acks.push(ack.into_future());
            }
            for a in futures::future::join_all(acks).await {
                a.context("relay PubAck")?;
            }
        }
        for m in batch {
            m.ack_with(AckKind::Ack)
                .await
                .map_err(|e| anyhow::anyhow!("ack: {e}"))?;
            acked += 1;
        }
    }
    // the acks were sent; done once the server has them all
    while !consumer_done(&js).await? {
        if Instant::now() > deadline {
            bail!("acks not all seen by the server within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = t0.elapsed();
    let cpu = procfs::own_cpu_time()
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a));
    Ok(Drained {
        inputs: total,
        elapsed,
        cpu,
        server_cpu: None,
        peak_rss: None,
        batches: None,
        apply_flush_secs: None,
    })
}
