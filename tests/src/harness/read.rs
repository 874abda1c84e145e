//! Reading what the worker published: [`StreamLog`] polls a stream by sequence, and checks
//! over the events read ([`by_message`], [`assert_each_event_once`], [`check_message`]).

use super::streams::Call;
use super::tail;
use async_nats::jetstream;
use async_nats::HeaderMap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One message read from a stream.
#[derive(Debug, Clone)]
pub struct Read {
    /// Its subject.
    pub subject: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its stream sequence.
    pub seq: u64,
}

impl Read {
    /// The payload as JSON (panics if it is not: events are JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.payload))
        })
    }

    /// A header value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.as_str().to_string())
    }
}

/// Reads a stream message by message, by sequence (no consumer: survives server restarts).
pub struct StreamLog {
    js: jetstream::Context,
    stream: String,
    next: u64,
    /// Everything read so far, in stream order.
    pub all: Vec<Read>,
}

impl StreamLog {
    /// A reader of `stream` from its first message.
    pub fn new(js: &jetstream::Context, stream: &str) -> StreamLog {
        StreamLog {
            js: js.clone(),
            stream: stream.to_string(),
            next: 1,
            all: Vec::new(),
        }
    }

    /// Reads whatever is new; transient errors are ignored (the next poll retries).
    pub async fn poll(&mut self) {
        let Ok(mut stream) = self.js.get_stream(&self.stream).await else {
            return;
        };
        let Ok(info) = stream.info().await else {
            return;
        };
        let last = info.state.last_sequence;
        while self.next <= last {
            match stream.get_raw_message(self.next).await {
                Ok(m) => self.all.push(Read {
                    subject: m.subject.to_string(),
                    headers: m.headers,
                    payload: m.payload.to_vec(),
                    seq: m.sequence,
                }),
                Err(e) => {
                    // deleted/absent sequences are skipped; anything else retried next poll
                    if !e.to_string().contains("not found") {
                        return;
                    }
                }
            }
            self.next += 1;
        }
    }

    /// Polls until `done(all)` holds; panics with `what` and the log after `limit`.
    pub async fn until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&[Read]) -> bool,
        log: impl Fn() -> String,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            self.poll().await;
            if done(&self.all) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; have {} message(s) in {}: {:#?}\n--- worker log (tail) ---\n{}",
                    self.all.len(),
                    self.stream,
                    self.all.iter().rev().take(5).map(|r| (&r.subject, String::from_utf8_lossy(&r.payload))).collect::<Vec<_>>(),
                    tail(&log(), 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Events grouped by message id, in stream order.
pub fn by_message(events: &[Read]) -> BTreeMap<(String, String), Vec<Value>> {
    let mut out: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for e in events {
        let v = e.json();
        out.entry(message_key(&v)).or_default().push(v);
    }
    out
}

/// The (conversation, message) an event belongs to; empty strings where a field is absent.
pub fn message_key(event: &Value) -> (String, String) {
    let field = |name: &str| event[name].as_str().unwrap_or_default().to_string();
    (field("conversation_id"), field("message_id"))
}

/// Asserts that no `event_id` occurs twice among `events` (JetStream's dedupe held).
pub fn assert_each_event_once(events: &[Read]) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let id = e.json()["event_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *counts.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events published twice: {twice:?}");
}

/// Number of `message.completed` events read so far.
pub fn completed_messages(events: &[Read]) -> usize {
    events
        .iter()
        .filter(|e| {
            serde_json::from_slice::<Value>(&e.payload)
                .map(|v| v["type"] == "message.completed")
                .unwrap_or(false)
        })
        .count()
}

/// Checks the events of one message against its calls: each call `started` then
/// `completed` once with exactly its arguments, `message.completed` last listing every call
/// as completed; event ids unique. Returns a description of the first violation.
pub fn check_message(events: &[Value], calls: &[Call]) -> Result<(), String> {
    let mut seen_ids = std::collections::BTreeSet::new();
    for e in events {
        let id = e["event_id"].as_str().unwrap_or_default().to_string();
        if !seen_ids.insert(id.clone()) {
            return Err(format!("event {id} appears twice"));
        }
    }
    let calls_events: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("tool_call."))
        })
        .collect();
    for c in calls {
        let of_call: Vec<&str> = calls_events
            .iter()
            .filter(|e| e["tool_call"]["id"] == c.id.as_str())
            .map(|e| e["type"].as_str().unwrap_or_default())
            .collect();
        if of_call != ["tool_call.started", "tool_call.completed"] {
            return Err(format!("call {}: events {of_call:?}", c.id));
        }
        let completed = calls_events
            .iter()
            .find(|e| e["tool_call"]["id"] == c.id.as_str() && e["type"] == "tool_call.completed")
            .ok_or("no completed")?;
        if completed["tool_call"]["arguments"] != c.args {
            return Err(format!(
                "call {}: arguments {} != {}",
                c.id, completed["tool_call"]["arguments"], c.args
            ));
        }
        if completed["tool_call"]["name"] != c.name.as_str() {
            return Err(format!(
                "call {}: name {}",
                c.id, completed["tool_call"]["name"]
            ));
        }
    }
    if calls_events.len() != calls.len() * 2 {
        return Err(format!(
            "{} call events for {} calls",
            calls_events.len(),
            calls.len()
        ));
    }
    let done: Vec<(usize, &Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "message.completed")
        .collect();
    let [(pos, done)] = done.as_slice() else {
        return Err(format!("{} message.completed events", done.len()));
    };
    let last_call_event = events
        .iter()
        .rposition(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("tool_call."))
        })
        .unwrap_or(0);
    if *pos < last_call_event {
        return Err("message.completed before a call event".to_string());
    }
    let listed: Vec<(&str, &str)> = done["calls"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["tool_call"]["id"].as_str().unwrap_or_default(),
                        c["status"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<(&str, &str)> = calls.iter().map(|c| (c.id.as_str(), "completed")).collect();
    if listed != want {
        return Err(format!("message.completed lists {listed:?}, want {want:?}"));
    }
    Ok(())
}
