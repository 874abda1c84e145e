//! The poison note of a leased partition: what its owners pass on to each other, besides the
//! checkpoint, so that an input that crashes every worker that applies it is dead-lettered as
//! `poison` instead of taking the workers down one after another, forever.
//!
//! A statically assigned worker keeps this note in its own store (`assembler::Store::
//! begin_attempt`): it restarts on the same disk, and its consumer counts deliveries. A leased
//! partition moves: its next owner rebuilds from a checkpoint through a consumer of its own
//! epoch, on which every input is a first delivery, in a store that holds no note. So the note
//! lives in NATS, in the key-value bucket `TOOLSTREAM_ATTEMPTS` ([`stream_config`]; history 1,
//! no expiry, `streams.replicas`), one key per partition, `p.<k>`, a JSON [`Note`]. Every range
//! in it is an inclusive range of input stream sequences, per consumer filter, and is cut at the
//! ack floor of the consumer that read it (what was acknowledged is done).
//!
//! The input that stopped an owner is among what its consumer delivered and never acknowledged.
//! Isolating all of those at once would make every takeover apply hundreds of inputs alone, each
//! behind a note, so it goes in two steps, and an input that keeps stopping owners is given up
//! on after as many stops as on a static worker (`max_deliver`):
//!
//! 1. `group`: a new owner records what the earlier owner's consumer delivered and never
//!    acknowledged *before* it deletes the earlier consumers ([`Attempts::take_over`]), and
//!    applies those inputs in ordinary batches. If it stops before acknowledging them, the
//!    input that stopped it is probably among them, and the next owner isolates them.
//! 2. `suspects`: the ranges isolated so: each input in them is applied alone behind `open`
//!    (the input being applied alone right now). An owner that finds `open` set when it takes
//!    the partition over counts one more stop for that input in `stops`; an input with
//!    `max_deliver - 2` stops (at least 1) is dead-lettered as `poison` instead of applied
//!    again: one stop in its first batch, one in its group, the rest alone.
//!
//! `returned` names the consumers of an owner that stopped cleanly (a hand-off, a shutdown)
//! after settling everything it applied and returning what it had only prefetched: its group
//! is not isolated.
//!
//! Writes are compare-and-set on the key's revision, and checked against the lease's fence, so
//! a deposed owner cannot change the note its successor keeps.

use super::bucket::{Bucket, Entry, WriteError};
use super::OwnershipConfig;
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sink::guarded::Guard;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long one request to the bucket may take.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The stream config of the attempts bucket (what `nats kv add --history 1` creates).
pub(crate) fn stream_config(cfg: &OwnershipConfig) -> stream::Config {
    stream::Config {
        name: format!("KV_{}", cfg.attempts_bucket),
        description: Some(
            "toolstream poison notes of leased partitions (p.<k>): inputs an owner stopped on"
                .into(),
        ),
        subjects: vec![format!("$KV.{}.>", cfg.attempts_bucket)],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: cfg.replicas,
        max_messages_per_subject: 1,
        discard: DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        ..Default::default()
    }
}

/// What an earlier owner's consumer of the partition had done when a new owner took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Earlier {
    /// The consumer's name.
    pub name: String,
    /// The consumer's filter subject.
    pub filter: String,
    /// Its ack floor (stream sequence): everything it delivered up to here was acknowledged.
    pub ack_floor: u64,
    /// The last stream sequence it delivered.
    pub delivered: u64,
}

/// The note of one partition (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Note {
    /// The input being applied alone right now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<u64>,
    /// Stops counted per input stream sequence.
    #[serde(default)]
    pub stops: BTreeMap<u64, u32>,
    /// Per consumer filter: ranges applied alone, sorted and disjoint.
    #[serde(default)]
    pub suspects: BTreeMap<String, Vec<[u64; 2]>>,
    /// Per consumer filter: ranges the current owner applies in batches (delivered to an
    /// earlier owner and never acknowledged), sorted and disjoint.
    #[serde(default)]
    pub group: BTreeMap<String, Vec<[u64; 2]>>,
    /// Consumers whose owner stopped cleanly, having settled all it applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returned: Vec<String>,
}

impl Note {
    /// The note a new owner keeps (see the module docs): a stop for the input left open; the
    /// earlier owner's group isolated unless it stopped cleanly; the earlier consumers'
    /// unacknowledged deliveries the new group; every range cut at the ack floor of the
    /// consumer that read it; stops kept only for suspects.
    pub(crate) fn taken_over(mut self, earlier: &[Earlier]) -> Note {
        if let Some(seq) = self.open.take() {
            let stops = self.stops.entry(seq).or_insert(0);
            *stops = stops.saturating_add(1);
        }
        let returned = std::mem::take(&mut self.returned);
        let mut group = std::mem::take(&mut self.group);
        for e in earlier {
            let floor = e.ack_floor;
            let suspects = self.suspects.entry(e.filter.clone()).or_default();
            *suspects = cut(std::mem::take(suspects), floor);
            let tried = cut(group.remove(&e.filter).unwrap_or_default(), floor);
            let clean = returned.contains(&e.name);
            let mut next = if clean {
                tried
            } else {
                // its owner stopped while this group was applied in batches
                suspects.extend(tried);
                *suspects = merged(std::mem::take(suspects));
                Vec::new()
            };
            if e.delivered > floor && !clean {
                next.push([floor.saturating_add(1), e.delivered]);
            }
            let next = without(merged(next), suspects);
            if !next.is_empty() {
                self.group.insert(e.filter.clone(), next);
            }
        }
        // a group whose filter has no earlier consumer was never applied by anyone
        for (filter, ranges) in group {
            let ranges = merged(ranges);
            if !ranges.is_empty() {
                let mine = self.group.entry(filter).or_default();
                mine.extend(ranges);
                *mine = merged(std::mem::take(mine));
            }
        }
        self.suspects.retain(|_, ranges| !ranges.is_empty());
        let suspects = &self.suspects;
        self.stops
            .retain(|seq, _| suspects.values().any(|r| contains(r, *seq)));
        self
    }

    /// Whether the input at `seq` is a suspect (of any filter).
    pub(crate) fn is_suspect(&self, seq: u64) -> bool {
        self.suspects.values().any(|r| contains(r, seq))
    }
}

fn contains(ranges: &[[u64; 2]], seq: u64) -> bool {
    ranges.iter().any(|[lo, hi]| (*lo..=*hi).contains(&seq))
}

/// `ranges` less everything up to `floor`.
fn cut(ranges: Vec<[u64; 2]>, floor: u64) -> Vec<[u64; 2]> {
    ranges
        .into_iter()
        .filter(|[_, hi]| *hi > floor)
        .map(|[lo, hi]| [lo.max(floor.saturating_add(1)), hi])
        .collect()
}

/// `ranges` (sorted, disjoint) less everything in `minus` (sorted, disjoint).
fn without(ranges: Vec<[u64; 2]>, minus: &[[u64; 2]]) -> Vec<[u64; 2]> {
    let mut out = Vec::new();
    'range: for [lo, hi] in ranges {
        let mut from = lo;
        for &[mlo, mhi] in minus {
            if mhi < from || mlo > hi {
                continue;
            }
            if mlo > from {
                out.push([from, mlo - 1]);
            }
            if mhi >= hi {
                continue 'range;
            }
            from = mhi + 1;
        }
        out.push([from, hi]);
    }
    out
}

/// Sorted, overlapping and adjacent ranges joined.
fn merged(mut ranges: Vec<[u64; 2]>) -> Vec<[u64; 2]> {
    ranges.sort_unstable();
    let mut out: Vec<[u64; 2]> = Vec::with_capacity(ranges.len());
    for [lo, hi] in ranges {
        match out.last_mut() {
            Some(last) if lo <= last[1].saturating_add(1) => last[1] = last[1].max(hi),
            _ => out.push([lo, hi]),
        }
    }
    out
}

/// Why a note could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AttemptsError {
    /// The lease no longer holds, or another owner wrote the note: this owner is deposed.
    #[error("the partition's poison note belongs to another owner now")]
    Deposed,
    /// The bucket could not be reached, created or read.
    #[error("poison note: {0}")]
    Bucket(String),
}

/// The note of one leased partition, held by its owner (see the module docs).
pub struct Attempts {
    bucket: Bucket,
    key: String,
    guard: Arc<dyn Guard>,
    /// The note as last written, and its revision.
    state: tokio::sync::Mutex<(u64, Note)>,
    /// The suspects as taken over (they do not change while this owner holds the partition).
    suspects: Note,
}

impl Attempts {
    /// Takes partition `partition`'s note over from its earlier owners (`earlier`: their
    /// consumers, read before they are deleted), writing the [`Note::taken_over`] note. Creates
    /// the bucket when missing.
    pub(crate) async fn take_over(
        js: async_nats::jetstream::Context,
        cfg: &OwnershipConfig,
        partition: u32,
        guard: Arc<dyn Guard>,
        earlier: &[Earlier],
    ) -> Result<Attempts, AttemptsError> {
        let bucket = Bucket::ensure_stream(
            js,
            stream_config(cfg),
            &cfg.attempts_bucket,
            "ownership.attempts_bucket (no max_age: notes never expire)",
            OP_TIMEOUT,
        )
        .await
        .map_err(|e| AttemptsError::Bucket(e.to_string()))?;
        let key = format!("p.{partition}");
        let (revision, note) = match bucket.last(&key).await.map_err(AttemptsError::Bucket)? {
            None => (0, Note::default()),
            Some(Entry {
                revision,
                value: None,
            }) => (revision, Note::default()),
            Some(Entry {
                revision,
                value: Some(bytes),
            }) => match serde_json::from_slice::<Note>(&bytes) {
                Ok(note) => (revision, note),
                Err(e) => {
                    // Nothing better to go on: stops counted so far are forgotten (the input
                    // may stop a few more owners before it is given up on).
                    tracing::error!(partition, error = %e, "unreadable poison note; starting a new one");
                    (revision, Note::default())
                }
            },
        };
        let note = note.taken_over(earlier);
        let attempts = Attempts {
            bucket,
            key,
            guard,
            state: tokio::sync::Mutex::new((revision, Note::default())),
            suspects: Note {
                suspects: note.suspects.clone(),
                ..Note::default()
            },
        };
        attempts.write(revision, note).await?;
        Ok(attempts)
    }

    /// Whether the input at stream sequence `seq` was delivered to an earlier owner and never
    /// acknowledged: it is applied alone, behind the note.
    pub fn is_suspect(&self, seq: u64) -> bool {
        self.suspects.is_suspect(seq)
    }

    /// Notes that the input at `seq` is about to be applied alone; returns how many times an
    /// owner stopped while applying it before.
    pub async fn begin(&self, seq: u64) -> Result<u32, AttemptsError> {
        let mut state = self.state.lock().await;
        let mut note = state.1.clone();
        note.open = Some(seq);
        let stops = note.stops.get(&seq).copied().unwrap_or(0);
        *state = (self.put(state.0, &note).await?, note);
        Ok(stops)
    }

    /// The attempt at `seq` ended (applied or dead-lettered, and durable): forgets the note
    /// and the input's stops.
    pub async fn end(&self, seq: u64) -> Result<(), AttemptsError> {
        let mut state = self.state.lock().await;
        let mut note = state.1.clone();
        note.open = None;
        note.stops.remove(&seq);
        *state = (self.put(state.0, &note).await?, note);
        Ok(())
    }

    /// This owner stopped cleanly: everything it applied through `consumers` is settled and
    /// what it only prefetched was returned, so its next owner takes none of their unacked
    /// deliveries for suspects.
    pub async fn stopped_cleanly(&self, consumers: Vec<String>) -> Result<(), AttemptsError> {
        let mut state = self.state.lock().await;
        let mut note = state.1.clone();
        note.open = None;
        note.returned = consumers;
        *state = (self.put(state.0, &note).await?, note);
        Ok(())
    }

    /// The note as last written (for tests and logs).
    pub(crate) async fn note(&self) -> Note {
        self.state.lock().await.1.clone()
    }

    async fn write(&self, expect: u64, note: Note) -> Result<(), AttemptsError> {
        let mut state = self.state.lock().await;
        *state = (self.put(expect, &note).await?, note);
        Ok(())
    }

    async fn put(&self, expect: u64, note: &Note) -> Result<u64, AttemptsError> {
        if !self.guard.is_valid() {
            return Err(AttemptsError::Deposed);
        }
        let value = serde_json::to_vec(note).map_err(|e| AttemptsError::Bucket(e.to_string()))?;
        match self
            .bucket
            .put_if(&self.key, Bytes::from(value), expect)
            .await
        {
            Ok(revision) => Ok(revision),
            Err(WriteError::Conflict) => Err(AttemptsError::Deposed),
            Err(WriteError::Other(e)) => Err(AttemptsError::Bucket(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn earlier(filter: &str, ack_floor: u64, delivered: u64) -> Earlier {
        Earlier {
            name: format!("c-{filter}"),
            filter: filter.into(),
            ack_floor,
            delivered,
        }
    }

    #[test]
    fn an_earlier_owners_unacknowledged_deliveries_become_the_next_owners_group() {
        let note =
            Note::default().taken_over(&[earlier("chunks", 10, 14), earlier("results", 7, 7)]);
        assert_eq!(note.group.len(), 1, "nothing unacknowledged on results");
        assert_eq!(note.group["chunks"], vec![[11, 14]]);
        assert!(note.suspects.is_empty(), "applied in batches first");
        assert!(!note.is_suspect(12));
    }

    #[test]
    fn a_group_whose_owner_stopped_before_acknowledging_it_is_isolated() {
        let note = Note::default().taken_over(&[earlier("chunks", 10, 14)]);
        // its owner acked 11 and 12, was delivered up to 30, and stopped
        let note = note.taken_over(&[earlier("chunks", 12, 30)]);
        assert_eq!(note.suspects["chunks"], vec![[13, 14]]);
        assert_eq!(
            note.group["chunks"],
            vec![[15, 30]],
            "the rest is the next group"
        );
        assert!(note.is_suspect(13) && note.is_suspect(14) && !note.is_suspect(15));
    }

    #[test]
    fn an_open_attempt_counts_one_stop_per_takeover_and_is_closed() {
        let mut note = Note::default()
            .taken_over(&[earlier("chunks", 10, 14)])
            .taken_over(&[earlier("chunks", 10, 14)]);
        assert_eq!(note.suspects["chunks"], vec![[11, 14]]);
        for expected in 1..=3 {
            note.open = Some(12);
            // the owner stopped mid-attempt and acked nothing
            note = note.taken_over(&[earlier("chunks", 10, 20)]);
            assert_eq!(note.open, None);
            assert_eq!(note.stops[&12], expected);
            assert!(note.is_suspect(12));
            // what it was delivered after 14 is a group first, isolated once an owner stopped
            // while applying it
            let isolated = if expected == 1 { [11, 14] } else { [11, 20] };
            assert_eq!(note.suspects["chunks"], vec![isolated]);
        }
    }

    #[test]
    fn ranges_acknowledged_past_by_a_later_owner_are_dropped_with_their_stops() {
        let mut note = Note::default()
            .taken_over(&[earlier("chunks", 10, 14)])
            .taken_over(&[earlier("chunks", 10, 14)]);
        note.open = Some(12);
        note = note.taken_over(&[earlier("chunks", 16, 30)]);
        assert!(note.suspects.is_empty(), "11..=14 acknowledged");
        assert!(note.stops.is_empty(), "the stop of 12 is no longer needed");
        let note = note.taken_over(&[earlier("chunks", 30, 30)]);
        assert!(note.suspects.is_empty() && note.group.is_empty());
    }

    #[test]
    fn a_cleanly_stopped_owners_group_is_not_isolated_and_its_returned_deliveries_not_grouped() {
        let mut note = Note::default().taken_over(&[earlier("chunks", 10, 14)]);
        note.returned = vec!["c-chunks".into()];
        let note = note.taken_over(&[earlier("chunks", 12, 40)]);
        assert!(note.suspects.is_empty());
        assert_eq!(
            note.group["chunks"],
            vec![[13, 14]],
            "still untried in full"
        );
        assert!(note.returned.is_empty(), "the mark is used once");
        let note = note.taken_over(&[earlier("chunks", 12, 40)]);
        assert_eq!(
            note.suspects["chunks"],
            vec![[13, 14]],
            "an owner that stopped"
        );
        assert_eq!(note.group["chunks"], vec![[15, 40]]);
    }

    #[test]
    fn a_group_nobody_read_stays_a_group() {
        let note = Note::default().taken_over(&[earlier("chunks", 10, 14)]);
        // the next owner stopped before its consumers existed: no earlier consumer
        let note = note.taken_over(&[]);
        assert!(note.suspects.is_empty());
        assert_eq!(note.group["chunks"], vec![[11, 14]]);
    }

    #[test]
    fn ranges_are_merged_cut_and_subtracted() {
        assert_eq!(
            merged(vec![[5, 9], [1, 3], [4, 4], [20, 21], [8, 12]]),
            vec![[1, 12], [20, 21]]
        );
        assert_eq!(cut(vec![[1, 5], [7, 9]], 7), vec![[8, 9]]);
        assert_eq!(
            without(vec![[1, 20], [30, 31]], &[[3, 4], [10, 25], [31, 40]]),
            vec![[1, 2], [5, 9], [30, 30]]
        );
        assert_eq!(without(vec![[5, 6]], &[[1, 9]]), Vec::<[u64; 2]>::new());
        assert_eq!(without(vec![[5, 6]], &[]), vec![[5, 6]]);
    }

    #[test]
    fn the_note_reads_back_what_it_wrote_and_old_fields_default() {
        let note = Note::default()
            .taken_over(&[earlier("toolstream.p.1.chunks.>", 2, 5)])
            .taken_over(&[earlier("toolstream.p.1.chunks.>", 2, 9)]);
        let json = serde_json::to_string(&note).unwrap();
        assert_eq!(serde_json::from_str::<Note>(&json).unwrap(), note);
        assert_eq!(serde_json::from_str::<Note>("{}").unwrap(), Note::default());
    }
}
