//! Waiting for something that happens eventually: the one deadline-polling loop of the tests.
//!
//! A probe returns `bool` or `Option<T>`; [`eventually`] (blocking) and [`eventually_async`]
//! call it every [`POLL`] until it is ready and return its value, or `None` once the timeout
//! has passed, so the caller's panic message says what it waited for:
//!
//! ```ignore
//! eventually(WAIT, || worker.log().contains("JetStream ready"))
//!     .unwrap_or_else(|| panic!("never ready:\n{}", worker.log()));
//! ```

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] and [`eventually_async`] ask their probe again.
pub const POLL: Duration = Duration::from_millis(25);

/// What a probe reports: `true` or `Some(value)` once the awaited thing has happened.
pub trait Probe {
    /// What the wait returns when the probe is ready.
    type Value;
    /// `Some` when ready.
    fn ready(self) -> Option<Self::Value>;
}

impl Probe for bool {
    type Value = ();
    fn ready(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Probe for Option<T> {
    type Value = T;
    fn ready(self) -> Option<T> {
        self
    }
}

/// Calls `probe` until it is ready (first at once, then every [`POLL`]) and returns its value;
/// `None` when `timeout` passed first. Blocks the calling thread between probes.
#[must_use = "None means the timeout passed: fail the test with what it waited for"]
pub fn eventually<P: Probe>(timeout: Duration, mut probe: impl FnMut() -> P) -> Option<P::Value> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().ready() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// [`eventually`] for an async probe (`|| async move { ... }`), sleeping on tokio's timer.
#[must_use = "None means the timeout passed: fail the test with what it waited for"]
pub async fn eventually_async<P, F, Fut>(timeout: Duration, mut probe: F) -> Option<P::Value>
where
    P: Probe,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await.ready() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn returns_the_first_ready_value() {
        let calls = Cell::new(0);
        let got = eventually(Duration::from_secs(5), || {
            calls.set(calls.get() + 1);
            (calls.get() == 3).then_some(calls.get() * 10)
        });
        assert_eq!(got, Some(30));
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn gives_up_after_the_timeout_having_asked_at_least_once() {
        let calls = Cell::new(0);
        let started = Instant::now();
        let got = eventually(Duration::from_millis(120), || {
            calls.set(calls.get() + 1);
            false
        });
        assert_eq!(got, None);
        assert!(started.elapsed() >= Duration::from_millis(120));
        assert!(calls.get() >= 2, "asked {} times", calls.get());
    }

    #[tokio::test]
    async fn async_probes_wait_on_the_tokio_timer() {
        let calls = Cell::new(0);
        let calls = &calls;
        let got = eventually_async(Duration::from_secs(5), || async move {
            calls.set(calls.get() + 1);
            calls.get() >= 2
        })
        .await;
        assert_eq!(got, Some(()));
        let none = eventually_async(Duration::from_millis(60), || async { None::<u8> }).await;
        assert_eq!(none, None);
    }
}
