//! The consume loop in-process against a real nats-server (started by the testkit): provisioned
//! by the worker's own code, fed by a producer, its store an in-memory one the test reads.

use super::testing::Gate;
use super::watermark::{now_ms, Settled, Watermark};
use super::ConsumeLoop;
use crate::nats::provision;
use crate::run::config::Config;
use crate::run::duration::HumanDuration;
use crate::run::shutdown::{self, Trigger};
use crate::serve::metrics::{InputLag, Metrics};
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
    let mut config = Config::default();
    config.assembler.idle_timeout_ms = idle_timeout_ms;
    config.consumer.tick_interval = HumanDuration(Duration::from_millis(100));
    let store = Arc::new(Store::open_memory(config.assembler.clone()).expect("memory store"));
    start_with(config, store, produce).await
}

/// [`start`] with the loop's config and store given.
async fn start_with<F, Fut>(config: Config, store: Arc<Store>, produce: F) -> Running
where
    F: FnOnce(Producer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    start_leased(config, store, produce, None).await
}

/// [`start_with`] for a partition held under `guard` (a lease), if given.
async fn start_leased<F, Fut>(
    mut config: Config,
    store: Arc<Store>,
    produce: F,
    guard: Option<Arc<dyn sink::guarded::Guard>>,
) -> Running
where
    F: FnOnce(Producer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let server = NatsServer::start().expect("nats-server starts");
    let js = jetstream::new(client(&server.url()).await);
    config.consumer.fetch_expiry = HumanDuration(Duration::from_secs(1));
    let subjects = Subjects::new(&config.subject_prefix);
    let consumers: Vec<PullConsumer> = match provision::provision(&js, &config, &subjects).await {
        Ok(consumers) => consumers,
        Err(_) => panic!("provisioning a fresh server fails"),
    };
    produce(Producer::new(js.clone())).await;
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
        guard,
        published: Default::default(),
        checkpoint: None,
        attempts: None,
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

/// The default config with no tick after the loop's first: a test that counts flushes or
/// relay wakes sees only its batches'.
fn without_ticks() -> Config {
    let mut config = Config::default();
    config.consumer.tick_interval = HumanDuration(Duration::from_secs(3600));
    config
}

/// [`start_with`] on a store whose commits wait at `commits` and flushes at `flushes` while
/// closed, with no tick after the first (its flush would pass a gate too); returns once that
/// first tick has flushed.
async fn start_gated(commits: &Arc<Gate>, flushes: &Arc<Gate>) -> Running {
    start_gated_with(without_ticks(), commits, flushes).await
}

/// [`start_gated`] with `config` (whose ticks must be as rare as [`without_ticks`]').
async fn start_gated_with(config: Config, commits: &Arc<Gate>, flushes: &Arc<Gate>) -> Running {
    start_gated_leased(config, commits, flushes, None).await
}

/// [`start_gated_with`] for a partition held under `guard`, if given.
async fn start_gated_leased(
    config: Config,
    commits: &Arc<Gate>,
    flushes: &Arc<Gate>,
    guard: Option<Arc<dyn sink::guarded::Guard>>,
) -> Running {
    let store = Arc::new(super::testing::gated_store(
        Arc::clone(commits),
        Arc::clone(flushes),
        config.assembler.clone(),
    ));
    let run = start_leased(config, store, |_| async {}, guard).await;
    let ticked = toolstream_testkit::wait::eventually_async(WAIT, || async {
        flushes.passed.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(ticked.is_some(), "the loop starts with a tick");
    run
}

/// A loop with `config` on a store where every commit of the first delivery of its one input
/// (a call's start chunk) fails, APPLY_ATTEMPTS in place: returns once that input is settled,
/// with its store error counted.
async fn one_input_whose_first_delivery_fails(config: Config) -> (Running, Arc<Store>) {
    let store = Arc::new(super::testing::flaky_store(super::apply::APPLY_ATTEMPTS));
    let run = start_with(config, Arc::clone(&store), |_| async {}).await;
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("the input is settled");
    assert_eq!(run.metrics.store_errors.load(Ordering::SeqCst), 1);
    (run, store)
}

/// Publishes the first chunk of `conv`/`msg`'s openai-chat stream (number 0): the start of
/// call `id` to function `name`.
async fn publish_call_start(
    js: &jetstream::Context,
    (conv, msg): (&str, &str),
    id: &str,
    name: &str,
) {
    let body = openai::call_start(0, id, name);
    Producer::new(js.clone())
        .chunk(conv, msg, "openai-chat", 0, &body)
        .await;
}

/// One call, `get_weather` for Paris, as `call_1`.
fn weather_call() -> Call {
    Call {
        id: "call_1".into(),
        name: "get_weather".into(),
        args: serde_json::json!({"city": "Paris"}),
    }
}

impl Running {
    /// Asks the loop to stop and waits for it (a few seconds at most).
    async fn stop(mut self) {
        self.stop_loop().await;
    }

    /// [`Running::stop`], keeping the server and the store to look at afterwards.
    async fn stop_loop(&mut self) {
        self.stop.trigger();
        tokio::time::timeout(Duration::from_secs(5), &mut self.task)
            .await
            .expect("the loop stops soon after shutdown")
            .expect("the loop does not panic");
    }
}

#[tokio::test]
async fn a_published_stream_is_applied_acked_and_the_relay_woken_and_shutdown_stops_the_loop() {
    let call = weather_call();
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

/// Every input's age since JetStream stored it is counted twice, when fetched and when it is
/// durable and acked (`toolstream_input_lag_seconds`): inputs left waiting 300 ms before the
/// loop starts are at least that old at both stages, and younger than the last bucket (2.5 s:
/// an age read in the wrong unit would be years).
#[tokio::test]
async fn each_input_is_counted_by_its_age_when_fetched_and_when_durable() {
    let call = weather_call();
    let chunks = toolstream_testkit::harness::openai_chat_stream(std::slice::from_ref(&call));
    let waited = Duration::from_millis(300);
    let run = start(300_000, |p| async move {
        p.openai_stream("c1", "m1", &[call]).await;
        tokio::time::sleep(waited).await;
    })
    .await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("every chunk acked");
    let lag = &run.metrics.input_lag;
    let n = chunks.len() as u64;
    // (acked after the durable count: settled means both are in)
    assert_lag_counts(lag, n, n);
    for (stage, h) in [("fetched", &lag.fetched), ("durable", &lag.durable)] {
        let buckets = h.bucket_counts();
        // the buckets up to 0.25 s hold nothing: every input was at least 300 ms old
        let young: u64 = buckets.iter().take(9).sum();
        assert_eq!(young, 0, "{stage}: no input younger than it was");
        // and every one is in a bucket (under 2.5 s), none past the last
        assert_eq!(buckets.iter().sum::<u64>(), n, "{stage}: {buckets:?}");
        assert!(
            h.sum_seconds() >= waited.as_secs_f64() * n as f64,
            "{stage}: the ages add up to at least the wait"
        );
    }
    assert!(
        lag.durable.sum_seconds() > lag.fetched.sum_seconds(),
        "an input is older when durable than when fetched"
    );
    run.stop().await;
}

/// An input whose apply failed is nak'd, not durable: its age is counted as durable once,
/// when its redelivery is applied and acked, while each delivery is counted when fetched.
#[tokio::test]
async fn an_input_nakd_after_a_failed_apply_is_counted_durable_once_when_acked() {
    let mut config = without_ticks();
    config.consumer.nak_delay = HumanDuration(Duration::from_millis(100));
    // nak'd after its first delivery, then redelivered and applied
    let (run, _store) = one_input_whose_first_delivery_fails(config).await;
    // both deliveries fetched, durable once: when acked
    assert_lag_counts(&run.metrics.input_lag, 2, 1);
    run.stop().await;
}

/// The same when the apply went through and the flush after it failed: the batch is nak'd,
/// and its input counted as durable only when the flush after its redelivery returned.
#[tokio::test]
async fn an_input_nakd_after_a_failed_flush_is_counted_durable_once_when_acked() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let mut config = without_ticks();
    config.consumer.nak_delay = HumanDuration(Duration::from_millis(100));
    // (returns after the loop's first tick flushed: the failure is the input's flush's)
    let run = start_gated_with(config, &commits, &flushes).await;
    flushes.fail_next(1);
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("the input is settled after its redelivery");
    // nak'd after the failed flush and redelivered (fetched twice), durable once
    assert_lag_counts(&run.metrics.input_lag, 2, 1);
    run.stop().await;
}

/// Asserts how many deliveries `lag` counted when fetched, and how many inputs when durable.
fn assert_lag_counts(lag: &InputLag, fetched: u64, durable: u64) {
    assert_eq!(
        (lag.fetched.count(), lag.durable.count()),
        (fetched, durable),
        "(fetched, durable) counts"
    );
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

/// What the server says of the durable consumer now.
async fn consumer_info(js: &jetstream::Context) -> jetstream::consumer::Info {
    let mut consumer: PullConsumer = js
        .get_stream("TOOLSTREAM_IN")
        .await
        .expect("input stream")
        .get_consumer("toolstream")
        .await
        .expect("consumer");
    consumer.info().await.expect("consumer info").clone()
}

/// The number of the durable consumer's messages delivered and not acked yet.
async fn unacked(js: &jetstream::Context) -> u64 {
    consumer_info(js).await.num_ack_pending as u64
}

/// Pins the loop's group commit (consume/batch.rs): a batch is acked only after a flush that
/// began after its commits returned, and the relay sees none of its events before; batches
/// fetched while a flush runs are applied meanwhile and share the next flush.
#[tokio::test]
async fn a_batch_is_acked_only_after_a_flush_begun_after_it_and_batches_applied_meanwhile_share_the_next(
) {
    let gate = Arc::new(Gate::default());
    let run = start_gated(&Default::default(), &gate).await;
    let store = Arc::clone(&run.store);
    // a test failure must not leave a flush waiting: the runtime would wait for it forever
    let _open_on_drop = OpenOnDrop(Arc::clone(&gate));
    // hold the flushes after the first tick's
    gate.close();
    let flushes_before = gate.passed.load(Ordering::SeqCst);
    // one chunk per stream: each is a batch of its own
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    let stored = |conv: &'static str, msg: &'static str| {
        let store = Arc::clone(&store);
        move || {
            let store = Arc::clone(&store);
            async move { store.message_snapshot(conv, msg).ok().flatten().is_some() }
        }
    };
    let applied = toolstream_testkit::wait::eventually_async(WAIT, stored("c1", "m1")).await;
    assert!(applied.is_some(), "the first chunk is applied");
    assert_eq!(unacked(&run.js).await, 1, "it waits for its flush, unacked");
    assert!(
        store.outbox_peek(100).expect("outbox").is_empty(),
        "the relay sees no event of a batch that is not durable"
    );

    // two more chunks arrive, one after the other, while the first flush is held: both are
    // applied, and wait
    for (conv, msg, id) in [("c2", "m2", "call_2"), ("c3", "m3", "call_3")] {
        publish_call_start(&run.js, (conv, msg), id, "g").await;
        let applied = toolstream_testkit::wait::eventually_async(WAIT, stored(conv, msg)).await;
        assert!(
            applied.is_some(),
            "{conv} is applied during the first flush"
        );
    }
    assert_eq!(
        gate.passed.load(Ordering::SeqCst),
        flushes_before,
        "no flush has returned since"
    );
    assert_eq!(unacked(&run.js).await, 3, "and nothing is acked");

    gate.open();
    wait_settled(&run.js, "toolstream")
        .await
        .expect("both batches acked once flushed");
    assert_eq!(
        gate.passed.load(Ordering::SeqCst),
        flushes_before + 2,
        "the held flush, then one flush for the two batches applied meanwhile"
    );
    assert!(!store.outbox_peek(100).expect("outbox").is_empty());
    run.stop().await;
}

/// A batch fetched while nothing else is applied, waiting or flushing (sparse input) is
/// flushed by its own apply task right after its commits: its flush does not wait for the loop
/// to take the batch back and hand it to another thread (consume/batch.rs). Pinned by holding
/// the test runtime's only thread, on which the loop runs, from the moment the batch's commit
/// is let through: the flush still runs, and the batch is acked only after it.
#[tokio::test]
async fn a_sparse_batch_is_flushed_by_its_apply_task_without_waiting_for_the_loop() {
    let commits = Arc::new(Gate::default());
    let flushes = Arc::new(Gate::default());
    let run = start_gated(&commits, &flushes).await;
    let store = Arc::clone(&run.store);
    let _open_on_drop = OpenOnDrop(Arc::clone(&commits));
    commits.close();
    let flushes_before = flushes.passed.load(Ordering::SeqCst);
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    let held = toolstream_testkit::wait::eventually_async(WAIT, || async {
        commits.held.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(held.is_some(), "the chunk's commit waits at the gate");
    assert_eq!(
        flushes.passed.load(Ordering::SeqCst),
        flushes_before,
        "nothing flushed before the commit"
    );

    // From here until the flush returns, this thread, the runtime's only one, is not given
    // back: the loop cannot run.
    commits.open();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while flushes.passed.load(Ordering::SeqCst) == flushes_before
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        flushes.passed.load(Ordering::SeqCst),
        flushes_before + 1,
        "the batch was flushed while the loop could not run"
    );
    assert_eq!(commits.passed.load(Ordering::SeqCst), 1, "after its commit");

    wait_settled(&run.js, "toolstream")
        .await
        .expect("the batch is acked once flushed");
    assert_eq!(
        flushes.passed.load(Ordering::SeqCst),
        flushes_before + 1,
        "one flush for the batch: the loop started none of its own"
    );
    assert!(store
        .message_snapshot("c1", "m1")
        .expect("readable")
        .is_some());
    run.stop().await;
}

/// The relay is woken after a flush only when that flush made outbox rows durable
/// (`Store::take_relay_news`): a batch of fragments that completes nothing, the usual batch
/// of sparse input, costs no relay round that would find nothing to publish.
#[tokio::test]
async fn the_relay_is_woken_only_by_a_flush_that_made_rows_durable() {
    use futures::FutureExt;
    // no tick during the test: only the batches' flushes wake the relay
    let config = without_ticks();
    let store = Arc::new(Store::open_memory(config.assembler.clone()).expect("memory store"));
    let run = start_with(config, Arc::clone(&store), |_| async {}).await;
    let producer = Producer::new(run.js.clone());
    // each chunk is a batch of its own, settled (acked after its flush and the wake) before
    // the next is sent
    let steps = [
        (
            openai::call_start(0, "call_1", "f"),
            true,
            "tool_call.started",
        ),
        (openai::args_chunk(0, "{\"city\":"), false, "a fragment"),
        (
            openai::args_chunk(0, "\"Paris\"}"),
            false,
            "another fragment",
        ),
        (
            openai::finish_chunk("tool_calls"),
            true,
            "tool_call.completed",
        ),
    ];
    for (seq, (body, wakes, what)) in steps.iter().enumerate() {
        producer
            .chunk("c1", "m1", "openai-chat", seq as u64, body)
            .await;
        wait_settled(&run.js, "toolstream")
            .await
            .expect("the chunk is acked");
        // a wake with no task waiting leaves a permit: taken at once if there is one
        let woken = run.relay_wake.notified().now_or_never().is_some();
        assert_eq!(woken, *wakes, "{what}: relay woken {woken}");
    }
    assert_eq!(
        run.store.outbox_len(),
        3,
        "started, completed and message.completed wait in the outbox"
    );
    run.stop().await;
}

/// An input the store keeps failing to take is given up on after `max_deliver` attempts:
/// dead-lettered through the store and flushed while its batch is settled, after that batch's
/// own wake decision. That flush made a row durable, so the relay is woken for it too, not
/// left to find it at its next interval.
#[tokio::test]
async fn an_input_given_up_on_wakes_the_relay_for_its_dead_letter() {
    use futures::FutureExt;
    let mut config = without_ticks();
    // given up on after its first delivery: every commit of it fails (APPLY_ATTEMPTS in
    // place), and the dead letter's commit is the first to succeed
    config.consumer.max_deliver = 1;
    let (run, store) = one_input_whose_first_delivery_fails(config).await;
    let rows = store.outbox_peek(10).expect("outbox");
    assert!(
        rows.iter()
            .any(|r| r.kind == assembler::OutboxKind::DeadLetter),
        "its dead letter is durable: {:?}",
        rows.iter().map(|r| r.kind).collect::<Vec<_>>()
    );
    assert!(
        run.relay_wake.notified().now_or_never().is_some(),
        "the relay is woken for it"
    );
    run.stop().await;
}

/// Opens the gate when dropped.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A timer tick while a batch is applied lets that apply finish and runs between applies;
/// afterwards the loop goes on with the applied batch and what was fetched meanwhile. (Found
/// as a hang: the tick let the apply finish and ran, but nothing started the flush of that
/// batch or the apply of the rest, so they waited for input that never came.) Ticks every
/// millisecond over many streams make them fall during applies.
#[tokio::test]
async fn ticks_during_applies_leave_nothing_unapplied_or_unacked() {
    let mut config = Config::default();
    config.consumer.tick_interval = HumanDuration(Duration::from_millis(1));
    let store = Arc::new(Store::open_memory(config.assembler.clone()).expect("memory store"));
    let calls: Vec<Call> = (0..3)
        .map(|i| Call {
            id: format!("call_{i}"),
            name: "get_weather".into(),
            args: serde_json::json!({"city": "Paris", "n": i}),
        })
        .collect();
    let streams = 40;
    let run = start_with(config, Arc::clone(&store), |p| {
        let calls = calls.clone();
        async move {
            for s in 0..streams {
                p.openai_stream(&format!("c{s}"), "m", &calls).await;
            }
        }
    })
    .await;
    // well before `ack_wait` (60 s): a stranded batch would come back only as redeliveries
    tokio::time::timeout(Duration::from_secs(20), wait_settled(&run.js, "toolstream"))
        .await
        .expect("settled long before ack_wait")
        .expect("every chunk applied and acked");
    for s in 0..streams {
        let snapshot = store
            .message_snapshot(&format!("c{s}"), "m")
            .expect("store readable")
            .expect("message stored");
        assert_eq!(snapshot.status, MessageStatus::Completed, "stream c{s}");
        assert_eq!(snapshot.calls.len(), 3);
    }
    run.stop().await;
}

/// [`without_ticks`] with short batches of an idle loop lingering `linger` for more.
fn lingering(linger: Duration) -> Config {
    let mut config = without_ticks();
    config.consumer.batch_linger = HumanDuration(linger);
    config
}

/// The longest linger the config takes: long enough that a test's own pauses fall inside it.
const LONG_LINGER: Duration = Duration::from_secs(1);

/// [`lingering`] past the test's waits (a test config is not validated): a batch that
/// lingers is not seen applied in time; and an ack wait longer still, or a redelivery of
/// what the loop holds unacked would fill a lingering batch.
fn lingering_past_the_test() -> Config {
    let mut config = lingering(WAIT * 2);
    config.consumer.ack_wait = HumanDuration(WAIT * 4);
    config
}

/// [`lingering_past_the_test`] in batches of two: a batch goes only once full (or with the
/// pipeline busy, at once).
fn pairs_lingering_past_the_test() -> Config {
    let mut config = lingering_past_the_test();
    config.consumer.batch_size = 2;
    config
}

/// Asserts that nothing went through `commits` yet: an input published at `published` still
/// lingers (a machine too slow to look well within the linger says nothing).
fn assert_still_lingering(commits: &Gate, published: std::time::Instant, what: &str) {
    if published.elapsed() < LONG_LINGER - Duration::from_millis(200) {
        assert_eq!(commits.passed.load(Ordering::SeqCst), 0, "{what}");
    }
}

/// Whether the store knows `conv`/`msg`.
fn has_message(store: &Store, (conv, msg): (&str, &str)) -> bool {
    store
        .message_snapshot(conv, msg)
        .expect("store readable")
        .is_some()
}

/// Waits until the consumer has delivered `n` messages not acked yet (the loop holds them).
async fn wait_unacked(js: &jetstream::Context, n: u64) {
    let held =
        toolstream_testkit::wait::eventually_async(WAIT, || async { unacked(js).await == n }).await;
    assert!(held.is_some(), "{n} delivered and not acked");
}

/// Waits until `gate` has let `n` commits (or flushes) through.
async fn wait_passed(gate: &Gate, n: u64) -> bool {
    toolstream_testkit::wait::eventually_async(WAIT, || async {
        gate.passed.load(Ordering::SeqCst) == n
    })
    .await
    .is_some()
}

/// Sparse input shares its batches (`consumer.batch_linger`, `gather` in consume/mod.rs): a
/// chunk that finds the loop idle waits for the next, and the two are applied as one batch
/// and made durable by one flush. Without the linger the first, fetched alone, would have
/// been applied and flushed alone long before the second was published.
/// (Batches of two, and a linger and an ack wait that outlast the test: the two go together
/// however slow the machine, and only without the linger would the first go alone.)
#[tokio::test]
async fn inputs_arriving_within_the_linger_of_an_idle_loop_share_one_batch_and_one_flush() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let run = start_gated_with(pairs_lingering_past_the_test(), &commits, &flushes).await;
    let flushes_before = flushes.passed.load(Ordering::SeqCst);
    let batches_before = run.metrics.batch_apply.count();
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    wait_unacked(&run.js, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish_call_start(&run.js, ("c2", "m2"), "call_2", "g").await;
    wait_settled(&run.js, "toolstream")
        .await
        .expect("both inputs are acked");
    assert_eq!(commits.passed.load(Ordering::SeqCst), 2, "both applied");
    assert_eq!(
        run.metrics.batch_apply.count() - batches_before,
        1,
        "in one batch"
    );
    assert_eq!(
        flushes.passed.load(Ordering::SeqCst) - flushes_before,
        1,
        "made durable by one flush"
    );
    assert!(has_message(&run.store, ("c1", "m1")) && has_message(&run.store, ("c2", "m2")));
    run.stop().await;
}

/// A chunk with nothing after it waits out the linger: it is not applied while the linger
/// lasts, and is applied, flushed and acked once it runs out, with no more input to end it.
#[tokio::test]
async fn a_lone_input_waits_out_the_linger_and_is_then_applied_and_acked() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let run = start_gated_with(lingering(LONG_LINGER), &commits, &flushes).await;
    let published = std::time::Instant::now();
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_still_lingering(&commits, published, "not applied while it lingers");
    wait_settled(&run.js, "toolstream")
        .await
        .expect("acked once the linger ran out");
    assert_eq!(commits.passed.load(Ordering::SeqCst), 1);
    assert!(has_message(&run.store, ("c1", "m1")));
    run.stop().await;
}

/// The linger is for an idle loop only: a batch fetched while another is flushed is applied
/// at once (it waits for the flush in flight anyway). The linger here outlasts the test's
/// waits, so a batch that lingered would never be seen applied.
#[tokio::test]
async fn a_batch_fetched_while_another_is_flushed_is_applied_without_lingering() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let run = start_gated_with(pairs_lingering_past_the_test(), &commits, &flushes).await;
    let _open_on_drop = OpenOnDrop(Arc::clone(&flushes));
    flushes.close();
    // two chunks fill a batch of two: it goes at once, and its flush is held
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    publish_call_start(&run.js, ("c2", "m2"), "call_2", "g").await;
    assert!(
        wait_passed(&commits, 2).await,
        "a full batch does not linger"
    );
    let held = toolstream_testkit::wait::eventually_async(WAIT, || async {
        flushes.held.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(held.is_some(), "its flush waits at the gate");
    // a third arrives while that flush is held: a batch of one, applied at once
    publish_call_start(&run.js, ("c3", "m3"), "call_3", "h").await;
    assert!(
        wait_passed(&commits, 3).await,
        "applied while the flush is held"
    );
    assert_eq!(flushes.held.load(Ordering::SeqCst), 1, "still held");
    flushes.open();
    wait_settled(&run.js, "toolstream")
        .await
        .expect("all three acked once flushed");
    assert!(has_message(&run.store, ("c3", "m3")));
    run.stop().await;
}

/// Shutdown asked for while a batch lingers ends the linger: the batch in hand is applied,
/// flushed and acked before the loop stops, so nothing fetched is left for redelivery.
#[tokio::test]
async fn shutdown_during_a_linger_applies_and_acks_the_batch_in_hand() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let mut run = start_gated_with(lingering(LONG_LINGER), &commits, &flushes).await;
    let published = std::time::Instant::now();
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    wait_unacked(&run.js, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_still_lingering(&commits, published, "it lingers");
    run.stop_loop().await;
    assert_eq!(commits.passed.load(Ordering::SeqCst), 1, "applied");
    wait_unacked(&run.js, 0).await;
    let pending = consumer_info(&run.js).await.num_pending;
    assert_eq!(pending, 0, "nothing left to deliver");
    assert!(has_message(&run.store, ("c1", "m1")));
}

/// A lease, held while its flag is set (cleared: a lapsed or stolen lease, as the engine's
/// guard sees it).
struct Lease(std::sync::atomic::AtomicBool);

impl sink::guarded::Guard for Lease {
    fn is_valid(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn owner(&self) -> String {
        "test-worker/1".into()
    }
}

/// A lease lost while a batch lingers: the batch is dropped, neither applied nor acked (the
/// guard's promise: once the lease no longer holds, the loop acks and fetches nothing more;
/// the partition's new owner reads it through its own consumer). Shutdown ends the linger
/// here; without the lease check after it, the batch would be applied.
#[tokio::test]
async fn a_lease_lost_while_a_batch_lingers_leaves_the_batch_unapplied_and_unacked() {
    let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let lease = Arc::new(Lease(std::sync::atomic::AtomicBool::new(true)));
    let config = lingering_past_the_test();
    let guard: Arc<dyn sink::guarded::Guard> = lease.clone();
    let mut run = start_gated_leased(config, &commits, &flushes, Some(guard)).await;
    publish_call_start(&run.js, ("c1", "m1"), "call_1", "f").await;
    wait_unacked(&run.js, 1).await;
    lease.0.store(false, Ordering::SeqCst);
    run.stop_loop().await;
    assert_eq!(commits.passed.load(Ordering::SeqCst), 0, "not applied");
    assert!(!has_message(&run.store, ("c1", "m1")));
    assert_eq!(
        unacked(&run.js).await,
        1,
        "not acked: the new owner gets it"
    );
}
