//! `scaleout`: the same preloaded backlog drained by 1, 2 and 3 workers sharing the partitions
//! through leases (`--assignment leases`), rounds alternating, on one nats-server with the
//! deploy config's partition mapping (`--partitions` partitions).
//!
//! Each drain: a fresh server (free port, temp store, the mapping), one worker provisions the
//! streams and stops, the backlog is published with PubAcks (producers use the unpartitioned
//! subjects; the server maps them), then W workers start together and the drain is timed from
//! their start to the last expected `message.completed`. Reported per W: chunks/s (median of
//! the rounds), the ratio to one worker, CPU seconds per million inputs (all workers), and how
//! the partitions ended up spread.
//!
//! ```sh
//! cargo build --release -p toolstream -p toolstream-throughput
//! target/release/scaleout --inputs 100000 --rounds 3
//! ```

use anyhow::{bail, Context};
use clap::Parser;
use futures::StreamExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;
use toolstream_testkit::NatsServer;
use toolstream_throughput::{drain, procfs, report, worker, workloads};

/// Drain rate with 1..=W leased workers.
#[derive(Debug, Parser)]
#[command(name = "scaleout")]
struct Args {
    /// Inputs in the backlog (the typical workload: openai-chat, 100 chunks, 2 calls).
    #[arg(long, default_value_t = 100_000)]
    inputs: usize,
    /// Partitions the server maps conversations onto.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Largest number of workers (each count from 1 is measured).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Rounds (each round measures every worker count once).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The worker binary (default: `toolstream` next to this binary).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
}

/// The deploy config's input and query mapping, for `partitions` partitions.
fn mapping(partitions: u32) -> String {
    let n = partitions;
    format!(
        "mappings = {{\n\
         \"toolstream.chunks.*.*\": \"toolstream.p.{{{{partition({n},1)}}}}.chunks.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}\"\n\
         \"toolstream.results.*.*\": \"toolstream.p.{{{{partition({n},1)}}}}.results.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}\"\n\
         \"toolstream.query.message.*.*\": \"toolstream.p.{{{{partition({n},1)}}}}.query.message.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}\"\n\
         \"toolstream.query.history.*\": \"toolstream.p.{{{{partition({n},1)}}}}.query.history.{{{{wildcard(1)}}}}\"\n\
         }}\n"
    )
}

struct Measured {
    workers: usize,
    elapsed: Duration,
    cpu: Duration,
    /// Bytes the workers' data directories hold after the drain (their sled stores).
    disk: u64,
    /// The largest peak RSS of the workers.
    peak_rss: u64,
}

/// Bytes of the files under `dir`.
fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

async fn drain_with(
    args: &Args,
    bin: &std::path::Path,
    backlog: &workloads::Backlog,
    workers: usize,
) -> anyhow::Result<Measured> {
    let server = NatsServer::start_with_config(&mapping(args.partitions))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = tempfile::tempdir().context("temp dir")?;
    let worker_args = |i: usize| -> Vec<String> {
        [
            "--partitions",
            &args.partitions.to_string(),
            "--assignment",
            "leases",
            "--worker-id",
            &format!("w{i}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    for d in std::iter::once("prov".to_string()).chain((0..workers).map(|i| format!("w{i}"))) {
        std::fs::create_dir_all(dir.path().join(d)).context("worker dir")?;
    }
    {
        // provisions the streams (and leases every partition once; its consumers are
        // deleted by the next owners)
        let mut w = worker::Worker::start(
            bin,
            &server.url(),
            &dir.path().join("prov"),
            &worker_args(9),
        )?;
        w.wait_healthy(Duration::from_secs(30)).await?;
        w.stop(Duration::from_secs(20)).await;
    }
    let client = async_nats::connect(server.url()).await.context("connect")?;
    drain::preload(&client, backlog).await?;
    let mut events = drain::subscribe_events(&client).await?;
    let t0 = Instant::now();
    let mut fleet = Vec::new();
    for i in 0..workers {
        fleet.push(worker::Worker::start(
            bin,
            &server.url(),
            &dir.path().join(format!("w{i}")),
            &worker_args(i),
        )?);
    }
    let limit = Duration::from_secs(120 + backlog.inputs.len() as u64 / 500);
    let mut completed = std::collections::HashSet::new();
    while completed.len() < backlog.messages {
        let next = tokio::time::timeout_at(t0 + limit, events.next()).await;
        let Ok(Some(msg)) = next else {
            let tails: Vec<String> = fleet.iter().map(|w| w.log_tail()).collect();
            bail!(
                "{workers} worker(s): {} of {} messages completed within {limit:?}\n{}",
                completed.len(),
                backlog.messages,
                tails.join("\n---\n")
            );
        };
        if msg
            .payload
            .windows(19)
            .any(|w| w == b"\"message.completed\"")
        {
            completed.insert(msg.subject.to_string());
        }
    }
    let elapsed = t0.elapsed();
    let cpu = fleet
        .iter()
        .filter_map(|w| w.pid().and_then(procfs::cpu_time))
        .sum();
    let peak_rss = fleet
        .iter()
        .filter_map(|w| w.pid().and_then(procfs::peak_rss))
        .max()
        .unwrap_or(0);
    let disk = (0..workers)
        .map(|i| dir_size(&dir.path().join(format!("w{i}"))))
        .sum();
    for w in &mut fleet {
        w.stop(Duration::from_secs(20)).await;
    }
    Ok(Measured {
        workers,
        elapsed,
        cpu,
        disk,
        peak_rss,
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    toolstream_throughput::runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let bin = worker::resolve_bin(args.worker_bin.as_deref())?;
    let backlog = workloads::build("typical", args.inputs)?;
    eprintln!(
        "backlog: {} inputs, {} messages; {} partitions; 1..={} workers x {} rounds",
        backlog.inputs.len(),
        backlog.messages,
        args.partitions,
        args.workers,
        args.rounds
    );
    let mut rows: Vec<Measured> = Vec::new();
    for round in 0..args.rounds {
        for w in 1..=args.workers {
            let m = drain_with(&args, &bin, &backlog, w).await?;
            eprintln!(
                "round {round}: {w} worker(s): {:.1?}, {:.0} inputs/s",
                m.elapsed,
                backlog.inputs.len() as f64 / m.elapsed.as_secs_f64()
            );
            rows.push(m);
        }
    }
    let rate = |w: usize| {
        report::median(
            rows.iter()
                .filter(|m| m.workers == w)
                .map(|m| backlog.inputs.len() as f64 / m.elapsed.as_secs_f64())
                .collect(),
        )
        .unwrap_or(0.0)
    };
    let cpu = |w: usize| {
        report::median(
            rows.iter()
                .filter(|m| m.workers == w)
                .map(|m| m.cpu.as_secs_f64() * 1e6 / backlog.inputs.len() as f64)
                .collect(),
        )
        .unwrap_or(0.0)
    };
    let median_of = |w: usize, f: &dyn Fn(&Measured) -> f64| {
        report::median(rows.iter().filter(|m| m.workers == w).map(f).collect()).unwrap_or(0.0)
    };
    let one = rate(1);
    println!(
        "| workers | inputs/s (median of {}) | vs 1 worker | CPU s per million inputs | store bytes per message | peak RSS per worker (MiB) |",
        args.rounds
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for w in 1..=args.workers {
        println!(
            "| {w} | {:.0} | {:.2} | {:.1} | {:.0} | {:.0} |",
            rate(w),
            rate(w) / one.max(1e-9),
            cpu(w),
            median_of(w, &|m| m.disk as f64 / backlog.messages.max(1) as f64),
            median_of(w, &|m| m.peak_rss as f64 / (1024.0 * 1024.0)),
        );
    }
    Ok(())
}
