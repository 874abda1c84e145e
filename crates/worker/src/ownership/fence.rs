//! The fence of one lease: what an engine checks before every ack and every publish.
//!
//! A [`Fence`] is valid while `now < valid_until` and it was not revoked. `valid_until` is the
//! local send time of the last successful create or renewal, plus the lease TTL, minus the
//! safety margin: the server stored that write after we sent it, so the key outlives
//! `valid_until` by at least the margin (see the module docs of [`super`] for the assumptions).
//!
//! The clock is `tokio::time::Instant`: `CLOCK_MONOTONIC` in a build (it advances while the
//! process is stopped, so after SIGSTOP + SIGCONT past the TTL [`Fence::is_valid`] is false
//! before any network round trip), and the paused clock in `start_paused` tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// A cheap, cloneable validity check for one lease (two atomic loads and a clock read).
#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    partition: u32,
    epoch: u64,
    /// The instant `valid_until_ns` counts from.
    base: Instant,
    /// Nanoseconds after `base` at which the lease stops being valid locally.
    valid_until_ns: AtomicU64,
    revoked: AtomicBool,
    /// `true` once revoked; [`Fence::revoked`] waits on it.
    revoked_tx: watch::Sender<bool>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("partition", &self.inner.partition)
            .field("epoch", &self.inner.epoch)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl Fence {
    /// A fence valid until `valid_until` (the driver's create or a test).
    pub(crate) fn new(partition: u32, epoch: u64, valid_until: Instant) -> Fence {
        let base = Instant::now();
        let (revoked_tx, _) = watch::channel(false);
        let fence = Fence {
            inner: Arc::new(Inner {
                partition,
                epoch,
                base,
                valid_until_ns: AtomicU64::new(0),
                revoked: AtomicBool::new(false),
                revoked_tx,
            }),
        };
        fence.extend_to(valid_until);
        fence
    }

    /// The partition this fence guards.
    pub fn partition(&self) -> u32 {
        self.inner.partition
    }

    /// The lease's epoch (the KV revision of its create; grows with every new owner).
    pub fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// Whether the holder may still ack and publish for this partition: not revoked, and the
    /// local deadline not passed. Check it right before each ack and each publish.
    pub fn is_valid(&self) -> bool {
        !self.inner.revoked.load(Ordering::Acquire) && Instant::now() < self.valid_until()
    }

    /// The local deadline (moves forward with each renewal).
    pub fn valid_until(&self) -> Instant {
        self.inner.base
            + std::time::Duration::from_nanos(self.inner.valid_until_ns.load(Ordering::Acquire))
    }

    /// Whether [`Fence::revoke`] was called (a lapse is not a revocation until the driver sees it;
    /// [`Fence::is_valid`] covers both).
    pub fn is_revoked(&self) -> bool {
        self.inner.revoked.load(Ordering::Acquire)
    }

    /// Resolves once the fence is no longer valid: revoked, or its deadline passed without a
    /// renewal. Cancel-safe.
    pub async fn revoked(&self) {
        let mut rx = self.inner.revoked_tx.subscribe();
        loop {
            if !self.is_valid() {
                return;
            }
            let until = self.valid_until();
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The sender lives in `inner`, which we hold: cannot happen; stop waiting
                        // on it and fall back to the deadline.
                        tokio::time::sleep_until(until).await;
                    }
                }
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Moves the deadline to `until` (a successful renewal); never backwards.
    pub(crate) fn extend_to(&self, until: Instant) {
        let ns = until
            .checked_duration_since(self.inner.base)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.inner.valid_until_ns.fetch_max(ns, Ordering::AcqRel);
    }

    /// Revokes for good: [`Fence::is_valid`] is false from now on and [`Fence::revoked`] wakes.
    pub(crate) fn revoke(&self) {
        self.inner.revoked.store(true, Ordering::Release);
        self.inner.revoked_tx.send_replace(true);
    }

    /// Whether the local deadline has passed (regardless of revocation).
    pub(crate) fn lapsed(&self) -> bool {
        Instant::now() >= self.valid_until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A task waiting on `fence.revoked()`.
    fn spawn_waiter(fence: &Fence) -> tokio::task::JoinHandle<()> {
        let f = fence.clone();
        tokio::spawn(async move { f.revoked().await })
    }

    #[tokio::test(start_paused = true)]
    async fn a_fence_is_valid_until_its_deadline_and_a_renewal_moves_it() {
        let fence = Fence::new(3, 17, Instant::now() + Duration::from_secs(2));
        assert!(fence.is_valid());
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(fence.is_valid());
        fence.extend_to(Instant::now() + Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert!(fence.is_valid(), "the renewal moved the deadline");
        // An older renewal's deadline never moves it back.
        fence.extend_to(Instant::now());
        assert!(fence.is_valid());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(!fence.is_valid(), "deadline passed");
        assert!(fence.lapsed());
        assert!(!fence.is_revoked(), "a lapse is not a revocation");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_past_the_deadline_leaves_the_fence_invalid_without_any_driver() {
        // What SIGSTOP + SIGCONT does: the monotonic clock jumps past the deadline while
        // nothing ran. The fence reads the clock itself, so it is invalid at once.
        let fence = Fence::new(0, 5, Instant::now() + Duration::from_secs(1));
        let clone = fence.clone();
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(!clone.is_valid());
        // And `revoked()` returns at once.
        tokio::time::timeout(Duration::from_millis(1), clone.revoked())
            .await
            .expect("revoked() resolves for a lapsed fence");
    }

    #[tokio::test(start_paused = true)]
    async fn revoking_wakes_every_waiter_and_is_final() {
        let fence = Fence::new(1, 9, Instant::now() + Duration::from_secs(60));
        let waiter = spawn_waiter(&fence);
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        fence.revoke();
        tokio::time::timeout(Duration::from_millis(10), waiter)
            .await
            .expect("woken")
            .expect("joined");
        fence.extend_to(Instant::now() + Duration::from_secs(600));
        assert!(!fence.is_valid(), "a renewal does not undo a revocation");
    }

    #[tokio::test(start_paused = true)]
    async fn revoked_waits_for_a_renewed_deadline() {
        let fence = Fence::new(1, 9, Instant::now() + Duration::from_secs(1));
        let waiter = spawn_waiter(&fence);
        tokio::time::advance(Duration::from_millis(900)).await;
        fence.extend_to(Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_millis(500)).await;
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "renewed: still valid");
        tokio::time::advance(Duration::from_millis(600)).await;
        tokio::time::timeout(Duration::from_millis(10), waiter)
            .await
            .expect("woken at the renewed deadline")
            .expect("joined");
    }
}
