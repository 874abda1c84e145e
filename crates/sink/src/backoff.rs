//! [`Backoff`]: the one capped exponential backoff of every retry loop (the relay's rounds and
//! drain here; the worker's consumer opening and provisioning use it too).
//!
//! The first pause is `start`, each next one twice the last, never more than `cap`; a success
//! calls [`Backoff::reset`] so the next failure starts small again.

use std::time::Duration;

/// Capped exponential backoff: `start`, `2·start`, `4·start`, … up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    start: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses from `start`, doubling up to `cap` (a `cap` below `start` is raised to it).
    pub const fn new(start: Duration, cap: Duration) -> Backoff {
        let cap = if cap.as_nanos() < start.as_nanos() {
            start
        } else {
            cap
        };
        Backoff {
            start,
            cap,
            next: start,
        }
    }

    /// The pause to take now; the one after it is twice as long, at most `cap`.
    pub fn next_pause(&mut self) -> Duration {
        let now = self.next;
        self.next = now.saturating_mul(2).min(self.cap);
        now
    }

    /// Sleeps for [`Backoff::next_pause`] (tokio time, so paused-time tests skip it).
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// After a success: the next pause is `start` again.
    pub fn reset(&mut self) {
        self.next = self.start;
    }

    /// The first pause.
    pub fn start(&self) -> Duration {
        self.start
    }

    /// The longest pause.
    pub fn cap(&self) -> Duration {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_twofold_and_stops_at_the_cap() {
        let mut b = Backoff::new(50 * MS, 1000 * MS);
        let pauses: Vec<_> = (0..8).map(|_| b.next_pause().as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn reset_starts_small_again() {
        let mut b = Backoff::new(100 * MS, 2000 * MS);
        for _ in 0..10 {
            let _ = b.next_pause();
        }
        assert_eq!(b.next_pause(), 2000 * MS);
        b.reset();
        assert_eq!(b.next_pause(), 100 * MS);
        assert_eq!(b.next_pause(), 200 * MS);
    }

    #[test]
    fn a_cap_below_the_start_is_the_start() {
        let mut b = Backoff::new(300 * MS, 100 * MS);
        assert_eq!((b.start(), b.cap()), (300 * MS, 300 * MS));
        assert_eq!([b.next_pause(), b.next_pause()], [300 * MS, 300 * MS]);
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(Duration::MAX / 3, Duration::MAX);
        for _ in 0..4 {
            let _ = b.next_pause();
        }
        assert_eq!(b.next_pause(), Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_waits_the_pause_it_hands_out() {
        let mut b = Backoff::new(50 * MS, 150 * MS);
        let t0 = tokio::time::Instant::now();
        b.sleep().await;
        b.sleep().await;
        b.sleep().await;
        b.sleep().await;
        // 50 + 100 + 150 + 150
        assert_eq!(t0.elapsed(), 450 * MS);
    }
}
