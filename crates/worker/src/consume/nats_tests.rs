//! The consume loop in-process against a real nats-server (started by the testkit): provisioned
//! by the worker's own code, fed by a producer, its store an in-memory one the test reads.

use super::watermark::{now_ms, Settled, Watermark};
use super::ConsumeLoop;
use crate::nats::provision;
use crate::run::config::Config;
use crate::run::duration::HumanDuration;
use crate::run::shutdown::{self, Trigger};
use crate::serve::metrics::Metrics;
use assembler::Store;
use async_nats::jetstream::{self, consumer::PullConsumer};
use chunk_model::wire::Subjects;
use chunk_model::MessageStatus;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use toolstream_testkit::harness::{client, wait_settled, Call, Producer, WAIT};
use toolstream_testkit::{openai, NatsServer};

/// A provisioned server and a consume loop running on it.
struct Running {
    _server: NatsServer,
    js: jetstream::Context,
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    relay_wake: Arc<Notify>,
    watermark: Arc<Watermark>,
    stop: Trigger,
    task: JoinHandle<()>,
}

/// Starts a server, provisions it as `toolstream run` does, publishes with `produce`, then
/// starts the loop (whose store ends an idle stream after `idle_timeout_ms`).
async fn start<F, Fut>(idle_timeout_ms: u64, produce: F) -> Running
where
    F: FnOnce(Producer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let server = NatsServer::start().expect("nats-server starts");
    let js = jetstream::new(client(&server.url()).await);
    let mut config = Config::default();
    config.consumer.fetch_expiry = HumanDuration(Duration::from_secs(1));
    config.consumer.tick_interval = HumanDuration(Duration::from_millis(100));
    config.assembler.idle_timeout_ms = idle_timeout_ms;
    let subjects = Subjects::new(&config.subject_prefix);
    let consumers: Vec<PullConsumer> = match provision::provision(&js, &config, &subjects).await {
        Ok(consumers) => consumers,
        Err(_) => panic!("provisioning a fresh server fails"),
    };
    produce(Producer::new(js.clone())).await;
    let store = Arc::new(Store::open_memory(config.assembler.clone()).expect("memory store"));
    let metrics = Arc::new(Metrics::default());
    let relay_wake = Arc::new(Notify::new());
    let watermark = Arc::new(Watermark::default());
    let consume = ConsumeLoop {
        store: Arc::clone(&store),
        js: js.clone(),
        subjects,
        metrics: Arc::clone(&metrics),
        relay_wake: Arc::clone(&relay_wake),
        config: config.consumer.clone(),
        #[cfg(feature = "failpoints")]
        abort_after_flushes: None,
        watermark: Arc::clone(&watermark),
        store_failures: Default::default(),
    };
    let (stop, shutdown) = shutdown::channel();
    let task = tokio::spawn(consume.run(consumers, shutdown));
    Running {
        _server: server,
        js,
        store,
        metrics,
        relay_wake,
        watermark,
        stop,
        task,
    }
}

impl Running {
    /// Asks the loop to stop and waits for it (a few seconds at most).
    async fn stop(self) {
        self.stop.trigger();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the loop stops soon after shutdown")
            .expect("the loop does not panic");
    }
}

#[tokio::test]
async fn a_published_stream_is_applied_acked_and_the_relay_woken_and_shutdown_stops_the_loop() {
    let call = Call {
        id: "call_1".into(),
        name: "get_weather".into(),
        args: serde_json::json!({"city": "Paris"}),
    };
    let chunks = toolstream_testkit::harness::openai_chat_stream(std::slice::from_ref(&call));
    let run = start(300_000, |p| async move {
        p.openai_stream("c1", "m1", &[call]).await;
    })
    .await;
    tokio::time::timeout(WAIT, run.relay_wake.notified())
        .await
        .expect("the relay is woken once events are durable");
    wait_settled(&run.js, "toolstream")
        .await
        .expect("every chunk acked");
    let snapshot = run
        .store
        .message_snapshot("c1", "m1")
        .expect("store readable")
        .expect("message stored");
    assert_eq!(snapshot.status, MessageStatus::Completed);
    assert_eq!(snapshot.calls.len(), 1);
    assert_eq!(snapshot.calls[0].tool_call.name, "get_weather");
    assert_eq!(
        run.metrics.chunks_in.load(Ordering::Relaxed),
        chunks.len() as u64,
        "each chunk consumed once"
    );
    assert!(run.store.outbox_len() > 0, "events wait in the outbox");
    run.stop().await;
}

#[tokio::test]
async fn an_unroutable_message_goes_to_the_dlq_stream_with_its_reason_and_is_terminated() {
    let run = start(300_000, |p| async move {
        p.publish(
            "toolstream.chunks.only-one-token",
            async_nats::HeaderMap::new(),
            "bad-1",
            b"{}",
        )
        .await;
    })
    .await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("the message is settled (terminated), not left pending");
    let dlq = run
        .js
        .get_stream("TOOLSTREAM_DLQ")
        .await
        .expect("dlq stream");
    let letter = dlq
        .get_last_raw_message_by_subject("toolstream.dlq.unroutable")
        .await
        .expect("a dead letter on the unroutable subject");
    let reason = letter
        .headers
        .get("Toolstream-Reason")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    assert!(reason.starts_with("unroutable_subject"), "{reason}");
    assert_eq!(
        letter
            .headers
            .get("Toolstream-Subject")
            .map(|v| v.as_str().to_string())
            .as_deref(),
        Some("toolstream.chunks.only-one-token")
    );
    assert_eq!(&letter.payload[..], b"{}", "the body as sent");
    assert_eq!(run.metrics.dead_letters.load(Ordering::Relaxed), 1);
    assert_eq!(run.store.open_streams(), 0, "nothing reached the store");
    run.stop().await;
}

#[tokio::test]
async fn the_store_timers_run_at_the_settled_watermark_not_the_wall_clock() {
    let idle_ms = 200;
    let run = start(idle_ms, |p| async move {
        // a call starts, and its stream never says more
        let body = openai::call_start(0, "call_1", "f");
        p.chunk("c1", "m1", "openai-chat", 0, &body).await;
    })
    .await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("the chunk is acked");
    // many ticks and idle timeouts of wall clock later, the watermark is still unknown (0)
    tokio::time::sleep(Duration::from_millis(10 * idle_ms)).await;
    assert_eq!(run.store.open_streams(), 1, "no timer fires at watermark 0");
    // once everything published until well after the idle deadline is settled, it fires
    run.watermark.advance(&[Some(Settled::CaughtUp {
        asked_at_ms: now_ms() + 60_000,
    })]);
    let ended = toolstream_testkit::wait::eventually_async(WAIT, || async {
        run.store.open_streams() == 0
    })
    .await;
    assert!(ended.is_some(), "the idle stream is ended by a tick");
    let snapshot = run
        .store
        .message_snapshot("c1", "m1")
        .expect("store readable")
        .expect("message stored");
    assert_eq!(snapshot.status, MessageStatus::Completed);
    run.stop().await;
}
