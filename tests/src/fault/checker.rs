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

use super::reference::{normalize_event, normalize_snapshot, Reference};
use async_nats::jetstream;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
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

/// The outcome of one or more checks. [`Report::ok`] is the verdict.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Messages of the workload(s).
    pub messages: usize,
    /// Events the reference says must be published.
    pub events_expected: usize,
    /// Events read from the events stream for the workload(s) and checked.
    pub events_checked: usize,
    /// Reference events never published.
    pub lost: usize,
    /// Extra copies of an `event_id`.
    pub duplicated: usize,
    /// Published events the reference does not have.
    pub ghosts: usize,
    /// Events with the reference's id but other content.
    pub mismatched: usize,
    /// Per-message order broken.
    pub order_violations: usize,
    /// Calls the reference completes that ended `abandoned`/`invalid` instead.
    pub should_have_completed: usize,
    /// `tool_call.abandoned` events published (expected or not).
    pub abandoned: usize,
    /// `tool_call.invalid` events published (expected or not).
    pub invalid: usize,
    /// Query answers that differ from the reference snapshot (or never came).
    pub snapshot_mismatches: usize,
    /// Dead letters published for the workload(s).
    pub dead_letters: usize,
    /// Dead letters the reference has.
    pub dead_letters_expected: usize,
    /// Events of an already checked workload that arrived after its check.
    pub late: usize,
    /// Events and query answers published in their small form with `payload_ref` (too large
    /// for the server's max_payload), compared after fetching the whole payload.
    pub by_reference: usize,
    /// Whether every wait found every expected event (false: timed out or gave up).
    pub complete: bool,
    /// The first problems, described.
    pub details: Vec<String>,
}

/// Most problem descriptions kept in a report.
const MAX_DETAILS: usize = 40;

impl Report {
    /// Whether every target was met.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.ghosts == 0
            && self.mismatched == 0
            && self.order_violations == 0
            && self.should_have_completed == 0
            && self.snapshot_mismatches == 0
            && self.dead_letters == self.dead_letters_expected
            && self.late == 0
            && self.events_checked > 0
    }

    fn note(&mut self, what: String) {
        if self.details.len() < MAX_DETAILS {
            self.details.push(what);
        }
    }

    /// Adds another report's counts (and details, up to the cap).
    pub fn add(&mut self, other: &Report) {
        self.messages += other.messages;
        self.events_expected += other.events_expected;
        self.events_checked += other.events_checked;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.ghosts += other.ghosts;
        self.mismatched += other.mismatched;
        self.order_violations += other.order_violations;
        self.should_have_completed += other.should_have_completed;
        self.abandoned += other.abandoned;
        self.invalid += other.invalid;
        self.snapshot_mismatches += other.snapshot_mismatches;
        self.dead_letters += other.dead_letters;
        self.dead_letters_expected += other.dead_letters_expected;
        self.late += other.late;
        self.by_reference += other.by_reference;
        self.complete = if self.messages == other.messages {
            other.complete
        } else {
            self.complete && other.complete
        };
        for d in &other.details {
            self.note(d.clone());
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: messages {}, events expected {}, events checked {}, lost {}, duplicated {}, \
             ghosts {}, mismatched {}, order violations {}, abandoned/invalid that should have \
             completed {}, abandoned {}, invalid {}, snapshot mismatches {}, dead letters {} \
             (expected {}), late {}, by reference {}{}",
            if self.ok() { "PASS" } else { "FAIL" },
            self.messages,
            self.events_expected,
            self.events_checked,
            self.lost,
            self.duplicated,
            self.ghosts,
            self.mismatched,
            self.order_violations,
            self.should_have_completed,
            self.abandoned,
            self.invalid,
            self.snapshot_mismatches,
            self.dead_letters,
            self.dead_letters_expected,
            self.late,
            self.by_reference,
            if self.complete {
                ""
            } else {
                " (gave up waiting for missing events)"
            }
        )?;
        for d in &self.details {
            writeln!(f, "  - {d}")?;
        }
        Ok(())
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
    prefix: String,
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
            prefix: prefix.to_string(),
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
        let dlq_prefix = format!("{}.dlq.", self.prefix);
        for (_, subject, _) in self.dlq.poll(&self.js).await {
            let conv = subject
                .strip_prefix(&dlq_prefix)
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
            let subject = format!("{}.query.message.{conv}.{msg}", self.prefix);
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

/// The source of the message an event belongs to.
fn message_source(reference: &Reference, event: &Value) -> String {
    let key = (
        event["conversation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        event["message_id"].as_str().unwrap_or_default().to_string(),
    );
    reference
        .messages
        .get(&key)
        .map(|m| m.source.clone())
        .unwrap_or_else(|| "not in the workload".to_string())
}

/// ` call #i <id>` for call events.
fn call_of(event: &Value) -> String {
    match event.get("tool_call") {
        Some(c) => format!(" call #{} {}", c["index"], c["id"]),
        None => match event.get("tool_result") {
            Some(r) => format!(" result for {}", r["tool_call_id"]),
            None => String::new(),
        },
    }
}

/// Whether `event` ends a call `abandoned`/`invalid` that the reference completes.
fn should_have_completed(reference: &Reference, event: &Value) -> bool {
    let ty = event["type"].as_str().unwrap_or_default();
    if ty != "tool_call.abandoned" && ty != "tool_call.invalid" {
        return false;
    }
    reference.events.values().any(|e| {
        e["type"] == "tool_call.completed"
            && e["conversation_id"] == event["conversation_id"]
            && e["message_id"] == event["message_id"]
            && e["tool_call"]["index"] == event["tool_call"]["index"]
    })
}

/// Equal after normalization; `message.completed`'s results must be among the message's
/// final results.
fn same_event(reference: &Reference, expected: &Value, actual: &Value) -> Result<(), String> {
    let (e, a) = (normalize_event(expected), normalize_event(actual));
    if e != a {
        return Err(first_difference(&e, &a));
    }
    if actual["type"] == "message.completed" {
        let key = (
            actual["conversation_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            actual["message_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let known: BTreeSet<String> = reference
            .messages
            .get(&key)
            .and_then(|m| m.snapshot.as_ref())
            .and_then(|s| s["tool_results"].as_array())
            .map(|l| l.iter().map(|r| r.to_string()).collect())
            .unwrap_or_default();
        for r in actual["tool_results"].as_array().into_iter().flatten() {
            if !known.contains(&r.to_string()) {
                return Err(format!(
                    "tool_results has {}, not a result of the message",
                    excerpt(&Some(r.clone()))
                ));
            }
        }
    }
    Ok(())
}

/// Where two JSON values first differ, briefly.
fn first_difference(want: &Value, got: &Value) -> String {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    None => return format!("field {k} missing"),
                    Some(gv) if gv != wv => {
                        return format!("{k}: {}", first_difference(wv, gv));
                    }
                    _ => {}
                }
            }
            for k in g.keys() {
                if !w.contains_key(k) {
                    return format!("unexpected field {k}");
                }
            }
            "equal".to_string()
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                if wv != gv {
                    return format!("[{i}]: {}", first_difference(wv, gv));
                }
            }
            "equal".to_string()
        }
        _ => format!(
            "want {}, got {}",
            excerpt(&Some(want.clone())),
            excerpt(&Some(got.clone()))
        ),
    }
}

fn excerpt(v: &Option<Value>) -> String {
    let text = match v {
        Some(v) => v.to_string(),
        None => "nothing (404)".to_string(),
    };
    if text.len() > 300 {
        let mut end = 300;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &text[..end], text.len())
    } else {
        text
    }
}

fn is_call_or_message_event(e: &Value) -> bool {
    e["type"]
        .as_str()
        .is_some_and(|t| t.starts_with("tool_call.") || t == "message.completed")
}

/// Per message: call and `message.completed` events in the reference's order, each call's
/// `started` before its terminal event, `message.completed` after every call event, results
/// after their call's `started`.
fn check_order(
    reference: &Reference,
    expected_ids: &[String],
    actual: &[&Seen],
) -> Result<(), String> {
    let present: BTreeSet<&str> = actual.iter().map(|s| s.id.as_str()).collect();
    let want: Vec<&str> = expected_ids
        .iter()
        .filter(|id| {
            reference
                .events
                .get(*id)
                .is_some_and(is_call_or_message_event)
                && present.contains(id.as_str())
        })
        .map(String::as_str)
        .collect();
    let mut firsts = BTreeSet::new();
    let got: Vec<&str> = actual
        .iter()
        .filter(|s| reference.events.contains_key(&s.id) && is_call_or_message_event(&s.event))
        .filter(|s| firsts.insert(s.id.as_str()))
        .map(|s| s.id.as_str())
        .collect();
    if want != got {
        let at = want
            .iter()
            .zip(&got)
            .position(|(w, g)| w != g)
            .unwrap_or(want.len().min(got.len()));
        return Err(format!(
            "call/message events out of order at position {at}: want {:?}, got {:?}",
            want.get(at),
            got.get(at)
        ));
    }
    // rules that hold for ghosts too
    let mut started: BTreeSet<String> = BTreeSet::new();
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let mut completed_msg = false;
    for s in actual {
        let ty = s.event["type"].as_str().unwrap_or_default();
        let index = s.event["tool_call"]["index"].to_string();
        let call_id = s.event["tool_call"]["id"].as_str().unwrap_or_default();
        match ty {
            "tool_call.started" => {
                if ended.contains(&index) {
                    return Err(format!("call #{index} started after its end"));
                }
                started.insert(call_id.to_string());
            }
            "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned" => {
                if completed_msg {
                    return Err(format!("{ty} of call #{index} after message.completed"));
                }
                ended.insert(index);
            }
            "message.completed" => completed_msg = true,
            "tool_result.completed" => {
                let id = s.event["tool_result"]["tool_call_id"]
                    .as_str()
                    .unwrap_or_default();
                let named_here = actual.iter().any(|o| {
                    o.event["type"] == "tool_call.started" && o.event["tool_call"]["id"] == id
                });
                if named_here && !started.contains(id) {
                    return Err(format!(
                        "tool_result.completed for {id} before its tool_call.started"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
