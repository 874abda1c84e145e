//! The consume loop of design.md: fetch a batch → parse subject and headers into assembler
//! inputs → apply each (one atomic commit each) → ONE flush → ack the batch → wake the relay.
//!
//! Every message gets exactly one of these decisions ([`Disposition`]), made once:
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
//! at the settled watermark ([`crate::watermark`]), never at the wall clock: a stream's timer
//! cannot run out while input published before its deadline is still queued or waiting to be
//! redelivered after a crash.

use crate::config::ConsumerConfig;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::subjects::Subjects;
use crate::watermark::Watermark;
use assembler::{Applied, Control, Input, InputKind, Origin, Seq, Store, StoreError};
use async_nats::jetstream::consumer::pull::MessagesError;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, AckKind};
use async_nats::HeaderMap;
use bytes::Bytes;
use chunk_model::Provider;
use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// Header naming the provider format of a chunk stream.
pub const HEADER_PROVIDER: &str = "Toolstream-Provider";
/// Header carrying the producer's 0-based chunk number.
pub const HEADER_SEQ: &str = "Toolstream-Seq";
/// Header carrying an explicit end of stream: `end` or `error`.
pub const HEADER_CONTROL: &str = "Toolstream-Control";
/// Dead-letter header: why.
pub const HEADER_REASON: &str = "Toolstream-Reason";
/// Dead-letter header: the subject the input arrived on (same name as the store's dead letters).
pub const HEADER_ORIGINAL_SUBJECT: &str = "Toolstream-Subject";
/// Dead-letter header: the input stream sequence of the input.
pub const HEADER_ORIGINAL_SEQ: &str = "Toolstream-Stream-Seq";

/// Wall-clock milliseconds since the Unix epoch (the assembler's clock; it survives restarts).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One input message, owned, ready to be lent to [`Store::apply`] as an [`Input`].
#[derive(Debug, Clone)]
pub struct OwnedInput {
    /// Chunk or result.
    pub kind: InputKind,
    /// `<conv>` token.
    pub conversation_id: String,
    /// `<msg>` token.
    pub message_id: String,
    /// Parsed `Toolstream-Provider`.
    pub provider: Option<Provider>,
    /// Producer or transport sequence.
    pub seq: Seq,
    /// Parsed `Toolstream-Control`.
    pub control: Option<Control>,
    /// The raw body.
    pub body: Bytes,
    /// Subject and stream sequence.
    pub origin: Origin,
    /// When JetStream stored it (ms since the epoch): the input's time for the store's timers.
    pub published_ms: u64,
    /// Why its headers cannot be read (`unknown_provider`, `bad_seq`, `bad_control`), if
    /// so: the store dead-letters it ([`Store::reject`]) and ends its stream, since a chunk
    /// that is not assembled leaves a hole in its call.
    pub rejected: Option<String>,
}

impl OwnedInput {
    /// Borrowed view for the store.
    pub fn as_input(&self) -> Input<'_> {
        Input {
            kind: self.kind,
            conversation_id: &self.conversation_id,
            message_id: &self.message_id,
            provider: self.provider,
            seq: self.seq,
            control: self.control.clone(),
            body: &self.body,
            origin: Some(self.origin.clone()),
        }
    }
}

/// A message that must go straight to the dead-letter subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The DLQ subject (`<prefix>.dlq.<conv>.<msg>` or `<prefix>.dlq.unroutable`).
    pub dlq_subject: String,
    /// Why.
    pub reason: String,
}

/// Looks a header up by name, ignoring ASCII case (producers are not always careful).
fn header<'h>(headers: Option<&'h HeaderMap>, name: &str) -> Option<&'h str> {
    let headers = headers?;
    if let Some(v) = headers.get(name) {
        return Some(v.as_str());
    }
    headers
        .iter()
        .find(|(k, _)| k.to_string().eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(|v| v.as_str())
}

/// Turns subject, headers and body into an input (marked `rejected` when its headers cannot
/// be read), or, when the subject names no conversation and message, says why it must go to
/// the unroutable dead-letter subject.
pub fn parse_message(
    subjects: &Subjects,
    subject: &str,
    headers: Option<&HeaderMap>,
    body: &Bytes,
    stream_seq: u64,
    published_ms: u64,
) -> Result<OwnedInput, Rejected> {
    let parsed = subjects.parse_input(subject).map_err(|e| Rejected {
        dlq_subject: subjects.dlq_unroutable(),
        reason: format!("unroutable_subject: {e}"),
    })?;
    let mut rejected = None;
    let provider = match header(headers, HEADER_PROVIDER).map(str::trim) {
        None | Some("") => None,
        Some(name) => {
            let known = Provider::parse(name);
            if known.is_none() {
                rejected = Some(format!("unknown_provider: {name:?}"));
            }
            known
        }
    };
    let seq = match header(headers, HEADER_SEQ).map(str::trim) {
        None | Some("") => Seq::Transport(stream_seq),
        Some(text) => match text.parse::<u64>() {
            Ok(n) => Seq::Producer(n),
            Err(_) => {
                rejected.get_or_insert(format!(
                    "bad_seq: {HEADER_SEQ} {text:?} is not a non-negative integer"
                ));
                Seq::Transport(stream_seq)
            }
        },
    };
    let control = match header(headers, HEADER_CONTROL).map(str::trim) {
        None | Some("") => None,
        Some(c) if c.eq_ignore_ascii_case("end") => Some(Control::End),
        Some(c) if c.eq_ignore_ascii_case("error") => {
            let reason = String::from_utf8_lossy(body).trim().to_string();
            Some(Control::Error(if reason.is_empty() {
                "producer_error".to_string()
            } else {
                reason
            }))
        }
        Some(other) => {
            rejected.get_or_insert(format!(
                "bad_control: {HEADER_CONTROL} {other:?} (expected end or error)"
            ));
            None
        }
    };
    Ok(OwnedInput {
        kind: parsed.kind,
        conversation_id: parsed.conversation_id.to_string(),
        message_id: parsed.message_id.to_string(),
        provider,
        seq,
        control,
        body: body.clone(),
        origin: Origin {
            subject: subject.to_string(),
            stream_seq,
        },
        published_ms,
        rejected,
    })
}

/// What happens to one delivered message, decided once.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Durable (applied, duplicate or parked): ack.
    Ack,
    /// Dead-lettered durably: terminate, never redeliver.
    Term,
    /// Not durable (storage error, flush failed, DLQ publish failed): redeliver later.
    NakDelay,
}

impl Disposition {
    /// The decision for an apply outcome, given whether the batch flush succeeded.
    pub fn after_apply(applied: &Result<Applied, StoreError>, flushed: bool) -> Disposition {
        match (applied, flushed) {
            (_, false) | (Err(_), _) => Disposition::NakDelay,
            (Ok(Applied::DeadLettered { .. }), true) => Disposition::Term,
            (Ok(_), true) => Disposition::Ack,
        }
    }
}

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
    /// Woken after every flush that may have added outbox rows.
    pub relay_wake: Arc<Notify>,
    /// Batch size, expiry, delays.
    pub config: ConsumerConfig,
    /// Test failpoint: abort the process after this many batch flushes, before the batch is
    /// acked (the window in which a crash makes the server redeliver applied input).
    pub abort_after_flushes: Option<u64>,
    /// The clock of the store's timers (see the module docs).
    pub watermark: Arc<Watermark>,
    /// Storage failures per input stream sequence, in this process.
    pub store_failures: StoreFailures,
}

/// How many times each input failed to be stored in this process (see
/// [`give_up_on_storage`]).
#[derive(Debug, Default)]
pub struct StoreFailures(std::sync::Mutex<std::collections::HashMap<u64, u32>>);

impl StoreFailures {
    /// Counts one more failure of the input at `seq`; returns the count.
    fn note(&self, seq: u64) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(seq).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// The input at `seq` was settled.
    fn forget(&self, seq: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&seq);
    }
}

/// Gives up on an input the store failed to take `failures` times: dead-letters it through the
/// store (`store_error`, its stream ends `lost_chunk`) and flushes. `Term` when that is
/// durable, `Ack` when the input turns out to be applied already (a failed flush kept it),
/// `NakDelay` while the store still fails: then it is tried again later, never dropped.
fn give_up_on_storage(store: &Store, input: &OwnedInput, failures: u32) -> Disposition {
    let reason = format!("store_error: not stored after {failures} attempts");
    let outcome = store.reject(&input.as_input(), &reason, input.published_ms);
    match (outcome, store.flush()) {
        (Ok(Applied::DeadLettered { .. }), Ok(())) => Disposition::Term,
        (Ok(_), Ok(())) => Disposition::Ack,
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "storage still failing; input will be redelivered");
            Disposition::NakDelay
        }
    }
}

struct Work {
    msg: jetstream::Message,
    parsed: Result<OwnedInput, Rejected>,
}

struct BatchResult {
    outcomes: Vec<Result<Applied, StoreError>>,
    flushed: bool,
    apply_time: Duration,
    flush_time: Duration,
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
    pub async fn run(self, consumers: Vec<PullConsumer>, mut shutdown: Shutdown) {
        let mut tick = tokio::time::interval(self.config.tick_interval.get());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut messages: Option<Merged> = None;
        let mut backoff = Duration::from_millis(100);
        loop {
            if shutdown.is_triggered() {
                break;
            }
            let stream = match messages.as_mut() {
                Some(s) => s,
                None => match self.open(&consumers).await {
                    Ok(s) => {
                        backoff = Duration::from_millis(100);
                        messages.insert(s)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start pulling messages; retrying");
                        tokio::select! {
                            _ = shutdown.wait() => break,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                },
            };
            tokio::select! {
                biased;
                _ = shutdown.wait() => break,
                _ = tick.tick() => self.tick().await,
                next = stream.next() => match next {
                    Some(Some(Ok(first))) => {
                        let mut batch = vec![first];
                        let mut ended = false;
                        while batch.len() < self.config.batch_size {
                            match stream.next().now_or_never() {
                                Some(Some(Some(Ok(m)))) => batch.push(m),
                                Some(Some(Some(Err(e)))) => {
                                    tracing::debug!(error = %e, "pull stream status");
                                    break;
                                }
                                Some(Some(None)) | Some(None) => {
                                    ended = true;
                                    break;
                                }
                                None => break,
                            }
                        }
                        self.process(batch).await;
                        if ended {
                            tracing::warn!("a pull stream ended; re-opening");
                            messages = None;
                        }
                    }
                    Some(Some(Err(e))) => {
                        // missing heartbeats while the server restarts, etc.: the stream
                        // re-issues its pull requests itself
                        tracing::debug!(error = %e, "pull stream error");
                    }
                    Some(None) | None => {
                        tracing::warn!("a pull stream ended; re-opening");
                        messages = None;
                    }
                },
            }
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
        tracing::info!("consume loop stopped");
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
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                tracing::debug!(streams = n, "timeouts applied");
                self.relay_wake.notify_one();
            }
            Ok(Err(e)) => {
                Metrics::add(&self.metrics.store_errors, 1);
                tracing::error!(error = %e, "tick failed; will retry");
            }
            Err(e) => tracing::error!(error = %e, "tick task failed"),
        }
    }

    /// One batch: parse, apply, flush once, then settle every message.
    ///
    /// A message delivered before (after a crash, a lost ack, a nak) is applied alone, after a
    /// durable note ([`Store::begin_attempt`]): if the process stops while applying it, the
    /// next start knows which input it was, and after `max_deliver - 1` such stops the input
    /// is dead-lettered as `poison` instead of crashing the worker again. The messages that
    /// were merely fetched with it are applied alone too, get no stop recorded, and lose
    /// nothing. (The server redelivers without limit: it never drops a message on its own.)
    async fn process(&self, batch: Vec<jetstream::Message>) {
        let mut fresh = Vec::with_capacity(batch.len());
        for msg in batch {
            let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
            if delivered > 1 {
                if !fresh.is_empty() {
                    self.process_run(std::mem::take(&mut fresh), false).await;
                }
                self.process_run(vec![msg], true).await;
            } else {
                fresh.push(msg);
            }
        }
        if !fresh.is_empty() {
            self.process_run(fresh, false).await;
        }
    }

    /// Parses, applies (together, or one `alone` with its note), flushes once, then settles
    /// every message.
    async fn process_run(&self, batch: Vec<jetstream::Message>, alone: bool) {
        let mut work = Vec::with_capacity(batch.len());
        for msg in batch {
            let (stream_seq, published_ms) = msg
                .info()
                .map(|i| {
                    let published =
                        crate::watermark::nanos_to_ms(i.published.unix_timestamp_nanos());
                    (i.stream_sequence, published)
                })
                .unwrap_or((0, now_ms()));
            let parsed = parse_message(
                &self.subjects,
                msg.subject.as_str(),
                msg.headers.as_ref(),
                &msg.payload,
                stream_seq,
                published_ms,
            );
            match parsed.as_ref().map(|p| p.kind) {
                Ok(InputKind::Result) => Metrics::add(&self.metrics.results_in, 1),
                _ => Metrics::add(&self.metrics.chunks_in, 1),
            }
            work.push(Work { msg, parsed });
        }

        let inputs: Vec<OwnedInput> = work
            .iter()
            .filter_map(|w| w.parsed.as_ref().ok().cloned())
            .collect();
        let result = if inputs.is_empty() {
            BatchResult {
                outcomes: Vec::new(),
                flushed: true,
                apply_time: Duration::ZERO,
                flush_time: Duration::ZERO,
            }
        } else {
            let store = Arc::clone(&self.store);
            let n = inputs.len();
            let give_up_after =
                u32::try_from(self.config.max_deliver.saturating_sub(1).max(1)).unwrap_or(u32::MAX);
            let apply = move || match inputs.as_slice() {
                [input] if alone => apply_alone(&store, input, give_up_after),
                _ => apply_batch(&store, &inputs),
            };
            match tokio::task::spawn_blocking(apply).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "apply task failed");
                    BatchResult {
                        outcomes: (0..n)
                            .map(|_| {
                                Err(StoreError::Corrupt {
                                    space: "worker",
                                    detail: "apply task failed".to_string(),
                                })
                            })
                            .collect(),
                        flushed: false,
                        apply_time: Duration::ZERO,
                        flush_time: Duration::ZERO,
                    }
                }
            }
        };
        Metrics::add(&self.metrics.batches, 1);
        if let Some(after) = self.abort_after_flushes {
            if result.flushed
                && self
                    .metrics
                    .batches
                    .load(std::sync::atomic::Ordering::Relaxed)
                    >= after
            {
                tracing::error!("failpoint: aborting between flush and ack");
                std::process::abort();
            }
        }
        self.metrics.batch_apply.observe(result.apply_time);
        self.metrics.batch_flush.observe(result.flush_time);

        let mut outcomes = result.outcomes.into_iter();
        let nak_delay = self.config.nak_delay.get();
        let mut any_durable = false;
        for w in work {
            let mut disposition = match &w.parsed {
                Ok(input) => match outcomes.next() {
                    Some(outcome) => {
                        self.count(&outcome, input);
                        if outcome.is_ok() && result.flushed {
                            any_durable = true;
                        }
                        Disposition::after_apply(&outcome, result.flushed)
                    }
                    // not attempted: an earlier input of the batch hit a storage error
                    None => Disposition::NakDelay,
                },
                Err(rejected) => self.dead_letter_now(&w.msg, rejected).await,
            };
            // A message the store could not take (storage error, failed flush) is nak'd and
            // tried again. After max_deliver such failures in this process it is dead-lettered
            // through the store, which ends its stream (a lost chunk) — and only once the store
            // takes that: it is never dropped outside the store, and one that a failed flush
            // left applied is acked as such. (Counted here, not by JetStream's delivery count,
            // which crashes and ack_wait expiries raise too.)
            if let Ok(input) = &w.parsed {
                let seq = input.origin.stream_seq;
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
                    }
                }
                if disposition != Disposition::NakDelay {
                    self.store_failures.forget(seq);
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
        if any_durable {
            self.relay_wake.notify_one();
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
                    conversation_id = %input.conversation_id,
                    message_id = %input.message_id,
                    subject = %input.origin.subject,
                    stream_seq = input.origin.stream_seq,
                    reason = %crate::redact::reason_code(reason),
                    "input dead-lettered"
                );
            }
            Err(e) => {
                Metrics::add(&m.store_errors, 1);
                tracing::error!(
                    conversation_id = %input.conversation_id,
                    message_id = %input.message_id,
                    error = %e,
                    "storage error; input will be redelivered"
                );
            }
        }
    }

    /// Publishes a rejected message to its DLQ subject and waits for the PubAck.
    ///
    /// A dead letter larger than the server's `max_payload` (a body that filled it, plus these
    /// headers) keeps its reason and headers with its body cut, `Toolstream-Body-Truncated:
    /// <original size>` and `Toolstream-Body-Sha256`, and the whole body stored in the payload
    /// bucket (`Toolstream-Body-Ref: <bucket>/<object>`) when that is possible
    /// (`sink::payloads::fit_dead_letter`): it is always published, never given up on for its
    /// size.
    async fn dead_letter_now(&self, msg: &jetstream::Message, rejected: &Rejected) -> Disposition {
        let stream_seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
        let msg_id = format!("dlq:in:{stream_seq}");
        let fields = vec![
            (HEADER_REASON.to_string(), rejected.reason.clone()),
            (HEADER_ORIGINAL_SUBJECT.to_string(), msg.subject.to_string()),
            (HEADER_ORIGINAL_SEQ.to_string(), stream_seq.to_string()),
        ];
        // the bucket is provisioned at start; this only opens it, and only for a body too large
        let payloads = sink::payloads::Payloads::open(self.js.clone(), sink::payloads::BUCKET);
        let (fields, body) =
            sink::payloads::fit_dead_letter(&payloads, fields, &msg_id, msg.payload.clone()).await;
        let mut headers = HeaderMap::new();
        for (name, value) in &fields {
            headers.insert(name.as_str(), value.as_str());
        }
        let publish = PublishMessage::build()
            .headers(headers)
            .message_id(msg_id)
            .payload(body);
        tracing::warn!(
            subject = %msg.subject,
            stream_seq,
            reason = %crate::redact::reason_code(&rejected.reason),
            dlq = %rejected.dlq_subject,
            "input rejected before assembly"
        );
        let sent = match self
            .js
            .send_publish(rejected.dlq_subject.clone(), publish)
            .await
        {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => {
                Metrics::add(&self.metrics.dead_letters, 1);
                Disposition::Term
            }
            Err(e) => {
                Metrics::add(&self.metrics.publish_errors, 1);
                tracing::warn!(error = %e, "dead-letter publish failed; message will be redelivered");
                Disposition::NakDelay
            }
        }
    }
}

/// Attempts of one apply before its storage error is given up on (and the rest of the batch
/// is nak'd).
const APPLY_ATTEMPTS: u32 = 5;

/// Applies one input, retrying a storage error in place a few times (20, 40, 80, 160 ms).
///
/// Retrying here rather than nak'ing keeps the stream's order: a nak'd chunk is redelivered
/// only after its delay, and a later chunk of the same stream fetched meanwhile would be
/// applied first (parked when it has a `Toolstream-Seq`, but with only the JetStream sequence
/// the late one would then be taken for a duplicate).
fn apply_with_retry(store: &Store, owned: &OwnedInput) -> Result<Applied, StoreError> {
    crash_on_poison_failpoint(&owned.body);
    let mut delay = Duration::from_millis(20);
    let mut attempt = 1;
    let input = owned.as_input();
    let now = owned.published_ms;
    loop {
        let outcome = match &owned.rejected {
            None => store.apply(&input, now),
            Some(reason) => store.reject(&input, reason, now),
        };
        match outcome {
            Err(e) if attempt < APPLY_ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "storage error; retrying the same input");
                std::thread::sleep(delay);
                delay *= 2;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Test failpoint `TOOLSTREAM_FAILPOINT_ABORT_ON_BODY=<text>`: the process aborts while
/// applying any input whose body contains `<text>` (an input that crashes the worker, for the
/// poison tests). Off unless set.
fn crash_on_poison_failpoint(body: &[u8]) {
    static MARKER: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    let marker = MARKER.get_or_init(|| {
        std::env::var("TOOLSTREAM_FAILPOINT_ABORT_ON_BODY")
            .ok()
            .filter(|m| !m.is_empty())
            .map(String::into_bytes)
    });
    if let Some(m) = marker {
        if body.windows(m.len()).any(|w| w == m.as_slice()) {
            tracing::error!("failpoint: aborting while applying a poison input");
            std::process::abort();
        }
    }
}

/// Applies one input that was delivered before, alone, behind a durable note (see
/// [`ConsumeLoop::process`]); dead-letters it as `poison` once the process has stopped
/// `give_up_after` times while applying it. Flushes. Blocking.
fn apply_alone(store: &Store, input: &OwnedInput, give_up_after: u32) -> BatchResult {
    let started = Instant::now();
    let seq = input.origin.stream_seq;
    let outcome = match store.begin_attempt(seq) {
        Err(e) => Err(e),
        Ok(stops) if stops >= give_up_after => {
            let reason =
                format!("poison: the worker stopped {stops} times while applying this input alone");
            store.reject(&input.as_input(), &reason, input.published_ms)
        }
        Ok(_) => apply_with_retry(store, input),
    };
    // the process is still here: whatever happened, this input did not stop it
    let ended = store.end_attempt(seq);
    let apply_time = started.elapsed();
    let flush_started = Instant::now();
    let flushed = match ended.and_then(|()| store.flush()) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "flush failed; input will be redelivered");
            false
        }
    };
    BatchResult {
        outcomes: vec![outcome],
        flushed,
        apply_time,
        flush_time: flush_started.elapsed(),
    }
}

/// Applies inputs in order (one atomic commit each, storage errors retried in place), stopping
/// at the first input that still fails, then flushes once. Blocking.
fn apply_batch(store: &Store, inputs: &[OwnedInput]) -> BatchResult {
    let started = Instant::now();
    let mut outcomes = Vec::with_capacity(inputs.len());
    for input in inputs {
        let span = tracing::debug_span!(
            "apply",
            conversation_id = %input.conversation_id,
            message_id = %input.message_id,
            stream_seq = input.origin.stream_seq
        );
        let _guard = span.enter();
        let outcome = apply_with_retry(store, input);
        let failed = outcome.is_err();
        if let Ok(applied) = &outcome {
            tracing::trace!(?applied, "applied");
        }
        outcomes.push(outcome);
        if failed {
            break;
        }
    }
    let apply_time = started.elapsed();
    let flush_started = Instant::now();
    let flushed = match store.flush() {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "flush failed; batch will be redelivered");
            false
        }
    };
    BatchResult {
        outcomes,
        flushed,
        apply_time,
        flush_time: flush_started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subjects() -> Subjects {
        Subjects::new("toolstream")
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    #[test]
    fn headers_become_provider_seq_and_control() {
        let h = headers(&[("Toolstream-Provider", "groq"), ("Toolstream-Seq", "7")]);
        let body = Bytes::from_static(b"{}");
        let i =
            parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 42, 0).unwrap();
        assert_eq!(i.provider, Some(Provider::OpenaiChat));
        assert_eq!(i.seq, Seq::Producer(7));
        assert_eq!(i.control, None);
        assert_eq!(i.origin.stream_seq, 42);
        assert_eq!(
            (i.conversation_id.as_str(), i.message_id.as_str()),
            ("c", "m")
        );
    }

    #[test]
    fn without_a_producer_seq_the_stream_sequence_orders() {
        let body = Bytes::from_static(b"{}");
        let i = parse_message(&subjects(), "toolstream.results.c.m", None, &body, 9, 0).unwrap();
        assert_eq!(i.seq, Seq::Transport(9));
        assert_eq!(i.kind, InputKind::Result);
    }

    #[test]
    fn control_error_carries_the_body_as_reason() {
        let h = headers(&[("toolstream-control", "error")]);
        let body = Bytes::from_static(b"upstream reset\n");
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        assert_eq!(i.control, Some(Control::Error("upstream reset".into())));
    }

    #[test]
    fn a_subject_with_a_missing_token_goes_to_the_unroutable_dlq() {
        let body = Bytes::new();
        let r =
            parse_message(&subjects(), "toolstream.chunks.only", None, &body, 1, 0).unwrap_err();
        assert_eq!(r.dlq_subject, "toolstream.dlq.unroutable");
        assert!(r.reason.starts_with("unroutable_subject"), "{}", r.reason);
    }

    #[test]
    fn a_header_the_worker_cannot_read_marks_the_input_rejected_for_the_store() {
        let h = headers(&[("Toolstream-Seq", "three")]);
        let body = Bytes::new();
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        let reason = i.rejected.expect("rejected");
        assert!(reason.starts_with("bad_seq"), "{reason}");
        assert_eq!(i.seq, Seq::Transport(1));
        let h = headers(&[("Toolstream-Provider", "nope")]);
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        let reason = i.rejected.expect("rejected");
        assert!(reason.starts_with("unknown_provider"), "{reason}");
        let h = headers(&[("Toolstream-Control", "stop")]);
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        assert!(i.rejected.expect("rejected").starts_with("bad_control"));
    }

    #[test]
    fn an_input_the_store_keeps_failing_is_dead_lettered_through_the_store_never_dropped() {
        // the store takes the dead letter: terminated, and its stream ends lost_chunk
        let store = flaky_store(0);
        let first = chunk_input(6);
        let _ = apply_with_retry(&store, &first);
        assert_eq!(
            give_up_on_storage(&store, &chunk_input(7), 5),
            Disposition::Term
        );
        let snap = store
            .message_snapshot("c", "m")
            .expect("read")
            .expect("stored");
        assert_eq!(snap.finish_reason.as_deref(), Some("lost_chunk"));
        // the store still fails: nak'd again, not dropped
        let store = flaky_store(u32::MAX);
        assert_eq!(
            give_up_on_storage(&store, &chunk_input(8), 5),
            Disposition::NakDelay
        );
        // applied already (a failed flush kept it): acked, not dead-lettered
        let store = flaky_store(0);
        let input = chunk_input(9);
        let _ = apply_with_retry(&store, &input);
        assert_eq!(give_up_on_storage(&store, &input, 5), Disposition::Ack);
    }

    #[test]
    fn dispositions_never_ack_what_is_not_durable() {
        let ok = Ok(Applied::Accepted { events: 1 });
        assert_eq!(Disposition::after_apply(&ok, true), Disposition::Ack);
        assert_eq!(Disposition::after_apply(&ok, false), Disposition::NakDelay);
        let dead = Ok(Applied::DeadLettered { reason: "x".into() });
        assert_eq!(Disposition::after_apply(&dead, true), Disposition::Term);
        assert_eq!(
            Disposition::after_apply(&dead, false),
            Disposition::NakDelay
        );
        let err: Result<Applied, StoreError> = Err(StoreError::Corrupt {
            space: "t",
            detail: "d".into(),
        });
        assert_eq!(Disposition::after_apply(&err, true), Disposition::NakDelay);
    }

    /// A storage whose first `failures` commits fail, like a disk that recovers.
    struct FlakyStorage {
        inner: assembler::storage::memory::MemoryStorage,
        failures: std::sync::atomic::AtomicU32,
    }

    impl assembler::storage::Storage for FlakyStorage {
        fn get(
            &self,
            space: assembler::storage::Space,
            key: &[u8],
        ) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(space, key)
        }
        fn scan_prefix(
            &self,
            space: assembler::storage::Space,
            prefix: &[u8],
        ) -> Result<Vec<assembler::storage::Pair>, StoreError> {
            self.inner.scan_prefix(space, prefix)
        }
        fn first_n(
            &self,
            space: assembler::storage::Space,
            limit: usize,
        ) -> Result<Vec<assembler::storage::Pair>, StoreError> {
            self.inner.first_n(space, limit)
        }
        fn count(&self, space: assembler::storage::Space) -> Result<usize, StoreError> {
            self.inner.count(space)
        }
        fn commit(&self, set: assembler::storage::WriteSet) -> Result<(), StoreError> {
            use std::sync::atomic::Ordering;
            let left = self.failures.load(Ordering::SeqCst);
            if left > 0 {
                self.failures.store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Corrupt {
                    space: "test",
                    detail: "injected commit failure".into(),
                });
            }
            self.inner.commit(set)
        }
        fn remove(&self, space: assembler::storage::Space, key: &[u8]) -> Result<bool, StoreError> {
            self.inner.remove(space, key)
        }
        fn flush(&self) -> Result<(), StoreError> {
            self.inner.flush()
        }
    }

    fn flaky_store(failures: u32) -> Store {
        let storage = FlakyStorage {
            inner: assembler::storage::memory::MemoryStorage::new(),
            failures: std::sync::atomic::AtomicU32::new(failures),
        };
        Store::with_storage(std::sync::Arc::new(storage), assembler::Config::default())
            .expect("store")
    }

    fn chunk_input(seq: u64) -> OwnedInput {
        let body = Bytes::from_static(
            br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}"#,
        );
        let mut h = HeaderMap::new();
        h.insert(HEADER_PROVIDER, "openai-chat");
        parse_message(
            &subjects(),
            "toolstream.chunks.c.m",
            Some(&h),
            &body,
            seq,
            0,
        )
        .expect("input")
    }

    /// A storage error used to nak the input, letting a later chunk of the same stream be
    /// applied before its redelivery; with only the JetStream sequence, the redelivered one was
    /// then dropped as a duplicate. Transient errors are now retried in place, in order.
    #[test]
    fn a_transient_storage_error_is_retried_in_place_not_nakd() {
        let store = flaky_store(2);
        let result = apply_batch(&store, &[chunk_input(7), chunk_input(8)]);
        assert!(result.flushed);
        assert_eq!(result.outcomes.len(), 2);
        assert!(matches!(result.outcomes[0], Ok(Applied::Accepted { .. })));
        assert!(matches!(
            result.outcomes[1],
            Ok(Applied::Duplicate) | Ok(Applied::Accepted { .. })
        ));
        let snapshot = store
            .message_snapshot("c", "m")
            .expect("read")
            .expect("stored");
        assert_eq!(snapshot.calls.len(), 1);
    }

    #[test]
    fn a_storage_error_that_persists_stops_the_batch_at_that_input() {
        let store = flaky_store(APPLY_ATTEMPTS);
        let result = apply_batch(&store, &[chunk_input(7), chunk_input(8)]);
        assert_eq!(
            result.outcomes.len(),
            1,
            "nothing after the failed input is applied"
        );
        assert!(result.outcomes[0].is_err());
        let dispositions: Vec<Disposition> = result
            .outcomes
            .iter()
            .map(|o| Disposition::after_apply(o, result.flushed))
            .collect();
        assert_eq!(dispositions, vec![Disposition::NakDelay]);
    }
}
