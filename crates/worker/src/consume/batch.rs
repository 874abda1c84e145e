//! Fetched batches through the store with group commit ([`ConsumeLoop::process`]): each batch
//! is parsed and applied (committed, not yet durable) as soon as it is fetched; one flush at a
//! time runs on the blocking pool, and it takes every batch applied before it began. Batches
//! applied while a flush runs wait for the next one, which starts the moment the running one
//! returns, before the batches it covered are acked ([`ConsumeLoop::flushed`]). So under a
//! backlog a flush covers everything fetched during the one before (one append to the store's
//! flush log and one `fdatasync` for all of them), and when input is sparse every batch gets
//! its own flush at once.
//!
//! A batch whose flush would start the moment its apply returns (no flush running, none
//! waiting: sparse input) is flushed by its apply task itself, right after the apply: the
//! loop hears of the apply as before (and applies the next batch meanwhile), but the flush
//! does not wait for the loop to wake and hand it to another thread. On two busy cores each
//! such hand-off is a wait for a core, on the path from a chunk to its event.
//!
//! A batch is settled (acked) only after a flush that began after its last commit returned:
//! acks never run ahead of durability. A redelivered message (or, on a leased partition, one an
//! earlier owner was delivered and never acked) is applied alone, behind its own durable note,
//! after everything before it is settled.

use super::apply::{apply_inputs, flush_store, BatchResult};
use super::delivery::Delivery;
use super::inputs::{parse_message, OwnedInput, Rejected};
use super::poison::{apply_alone, apply_noted};
use super::settle::{give_up_on_storage, Disposition};
use super::watermark::now_us;
use super::ConsumeLoop;
use crate::serve::metrics::{Histogram, InputLag, Metrics};
use assembler::{Applied, InputKind, StoreError};
use async_nats::jetstream::{self, AckKind};
use futures::FutureExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub(super) struct Work {
    msg: jetstream::Message,
    delivery: Delivery,
    parsed: Result<OwnedInput, Rejected>,
}

/// A batch whose inputs are applied (committed, not yet durable), with an outcome per applied
/// input.
struct Staged {
    work: Vec<Work>,
    outcomes: Vec<Result<Applied, StoreError>>,
}

/// Fetched messages on their way to durability, in three stages that run at once: fresh
/// messages waiting to be applied, the batch being applied (one at a time, on the blocking
/// pool), applied batches waiting for the next flush, and those the running flush covers.
/// So the loop goes on fetching while a batch is applied and another flushed.
#[derive(Default)]
pub(super) struct Pipeline {
    /// Fetched, fresh, not applied yet (the next apply takes up to a batch of them).
    fetched: Vec<(jetstream::Message, Delivery)>,
    /// The batch being applied.
    pub(super) applying: Option<Applying>,
    /// Applied after the running flush began (or with none running yet).
    waiting: Vec<Staged>,
    /// The running flush and the batches applied before it began.
    pub(super) in_flight: Option<InFlight>,
}

/// What an apply task hands back: the batch, and its outcomes (`Err`: the store panicked).
pub(super) type AppliedParts = (
    Vec<Work>,
    std::thread::Result<(Vec<Result<Applied, StoreError>>, Duration)>,
);

/// A running apply task: its batch comes back through `done` once applied; `flush` is the
/// same task going on to flush it ([`ConsumeLoop::start_apply`]), `None` when the loop starts
/// that batch's flush itself.
pub(super) struct Applying {
    done: oneshot::Receiver<AppliedParts>,
    flush: Option<JoinHandle<(bool, Duration)>>,
}

/// An applied batch back from its task, with the flush that task runs for it, if any.
pub(super) struct AppliedBatch {
    batch: AppliedParts,
    flush: Option<JoinHandle<(bool, Duration)>>,
}

pub(super) struct InFlight {
    staged: Vec<Staged>,
    flush: JoinHandle<(bool, Duration)>,
}

/// Waits for the running flush; never resolves when none runs (a `select!` branch, then
/// [`ConsumeLoop::flushed`]).
pub(super) async fn flush_done(in_flight: &mut Option<InFlight>) -> (bool, Duration) {
    match in_flight {
        Some(f) => join_flush(&mut f.flush).await,
        None => std::future::pending().await,
    }
}

/// Waits for the running apply; never resolves when none runs (a `select!` branch, then
/// [`ConsumeLoop::applied`]).
pub(super) async fn apply_done(applying: &mut Option<Applying>) -> Option<AppliedBatch> {
    let Some(a) = applying else {
        return std::future::pending().await;
    };
    let done = (&mut a.done).await;
    let flush = applying.take().and_then(|a| a.flush);
    match done {
        Ok(batch) => Some(AppliedBatch { batch, flush }),
        Err(_) => {
            // the task ended without handing its batch back (cancelled: the runtime is
            // shutting down); its messages are redelivered once their ack wait runs out
            tracing::error!("apply task failed");
            None
        }
    }
}

/// Lets the running apply finish, if one runs (then hand it to [`ConsumeLoop::applied`]).
pub(super) async fn apply_done_now(applying: &mut Option<Applying>) -> Option<AppliedBatch> {
    match applying.is_some() {
        true => apply_done(applying).await,
        false => None,
    }
}

impl Pipeline {
    /// Whether nothing is fetched, applied or unsettled.
    pub(super) fn is_empty(&self) -> bool {
        self.fetched.is_empty()
            && self.applying.is_none()
            && self.waiting.is_empty()
            && self.in_flight.is_none()
    }
}

async fn join_flush(flush: &mut JoinHandle<(bool, Duration)>) -> (bool, Duration) {
    match flush.await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "flush task failed; its batches will be redelivered");
            (false, Duration::ZERO)
        }
    }
}

impl ConsumeLoop {
    /// One fetched batch (see the module docs).
    ///
    /// A message delivered before (after a crash, a lost ack, a nak) is applied alone, after a
    /// durable note ([`assembler::Store::begin_attempt`]): if the process stops while applying
    /// it, the next start knows which input it was, and after `max_deliver - 1` such stops the
    /// input is dead-lettered as `poison` instead of crashing the worker again. The messages
    /// that were merely fetched with it are applied alone too, get no stop recorded, and lose
    /// nothing. (The server redelivers without limit: it never drops a message on its own.)
    pub(super) async fn process(&self, batch: Vec<jetstream::Message>, pipeline: &mut Pipeline) {
        let now_us = now_us();
        for msg in batch {
            let delivery = Delivery::of(&msg);
            self.observe_age(&self.metrics.input_lag.fetched, delivery, now_us);
            if self.is_redelivered(&msg, delivery) {
                self.settle_all(pipeline).await;
                self.process_alone(msg, delivery).await;
            } else {
                pipeline.fetched.push((msg, delivery));
            }
        }
        if pipeline.applying.is_none() {
            self.start_apply(pipeline);
        }
    }

    /// Whether `msg` was delivered before: by this consumer (a crash, a lost ack, a nak), or, on
    /// a leased partition, to an earlier owner that never acked it
    /// ([`crate::ownership::attempts`]).
    fn is_redelivered(&self, msg: &jetstream::Message, delivery: Delivery) -> bool {
        delivery.delivered_before
            || (delivery.stream_seq > 0
                && self
                    .attempts
                    .as_ref()
                    .is_some_and(|a| a.is_suspect(msg.subject.as_str(), delivery.stream_seq)))
    }

    /// Starts applying up to a batch of the fetched messages on the blocking pool (one apply
    /// at a time: the store has one writer, and inputs are applied in the order fetched).
    /// The batch goes there and comes back with its outcomes (not copied for it); a panic in
    /// the store is caught there, so the batch always comes back to be settled.
    ///
    /// With no flush running and none waiting, the batch's flush would start the moment it
    /// comes back: the task then runs that flush itself, right after handing the batch back
    /// (see the module docs). It is the same flush, begun after the batch's last commit, and
    /// the batch is settled only once it returns.
    pub(super) fn start_apply(&self, pipeline: &mut Pipeline) {
        if pipeline.applying.is_some() || pipeline.fetched.is_empty() {
            return;
        }
        let take = pipeline.fetched.len().min(self.config.batch_size.max(1));
        let batch: Vec<(jetstream::Message, Delivery)> = pipeline.fetched.drain(..take).collect();
        let work = self.parse(batch);
        let store = Arc::clone(&self.store);
        // (`start_flush` flushes only when an input reached the store)
        let flush_here = pipeline.in_flight.is_none()
            && pipeline.waiting.is_empty()
            && work.iter().any(|w| w.parsed.is_ok());
        let (done, applied) = oneshot::channel();
        let task = tokio::task::spawn_blocking(move || {
            let inputs = work.iter().filter_map(|w| w.parsed.as_ref().ok());
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                apply_inputs(&store, inputs)
            }));
            // (the loop is gone only when the runtime shuts down: nothing to flush for)
            let handed_back = done.send((work, result)).is_ok();
            match flush_here && handed_back {
                true => flush_store(&store),
                false => (false, Duration::ZERO),
            }
        });
        pipeline.applying = Some(Applying {
            done: applied,
            flush: flush_here.then_some(task),
        });
    }

    /// The running apply returned (`None`: its task was lost): its batch waits for the next
    /// flush, which starts now when none is running (or runs already, in the apply's task),
    /// and the next apply starts.
    pub(super) fn applied(&self, pipeline: &mut Pipeline, done: Option<AppliedBatch>) {
        if let Some(AppliedBatch { batch, flush }) = done {
            let staged = self.stage(batch);
            match flush {
                // The task flushes only when it started with no flush running and none
                // waiting, and only this apply could have changed that: so its flush is the
                // one in flight now.
                Some(flush) if pipeline.in_flight.is_none() && pipeline.waiting.is_empty() => {
                    pipeline.in_flight = Some(InFlight {
                        staged: vec![staged],
                        flush,
                    });
                }
                // (were it otherwise, the batch would wait for the next flush, begun after it
                // like any, and the task's own would only be one flush more)
                _ => pipeline.waiting.push(staged),
            }
        }
        if pipeline.in_flight.is_none() {
            self.start_flush(pipeline);
        }
        self.start_apply(pipeline);
    }

    /// An applied batch, with its outcomes, ready to wait for a flush.
    fn stage(&self, (work, result): AppliedParts) -> Staged {
        let outcomes = match result {
            Ok((outcomes, apply_time)) => {
                self.metrics.batch_apply.observe(apply_time);
                outcomes
            }
            Err(_) => {
                tracing::error!("apply task failed: the store panicked");
                let n = work.iter().filter(|w| w.parsed.is_ok()).count();
                (0..n).map(|_| Err(task_failed())).collect()
            }
        };
        Staged { work, outcomes }
    }

    /// Starts a flush covering every waiting batch.
    fn start_flush(&self, pipeline: &mut Pipeline) {
        let staged = std::mem::take(&mut pipeline.waiting);
        if staged.is_empty() {
            return;
        }
        let flush = if staged.iter().all(|s| s.outcomes.is_empty()) {
            // nothing reached the store (every message rejected before it)
            tokio::spawn(async { (true, Duration::ZERO) })
        } else {
            let store = Arc::clone(&self.store);
            tokio::task::spawn_blocking(move || flush_store(&store))
        };
        pipeline.in_flight = Some(InFlight { staged, flush });
    }

    /// The running flush returned `result` ([`flush_done`]): hands on an apply that
    /// returned meanwhile, if one did, and starts the next apply; starts the next flush for
    /// the batches applied meanwhile (that apply's among them); and then settles the batches
    /// the flush covered.
    ///
    /// Settling is one ack (and one message dropped) per input on this task, a batch's worth
    /// of work, and the loop polls nothing else meanwhile. So the next flush and apply are
    /// started first and run on the blocking pool while these acks go out: under a backlog
    /// they would otherwise wait for every ack of the batch before.
    pub(super) async fn flushed(&self, pipeline: &mut Pipeline, result: (bool, Duration)) {
        let (flushed, flush_time) = result;
        let done = pipeline.in_flight.take();
        // (read once, as the flush is seen to return: neither the work started below nor the
        // acks before a later batch's make its inputs older)
        let durable_at_us = now_us();
        if done.is_some() {
            self.metrics.batch_flush.observe(flush_time);
            // The events are durable now: the relay publishes them while the inputs are
            // acked, not after (a batch's acks are one publish each). A flush that made no
            // row durable wakes nothing: most batches of sparse input complete nothing.
            if flushed && self.store.take_relay_news() {
                self.relay_wake.notify_one();
            }
        }
        // The next flush begins after every commit of the batches it covers, which is all an
        // ack of theirs needs; the batches settled below needed only the flush that returned.
        // An apply that returned meanwhile is handed on first, so that its batch is one of
        // those (`applied` starts the flush, then the next apply).
        match apply_done(&mut pipeline.applying).now_or_never() {
            Some(applied) => self.applied(pipeline, applied),
            None => self.start_flush(pipeline),
        }
        if let Some(f) = done {
            for staged in f.staged {
                self.settle(staged, flushed, durable_at_us).await;
            }
        }
    }

    /// Applies what was fetched, flushes and settles everything (before a message applied
    /// alone, and at shutdown).
    pub(super) async fn settle_all(&self, pipeline: &mut Pipeline) {
        while !pipeline.is_empty() {
            if pipeline.applying.is_some() {
                let done = apply_done(&mut pipeline.applying).await;
                self.applied(pipeline, done);
                continue;
            }
            if !pipeline.fetched.is_empty() {
                self.start_apply(pipeline);
                continue;
            }
            match &mut pipeline.in_flight {
                Some(f) => {
                    let result = join_flush(&mut f.flush).await;
                    self.flushed(pipeline, result).await;
                }
                None => self.start_flush(pipeline),
            }
        }
    }

    /// A message delivered before: applied alone behind its durable note (in the store, or in
    /// NATS for a leased partition), flushed, settled.
    async fn process_alone(&self, msg: jetstream::Message, delivery: Delivery) {
        let work = self.parse(vec![(msg, delivery)]);
        let input = work.first().and_then(|w| w.parsed.as_ref().ok().cloned());
        // A static worker gives up after the stops alone that follow the stop in the input's
        // first batch; a leased partition also spent one in its takeover group
        // (`crate::ownership::attempts`): the same `max_deliver` stops in all.
        let stops_before_alone = if self.attempts.is_some() { 2 } else { 1 };
        let give_up_after = u32::try_from(
            self.config
                .max_deliver
                .saturating_sub(stops_before_alone)
                .max(1),
        )
        .unwrap_or(u32::MAX);
        let result = match (input, &self.attempts) {
            (None, _) => BatchResult {
                outcomes: Vec::new(),
                flushed: true,
                apply_time: Duration::ZERO,
                flush_time: Duration::ZERO,
            },
            (Some(input), None) => {
                let store = Arc::clone(&self.store);
                run_blocking(move || apply_alone(&store, &input, give_up_after)).await
            }
            (Some(input), Some(attempts)) => {
                let seq = input.origin().stream_seq;
                let stops = match attempts.begin(seq).await {
                    Ok(stops) => stops,
                    Err(e) => {
                        // Not applied: tried again after the nak delay (or, deposed, left to
                        // the partition's new owner).
                        tracing::warn!(stream_seq = seq, error = %e, "cannot note the attempt; input not applied");
                        if self.holds_lease() {
                            if let Some(w) = work.first() {
                                let delay = self.config.nak_delay.get();
                                if let Err(e) = w.msg.ack_with(AckKind::Nak(Some(delay))).await {
                                    tracing::warn!(error = %e, "nak not sent");
                                }
                            }
                        }
                        return;
                    }
                };
                let store = Arc::clone(&self.store);
                let result =
                    run_blocking(move || apply_noted(&store, &input, stops, give_up_after)).await;
                if result.flushed {
                    // the input's effect is durable: the note is forgotten (a failure here
                    // costs at most one stop too many, counted by the next owner)
                    if let Err(e) = attempts.end(seq).await {
                        tracing::warn!(stream_seq = seq, error = %e, "cannot close the attempt note");
                    }
                }
                result
            }
        };
        let durable_at_us = now_us();
        self.metrics.batch_apply.observe(result.apply_time);
        self.metrics.batch_flush.observe(result.flush_time);
        let staged = Staged {
            work,
            outcomes: result.outcomes,
        };
        if result.flushed && self.store.take_relay_news() {
            self.relay_wake.notify_one();
        }
        self.settle(staged, result.flushed, durable_at_us).await;
    }

    /// Records an input's age at a stage (`toolstream_input_lag_seconds`), unless its reply
    /// subject could not be read (no time it was stored).
    fn observe_age(&self, stage: &Histogram, delivery: Delivery, now_us: u64) {
        if delivery.stream_seq > 0 {
            stage.observe(InputLag::age(delivery.published_us, now_us));
        }
    }

    /// Parses every message into an assembler input (or the reason it cannot be one).
    fn parse(&self, batch: Vec<(jetstream::Message, Delivery)>) -> Vec<Work> {
        let mut work = Vec::with_capacity(batch.len());
        for (msg, delivery) in batch {
            let parsed = parse_message(
                &self.subjects,
                msg.subject.as_str(),
                msg.headers.as_ref(),
                &msg.payload,
                delivery.stream_seq,
                delivery.published_ms(),
            );
            match parsed.as_ref().map(|p| p.kind) {
                Ok(InputKind::Result) => Metrics::add(&self.metrics.results_in, 1),
                _ => Metrics::add(&self.metrics.chunks_in, 1),
            }
            work.push(Work {
                msg,
                delivery,
                parsed,
            });
        }
        work
    }

    /// Settles every message of a staged batch once a flush that began after it returned
    /// (`flushed`: whether it succeeded; `durable_at_us`: when the loop saw it return): one
    /// [`Disposition`] each, then the acks. The caller has woken the relay already when the
    /// flush made rows durable.
    async fn settle(&self, staged: Staged, flushed: bool, durable_at_us: u64) {
        Metrics::add(&self.metrics.batches, 1);
        #[cfg(feature = "failpoints")]
        crate::run::failpoints::abort_between_flush_and_ack(
            self.abort_after_flushes,
            flushed,
            self.metrics
                .batches
                .load(std::sync::atomic::Ordering::Relaxed),
        );

        let mut outcomes = staged.outcomes.into_iter();
        let nak_delay = self.config.nak_delay.get();
        for w in staged.work {
            let mut durable_at_us = durable_at_us;
            if !self.holds_lease() {
                // Another worker owns the partition now and rebuilds it from the stream:
                // nothing more is acked, nak'd or dead-lettered by this one.
                tracing::warn!("lease lost before the batch was settled; left to the new owner");
                return;
            }
            let mut disposition = match &w.parsed {
                Ok(input) => match outcomes.next() {
                    Some(outcome) => {
                        self.count(&outcome, input);
                        Disposition::after_apply(&outcome, flushed)
                    }
                    // not attempted: an earlier input of the batch hit a storage error
                    None => Disposition::NakDelay,
                },
                Err(rejected) => {
                    self.dead_letter_now(&w.msg, w.delivery.stream_seq, rejected)
                        .await
                }
            };
            // A message the store could not take (storage error, failed flush) is nak'd and
            // tried again. After max_deliver such failures in this process it is dead-lettered
            // through the store, which ends its stream (a lost chunk) — and only once the store
            // takes that: it is never dropped outside the store, and one that a failed flush
            // left applied is acked as such. (Counted here, not by JetStream's delivery count,
            // which crashes and ack_wait expiries raise too.)
            if let Ok(input) = &w.parsed {
                let seq = input.origin().stream_seq;
                if disposition == Disposition::NakDelay {
                    let failures = self.store_failures.note(seq);
                    if i64::from(failures) >= self.config.max_deliver {
                        let store = Arc::clone(&self.store);
                        let input = input.clone();
                        disposition = tokio::task::spawn_blocking(move || {
                            give_up_on_storage(&store, &input, failures)
                        })
                        .await
                        .unwrap_or(Disposition::NakDelay);
                        // (durable by its own flush, now)
                        durable_at_us = now_us();
                        // (its flush made the dead letter durable, after this batch's wake)
                        if self.store.take_relay_news() {
                            self.relay_wake.notify_one();
                        }
                    }
                }
                if disposition != Disposition::NakDelay {
                    self.store_failures.forget(seq);
                    // its effect is durable and it is acked or terminated now: its age here
                    // (once per input; an input nak'd is counted when it is settled for good)
                    self.observe_age(&self.metrics.input_lag.durable, w.delivery, durable_at_us);
                }
            }
            let kind = match disposition {
                Disposition::Ack => AckKind::Ack,
                Disposition::Term => AckKind::Term,
                Disposition::NakDelay => AckKind::Nak(Some(nak_delay)),
            };
            if let Err(e) = w.msg.ack_with(kind).await {
                // A lost ack means a redelivery, which the store recognizes as a duplicate.
                tracing::warn!(error = %e, "ack not sent");
            }
        }
    }

    fn count(&self, outcome: &Result<Applied, StoreError>, input: &OwnedInput) {
        let m = &self.metrics;
        match outcome {
            Ok(Applied::Accepted { .. }) => {}
            Ok(Applied::Duplicate) => Metrics::add(&m.duplicates, 1),
            Ok(Applied::Parked) => Metrics::add(&m.parked, 1),
            Ok(Applied::DeadLettered { reason }) => {
                Metrics::add(&m.dead_letters, 1);
                tracing::warn!(
                    conversation_id = %input.conversation_id(),
                    message_id = %input.message_id(),
                    subject = %input.origin().subject,
                    stream_seq = input.origin().stream_seq,
                    reason = %crate::run::redact::reason_code(reason),
                    "input dead-lettered"
                );
            }
            Err(e) => {
                Metrics::add(&m.store_errors, 1);
                tracing::error!(
                    conversation_id = %input.conversation_id(),
                    message_id = %input.message_id(),
                    error = %e,
                    "storage error; input will be redelivered"
                );
            }
        }
    }
}

/// Runs `apply` on the blocking pool; a task that died is a failed, unflushed attempt.
async fn run_blocking(apply: impl FnOnce() -> BatchResult + Send + 'static) -> BatchResult {
    tokio::task::spawn_blocking(apply)
        .await
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "apply task failed");
            BatchResult {
                outcomes: vec![Err(task_failed())],
                flushed: false,
                apply_time: Duration::ZERO,
                flush_time: Duration::ZERO,
            }
        })
}

/// The outcome of an input whose blocking apply task died (a panic in the store).
fn task_failed() -> StoreError {
    StoreError::Corrupt {
        space: "worker",
        detail: "apply task failed".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::testing::{gated_store, jetstream_message, Gate};
    use crate::run::config::ConsumerConfig;
    use std::sync::atomic::Ordering;
    use toolstream_testkit::harness::WAIT;
    use toolstream_testkit::wait::eventually_async;

    /// A loop on a store whose commits and flushes pass `commits` and `flushes`, whose acks go
    /// to a client that never connects and has room for one command: its second ack waits
    /// for good (a busy connection, as far as the loop can tell).
    async fn loop_whose_acks_wait(commits: &Arc<Gate>, flushes: &Arc<Gate>) -> ConsumeLoop {
        offline_loop(commits, flushes, 1).await
    }

    /// [`loop_whose_acks_wait`] with room for `capacity` commands (acks) on its client.
    async fn offline_loop(
        commits: &Arc<Gate>,
        flushes: &Arc<Gate>,
        capacity: usize,
    ) -> ConsumeLoop {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .client_capacity(capacity)
            .connect("nats://127.0.0.1:1")
            .await
            .expect("a client that connects in the background");
        ConsumeLoop {
            store: Arc::new(gated_store(
                Arc::clone(commits),
                Arc::clone(flushes),
                assembler::Config::default(),
            )),
            js: jetstream::new(client),
            subjects: crate::consume::testing::subjects(),
            metrics: Default::default(),
            relay_wake: Default::default(),
            config: ConsumerConfig::default(),
            #[cfg(feature = "failpoints")]
            abort_after_flushes: None,
            watermark: Default::default(),
            store_failures: Default::default(),
            guard: None,
            published: Default::default(),
            checkpoint: None,
            attempts: None,
        }
    }

    /// `n` fresh messages of stream sequences `first..`, on `lp`'s client.
    fn fresh(lp: &ConsumeLoop, first: u64, n: u64) -> Vec<(jetstream::Message, Delivery)> {
        (first..first + n)
            .map(|seq| {
                let reply = format!("$JS.ACK.toolstream.c.1.{seq}.{seq}.1700000000000000000.0");
                let msg = jetstream_message(&lp.js, &reply);
                let delivery = Delivery::of(&msg);
                (msg, delivery)
            })
            .collect()
    }

    /// `n` messages of sequences `first..` applied as `lp` applies a batch (committed to its
    /// store, not flushed), with their outcomes.
    fn applied_batch(lp: &ConsumeLoop, first: u64, n: u64) -> Staged {
        let work = lp.parse(fresh(lp, first, n));
        let (outcomes, _) = apply_inputs(
            &lp.store,
            work.iter().filter_map(|w| w.parsed.as_ref().ok()),
        );
        assert_eq!(outcomes.len(), n as usize, "every input reached the store");
        Staged { work, outcomes }
    }

    /// A pipeline whose flush has just returned: three inputs it covered (sequences 1–3, to
    /// be acked now) and one applied while it ran (4), waiting for the next flush; with
    /// `applying`, the apply under way.
    fn after_a_flush(lp: &ConsumeLoop, applying: Option<Applying>) -> Pipeline {
        Pipeline {
            in_flight: Some(InFlight {
                staged: vec![applied_batch(lp, 1, 3)],
                flush: tokio::spawn(async { (true, Duration::ZERO) }),
            }),
            waiting: vec![applied_batch(lp, 4, 1)],
            applying,
            ..Pipeline::default()
        }
    }

    /// [`after_a_flush`] whose apply under way has returned (sequence 5, applied), with one
    /// message fetched since (6).
    fn after_a_flush_and_an_apply(lp: &ConsumeLoop) -> Pipeline {
        let Staged { work, outcomes } = applied_batch(lp, 5, 1);
        let (done, returned) = oneshot::channel();
        assert!(done.send((work, Ok((outcomes, Duration::ZERO)))).is_ok());
        Pipeline {
            fetched: fresh(lp, 6, 1),
            ..after_a_flush(
                lp,
                Some(Applying {
                    done: returned,
                    flush: None,
                }),
            )
        }
    }

    /// Hands `pipeline` the return of its flush on a task of its own (its acks wait for good)
    /// and waits until `started` holds, or gives up after [`WAIT`]: whether it held. The
    /// acks must still be waiting then.
    async fn flushed_while_acks_wait(
        lp: &Arc<ConsumeLoop>,
        mut pipeline: Pipeline,
        started: impl Fn() -> bool,
    ) -> bool {
        let settling = tokio::spawn({
            let lp = Arc::clone(lp);
            async move { lp.flushed(&mut pipeline, (true, Duration::ZERO)).await }
        });
        let held = eventually_async(WAIT, || async { started() })
            .await
            .is_some();
        assert!(
            !settling.is_finished(),
            "the flushed batch's acks are still waiting for the connection"
        );
        settling.abort();
        held
    }

    /// When a flush returns, the flush of the batches applied meanwhile starts at once, on
    /// the blocking pool: it does not wait for the acks of the batches the returned flush
    /// covered, which the loop sends one by one (a batch's worth of work on its task, during
    /// which it polls nothing else). Here those acks wait for good, the apply under way has
    /// not returned, and the next flush still runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_flush_starts_before_the_flushed_batches_are_acked() {
        let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
        let lp = Arc::new(loop_whose_acks_wait(&commits, &flushes).await);
        // (the sender kept: the apply under way has not returned)
        let (_apply_under_way, running) = oneshot::channel::<AppliedParts>();
        let pipeline = after_a_flush(
            &lp,
            Some(Applying {
                done: running,
                flush: None,
            }),
        );
        let flushes_before = flushes.passed.load(Ordering::SeqCst);
        let flushed = flushed_while_acks_wait(&lp, pipeline, || {
            flushes.passed.load(Ordering::SeqCst) > flushes_before
        })
        .await;
        assert!(flushed, "the next flush ran while the acks waited");
    }

    /// An apply that returned while the flush ran is handed on before the acks: its batch
    /// waits for the next flush, which starts, and the next apply of what was fetched starts
    /// too, both while the acks of the flushed batch wait for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_apply_returned_meanwhile_is_handed_on_and_the_next_one_started_before_the_acks() {
        let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
        let lp = Arc::new(loop_whose_acks_wait(&commits, &flushes).await);
        let pipeline = after_a_flush_and_an_apply(&lp);
        let (commits_before, flushes_before) = (
            commits.passed.load(Ordering::SeqCst),
            flushes.passed.load(Ordering::SeqCst),
        );
        let started = flushed_while_acks_wait(&lp, pipeline, || {
            flushes.passed.load(Ordering::SeqCst) > flushes_before
                && commits.passed.load(Ordering::SeqCst) > commits_before
        })
        .await;
        assert!(
            started,
            "the next flush ({} passed) and apply ({} commits) ran while the acks waited",
            flushes.passed.load(Ordering::SeqCst) - flushes_before,
            commits.passed.load(Ordering::SeqCst) - commits_before,
        );
    }

    /// The batch of an apply that returned while the flush ran joins the next flush, with the
    /// batches that waited for it, instead of waiting a whole flush more; and the next apply
    /// takes what was fetched. (Acks go out here: `flushed` returns, and the pipeline it
    /// leaves is looked at.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_apply_returned_meanwhile_joins_the_next_flush() {
        let (commits, flushes) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
        let lp = offline_loop(&commits, &flushes, 1024).await;
        let mut pipeline = after_a_flush_and_an_apply(&lp);
        tokio::time::timeout(WAIT, lp.flushed(&mut pipeline, (true, Duration::ZERO)))
            .await
            .expect("the acks go out to a client with room for them");
        let covered: Vec<Vec<u64>> = pipeline
            .in_flight
            .as_ref()
            .map(|f| {
                f.staged
                    .iter()
                    .map(|b| b.work.iter().map(|w| w.delivery.stream_seq).collect())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            covered,
            vec![vec![4], vec![5]],
            "the next flush covers the batch that waited and the one whose apply returned"
        );
        assert!(
            pipeline.waiting.is_empty(),
            "nothing waits for a later flush"
        );
        assert!(
            pipeline.applying.is_some() && pipeline.fetched.is_empty(),
            "the next apply took what was fetched"
        );
        if let Some(InFlight { mut flush, .. }) = pipeline.in_flight.take() {
            assert!(join_flush(&mut flush).await.0, "the flush went through");
        }
    }
}
