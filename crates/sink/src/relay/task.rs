//! [`RelayTask`]: the loop around relay rounds. It runs a round whenever it is woken (the
//! consume loop nudges it after each flush that made outbox rows durable), at least every
//! `interval`, back to back while rows remain, and after a failed round waits with capped
//! exponential backoff ([`crate::backoff::Backoff`]). When told to stop it drains the outbox
//! for at most `drain_timeout`.

use super::{Relay, Round};
use crate::backoff::Backoff;
use crate::outbox::Outbox;
use crate::publisher::Publisher;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The pauses after a failed round: 50 ms, doubling, at most 5 s.
pub const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// How the final drain ended.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The outbox is empty.
    Empty,
    /// Rows remain (published on the next start); the deadline passed or publishing failed.
    Incomplete,
}

/// Called with every round's result (the worker counts them in its metrics).
type Observer = Box<dyn Fn(&Round) + Send + Sync>;

/// The relay loop: a [`Relay`] over an [`Outbox`], woken by a [`Notify`].
pub struct RelayTask<P, O: ?Sized> {
    relay: Relay<P>,
    outbox: Arc<O>,
    wake: Arc<Notify>,
    interval: Duration,
    drain_timeout: Duration,
    backoff: Backoff,
    observe: Observer,
}

impl<P: Publisher, O: Outbox + ?Sized> RelayTask<P, O> {
    /// A loop running `relay` over `outbox`, woken by `wake`; by default at least every
    /// second, a 10-second drain, backoff [`BACKOFF`].
    pub fn new(relay: Relay<P>, outbox: Arc<O>, wake: Arc<Notify>) -> RelayTask<P, O> {
        RelayTask {
            relay,
            outbox,
            wake,
            interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
            backoff: BACKOFF,
            observe: Box::new(|_| {}),
        }
    }

    /// Runs a round at least this often, woken or not.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long the drain at shutdown may take.
    pub fn drain_timeout(mut self, drain_timeout: Duration) -> Self {
        self.drain_timeout = drain_timeout;
        self
    }

    /// The pauses after a failed round.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Calls `observe` with every round (counters); the loop itself logs.
    pub fn on_round(mut self, observe: impl Fn(&Round) + Send + Sync + 'static) -> Self {
        self.observe = Box::new(observe);
        self
    }

    fn account(&self, round: &Round) {
        (self.observe)(round);
        if let Some(e) = &round.error {
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

    /// Runs until `stop` turns `true` (or its sender is gone), then drains. `stop` must turn
    /// only after the consume loop has made its last batch durable, so the drain sees every
    /// row.
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> Drained {
        let mut backoff = self.backoff;
        loop {
            if *stop.borrow() {
                break;
            }
            // A round cut short by the stop signal is safe: rows are deleted only after their
            // PubAck, and whatever it published is re-published (deduplicated) by the drain.
            let round = tokio::select! {
                round = self.relay.round(&self.outbox) => round,
                _ = stopped(&mut stop) => break,
            };
            self.account(&round);
            if round.error.is_some() {
                tokio::select! {
                    _ = stopped(&mut stop) => break,
                    _ = backoff.sleep() => {}
                }
                continue;
            }
            backoff.reset();
            if round.more {
                continue;
            }
            tokio::select! {
                _ = stopped(&mut stop) => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
        self.drain().await
    }

    /// Rounds until the outbox is empty or `drain_timeout` has passed.
    async fn drain(&self) -> Drained {
        let deadline = tokio::time::Instant::now() + self.drain_timeout;
        let work = async {
            let mut backoff = self.backoff;
            backoff.reset();
            loop {
                let round = self.relay.round(&self.outbox).await;
                self.account(&round);
                match (&round.error, round.more) {
                    (None, false) => return,
                    (None, true) => {}
                    (Some(_), _) => backoff.sleep().await,
                }
            }
        };
        let finished = tokio::time::timeout_at(deadline, work).await.is_ok();
        let outbox = Arc::clone(&self.outbox);
        let left = tokio::task::spawn_blocking(move || outbox.len()).await.ok();
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

/// Completes once `stop` is `true`, or its sender is gone (nobody can ask any more, so treat
/// as asked). Cancel-safe.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
