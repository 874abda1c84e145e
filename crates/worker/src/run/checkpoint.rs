//! Checkpoints of leased partitions in the object store bucket `TOOLSTREAM_CHECKPOINTS`
//! (README "Scale-out"): object `p<k>` is partition `k`'s store ([`assembler::Store`]'s
//! checkpoint file) with, in its description, what the next owner needs to go on from it
//! ([`Taken`]): where each consumer's acknowledged input ended, and when it was taken.
//!
//! The owner writes one every `ownership.checkpoint_interval` from its consume loop, between
//! batches (the loop is the store's only writer, so the file is consistent), and uploads it in
//! the background while its lease holds. A new owner imports the last one and reads the input
//! stream from just after those floors, instead of from the first input: a takeover reads the
//! input of about one interval, not the partition's history. Inputs the checkpoint already
//! reflects (applied, not yet acknowledged) come again and are recognized as duplicates, as
//! after a crash; events made again are in the published-id set, which is read from the events
//! and dead-letter streams from the checkpoint's time minus the duplicate window.

use anyhow::Context as _;
use assembler::Store;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::object_store::{ObjectMetadata, ObjectStore};
use serde::{Deserialize, Serialize};
use sink::guarded::Guard;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::task::JoinHandle;

/// The bucket of partition checkpoints.
pub(crate) const BUCKET: &str = "TOOLSTREAM_CHECKPOINTS";

/// What a checkpoint says about itself (the object's description, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Taken {
    /// The lease epoch of the owner that took it.
    pub epoch: u64,
    /// Unix milliseconds when it was taken.
    pub taken_at_ms: u64,
    /// Per consumer filter subject: the input stream sequence up to which every input of that
    /// filter was acknowledged (so applied) before the checkpoint was taken.
    pub floors: BTreeMap<String, u64>,
    /// Key-value pairs in the file.
    pub pairs: u64,
    /// The partition count it was taken under (a checkpoint of another layout is not used).
    #[serde(default)]
    pub partitions: u32,
}

/// The bucket, opened (created when missing) on first use.
pub(crate) struct Checkpoints {
    bucket: sink::payloads::Payloads,
}

impl Checkpoints {
    pub fn new(js: async_nats::jetstream::Context, replicas: usize) -> Checkpoints {
        Checkpoints {
            bucket: sink::payloads::Payloads::new(js, BUCKET, replicas)
                .described("toolstream: the last checkpoint of each leased partition"),
        }
    }

    async fn bucket(&self) -> anyhow::Result<ObjectStore> {
        Ok(self.bucket.bucket().await?)
    }

    fn object(partition: u32) -> String {
        format!("p{partition}")
    }

    /// Downloads partition `partition`'s checkpoint to `file`; `None` when there is none.
    pub async fn load(&self, partition: u32, file: &Path) -> anyhow::Result<Option<Taken>> {
        let bucket = self.bucket().await?;
        let name = Checkpoints::object(partition);
        let info = match bucket.info(&name).await {
            Ok(info) if !info.deleted => info,
            _ => return Ok(None),
        };
        let taken: Taken = serde_json::from_str(info.description.as_deref().unwrap_or(""))
            .with_context(|| format!("checkpoint {name}: its description"))?;
        let mut object = bucket
            .get(&name)
            .await
            .with_context(|| format!("checkpoint {name}"))?;
        let mut out = tokio::fs::File::create(file)
            .await
            .with_context(|| format!("create {}", file.display()))?;
        tokio::io::copy(&mut object, &mut out)
            .await
            .with_context(|| format!("download checkpoint {name}"))?;
        out.sync_all().await.context("sync the checkpoint file")?;
        Ok(Some(taken))
    }

    /// Uploads `file` as partition `partition`'s checkpoint unless the bucket holds one of a
    /// newer epoch (a deposed owner never replaces its successor's). Returns whether it did.
    async fn save(&self, partition: u32, file: &Path, taken: &Taken) -> anyhow::Result<bool> {
        let bucket = self.bucket().await?;
        if let Ok(info) = bucket.info(Checkpoints::object(partition)).await {
            let theirs = serde_json::from_str::<Taken>(info.description.as_deref().unwrap_or(""))
                .map(|t| t.epoch)
                .unwrap_or(0);
            if !info.deleted && theirs > taken.epoch {
                return Ok(false);
            }
        }
        let mut input = tokio::fs::File::open(file)
            .await
            .with_context(|| format!("open {}", file.display()))?;
        let meta = ObjectMetadata {
            name: Checkpoints::object(partition),
            description: Some(serde_json::to_string(taken)?),
            ..Default::default()
        };
        bucket
            .put(meta, &mut input)
            .await
            .with_context(|| format!("upload checkpoint p{partition}"))?;
        Ok(true)
    }
}

/// Writes a partition's checkpoints from its consume loop ([`Writer::due`], [`Writer::take`]).
pub(crate) struct Writer {
    pub checkpoints: Arc<Checkpoints>,
    pub partition: u32,
    /// The partition count (recorded in each checkpoint).
    pub partitions: u32,
    pub epoch: u64,
    pub interval: Duration,
    /// Where the file is written before its upload.
    pub file: PathBuf,
    pub consumers: Vec<PullConsumer>,
    pub guard: Arc<dyn Guard>,
    pub last: tokio::time::Instant,
    pub uploading: Option<JoinHandle<()>>,
    /// The floors of the checkpoint this engine was restored from: everything up to them is in
    /// its store, so a checkpoint never records less (a new consumer that has acked nothing
    /// yet reports floor 0, which would send the next owner back to the first input).
    pub restored_floors: BTreeMap<String, u64>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Writer {
    /// Whether a checkpoint is due (the interval passed and the last upload is done).
    pub fn due(&self) -> bool {
        self.last.elapsed() >= self.interval
            && self.uploading.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Takes a checkpoint of `store` now and starts its upload. Call it between batches: the
    /// caller applies nothing meanwhile.
    pub async fn take(&mut self, store: &Arc<Store>) {
        self.last = tokio::time::Instant::now();
        if !self.guard.is_valid() {
            return;
        }
        // The floors first: an input acknowledged by now was applied by now, so the file
        // written next reflects it.
        let taken_at_ms = unix_ms(SystemTime::now());
        let mut floors = BTreeMap::new();
        for consumer in &self.consumers {
            let mut consumer = consumer.clone();
            match consumer.info().await {
                Ok(info) => {
                    let filter = info.config.filter_subject.clone();
                    let restored = self.restored_floors.get(&filter).copied().unwrap_or(0);
                    floors.insert(filter, info.ack_floor.stream_sequence.max(restored));
                }
                Err(e) => {
                    tracing::debug!(partition = self.partition, error = %e, "no checkpoint: consumer info");
                    return;
                }
            }
        }
        let written = {
            let store = Arc::clone(store);
            let file = self.file.clone();
            tokio::task::spawn_blocking(move || store.export_checkpoint(&file)).await
        };
        let stats = match written {
            Ok(Ok(stats)) => stats,
            Ok(Err(e)) => {
                tracing::warn!(partition = self.partition, error = %e, "checkpoint not written");
                return;
            }
            Err(e) => {
                tracing::warn!(partition = self.partition, error = %e, "checkpoint task failed");
                return;
            }
        };
        let taken = Taken {
            epoch: self.epoch,
            taken_at_ms,
            floors,
            pairs: stats.pairs,
            partitions: self.partitions,
        };
        let checkpoints = Arc::clone(&self.checkpoints);
        let guard = Arc::clone(&self.guard);
        let file = self.file.clone();
        let partition = self.partition;
        self.uploading = Some(tokio::spawn(async move {
            if !guard.is_valid() {
                return;
            }
            match checkpoints.save(partition, &file, &taken).await {
                Ok(false) => tracing::debug!(
                    partition,
                    epoch = taken.epoch,
                    "checkpoint not uploaded: the bucket holds a newer owner's"
                ),
                Ok(true) => {
                    tracing::info!(
                        partition,
                        epoch = taken.epoch,
                        pairs = taken.pairs,
                        bytes = stats.bytes,
                        "checkpoint uploaded"
                    );
                    // the bucket holds it now; the local copy is not needed again
                    let _ = tokio::fs::remove_file(&file).await;
                }
                Err(e) => {
                    tracing::warn!(partition, error = %format!("{e:#}"), "checkpoint not uploaded; the next one is tried at its time")
                }
            }
        }));
    }
}

impl Writer {
    /// Waits for the running upload, if any (a final checkpoint before a hand-off).
    pub async fn finish(&mut self) {
        if let Some(upload) = self.uploading.take() {
            let _ = upload.await;
        }
    }
}

impl Drop for Writer {
    /// An upload still running when the partition's engine stops (its lease lost or handed
    /// off) is abandoned: nothing is written for a partition this worker no longer acts for.
    fn drop(&mut self) {
        if let Some(upload) = self.uploading.take() {
            upload.abort();
        }
    }
}
