//! The ownership task of one worker: join, then renew, re-evaluate, hand off and release until
//! shutdown. One task, so its state needs no locks; the host sees it through [`Shared`] and the
//! [`Change`] queue.

use super::balance;
use super::bucket::{Bucket, Entry, WriteError};
use super::fence::Fence;
use super::{Change, Command, Lease, Resolved, Shared};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

/// The value of `p.<k>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LeaseValue {
    worker: String,
    /// Absent in the create: the create's own revision is the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
    /// Unix milliseconds.
    acquired_at: u64,
}

/// The value of `w.<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MemberValue {
    worker: String,
    /// The partition count it runs with (absent: written by an older worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partitions: Option<u32>,
}

struct Held {
    epoch: u64,
    revision: u64,
    acquired_at: u64,
    fence: Fence,
    handing_off: bool,
}

/// The bucket as last read.
#[derive(Default)]
struct View {
    members: Vec<String>,
    /// Live workers running with another partition count: (id, count). They are not
    /// counted as members, and while any is seen this worker acquires nothing.
    other_layouts: Vec<(String, u32)>,
    /// Partition -> (worker, epoch) for the held ones.
    leases: BTreeMap<u32, (String, u64)>,
}

pub(crate) struct Driver {
    bucket: Bucket,
    r: Resolved,
    partitions: u32,
    shared: Arc<Shared>,
    changes: mpsc::UnboundedSender<Change>,
    held: BTreeMap<u32, Held>,
    member_rev: Option<u64>,
    view: View,
    host_gone: bool,
    /// Partitions the host gave back of its own accord (an engine that did not start): not
    /// taken again by this worker before the instant, so another worker gets a chance and a
    /// failing start does not spin.
    cooldown: BTreeMap<u32, Instant>,
    /// When the first of the current run of failed renewals was sent.
    failing_since: Option<Instant>,
    /// Until one renewal interval after joining, acquire nothing: workers started together
    /// register first, so each takes its share at once instead of the first taking every
    /// partition and handing most of them off again (each hand-off a rebuild).
    settling: bool,
}

fn lease_key(k: u32) -> String {
    format!("p.{k}")
}

/// Deletes `leases` (partition, epoch, last revision), each by compare-and-set on its last
/// revision, all at once: (partition, epoch, what the server said) for each.
async fn delete_leases(
    bucket: &Bucket,
    leases: Vec<(u32, u64, u64)>,
) -> Vec<(u32, u64, Result<u64, WriteError>)> {
    futures::future::join_all(leases.into_iter().map(|(k, epoch, rev)| async move {
        (k, epoch, bucket.delete_if(&lease_key(k), rev).await)
    }))
    .await
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn json<T: Serialize>(v: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

impl Driver {
    pub(crate) fn new(
        bucket: Bucket,
        r: Resolved,
        partitions: u32,
        shared: Arc<Shared>,
        changes: mpsc::UnboundedSender<Change>,
    ) -> Driver {
        Driver {
            bucket,
            r,
            partitions,
            shared,
            changes,
            held: BTreeMap::new(),
            member_rev: None,
            view: View::default(),
            host_gone: false,
            cooldown: BTreeMap::new(),
            failing_since: None,
            settling: true,
        }
    }

    fn me(&self) -> &str {
        &self.r.worker_id
    }

    /// The local deadline of a write sent at `sent`.
    fn deadline(&self, sent: Instant) -> Instant {
        sent + self.r.cfg.lease_ttl - self.r.cfg.safety_margin
    }

    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut wake: async_nats::Subscriber,
    ) {
        self.join().await;
        self.evaluate().await;
        let settled_at = Instant::now() + self.r.renew_interval;
        let mut tick = tokio::time::interval(self.r.renew_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.tick().await;
        let mut watching = true;
        loop {
            if self.host_gone {
                tracing::warn!(worker = %self.me(), "the host stopped listening: releasing every lease");
                self.leave().await;
                return;
            }
            let lapse = self.held.values().map(|h| h.fence.valid_until()).min();
            tokio::select! {
                _ = tick.tick() => {
                    self.renew_all().await;
                    self.evaluate().await;
                }
                cmd = commands.recv() => match cmd {
                    // The handle is gone (it aborts us in its drop; this is the race).
                    None => return,
                    Some(Command::Released { partition, epoch, done }) => {
                        self.release(partition, epoch).await;
                        let _ = done.send(());
                        self.evaluate().await;
                    }
                    Some(Command::Shutdown { done }) => {
                        self.leave().await;
                        let _ = done.send(());
                        return;
                    }
                    #[cfg(feature = "failpoints")]
                    Some(Command::Stall(d)) => {
                        tracing::warn!(worker = %self.me(), stall = ?d, "failpoint: ownership stalled");
                        tokio::time::sleep(d).await;
                        tracing::warn!(worker = %self.me(), "failpoint: ownership resumed");
                    }
                },
                msg = wake.next(), if watching => match msg {
                    None => {
                        tracing::warn!(worker = %self.me(), "the bucket subscription ended: re-evaluating on renewals only");
                        watching = false;
                    }
                    Some(msg) => {
                        let mut relevant = self.relevant(&msg);
                        // Coalesce a burst into one re-evaluation.
                        while let Some(Some(more)) = wake.next().now_or_never() {
                            relevant |= self.relevant(&more);
                        }
                        if relevant {
                            self.evaluate().await;
                        }
                    }
                },
                _ = sleep_until_opt(lapse) => {
                    self.drop_lapsed().await;
                }
                _ = tokio::time::sleep_until(settled_at), if self.settling => {
                    self.settling = false;
                    self.evaluate().await;
                }
            }
        }
    }

    /// Whether a write seen on the bucket may change what this worker should do (renewals of
    /// what we already know do not).
    fn relevant(&self, msg: &async_nats::Message) -> bool {
        let Some(key) = self.bucket.key_of(msg.subject.as_str()) else {
            return false;
        };
        if let Some(id) = key.strip_prefix("w.") {
            if id == self.me() {
                return false;
            }
            return msg.payload.is_empty() || !self.view.members.iter().any(|m| m == id);
        }
        let Some(k) = key.strip_prefix("p.").and_then(|k| k.parse::<u32>().ok()) else {
            return false;
        };
        if msg.payload.is_empty() {
            return true;
        }
        match serde_json::from_slice::<LeaseValue>(&msg.payload) {
            Ok(v) if v.worker == self.me() => false,
            Ok(LeaseValue {
                worker,
                epoch: Some(epoch),
                ..
            }) => self.view.leases.get(&k) != Some(&(worker, epoch)),
            _ => true,
        }
    }

    fn emit(&mut self, change: Change) {
        if self.changes.send(change).is_err() {
            self.host_gone = true;
        }
    }

    fn publish_owned(&self) {
        self.shared.set_owned(
            self.held
                .iter()
                .map(|(k, h)| (*k, h.fence.clone()))
                .collect(),
        );
    }

    /// Writes the member key: over our own earlier one, or anew.
    async fn join(&mut self) {
        let key = format!("w.{}", self.me());
        let value = json(&MemberValue {
            worker: self.me().to_string(),
            partitions: Some(self.partitions),
        });
        let expect = match self.bucket.last(&key).await {
            Ok(Some(Entry { revision, value })) => {
                if value.is_some() {
                    tracing::warn!(worker = %self.me(), "a live member key with this worker id exists (a restart within the TTL, or a duplicate id): taking it over");
                }
                revision
            }
            Ok(None) => 0,
            Err(e) => {
                tracing::warn!(worker = %self.me(), error = %e, "joining: will retry");
                return;
            }
        };
        match self.bucket.put_if(&key, value, expect).await {
            Ok(rev) => {
                self.member_rev = Some(rev);
                tracing::info!(worker = %self.me(), "joined as a member");
            }
            Err(e) => tracing::warn!(worker = %self.me(), error = %e, "joining: will retry"),
        }
    }

    /// Renews every lease and the member key (compare-and-set on the last revision).
    async fn renew_all(&mut self) {
        self.drop_lapsed().await;
        let me = self.me().to_string();
        let writes: Vec<(u32, u64, Bytes)> = self
            .held
            .iter()
            .map(|(k, h)| {
                let v = LeaseValue {
                    worker: me.clone(),
                    epoch: Some(h.epoch),
                    acquired_at: h.acquired_at,
                };
                (*k, h.revision, json(&v))
            })
            .collect();
        let sent = Instant::now();
        let bucket = &self.bucket;
        let results =
            futures::future::join_all(writes.into_iter().map(|(k, rev, value)| async move {
                (k, bucket.put_if(&lease_key(k), value, rev).await)
            }));
        let member = async {
            match self.member_rev {
                Some(rev) => Some(
                    bucket
                        .put_if(
                            &format!("w.{me}"),
                            json(&MemberValue {
                                worker: me.clone(),
                                partitions: Some(self.partitions),
                            }),
                            rev,
                        )
                        .await,
                ),
                None => None,
            }
        };
        let (results, member) = tokio::join!(results, member);
        let until = self.deadline(sent);
        let mut failed = false;
        for (k, result) in results {
            failed |= matches!(result, Err(WriteError::Other(_)));
            match result {
                Ok(rev) => {
                    if let Some(h) = self.held.get_mut(&k) {
                        h.revision = rev;
                        h.fence.extend_to(until);
                    }
                }
                Err(WriteError::Conflict) => {
                    self.shared.cas_conflicts.fetch_add(1, Ordering::Relaxed);
                    self.renewal_refused(k).await;
                }
                Err(WriteError::Other(e)) => {
                    tracing::warn!(worker = %me, partition = k, error = %e, "lease renewal failed; retrying next tick");
                }
            }
        }
        failed |= matches!(member, Some(Err(WriteError::Other(_))));
        match (failed, self.failing_since) {
            (true, None) => self.failing_since = Some(sent),
            (false, Some(since)) => {
                self.failing_since = None;
                tracing::info!(worker = %me, outage = ?sent.duration_since(since),
                    "renewals succeed again");
            }
            _ => {}
        }
        match member {
            Some(Ok(rev)) => self.member_rev = Some(rev),
            Some(Err(WriteError::Conflict)) | None => {
                if self.member_rev.is_some() {
                    tracing::warn!(worker = %me, "member key expired or replaced: joining again");
                }
                self.member_rev = None;
                self.join().await;
            }
            Some(Err(WriteError::Other(e))) => {
                tracing::warn!(worker = %me, error = %e, "member renewal failed; retrying next tick");
            }
        }
    }

    /// A renewal of `k` was refused. Either the key moved on (expired, maybe taken: the lease
    /// is lost), or an earlier renewal we gave up on (timed out) was stored after all: then
    /// the key still holds our worker and epoch, nobody else wrote in between (a new owner
    /// writes its own epoch), and we continue from its revision. The fence is not extended
    /// for that write (we do not know when it was stored); the next renewal extends it.
    async fn renewal_refused(&mut self, k: u32) {
        let Some(epoch) = self.held.get(&k).map(|h| h.epoch) else {
            return;
        };
        match self.bucket.last(&lease_key(k)).await {
            Ok(Some(Entry {
                revision,
                value: Some(value),
            })) => {
                let ours = serde_json::from_slice::<LeaseValue>(&value)
                    .is_ok_and(|v| v.worker == self.me() && v.epoch == Some(epoch));
                if ours {
                    if let Some(h) = self.held.get_mut(&k) {
                        tracing::info!(worker = %self.r.worker_id, partition = k, epoch, revision,
                            "a renewal given up on was stored after all; continuing from it");
                        h.revision = revision;
                    }
                    return;
                }
                self.lose(k, "renewal refused: another owner holds the key");
            }
            Ok(_) => {
                self.lose(k, "renewal refused: the key expired");
            }
            Err(e) => {
                // Cannot tell: keep it; the fence lapses by itself if this goes on.
                tracing::warn!(worker = %self.r.worker_id, partition = k, error = %e,
                    "renewal refused and the key unreadable; retrying next tick");
            }
        }
    }

    /// Revokes every lease whose local deadline passed, then deletes those still at our
    /// revision (so they are free now rather than at the server's expiry).
    async fn drop_lapsed(&mut self) {
        let lapsed: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h.fence.lapsed())
            .map(|(k, _)| *k)
            .collect();
        let lost: Vec<(u32, u64, u64)> = lapsed
            .into_iter()
            .filter_map(|k| self.lose(k, "expired locally (no successful renewal within the TTL)"))
            .collect();
        if lost.is_empty() {
            return;
        }
        for (k, epoch, result) in delete_leases(&self.bucket, lost).await {
            match result {
                Ok(_) => {
                    tracing::info!(worker = %self.me(), partition = k, epoch, "lapsed lease released");
                }
                Err(WriteError::Conflict) => {
                    self.shared.cas_conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(worker = %self.me(), partition = k, epoch,
                        "lapsed lease moved on (the server refused our revision)");
                }
                Err(WriteError::Other(e)) => {
                    tracing::warn!(worker = %self.me(), partition = k, error = %e,
                        "releasing a lapsed lease failed; it expires by itself");
                }
            }
        }
    }

    /// The lease on `k` is lost: revoke its fence, tell the host. Its (partition, epoch, last
    /// revision), if it was held.
    fn lose(&mut self, k: u32, why: &str) -> Option<(u32, u64, u64)> {
        let h = self.held.remove(&k)?;
        h.fence.revoke();
        self.shared.revoked.fetch_add(1, Ordering::Relaxed);
        self.publish_owned();
        tracing::info!(worker = %self.me(), partition = k, epoch = h.epoch, reason = why, "lease revoked");
        self.emit(Change::Revoked {
            partition: k,
            epoch: h.epoch,
        });
        Some((k, h.epoch, h.revision))
    }

    /// The host stopped the engine of `k` at `epoch`: revoke and delete.
    async fn release(&mut self, k: u32, epoch: u64) {
        if let Some(lease) = self.take_for_release(k, epoch) {
            self.delete_released(vec![lease]).await;
        }
    }

    /// Takes the lease on `k` at `epoch` out of the held ones and revokes its fence: (partition,
    /// epoch, last revision). A stale epoch is ignored.
    fn take_for_release(&mut self, k: u32, epoch: u64) -> Option<(u32, u64, u64)> {
        if self.held.get(&k).map(|h| h.epoch) != Some(epoch) {
            return None;
        }
        let h = self.held.remove(&k)?;
        h.fence.revoke();
        self.publish_owned();
        if !h.handing_off {
            self.cooldown
                .insert(k, Instant::now() + self.r.cfg.lease_ttl);
        }
        Some((k, epoch, h.revision))
    }

    /// Deletes released leases (compare-and-set on their last revisions), all at once.
    async fn delete_released(&mut self, leases: Vec<(u32, u64, u64)>) {
        for (k, epoch, result) in delete_leases(&self.bucket, leases).await {
            match result {
                Ok(_) => {
                    self.shared.released.fetch_add(1, Ordering::Relaxed);
                    self.view.leases.remove(&k);
                    tracing::info!(worker = %self.me(), partition = k, epoch, "lease released");
                }
                Err(WriteError::Conflict) => {
                    self.shared.cas_conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(worker = %self.me(), partition = k, epoch, "lease already gone at release");
                }
                Err(WriteError::Other(e)) => {
                    tracing::warn!(worker = %self.me(), partition = k, epoch, error = %e, "release failed; the lease expires by itself");
                }
            }
        }
    }

    /// Clean stop: release every lease, then delete the member key.
    async fn leave(&mut self) {
        let held: Vec<(u32, u64)> = self.held.iter().map(|(k, h)| (*k, h.epoch)).collect();
        let leases: Vec<(u32, u64, u64)> = held
            .into_iter()
            .filter_map(|(k, epoch)| self.take_for_release(k, epoch))
            .collect();
        self.delete_released(leases).await;
        if let Some(rev) = self.member_rev.take() {
            let key = format!("w.{}", self.me());
            if let Err(e) = self.bucket.delete_if(&key, rev).await {
                tracing::warn!(worker = %self.me(), error = %e, "deleting the member key failed; it expires by itself");
            }
        }
        tracing::info!(worker = %self.me(), "left: every lease released");
    }

    /// Reads the bucket and returns `None` when a read failed (never act on half a view).
    async fn scan(&self) -> Option<View> {
        let bucket = &self.bucket;
        let leases = futures::future::join_all(
            (0..self.partitions).map(|k| async move { (k, bucket.last(&lease_key(k)).await) }),
        );
        let members = async {
            let keys = bucket.keys_under("w.").await?;
            let reads = futures::future::join_all(
                keys.iter()
                    .map(|key| async move { (key.clone(), bucket.last(key).await) }),
            )
            .await;
            let mut live = Vec::new();
            let mut other = Vec::new();
            for (key, read) in reads {
                if let Some(Entry {
                    value: Some(value), ..
                }) = read?
                {
                    if let Some(id) = key.strip_prefix("w.") {
                        let theirs = serde_json::from_slice::<MemberValue>(&value)
                            .ok()
                            .and_then(|m| m.partitions);
                        match theirs {
                            Some(n) if n != self.partitions => other.push((id.to_string(), n)),
                            _ => live.push(id.to_string()),
                        }
                    }
                }
            }
            Ok::<_, String>((live, other))
        };
        let (leases, members) = tokio::join!(leases, members);
        let mut view = View::default();
        match members {
            Ok((m, other)) => {
                view.members = m;
                view.other_layouts = other;
            }
            Err(e) => {
                tracing::warn!(worker = %self.me(), error = %e, "reading the members failed");
                return None;
            }
        }
        for (k, read) in leases {
            match read {
                Ok(Some(Entry {
                    revision,
                    value: Some(value),
                })) => {
                    let (worker, epoch) = match serde_json::from_slice::<LeaseValue>(&value) {
                        Ok(v) => (v.worker, v.epoch.unwrap_or(revision)),
                        // Not ours to judge: held by someone.
                        Err(_) => (String::from("?"), revision),
                    };
                    view.leases.insert(k, (worker, epoch));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(worker = %self.me(), error = %e, "reading the leases failed");
                    return None;
                }
            }
        }
        Some(view)
    }

    /// Reads the bucket, checks what we hold against it, and acts on the balance.
    async fn evaluate(&mut self) {
        let Some(mut view) = self.scan().await else {
            return;
        };
        let me = self.me().to_string();
        if self.member_rev.is_some() && !view.members.contains(&me) {
            view.members.push(me.clone());
        }
        view.members.sort();
        view.members.dedup();
        // What we hold must be what the bucket says.
        let held: Vec<(u32, u64)> = self.held.iter().map(|(k, h)| (*k, h.epoch)).collect();
        for (k, epoch) in held {
            match view.leases.get(&k) {
                Some((w, e)) if *w == me && *e == epoch => {}
                Some(_) => {
                    self.shared.cas_conflicts.fetch_add(1, Ordering::Relaxed);
                    self.lose(k, "the bucket names another owner or epoch");
                }
                None => {
                    self.lose(k, "the lease key is gone");
                }
            }
        }
        self.view = view;
        if self.member_rev.is_none() {
            // Not a member (yet): hold nothing new until we are.
            return;
        }
        let kept: BTreeSet<u32> = self
            .held
            .iter()
            .filter(|(_, h)| !h.handing_off)
            .map(|(k, _)| *k)
            .collect();
        let now = Instant::now();
        self.cooldown.retain(|_, until| *until > now);
        let free: BTreeSet<u32> = (0..self.partitions)
            .filter(|k| {
                !self.view.leases.contains_key(k)
                    && !self.held.contains_key(k)
                    && !self.cooldown.contains_key(k)
            })
            .collect();
        let plan = balance::plan(self.partitions, &self.view.members, &me, &kept, &free);
        for k in plan.hand_off {
            let Some(h) = self.held.get_mut(&k) else {
                continue;
            };
            h.handing_off = true;
            let epoch = h.epoch;
            self.shared.handed_off.fetch_add(1, Ordering::Relaxed);
            tracing::info!(worker = %me, partition = k, epoch, quota = plan.quota,
                members = self.view.members.len(), "handing off a partition");
            self.emit(Change::HandOff {
                partition: k,
                epoch,
            });
        }
        if self.settling {
            return;
        }
        if !self.view.other_layouts.is_empty() && self.held.is_empty() {
            // Workers that disagree on the partition count would each think partitions free
            // that the other holds under another mapping. A worker that holds nothing yet (the
            // newcomer) acquires nothing until they agree; workers already serving go on (the
            // others are not counted as members).
            tracing::error!(
                worker = %me,
                partitions = self.partitions,
                others = ?self.view.other_layouts,
                "live workers run with another partition count (--partitions): acquiring \
                 nothing until every worker uses the same count as the server's mapping"
            );
            return;
        }
        let mut want = plan.want;
        for k in plan.candidates {
            if want == 0 {
                break;
            }
            let acquired_at = unix_ms();
            let value = json(&LeaseValue {
                worker: me.clone(),
                epoch: None,
                acquired_at,
            });
            let sent = Instant::now();
            match self.bucket.create(&lease_key(k), value).await {
                Ok(epoch) => {
                    want -= 1;
                    let fence = Fence::new(k, epoch, self.deadline(sent));
                    self.held.insert(
                        k,
                        Held {
                            epoch,
                            revision: epoch,
                            acquired_at,
                            fence: fence.clone(),
                            handing_off: false,
                        },
                    );
                    self.view.leases.insert(k, (me.clone(), epoch));
                    self.shared.acquired.fetch_add(1, Ordering::Relaxed);
                    self.publish_owned();
                    tracing::info!(worker = %me, partition = k, epoch, quota = plan.quota,
                        members = self.view.members.len(), "lease acquired");
                    self.emit(Change::Acquired(Lease { fence }));
                }
                // Someone was faster.
                Err(WriteError::Conflict) => {}
                Err(WriteError::Other(e)) => {
                    tracing::warn!(worker = %me, partition = k, error = %e, "acquiring failed");
                    break;
                }
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
