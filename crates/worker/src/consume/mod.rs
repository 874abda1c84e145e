//! The consume loop (docs/contracts.md, "Consume loop"): fetch a batch → parse subject and
//! headers into assembler inputs → apply each (one atomic commit each) → ONE flush → wake the
//! relay if the flush made outbox rows durable → ack the batch. A short batch fetched while
//! nothing is applied or flushed waits up to `consumer.batch_linger` for more ([`gather`]).
//! Pipelined ([`batch`]): one apply and one flush at a time run on the blocking pool while
//! the loop goes on fetching; what was fetched meanwhile is the next apply's batch, and the
//! batches applied meanwhile share the next flush (with none running or waiting, the apply
//! task flushes its batch itself); a batch is acked only after a flush that began after it
//! was applied returned.
//!
//! A message delivered before, or (leased partitions) delivered to an earlier owner that never
//! acked it, is applied alone behind a durable note ([`poison`]).
//!
//! Every message gets exactly one of these decisions ([`settle::Disposition`]), made once:
//! - applied, duplicate or parked → `Ack` after the flush;
//! - dead-lettered by the store (undecodable, no provider, over a limit) → `Term` after the
//!   flush (the dead letter is already a durable outbox row the relay publishes);
//! - not attributable (bad subject) or bad headers → published straight to the DLQ, PubAck
//!   awaited, then `Term`;
//! - a storage error, a failed flush, or a failed DLQ publish → `Nak` with a delay (retried; the
//!   consumer's `max_deliver` bounds the retries).
//!
//! Timeouts (`Store::tick`) run in the same task between batches, so one task writes the store.
//!
//! Clock: every input is applied at its publish time (JetStream's timestamp), and timeouts run
//! at the settled watermark ([`watermark`]), never at the wall clock: a stream's timer
//! cannot run out while input published before its deadline is still queued or waiting to be
//! redelivered after a crash.

mod apply;
mod batch;
mod delivery;
pub(crate) mod inputs;
#[cfg(test)]
mod nats_tests;
mod poison;
pub(crate) mod settle;
#[cfg(test)]
mod testing;
pub(crate) mod watermark;

use crate::consume::watermark::Watermark;
use crate::run::config::ConsumerConfig;
use crate::run::shutdown::Shutdown;
use crate::serve::metrics::Metrics;
use assembler::{Store, StoreError};
use async_nats::jetstream::consumer::pull::MessagesError;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use chunk_model::wire::Subjects;
use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use settle::StoreFailures;
use sink::backoff::Backoff;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Everything the loop needs.
pub struct ConsumeLoop {
    /// The store (single writer: this loop).
    pub store: Arc<Store>,
    /// For DLQ publishes of rejected messages.
    pub js: jetstream::Context,
    /// Subject names.
    pub subjects: Subjects,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Woken after a flush that made outbox rows durable (`Store::take_relay_news`).
    pub relay_wake: Arc<Notify>,
    /// Batch size, expiry, delays.
    pub config: ConsumerConfig,
    /// Test failpoint: abort the process after this many batch flushes, before the batch is
    /// acked (the window in which a crash makes the server redeliver applied input).
    #[cfg(feature = "failpoints")]
    pub abort_after_flushes: Option<u64>,
    /// The clock of the store's timers (see the module docs).
    pub watermark: Arc<Watermark>,
    /// Storage failures per input stream sequence, in this process.
    pub store_failures: StoreFailures,
    /// The lease this partition is owned under (leased mode, `crate::ownership`); `None`
    /// for a statically assigned partition. Once it no longer holds, the loop acks, naks and
    /// fetches nothing more and stops: the partition belongs to another worker now.
    pub guard: Option<Arc<dyn sink::guarded::Guard>>,
    /// `Nats-Msg-Id`s already in the events and dead-letter streams when a leased partition
    /// was taken over (empty otherwise): an input dead letter among them is not published
    /// again by the rebuild.
    pub published: Arc<std::collections::HashSet<String>>,
    /// A leased partition's checkpoints, written between batches when due
    /// (`crate::run::checkpoint`); `None` for a static partition.
    pub checkpoint: Option<crate::run::checkpoint::Writer>,
    /// A leased partition's poison note (`crate::ownership::attempts`), kept in NATS so it
    /// moves with the partition: the inputs earlier owners were delivered and never acked
    /// are applied alone behind it, like redelivered ones. `None` for a static partition,
    /// whose note is kept in its own store.
    pub attempts: Option<Arc<crate::ownership::attempts::Attempts>>,
}

/// One item of a merged pull stream: a message or a stream status error, or `None` when one of
/// the merged streams ended (then all are re-opened).
type Pulled = Option<Result<jetstream::Message, MessagesError>>;

/// The pull streams of every consumer this worker reads, merged.
type Merged = SelectAll<BoxStream<'static, Pulled>>;

impl ConsumeLoop {
    /// Runs until `shutdown`, reading all `consumers` (one unpartitioned, two per partition)
    /// as one stream; finishes the batch in hand, then naks what was prefetched so it is
    /// redelivered at once to whoever consumes next.
    pub async fn run(mut self, consumers: Vec<PullConsumer>, mut shutdown: Shutdown) {
        let mut checkpoint = self.checkpoint.take();
        let mut tick = tokio::time::interval(self.config.tick_interval.get());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut messages: Option<Merged> = None;
        // applied batches on their way to durability (see `batch`)
        let mut pipeline = batch::Pipeline::default();
        loop {
            if shutdown.is_triggered() || !self.holds_lease() {
                break;
            }
            let stream = match messages.as_mut() {
                Some(s) => s,
                None => match open_with_backoff(|| self.open(&consumers), &mut shutdown).await {
                    Some(s) => messages.insert(s),
                    None => break,
                },
            };
            tokio::select! {
                biased;
                _ = shutdown.wait() => break,
                flushed = batch::flush_done(&mut pipeline.in_flight) => {
                    self.flushed(&mut pipeline, flushed).await
                }
                applied = batch::apply_done(&mut pipeline.applying) => {
                    self.applied(&mut pipeline, applied)
                }
                _ = tick.tick() => {
                    // (timers run between applies, never between two inputs of a batch)
                    let done = batch::apply_done_now(&mut pipeline.applying).await;
                    self.tick().await;
                    if let Some(writer) = checkpoint.as_mut().filter(|w| w.due()) {
                        writer.take(&self.store).await;
                    }
                    self.applied(&mut pipeline, done);
                }
                next = stream.next() => {
                    // (room for a whole batch, up to 1,024: a message is a large value to
                    // move again at every doubling)
                    let mut batch = Vec::with_capacity(self.config.batch_size.clamp(1, 1024));
                    let end = match into_batch(next, &mut batch) {
                        Some(end) => end,
                        None => {
                            // (with nothing applied or flushed, a short batch lingers: see
                            // `gather`)
                            let linger = match pipeline.is_empty() {
                                true => self.config.batch_linger.get(),
                                false => Duration::ZERO,
                            };
                            let end = gather(
                                stream,
                                &mut batch,
                                self.config.batch_size,
                                linger,
                                &mut shutdown,
                            )
                            .await;
                            if !self.holds_lease() {
                                // lost meanwhile (a linger can last a while): the partition
                                // is another worker's now, and nothing fetched is applied or
                                // acked here
                                break;
                            }
                            self.process(batch, &mut pipeline).await;
                            end
                        }
                    };
                    match end {
                        BatchEnd::Open => {}
                        BatchEnd::Status(e) => {
                            // missing heartbeats while the server restarts, etc.: the stream
                            // re-issues its pull requests itself
                            tracing::debug!(error = %e, "pull stream status");
                            if self.guard.is_some() && self.consumer_gone(&consumers).await {
                                // A leased partition whose consumer was deleted (an operator,
                                // a lapsed lease's successor) would stall with its lease held:
                                // the loop ends, the host gives the lease back, and the
                                // partition is rebuilt by its next owner.
                                tracing::warn!("the partition's consumer is gone; giving the partition back");
                                break;
                            }
                        }
                        BatchEnd::Ended => {
                            tracing::warn!("a pull stream ended; re-opening");
                            messages = None;
                        }
                    }
                }
            }
        }
        // what is applied is settled (acked once durable) before anything is handed back
        self.settle_all(&mut pipeline).await;
        if let Some(writer) = checkpoint.as_mut().filter(|_| self.holds_lease()) {
            // a graceful stop (hand-off, shutdown) leaves a checkpoint of everything applied,
            // so the partition's next owner reads no input again
            writer.take(&self.store).await;
            writer.finish().await;
        }
        if !self.holds_lease() {
            tracing::warn!(
                "lease lost: the consume loop stopped without acking or returning anything \
                 more (the new owner reads this partition through its own consumer)"
            );
            return;
        }
        if let Some(stream) = messages.as_mut() {
            let mut returned = 0usize;
            while let Some(Some(Some(Ok(m)))) = stream.next().now_or_never() {
                let _ = m.ack_with(AckKind::Nak(None)).await;
                returned += 1;
            }
            if returned > 0 {
                tracing::info!(returned, "returned prefetched messages for redelivery");
            }
        }
        if let Some(attempts) = &self.attempts {
            // Everything applied is settled and the prefetched rest returned: the next owner
            // need not apply this owner's unacked deliveries alone.
            let names = consumers
                .iter()
                .map(|c| c.cached_info().name.clone())
                .collect();
            if let Err(e) = attempts.stopped_cleanly(names).await {
                tracing::warn!(error = %e, "cannot mark the clean stop in the poison note");
            }
        }
        tracing::info!("consume loop stopped");
    }

    /// Whether one of `consumers` no longer exists on the server (a transient error is not
    /// "gone").
    async fn consumer_gone(&self, consumers: &[PullConsumer]) -> bool {
        for consumer in consumers {
            let mut consumer = consumer.clone();
            if let Err(e) = consumer.info().await {
                // JetStream's error 10014, as async-nats reports it
                if e.to_string().to_lowercase().contains("consumer not found") {
                    return true;
                }
            }
        }
        false
    }

    /// Whether this loop may still act for its partition: always when statically assigned,
    /// else while its lease holds.
    pub(crate) fn holds_lease(&self) -> bool {
        self.guard.as_ref().is_none_or(|g| g.is_valid())
    }

    /// Opens a pull stream per consumer and merges them; each ends with one `None` item.
    async fn open(&self, consumers: &[PullConsumer]) -> anyhow::Result<Merged> {
        let expires = self.config.fetch_expiry.get();
        let mut streams: Vec<BoxStream<'static, Pulled>> = Vec::with_capacity(consumers.len());
        for consumer in consumers {
            let s = consumer
                .stream()
                .max_messages_per_batch(self.config.batch_size)
                .expires(expires)
                .heartbeat(expires / 4)
                .messages()
                .await?;
            streams.push(
                s.map(Some)
                    .chain(futures::stream::once(async { None }))
                    .boxed(),
            );
        }
        Ok(futures::stream::select_all(streams))
    }

    /// Runs timeouts and retention, and flushes what they wrote. The flush is unconditional:
    /// retention deletes without creating events, and an idle worker would otherwise keep
    /// those deletions in memory (a flush with nothing buffered costs one sled flush call).
    async fn tick(&self) {
        let store = Arc::clone(&self.store);
        let now = self.watermark.get();
        let result = tokio::task::spawn_blocking(move || {
            let changed = store.tick(now)?;
            store.flush()?;
            Ok::<usize, StoreError>(changed)
        })
        .await;
        match result {
            Ok(Ok(n)) => {
                if n > 0 {
                    tracing::debug!(streams = n, "timeouts applied");
                }
                // the timeouts' events, or a batch's that this flush made durable first
                if self.store.take_relay_news() {
                    self.relay_wake.notify_one();
                }
            }
            Ok(Err(e)) => {
                Metrics::add(&self.metrics.store_errors, 1);
                tracing::error!(error = %e, "tick failed; will retry");
            }
            Err(e) => tracing::error!(error = %e, "tick task failed"),
        }
    }
}

/// Why a batch stopped growing.
#[derive(Debug)]
enum BatchEnd {
    /// It is full, nothing more was there, its linger is over, or shutdown was asked for.
    Open,
    /// The pull stream reported a status error (missing heartbeats, a deleted consumer, ...).
    Status(MessagesError),
    /// A merged stream ended: all are re-opened.
    Ended,
}

/// Puts a pulled message into `batch` (`None`: the batch can grow), or says why the batch
/// ends here.
fn into_batch(pulled: Option<Pulled>, batch: &mut Vec<jetstream::Message>) -> Option<BatchEnd> {
    match pulled {
        Some(Some(Ok(m))) => {
            batch.push(m);
            None
        }
        Some(Some(Err(e))) => Some(BatchEnd::Status(e)),
        Some(None) | None => Some(BatchEnd::Ended),
    }
}

/// Fills `batch` (one message in it) up to `batch_size` with what the pull stream already
/// holds; then, with a `linger` and the batch still short, goes on filling it with what
/// arrives until it is full, `linger` has passed (taking what arrived by then) or `shutdown`
/// is asked for. A status report or the end of a merged stream ends the batch at once (the
/// loop handles either after the batch, as it would have without it).
///
/// Why linger: every batch pays one flush (an append and an `fdatasync`) and its hand-offs
/// between threads (apply, flush, acks, relay), whatever its size. When input is sparse and
/// nothing is being applied or flushed, a batch would otherwise be the one or few messages
/// that arrived since the last: a short wait lets the inputs arriving meanwhile share that
/// cost. The caller lingers only with an idle pipeline: while a batch is applied or flushed,
/// what arrives queues for the next apply anyway. (Waiting on the timer alone and taking
/// what queued meanwhile, without a wake-up per message, cost fewer context switches but
/// more latency: a batch that fills early still waits out the linger. README, "Batches that
/// wait for company".)
async fn gather<S>(
    stream: &mut S,
    batch: &mut Vec<jetstream::Message>,
    batch_size: usize,
    linger: Duration,
    shutdown: &mut Shutdown,
) -> BatchEnd
where
    S: futures::Stream<Item = Pulled> + Unpin,
{
    match take_ready(stream, batch, batch_size) {
        Some(end) => return end,
        None if linger.is_zero() => return BatchEnd::Open,
        None => {}
    }
    let until = tokio::time::sleep(linger);
    tokio::pin!(until);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait() => return BatchEnd::Open,
            _ = &mut until => {
                return take_ready(stream, batch, batch_size).unwrap_or(BatchEnd::Open)
            }
            pulled = stream.next() => {
                if let Some(end) = into_batch(pulled, batch) {
                    return end;
                }
                // (and what arrived with it)
                if let Some(end) = take_ready(stream, batch, batch_size) {
                    return end;
                }
            }
        }
    }
}

/// Moves what `stream` already holds into `batch`, up to `batch_size`: `None` when the batch
/// is still short and the stream holds nothing more, else why the batch ends.
fn take_ready<S>(
    stream: &mut S,
    batch: &mut Vec<jetstream::Message>,
    batch_size: usize,
) -> Option<BatchEnd>
where
    S: futures::Stream<Item = Pulled> + Unpin,
{
    while batch.len() < batch_size {
        let pulled = stream.next().now_or_never()?;
        if let Some(end) = into_batch(pulled, batch) {
            return Some(end);
        }
    }
    Some(BatchEnd::Open)
}

/// Pauses between attempts to start pulling: 100 ms doubling up to 5 s.
const OPEN_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// Calls `open` until it succeeds, pausing after each failure ([`OPEN_BACKOFF`]); `None` once
/// `shutdown` is asked for (checked before every attempt and during every pause).
async fn open_with_backoff<T, F, Fut>(mut open: F, shutdown: &mut Shutdown) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let mut backoff = OPEN_BACKOFF;
    loop {
        if shutdown.is_triggered() {
            return None;
        }
        match open().await {
            Ok(opened) => return Some(opened),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start pulling messages; retrying");
                tokio::select! {
                    _ = shutdown.wait() => return None,
                    _ = backoff.sleep() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::testing;
    use crate::run::shutdown;
    use std::cell::RefCell;
    use tokio::time::Instant;

    type Feed = futures::channel::mpsc::UnboundedSender<Pulled>;

    /// A pull stream the test feeds (sending `None` ends it as a merged stream ends), and a
    /// batch holding one message, as the loop starts one.
    async fn stream_and_batch() -> (
        Feed,
        futures::channel::mpsc::UnboundedReceiver<Pulled>,
        Vec<jetstream::Message>,
        jetstream::Context,
    ) {
        let context = testing::offline_context().await;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let batch = vec![testing::jetstream_message(&context, "_INBOX.first")];
        (tx, rx, batch, context)
    }

    /// A delivered message, as a pull stream yields it.
    fn delivered(context: &jetstream::Context) -> Pulled {
        Some(Ok(testing::jetstream_message(context, "_INBOX.r")))
    }

    /// Feeds `tx` in the background: after each pause, that many messages.
    fn feed(
        tx: &Feed,
        context: &jetstream::Context,
        plan: &[(u64, usize)],
    ) -> tokio::task::JoinHandle<()> {
        let (tx, context, plan) = (tx.clone(), context.clone(), plan.to_vec());
        tokio::spawn(async move {
            for (pause_ms, n) in plan {
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                for _ in 0..n {
                    let _ = tx.unbounded_send(delivered(&context));
                }
            }
        })
    }

    /// `gather` on a short batch with a linger (the loop lingers only when idle): it takes
    /// what arrives within the linger, one message or several at a time, and goes when the
    /// linger has passed; what arrives later is the next batch's.
    #[tokio::test(start_paused = true)]
    async fn a_lingering_batch_takes_what_arrives_within_the_linger_and_goes_when_it_ends() {
        let (tx, mut rx, mut batch, context) = stream_and_batch().await;
        let (_trigger, mut stop) = shutdown::channel();
        let feeder = feed(&tx, &context, &[(3, 1), (3, 2), (10, 1)]);
        let started = Instant::now();
        let linger = Duration::from_millis(10);
        let end = gather(&mut rx, &mut batch, 256, linger, &mut stop).await;
        assert!(matches!(end, BatchEnd::Open), "{end:?}");
        assert_eq!(batch.len(), 4, "the first and the three within the linger");
        assert_eq!(started.elapsed(), linger, "it went when the linger ended");
        feeder.await.expect("fed");
        let mut next = Vec::new();
        assert!(take_ready(&mut rx, &mut next, 256).is_none());
        assert_eq!(next.len(), 1, "the late one waits for the next batch");
    }

    /// A batch that fills during its linger goes at once; one that is full already, or has
    /// no linger, takes only what the stream holds and does not wait.
    #[tokio::test(start_paused = true)]
    async fn a_batch_that_fills_during_its_linger_goes_at_once_and_a_zero_linger_never_waits() {
        let (tx, mut rx, mut batch, context) = stream_and_batch().await;
        let (_trigger, mut stop) = shutdown::channel();
        let linger = Duration::from_millis(50);
        let feeder = feed(&tx, &context, &[(2, 1), (2, 1), (2, 1)]);
        let started = Instant::now();
        let end = gather(&mut rx, &mut batch, 3, linger, &mut stop).await;
        assert!(matches!(end, BatchEnd::Open), "{end:?}");
        assert_eq!(batch.len(), 3);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(4),
            "full at the second arrival"
        );
        feeder.await.expect("fed");

        // the third is waiting; nothing more comes
        let started = Instant::now();
        let mut full = batch.split_off(2);
        assert!(matches!(
            gather(&mut rx, &mut full, 1, linger, &mut stop).await,
            BatchEnd::Open
        ));
        assert_eq!(full.len(), 1, "a full batch takes nothing");
        let end = gather(&mut rx, &mut batch, 256, Duration::ZERO, &mut stop).await;
        assert!(matches!(end, BatchEnd::Open), "{end:?}");
        assert_eq!(batch.len(), 3, "what was there, no more");
        assert_eq!(started.elapsed(), Duration::ZERO, "and neither waited");
    }

    /// Shutdown asked for during a linger ends it at once, the batch as it is (the loop then
    /// applies and acks it before stopping); a status report or the end of a merged stream
    /// during a linger ends the batch at once and is handed to the loop, the messages after
    /// it left for the next batch.
    #[tokio::test(start_paused = true)]
    async fn shutdown_a_status_or_a_stream_end_during_a_linger_ends_it_at_once() {
        use async_nats::jetstream::consumer::pull::MessagesErrorKind;
        let linger = Duration::from_millis(100);

        let (_tx, mut rx, mut batch, _context) = stream_and_batch().await;
        let (trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let (end, ()) = tokio::join!(gather(&mut rx, &mut batch, 256, linger, &mut stop), async {
            tokio::time::sleep(Duration::from_millis(7)).await;
            trigger.trigger();
        });
        assert!(matches!(end, BatchEnd::Open), "{end:?}");
        assert_eq!(batch.len(), 1);
        assert_eq!(started.elapsed(), Duration::from_millis(7));

        let status = || Some(Err(MessagesError::new(MessagesErrorKind::MissingHeartbeat)));
        for (last, ends) in [(status(), false), (None, true)] {
            let (tx, mut rx, mut batch, context) = stream_and_batch().await;
            let (_trigger, mut stop) = shutdown::channel();
            let started = Instant::now();
            let (end, ()) =
                tokio::join!(gather(&mut rx, &mut batch, 256, linger, &mut stop), async {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = tx.unbounded_send(delivered(&context));
                    let _ = tx.unbounded_send(last);
                    let _ = tx.unbounded_send(delivered(&context));
                });
            match ends {
                true => assert!(matches!(end, BatchEnd::Ended), "{end:?}"),
                false => assert!(matches!(end, BatchEnd::Status(_)), "{end:?}"),
            }
            assert_eq!(batch.len(), 2, "the message before it is in the batch");
            assert_eq!(started.elapsed(), Duration::from_millis(5));
            let mut next = Vec::new();
            assert!(take_ready(&mut rx, &mut next, 256).is_none());
            assert_eq!(next.len(), 1, "the one after it is the next batch's");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pulling_is_retried_after_pauses_doubling_from_100ms_up_to_5s() {
        let (_trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let attempts = RefCell::new(Vec::new());
        let opened = open_with_backoff(
            || {
                attempts.borrow_mut().push(started.elapsed());
                let n = attempts.borrow().len();
                async move {
                    if n <= 8 {
                        Err(anyhow::anyhow!("consumer not found"))
                    } else {
                        Ok(n)
                    }
                }
            },
            &mut stop,
        )
        .await;
        assert_eq!(opened, Some(9));
        let at = attempts.into_inner();
        let pauses: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_during_a_pause_stops_pulling_at_once_and_a_stopped_loop_never_opens() {
        let (trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let after = Duration::from_millis(250);
        let (opened, ()) = tokio::join!(
            open_with_backoff(
                || async { Err::<(), _>(anyhow::anyhow!("down")) },
                &mut stop
            ),
            async {
                tokio::time::sleep(after).await;
                trigger.trigger();
            }
        );
        assert_eq!(opened, None);
        assert_eq!(started.elapsed(), after, "the 200ms pause was cut short");
        let attempts = RefCell::new(0);
        let opened = open_with_backoff(
            || {
                *attempts.borrow_mut() += 1;
                async { Ok(()) }
            },
            &mut stop,
        )
        .await;
        assert_eq!((opened, attempts.into_inner()), (None, 0));
    }
}
