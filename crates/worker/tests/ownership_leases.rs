//! Partition ownership through NATS KV leases (`toolstream::ownership`), against real
//! nats-server processes: one server, and the testkit's three-node cluster with an R3 bucket.
//!
//! Each worker here is the ownership module plus a minimal host that does what the real host
//! does with the changes (Acquired: hold the fence; Revoked: drop it; HandOff: drop it, then
//! `released`). A checker samples every worker's fences all along: two valid fences for one
//! partition at the same instant is a failure. The KV bucket is read directly to check that
//! it agrees with the hosts. Takeover times are printed (`--nocapture`), never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_nats::jetstream;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use toolstream::ownership::{self, Change, Fence, OwnershipConfig, OwnershipStats};
use toolstream_testkit::wait::eventually_async;
use toolstream_testkit::{debian_server, kv, NatsCluster, NatsServer};

const BUCKET: &str = "TOOLSTREAM_LEASES";
/// Generous bound for anything event-driven.
const WAIT: Duration = Duration::from_secs(30);

/// `RUST_LOG=toolstream=info` shows the module's logs (leases acquired, revoked, handed off).
fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

fn config(worker: &str, ttl: Duration, replicas: usize) -> OwnershipConfig {
    OwnershipConfig {
        lease_ttl: ttl,
        safety_margin: ttl / 5,
        replicas,
        worker_id: Some(worker.to_string()),
        ..OwnershipConfig::default()
    }
}

/// What one test host saw.
#[derive(Default)]
struct HostState {
    /// Partition -> (epoch, fence), as the host holds them.
    held: BTreeMap<u32, (u64, Fence)>,
    /// Handed off, not yet released: (partition, epoch).
    handing_off: Vec<(u32, u64)>,
    acquired: u32,
    revoked: u32,
    handed_off: u32,
    /// Changes that contradict the host's state (e.g. a Revoked for an epoch not held).
    errors: Vec<String>,
}

enum Ctl {
    Stop(oneshot::Sender<()>),
    Stall(Duration),
    Stats(oneshot::Sender<OwnershipStats>),
    /// The host gives a partition back of its own accord (its engine did not start).
    Release(u32, oneshot::Sender<()>),
}

/// The ownership module of one worker and its host.
struct Worker {
    id: String,
    state: Arc<Mutex<HostState>>,
    ctl: mpsc::UnboundedSender<Ctl>,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    async fn start(urls: &[String], cfg: OwnershipConfig, partitions: u32) -> Worker {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(urls.to_vec())
            .await
            .expect("connect");
        Worker::start_on(client, cfg, partitions).await
    }

    async fn start_on(client: async_nats::Client, cfg: OwnershipConfig, partitions: u32) -> Worker {
        let js = jetstream::new(client);
        let id = cfg.worker_id.clone().expect("tests name their workers");
        let (handle, mut changes) = ownership::start(js, cfg, partitions)
            .await
            .expect("ownership starts");
        let state = Arc::new(Mutex::new(HostState::default()));
        let (ctl, mut ctl_rx) = mpsc::unbounded_channel();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    change = changes.recv() => {
                        let Some(change) = change else { return };
                        let hand_back = {
                            let mut s = st.lock().unwrap();
                            match change {
                                Change::Acquired(lease) => {
                                    s.acquired += 1;
                                    let prev = s.held.insert(lease.partition(), (lease.epoch(), lease.fence()));
                                    if let Some((e, _)) = prev {
                                        s.errors.push(format!("acquired {} while holding epoch {e}", lease.partition()));
                                    }
                                    None
                                }
                                Change::Revoked { partition, epoch } => {
                                    s.revoked += 1;
                                    if s.handing_off.contains(&(partition, epoch)) {
                                        // Lapsed during the graceful stop: allowed.
                                        continue;
                                    }
                                    match s.held.remove(&partition) {
                                        Some((e, f)) if e == epoch => {
                                            if f.is_valid() {
                                                s.errors.push(format!("revoked {partition} but its fence is valid"));
                                            }
                                        }
                                        other => s.errors.push(format!("revoked {partition}/{epoch}, held {:?}", other.map(|o| o.0))),
                                    }
                                    None
                                }
                                Change::HandOff { partition, epoch } => {
                                    s.handed_off += 1;
                                    s.handing_off.push((partition, epoch));
                                    match s.held.remove(&partition) {
                                        Some((e, _)) if e == epoch => {}
                                        other => s.errors.push(format!("hand-off {partition}/{epoch}, held {:?}", other.map(|o| o.0))),
                                    }
                                    Some((partition, epoch))
                                }
                            }
                        };
                        if let Some((partition, epoch)) = hand_back {
                            handle.released(partition, epoch).await;
                            st.lock().unwrap().handing_off.retain(|h| *h != (partition, epoch));
                        }
                    }
                    ctl = ctl_rx.recv() => match ctl {
                        None => return,
                        Some(Ctl::Stop(done)) => {
                            st.lock().unwrap().held.clear();
                            handle.shutdown().await;
                            let _ = done.send(());
                            return;
                        }
                        Some(Ctl::Stall(d)) => handle.stall(d),
                        Some(Ctl::Stats(tx)) => { let _ = tx.send(handle.stats()); }
                        Some(Ctl::Release(partition, done)) => {
                            let held = st.lock().unwrap().held.remove(&partition);
                            if let Some((epoch, _)) = held {
                                handle.released(partition, epoch).await;
                            }
                            let _ = done.send(());
                        }
                    },
                }
            }
        });
        Worker {
            id,
            state,
            ctl,
            task,
        }
    }

    /// Partition -> epoch, as the host holds them.
    fn held(&self) -> BTreeMap<u32, u64> {
        let s = self.state.lock().unwrap();
        s.held.iter().map(|(k, (e, _))| (*k, *e)).collect()
    }

    fn fences(&self) -> Vec<Fence> {
        let s = self.state.lock().unwrap();
        s.held.values().map(|(_, f)| f.clone()).collect()
    }

    fn counts(&self) -> (u32, u32, u32) {
        let s = self.state.lock().unwrap();
        (s.acquired, s.revoked, s.handed_off)
    }

    fn errors(&self) -> Vec<String> {
        self.state.lock().unwrap().errors.clone()
    }

    async fn stats(&self) -> OwnershipStats {
        let (tx, rx) = oneshot::channel();
        self.ctl.send(Ctl::Stats(tx)).expect("host running");
        rx.await.expect("stats")
    }

    /// Clean stop: the host "stopped its engines", then shutdown.
    async fn stop(self) {
        let (tx, rx) = oneshot::channel();
        self.ctl.send(Ctl::Stop(tx)).expect("host running");
        rx.await.expect("stopped");
        self.task.await.expect("host task");
    }

    /// A crash: the host and the module vanish, nothing is released.
    async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Samples every worker's fences until stopped; a partition with two valid fences at once is
/// recorded (confirmed by a second look at the first fence after the others).
struct Checker {
    violations: Arc<Mutex<Vec<String>>>,
    samples: Arc<Mutex<u64>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

type Fences = Arc<Mutex<Vec<(String, Arc<Mutex<HostState>>)>>>;

impl Checker {
    fn start(workers: Fences) -> Checker {
        let violations = Arc::new(Mutex::new(Vec::new()));
        let samples = Arc::new(Mutex::new(0u64));
        let (stop, mut stop_rx) = oneshot::channel();
        let (v, n) = (violations.clone(), samples.clone());
        let task = tokio::spawn(async move {
            loop {
                let mut by_partition: BTreeMap<u32, Vec<(String, u64, Fence)>> = BTreeMap::new();
                for (id, st) in workers.lock().unwrap().iter() {
                    for (k, (e, f)) in st.lock().unwrap().held.iter() {
                        by_partition
                            .entry(*k)
                            .or_default()
                            .push((id.clone(), *e, f.clone()));
                    }
                }
                for (k, holders) in by_partition {
                    let valid: Vec<&(String, u64, Fence)> =
                        holders.iter().filter(|(_, _, f)| f.is_valid()).collect();
                    if valid.len() > 1 && valid[0].2.is_valid() {
                        let who: Vec<String> =
                            valid.iter().map(|(w, e, _)| format!("{w}@{e}")).collect();
                        v.lock()
                            .unwrap()
                            .push(format!("partition {k} held by {who:?} at once"));
                    }
                }
                *n.lock().unwrap() += 1;
                tokio::select! {
                    _ = &mut stop_rx => return,
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
        });
        Checker {
            violations,
            samples,
            stop: Some(stop),
            task,
        }
    }

    async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("checker");
        let samples = *self.samples.lock().unwrap();
        assert!(samples > 0, "the checker ran");
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "two owners at once: {v:?}");
    }
}

/// The bucket as the server has it: partition -> (worker, epoch, revision); an error while
/// the server cannot answer (a cluster electing a leader).
async fn try_kv_leases(
    js: &jetstream::Context,
    partitions: u32,
) -> Result<BTreeMap<u32, (String, u64, u64)>, String> {
    Ok(kv::leases(js, BUCKET, partitions)
        .await?
        .into_iter()
        .map(|(k, l)| (k, (l.worker, l.epoch, l.revision)))
        .collect())
}

async fn kv_leases(js: &jetstream::Context, partitions: u32) -> BTreeMap<u32, (String, u64, u64)> {
    try_kv_leases(js, partitions)
        .await
        .expect("read the bucket")
}

/// Live member ids in the bucket.
async fn kv_members(js: &jetstream::Context) -> Vec<String> {
    kv::members(js, BUCKET).await.expect("read the members")
}

/// What a worker should hold: these partitions, or this many.
#[derive(Debug, Clone, Copy)]
enum Want {
    Exactly(&'static [u32]),
    Count(usize),
}

impl<const N: usize> From<&'static [u32; N]> for Want {
    fn from(ks: &'static [u32; N]) -> Want {
        Want::Exactly(ks)
    }
}

impl From<usize> for Want {
    fn from(n: usize) -> Want {
        Want::Count(n)
    }
}

/// Waits until the hosts hold exactly `want` (worker -> partitions) and the bucket agrees
/// (same owner and epoch for every partition).
async fn converged(
    js: &jetstream::Context,
    workers: &[&Worker],
    partitions: u32,
    want: &[(&str, impl Into<Want> + Copy)],
) -> BTreeMap<u32, (String, u64)> {
    let want: Vec<(&str, Want)> = want.iter().map(|(w, k)| (*w, (*k).into())).collect();
    let want = &want;
    let got = eventually_async(WAIT, || async {
        let mut hosts: BTreeMap<u32, (String, u64)> = BTreeMap::new();
        for w in workers {
            for (k, e) in w.held() {
                hosts.insert(k, (w.id.clone(), e));
            }
        }
        for (id, ks) in want {
            let mine: Vec<u32> = hosts
                .iter()
                .filter(|(_, (w, _))| w == id)
                .map(|(k, _)| *k)
                .collect();
            let ok = match ks {
                Want::Exactly(ks) => mine == ks.to_vec(),
                Want::Count(n) => mine.len() == *n,
            };
            if !ok {
                return None;
            }
        }
        let kv = try_kv_leases(js, partitions).await.ok()?;
        let kv: BTreeMap<u32, (String, u64)> =
            kv.into_iter().map(|(k, (w, e, _))| (k, (w, e))).collect();
        (kv == hosts && hosts.len() == partitions as usize).then_some(hosts)
    })
    .await;
    match got {
        Some(g) => g,
        None => {
            let hosts: Vec<(String, BTreeMap<u32, u64>)> =
                workers.iter().map(|w| (w.id.clone(), w.held())).collect();
            panic!(
                "never converged to {want:?}: hosts {hosts:?}, bucket {:?}",
                kv_leases(js, partitions).await
            )
        }
    }
}

async fn client_js(url: &str) -> jetstream::Context {
    jetstream::new(async_nats::connect(url).await.expect("connect"))
}

fn registry(workers: &[&Worker]) -> Fences {
    Arc::new(Mutex::new(
        workers
            .iter()
            .map(|w| (w.id.clone(), w.state.clone()))
            .collect(),
    ))
}

/// Logs on (see `logs`), one nats-server, and a JetStream client of it.
async fn server_and_js() -> (NatsServer, jetstream::Context) {
    logs();
    let server = NatsServer::start().expect("nats-server");
    let js = client_js(&server.url()).await;
    (server, js)
}

/// Every worker's host saw only changes consistent with what it held.
fn assert_no_host_errors(workers: &[&Worker]) {
    for w in workers {
        assert!(w.errors().is_empty(), "{}: {:?}", w.id, w.errors());
    }
}

/// The end of a test: the checker saw no two owners at once, no host saw a change that
/// contradicts what it held, and the workers stop cleanly, in order.
async fn finish(checker: Checker, workers: Vec<Worker>) {
    checker.finish().await;
    assert_no_host_errors(&workers.iter().collect::<Vec<_>>());
    for w in workers {
        w.stop().await;
    }
}

/// One server, workers a and b on 4 partitions with lease TTL `ttl`, the checker on both,
/// and their converged ownership (a holds 0 and 2, b holds 1 and 3).
async fn two_workers_converged(
    ttl: Duration,
) -> (
    NatsServer,
    jetstream::Context,
    Worker,
    Worker,
    Checker,
    BTreeMap<u32, (String, u64)>,
) {
    let (server, js) = server_and_js().await;
    let a = Worker::start(&[server.url()], config("a", ttl, 1), 4).await;
    let b = Worker::start(&[server.url()], config("b", ttl, 1), 4).await;
    let checker = Checker::start(registry(&[&a, &b]));
    let before = converged(&js, &[&a, &b], 4, &[("a", &[0, 2]), ("b", &[1, 3])]).await;
    (server, js, a, b, checker, before)
}

/// Waits (up to `within`) until `w` holds all 4 partitions; what it holds then.
async fn holds_all_four(w: &Worker, within: Duration, what: &str) -> BTreeMap<u32, u64> {
    eventually_async(within, || async { (w.held().len() == 4).then(|| w.held()) })
        .await
        .unwrap_or_else(|| panic!("{} never took {what}: {:?}", w.id, w.held()))
}

/// b's partitions 1 and 3 are held under a greater epoch than before.
fn assert_new_epochs_for_b_s(after: &BTreeMap<u32, u64>, before: &BTreeMap<u32, (String, u64)>) {
    for k in [1, 3] {
        assert!(
            after[&k] > before[&k].1,
            "new epoch for {k}: {after:?} {before:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_takes_every_partition_and_a_joining_one_gets_half_never_both_one() {
    let (server, js) = server_and_js().await;
    let ttl = Duration::from_secs(2);
    let a = Worker::start(&[server.url()], config("a", ttl, 1), 4).await;
    let fences = registry(&[&a]);
    let checker = Checker::start(fences.clone());
    let alone = converged(&js, &[&a], 4, &[("a", &[0, 1, 2, 3])]).await;
    assert_eq!(kv_members(&js).await, vec!["a"]);

    let b = Worker::start(&[server.url()], config("b", ttl, 1), 4).await;
    fences.lock().unwrap().push((b.id.clone(), b.state.clone()));
    // a (index 0 of [a, b]) keeps its class k % 2 == 0 and hands off 1 and 3.
    let both = converged(&js, &[&a, &b], 4, &[("a", &[0, 2]), ("b", &[1, 3])]).await;
    assert_eq!(kv_members(&js).await, vec!["a", "b"]);
    for k in [0, 2] {
        assert_eq!(
            both[&k].1, alone[&k].1,
            "a kept partition {k} under the same lease"
        );
    }
    for k in [1, 3] {
        assert!(
            both[&k].1 > alone[&k].1,
            "b's epoch of {k} is above a's: {both:?} {alone:?}"
        );
    }
    assert_eq!(
        a.counts(),
        (4, 0, 2),
        "a: 4 acquired, none revoked, 2 handed off"
    );
    assert_eq!(b.counts(), (2, 0, 0), "b: 2 acquired");
    // Renewals go on: a few TTLs later nothing moved and the leases were renewed in place.
    tokio::time::sleep(ttl * 2).await;
    let later = converged(&js, &[&a, &b], 4, &[("a", &[0, 2]), ("b", &[1, 3])]).await;
    assert_eq!(later, both, "same owners, same epochs");
    let kv = kv_leases(&js, 4).await;
    assert!(
        kv.values().all(|(_, epoch, rev)| rev > epoch),
        "renewed: {kv:?}"
    );
    let (sa, sb) = (a.stats().await, b.stats().await);
    assert_eq!(
        (sa.revoked, sb.revoked, sa.cas_conflicts, sb.cas_conflicts),
        (0, 0, 0, 0)
    );
    finish(checker, vec![a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_joining_stopping_and_crashing_converge_to_balanced_ownership() {
    let (server, js) = server_and_js().await;
    let ttl = Duration::from_secs(2);
    let url = [server.url()];
    let a = Worker::start(&url, config("a", ttl, 1), 5).await;
    let fences = registry(&[&a]);
    let checker = Checker::start(fences.clone());
    converged(&js, &[&a], 5, &[("a", 5)]).await;
    let b = Worker::start(&url, config("b", ttl, 1), 5).await;
    fences.lock().unwrap().push((b.id.clone(), b.state.clone()));
    converged(&js, &[&a, &b], 5, &[("a", 3), ("b", 2)]).await;
    let c = Worker::start(&url, config("c", ttl, 1), 5).await;
    fences.lock().unwrap().push((c.id.clone(), c.state.clone()));
    converged(&js, &[&a, &b, &c], 5, &[("a", 2), ("b", 2), ("c", 1)]).await;
    assert_eq!(kv_members(&js).await, vec!["a", "b", "c"]);
    // b leaves cleanly: [a, c] share 3 + 2, at once.
    b.stop().await;
    converged(&js, &[&a, &c], 5, &[("a", 3), ("c", 2)]).await;
    // a crashes: c takes everything once a's leases and member key expired.
    let a_errors = a.errors();
    a.crash().await;
    converged(&js, &[&c], 5, &[("c", 5)]).await;
    assert_eq!(kv_members(&js).await, vec!["c"]);
    checker.finish().await;
    assert!(
        a_errors.is_empty() && c.errors().is_empty(),
        "{a_errors:?} {:?}",
        c.errors()
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_stops_cleanly_hands_its_partitions_over_at_once_not_after_the_ttl() {
    // A long TTL: were the takeover waiting for expiry, the bounded wait below would fail.
    let ttl = Duration::from_secs(60);
    let (_server, js, a, b, checker, before) = two_workers_converged(ttl).await;
    let t0 = Instant::now();
    b.stop().await;
    let after = holds_all_four(&a, Duration::from_secs(20), "b's partitions").await;
    let took = t0.elapsed();
    eprintln!("takeover after a clean stop: {took:?} (lease TTL {ttl:?})");
    assert_new_epochs_for_b_s(&after, &before);
    converged(&js, &[&a], 4, &[("a", &[0, 1, 2, 3])]).await;
    assert_eq!(kv_members(&js).await, vec!["a"], "b deleted its member key");
    finish(checker, vec![a]).await;
    // a's clean stop leaves no lease and no member behind.
    assert!(kv_leases(&js, 4).await.is_empty());
    assert!(kv_members(&js).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_worker_s_partitions_expire_and_are_taken_by_the_others() {
    let ttl = Duration::from_secs(2);
    let (_server, js, a, b, checker, before) = two_workers_converged(ttl).await;
    let t0 = Instant::now();
    b.crash().await;
    // Nothing released: b's keys are still there right after the crash.
    let kv = kv_leases(&js, 4).await;
    assert_eq!(kv.get(&1).map(|l| l.0.as_str()), Some("b"), "{kv:?}");
    let after = holds_all_four(&a, Duration::from_secs(30), "b's partitions").await;
    eprintln!(
        "takeover after a crash: {:?} (lease TTL {ttl:?}, renew every {:?})",
        t0.elapsed(),
        config("a", ttl, 1).effective_renew_interval()
    );
    assert_new_epochs_for_b_s(&after, &before);
    converged(&js, &[&a], 4, &[("a", &[0, 1, 2, 3])]).await;
    assert_eq!(kv_members(&js).await, vec!["a"], "b's member key expired");
    finish(checker, vec![a]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_is_fenced_before_it_runs_again_then_revoked_and_the_new_owner_has_a_greater_epoch(
) {
    let ttl = Duration::from_secs(2);
    let (_server, js, a, b, checker, before) = two_workers_converged(ttl).await;
    let b_fences = b.fences();
    assert!(b_fences.iter().all(Fence::is_valid));

    // b stops running (no renewals, no reaction) for long past the TTL, like SIGSTOP.
    let stall = ttl * 5;
    b.ctl.send(Ctl::Stall(stall)).unwrap();
    let t0 = Instant::now();
    let taken = holds_all_four(&a, WAIT, "the paused b's partitions").await;
    eprintln!(
        "takeover from a paused worker: {:?} (lease TTL {ttl:?})",
        t0.elapsed()
    );
    // b is still stopped (nothing of its driver ran: no revocation counted), yet its fences
    // already say no: the monotonic clock passed their deadlines.
    let (_, b_revoked, _) = b.counts();
    assert_eq!(b_revoked, 0, "b's driver has not run yet");
    assert!(
        t0.elapsed() < stall,
        "still within b's stall (a's takeover was quicker)"
    );
    for f in &b_fences {
        assert!(
            !f.is_valid(),
            "partition {} still valid for the paused owner",
            f.partition()
        );
    }
    for k in [1, 3] {
        assert!(
            taken[&k] > before[&k].1,
            "the new owner's epoch is greater: {taken:?} {before:?}"
        );
    }

    // b resumes: it learns it lost both (Revoked) — by its lapsed deadlines or by a renewal on
    // an old revision that the server refuses (compare-and-set), whichever its driver runs
    // first; it gets partitions back only under new epochs (checked below).
    eventually_async(WAIT, || async { b.counts().1 == 2 })
        .await
        .unwrap_or_else(|| panic!("b never revoked: {:?}", b.counts()));
    let stats = b.stats().await;
    assert_eq!(stats.revoked, 2, "{stats:?}");
    // It rejoins and the two converge again: b gets its class back under new epochs.
    let again = converged(&js, &[&a, &b], 4, &[("a", &[0, 2]), ("b", &[1, 3])]).await;
    for k in [1, 3] {
        assert!(again[&k].1 > taken[&k], "{again:?} {taken:?}");
    }
    finish(checker, vec![a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_bucket_with_another_ttl_is_refused_naming_the_setting() {
    let (server, js) = server_and_js().await;
    let first = Worker::start(&[server.url()], config("a", Duration::from_secs(2), 1), 2).await;
    let err = ownership::start(js.clone(), config("b", Duration::from_secs(3), 1), 2)
        .await
        .err()
        .expect("another TTL is refused");
    let text = err.to_string();
    assert!(!err.is_transient(), "{text}");
    assert!(
        text.contains("max_age") && text.contains("lease_ttl"),
        "{text}"
    );
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_working_on_a_three_node_cluster_when_the_bucket_leader_is_killed() {
    logs();
    let bin = debian_server().expect("Debian's nats-server");
    let mut cluster = NatsCluster::start(&bin).expect("cluster");
    let urls = cluster.urls();
    let js = jetstream::new(
        async_nats::ConnectOptions::new()
            .connect(cluster.urls())
            .await
            .expect("connect"),
    );
    // The lease outlives a leader failover (nats-server elects within 4-9 s): a TTL of 20 s,
    // renewed every 2 s, lapses no sooner than 17 s after the kill. The test does not wait for
    // the TTL: only for the renewals to resume on the new leader.
    let cfg = |id: &str| OwnershipConfig {
        renew_interval: Some(Duration::from_secs(2)),
        safety_margin: Duration::from_secs(1),
        ..config(id, Duration::from_secs(20), 3)
    };
    let a = Worker::start(&urls, cfg("a"), 4).await;
    let b = Worker::start(&urls, cfg("b"), 4).await;
    let c = Worker::start(&urls, cfg("c"), 4).await;
    let checker = Checker::start(registry(&[&a, &b, &c]));
    converged(&js, &[&a, &b, &c], 4, &[("a", 2), ("b", 1), ("c", 1)]).await;
    let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.expect("bucket");
    let info = stream.info().await.expect("info").clone();
    assert_eq!(info.config.num_replicas, 3, "an R3 bucket");
    let leader = info
        .cluster
        .and_then(|c| c.leader)
        .expect("the bucket has a leader");
    let node = cluster.index_of(&leader).expect("leader is a node");
    let revs_before = kv_leases(&js, 4).await;

    let t0 = Instant::now();
    cluster.kill(node);
    // Renewals keep landing on the new leader: every lease's revision moves past its value at
    // the kill, and the bucket and the hosts agree on a balanced ownership.
    let renewed = eventually_async(WAIT, || async {
        // A short deadline per look, so a request stuck on the dead node does not count.
        let now = tokio::time::timeout(Duration::from_millis(500), try_kv_leases(&js, 4))
            .await
            .ok()?
            .ok()?;
        let moved = now.len() == 4
            && now
                .iter()
                .all(|(k, (_, _, rev))| revs_before.get(k).is_some_and(|b| rev > &b.2));
        moved.then_some(now)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "leases not renewed after killing {leader}:\n{}",
            cluster.logs()
        )
    });
    eprintln!(
        "first renewal of every lease after killing the bucket leader {leader}: {:?}",
        t0.elapsed()
    );
    let after = converged(&js, &[&a, &b, &c], 4, &[("a", 2), ("b", 1), ("c", 1)]).await;
    let (sa, sb, sc) = (a.stats().await, b.stats().await, c.stats().await);
    assert_eq!(
        (sa.revoked, sb.revoked, sc.revoked),
        (0, 0, 0),
        "no lease lost in the failover: {sa:?} {sb:?} {sc:?}"
    );
    for (k, (_, epoch, _)) in &revs_before {
        assert_eq!(
            after[k].1, *epoch,
            "partition {k} kept its lease (same epoch)"
        );
    }
    drop(renewed);
    finish(checker, vec![a, b, c]).await;
    assert!(
        kv_leases(&js, 4).await.is_empty(),
        "released on the surviving nodes"
    );
}

/// A worker user allowed exactly what the module documents (`ownership` module docs, "NATS
/// permissions"), with its own inbox prefix; `drop_grant` leaves one grant out.
fn permissions_conf(drop_grant: Option<&str>) -> String {
    let publish = [
        "$JS.API.STREAM.INFO.KV_TOOLSTREAM_LEASES",
        "$JS.API.STREAM.CREATE.KV_TOOLSTREAM_LEASES",
        "$JS.API.STREAM.MSG.GET.KV_TOOLSTREAM_LEASES",
        "$KV.TOOLSTREAM_LEASES.>",
    ];
    let subscribe = ["_INBOX_lease.>", "$KV.TOOLSTREAM_LEASES.>"];
    let list = |grants: &[&str], kind: &str| {
        grants
            .iter()
            .filter(|g| drop_grant != Some(&format!("{kind} {g}")))
            .map(|g| format!("\"{g}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "authorization {{\n  users = [\n    {{ user: \"admin\", password: \"admin\" }}\n    \
         {{ user: \"w\", password: \"pw\", permissions: {{ \
         publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }} }} }}\n  ]\n}}\n",
        list(&publish, "publish"),
        list(&subscribe, "subscribe"),
    )
}

/// Connects as the worker user, recording every error the server sends (refusals).
async fn login(url: &str) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let seen = refusals.clone();
    let client = async_nats::ConnectOptions::with_user_and_password("w".into(), "pw".into())
        .custom_inbox_prefix("_INBOX_lease")
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(url)
        .await
        .expect("connect as the worker user");
    (client, refusals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_permissions_are_all_the_module_needs_and_each_is_needed() {
    logs();
    let ttl = Duration::from_secs(2);
    {
        let server = NatsServer::start_with_config(&permissions_conf(None)).expect("nats-server");
        let admin =
            async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
                .connect(server.url())
                .await
                .expect("connect as admin");
        let js = jetstream::new(admin);
        // Two workers, so creating the bucket, finding it, listing members, reading, creating,
        // renewing, handing off, releasing and leaving all happen under the restricted user.
        let (ca, refused_a) = login(&server.url()).await;
        let a = Worker::start_on(ca, config("a", ttl, 1), 4).await;
        converged(&js, &[&a], 4, &[("a", &[0, 1, 2, 3])]).await;
        let (cb, refused_b) = login(&server.url()).await;
        let b = Worker::start_on(cb, config("b", ttl, 1), 4).await;
        converged(&js, &[&a, &b], 4, &[("a", &[0, 2]), ("b", &[1, 3])]).await;
        tokio::time::sleep(ttl).await;
        b.stop().await;
        converged(&js, &[&a], 4, &[("a", &[0, 1, 2, 3])]).await;
        a.stop().await;
        assert!(kv_leases(&js, 4).await.is_empty() && kv_members(&js).await.is_empty());
        let refused: Vec<String> = [refused_a, refused_b]
            .iter()
            .flat_map(|r| r.lock().unwrap().clone())
            .collect();
        assert!(refused.is_empty(), "the server refused: {refused:?}");
    }
    // Each grant is needed: without it the server refuses the request naming it.
    for grant in [
        "publish $JS.API.STREAM.INFO.KV_TOOLSTREAM_LEASES",
        "publish $JS.API.STREAM.CREATE.KV_TOOLSTREAM_LEASES",
        "publish $JS.API.STREAM.MSG.GET.KV_TOOLSTREAM_LEASES",
        "publish $KV.TOOLSTREAM_LEASES.>",
        "subscribe $KV.TOOLSTREAM_LEASES.>",
    ] {
        let server =
            NatsServer::start_with_config(&permissions_conf(Some(grant))).expect("nats-server");
        if grant.contains("STREAM.CREATE") {
            // The bucket exists only if someone created it; the grant under test is the create.
        } else {
            let admin =
                async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
                    .connect(server.url())
                    .await
                    .expect("connect as admin");
            let js = jetstream::new(admin);
            ownership::start(js, config("admin", ttl, 1), 2)
                .await
                .expect("admin creates the bucket")
                .0
                .shutdown()
                .await;
        }
        let (c, refused) = login(&server.url()).await;
        let started = tokio::time::timeout(
            WAIT,
            ownership::start(jetstream::new(c), config("a", ttl, 1), 2),
        )
        .await;
        let subject = grant
            .split_once(' ')
            .map(|(_, s)| s.to_lowercase())
            .unwrap();
        // A refused publish names the concrete subject; a refused subscription the pattern.
        let needle = match subject.strip_suffix('>') {
            Some(prefix) if grant.starts_with("publish") => format!("\"{prefix}"),
            _ => format!("\"{subject}\""),
        };
        let needle = &needle;
        eventually_async(WAIT, || async {
            refused.lock().unwrap().iter().any(|e| {
                let e = e.to_lowercase();
                e.contains("permissions violation") && e.contains(needle)
            })
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "without {grant}: no refusal seen: {:?}",
                refused.lock().unwrap()
            )
        });
        if let Ok(Ok((handle, _changes))) = started {
            drop(handle);
        }
    }
}

/// Writes `value` to `p.<k>` over whatever revision it has now (retrying when the owner's
/// renewal got in between): a late renewal of the owner itself, or an intruder.
async fn overwrite_lease(js: &jetstream::Context, k: u32, value: serde_json::Value) -> u64 {
    for _ in 0..50 {
        let (_, _, rev) = kv_leases(js, k + 1).await[&k].clone();
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            rev.to_string().as_str(),
        );
        let ack = js
            .publish_with_headers(
                format!("$KV.{BUCKET}.p.{k}"),
                headers,
                serde_json::to_vec(&value).unwrap().into(),
            )
            .await
            .expect("publish");
        if let Ok(ack) = ack.await {
            return ack.sequence;
        }
    }
    panic!("could not overwrite p.{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_stored_after_it_timed_out_keeps_the_lease_and_a_foreign_write_revokes_it() {
    let (server, js) = server_and_js().await;
    let ttl = Duration::from_secs(2);
    let a = Worker::start(&[server.url()], config("a", ttl, 1), 2).await;
    let before = converged(&js, &[&a], 2, &[("a", &[0, 1])]).await;
    let (epoch0, epoch1) = (before[&0].1, before[&1].1);

    // What a renewal that timed out on our side but was stored later looks like: the key at a
    // revision the owner does not know, holding its own worker and epoch.
    let late = overwrite_lease(
        &js,
        0,
        serde_json::json!({"worker": "a", "epoch": epoch0, "acquired_at": 1}),
    )
    .await;
    eventually_async(WAIT, || async {
        let kv = kv_leases(&js, 2).await;
        kv.get(&0).is_some_and(|l| l.2 > late).then_some(())
    })
    .await
    .expect("the owner renews on from the late revision");
    let stats = a.stats().await;
    assert!(
        stats.cas_conflicts >= 1,
        "its renewal on the old revision was refused: {stats:?}"
    );
    assert_eq!(stats.revoked, 0, "and it kept the lease: {stats:?}");
    assert_eq!(a.held().get(&0), Some(&epoch0));

    // Someone else's value (not our epoch) in the key: the lease is gone.
    let fence1 = a.fences().into_iter().find(|f| f.partition() == 1).unwrap();
    overwrite_lease(
        &js,
        1,
        serde_json::json!({"worker": "x", "epoch": epoch1 + 1000, "acquired_at": 1}),
    )
    .await;
    eventually_async(WAIT, || async { !a.held().contains_key(&1) })
        .await
        .expect("revoked");
    assert!(!fence1.is_valid());
    assert_eq!(a.stats().await.revoked, 1);
    assert_no_host_errors(&[&a]);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_host_gives_back_is_not_taken_again_by_it_for_a_ttl() {
    let (server, js) = server_and_js().await;
    // A TTL long enough that "not at once" is seen many renewals apart, not by timing luck.
    let ttl = Duration::from_secs(6);
    let cfg = OwnershipConfig {
        renew_interval: Some(Duration::from_millis(200)),
        safety_margin: Duration::from_millis(500),
        ..config("a", ttl, 1)
    };
    let a = Worker::start(&[server.url()], cfg, 2).await;
    let before = converged(&js, &[&a], 2, &[("a", &[0, 1])]).await;
    let (tx, rx) = oneshot::channel();
    a.ctl.send(Ctl::Release(1, tx)).unwrap();
    rx.await.unwrap();
    assert!(
        !kv_leases(&js, 2).await.contains_key(&1),
        "released at once"
    );
    // Many re-evaluations later (every 200 ms, and on its own delete), still free.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!a.held().contains_key(&1), "taken again at once");
    }
    assert!(!kv_leases(&js, 2).await.contains_key(&1));
    // After the cool-down it is taken again, under a new epoch.
    let again = converged(&js, &[&a], 2, &[("a", &[0, 1])]).await;
    assert!(again[&1].1 > before[&1].1, "{again:?} {before:?}");
    assert_eq!(again[&0], before[&0]);
    a.stop().await;
}
