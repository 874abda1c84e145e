//! Fakes for tests: an in-memory [`Outbox`] and a scripted [`Publisher`], both
//! writing what happened, in order, to one shared [`Log`]. Compiled for this crate's tests and
//! with the `testing` feature (its integration tests), never in a release build.

// Test code: a panic is a failed test (the unit tests reach it through `cfg(test)`, where
// clippy.toml allows it; the `testing` feature builds it as library code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::outbox::Outbox;
use crate::payloads::{self, PayloadError, PayloadStore};
use crate::publisher::{AckFuture, Outgoing, Publisher};
use assembler::{OutboxEntry, OutboxKind, StoreError};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use chunk_model::PayloadRef;
use futures::FutureExt;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// One thing that happened, with the (paused) tokio time it happened at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A message was sent (by `msg_id`).
    Sent(String),
    /// A send failed.
    SendFailed(String),
    /// A PubAck arrived (by `msg_id`).
    Acked(String),
    /// No PubAck (by `msg_id`).
    AckFailed(String),
    /// Outbox rows deleted (by key).
    Removed(u64),
}

/// What happened, in order.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<(Instant, Step)>>>);

impl Log {
    pub fn push(&self, step: Step) {
        self.0.lock().unwrap().push((Instant::now(), step));
    }

    pub fn steps(&self) -> Vec<Step> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// When each matching step happened.
    pub fn times(&self, matches: impl Fn(&Step) -> bool) -> Vec<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| matches(s))
            .map(|(t, _)| *t)
            .collect()
    }
}

/// An outbox row: an event `ev<key>` on conversation `c`, message `m<key>`.
pub fn event_row(key: u64, payload: &[u8]) -> OutboxEntry {
    OutboxEntry {
        key,
        kind: OutboxKind::Event,
        conversation_id: "c".into(),
        message_id: format!("m{key}"),
        msg_id: format!("ev{key}"),
        headers: vec![("Toolstream-Event-Type".into(), "tool_call.completed".into())],
        payload: payload.to_vec(),
    }
}

/// An in-memory outbox (every row durable at once).
#[derive(Debug, Default)]
pub struct FakeOutbox {
    rows: Mutex<BTreeMap<u64, OutboxEntry>>,
    log: Log,
}

impl FakeOutbox {
    pub fn new(log: &Log) -> Arc<FakeOutbox> {
        Arc::new(FakeOutbox {
            rows: Mutex::default(),
            log: log.clone(),
        })
    }

    pub fn add(&self, row: OutboxEntry) {
        self.rows.lock().unwrap().insert(row.key, row);
    }

    pub fn keys(&self) -> Vec<u64> {
        self.rows.lock().unwrap().keys().copied().collect()
    }
}

impl Outbox for FakeOutbox {
    fn peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        Ok(self
            .rows
            .lock()
            .unwrap()
            .values()
            .take(limit)
            .cloned()
            .collect())
    }

    fn remove(&self, keys: &[u64]) -> Result<(), StoreError> {
        let mut rows = self.rows.lock().unwrap();
        for key in keys {
            rows.remove(key);
            self.log.push(Step::Removed(*key));
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.rows.lock().unwrap().len()
    }
}

/// How the fake answers one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// PubAck after this long.
    Ack(Duration),
    /// A PubAck marked duplicate.
    Duplicate,
    /// No PubAck: a timeout after this long.
    NoAck(Duration),
    /// The send itself fails (not connected).
    SendFails,
}

/// A publisher answering sends from a script (then [`Answer::Ack`] at once when it runs out),
/// refusing what exceeds `max_payload` like the server, with an in-memory payload bucket.
#[derive(Debug, Clone)]
pub struct FakePublisher {
    script: Arc<Mutex<VecDeque<Answer>>>,
    pub sent: Arc<Mutex<Vec<Outgoing>>>,
    pub objects: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    max_payload: usize,
    log: Log,
}

impl FakePublisher {
    pub fn new(log: &Log, script: impl IntoIterator<Item = Answer>) -> FakePublisher {
        FakePublisher {
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            sent: Arc::default(),
            objects: Arc::default(),
            max_payload: 1024 * 1024,
            log: log.clone(),
        }
    }

    pub fn with_max_payload(mut self, max_payload: usize) -> FakePublisher {
        self.max_payload = max_payload;
        self
    }

    /// Every send from now on gets `answer`.
    pub fn always(&self, answer: Answer) {
        let mut script = self.script.lock().unwrap();
        script.clear();
        script.extend(std::iter::repeat_n(answer, 10_000));
    }
}

impl PayloadStore for FakePublisher {
    fn max_payload(&self) -> usize {
        self.max_payload
    }

    async fn put(&self, object: &str, bytes: &[u8]) -> Result<(PayloadRef, bool), PayloadError> {
        let written = self
            .objects
            .lock()
            .unwrap()
            .insert(object.to_string(), bytes.to_vec())
            .as_deref()
            != Some(bytes);
        Ok((PayloadRef::for_bytes("FAKE", object, bytes), written))
    }
}

impl Publisher for FakePublisher {
    async fn send(&self, message: Outgoing) -> Result<AckFuture, PublishError> {
        let id = message.msg_id.clone();
        let size = payloads::wire_size(&message.headers, Some(&id), message.payload.len());
        if size > self.max_payload {
            self.log.push(Step::SendFailed(id));
            return Err(PublishError::new(PublishErrorKind::MaxPayloadExceeded));
        }
        let answer = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Answer::Ack(Duration::ZERO));
        if answer == Answer::SendFails {
            self.log.push(Step::SendFailed(id));
            return Err(PublishError::new(PublishErrorKind::BrokenPipe));
        }
        self.log.push(Step::Sent(id.clone()));
        self.sent.lock().unwrap().push(message);
        let log = self.log.clone();
        Ok(async move {
            match answer {
                Answer::Ack(after) => {
                    tokio::time::sleep(after).await;
                    log.push(Step::Acked(id));
                    Ok(PublishAck::default())
                }
                Answer::Duplicate => {
                    log.push(Step::Acked(id));
                    Ok(PublishAck {
                        duplicate: true,
                        ..Default::default()
                    })
                }
                Answer::NoAck(after) => {
                    tokio::time::sleep(after).await;
                    log.push(Step::AckFailed(id));
                    Err(PublishError::new(PublishErrorKind::TimedOut))
                }
                // answered at send time above
                Answer::SendFails => Err(PublishError::new(PublishErrorKind::BrokenPipe)),
            }
        }
        .boxed())
    }
}
