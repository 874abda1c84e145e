//! A message delivered before (after a crash, a lost ack, a nak), or on a leased partition
//! delivered to an earlier owner that never acked it, is applied alone behind a durable note,
//! and dead-lettered as `poison` once the worker has stopped `max_deliver - 1` times while
//! applying it. The note is kept in the store ([`apply_alone`]), or for a leased partition in
//! NATS, where the partition's next owner finds it (`crate::ownership::attempts`; the consume
//! loop writes it around [`apply_noted`]).

use super::apply::{apply_with_retry, BatchResult};
use super::inputs::OwnedInput;
use assembler::{Applied, Store, StoreError};
use chunk_model::wire::DeadLetterCode;
use std::time::Instant;

/// Applies one input that was delivered before, alone, behind a durable note in the store
/// (see [`super::ConsumeLoop::process`]); dead-letters it as `poison` once the process has
/// stopped `give_up_after` times while applying it. Flushes. Blocking.
pub(super) fn apply_alone(store: &Store, input: &OwnedInput, give_up_after: u32) -> BatchResult {
    let started = Instant::now();
    let seq = input.origin().stream_seq;
    let outcome = match store.begin_attempt(seq) {
        Err(e) => Err(e),
        Ok(stops) => apply_or_give_up(store, input, stops, give_up_after),
    };
    // the process is still here: whatever happened, this input did not stop it
    let ended = store.end_attempt(seq);
    flushed(store, outcome, ended, started)
}

/// [`apply_alone`] for an input whose note is kept elsewhere (in NATS, by the caller, before
/// and after): `stops` is how often the worker stopped while applying it. Flushes. Blocking.
pub(super) fn apply_noted(
    store: &Store,
    input: &OwnedInput,
    stops: u32,
    give_up_after: u32,
) -> BatchResult {
    let started = Instant::now();
    let outcome = apply_or_give_up(store, input, stops, give_up_after);
    flushed(store, outcome, Ok(()), started)
}

/// Applies `input`, or dead-letters it as `poison` once it stopped the worker `give_up_after`
/// times.
fn apply_or_give_up(
    store: &Store,
    input: &OwnedInput,
    stops: u32,
    give_up_after: u32,
) -> Result<Applied, StoreError> {
    if stops >= give_up_after {
        let reason = DeadLetterCode::Poison.with(format_args!(
            "the worker stopped {stops} times while applying this input alone"
        ));
        store.reject(&input.as_input(), &reason, input.published_ms)
    } else {
        apply_with_retry(store, input)
    }
}

/// Flushes after one input's attempt (`before`: whether what must precede the flush
/// succeeded).
fn flushed(
    store: &Store,
    outcome: Result<Applied, StoreError>,
    before: Result<(), StoreError>,
    started: Instant,
) -> BatchResult {
    let apply_time = started.elapsed();
    let flush_started = Instant::now();
    let flushed = match before.and_then(|()| store.flush()) {
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
