//! The one shutdown path: SIGINT or SIGTERM (or an internal fatal error) flips one flag that
//! every task watches. The order of what happens next lives in `run.rs`: stop fetching, finish
//! the batch, flush sled, drain the outbox (bounded), flush the NATS client.

use tokio::sync::watch;

/// Triggers shutdown. Cloneable; triggering twice changes nothing.
#[derive(Debug, Clone)]
pub struct Trigger {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

/// Observes shutdown. Each task holds its own clone.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A connected trigger and observer.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (
        Trigger {
            tx: std::sync::Arc::new(tx),
        },
        Shutdown { rx },
    )
}

impl Trigger {
    /// Asks every task to stop.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// An observer of this trigger.
    pub fn observe(&self) -> Shutdown {
        Shutdown {
            rx: self.tx.subscribe(),
        }
    }
}

impl Shutdown {
    /// Whether shutdown was asked for.
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// The underlying receiver (`true` once shutdown is asked for), for services that take a
    /// `watch::Receiver<bool>` (`http::serve`, `query::serve`).
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Completes once shutdown is asked for (at once if it already was). Cancel-safe.
    pub async fn wait(&mut self) {
        // An error means every trigger is gone: nobody can ask any more, so treat as asked.
        let _ = self.rx.wait_for(|stop| *stop).await;
    }
}

/// Spawns the task that turns SIGINT/SIGTERM into `trigger`. A second signal while shutting
/// down exits at once (the operator insists).
pub fn listen_for_signals(trigger: Trigger) {
    tokio::spawn(async move {
        let mut count = 0u32;
        loop {
            let name = wait_for_signal().await;
            count += 1;
            if count == 1 {
                tracing::info!(
                    signal = name,
                    "shutting down: finishing the batch, draining the outbox"
                );
                trigger.trigger();
            } else {
                tracing::warn!(signal = name, "second signal: exiting now");
                std::process::exit(130);
            }
        }
    });
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "ctrl-c"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_observer_sees_one_trigger() {
        let (trigger, mut a) = channel();
        let mut b = a.clone();
        assert!(!a.is_triggered());
        trigger.trigger();
        trigger.trigger();
        a.wait().await;
        b.wait().await;
        assert!(a.is_triggered() && b.is_triggered());
    }

    #[tokio::test]
    async fn a_dropped_trigger_releases_waiters() {
        let (trigger, mut a) = channel();
        drop(trigger);
        a.wait().await;
    }
}
