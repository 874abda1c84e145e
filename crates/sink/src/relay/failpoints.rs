//! Test failpoints of the relay, compiled only with the cargo feature `failpoints` (the
//! worker's crash tests turn it on; a release build leaves them out). Each is off unless armed.

use super::Relay;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts towards an armed threshold (shared by the relay's clones).
#[derive(Debug, Clone)]
struct Counter {
    after: u64,
    seen: Arc<AtomicU64>,
}

impl Counter {
    fn new(after: u64) -> Counter {
        Counter {
            after,
            seen: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Adds `n`; whether the threshold is reached.
    fn add(&self, n: u64) -> bool {
        self.seen.fetch_add(n, Ordering::SeqCst) + n >= self.after
    }
}

/// The relay's armed failpoints.
#[derive(Debug, Clone, Default)]
pub(super) struct Failpoints {
    crash_after_confirmed: Option<Counter>,
    hold_after_payload_puts: Option<Counter>,
}

impl Failpoints {
    /// After a round's PubAcks, before its rows are deleted: aborts the process once the
    /// armed number of publishes is confirmed.
    pub(super) fn confirmed(&self, n: usize) {
        if let Some(c) = &self.crash_after_confirmed {
            if c.add(n as u64) {
                tracing::error!(
                    confirmed = c.seen.load(Ordering::SeqCst),
                    "failpoint: aborting between PubAck and outbox delete"
                );
                std::process::abort();
            }
        }
    }

    /// After an oversized event is stored in the payload bucket, before it is published:
    /// once armed and reached, never returns (the relay stops for good).
    pub(super) async fn payload_stored(&self, object: &str) {
        if let Some(c) = &self.hold_after_payload_puts {
            if c.add(1) {
                tracing::error!(
                    %object,
                    "failpoint: payload stored, holding the event (relay stopped)"
                );
                std::future::pending::<()>().await;
            }
        }
    }
}

impl<P> Relay<P> {
    /// Test failpoint: abort the process once `after` publishes have been confirmed, after
    /// their PubAcks and before their outbox rows are deleted — the window in which a crash
    /// makes the relay publish the same events again (deduplicated by `Nats-Msg-Id`). `None`
    /// disables it.
    pub fn with_crash_after_confirmed(mut self, after: Option<u64>) -> Relay<P> {
        self.failpoints.crash_after_confirmed = after.map(Counter::new);
        self
    }

    /// Test failpoint: once `after` oversized events have been stored in the payload bucket,
    /// stop the relay for good right after storing, before publishing the event — the window
    /// a crash test kills the process in. `None` disables it.
    pub fn with_hold_after_payload_puts(mut self, after: Option<u64>) -> Relay<P> {
        self.failpoints.hold_after_payload_puts = after.map(Counter::new);
        self
    }
}
