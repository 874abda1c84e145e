//! The relay task: runs [`sink::jetstream::Relay`] rounds whenever the consume loop wakes it
//! (after a flush), at least every `relay.interval`, back to back while rows remain, and with
//! capped exponential backoff after an error. When told to stop it drains the outbox for at
//! most `relay.shutdown_timeout`.

use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use assembler::Store;
use sink::jetstream::{Relay, Round};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Longest pause between retries after a failed round.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The relay task's inputs.
pub struct RelayTask {
    /// Publishes rounds.
    pub relay: Relay,
    /// The outbox.
    pub store: Arc<Store>,
    /// Nudged by the consume loop after each flush.
    pub wake: Arc<Notify>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Wake at least this often.
    pub interval: Duration,
    /// How long the final drain may take.
    pub drain_timeout: Duration,
}

/// How the final drain ended.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The outbox is empty.
    Empty,
    /// Rows remain (published on the next start); the deadline passed or publishing failed.
    Incomplete,
}

impl RelayTask {
    fn account(&self, round: &Round) {
        Metrics::add(&self.metrics.events_out, round.events as u64);
        // rows too large for the server went to the DLQ in their place
        Metrics::add(&self.metrics.dead_letters, round.too_large as u64);
        if let Some(e) = &round.error {
            Metrics::add(&self.metrics.publish_errors, 1);
            tracing::warn!(error = %e, "relay round failed; backing off");
        }
        if round.offloaded > 0 || round.cut > 0 {
            tracing::info!(
                offloaded = round.offloaded,
                cut = round.cut,
                "rows larger than max_payload published: events with payload_ref, dead letters with their body cut"
            );
        }
        if round.duplicates > 0 {
            tracing::debug!(
                duplicates = round.duplicates,
                "already-published rows confirmed as duplicates"
            );
        }
    }

    /// Runs until `stop`, then drains. `stop` must be triggered only after the consume loop
    /// has made its last batch durable, so the drain sees every row.
    pub async fn run(self, mut stop: Shutdown) -> Drained {
        let mut backoff = Duration::from_millis(50);
        loop {
            if stop.is_triggered() {
                break;
            }
            // A round cut short by the stop signal is safe: rows are deleted only after their
            // PubAck, and whatever it published is re-published (deduplicated) by the drain.
            let round = tokio::select! {
                round = self.relay.round(&self.store) => round,
                _ = stop.wait() => break,
            };
            self.account(&round);
            if round.error.is_some() {
                tokio::select! {
                    _ = stop.wait() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            backoff = Duration::from_millis(50);
            if round.more {
                continue;
            }
            tokio::select! {
                _ = stop.wait() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
        self.drain().await
    }

    async fn drain(&self) -> Drained {
        let deadline = tokio::time::Instant::now() + self.drain_timeout;
        let work = async {
            let mut backoff = Duration::from_millis(50);
            loop {
                let round = self.relay.round(&self.store).await;
                self.account(&round);
                match (&round.error, round.more) {
                    (None, false) => return,
                    (None, true) => {}
                    (Some(_), _) => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        };
        let finished = tokio::time::timeout_at(deadline, work).await.is_ok();
        let store = Arc::clone(&self.store);
        let left = tokio::task::spawn_blocking(move || store.outbox_len())
            .await
            .ok();
        match (finished, left) {
            (true, Some(0)) => {
                tracing::info!("outbox drained");
                Drained::Empty
            }
            (_, left) => {
                tracing::warn!(
                    remaining = ?left,
                    "outbox not fully drained; the rest is published on the next start"
                );
                Drained::Incomplete
            }
        }
    }
}
