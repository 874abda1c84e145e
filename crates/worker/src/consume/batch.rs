//! One fetched batch through the store: parse every message, apply the fresh ones together and
//! each redelivered one alone, flush once, then settle every message ([`ConsumeLoop::process`]).

use super::apply::{apply_batch, BatchResult};
use super::inputs::{parse_message, OwnedInput, Rejected};
use super::poison::apply_alone;
use super::settle::{give_up_on_storage, Disposition};
use super::watermark::now_ms;
use super::ConsumeLoop;
use crate::serve::metrics::Metrics;
use assembler::{Applied, InputKind, StoreError};
use async_nats::jetstream::{self, AckKind};
use std::sync::Arc;
use std::time::Duration;

struct Work {
    msg: jetstream::Message,
    parsed: Result<OwnedInput, Rejected>,
}

impl ConsumeLoop {
    /// One batch: parse, apply, flush once, then settle every message.
    ///
    /// A message delivered before (after a crash, a lost ack, a nak) is applied alone, after a
    /// durable note ([`assembler::Store::begin_attempt`]): if the process stops while applying it, the
    /// next start knows which input it was, and after `max_deliver - 1` such stops the input
    /// is dead-lettered as `poison` instead of crashing the worker again. The messages that
    /// were merely fetched with it are applied alone too, get no stop recorded, and lose
    /// nothing. (The server redelivers without limit: it never drops a message on its own.)
    pub(super) async fn process(&self, batch: Vec<jetstream::Message>) {
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
                        crate::consume::watermark::nanos_to_ms(i.published.unix_timestamp_nanos());
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
        #[cfg(feature = "failpoints")]
        crate::run::failpoints::abort_between_flush_and_ack(
            self.abort_after_flushes,
            result.flushed,
            self.metrics
                .batches
                .load(std::sync::atomic::Ordering::Relaxed),
        );
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
                    reason = %crate::run::redact::reason_code(reason),
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
}
