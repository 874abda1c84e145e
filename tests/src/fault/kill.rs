//! [`Killer`]: SIGKILLs a [`Worker`] at seeded random points and restarts it on the same data
//! directory, on its own thread, until it has killed [`KillPlan::kills`] times or is stopped.
//!
//! Each kill lands a random time after the previous restart: usually after the new process
//! reported ready (so it was consuming, applying, flushing or relaying), sometimes
//! ([`KillPlan::early_share`]) without waiting for that, i.e. possibly while it opens and
//! recovers its store or provisions. A process that exits by itself is counted as an
//! unexpected exit (with its log tail) and started again.

use super::Rng;
use crate::harness::{tail, Worker};
use crate::wait::eventually;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// When to kill.
#[derive(Debug, Clone)]
pub struct KillPlan {
    /// Kill this many times, then leave the worker running.
    pub kills: usize,
    /// Shortest time between a (re)start (or, usually, its readiness) and the next kill.
    pub min_gap: Duration,
    /// Longest such time.
    pub max_gap: Duration,
    /// Share of kills that do not wait for the restarted worker to report ready.
    pub early_share: f64,
}

/// What the killer did.
#[derive(Debug, Clone, Default)]
pub struct KillStats {
    /// SIGKILLs sent to a running worker.
    pub kills: usize,
    /// Kills that landed before the process reported ready.
    pub early_kills: usize,
    /// Times the worker had exited on its own when the killer looked.
    pub unexpected_exits: usize,
    /// Starts that did not report ready within a minute.
    pub not_ready: usize,
    /// Descriptions of unexpected exits and failed restarts (log tails).
    pub problems: Vec<String>,
}

/// A worker being killed and restarted on a background thread.
pub struct Killer {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicUsize>,
    handle: Option<JoinHandle<(Worker, KillStats)>>,
    problems: Arc<Mutex<Vec<String>>>,
}

impl Killer {
    /// Starts killing `worker` (already started) according to `plan`, with `seed`.
    pub fn start(worker: Worker, plan: KillPlan, seed: u64) -> Killer {
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicUsize::new(0));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let (stop, kills, problems) = (stop.clone(), kills.clone(), problems.clone());
            std::thread::spawn(move || run(worker, plan, seed, &stop, &kills, &problems))
        };
        Killer {
            stop,
            kills,
            handle: Some(handle),
            problems,
        }
    }

    /// Kills so far.
    pub fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }

    /// Whether the killer has finished its plan (or was stopped).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Problems seen so far (unexpected exits, failed restarts).
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Stops killing and hands back the worker, running (started again if it was down).
    pub fn stop(mut self) -> (Worker, KillStats) {
        self.stop.store(true, Ordering::SeqCst);
        let handle = self.handle.take().expect("killer thread joined once");
        match handle.join() {
            Ok(r) => r,
            Err(_) => panic!("killer thread panicked"),
        }
    }
}

impl Drop for Killer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Sleeps `d` in small steps; false when stopped meanwhile.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5).min(until - Instant::now()));
    }
    !stop.load(Ordering::SeqCst)
}

fn run(
    mut worker: Worker,
    plan: KillPlan,
    seed: u64,
    stop: &AtomicBool,
    kills: &AtomicUsize,
    problems: &Mutex<Vec<String>>,
) -> (Worker, KillStats) {
    let mut rng = Rng::new(seed);
    let mut stats = KillStats::default();
    let problem = |stats: &mut KillStats, what: String| {
        if let Ok(mut p) = problems.lock() {
            if p.len() < 20 {
                p.push(what.clone());
            }
        }
        if stats.problems.len() < 20 {
            stats.problems.push(what);
        }
    };
    let min = plan.min_gap.as_millis() as u64;
    let max = plan.max_gap.as_millis() as u64;
    while stats.kills < plan.kills && !stop.load(Ordering::SeqCst) {
        let early = rng.chance(plan.early_share);
        if !early {
            // ready, stopped, or exited on its own: whichever comes first (bounded)
            let _ = eventually(Duration::from_secs(60), || {
                worker.is_ready() || stop.load(Ordering::SeqCst) || !worker.is_running()
            });
            if !worker.is_ready() && !stop.load(Ordering::SeqCst) && worker.is_running() {
                stats.not_ready += 1;
                problem(
                    &mut stats,
                    format!(
                        "start {} not ready after 60 s:\n{}",
                        worker.starts(),
                        tail(&worker.current_log(), 30)
                    ),
                );
            }
        }
        let gap = if early {
            Duration::from_millis(rng.range(0, min.max(1)))
        } else {
            Duration::from_millis(rng.range(min, max))
        };
        if !nap(gap, stop) {
            break;
        }
        if !worker.is_running() {
            stats.unexpected_exits += 1;
            problem(
                &mut stats,
                format!(
                    "start {} exited on its own:\n{}",
                    worker.starts(),
                    tail(&worker.current_log(), 30)
                ),
            );
        } else {
            if !worker.is_ready() {
                stats.early_kills += 1;
            }
            stats.kills += 1;
            kills.store(stats.kills, Ordering::SeqCst);
        }
        if let Err(e) = worker.try_restart() {
            problem(&mut stats, format!("restart failed: {e}"));
            nap(Duration::from_millis(500), stop);
        }
    }
    if !worker.is_running() {
        if worker.starts() > 0 && !worker.log().is_empty() {
            stats.unexpected_exits += 1;
            problem(
                &mut stats,
                format!(
                    "start {} was down when the killer stopped:\n{}",
                    worker.starts(),
                    tail(&worker.current_log(), 30)
                ),
            );
        }
        if let Err(e) = worker.try_restart() {
            problem(&mut stats, format!("restart failed: {e}"));
        }
    }
    (worker, stats)
}
