//! Applying inputs to the store on the blocking pool: a batch in order, one atomic commit each,
//! storage errors retried in place ([`apply_inputs`]); the flush that makes them durable is a
//! step of its own ([`flush_store`]), so the loop can run it while it applies the next batch.

use super::inputs::OwnedInput;
use assembler::{Applied, Store, StoreError};
use sink::backoff::Backoff;
use std::time::{Duration, Instant};

/// What one blocking apply step did: an outcome per input applied (it stops at the first
/// input that still fails), and whether (and how long) the flush after it took.
pub(super) struct BatchResult {
    pub(super) outcomes: Vec<Result<Applied, StoreError>>,
    pub(super) flushed: bool,
    pub(super) apply_time: Duration,
    pub(super) flush_time: Duration,
}

/// Attempts of one apply before its storage error is given up on (and the rest of the batch
/// is nak'd).
pub(super) const APPLY_ATTEMPTS: u32 = 5;

/// Pauses between those attempts (the thread blocks: this runs on the blocking pool).
const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(160));

/// Applies one input, retrying a storage error in place a few times (20, 40, 80, 160 ms).
///
/// Retrying here rather than nak'ing keeps the stream's order: a nak'd chunk is redelivered
/// only after its delay, and a later chunk of the same stream fetched meanwhile would be
/// applied first (parked when it has a `Toolstream-Seq`, but with only the JetStream sequence
/// the late one would then be taken for a duplicate).
pub(super) fn apply_with_retry(store: &Store, owned: &OwnedInput) -> Result<Applied, StoreError> {
    #[cfg(feature = "failpoints")]
    crate::run::failpoints::abort_on_body(&owned.body);
    let mut delay = RETRY_BACKOFF;
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
                std::thread::sleep(delay.next_pause());
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Applies inputs in order (one atomic commit each, storage errors retried in place), stopping
/// at the first input that still fails. Nothing is durable yet: see [`flush_store`]. Blocking.
pub(super) fn apply_inputs<'i>(
    store: &Store,
    inputs: impl IntoIterator<Item = &'i OwnedInput>,
) -> (Vec<Result<Applied, StoreError>>, Duration) {
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for input in inputs {
        let span = tracing::debug_span!(
            "apply",
            conversation_id = %input.conversation_id(),
            message_id = %input.message_id(),
            stream_seq = input.origin().stream_seq
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
    (outcomes, started.elapsed())
}

/// One flush of the store: whether it succeeded, and how long it took. Everything committed
/// before it began is durable once it returns `true`. Blocking.
pub(super) fn flush_store(store: &Store) -> (bool, Duration) {
    let started = Instant::now();
    let flushed = match store.flush() {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "flush failed; the batch will be redelivered");
            false
        }
    };
    (flushed, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::settle::Disposition;
    use crate::consume::testing::{chunk_input, flaky_store};

    /// Apply then flush, as the loop does for one batch.
    fn apply_batch(store: &Store, inputs: &[OwnedInput]) -> BatchResult {
        let (outcomes, apply_time) = apply_inputs(store, inputs);
        let (flushed, flush_time) = flush_store(store);
        BatchResult {
            outcomes,
            flushed,
            apply_time,
            flush_time,
        }
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
