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
//! in it is an inclusive range of input stream sequences, per consumer filter (an input is a
//! suspect only on a subject its filter matches), and is cut where the consumer that read it
//! had everything acknowledged: its ack floor, or its last delivery when nothing was pending
//! (the server moves a filtered consumer's last delivery past the messages it does not match).
//!
//! The input that stopped an owner is among what its consumer delivered and never acknowledged.
//! Isolating all of those at once would make every takeover apply hundreds of inputs alone, each
//! behind a note, so it goes in two steps, and an input that keeps stopping owners is given up
//! on after as many stops as on a static worker (`max_deliver`):
//!
//! 1. `group`: a new owner records what the earlier owner's consumer delivered and never
//!    acknowledged *before* it deletes the earlier consumers ([`Attempts::take_over`]), and
//!    applies those inputs in ordinary batches. If it stops before acknowledging them, the
//!    input that stopped it is probably among what it was delivered of them, and the next
//!    owner isolates that part.
//! 2. `suspects`: the ranges isolated so: each input in them is applied alone behind `open`
//!    (the input being applied alone right now). An owner that finds `open` set when it takes
//!    the partition over counts one more stop for that input in `stops`; an input with
//!    `max_deliver - 2` stops (at least 1) is dead-lettered as `poison` instead of applied
//!    again: one stop in its first batch, one in its group, the rest alone.
//!
//! `returned` names the consumers of an owner that stopped cleanly (a hand-off, a shutdown)
//! after settling everything it applied and returning what it had only prefetched: its group
//! is not isolated. An input with a stop recorded (it stopped an owner while alone, also as an
//! ordinary redelivery) is isolated wherever it is. `owner` signs each write (`<worker>/<epoch>`)
//! so that an owner's own write that timed out but was stored after all is written over, not
//! taken for a successor's; `stream` names the input stream (its creation time), so a note
//! outlives no deleted and recreated stream.
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
    /// The last stream sequence it delivered. (On a filtered consumer the server moves this
    /// past the stream's messages its filter does not match, while the ack floor moves only
    /// with acks: what lies between is not all unacknowledged deliveries.)
    pub delivered: u64,
    /// How many of its deliveries were unacknowledged.
    pub ack_pending: u64,
}

impl Earlier {
    /// Everything it delivered up to here was acknowledged.
    fn done_through(&self) -> u64 {
        if self.ack_pending == 0 {
            self.delivered.max(self.ack_floor)
        } else {
            self.ack_floor
        }
    }
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
    /// Who wrote the note (`<worker>/<epoch>`, the lease's `Toolstream-Owner`): a write of
    /// its own that timed out but was stored after all is recognized by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The input stream the sequences are of (its creation time): a note of a stream since
    /// deleted and created again is dropped, its numbers being another stream's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
}

impl Note {
    /// The note a new owner keeps (see the module docs): a stop for the input left open; of
    /// the earlier owner's group, what it was delivered isolated unless it stopped cleanly;
    /// the earlier consumers' unacknowledged deliveries the new group; an input that already
    /// stopped an owner while applied alone isolated wherever it is; every range cut where the
    /// consumer that read it acknowledged everything; stops kept only for suspects.
    pub(crate) fn taken_over(mut self, earlier: &[Earlier]) -> Note {
        if let Some(seq) = self.open.take() {
            let stops = self.stops.entry(seq).or_insert(0);
            *stops = stops.saturating_add(1);
        }
        let returned = std::mem::take(&mut self.returned);
        let mut group = std::mem::take(&mut self.group);
        for e in earlier {
            let floor = e.done_through();
            let suspects = self.suspects.entry(e.filter.clone()).or_default();
            *suspects = cut(std::mem::take(suspects), floor);
            let tried = cut(group.remove(&e.filter).unwrap_or_default(), floor);
            let clean = returned.contains(&e.name);
            let mut next = Vec::new();
            for [lo, hi] in tried {
                if clean || lo > e.delivered {
                    next.push([lo, hi]);
                } else {
                    // its owner stopped while it applied what it was delivered of this group
                    suspects.push([lo, hi.min(e.delivered)]);
                    if hi > e.delivered {
                        next.push([e.delivered + 1, hi]);
                    }
                }
            }
            *suspects = merged(std::mem::take(suspects));
            if e.delivered > floor && !clean {
                next.push([floor.saturating_add(1), e.delivered]);
            }
            let next = without(merged(next), suspects);
            add(&mut self.group, &e.filter, next);
        }
        // a group whose filter has no earlier consumer was never applied by anyone
        for (filter, ranges) in group {
            add(&mut self.group, &filter, ranges);
        }
        // an input that stopped an owner alone is isolated, also where it is in a group now
        for &seq in self.stops.keys() {
            let Some(filter) = self
                .group
                .iter()
                .find(|(_, r)| contains(r, seq))
                .map(|(f, _)| f.clone())
            else {
                continue;
            };
            add(&mut self.suspects, &filter, vec![[seq, seq]]);
            if let Some(g) = self.group.get_mut(&filter) {
                *g = without(std::mem::take(g), &[[seq, seq]]);
            }
        }
        self.group.retain(|_, ranges| !ranges.is_empty());
        self.suspects.retain(|_, ranges| !ranges.is_empty());
        let suspects = &self.suspects;
        self.stops
            .retain(|seq, _| suspects.values().any(|r| contains(r, *seq)));
        self
    }

    /// Whether the input at `seq`, on `subject`, is a suspect: in a range of the filter that
    /// subject matches.
    pub(crate) fn is_suspect(&self, subject: &str, seq: u64) -> bool {
        self.suspects
            .iter()
            .any(|(filter, r)| matches_filter(filter, subject) && contains(r, seq))
    }
}

/// Adds `ranges` to `filter`'s in `map`, merged.
fn add(map: &mut BTreeMap<String, Vec<[u64; 2]>>, filter: &str, ranges: Vec<[u64; 2]>) {
    if ranges.is_empty() {
        return;
    }
    let mine = map.entry(filter.to_string()).or_default();
    mine.extend(ranges);
    *mine = merged(std::mem::take(mine));
}

/// Whether NATS subject `subject` matches `filter` (`*` one token, `>` the rest).
fn matches_filter(filter: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in filter.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (t, Some(s)) if t == s => {}
            _ => return false,
        }
    }
    subject.next().is_none()
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
    /// the bucket when missing. `stream` names the input stream (its creation time): a note of
    /// another stream is dropped.
    pub(crate) async fn take_over(
        js: async_nats::jetstream::Context,
        cfg: &OwnershipConfig,
        partition: u32,
        stream: &str,
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
        let note = if note.stream.as_deref().is_some_and(|s| s != stream) {
            tracing::warn!(partition, was = ?note.stream, now = stream,
                "the input stream was created again since the poison note was written; starting a new one");
            Note::default()
        } else {
            note
        };
        let mut note = note.taken_over(earlier);
        note.stream = Some(stream.to_string());
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

    /// Whether the input at stream sequence `seq`, on `subject`, stopped an owner, or was
    /// delivered to an owner that stopped while applying it in its group: it is applied
    /// alone, behind the note.
    pub fn is_suspect(&self, subject: &str, seq: u64) -> bool {
        self.suspects.is_suspect(subject, seq)
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

    /// Writes `note` over revision `expect`, signed with this owner. A conflict is another
    /// owner's write (deposed), or a write of this owner's own that timed out but was stored
    /// after all: then the note is written again over that one.
    async fn put(&self, mut expect: u64, note: &Note) -> Result<u64, AttemptsError> {
        let owner = self.guard.owner();
        let signed = Note {
            owner: Some(owner.clone()),
            ..note.clone()
        };
        let value =
            serde_json::to_vec(&signed).map_err(|e| AttemptsError::Bucket(e.to_string()))?;
        let value = Bytes::from(value);
        for _ in 0..3 {
            if !self.guard.is_valid() {
                return Err(AttemptsError::Deposed);
            }
            match self.bucket.put_if(&self.key, value.clone(), expect).await {
                Ok(revision) => return Ok(revision),
                Err(WriteError::Other(e)) => return Err(AttemptsError::Bucket(e)),
                Err(WriteError::Conflict) => {}
            }
            let last = self
                .bucket
                .last(&self.key)
                .await
                .map_err(AttemptsError::Bucket)?;
            let ours = last
                .as_ref()
                .and_then(|e| e.value.as_ref())
                .is_some_and(|v| {
                    serde_json::from_slice::<Note>(v)
                        .is_ok_and(|n| n.owner.as_deref() == Some(&owner))
                });
            match last {
                Some(entry) if ours => {
                    tracing::info!(key = %self.key, "a note write given up on was stored after all; writing over it");
                    expect = entry.revision;
                }
                _ => return Err(AttemptsError::Deposed),
            }
        }
        Err(AttemptsError::Deposed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNKS: &str = "t.p.0.chunks.>";
    const RESULTS: &str = "t.p.0.results.>";
    const CHUNK: &str = "t.p.0.chunks.c.m";

    /// Consumer `c-<filter>` acked through `ack_floor`, delivered through `delivered`, with
    /// what lies between unacknowledged.
    fn earlier(filter: &str, ack_floor: u64, delivered: u64) -> Earlier {
        Earlier {
            name: format!("c-{filter}"),
            filter: filter.into(),
            ack_floor,
            delivered,
            ack_pending: delivered.saturating_sub(ack_floor),
        }
    }

    #[test]
    fn an_earlier_owners_unacknowledged_deliveries_become_the_next_owners_group() {
        let note = Note::default().taken_over(&[earlier(CHUNKS, 10, 14), earlier(RESULTS, 7, 7)]);
        assert_eq!(note.group.len(), 1, "nothing unacknowledged on results");
        assert_eq!(note.group[CHUNKS], vec![[11, 14]]);
        assert!(note.suspects.is_empty(), "applied in batches first");
        assert!(!note.is_suspect(CHUNK, 12));
    }

    #[test]
    fn a_filtered_consumer_with_nothing_unacknowledged_leaves_no_group_whatever_it_skipped() {
        // a results consumer the server moved past 265 chunks it does not match
        let idle = Earlier {
            ack_pending: 0,
            ..earlier(RESULTS, 0, 265)
        };
        let note = Note::default().taken_over(&[idle.clone(), earlier(CHUNKS, 265, 265)]);
        assert!(
            note.group.is_empty() && note.suspects.is_empty(),
            "{note:?}"
        );
        let note = note.taken_over(&[idle]);
        assert!(
            note.group.is_empty() && note.suspects.is_empty(),
            "{note:?}"
        );
    }

    #[test]
    fn a_suspect_is_one_only_on_the_subjects_of_its_filter() {
        let note = Note::default()
            .taken_over(&[earlier(RESULTS, 0, 20)])
            .taken_over(&[earlier(RESULTS, 0, 20)]);
        assert!(note.is_suspect("t.p.0.results.c.m", 12));
        assert!(
            !note.is_suspect(CHUNK, 12),
            "a chunk is not under the results filter"
        );
        assert!(matches_filter("a.*.c", "a.b.c") && !matches_filter("a.*.c", "a.b.c.d"));
        assert!(matches_filter("a.>", "a.b.c") && !matches_filter("a.>", "a"));
        assert!(!matches_filter("a.b", "a.b.c") && !matches_filter("a.b.c", "a.b"));
    }

    #[test]
    fn what_an_owner_was_delivered_of_its_group_is_isolated_when_it_stopped() {
        let note = Note::default().taken_over(&[earlier(CHUNKS, 10, 14)]);
        // its owner acked 11 and 12, was delivered only up to 13 of its group, and stopped
        let note = note.taken_over(&[earlier(CHUNKS, 12, 13)]);
        assert_eq!(note.suspects[CHUNKS], vec![[13, 13]]);
        assert_eq!(
            note.group[CHUNKS],
            vec![[14, 14]],
            "never delivered: still untried"
        );
        assert!(note.is_suspect(CHUNK, 13) && !note.is_suspect(CHUNK, 14));
    }

    #[test]
    fn an_open_attempt_counts_one_stop_per_takeover_and_is_closed() {
        let mut note = Note::default()
            .taken_over(&[earlier(CHUNKS, 10, 14)])
            .taken_over(&[earlier(CHUNKS, 10, 14)]);
        assert_eq!(note.suspects[CHUNKS], vec![[11, 14]]);
        for expected in 1..=3 {
            note.open = Some(12);
            // the owner stopped mid-attempt and acked nothing
            note = note.taken_over(&[earlier(CHUNKS, 10, 14)]);
            assert_eq!(note.open, None);
            assert_eq!(note.stops[&12], expected);
            assert!(note.is_suspect(CHUNK, 12));
        }
    }

    #[test]
    fn a_redelivered_input_that_stopped_an_owner_alone_keeps_its_stops_and_is_isolated() {
        // no suspects: an ordinary redelivery (a nak) applied alone, and the owner stopped
        let note = Note {
            open: Some(30),
            ..Note::default()
        }
        .taken_over(&[earlier(CHUNKS, 29, 35)]);
        assert_eq!(note.stops[&30], 1, "its stop is kept");
        assert_eq!(note.suspects[CHUNKS], vec![[30, 30]]);
        assert_eq!(note.group[CHUNKS], vec![[31, 35]]);
    }

    #[test]
    fn ranges_acknowledged_past_by_a_later_owner_are_dropped_with_their_stops() {
        let mut note = Note::default()
            .taken_over(&[earlier(CHUNKS, 10, 14)])
            .taken_over(&[earlier(CHUNKS, 10, 14)]);
        note.open = Some(12);
        note = note.taken_over(&[earlier(CHUNKS, 16, 30)]);
        assert!(note.suspects.is_empty(), "11..=14 acknowledged");
        assert!(note.stops.is_empty(), "the stop of 12 is no longer needed");
        let note = note.taken_over(&[earlier(CHUNKS, 30, 30)]);
        assert!(note.suspects.is_empty() && note.group.is_empty());
    }

    #[test]
    fn a_cleanly_stopped_owners_group_is_not_isolated_and_its_returned_deliveries_not_grouped() {
        let mut note = Note::default().taken_over(&[earlier(CHUNKS, 10, 14)]);
        note.returned = vec![format!("c-{CHUNKS}")];
        let note = note.taken_over(&[earlier(CHUNKS, 12, 40)]);
        assert!(note.suspects.is_empty());
        assert_eq!(note.group[CHUNKS], vec![[13, 14]], "still untried in full");
        assert!(note.returned.is_empty(), "the mark is used once");
        let note = note.taken_over(&[earlier(CHUNKS, 12, 40)]);
        assert_eq!(
            note.suspects[CHUNKS],
            vec![[13, 14]],
            "an owner that stopped"
        );
        assert_eq!(note.group[CHUNKS], vec![[15, 40]]);
    }

    #[test]
    fn a_group_nobody_read_stays_a_group_and_two_consumers_of_one_filter_merge() {
        let note = Note::default().taken_over(&[earlier(CHUNKS, 10, 14)]);
        // the next owner stopped before its consumers existed: no earlier consumer
        let note = note.taken_over(&[]);
        assert!(note.suspects.is_empty());
        assert_eq!(note.group[CHUNKS], vec![[11, 14]]);
        let mut other = earlier(CHUNKS, 20, 25);
        other.name = "c-other".into();
        let note = Note::default().taken_over(&[earlier(CHUNKS, 10, 14), other]);
        assert_eq!(note.group[CHUNKS], vec![[11, 14], [21, 25]]);
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
        assert_eq!(merged(vec![[u64::MAX, u64::MAX], [1, 2]]).len(), 2);
    }

    #[test]
    fn the_note_reads_back_what_it_wrote_and_old_fields_default() {
        let note = Note::default()
            .taken_over(&[earlier(CHUNKS, 2, 5)])
            .taken_over(&[earlier(CHUNKS, 2, 9)]);
        let json = serde_json::to_string(&note).unwrap();
        assert_eq!(serde_json::from_str::<Note>(&json).unwrap(), note);
        assert_eq!(serde_json::from_str::<Note>("{}").unwrap(), Note::default());
    }
}

/// The note against a real nats-server.
#[cfg(test)]
mod nats_tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use toolstream_testkit::NatsServer;

    struct Lease(AtomicBool, &'static str);

    impl Guard for Lease {
        fn is_valid(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn owner(&self) -> String {
            self.1.into()
        }
    }

    async fn take_over(
        js: &async_nats::jetstream::Context,
        owner: &'static str,
    ) -> (Attempts, Arc<Lease>) {
        let lease = Arc::new(Lease(AtomicBool::new(true), owner));
        let attempts = Attempts::take_over(
            js.clone(),
            &OwnershipConfig::default(),
            0,
            "stream-1",
            lease.clone(),
            &[],
        )
        .await
        .expect("take over");
        (attempts, lease)
    }

    #[tokio::test]
    async fn a_note_write_of_its_own_stored_after_a_timeout_is_written_over_not_taken_for_another_owner(
    ) {
        let server = NatsServer::start().expect("nats-server");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let (attempts, _lease) = take_over(&js, "a/5").await;
        assert_eq!(attempts.begin(7).await.expect("begin"), 0);
        // a write of this owner's that it gave up on, stored after all: the key moved on
        let stale = attempts.state.lock().await.0;
        let mut landed = attempts.note().await;
        landed.open = Some(8);
        landed.owner = Some("a/5".into());
        attempts
            .bucket
            .put_if(
                &attempts.key,
                Bytes::from(serde_json::to_vec(&landed).unwrap()),
                stale,
            )
            .await
            .expect("the late write lands");
        attempts
            .end(7)
            .await
            .expect("its own late write is no conflict");
        assert_eq!(attempts.begin(9).await.expect("and it goes on"), 0);

        // another owner's write is one
        let (other, _) = take_over(&js, "b/6").await;
        assert_eq!(other.note().await.stops.get(&9), None);
        assert!(matches!(
            attempts.begin(10).await,
            Err(AttemptsError::Deposed)
        ));
        // and a lapsed lease writes nothing
        let (next, lease) = take_over(&js, "c/7").await;
        lease.0.store(false, Ordering::SeqCst);
        assert!(matches!(next.begin(11).await, Err(AttemptsError::Deposed)));
    }

    #[tokio::test]
    async fn a_note_of_an_input_stream_since_created_again_is_dropped() {
        let server = NatsServer::start().expect("nats-server");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let lease: Arc<dyn Guard> = Arc::new(Lease(AtomicBool::new(true), "a/1"));
        let cfg = OwnershipConfig::default();
        let unacked = [Earlier {
            name: "c".into(),
            filter: "t.>".into(),
            ack_floor: 40,
            delivered: 45,
            ack_pending: 5,
        }];
        let first = Attempts::take_over(js.clone(), &cfg, 3, "s1", lease.clone(), &[])
            .await
            .unwrap();
        first.begin(41).await.unwrap();
        // the owner stops mid-attempt; on the same stream its next owner counts the stop
        let again = Attempts::take_over(js.clone(), &cfg, 3, "s1", lease.clone(), &unacked)
            .await
            .unwrap();
        let note = again.note().await;
        assert_eq!(note.stops.get(&41), Some(&1));
        assert!(note.is_suspect("t.x", 41));
        // the stream was deleted and created again: its sequence 41 is another input
        let renewed = Attempts::take_over(js.clone(), &cfg, 3, "s2", lease, &[])
            .await
            .unwrap();
        assert_eq!(
            renewed.note().await,
            Note {
                stream: Some("s2".into()),
                ..Note::default()
            }
        );
    }
}
