//! Waiting for the server at start: JetStream provisioning retried until it succeeds, fails for
//! good, or shutdown is asked for ([`provision_until_ready`]). While the client is not connected
//! it waits for the connection instead of sending requests that can only time out, and goes on
//! the moment the client says it connected (no poll interval added to every start).

use super::shutdown::Shutdown;
use crate::nats::provision::{self, ProvisionError};
use crate::run::config::{Assignment, Config};
use async_nats::jetstream;
use chunk_model::wire::Subjects;
use sink::backoff::Backoff;
use std::future::Future;
use std::time::Duration;
use tokio::sync::Notify;

/// How often the connection state is looked at while the client is not connected and no
/// "connected" signal came (a safety net: the signal normally ends the wait at once).
const CONNECTED_POLL: Duration = Duration::from_millis(50);
/// Pauses after transient provisioning failures: 100 ms doubling up to 2 s (also those of
/// starting partition ownership, `super::leased`).
pub(super) const BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

/// Provisions, retrying transient failures until shutdown (`Ok(None)`).
///
/// `connected` is notified (`notify_one`) by the client's event callback on every connect.
pub(super) async fn provision_until_ready(
    client: &async_nats::Client,
    connected: &Notify,
    js: &jetstream::Context,
    config: &Config,
    subjects: &Subjects,
    shutdown: &mut Shutdown,
) -> anyhow::Result<Option<Consumers>> {
    retry_until_ready(
        || client.connection_state() == async_nats::connection::State::Connected,
        connected,
        || async {
            match config.consumer.assignment {
                Assignment::Static => provision::provision(js, config, subjects)
                    .await
                    .map(Consumers::Static),
                Assignment::Leases => provision::provision_streams(js, config, subjects)
                    .await
                    .map(|_| Consumers::Leased),
            }
        },
        &config.nats_url,
        shutdown,
    )
    .await
}

/// What provisioning made ready to read through.
pub(super) enum Consumers {
    /// The durable consumers of the static partition.
    Static(Vec<jetstream::consumer::PullConsumer>),
    /// Only the streams: each leased partition's engine makes its own consumers.
    Leased,
}

/// [`provision_until_ready`] over any connection state and attempt: while `connected()` is
/// false it waits for the `connected_signal` (looking again every [`CONNECTED_POLL`] at the
/// latest; saying once that it waits for `url`); a
/// transient failure is retried after a pause ([`BACKOFF`]); a fatal one is returned. `Ok(None)` once `shutdown` is asked for.
async fn retry_until_ready<T, C, A, Fut>(
    connected: C,
    connected_signal: &Notify,
    mut attempt: A,
    url: &str,
    shutdown: &mut Shutdown,
) -> anyhow::Result<Option<T>>
where
    C: Fn() -> bool,
    A: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProvisionError>>,
{
    let mut backoff = BACKOFF;
    let mut said_waiting = false;
    loop {
        if !connected() {
            if !said_waiting {
                // every start passes here until the first connect: not a warning (a refused
                // connection is said by nats::connect, with its cause)
                tracing::info!(url = %url, "waiting for the NATS server");
                said_waiting = true;
            }
            tokio::select! {
                _ = shutdown.wait() => return Ok(None),
                _ = connected_signal.notified() => {}
                _ = tokio::time::sleep(CONNECTED_POLL) => {}
            }
            continue;
        }
        let outcome = tokio::select! {
            _ = shutdown.wait() => return Ok(None),
            outcome = attempt() => outcome,
        };
        match outcome {
            Ok(ready) => return Ok(Some(ready)),
            Err(ProvisionError::Fatal(e)) => return Err(e.context("provisioning JetStream")),
            Err(ProvisionError::Transient(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "provisioning not possible yet; retrying");
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return Ok(None),
            _ = backoff.sleep() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::shutdown;
    use std::cell::RefCell;
    use tokio::time::Instant;

    fn transient() -> ProvisionError {
        ProvisionError::Transient(anyhow::anyhow!("no responders"))
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_after_pauses_doubling_from_100ms_up_to_2s() {
        let (_trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let attempts = RefCell::new(Vec::new());
        let ready = retry_until_ready(
            || true,
            &Notify::new(),
            || {
                attempts.borrow_mut().push(started.elapsed());
                let n = attempts.borrow().len();
                async move {
                    if n <= 7 {
                        Err(transient())
                    } else {
                        Ok(n)
                    }
                }
            },
            "nats://test",
            &mut stop,
        )
        .await
        .expect("no fatal error");
        assert_eq!(ready, Some(8), "the attempt that succeeds is the last one");
        let at = attempts.into_inner();
        let pauses: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_sent_while_disconnected_and_the_first_attempt_follows_the_connection() {
        let (_trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let connected_at = Duration::from_millis(1_000);
        let attempts = RefCell::new(Vec::new());
        let ready = retry_until_ready(
            || started.elapsed() >= connected_at,
            &Notify::new(),
            || {
                attempts.borrow_mut().push(started.elapsed());
                async { Ok::<_, ProvisionError>(()) }
            },
            "nats://test",
            &mut stop,
        )
        .await
        .expect("no fatal error");
        assert_eq!(ready, Some(()));
        let at = attempts.into_inner();
        assert_eq!(at.len(), 1, "no attempt while disconnected");
        assert!(
            at[0] >= connected_at && at[0] < connected_at + CONNECTED_POLL,
            "the attempt follows the connection within one poll: {:?}",
            at[0]
        );
    }

    /// Every start used to wait one or two whole polls (2 x 50 ms of a 117 ms start to
    /// healthy, measured with `perf`): the client's "connected" event now ends the wait.
    #[tokio::test(start_paused = true)]
    async fn the_first_attempt_follows_the_connected_event_at_once_not_the_next_poll() {
        let (_trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let connected_at = Duration::from_millis(1_013);
        let signal = std::rc::Rc::new(Notify::new());
        let notifier = std::rc::Rc::clone(&signal);
        let attempts = RefCell::new(Vec::new());
        let (ready, ()) = tokio::join!(
            retry_until_ready(
                || started.elapsed() >= connected_at,
                &signal,
                || {
                    attempts.borrow_mut().push(started.elapsed());
                    async { Ok::<_, ProvisionError>(()) }
                },
                "nats://test",
                &mut stop,
            ),
            async move {
                tokio::time::sleep(connected_at).await;
                notifier.notify_one();
            }
        );
        assert_eq!(ready.expect("no fatal error"), Some(()));
        assert_eq!(attempts.into_inner(), [connected_at]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fatal_failure_ends_the_wait_at_once_saying_provisioning() {
        let (_trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let err = retry_until_ready(
            || true,
            &Notify::new(),
            || async { Err::<(), _>(ProvisionError::Fatal(anyhow::anyhow!("mismatch"))) },
            "nats://test",
            &mut stop,
        )
        .await
        .expect_err("fatal");
        assert!(
            format!("{err:#}").contains("provisioning JetStream: mismatch"),
            "{err:#}"
        );
        assert_eq!(started.elapsed(), Duration::ZERO, "no retry, no pause");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait_in_a_pause_while_disconnected_and_during_a_hung_attempt() {
        let after = Duration::from_millis(300);
        // in a pause after a transient failure
        let (trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let never = Notify::new();
        let (ready, ()) = tokio::join!(
            retry_until_ready(
                || true,
                &never,
                || async { Err::<(), _>(transient()) },
                "u",
                &mut stop
            ),
            async {
                tokio::time::sleep(after).await;
                trigger.trigger();
            }
        );
        assert!(matches!(ready, Ok(None)));
        assert_eq!(started.elapsed(), after);
        // while disconnected
        let (trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let never = Notify::new();
        let (ready, ()) = tokio::join!(
            retry_until_ready(
                || false,
                &never,
                || async { Ok::<(), ProvisionError>(()) },
                "u",
                &mut stop
            ),
            async {
                tokio::time::sleep(after).await;
                trigger.trigger();
            }
        );
        assert!(matches!(ready, Ok(None)));
        assert!(started.elapsed() < after + CONNECTED_POLL);
        // during an attempt the server never answers
        let (trigger, mut stop) = shutdown::channel();
        let started = Instant::now();
        let never = Notify::new();
        let (ready, ()) = tokio::join!(
            retry_until_ready(
                || true,
                &never,
                std::future::pending::<Result<(), ProvisionError>>,
                "u",
                &mut stop
            ),
            async {
                tokio::time::sleep(after).await;
                trigger.trigger();
            }
        );
        assert!(matches!(ready, Ok(None)));
        assert_eq!(started.elapsed(), after);
    }
}
