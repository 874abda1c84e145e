//! # Partition ownership through NATS KV leases
//!
//! N partitions, W workers, no coordinator of our own: each partition is owned by exactly one
//! worker at a time through a lease in a JetStream key-value bucket, and workers balance the
//! partitions among themselves when one joins or leaves. This module decides; the host (the
//! worker's `run`) starts and stops one engine per owned partition from the [`Change`]s it
//! receives, and gives every engine the lease's [`Fence`].
//!
//! ## The bucket
//! `TOOLSTREAM_LEASES` by default ([`OwnershipConfig::bucket`]): stream `KV_<bucket>`, subjects
//! `$KV.<bucket>.>`, history 1, `max_age` = the lease TTL (a key nobody renews disappears by
//! itself when its owner dies or stalls), `replicas` replicas (3 on a cluster), duplicate window
//! `min(ttl, 2m)` (nats-server refuses one longer than `max_age`). Created when missing;
//! checked when present: another `max_age`, history, subjects or replica count is
//! [`OwnershipError::Bucket`], naming the setting. It is a standard KV bucket: `nats kv ls`,
//! `get`, `watch` read it. Keys:
//! - `p.<k>`: the lease of partition `k`, JSON `{"worker": id, "epoch": n, "acquired_at": ms}`
//!   (`acquired_at` in Unix milliseconds). The create carries no `epoch`: its epoch is its own
//!   revision, which the first renewal writes into the value.
//! - `w.<worker_id>`: a live worker, JSON `{"worker": id}`, renewed with the leases.
//!
//! ## Leases
//! - **Acquire** = a create (compare-and-set on "no value": `Nats-Expected-Last-Subject-Sequence:
//!   0`, or the revision of a delete marker). The **epoch** is the revision the create returns:
//!   a stream sequence, so epochs only grow per partition across owners (Kafka's leader epoch).
//! - **Renew** = a compare-and-set update on the last revision, every
//!   [`OwnershipConfig::renew_interval`]. A refused update (another revision: the key expired
//!   and someone created it) or a key gone means the lease is lost: [`Change::Revoked`]. One
//!   exception: when the key still holds our worker and epoch, the refused update met a
//!   renewal of ours that timed out on our side but was stored (no one else writes our
//!   epoch), and renewing continues from that revision.
//! - **Release** = a delete marker, compare-and-set on the last revision.
//!
//! ## Fencing
//! A [`Fence`] is valid while `Instant::now() < valid_until`, with `valid_until` = the local
//! send time of the last successful create or renewal + TTL − safety margin, and not revoked.
//! The server stamped that write after we sent it, so its copy expires at least `safety_margin`
//! after `valid_until`: no other worker can create the key while our fence is valid. This
//! assumes the NATS servers' clocks advance at the real rate and, on a cluster, that they agree
//! within the margin (each replica expires by its own clock). The clock is monotonic and keeps
//! counting while the process is stopped: after SIGSTOP + SIGCONT past the TTL, `is_valid()` is
//! false before any network round trip. The driver also revokes a lease whose deadline passed
//! ([`Change::Revoked`]); it never revives a lapsed one (it releases it, and acquires again with
//! a new epoch if the balance says so).
//!
//! ## Balancing
//! A starting worker joins as a member and acquires nothing for one renewal interval, so
//! workers started together see each other and each takes its share at once (rather than the
//! first taking every partition and handing most of them off, each hand-off a rebuild).
//! Every worker computes its quota from the live members (`w.*`, sorted by id): with N
//! partitions and W members, member `i` gets `N / W`, plus one for the first `N % W`. Under
//! quota it acquires free partitions (`k % W == i` first, then any); over quota it hands off its
//! extra ones ([`Change::HandOff`]: the host stops the engine gracefully, then calls
//! [`OwnershipHandle::released`]). It re-evaluates on every change in the bucket (a core
//! subscription to `$KV.<bucket>.>`, used as a hint only) and on every renewal tick. Create and
//! compare-and-set guarantee that two workers never hold the same partition; the quotas make
//! joining and leaving workers converge to a balanced ownership. A worker that stops cleanly
//! ([`OwnershipHandle::shutdown`], after the host stopped its engines) releases its leases and
//! deletes its member key, so the others take over at once instead of after the TTL.
//! Worker ids must be unique among live workers. A worker restarted with the same id does not
//! adopt its predecessor's leases: after a crash they expire (TTL), after a clean stop they
//! are already free.
//!
//! ## Using it
//! ```no_run
//! # async fn host(js: async_nats::jetstream::Context) -> Result<(), toolstream::ownership::OwnershipError> {
//! use toolstream::ownership::{self, Change, OwnershipConfig};
//! let (handle, mut changes) = ownership::start(js, OwnershipConfig::default(), 4).await?;
//! while let Some(change) = changes.recv().await {
//!     match change {
//!         Change::Acquired(lease) => { /* start an engine for lease.partition() with lease.fence() */ }
//!         Change::Revoked { partition, epoch } => { /* stop it now: no ack, no publish */ }
//!         Change::HandOff { partition, epoch } => {
//!             /* stop it gracefully, then: */
//!             handle.released(partition, epoch).await;
//!         }
//!     }
//! }
//! handle.shutdown().await; // after every engine stopped
//! # Ok(()) }
//! ```
//! Metrics for `/metrics`: [`OwnershipHandle::owned_partitions`],
//! [`OwnershipHandle::lease_epoch`], [`OwnershipHandle::stats`].
//!
//! ## NATS permissions
//! Publish: `$JS.API.STREAM.INFO.KV_<bucket>` (look up, and list `w.*` keys with a subjects
//! filter), `$JS.API.STREAM.CREATE.KV_<bucket>` (create when missing),
//! `$JS.API.STREAM.MSG.GET.KV_<bucket>` (read a key at the stream leader), `$KV.<bucket>.>`
//! (creates, renewals, deletes). Subscribe: `$KV.<bucket>.>` (the change hint), plus the
//! client's own inbox for the replies. The attempts bucket needs the same publish grants
//! (`…KV_TOOLSTREAM_ATTEMPTS`, `$KV.TOOLSTREAM_ATTEMPTS.>`), no subscription.
//!
//! ## Layout
//! - `mod.rs` — the configuration, [`start`], [`OwnershipHandle`], [`Change`], [`Lease`].
//! - `fence.rs` — [`Fence`]: the per-lease validity check (atomics and the monotonic clock).
//! - `bucket.rs` — the bucket over its stream: ensure, read, list, create, CAS write, delete.
//! - `balance.rs` — quotas and the plan (pure).
//! - `driver.rs` — the task: renewals, re-evaluation, hand-offs, release on shutdown.
//! - `attempts.rs` — the poison note a partition's owners pass on to each other (bucket
//!   `TOOLSTREAM_ATTEMPTS`): inputs an earlier owner stopped on are applied alone and given up
//!   on as `poison` after `max_deliver - 1` stops, across takeovers.

pub(crate) mod attempts;
mod balance;
mod bucket;
mod driver;
mod fence;

pub use fence::Fence;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The `[ownership]` settings. Every worker sharing a bucket must use the same `bucket`,
/// `lease_ttl` and `replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OwnershipConfig {
    /// The KV bucket of leases and members. Default `TOOLSTREAM_LEASES`.
    pub bucket: String,
    /// The KV bucket of the partitions' poison notes (`attempts`: inputs an owner stopped
    /// on, passed on to the partition's next owner). Default `TOOLSTREAM_ATTEMPTS`.
    pub attempts_bucket: String,
    /// How long a lease lives without renewal (the bucket's `max_age`): the longest a dead
    /// worker's partitions stay unowned. Default `15s`. On a cluster, `lease_ttl -
    /// safety_margin - renew_interval` must exceed the time the servers take to elect a new
    /// leader for the bucket after losing a node (nats-server's election timeout is 4-9 s), or
    /// every lease is lost (safely, and re-acquired) in such a failover.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub lease_ttl: Duration,
    /// How often leases and the member key are renewed. Default (unset): `lease_ttl / 5` (3 s
    /// for the default TTL). Must be at most `(lease_ttl - safety_margin) / 2`, so one lost
    /// renewal costs no lease.
    #[serde(
        deserialize_with = "de_opt_duration",
        serialize_with = "ser_opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub renew_interval: Option<Duration>,
    /// How long before the server's expiry a lease stops being valid locally: covers the
    /// offset between the NATS servers' clocks. Default `1s`; less than `lease_ttl`.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub safety_margin: Duration,
    /// The bucket's replicas (3 on a three-node cluster); an existing bucket with another
    /// count is refused. Not read from the file: the host sets it from `streams.replicas`, one
    /// replica setting for streams and buckets. Default 1.
    #[serde(skip)]
    pub replicas: usize,
    /// This worker's id, unique among live workers (`[A-Za-z0-9_=-]+`). Default (unset):
    /// `$HOSTNAME` (or `worker`), the process id and a random suffix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        OwnershipConfig {
            bucket: "TOOLSTREAM_LEASES".to_string(),
            attempts_bucket: "TOOLSTREAM_ATTEMPTS".to_string(),
            lease_ttl: Duration::from_secs(15),
            renew_interval: None,
            safety_margin: Duration::from_secs(1),
            replicas: 1,
            worker_id: None,
        }
    }
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    crate::run::duration::HumanDuration::deserialize(d).map(|h| h.get())
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    crate::run::duration::HumanDuration(*d).serialize(s)
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    d.map(crate::run::duration::HumanDuration).serialize(s)
}

fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<crate::run::duration::HumanDuration>::deserialize(d).map(|h| h.map(|h| h.get()))
}

/// The settings with every default filled in and checked.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub cfg: OwnershipConfig,
    pub worker_id: String,
    pub renew_interval: Duration,
}

impl OwnershipConfig {
    /// The renewal interval in effect (`lease_ttl / 5` unless set).
    pub fn effective_renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.lease_ttl / 5)
    }

    /// Checks the settings (the host may call it when it reads its configuration).
    pub fn validate(&self) -> Result<(), OwnershipError> {
        let bad = |m: String| Err(OwnershipError::Config(m));
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !name_ok(&self.bucket) {
            return bad(format!(
                "ownership.bucket {:?}: use letters, digits, `_` and `-`",
                self.bucket
            ));
        }
        if self.lease_ttl < Duration::from_millis(500) {
            return bad(format!(
                "ownership.lease_ttl {:?} is below 500ms",
                self.lease_ttl
            ));
        }
        if self.safety_margin >= self.lease_ttl {
            return bad(format!(
                "ownership.safety_margin {:?} must be less than lease_ttl {:?}",
                self.safety_margin, self.lease_ttl
            ));
        }
        let renew = self.effective_renew_interval();
        if renew.is_zero() || renew > (self.lease_ttl - self.safety_margin) / 2 {
            return bad(format!(
                "ownership.renew_interval {renew:?} must be above 0 and at most (lease_ttl - \
                 safety_margin) / 2 = {:?}, so one lost renewal costs no lease",
                (self.lease_ttl - self.safety_margin) / 2
            ));
        }
        if !(1..=5).contains(&self.replicas) {
            return bad(format!(
                "ownership.replicas {} must be 1 to 5",
                self.replicas
            ));
        }
        if let Some(id) = &self.worker_id {
            let id_ok = !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '='));
            if !id_ok {
                return bad(format!(
                    "ownership.worker_id {id:?}: use letters, digits, `_`, `=` and `-`"
                ));
            }
        }
        Ok(())
    }

    fn resolve(&self) -> Result<Resolved, OwnershipError> {
        self.validate()?;
        let worker_id = match &self.worker_id {
            Some(id) => id.clone(),
            None => default_worker_id(),
        };
        Ok(Resolved {
            cfg: self.clone(),
            worker_id,
            renew_interval: self.effective_renew_interval(),
        })
    }
}

/// `$HOSTNAME` (or `worker`), the pid and a random suffix, in key-safe characters.
fn default_worker_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host: String = std::env::var("HOSTNAME")
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let host = if host.is_empty() {
        "worker".to_string()
    } else {
        host
    };
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{host}-{}-{:08x}", std::process::id(), h.finish() as u32)
}

/// Why ownership could not start.
#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    /// An `[ownership]` setting is invalid.
    #[error("{0}")]
    Config(String),
    /// The bucket exists with other settings, or the server refused to create it: fatal.
    #[error("{0}")]
    Bucket(String),
    /// The server did not answer or the connection failed: retry.
    #[error("{0}")]
    Transient(String),
}

impl OwnershipError {
    /// Whether retrying may help (the server was not reachable or not ready).
    pub fn is_transient(&self) -> bool {
        matches!(self, OwnershipError::Transient(_))
    }
}

/// One held lease: start an engine for [`Lease::partition`] and give it [`Lease::fence`].
#[derive(Debug, Clone)]
pub struct Lease {
    fence: Fence,
}

impl Lease {
    /// The partition.
    pub fn partition(&self) -> u32 {
        self.fence.partition()
    }

    /// The epoch (the create's revision; greater than every earlier owner's).
    pub fn epoch(&self) -> u64 {
        self.fence.epoch()
    }

    /// The fence the engine checks before every ack and every publish.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }
}

/// What the host must do. Changes of one partition come in order: `Acquired`, then `Revoked`
/// or `HandOff` for the same epoch. After a `HandOff`, a `Revoked` of the same epoch may still
/// come (the lease lapsed during the graceful stop: stop at once); `released` is then a no-op.
#[derive(Debug, Clone)]
pub enum Change {
    /// Start an engine for `lease.partition()` with `lease.fence()`.
    Acquired(Lease),
    /// The lease is lost (expired locally, a renewal refused, the key gone): stop the engine at
    /// once, no more acks or publishes (its fence already says so).
    Revoked { partition: u32, epoch: u64 },
    /// Rebalancing: stop the engine gracefully (its fence stays valid meanwhile), then call
    /// [`OwnershipHandle::released`] with the same partition and epoch.
    HandOff { partition: u32, epoch: u64 },
}

/// Counts since start, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnershipStats {
    /// Leases created.
    pub acquired: u64,
    /// Leases lost (expired locally, renewal refused, key gone).
    pub revoked: u64,
    /// Hand-offs asked of the host.
    pub handed_off: u64,
    /// Leases released (deleted) by this worker.
    pub released: u64,
    /// Compare-and-set writes the server refused because another revision was there (lost
    /// races for a free partition are not counted).
    pub cas_conflicts: u64,
}

#[derive(Default)]
pub(crate) struct Shared {
    owned: Mutex<BTreeMap<u32, Fence>>,
    acquired: AtomicU64,
    revoked: AtomicU64,
    handed_off: AtomicU64,
    released: AtomicU64,
    cas_conflicts: AtomicU64,
}

impl Shared {
    fn set_owned(&self, owned: BTreeMap<u32, Fence>) {
        if let Ok(mut o) = self.owned.lock() {
            *o = owned;
        }
    }

    fn revoke_all(&self) {
        if let Ok(o) = self.owned.lock() {
            o.values().for_each(Fence::revoke);
        }
    }
}

pub(crate) enum Command {
    Released {
        partition: u32,
        epoch: u64,
        done: oneshot::Sender<()>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
    #[cfg(feature = "failpoints")]
    Stall(Duration),
}

/// The running ownership of one worker. Dropping it without [`OwnershipHandle::shutdown`] is a
/// crash as far as the others can tell: the driver stops, every fence is revoked, and the
/// leases and member key stay until the TTL.
pub struct OwnershipHandle {
    worker_id: String,
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl OwnershipHandle {
    /// This worker's id (its member key is `w.<id>`).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The partitions held now, with their epochs (including ones being handed off).
    pub fn owned(&self) -> Vec<(u32, u64)> {
        self.shared
            .owned
            .lock()
            .map(|o| o.iter().map(|(k, f)| (*k, f.epoch())).collect())
            .unwrap_or_default()
    }

    /// How many partitions are held now.
    pub fn owned_partitions(&self) -> usize {
        self.shared.owned.lock().map(|o| o.len()).unwrap_or(0)
    }

    /// The epoch of the lease held on `partition`, if held.
    pub fn lease_epoch(&self, partition: u32) -> Option<u64> {
        self.shared
            .owned
            .lock()
            .ok()
            .and_then(|o| o.get(&partition).map(Fence::epoch))
    }

    /// Counts since start.
    pub fn stats(&self) -> OwnershipStats {
        let s = &self.shared;
        OwnershipStats {
            acquired: s.acquired.load(Ordering::Relaxed),
            revoked: s.revoked.load(Ordering::Relaxed),
            handed_off: s.handed_off.load(Ordering::Relaxed),
            released: s.released.load(Ordering::Relaxed),
            cas_conflicts: s.cas_conflicts.load(Ordering::Relaxed),
        }
    }

    /// The host stopped the engine of `partition` (after a [`Change::HandOff`], or of its own
    /// accord): revoke the fence and release the lease (a compare-and-set delete), so another
    /// worker can take it. A stale epoch is ignored. Returns once done.
    pub async fn released(&self, partition: u32, epoch: u64) {
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(Command::Released {
                partition,
                epoch,
                done,
            })
            .is_ok()
        {
            let _ = wait.await;
        }
    }

    /// Stops cleanly, after the host stopped every engine: releases every lease and deletes
    /// the member key, so the others take over at once.
    pub async fn shutdown(mut self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Shutdown { done }).is_ok() {
            let _ = wait.await;
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Test hook: the driver does nothing for `d` (no renewals, no reaction to the bucket), as
    /// a SIGSTOPped process would; fences keep reading the clock.
    #[cfg(feature = "failpoints")]
    pub fn stall(&self, d: Duration) {
        let _ = self.commands.send(Command::Stall(d));
    }
}

impl Drop for OwnershipHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            self.shared.revoke_all();
        }
    }
}

/// Starts this worker's ownership of `partitions` partitions: creates or checks the bucket,
/// joins as a member, and from then on acquires, renews, hands off and releases leases in a
/// background task, telling the host through the returned receiver.
pub async fn start(
    js: async_nats::jetstream::Context,
    cfg: OwnershipConfig,
    partitions: u32,
) -> Result<(OwnershipHandle, mpsc::Receiver<Change>), OwnershipError> {
    let resolved = cfg.resolve()?;
    // One request may take up to a renewal interval (at least 1 s, at most half a TTL); the
    // fences do not wait for it, they read the clock.
    let op_timeout = resolved
        .renew_interval
        .max(Duration::from_secs(1))
        .min(resolved.cfg.lease_ttl / 2);
    let bucket = bucket::Bucket::ensure(js.clone(), &resolved.cfg, op_timeout).await?;
    let wake = js
        .client()
        .subscribe(bucket.all_subjects())
        .await
        .map_err(|e| {
            OwnershipError::Transient(format!("subscribe to {}: {e}", bucket.all_subjects()))
        })?;
    let shared = Arc::new(Shared::default());
    let (commands, command_rx) = mpsc::unbounded_channel();
    // The driver never waits on the host: it sends into an unbounded queue, and a forwarder
    // feeds the host's bounded receiver.
    let (inner_tx, mut inner_rx) = mpsc::unbounded_channel::<Change>();
    let capacity = usize::try_from(partitions).unwrap_or(1024).clamp(8, 1024) * 2;
    let (tx, rx) = mpsc::channel(capacity);
    tokio::spawn(async move {
        while let Some(change) = inner_rx.recv().await {
            if tx.send(change).await.is_err() {
                break;
            }
        }
    });
    let worker_id = resolved.worker_id.clone();
    tracing::info!(worker = %worker_id, bucket = %resolved.cfg.bucket, partitions,
        ttl = ?resolved.cfg.lease_ttl, renew = ?resolved.renew_interval, "partition ownership starting");
    let driver = driver::Driver::new(bucket, resolved, partitions, shared.clone(), inner_tx);
    let task = tokio::spawn(driver.run(command_rx, wake));
    Ok((
        OwnershipHandle {
            worker_id,
            commands,
            shared,
            task: Some(task),
        },
        rx,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_the_renewal_is_a_fifth_of_the_ttl() {
        let c = OwnershipConfig::default();
        c.validate().expect("defaults are valid");
        assert_eq!(c.effective_renew_interval(), Duration::from_secs(3));
        let r = c.resolve().expect("resolves");
        assert!(!r.worker_id.is_empty());
        assert!(r
            .worker_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }

    #[test]
    fn the_toml_section_reads_human_durations_and_refuses_unknown_keys() {
        let c: OwnershipConfig = toml::from_str(
            "bucket = \"L\"\nlease_ttl = \"3s\"\nrenew_interval = \"500ms\"\n\
             safety_margin = \"250ms\"\nworker_id = \"w-1\"\n",
        )
        .expect("parses");
        assert_eq!(c.lease_ttl, Duration::from_secs(3));
        assert_eq!(c.renew_interval, Some(Duration::from_millis(500)));
        assert_eq!(c.safety_margin, Duration::from_millis(250));
        assert_eq!((c.replicas, c.worker_id.as_deref()), (1, Some("w-1")));
        c.validate().expect("valid");
        assert!(
            toml::from_str::<OwnershipConfig>("replicas = 3").is_err(),
            "replicas come from streams.replicas"
        );
        let back: OwnershipConfig =
            toml::from_str(&toml::to_string(&c).expect("serializes")).expect("reads back");
        assert_eq!(back, c);
        let text = toml::to_string(&c).expect("serializes");
        assert!(text.contains("lease_ttl = \"3s\""), "{text}");
        assert!(toml::from_str::<OwnershipConfig>("lease_tll = \"3s\"").is_err());
        let empty: OwnershipConfig = toml::from_str("").expect("all defaults");
        assert_eq!(empty, OwnershipConfig::default());
    }

    #[test]
    fn settings_that_could_cost_a_lease_are_refused() {
        let ttl = |s| OwnershipConfig {
            lease_ttl: Duration::from_secs(s),
            ..Default::default()
        };
        let e = OwnershipConfig {
            safety_margin: Duration::from_secs(3),
            ..ttl(3)
        };
        assert!(e.validate().is_err(), "margin >= ttl");
        let e = OwnershipConfig {
            renew_interval: Some(Duration::from_secs(5)),
            ..ttl(10)
        };
        assert!(e
            .validate()
            .unwrap_err()
            .to_string()
            .contains("renew_interval"));
        let e = OwnershipConfig {
            worker_id: Some("a.b".into()),
            ..ttl(10)
        };
        assert!(e.validate().is_err(), "a dot would split the key");
        let e = OwnershipConfig {
            bucket: "a b".into(),
            ..ttl(10)
        };
        assert!(e.validate().is_err());
        let e = OwnershipConfig {
            replicas: 0,
            ..ttl(10)
        };
        assert!(e.validate().is_err());
    }
}
