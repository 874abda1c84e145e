//! Leased workers (`--assignment leases`) with exactly the worker user's documented
//! permissions: two workers share the partitions (the lease bucket, a hand-off when the second
//! joins), checkpoints are written and read back, one worker is SIGKILLed and the other takes
//! its partitions over (deleting the earlier epochs' consumers, reading the ids already
//! published), and nothing any of it does is refused.

use super::*;

impl Deployed {
    /// A leased worker `id` as `toolstream-worker` with its own inbox and data directory.
    fn leased_worker(&self, id: &str) -> Worker {
        let parts = PARTITIONS.to_string();
        self.worker_user(
            id,
            &[
                "--partitions",
                &parts,
                "--assignment",
                "leases",
                "--lease-ttl",
                "3s",
                "--checkpoint-interval",
                "1s",
                "--worker-id",
                id,
            ],
        )
    }
}

/// Waits until `log` says `what` (a line containing it).
async fn logged(w: &Worker, what: &str) {
    eventually_async(WAIT, || async move { w.log().contains(what) })
        .await
        .unwrap_or_else(|| panic!("never logged {what:?}:\n{}", tail(&w.log(), 40)));
}

/// Waits until message `msg`'s `message.completed` is in the events stream.
async fn completed(events: &mut StreamLog, msg: &str, w: &Worker) {
    let suffix = format!(".{msg}");
    events
        .until(
            WAIT,
            &format!("{msg}'s message.completed"),
            |all| {
                all.iter().any(|r| {
                    r.subject.ends_with(&suffix) && r.json()["type"] == "message.completed"
                })
            },
            || w.log(),
        )
        .await;
}

#[tokio::test]
async fn leased_workers_need_nothing_beyond_the_documented_permissions() {
    let d = deploy(|p| p).await;
    let (producer, producer_refusals, _ui, ui_refusals) = tenant_clients(&d.server.url()).await;
    let mut events = StreamLog::new(&d.admin_js(), "TOOLSTREAM_EVENTS");

    // one worker takes every partition and checkpoints them
    let mut a = d.leased_worker("wa");
    a.wait_ready();
    publish_a_stream_its_result_and_a_bad_chunk(&producer).await;
    completed(&mut events, "m1", &a).await;
    logged(&a, "checkpoint uploaded").await;

    // a second joins: a hand-off, and its partitions start from a checkpoint
    let mut b = d.leased_worker("wb");
    b.wait_ready();
    logged(&b, "restored the partition's checkpoint").await;
    logged(&a, "partition handed off").await;

    // the first is killed: the second takes over (earlier epochs' consumers deleted)
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill();
    logged(&b, "deleted the consumer of an earlier lease").await;
    producer
        .openai_stream(CONV_A, "m3", &[call("call_c1", "z")])
        .await;
    completed(&mut events, "m3", &b).await;
    assert!(b.terminate(), "clean exit:\n{}", tail(&b.log(), 30));
    let logs = format!("{}\n{}", a.log(), b.log());
    assert_nothing_refused(
        &logs,
        &d.server_violations(),
        &producer_refusals,
        &ui_refusals,
    );
}
