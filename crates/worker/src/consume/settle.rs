//! Settling a delivered message: the one [`Disposition`] each gets, the storage failures
//! counted per input before it is given up on ([`give_up_on_storage`]), and the straight
//! dead letter of a message that cannot be attributed ([`ConsumeLoop::dead_letter_now`]).

use super::inputs::{OwnedInput, Rejected};
use super::ConsumeLoop;
use crate::serve::metrics::Metrics;
use assembler::{Applied, Store, StoreError};
use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::HeaderMap;
use chunk_model::wire::{self, headers, DeadLetterCode};

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

/// How many times each input failed to be stored in this process (see
/// [`give_up_on_storage`]).
#[derive(Debug, Default)]
pub struct StoreFailures(std::sync::Mutex<std::collections::HashMap<u64, u32>>);

impl StoreFailures {
    /// Counts one more failure of the input at `seq`; returns the count.
    pub(super) fn note(&self, seq: u64) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(seq).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// The input at `seq` was settled. (Every settled input comes here and the map is
    /// nearly always empty: no hash is computed then, ~200 instructions per input.)
    pub(super) fn forget(&self, seq: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !map.is_empty() {
            map.remove(&seq);
        }
    }
}

/// Gives up on an input the store failed to take `failures` times: dead-letters it through the
/// store (`store_error`, its stream ends `lost_chunk`) and flushes. `Term` when that is
/// durable, `Ack` when the input turns out to be applied already (a failed flush kept it),
/// `NakDelay` while the store still fails: then it is tried again later, never dropped.
pub(super) fn give_up_on_storage(store: &Store, input: &OwnedInput, failures: u32) -> Disposition {
    let reason =
        DeadLetterCode::StoreError.with(format_args!("not stored after {failures} attempts"));
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

impl ConsumeLoop {
    /// Publishes a rejected message to its DLQ subject and waits for the PubAck.
    ///
    /// A dead letter larger than the server's `max_payload` (a body that filled it, plus these
    /// headers) keeps its reason and headers with its body cut, `Toolstream-Body-Truncated:
    /// <original size>` and `Toolstream-Body-Sha256`, and the whole body stored in the payload
    /// bucket (`Toolstream-Body-Ref: <bucket>/<object>`) when that is possible
    /// (`sink::payloads::fit_dead_letter`): it is always published, never given up on for its
    /// size.
    ///
    /// `stream_seq` is the message's, as its reply subject gave it ([`super::delivery`]).
    pub(super) async fn dead_letter_now(
        &self,
        msg: &jetstream::Message,
        stream_seq: u64,
        rejected: &Rejected,
    ) -> Disposition {
        let msg_id = wire::msg_id::input_dead_letter(stream_seq);
        if self.published.contains(&msg_id) {
            // a leased partition's rebuild: an earlier owner published this one
            Metrics::add(&self.metrics.leases.already_published, 1);
            return Disposition::Term;
        }
        let fields = vec![
            (headers::REASON.to_string(), rejected.reason.clone()),
            (headers::SUBJECT.to_string(), msg.subject.to_string()),
            (headers::STREAM_SEQ.to_string(), stream_seq.to_string()),
        ];
        // the bucket is provisioned at start; this only opens it, and only for a body too large
        let payloads = sink::payloads::Payloads::open(self.js.clone(), sink::payloads::BUCKET);
        let (fields, body) =
            sink::payloads::fit_dead_letter(&payloads, fields, &msg_id, msg.payload.clone()).await;
        let mut headers = HeaderMap::new();
        for (name, value) in &fields {
            headers.insert(name.as_str(), value.as_str());
        }
        if let Some(guard) = &self.guard {
            // a leased partition: published only while the lease holds, naming its owner
            if !guard.is_valid() {
                return Disposition::NakDelay;
            }
            headers.insert(sink::guarded::OWNER_HEADER, guard.owner().as_str());
        }
        let publish = PublishMessage::build()
            .headers(headers)
            .message_id(msg_id)
            .payload(body);
        tracing::warn!(
            subject = %msg.subject,
            stream_seq,
            reason = %crate::run::redact::reason_code(&rejected.reason),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::apply::apply_with_retry;
    use crate::consume::testing::{chunk_input, flaky_store};

    #[test]
    fn failures_are_counted_per_input_until_it_is_settled() {
        let failures = StoreFailures::default();
        failures.forget(3); // nothing counted yet: nothing to forget
        assert_eq!(
            (failures.note(3), failures.note(3), failures.note(4)),
            (1, 2, 1)
        );
        failures.forget(3);
        assert_eq!(failures.note(3), 1, "settled: counted from one again");
        assert_eq!(failures.note(4), 2, "another input's count is kept");
        failures.forget(9);
        assert_eq!(failures.note(4), 3);
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
}
