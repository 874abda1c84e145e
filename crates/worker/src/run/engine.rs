//! One partition's engine: its sled store, its consume loop, the outbox relay, the query
//! service and the settled watermark, started together and stopped in the one order that
//! loses nothing (see [`Engine::stop`]).
//!
//! A worker runs one engine for its static partition (`consumer.partition`), or, with
//! `consumer.assignment = "leases"`, one per partition it holds a lease for (`crate::ownership`),
//! started and stopped as leases come and go ([`super::leased`]). A leased engine
//!
//! - starts from an empty store and rebuilds its partition from the input stream through
//!   consumers of its own epoch (`<name>-e<epoch>[-p<k>-chunks|-results]`, every input from
//!   the first), after deleting the consumers of earlier epochs: state comes from NATS, never
//!   from another worker's disk, and an earlier owner's acks go to a consumer that no longer
//!   exists;
//! - publishes through [`sink::guarded::Guarded`]: nothing once the lease no longer holds,
//!   `Toolstream-Owner` on every message, and what its rebuild produces again that is already
//!   in the events or dead-letter stream is confirmed without a second copy, also beyond the
//!   duplicate window;
//! - acks nothing once the lease no longer holds (`ConsumeLoop::guard`).

use super::checkpoint::{self, Checkpoints, Taken};
use super::shutdown::{self, Shutdown, Trigger};
use super::{failpoints, FINAL_WAIT};
use crate::consume::watermark::Watermark;
use crate::consume::ConsumeLoop;
use crate::nats::provision;
use crate::ownership::attempts::{Attempts, Earlier};
use crate::run::config::Config;
use crate::serve::http::{Health, StoreGauges};
use crate::serve::metrics::Metrics;
use anyhow::Context as _;
use assembler::Store;
use async_nats::jetstream::consumer::{DeliverPolicy, PullConsumer};
use async_nats::jetstream::{self};
use chunk_model::wire::Subjects;
use sink::guarded::{Guard, Guarded};
use sink::jetstream::JetStream;
use sink::publisher::Publisher;
use sink::relay::{Drained, Relay, RelayTask};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What every engine of a worker shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub config: Config,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub subjects: Subjects,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub payloads: sink::payloads::Payloads,
}

/// The lease a leased engine runs under.
pub(crate) struct LeaseTerms {
    /// Its epoch (the lease's KV revision at acquisition; grows with every new owner).
    pub epoch: u64,
    /// Whether it still holds.
    pub guard: Arc<dyn Guard>,
}

/// What a leased engine's consume loop carries beyond a static one's.
struct Fencing {
    /// Whether the lease still holds.
    guard: Arc<dyn Guard>,
    /// The ids already published when the lease was acquired.
    published: Arc<HashSet<String>>,
    /// The partition's checkpoints.
    checkpoint: checkpoint::Writer,
    /// The partition's poison note.
    attempts: Arc<Attempts>,
}

/// How an engine stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Shutdown or a hand-off: finish the batch in hand, flush, drain the outbox (bounded),
    /// flush again, so the next owner (or the next start) publishes nothing twice.
    Graceful,
    /// The lease was lost: stop at once. Nothing more is acked or published (the guard sees
    /// to that); the store is left for the next acquisition to discard.
    Revoked,
}

/// A running engine.
pub(crate) struct Engine {
    pub partition: u32,
    /// The lease epoch it runs under (0 for a static partition).
    pub epoch: u64,
    /// Whether it started from a checkpoint (leased only).
    pub from_checkpoint: bool,
    store: Arc<Store>,
    stop: Trigger,
    relay_stop: Trigger,
    consume: JoinHandle<()>,
    watermark: JoinHandle<()>,
    relay: JoinHandle<Drained>,
    query: JoinHandle<()>,
}

impl Engine {
    /// The engine of a statically assigned partition: its store as it is, the durable
    /// consumers `consumers` provisioned at start.
    pub async fn start_static(
        shared: &Shared,
        store: Arc<Store>,
        consumers: Vec<PullConsumer>,
        global: &Shutdown,
    ) -> anyhow::Result<Engine> {
        let publisher = JetStream::new(shared.js.clone()).with_payloads(shared.payloads.clone());
        Engine::launch(
            shared,
            shared.config.consumer.partition,
            None,
            store,
            consumers,
            publisher,
            global,
        )
        .await
    }

    /// The engine of partition `partition` under `lease`: its last checkpoint (or an empty
    /// store) plus the input stream after it (see the module docs).
    pub async fn start_leased(
        shared: &Shared,
        partition: u32,
        lease: LeaseTerms,
        global: &Shutdown,
    ) -> anyhow::Result<Engine> {
        let config = &shared.config;
        let partitions = config.consumer.partitions;
        let store_dir = leased_store_dir(config, partition);
        // per epoch: an earlier lease's upload still reading its file is never cut short
        let file = config
            .data_dir
            .join(format!("leased-{partition}-e{}.checkpoint", lease.epoch));
        discard(&store_dir).await?;
        discard_checkpoint_files(&config.data_dir, partition).await;
        crate::run::private_dir::ensure_private(&config.data_dir)?;
        let checkpoints = Arc::new(Checkpoints::new(shared.js.clone(), config.streams.replicas));
        let (store, restored) = restore(config, &checkpoints, partition, &file, &store_dir).await?;

        // Restoring takes time: a lease that lapsed meanwhile touches no consumer (a newer
        // owner's are not ours to delete).
        if !lease.guard.is_valid() {
            anyhow::bail!("lease lost while the partition was restored");
        }
        let input = shared
            .js
            .get_stream(&config.streams.input)
            .await
            .context("the input stream")?;
        // The earlier owners' consumers: what they were delivered and never acked is recorded
        // in the partition's poison note before they are deleted (an input among those may be
        // the one that stopped an owner).
        let earlier = other_epochs(
            &input,
            &config.consumer.name,
            partitions,
            partition,
            lease.epoch,
        )
        .await?;
        let mut ownership = config.ownership.clone();
        ownership.replicas = config.streams.replicas;
        // the input stream's identity: a note of a stream since created again is dropped
        let stream = input
            .cached_info()
            .created
            .unix_timestamp_nanos()
            .to_string();
        let attempts = Attempts::take_over(
            shared.js.clone(),
            &ownership,
            partition,
            &stream,
            Arc::clone(&lease.guard),
            &earlier.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        )
        .await
        .context("take the partition's poison note over")?;
        for (consumer, _) in &earlier {
            input
                .delete_consumer(consumer)
                .await
                .with_context(|| format!("delete consumer {consumer} of an earlier lease"))?;
            tracing::info!(partition, epoch = lease.epoch, consumer = %consumer, "deleted the consumer of an earlier lease");
        }
        let note = attempts.note().await;
        if !note.suspects.is_empty() || !note.group.is_empty() {
            tracing::info!(partition, epoch = lease.epoch, group = ?note.group, alone = ?note.suspects,
                "inputs earlier owners were delivered and never acked: the group is applied in \
                 batches, the inputs an owner stopped on alone");
        }
        let mut consumers = Vec::new();
        for (name, filter) in leased_consumers(config, &shared.subjects, partition, lease.epoch) {
            let mut want = provision::desired_consumer(config, &name, &filter);
            // after the checkpoint's floor of this filter, else from the first input
            if let Some(floor) = restored.as_ref().and_then(|t| t.floors.get(&filter)) {
                want.deliver_policy = DeliverPolicy::ByStartSequence {
                    start_sequence: floor.saturating_add(1),
                };
            }
            // A consumer under this name is stale (epochs repeat only if the lease bucket was
            // recreated): it would keep its own position, not the checkpoint's.
            if input.delete_consumer(&name).await.is_ok() {
                tracing::warn!(partition, consumer = %name, "deleted a stale consumer of this epoch's name");
            }
            let consumer = input
                .create_consumer(want)
                .await
                .with_context(|| format!("create consumer {name}"))?;
            consumers.push(consumer);
        }

        // What the partition's earlier owners published: confirmed, not published again.
        // Events and dead letters go to `<prefix>.<kind>.<conv>.<msg>`; the input dead letters
        // of `<prefix>.dlq.unroutable` are kept whatever their partition (their ids are
        // input stream sequences, unique across partitions). After a checkpoint, only what was
        // published since it was taken, less the duplicate window (a row published just
        // before may still have been in its outbox), can come again.
        let unroutable = shared.subjects.dlq_unroutable();
        let keep = |subject: &str| {
            subject == unroutable
                || subject.split('.').rev().nth(1).is_some_and(|conversation| {
                    Subjects::partition_of(partitions, conversation) == partition
                })
        };
        let since = restored.as_ref().and_then(|t| {
            let back = config.streams.duplicate_window.get() + Duration::from_secs(60);
            let ms = i128::from(t.taken_at_ms) - back.as_millis() as i128;
            async_nats::datetime::from_nanos(ms.max(0) * 1_000_000).ok()
        });
        let mut published: HashSet<String> =
            sink::guarded::published_ids(&shared.js, &config.streams.events, since, keep).await?;
        published.extend(
            sink::guarded::published_ids(&shared.js, &config.streams.dlq, since, keep).await?,
        );
        let published = Arc::new(published);
        tracing::info!(
            partition,
            epoch = lease.epoch,
            already_published = published.len(),
            from_checkpoint = restored.is_some(),
            "rebuilding the partition from the input stream"
        );
        let backlog_end = input
            .clone()
            .info()
            .await
            .map(|i| i.state.last_sequence)
            .unwrap_or(0);
        let caught_up_since = tokio::time::Instant::now();
        let caught_up_consumers = consumers.clone();
        let caught_up_guard = Arc::clone(&lease.guard);
        let metrics = Arc::clone(&shared.metrics);
        let publisher = Guarded::new(
            JetStream::new(shared.js.clone()).with_payloads(shared.payloads.clone()),
            Arc::clone(&lease.guard),
            Arc::clone(&published),
        )
        .with_on_skip(Arc::new(move || {
            Metrics::add(&metrics.leases.already_published, 1)
        }));
        let writer = checkpoint::Writer {
            checkpoints,
            partition,
            partitions,
            epoch: lease.epoch,
            interval: config.consumer.checkpoint_interval.get(),
            file,
            consumers: consumers.clone(),
            guard: Arc::clone(&lease.guard),
            last: tokio::time::Instant::now(),
            uploading: None,
            restored_floors: restored
                .as_ref()
                .map(|t| t.floors.clone())
                .unwrap_or_default(),
        };
        let epoch = lease.epoch;
        let mut engine = Engine::launch(
            shared,
            partition,
            Some(Fencing {
                guard: lease.guard,
                published,
                checkpoint: writer,
                attempts: Arc::new(attempts),
            }),
            store,
            consumers,
            publisher,
            global,
        )
        .await?;
        engine.epoch = epoch;
        engine.from_checkpoint = restored.is_some();
        tokio::spawn(report_caught_up(
            caught_up_consumers,
            backlog_end,
            partition,
            epoch,
            caught_up_guard,
            caught_up_since,
            engine.stop.observe(),
        ));
        Ok(engine)
    }

    async fn launch<P: Publisher>(
        shared: &Shared,
        partition: u32,
        fencing: Option<Fencing>,
        store: Arc<Store>,
        consumers: Vec<PullConsumer>,
        publisher: P,
        global: &Shutdown,
    ) -> anyhow::Result<Engine> {
        let config = &shared.config;
        // The engine stops on its own trigger, or with the worker.
        let (stop, engine_shutdown) = shutdown::channel();
        {
            let mut global = global.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                global.wait().await;
                stop.trigger();
            });
        }

        // The relay stops on its own signal, given only after the last batch is durable.
        let (relay_stop, relay_stop_rx) = shutdown::channel();
        let relay_wake = Arc::new(Notify::new());
        let relay = RelayTask::new(
            failpoints::arm_relay(Relay::new(
                publisher,
                &config.subject_prefix,
                config.relay.batch,
            )),
            Arc::clone(&store),
            Arc::clone(&relay_wake),
        )
        .interval(config.relay.interval.get())
        .drain_timeout(config.relay.shutdown_timeout.get())
        .on_round({
            let metrics = Arc::clone(&shared.metrics);
            move |round| {
                // (a round that found nothing is not what an event waits for; one whose
                // PubAcks failed is, and is among the slowest. Recorded before its events
                // are counted: whoever sees the events out sees the round that sent them)
                if round.peeked > 0 {
                    metrics.relay_round.observe(round.took);
                }
                Metrics::add(&metrics.events_out, round.events as u64);
                // rows too large for the server went to the DLQ in their place
                Metrics::add(&metrics.dead_letters, round.too_large as u64);
                if round.error.is_some() {
                    Metrics::add(&metrics.publish_errors, 1);
                }
            }
        });
        let relay = tokio::spawn(relay.run(relay_stop_rx.receiver()));

        // Queries over the NATS service API (message snapshots, provider-valid history).
        let query = tokio::spawn(super::report_early_exit(
            "query service",
            crate::serve::query::serve(
                shared.client.clone(),
                Arc::clone(&store),
                shared.payloads.clone(),
                // partitioned: queries for partition k are mapped to <prefix>.p.<k>.query.…
                crate::serve::query::query_prefix(
                    &config.subject_prefix,
                    config.consumer.partitions,
                    partition,
                ),
                Arc::clone(&shared.health),
                fencing.as_ref().map(|f| Arc::clone(&f.guard)),
                engine_shutdown.receiver(),
            ),
        ));

        // The clock of the store's timers: how far every consumer has settled.
        let watermark = Arc::new(Watermark::default());
        let watermark_task = tokio::spawn(crate::consume::watermark::run(
            Arc::clone(&watermark),
            consumers.clone(),
            shared
                .js
                .get_stream_no_info(&config.streams.input)
                .await
                .context("the input stream handle")?,
            config.consumer.tick_interval.get(),
            engine_shutdown.clone(),
        ));

        let consume = ConsumeLoop {
            store: Arc::clone(&store),
            js: shared.js.clone(),
            subjects: shared.subjects.clone(),
            metrics: Arc::clone(&shared.metrics),
            relay_wake,
            config: config.consumer.clone(),
            #[cfg(feature = "failpoints")]
            abort_after_flushes: failpoints::abort_after_flushes(),
            watermark,
            store_failures: Default::default(),
            published: fencing
                .as_ref()
                .map(|f| Arc::clone(&f.published))
                .unwrap_or_default(),
            checkpoint: None,
            guard: None,
            attempts: None,
        };
        let consume = match fencing {
            Some(f) => ConsumeLoop {
                guard: Some(f.guard),
                checkpoint: Some(f.checkpoint),
                attempts: Some(f.attempts),
                ..consume
            },
            None => consume,
        };
        let consume = tokio::spawn(consume.run(consumers, engine_shutdown));
        Ok(Engine {
            partition,
            epoch: 0,
            from_checkpoint: false,
            store,
            stop,
            relay_stop,
            consume,
            watermark: watermark_task,
            relay,
            query,
        })
    }

    /// Completes when the consume loop ended on its own (its lease no longer holds, or it
    /// failed); a running engine's loop only ends when stopped.
    pub fn consume_ended(&self) -> bool {
        self.consume.is_finished()
    }

    /// Stops the engine (see [`Stop`]); returns whether the consume loop ended cleanly and
    /// how the outbox drain ended.
    pub async fn stop(self, how: Stop) -> (bool, Drained) {
        self.stop.trigger();
        let consume = self.consume.await;
        if let Err(e) = &consume {
            tracing::error!(partition = self.partition, error = %e, "consume loop failed");
        }
        let _ = tokio::time::timeout(FINAL_WAIT, self.watermark).await;
        let drained = match how {
            Stop::Graceful => {
                // The batch in hand is finished; make everything durable before draining.
                flush(&self.store, "final flush").await;
                self.relay_stop.trigger();
                let drained = self.relay.await.unwrap_or(Drained::Incomplete);
                // The drain deleted published rows; make those deletions durable too, so a
                // restart does not publish them again. Settled, not only flushed: the store is
                // left whole in its keyspaces, with no flush log to replay (README "Durability").
                settle(&self.store).await;
                drained
            }
            Stop::Revoked => {
                self.relay.abort();
                Drained::Incomplete
            }
        };
        if tokio::time::timeout(FINAL_WAIT, self.query).await.is_err() {
            tracing::warn!(
                partition = self.partition,
                "query service did not stop in time"
            );
        }
        (consume.is_ok(), drained)
    }
}

/// The gauges of every running engine, summed, for `/metrics`.
#[derive(Default)]
pub(crate) struct Running {
    stores: Mutex<BTreeMap<u32, Arc<Store>>>,
}

impl Running {
    pub fn add(&self, engine: &Engine) {
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        stores.insert(engine.partition, Arc::clone(&engine.store));
    }

    pub fn remove(&self, partition: u32) {
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        stores.remove(&partition);
    }

    fn sum(&self, f: impl Fn(&Store) -> u64) -> Option<u64> {
        let stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        Some(stores.values().map(|s| f(s)).sum())
    }
}

impl StoreGauges for Running {
    fn open_streams(&self) -> Option<u64> {
        self.sum(|s| s.open_streams() as u64)
    }

    fn outbox_depth(&self) -> Option<u64> {
        self.sum(|s| s.outbox_len() as u64)
    }
}

/// Opens (creating) the store in `dir`, private before sled writes a byte.
pub(crate) async fn open_store(config: &Config, dir: &Path) -> anyhow::Result<Arc<Store>> {
    // The store holds users' arguments and results: private before sled writes a byte.
    crate::run::private_dir::ensure_private(&config.data_dir)?;
    if dir != config.data_dir {
        crate::run::private_dir::ensure_private(dir)?;
    }
    let store = {
        let owned = dir.to_path_buf();
        let cfg = config.assembler.clone();
        tokio::task::spawn_blocking(move || Store::open(&owned, cfg))
            .await
            .context("open the store")?
            .with_context(|| {
                format!(
                    "open the store in {} (each worker needs its own --data-dir)",
                    dir.display()
                )
            })?
    };
    tracing::info!(dir = %dir.display(), "store open");
    Ok(Arc::new(store))
}

/// Longest a checkpoint download may take before the partition is rebuilt from its first
/// input instead.
const LOAD_LIMIT: Duration = Duration::from_secs(120);

/// A leased partition's store: imported from its last checkpoint in NATS when there is one
/// (and it reads back whole), else empty. Returns what the checkpoint said about itself.
async fn restore(
    config: &Config,
    checkpoints: &Checkpoints,
    partition: u32,
    file: &Path,
    store_dir: &Path,
) -> anyhow::Result<(Arc<Store>, Option<Taken>)> {
    let loaded = tokio::time::timeout(LOAD_LIMIT, checkpoints.load(partition, file))
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no checkpoint read within {LOAD_LIMIT:?}")));
    let taken = match loaded {
        Ok(Some(taken)) if taken.partitions != config.consumer.partitions => {
            tracing::warn!(
                partition,
                checkpoint_partitions = taken.partitions,
                partitions = config.consumer.partitions,
                "checkpoint of another partition layout; rebuilding from the first input"
            );
            None
        }
        Ok(taken) => taken,
        Err(e) => {
            tracing::warn!(partition, error = %format!("{e:#}"), "checkpoint not readable; rebuilding from the first input");
            None
        }
    };
    if let Some(taken) = taken {
        crate::run::private_dir::ensure_private(store_dir)?;
        let imported = {
            let (file, dir, cfg) = (
                file.to_path_buf(),
                store_dir.to_path_buf(),
                config.assembler.clone(),
            );
            tokio::task::spawn_blocking(move || Store::import_checkpoint(&file, &dir, cfg)).await
        };
        let _ = tokio::fs::remove_file(file).await;
        match imported {
            Ok(Ok((store, stats))) => {
                tracing::info!(
                    partition,
                    checkpoint_epoch = taken.epoch,
                    pairs = stats.pairs,
                    bytes = stats.bytes,
                    floors = ?taken.floors,
                    "restored the partition's checkpoint"
                );
                return Ok((Arc::new(store), Some(taken)));
            }
            Ok(Err(e)) => {
                tracing::warn!(partition, error = %e, "checkpoint not imported; rebuilding from the first input")
            }
            Err(e) => tracing::warn!(partition, error = %e, "checkpoint import failed"),
        }
        discard(store_dir).await?;
    }
    Ok((open_store(config, store_dir).await?, None))
}

/// The store of a leased partition: `<data_dir>/leased-<k>`, apart from the static layout so
/// that switching modes never rebuilds over a store that still holds unpublished events.
pub(crate) fn leased_store_dir(config: &Config, partition: u32) -> PathBuf {
    config.data_dir.join(format!("leased-{partition}"))
}

/// Removes the checkpoint files of `partition`'s earlier leases this worker left behind (an
/// upload cut short by a lost lease): checkpoints live in NATS.
async fn discard_checkpoint_files(data_dir: &Path, partition: u32) {
    let prefix = format!("leased-{partition}-e");
    let Ok(mut entries) = tokio::fs::read_dir(data_dir).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with(&prefix) && name.ends_with(".checkpoint") {
            let _ = tokio::fs::remove_file(entry.path()).await;
        }
    }
}

/// Removes a leased store left from an earlier lease: the partition is rebuilt from NATS,
/// where everything that store published or acked already is.
async fn discard(dir: &Path) -> anyhow::Result<()> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => {
            tracing::info!(dir = %dir.display(), "discarded the store of an earlier lease");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::anyhow!("remove {}: {e}", dir.display())),
    }
}

/// The consumers of partition `partition` under `epoch`: `<name>-e<epoch>` plus the
/// partition's suffix (`-p<k>-chunks`, `-p<k>-results`), every input from the first.
pub(crate) fn leased_consumers(
    config: &Config,
    subjects: &Subjects,
    partition: u32,
    epoch: u64,
) -> Vec<(String, String)> {
    subjects
        .consumer_filters(config.consumer.partitions, partition)
        .into_iter()
        .map(|(suffix, filter)| (format!("{}-e{epoch}{suffix}", config.consumer.name), filter))
        .collect()
}

/// Whether `consumer` is a leased consumer of `partition` of an epoch older than `epoch` (a
/// newer epoch's belongs to a newer owner: never ours to delete).
fn of_other_epoch(name: &str, partitions: u32, partition: u32, epoch: u64, consumer: &str) -> bool {
    let Some(rest) = consumer.strip_prefix(&format!("{name}-e")) else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let (number, suffix) = rest.split_at(digits);
    let ours = if partitions > 1 {
        suffix == format!("-p{partition}-chunks") || suffix == format!("-p{partition}-results")
    } else {
        suffix.is_empty()
    };
    ours && number.parse::<u64>().is_ok_and(|n| n < epoch)
}

/// The consumers earlier owners of `partition` read through, with what each had done
/// ([`Earlier`]). The caller deletes them, so that an earlier owner that was only paused can
/// neither fetch nor ack through them any more.
async fn other_epochs(
    input: &jetstream::stream::Stream,
    name: &str,
    partitions: u32,
    partition: u32,
    epoch: u64,
) -> anyhow::Result<Vec<(String, Earlier)>> {
    use futures::TryStreamExt;
    let names: Vec<String> = input
        .consumer_names()
        .try_collect()
        .await
        .context("list the input stream's consumers")?;
    let mut out = Vec::new();
    for consumer in names
        .iter()
        .filter(|c| of_other_epoch(name, partitions, partition, epoch, c))
    {
        let info = match input.consumer_info(consumer).await {
            Ok(info) => info,
            // deleted meanwhile (by a newer owner): nothing to record or delete
            Err(e) if e.to_string().to_lowercase().contains("consumer not found") => continue,
            Err(e) => {
                return Err(anyhow::anyhow!(e))
                    .with_context(|| format!("read consumer {consumer} of an earlier lease"))
            }
        };
        out.push((
            consumer.clone(),
            Earlier {
                name: consumer.clone(),
                filter: info.config.filter_subject.clone(),
                ack_floor: info.ack_floor.stream_sequence,
                delivered: info.delivered.stream_sequence,
                ack_pending: u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
            },
        ));
    }
    Ok(out)
}

/// Logs once when a rebuilt partition's consumers have delivered everything the input stream
/// held when the lease was acquired, up to `backlog_end` (`partition caught up`, with the time
/// since `since` and the inputs read): how long a takeover took. Gives up quietly when the
/// engine stops (`stop`).
async fn report_caught_up(
    consumers: Vec<PullConsumer>,
    backlog_end: u64,
    partition: u32,
    epoch: u64,
    guard: Arc<dyn Guard>,
    since: tokio::time::Instant,
    mut stop: Shutdown,
) {
    let look = || {
        let consumers = consumers.clone();
        async move {
            let mut delivered = 0u64;
            for mut consumer in consumers {
                let info = consumer.info().await.ok()?;
                // past the backlog's end, or nothing left at all
                if info.num_pending > 0 && info.delivered.stream_sequence < backlog_end {
                    return None;
                }
                delivered += info.delivered.consumer_sequence;
            }
            Some(delivered)
        }
    };
    if let Some(inputs) = wait_caught_up(look, guard.as_ref(), &mut stop).await {
        tracing::info!(
            partition,
            epoch,
            inputs,
            elapsed_ms = since.elapsed().as_millis() as u64,
            "partition caught up with the input stream"
        );
    }
}

/// How often [`report_caught_up`] looks at the consumers.
const CAUGHT_UP_POLL: Duration = Duration::from_millis(100);

/// At once, then every [`CAUGHT_UP_POLL`], while `guard` holds, asks `look` for the inputs
/// delivered once every consumer is past the backlog (`None` while one is behind or cannot be
/// read); the first answer that comes while the guard still holds and the engine runs is
/// returned. `None` once `stop` is asked for, also in the middle of a look.
///
/// The first look is at once: an engine with nothing to catch up says so within a round trip
/// to the server, and one handed off a few ms after it started still had its line (when the
/// first look came after a poll, a hand-off within 100 ms left no line for that ownership).
///
/// A fence that lapsed is skipped over, not given up on: a renewal that came late (a loaded
/// machine, a 3 s TTL) makes it hold again, and the engine runs on. Giving up there left a
/// running partition that never said it caught up.
async fn wait_caught_up<F, Fut>(mut look: F, guard: &dyn Guard, stop: &mut Shutdown) -> Option<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<u64>>,
{
    loop {
        if guard.is_valid() {
            let looked = tokio::select! {
                _ = stop.wait() => return None,
                looked = look() => looked,
            };
            // a look that ended after its engine stopped, or its lease went, says nothing
            if let Some(inputs) = looked {
                if !stop.is_triggered() && guard.is_valid() {
                    return Some(inputs);
                }
            }
        }
        tokio::select! {
            _ = stop.wait() => return None,
            _ = tokio::time::sleep(CAUGHT_UP_POLL) => {}
        }
    }
}

/// Flushes the store on the blocking pool, logging (not returning) a failure: at exit there is
/// nothing left to retry, and what was not flushed is redelivered after a restart.
pub(crate) async fn flush(store: &Arc<Store>, what: &'static str) {
    on_blocking_pool(store, what, Store::flush).await;
}

/// [`flush`], settled ([`Store::flush_settled`]): the last write of a clean stop.
async fn settle(store: &Arc<Store>) {
    on_blocking_pool(store, "settling the store at exit", Store::flush_settled).await;
}

async fn on_blocking_pool(
    store: &Arc<Store>,
    what: &'static str,
    op: fn(&Store) -> Result<(), assembler::StoreError>,
) {
    let store = Arc::clone(store);
    match tokio::task::spawn_blocking(move || op(&store)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "{what} failed"),
        Err(e) => tracing::error!(error = %e, "{what} task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_partitions_consumers_of_older_epochs_are_deleted() {
        let other = |c: &str| of_other_epoch("toolstream", 4, 2, 9, c);
        assert!(other("toolstream-e7-p2-chunks"));
        assert!(other("toolstream-e7-p2-results"));
        assert!(!other("toolstream-e9-p2-chunks"), "its own epoch");
        assert!(!other("toolstream-e11-p2-chunks"), "a newer owner's");
        assert!(!other("toolstream-e7-p3-chunks"), "another partition");
        assert!(
            !other("toolstream-e7-p21-chunks"),
            "another partition, same prefix"
        );
        assert!(!other("toolstream-p2-chunks"), "the static consumer");
        assert!(!other("toolstream-extra-e7-p2-chunks"));
        assert!(!other("other-e7-p2-chunks"));
        let single = |c: &str| of_other_epoch("toolstream", 1, 0, 9, c);
        assert!(single("toolstream-e3"));
        assert!(!single("toolstream-e9"));
        assert!(!single("toolstream"));
        assert!(!single("toolstream-e3-p0-chunks"));
    }

    /// A fence that goes down and up again, as a late renewal makes it.
    struct Flicker {
        down_until: tokio::time::Instant,
    }

    impl Flicker {
        /// A fence that holds from now on.
        fn holding() -> Flicker {
            Flicker {
                down_until: tokio::time::Instant::now(),
            }
        }
    }

    impl Guard for Flicker {
        fn is_valid(&self) -> bool {
            tokio::time::Instant::now() >= self.down_until
        }
        fn owner(&self) -> String {
            "w/1".into()
        }
    }

    /// The leased_fencing flake: a partition whose fence lapsed for a moment right after the
    /// takeover (a renewal late on a loaded machine) ran on but never logged `partition caught
    /// up`, because the report gave up at the first invalid look.
    #[tokio::test(start_paused = true)]
    async fn a_fence_that_lapses_and_holds_again_still_gets_its_caught_up_line() {
        let (_trigger, mut stop) = shutdown::channel();
        let guard = Flicker {
            down_until: tokio::time::Instant::now() + Duration::from_millis(450),
        };
        let looks = std::cell::Cell::new(0u32);
        let started = tokio::time::Instant::now();
        let inputs = wait_caught_up(
            || {
                looks.set(looks.get() + 1);
                async { Some(7) }
            },
            &guard,
            &mut stop,
        )
        .await;
        assert_eq!(inputs, Some(7));
        assert_eq!(looks.get(), 1, "no look while the fence is down");
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    /// An engine with nothing to catch up says so at once, not after a first poll interval
    /// (a partition handed off within that interval used to log no line at all).
    #[tokio::test(start_paused = true)]
    async fn an_engine_already_caught_up_says_so_at_its_first_look() {
        let (_trigger, mut stop) = shutdown::channel();
        let guard = Flicker::holding();
        let started = tokio::time::Instant::now();
        let inputs = wait_caught_up(|| async { Some(0) }, &guard, &mut stop).await;
        assert_eq!(inputs, Some(0));
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_caught_up_wait_looks_until_every_consumer_is_past_the_backlog() {
        let (_trigger, mut stop) = shutdown::channel();
        let guard = Flicker::holding();
        let looks = std::cell::Cell::new(0u32);
        let inputs = wait_caught_up(
            || {
                looks.set(looks.get() + 1);
                let n = looks.get();
                async move { (n == 3).then_some(12) }
            },
            &guard,
            &mut stop,
        )
        .await;
        assert_eq!((inputs, looks.get()), (Some(12), 3));
    }

    /// With the lease holding and the consumers never caught up, only the engine's stop ends
    /// the wait (before, a lapsed fence did, and nothing else).
    #[tokio::test(start_paused = true)]
    async fn the_caught_up_wait_ends_with_its_engine() {
        let (trigger, mut stop) = shutdown::channel();
        let guard = Flicker::holding();
        let started = tokio::time::Instant::now();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            trigger.trigger();
        });
        let looks = std::cell::Cell::new(0u32);
        let inputs = wait_caught_up(
            || {
                looks.set(looks.get() + 1);
                async { None }
            },
            &guard,
            &mut stop,
        )
        .await;
        assert_eq!(inputs, None);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(looks.get() >= 40, "it kept looking: {}", looks.get());
        stopper.await.expect("stopper");
    }

    /// A look still under way when the engine stops (a slow consumer info) says nothing.
    #[tokio::test(start_paused = true)]
    async fn a_look_that_ends_after_its_engine_stopped_says_nothing() {
        let (trigger, mut stop) = shutdown::channel();
        let guard = Flicker::holding();
        let inputs = wait_caught_up(
            || {
                let trigger = trigger.clone();
                async move {
                    // the engine stops while this look waits for the server
                    trigger.trigger();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Some(3)
                }
            },
            &guard,
            &mut stop,
        )
        .await;
        assert_eq!(inputs, None);
    }

    /// The engine's own trigger is what the wait watches: `Trigger::observe` sees a trigger
    /// given before or after it was made.
    #[tokio::test]
    async fn an_observer_made_from_a_trigger_sees_it() {
        let (trigger, _stop) = shutdown::channel();
        let mut before = trigger.observe();
        trigger.trigger();
        let mut after = trigger.observe();
        tokio::time::timeout(Duration::from_secs(5), async {
            before.wait().await;
            after.wait().await;
        })
        .await
        .expect("both observers see the trigger");
    }
}
