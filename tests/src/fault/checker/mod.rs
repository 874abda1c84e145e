//! The checker: what the worker published (`TOOLSTREAM_EVENTS`, `TOOLSTREAM_DLQ`) and what its
//! query service answers, against the crash-free [`Reference`].
//!
//! Per workload ([`Checker::check`]):
//! - every reference event exactly once by `event_id` (none **lost**, none **duplicated**), no
//!   event the reference does not have (**ghosts**; a ghost `tool_call.abandoned`/`invalid`
//!   for a call the reference completed is also counted as **should have completed**);
//! - each event equal to the reference's (**mismatched** otherwise); `message.completed`'s
//!   `tool_results` may be any subset of the message's final results (those matched by then);
//! - per message, the call and `message.completed` events in the reference's order, and
//!   every `tool_result.completed` after its call's `tool_call.started` (**order violations**);
//! - `<prefix>.query.message.<conv>.<msg>` equal to the reference snapshot (tool results
//!   compared as a set) for every message (**snapshot mismatches**);
//! - as many dead letters as the reference.
//!
//! The checker reads the streams by sequence (direct gets, no consumer), so it survives server
//! restarts; events of workloads already checked that show up later are counted as **late**
//! (a duplicate or a ghost after the fact).
//!
//! ## Layout
//! - `mod.rs` — [`Checker`]: reading the streams, waiting, checking, querying.
//! - `report.rs` — [`Report`], its verdict and its text.
//! - `compare.rs` — comparing one event with the reference's, and per-message order.

mod compare;
mod report;

pub use report::Report;

use super::reference::{normalize_snapshot, Reference};
use async_nats::jetstream;
use chunk_model::wire::Subjects;
use compare::{call_of, check_order, excerpt, message_source, same_event, should_have_completed};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long [`Checker::wait`] waits.
#[derive(Debug, Clone)]
pub struct WaitPlan {
    /// Give up after this long.
    pub limit: Duration,
    /// Stop waiting early when events are missing but nothing new arrived for this long and
    /// the consumers have nothing pending (set it above the worker's ack wait: input a killed
    /// worker held comes back only after it).
    pub quiet: Duration,
    /// Durable consumers of the input stream whose pending counts tell that all input was
    /// settled.
    pub consumers: Vec<String>,
    /// Input stream name.
    pub input_stream: String,
    /// Wait for the consumers to have nothing pending before declaring the wait over (set to
    /// false when more input keeps flowing, e.g. the next soak round).
    pub require_settled: bool,
}

impl Default for WaitPlan {
    fn default() -> WaitPlan {
        WaitPlan {
            limit: Duration::from_secs(180),
            quiet: Duration::from_secs(15),
            consumers: vec!["toolstream".to_string()],
            input_stream: "TOOLSTREAM_IN".to_string(),
            require_settled: true,
        }
    }
}

/// One event read from the stream.
#[derive(Debug, Clone)]
struct Seen {
    id: String,
    conv: String,
    msg: String,
    event: Value,
}

/// Reads a stream by sequence number.
#[derive(Debug, Clone)]
struct SeqReader {
    stream: String,
    next: u64,
}

impl SeqReader {
    /// New messages as (sequence, subject, payload); transient errors end the poll early.
    async fn poll(&mut self, js: &jetstream::Context) -> Vec<(u64, String, Vec<u8>)> {
        let mut out = Vec::new();
        let Ok(mut stream) = js.get_stream(&self.stream).await else {
            return out;
        };
        let Ok(info) = stream.info().await else {
            return out;
        };
        let last = info.state.last_sequence;
        while self.next <= last {
            match stream.get_raw_message(self.next).await {
                Ok(m) => out.push((m.sequence, m.subject.to_string(), m.payload.to_vec())),
                Err(e) => {
                    if !e.to_string().contains("not found") {
                        return out;
                    }
                }
            }
            self.next += 1;
        }
        out
    }
}

/// Reads the events and dead-letter streams and queries the worker; checks workloads against
/// their reference. One checker can check several workloads one after the other (soak rounds)
/// as long as their conversation ids differ.
pub struct Checker {
    client: async_nats::Client,
    js: jetstream::Context,
    subjects: Subjects,
    events: SeqReader,
    dlq: SeqReader,
    /// Events not checked yet.
    unchecked: Vec<Seen>,
    /// Dead letters not checked yet: (conversation, subject).
    dead: Vec<(String, String)>,
    /// Ids and conversations of workloads already checked.
    checked_ids: BTreeSet<String>,
    checked_convs: BTreeSet<String>,
    /// Late arrivals, described.
    late: Vec<String>,
    /// Payloads fetched through `payload_ref` since the last check.
    by_reference: usize,
    /// Time each query may take, retries included.
    pub query_limit: Duration,
}

impl Checker {
    /// A checker for the streams `TOOLSTREAM_EVENTS` and `TOOLSTREAM_DLQ` and the query
    /// service under `prefix` (default deployment: `toolstream`).
    pub fn new(client: async_nats::Client, prefix: &str) -> Checker {
        Checker::with_streams(client, prefix, "TOOLSTREAM_EVENTS", "TOOLSTREAM_DLQ")
    }

    /// [`Checker::new`] with other stream names.
    pub fn with_streams(
        client: async_nats::Client,
        prefix: &str,
        events: &str,
        dlq: &str,
    ) -> Checker {
        Checker {
            js: jetstream::new(client.clone()),
            client,
            subjects: Subjects::new(prefix),
            events: SeqReader {
                stream: events.to_string(),
                next: 1,
            },
            dlq: SeqReader {
                stream: dlq.to_string(),
                next: 1,
            },
            unchecked: Vec::new(),
            dead: Vec::new(),
            checked_ids: BTreeSet::new(),
            checked_convs: BTreeSet::new(),
            late: Vec::new(),
            by_reference: 0,
            query_limit: Duration::from_secs(60),
        }
    }

    /// Reads what is new in both streams.
    pub async fn poll(&mut self) -> usize {
        let mut new = 0;
        for (seq, subject, payload) in self.events.poll(&self.js).await {
            new += 1;
            let event: Value = match serde_json::from_slice(&payload) {
                Ok(v) => v,
                Err(e) => {
                    self.late.push(format!(
                        "event stream seq {seq} on {subject} is not JSON ({e})"
                    ));
                    continue;
                }
            };
            // an event too large for max_payload: its small form names the whole one; an
            // unreadable reference leaves the small form, which then differs from the reference
            let event = match self.resolve(&event).await {
                Some(whole) => whole,
                None => event,
            };
            let seen = Seen {
                id: event["event_id"].as_str().unwrap_or_default().to_string(),
                conv: event["conversation_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                msg: event["message_id"].as_str().unwrap_or_default().to_string(),
                event,
            };
            if self.checked_convs.contains(&seen.conv) {
                let what = if self.checked_ids.contains(&seen.id) {
                    "duplicate"
                } else {
                    "ghost"
                };
                self.late.push(format!(
                    "{what} {} {} of {}/{} (stream seq {seq}) arrived after its workload was checked",
                    seen.event["type"], seen.id, seen.conv, seen.msg
                ));
            } else {
                self.unchecked.push(seen);
            }
        }
        // a dead letter's subject is `<prefix>.dlq.<conv>.<msg>` (`Subjects::dlq`): its
        // conversation is the token after the dead-letter stream's filter `<prefix>.dlq.>`
        let filters = self.subjects.dlq_stream_subjects();
        let dlq_prefix = filters
            .first()
            .and_then(|f| f.strip_suffix('>'))
            .unwrap_or_default();
        for (_, subject, _) in self.dlq.poll(&self.js).await {
            let conv = subject
                .strip_prefix(dlq_prefix)
                .and_then(|rest| rest.split('.').next())
                .unwrap_or_default()
                .to_string();
            self.dead.push((conv, subject));
        }
        new
    }

    /// The whole payload a `payload_ref` names (fetched and checked), when `value` has one.
    async fn resolve(&mut self, value: &Value) -> Option<Value> {
        let reference: chunk_model::PayloadRef =
            serde_json::from_value(value.get("payload_ref")?.clone()).ok()?;
        let bytes = sink::payloads::fetch(&self.js, &reference).await.ok()?;
        self.by_reference += 1;
        serde_json::from_slice(&bytes).ok()
    }

    /// Events read so far for `reference`'s conversations that it expects, and the number of
    /// its messages with a `message.completed`.
    fn progress(&self, reference: &Reference) -> (usize, usize) {
        let mut ids = BTreeSet::new();
        let mut done = BTreeSet::new();
        for s in &self.unchecked {
            if reference.owns(&s.conv) {
                if reference.events.contains_key(&s.id) {
                    ids.insert(s.id.as_str());
                }
                if s.event["type"] == "message.completed" {
                    done.insert((s.conv.as_str(), s.msg.as_str()));
                }
            }
        }
        (ids.len(), done.len())
    }

    /// Whether every consumer in `plan` has nothing pending or unacknowledged.
    async fn input_settled(&self, plan: &WaitPlan) -> bool {
        let Ok(stream) = self.js.get_stream(&plan.input_stream).await else {
            return false;
        };
        for name in &plan.consumers {
            match stream.consumer_info(name).await {
                Ok(info) if info.num_pending == 0 && info.num_ack_pending == 0 => {}
                _ => return false,
            }
        }
        true
    }

    /// Polls until every event of `reference` was published (and, with
    /// `plan.require_settled`, the input is settled), or until `plan.quiet` passed without a
    /// new event of the workload while some are still missing (and the input is settled), or
    /// `plan.limit`. Returns whether every expected event arrived.
    pub async fn wait(&mut self, reference: &Reference, plan: &WaitPlan) -> bool {
        let start = Instant::now();
        let mut last_progress = Instant::now();
        let mut last_seen = (0, 0);
        let want = reference.events.len();
        loop {
            self.poll().await;
            let progress = self.progress(reference);
            if progress != last_seen {
                last_seen = progress;
                last_progress = Instant::now();
            }
            let have = progress.0;
            let settled = !plan.require_settled || self.input_settled(plan).await;
            if have >= want && settled {
                // anything the relay still holds (a ghost, a copy) gets one more moment
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                self.poll().await;
                return true;
            }
            if have < want && settled && last_progress.elapsed() > plan.quiet {
                return false;
            }
            if start.elapsed() > plan.limit {
                return have >= want;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Checks everything read so far for `reference`'s conversations (call [`Checker::wait`]
    /// first), queries every message, and forgets those events (later ones count as late).
    pub async fn check(&mut self, reference: &Reference) -> Report {
        self.poll().await;
        let mut report = Report {
            messages: reference.messages.len(),
            events_expected: reference.events.len(),
            dead_letters_expected: reference.dead_letters,
            complete: true,
            ..Report::default()
        };
        let (mine, rest): (Vec<Seen>, Vec<Seen>) = std::mem::take(&mut self.unchecked)
            .into_iter()
            .partition(|s| reference.owns(&s.conv));
        self.unchecked = rest;
        report.events_checked = mine.len();

        // exactly once, nothing extra, same content
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &mine {
            *count.entry(s.id.as_str()).or_default() += 1;
            match s.event["type"].as_str() {
                Some("tool_call.abandoned") => report.abandoned += 1,
                Some("tool_call.invalid") => report.invalid += 1,
                _ => {}
            }
        }
        for (id, n) in &count {
            if *n > 1 {
                report.duplicated += n - 1;
                report.note(format!("{id} published {n} times"));
            }
        }
        for (id, expected) in &reference.events {
            if !count.contains_key(id.as_str()) {
                report.lost += 1;
                let source = message_source(reference, expected);
                report.note(format!(
                    "lost {} {id} of {}/{} ({source}){}",
                    expected["type"],
                    expected["conversation_id"],
                    expected["message_id"],
                    call_of(expected)
                ));
            }
        }
        let mut compared = BTreeSet::new();
        for s in &mine {
            let Some(expected) = reference.events.get(&s.id) else {
                report.ghosts += 1;
                let source = message_source(reference, &s.event);
                let mut what = format!(
                    "ghost {} {} of {}/{} ({source}){}{}",
                    s.event["type"],
                    s.id,
                    s.conv,
                    s.msg,
                    call_of(&s.event),
                    s.event
                        .get("reason")
                        .map(|r| format!(" reason {r}"))
                        .unwrap_or_default()
                );
                if should_have_completed(reference, &s.event) {
                    report.should_have_completed += 1;
                    what.push_str(" — the reference completes this call");
                }
                report.note(what);
                continue;
            };
            if !compared.insert(s.id.as_str()) {
                continue;
            }
            if let Err(why) = same_event(reference, expected, &s.event) {
                report.mismatched += 1;
                report.note(format!(
                    "{} {} of {}/{} differs: {why}",
                    s.event["type"], s.id, s.conv, s.msg
                ));
            }
        }

        // order per message
        let mut by_message: BTreeMap<(&str, &str), Vec<&Seen>> = BTreeMap::new();
        for s in &mine {
            by_message
                .entry((s.conv.as_str(), s.msg.as_str()))
                .or_default()
                .push(s);
        }
        for ((conv, msg), expected) in &reference.messages {
            let actual = by_message
                .get(&(conv.as_str(), msg.as_str()))
                .cloned()
                .unwrap_or_default();
            if let Err(why) = check_order(reference, &expected.event_ids, &actual) {
                report.order_violations += 1;
                report.note(format!(
                    "order of {conv}/{msg} ({}): {why}",
                    expected.source
                ));
            }
        }

        // the query service: what a UI sees after a refresh
        for ((conv, msg), expected) in &reference.messages {
            let subject = self.subjects.query_message(conv, msg);
            match self.query(&subject).await {
                Ok(actual) => {
                    let actual = actual.map(|v| normalize_snapshot(&v));
                    if actual != expected.snapshot {
                        report.snapshot_mismatches += 1;
                        report.note(format!(
                            "snapshot of {conv}/{msg} ({}) differs: got {}, want {}",
                            expected.source,
                            excerpt(&actual),
                            excerpt(&expected.snapshot)
                        ));
                    }
                }
                Err(e) => {
                    report.snapshot_mismatches += 1;
                    report.note(format!("query {subject}: {e}"));
                }
            }
        }

        let dead: Vec<&(String, String)> = self
            .dead
            .iter()
            .filter(|(c, _)| reference.owns(c))
            .collect();
        report.dead_letters = dead.len();
        if dead.len() != reference.dead_letters {
            report.note(format!(
                "{} dead letter(s), the reference has {}: {:?}",
                dead.len(),
                reference.dead_letters,
                dead.iter().take(5).map(|(_, s)| s).collect::<Vec<_>>()
            ));
        }

        report.late = self.late.len();
        for l in std::mem::take(&mut self.late) {
            report.note(l);
        }
        report.by_reference = std::mem::take(&mut self.by_reference);
        self.checked_convs
            .extend(reference.conversations.iter().cloned());
        self.checked_ids.extend(mine.into_iter().map(|s| s.id));
        report
    }

    /// Late arrivals for workloads already checked (call after the last check, e.g. after a
    /// final poll, to catch an event published after the fact).
    pub async fn late_report(&mut self) -> Report {
        self.poll().await;
        let mut report = Report {
            complete: true,
            ..Report::default()
        };
        report.late = self.late.len();
        for l in std::mem::take(&mut self.late) {
            report.note(l);
        }
        report
    }

    /// A message query: `Ok(Some(snapshot))`, `Ok(None)` for 404, retried while the worker is
    /// away (no responders, timeouts, 5xx) up to [`Checker::query_limit`].
    async fn query(&mut self, subject: &str) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + self.query_limit;
        let mut last = String::new();
        while Instant::now() < deadline {
            let request = self.client.request(subject.to_string(), "".into());
            match tokio::time::timeout(Duration::from_secs(5), request).await {
                Ok(Ok(reply)) => {
                    let code = reply
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Service-Error-Code"))
                        .map(|v| v.as_str().to_string());
                    match code.as_deref() {
                        None => {
                            let answer: Value = serde_json::from_slice(&reply.payload)
                                .map_err(|e| format!("answer is not JSON: {e}"))?;
                            if answer.get("payload_ref").is_some() {
                                return match self.resolve(&answer).await {
                                    Some(whole) => Ok(Some(whole)),
                                    None => Err(format!(
                                        "answer by reference could not be fetched: {answer}"
                                    )),
                                };
                            }
                            return Ok(Some(answer));
                        }
                        Some("404") => return Ok(None),
                        Some(other) => last = format!("service error {other}"),
                    }
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timed out".to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("no answer in {:?}: {last}", self.query_limit))
    }
}
