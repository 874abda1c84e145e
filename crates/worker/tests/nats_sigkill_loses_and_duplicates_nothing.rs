//! nats-server SIGKILLed in the middle of a run, on both releases the fault suite covers
//! (Debian's 2.9.10 and the current one, `toolstream_testkit::fault_servers`), while the fault
//! workload flows (`toolstream_testkit::fault`: every provider's recordings, generated streams
//! with parallel calls, long streams, a large argument in small fragments, tool results some of
//! them before their call):
//!
//! - a single file-store server, killed twice and restarted on the same port and store;
//! - a three-node cluster with R3 streams (`--replicas 3`, the worker given all three URLs):
//!   the node the worker is connected to is killed and brought back, then the node that leads
//!   the input stream (stream info `cluster.leader`).
//!
//! The worker process stays up throughout. The checker then compares everything it published
//! and answers with a crash-free run of the same inputs through the assembler: every event
//! exactly once by `event_id`, none missing, no ghost, same content (arguments byte-exact), same
//! order per message, same query snapshot.
//!
//! The seed is printed; `TOOLSTREAM_FAULT_SEED=<seed>` repeats a run.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream;
use common::{client, eventually_async, tail, wait_provisioned, Producer, Worker};
use std::time::{Duration, Instant};
use toolstream_testkit::fault::{
    self, workload::Published, Checker, Misbehaviour, Reference, WaitPlan, Workload, WorkloadSpec,
};
use toolstream_testkit::{
    current_server, debian_server, HarnessError, NatsCluster, NatsServer, ServerBin,
};

fn require(bin: Result<ServerBin, HarnessError>) -> ServerBin {
    bin.unwrap_or_else(|e| panic!("{e}"))
}

/// The harness's ack wait (`common::Worker` passes `--ack-wait 4s`).
const ACK_WAIT: Duration = Duration::from_secs(4);

/// The fault workload publishing in the background while a test injects faults.
struct Run {
    label: String,
    seed: u64,
    started: Instant,
    reference: Reference,
    inputs: usize,
    publishing: tokio::task::JoinHandle<Result<Published, String>>,
    client: async_nats::Client,
}

impl Run {
    /// Builds the CI workload, published over about `spread`, and its crash-free reference,
    /// and starts publishing it through `client`.
    fn start(label: String, tag: &str, spread: Duration, client: async_nats::Client) -> Run {
        let seed = fault::seed();
        eprintln!("{label}: seed {seed} (TOOLSTREAM_FAULT_SEED={seed} repeats this run)");
        let spec = WorkloadSpec {
            spread,
            ..WorkloadSpec::ci(tag, seed)
        };
        let workload = Workload::build(&spec).expect("workload");
        let reference =
            Reference::compute(&workload, &assembler::Config::default()).expect("reference run");
        let inputs = workload.input_count();
        let producer = Producer::new(jetstream::new(client.clone()));
        let publishing =
            tokio::spawn(
                async move { workload.publish(&producer, &Misbehaviour::default()).await },
            );
        Run {
            label,
            seed,
            started: Instant::now(),
            reference,
            inputs,
            publishing,
            client,
        }
    }

    /// Whether input is still being published.
    fn flowing(&self) -> bool {
        !self.publishing.is_finished()
    }

    /// Logs a step of the test with the time since publishing started.
    fn phase(&self, what: &str) {
        eprintln!(
            "{}: {what} at {:.1?} (publishing: {})",
            self.label,
            self.started.elapsed(),
            self.flowing()
        );
    }

    /// Waits until publishing is done and the worker has published everything (or gave up),
    /// stops the worker cleanly and checks every event, dead letter and query snapshot
    /// against the reference. `servers` adds the servers' logs to a failure message.
    async fn finish_and_check(self, worker: &mut Worker, servers: impl Fn() -> String) {
        let published = self
            .publishing
            .await
            .expect("publish task")
            .expect("every input published (PubAck) despite the faults");
        let publish_time = self.started.elapsed();
        let mut checker = Checker::new(self.client.clone(), "toolstream");
        let complete = checker
            .wait(
                &self.reference,
                &WaitPlan {
                    limit: Duration::from_secs(90),
                    quiet: ACK_WAIT + Duration::from_secs(10),
                    ..WaitPlan::default()
                },
            )
            .await;
        let mut report = checker.check(&self.reference).await;
        report.complete = complete;
        let was_running = worker.is_running();
        let terminated = worker.terminate();
        report.add(&checker.late_report().await);
        eprintln!(
            "{}: seed {}, messages {}, inputs {} ({} planned), events checked {}, lost {}, \
             duplicated {}, ghosts {}, published in {publish_time:.1?}, total {:.1?}\n{report}",
            self.label,
            self.seed,
            report.messages,
            published.inputs,
            self.inputs,
            report.events_checked,
            report.lost,
            report.duplicated,
            report.ghosts,
            self.started.elapsed()
        );
        assert!(
            report.ok(),
            "{}: seed {}: {report}\n--- worker log (tail) ---\n{}\n--- servers ---\n{}",
            self.label,
            self.seed,
            tail(&worker.log(), 40),
            servers()
        );
        assert!(was_running, "the worker stayed up through the faults");
        assert!(
            terminated,
            "clean exit after the run:\n{}",
            tail(&worker.log(), 20)
        );
        assert_eq!(
            worker.log().matches("store open").count(),
            1,
            "one worker process for the whole run: it reconnected, it was never restarted"
        );
        assert!(
            worker.log().contains("disconnected from NATS"),
            "the worker lost its server (the faults hit it)"
        );
    }
}

// ---- a single server, SIGKILLed and restarted ----

async fn single_server_killed_mid_run(bin: ServerBin) {
    let label = format!("single nats-server {}", bin.version);
    let mut server = NatsServer::start_with(&bin).expect("nats-server starts");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    let nats = client(&server.url()).await;
    wait_provisioned(&jetstream::new(nats.clone()), "toolstream").await;
    worker.wait_ready();

    let run = Run::start(label, "ns", Duration::from_secs(20), nats);
    for (at, down) in [(3_000, 700), (9_000, 1_500)] {
        let wait = Duration::from_millis(at).saturating_sub(run.started.elapsed());
        tokio::time::sleep(wait).await;
        assert!(run.flowing(), "the kill lands while input flows");
        run.phase("killing the server");
        server.kill();
        tokio::time::sleep(Duration::from_millis(down)).await;
        server
            .restart()
            .expect("server restarts on the same port and store");
        run.phase("server back");
    }
    run.finish_and_check(&mut worker, || tail(&server.log(), 30))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_server_sigkilled_mid_run_on_nats_2_9() {
    single_server_killed_mid_run(require(debian_server())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_server_sigkilled_mid_run_on_current_nats() {
    single_server_killed_mid_run(require(current_server())).await;
}

// ---- a three-node cluster with R3 streams, nodes SIGKILLed and brought back ----

/// The worker's NATS connection name (`toolstream-<consumer>-p<partition>`).
const WORKER_CLIENT: &str = "toolstream-toolstream-p0";

/// The server name leading the input stream's RAFT group once there is one other than `not`.
async fn input_leader_other_than(js: &jetstream::Context, not: Option<&str>) -> String {
    eventually_async(Duration::from_secs(60), || async move {
        // one attempt at a time, bounded: a request sent while the client fails over to
        // another node would otherwise hang for the client's whole request timeout
        let attempt = tokio::time::timeout(Duration::from_secs(2), async {
            let mut s = js.get_stream("TOOLSTREAM_IN").await.ok()?;
            let info = s.info().await.ok()?;
            info.cluster.as_ref().and_then(|c| c.leader.clone())
        });
        attempt
            .await
            .ok()
            .flatten()
            .filter(|leader| Some(leader.as_str()) != not)
    })
    .await
    .unwrap_or_else(|| panic!("TOOLSTREAM_IN has no leader (other than {not:?})"))
}

/// Starts node `k` again on the same ports and store and waits until it has caught up and
/// routes to both others again: the next step kills another node, and the two left must
/// reach each other to elect leaders (the cluster harness's start waits for the same).
fn bring_back(cluster: &mut NatsCluster, k: usize) {
    cluster
        .restart(k)
        .unwrap_or_else(|e| panic!("restart {}: {e}", cluster.name(k)));
    cluster
        .wait_current(k, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_mesh(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn cluster_node_killed_mid_run(bin: ServerBin) {
    let label = format!("3-node cluster nats-server {}", bin.version);
    let mut cluster = NatsCluster::start(&bin).expect("three-node cluster starts");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(
        &cluster.urls_joined(),
        &dir.path().join("store"),
        &["--replicas", "3"],
    );
    let nats = cluster.client().await;
    let js = jetstream::new(nats.clone());
    wait_provisioned(&js, "toolstream").await;
    worker.wait_ready();
    for name in ["TOOLSTREAM_IN", "TOOLSTREAM_EVENTS", "TOOLSTREAM_DLQ"] {
        let info = js
            .get_stream(name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert_eq!(info.config.num_replicas, 3, "{name} is R3");
        let peers = info.cluster.map(|c| c.replicas.len()).unwrap_or(0);
        assert_eq!(peers, 2, "{name}: a leader and two more replicas");
    }

    // Longer than the single-server run: a stream's leader election under load can take
    // 10-30 s on a 2-core machine, and both kills must land while input flows.
    let run = Run::start(label, "nc", Duration::from_secs(30), nats);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The node the worker is connected to: the worker must fail over to another node.
    let serving = cluster.nodes_serving(WORKER_CLIENT);
    let [worker_node] = serving[..] else {
        panic!("the worker is connected to one node, not {serving:?}");
    };
    assert!(run.flowing(), "the first kill lands while input flows");
    run.phase(&format!(
        "killing {} (the worker's node)",
        cluster.name(worker_node)
    ));
    cluster.kill(worker_node);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    bring_back(&mut cluster, worker_node);
    run.phase("it is back and current");

    // The node leading the input stream: JetStream must elect another while input flows.
    let leader = input_leader_other_than(&js, None).await;
    let leader_k = cluster.index_of(&leader).expect("the leader is a node");
    assert!(run.flowing(), "the leader's kill lands while input flows");
    run.phase(&format!("killing {leader} (TOOLSTREAM_IN's leader)"));
    cluster.kill(leader_k);
    let next = input_leader_other_than(&js, Some(&leader)).await;
    run.phase(&format!("{next} leads TOOLSTREAM_IN"));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    bring_back(&mut cluster, leader_k);
    run.phase(&format!("{leader} is back and current"));

    run.finish_and_check(&mut worker, || cluster.logs()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_node_and_input_leader_sigkilled_mid_run_on_nats_2_9() {
    cluster_node_killed_mid_run(require(debian_server())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_node_and_input_leader_sigkilled_mid_run_on_current_nats() {
    cluster_node_killed_mid_run(require(current_server())).await;
}
