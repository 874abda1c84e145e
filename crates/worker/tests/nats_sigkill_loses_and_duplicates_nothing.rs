//! nats-server SIGKILLed in the middle of a run, on both releases the fault suite covers
//! (Debian's 2.9.10 and the current one): a single file-store server killed and restarted on
//! the same port and store, and one node of a three-node cluster with R3 streams killed and
//! brought back, among them the leader of the input stream. The worker process stays up and
//! connected throughout, and afterwards every expected event is in the events stream exactly
//! once (by `event_id`), none is missing, there is no event nobody expects, and every call
//! completed with byte-exact arguments.

mod common;

use async_nats::jetstream;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use toolstream_testkit::{
    current_server, debian_server, HarnessError, NatsCluster, NatsServer, ServerBin,
};

fn require(bin: Result<ServerBin, HarnessError>) -> ServerBin {
    bin.unwrap_or_else(|e| panic!("{e}"))
}

/// Calls of message `i`: one to three, arguments long enough that each stream takes a while.
fn calls_of(i: usize) -> Vec<Call> {
    (0..1 + i % 3)
        .map(|k| Call {
            id: format!("call_{i}_{k}"),
            name: "query_db".to_string(),
            args: json!({"sql": format!("select {k}, \"é\\u00e9\" from t{i} where x = '{}'", "y".repeat(i)),
                         "timeout_ms": 100 * i, "tags": ["a", "b", k]}),
        })
        .collect()
}

/// Events the workload must produce: started + completed per call, one message.completed.
fn expected_events(messages: usize) -> usize {
    (0..messages).map(|i| 2 * calls_of(i).len() + 1).sum()
}

/// Waits until every message completed, stops the worker cleanly and checks the events stream:
/// exactly the expected events (none missing, none twice by `event_id`, none for a message
/// nobody sent), each call `started` then `completed` with its arguments byte for byte.
/// `server_logs` adds the servers' logs to a failure message.
async fn finish_and_check(
    events: &mut StreamLog,
    worker: &mut Worker,
    messages: usize,
    server_logs: impl Fn() -> String,
) {
    events
        .until(
            WAIT * 2,
            "every message.completed after the server faults",
            |all| completed_messages(all) >= messages,
            || format!("{}\n--- servers ---\n{}", worker.log(), server_logs()),
        )
        .await;
    assert!(
        worker.is_running(),
        "the worker stayed up through the faults"
    );
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
    events.poll().await;

    assert_each_event_once(&events.all);
    let grouped = by_message(&events.all);
    let expected_keys: Vec<(String, String)> = (0..messages)
        .map(|i| (format!("c{i}"), format!("m{i}")))
        .collect();
    let ghosts: Vec<_> = grouped
        .keys()
        .filter(|k| !expected_keys.contains(k))
        .collect();
    assert!(
        ghosts.is_empty(),
        "events of messages nobody sent: {ghosts:?}"
    );
    assert_eq!(
        events.all.len(),
        expected_events(messages),
        "every expected event, nothing else"
    );
    for (i, key) in expected_keys.iter().enumerate() {
        let evs = grouped
            .get(key)
            .unwrap_or_else(|| panic!("no events for {key:?}"));
        let calls = calls_of(i);
        check_message(evs, &calls).unwrap_or_else(|e| panic!("m{i}: {e}\n{evs:#?}"));
        for c in &calls {
            let completed = evs
                .iter()
                .find(|e| {
                    e["type"] == "tool_call.completed" && e["tool_call"]["id"] == c.id.as_str()
                })
                .unwrap_or_else(|| panic!("m{i}: {} not completed", c.id));
            assert_eq!(
                completed["tool_call"]["raw_arguments"].as_str(),
                Some(c.args.to_string().as_str()),
                "m{i} {}: raw arguments byte-exact",
                c.id
            );
        }
    }
    assert_eq!(
        worker.log().matches("store open").count(),
        1,
        "one worker process for the whole run: it reconnected, it was never restarted"
    );
}

// ---- a single server, SIGKILLed and restarted ----

const SINGLE_MESSAGES: usize = 24;

async fn single_server_killed_mid_run(bin: ServerBin) {
    let mut server = NatsServer::start_with(&bin).expect("nats-server starts");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(&server.url(), &dir.path().join("store"), &[]);
    let js = jetstream::new(client(&server.url()).await);
    wait_provisioned(&js, "toolstream").await;
    worker.wait_ready();
    let producer = Producer::new(js.clone());
    let tasks = spawn_paced_openai_streams(
        &producer,
        SINGLE_MESSAGES,
        calls_of,
        Duration::from_millis(40),
    );

    // Let part of the run happen, then take the server away under load and bring it back.
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(WAIT, "first events", |all| all.len() >= 5, || worker.log())
        .await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server
        .restart()
        .expect("server restarts on the same port and store");
    let published_after_restart = tasks.iter().any(|t| !t.is_finished());
    for t in tasks {
        t.await.unwrap();
    }
    finish_and_check(&mut events, &mut worker, SINGLE_MESSAGES, || {
        tail(&server.log(), 20)
    })
    .await;
    assert!(
        worker.log().contains("disconnected from NATS"),
        "the worker saw the outage"
    );
    assert!(
        published_after_restart,
        "input was still flowing when the server came back (the kill landed mid-run)"
    );
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

const CLUSTER_MESSAGES: usize = 18;

/// The worker's NATS connection name (`toolstream-<consumer>-p<partition>`).
const WORKER_CLIENT: &str = "toolstream-toolstream-p0";

/// A test client that knows every node, so it survives the loss of any one.
async fn cluster_client(cluster: &NatsCluster) -> async_nats::Client {
    let addrs: Vec<async_nats::ServerAddr> = cluster
        .urls()
        .iter()
        .map(|u| u.parse().expect("node URL"))
        .collect();
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(addrs)
        .await
        .expect("test client connects to the cluster")
}

/// The server name leading `stream`'s RAFT group, once there is one.
async fn stream_leader(js: &jetstream::Context, stream: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(mut s) = js.get_stream(stream).await {
            if let Ok(info) = s.info().await {
                if let Some(leader) = info.cluster.as_ref().and_then(|c| c.leader.clone()) {
                    return leader;
                }
            }
        }
        assert!(Instant::now() < deadline, "{stream} has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGKILLs node `k`, leaves it down while input flows, starts it again on the same ports and
/// store and waits until it has caught up.
async fn kill_and_bring_back(cluster: &mut NatsCluster, k: usize) {
    cluster.kill(k);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster
        .restart(k)
        .unwrap_or_else(|e| panic!("restart {}: {e}", cluster.name(k)));
    cluster
        .wait_current(k, WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn cluster_node_killed_mid_run(bin: ServerBin) {
    let mut cluster = NatsCluster::start(&bin).expect("three-node cluster starts");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(
        &cluster.urls_joined(),
        &dir.path().join("store"),
        &["--replicas", "3"],
    );
    let js = jetstream::new(cluster_client(&cluster).await);
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

    // Paced so that input is still flowing through both faults below.
    let producer = Producer::new(js.clone());
    let started = Instant::now();
    let tasks = spawn_paced_openai_streams(
        &producer,
        CLUSTER_MESSAGES,
        calls_of,
        Duration::from_millis(250),
    );
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "first events",
            |all| all.len() >= 3,
            || format!("{}\n{}", worker.log(), cluster.logs()),
        )
        .await;

    // First the node the worker is connected to (it must fail over to another), then the one
    // that leads the input stream (JetStream must elect another while input flows).
    let phase = |what: &str| {
        eprintln!(
            "nats-server {}: {what} at {:?}",
            bin.version,
            started.elapsed()
        )
    };
    let serving = cluster.nodes_serving(WORKER_CLIENT);
    let [worker_node] = serving[..] else {
        panic!("the worker is connected to one node, not {serving:?}");
    };
    phase(&format!(
        "killing {} (the worker's node)",
        cluster.name(worker_node)
    ));
    kill_and_bring_back(&mut cluster, worker_node).await;
    phase("it is back and current");
    let leader = stream_leader(&js, "TOOLSTREAM_IN").await;
    let leader_k = cluster.index_of(&leader).expect("leader is a node");
    let flowing_at_leader_kill = tasks.iter().any(|t| !t.is_finished());
    phase(&format!("killing {leader} (TOOLSTREAM_IN's leader)"));
    cluster.kill(leader_k);
    let new_leader = stream_leader_other_than(&js, &leader).await;
    phase(&format!("{new_leader} leads TOOLSTREAM_IN"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster
        .restart(leader_k)
        .unwrap_or_else(|e| panic!("restart {leader}: {e}"));
    cluster
        .wait_current(leader_k, WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    phase(&format!(
        "{leader} is back and current; input still flowing: {}",
        tasks.iter().any(|t| !t.is_finished())
    ));

    for t in tasks {
        t.await.unwrap();
    }
    finish_and_check(&mut events, &mut worker, CLUSTER_MESSAGES, || {
        cluster.logs()
    })
    .await;
    phase("all checked");
    assert!(
        worker.log().contains("disconnected from NATS"),
        "the worker lost its node and failed over"
    );
    assert!(
        flowing_at_leader_kill,
        "input was still flowing when the input stream's leader was killed (mid-run)"
    );
}

/// Waits until the input stream reports a leader other than `old` (it fails over after a kill).
async fn stream_leader_other_than(js: &jetstream::Context, old: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let leader = stream_leader(js, "TOOLSTREAM_IN").await;
        if leader != old {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "TOOLSTREAM_IN still led by the killed {old}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_node_and_input_leader_sigkilled_mid_run_on_nats_2_9() {
    cluster_node_killed_mid_run(require(debian_server())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_r3_node_and_input_leader_sigkilled_mid_run_on_current_nats() {
    cluster_node_killed_mid_run(require(current_server())).await;
}
