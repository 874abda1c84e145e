//! `consumer.assignment = "leases"`: the worker holds as many partitions as its fair share,
//! through leases in a JetStream key-value bucket (`crate::ownership`), and runs one
//! [`Engine`] per lease: started when a lease is acquired, stopped at once when one is
//! revoked, stopped gracefully before a lease is handed off to a worker that joined.

use super::engine::{Engine, LeaseTerms, Running, Shared, Stop};
use super::shutdown::{Shutdown, Trigger};
use crate::ownership::{self, Change, Fence};
use crate::serve::metrics::Metrics;
use sink::guarded::Guard;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A lease's fence as the engine's [`Guard`], naming the worker for `Toolstream-Owner`.
struct LeaseGuard {
    fence: Fence,
    owner: String,
}

impl Guard for LeaseGuard {
    fn is_valid(&self) -> bool {
        self.fence.is_valid()
    }

    fn owner(&self) -> String {
        self.owner.clone()
    }
}

/// How often engines whose consume loop ended on its own are looked for.
const CHECK: Duration = Duration::from_millis(500);

/// Runs until shutdown; returns whether every engine ended cleanly.
pub(super) async fn run(
    shared: &Shared,
    running: &Arc<Running>,
    trigger: &Trigger,
    shutdown: &mut Shutdown,
) -> anyhow::Result<bool> {
    let config = &shared.config;
    let mut settings = config.ownership.clone();
    // one replica setting for the streams and every bucket
    settings.replicas = config.streams.replicas;
    let (handle, mut changes) =
        ownership::start(shared.js.clone(), settings, config.consumer.partitions)
            .await
            .map_err(|e| anyhow::anyhow!("partition ownership: {e}"))?;
    let worker = handle.worker_id().to_string();
    let metrics = &shared.metrics.leases;
    metrics.enabled.store(true, Ordering::Relaxed);
    let owned = |engines: &BTreeMap<u32, Engine>| {
        let mut map = metrics.owned.lock().unwrap_or_else(|p| p.into_inner());
        *map = engines.iter().map(|(k, e)| (*k, e.epoch)).collect();
    };
    tracing::info!(
        worker = %worker,
        partitions = config.consumer.partitions,
        "sharing partitions through leases"
    );
    let mut engines: BTreeMap<u32, Engine> = BTreeMap::new();
    let mut clean = true;
    let mut check = tokio::time::interval(CHECK);
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = check.tick() => {
                // A consume loop that ended by itself: its lease no longer holds (the
                // revocation is on its way) or it failed; either way the engine stops here.
                let ended: Vec<u32> = engines
                    .iter()
                    .filter(|(_, e)| e.consume_ended())
                    .map(|(k, _)| *k)
                    .collect();
                for partition in ended {
                    if let Some(engine) = engines.remove(&partition) {
                        running.remove(partition);
                        owned(&engines);
                        let epoch = engine.epoch;
                        tracing::warn!(partition, epoch, "the partition's consume loop ended; engine stopped, lease given back");
                        let (ok, _) = engine.stop(Stop::Revoked).await;
                        clean &= ok;
                        // (a no-op when the lease is already gone) so the partition is not
                        // left held and unserved: its next owner rebuilds it
                        handle.released(partition, epoch).await;
                    }
                }
            }
            change = changes.recv() => match change {
                None => {
                    tracing::error!("partition ownership stopped; shutting down");
                    trigger.trigger();
                    clean = false;
                    break;
                }
                Some(Change::Acquired(lease)) => {
                    let partition = lease.partition();
                    let epoch = lease.epoch();
                    let guard: Arc<dyn Guard> = Arc::new(LeaseGuard {
                        fence: lease.fence(),
                        owner: format!("{worker}/{epoch}"),
                    });
                    if let Some(old) = engines.remove(&partition) {
                        running.remove(partition);
                        let _ = old.stop(Stop::Revoked).await;
                    }
                    match Engine::start_leased(shared, partition, LeaseTerms { epoch, guard }, shutdown).await {
                        Ok(engine) => {
                            tracing::info!(partition, epoch, "partition acquired; engine started");
                            Metrics::add(&metrics.acquired, 1);
                            Metrics::add(if engine.from_checkpoint { &metrics.from_checkpoint } else { &metrics.from_start }, 1);
                            running.add(&engine);
                            engines.insert(partition, engine);
                            owned(&engines);
                        }
                        Err(e) => {
                            // Give the lease back so this or another worker tries again.
                            tracing::error!(partition, epoch, error = %format!("{e:#}"), "engine did not start; releasing the lease");
                            handle.released(partition, epoch).await;
                        }
                    }
                }
                Some(Change::Revoked { partition, epoch }) => {
                    Metrics::add(&metrics.revoked, 1);
                    if let Some(engine) = engines.remove(&partition) {
                        running.remove(partition);
                        owned(&engines);
                        tracing::warn!(partition, epoch, "lease lost; engine stopped without acking or publishing more");
                        let _ = engine.stop(Stop::Revoked).await;
                    }
                }
                Some(Change::HandOff { partition, epoch }) => {
                    Metrics::add(&metrics.handed_off, 1);
                    if let Some(engine) = engines.remove(&partition) {
                        running.remove(partition);
                        owned(&engines);
                        let (ok, drained) = engine.stop(Stop::Graceful).await;
                        clean &= ok;
                        tracing::info!(partition, epoch, ?drained, "partition handed off");
                    }
                    handle.released(partition, epoch).await;
                }
            },
        }
    }
    // Shutdown: every engine stops gracefully, then the leases are given back, so the other
    // workers take the partitions over at once instead of after the lease TTL.
    for (partition, engine) in std::mem::take(&mut engines) {
        running.remove(partition);
        owned(&engines);
        let (ok, drained) = engine.stop(Stop::Graceful).await;
        clean &= ok;
        tracing::info!(partition, ?drained, "engine stopped");
    }
    handle.shutdown().await;
    Ok(clean)
}
