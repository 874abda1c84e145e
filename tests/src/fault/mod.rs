//! Fault injection: a workload that mixes every provider, a crash-free reference of what it
//! must produce, a checker of what the worker really published and stores, and a loop that
//! SIGKILLs the worker at random points.
//!
//! Used by `crates/worker/tests/fault_worker_kill.rs`, `fault_producer.rs`, the soak binary
//! (`src/bin/soak.rs`) and the server-restart / cluster tests:
//!
//! ```text
//! let workload = Workload::build(&WorkloadSpec::ci("r0", seed))?;   // inputs, seeded
//! let reference = Reference::compute(&workload, &assembler_config)?; // no crash, in-process
//! let killer = Killer::start(worker, KillPlan { .. }, seed);          // kills while it flows
//! workload.publish(&client, "toolstream", &Misbehaviour::default()).await?;
//! let mut checker = Checker::new(client, "toolstream");
//! checker.wait(&reference, &WaitPlan::default()).await;
//! let report = checker.check(&reference).await;                       // exact, per event_id
//! assert!(report.ok(), "{report}");
//! ```
//!
//! - [`workload`] — [`Workload`]: recorded streams of every provider (`tests/recordings/`, each
//!   followed by an explicit end, as `toolstream replay` does) and generated OpenAI chat and
//!   Anthropic streams (parallel calls, short and thousands of chunks, one ~400 KB argument in
//!   small fragments), tool results (some published before their call), spread over several
//!   conversations and paced. Producers set `Toolstream-Seq` and
//!   `Nats-Msg-Id = <conv>:<msg>:<seq>`. [`Misbehaviour`] adds duplicates, reordering,
//!   republishing storms and producers that stop mid-stream.
//! - [`reference`] — [`Reference`]: the same inputs through the real assembler (memory store,
//!   logical clock, no crash): the events (by `event_id`) and the snapshot of every message.
//! - [`checker`] — [`Checker`] / [`Report`]: reads `TOOLSTREAM_EVENTS` and `TOOLSTREAM_DLQ`,
//!   asks the query service for every message, and counts lost, duplicated, ghost, differing
//!   and out-of-order events, calls that ended abandoned/invalid where the reference
//!   completed them, and differing snapshots.
//! - [`kill`] — [`Killer`]: SIGKILL + restart on the same data dir at seeded random points.
//! - [`Rng`] — a small seeded generator (splitmix64) so every run can be replayed by its seed.

pub mod checker;
pub mod kill;
pub mod reference;
pub mod workload;

pub use checker::{Checker, Report, WaitPlan};
pub use kill::{KillPlan, KillStats, Killer};
pub use reference::Reference;
pub use workload::{MessagePlan, Misbehaviour, ResultPlan, Workload, WorkloadSpec};

/// A seeded pseudo-random generator (splitmix64): the same seed gives the same run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A derived generator (for a sub-task), independent of later draws from this one.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    /// Shuffles `items` in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as u64) as usize;
            items.swap(i, j);
        }
    }
}

/// The run's seed: `$TOOLSTREAM_FAULT_SEED` (to repeat a run), else [`seed_from_clock`].
pub fn seed() -> u64 {
    std::env::var("TOOLSTREAM_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(seed_from_clock)
}

/// A seed from the clock, for runs that were not given one (printed so the run can be
/// repeated).
pub fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x1234_5678)
}

/// Runs `run` once per nats-server release of [`crate::fault_servers`] (Debian's 2.9.10 and
/// the pinned current one), both at once, each on its own task; panics after both finished
/// if either failed (a panic inside `run`), naming the release. A missing release is a
/// failure that says how to install it.
pub async fn on_each_server<F, Fut>(run: F)
where
    F: Fn(crate::ServerBin) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let servers = crate::fault_servers().unwrap_or_else(|e| panic!("{e}"));
    let tasks: Vec<(String, tokio::task::JoinHandle<()>)> = servers
        .into_iter()
        .map(|bin| (bin.to_string(), tokio::spawn(run(bin))))
        .collect();
    let mut failed = Vec::new();
    for (server, task) in tasks {
        if let Err(e) = task.await {
            let why = match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".to_string()),
                Err(e) => e.to_string(),
            };
            failed.push(format!("on {server}: {why}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
