//! The outbox relay: delivers outbox rows to the stream, one round at a time, through a
//! [`Publisher`] (JetStream in production, a fake in the tests).
//!
//! A round peeks the oldest outbox rows, publishes them pipelined (all sent, then every PubAck
//! awaited at once), and deletes exactly the rows whose PubAck arrived. Event rows go to
//! `<prefix>.events.<conv>.<msg>`, dead letters to `<prefix>.dlq.<conv>.<msg>`, each with
//! `Nats-Msg-Id` = the row's `msg_id` plus the row's own headers. A PubAck marked
//! `duplicate` is success: the stream already holds that event (a re-publish after a crash
//! between PubAck and delete). A row is never deleted before its PubAck, so a crash anywhere
//! loses nothing, and the stream's duplicate window keeps a re-publish from showing twice.
//!
//! A row larger than the server's `max_payload` never blocks the rows behind it
//! (`oversize.rs`): an event goes out in its small form with `payload_ref`, a dead letter with
//! its body cut, anything else as a small `event_too_large` dead letter.
//!
//! [`RelayTask`] (`task.rs`) is the loop around rounds: wake-ups, capped backoff, the bounded
//! drain at shutdown.

mod oversize;
mod task;

#[cfg(feature = "failpoints")]
mod failpoints;
#[cfg(test)]
mod tests;

pub use task::{Drained, RelayTask, BACKOFF};

use crate::outbox::Outbox;
use crate::payloads;
use crate::publisher::{AckFuture, Outgoing, Publisher};
use assembler::{OutboxEntry, OutboxKind, StoreError};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use chunk_model::wire::Subjects;
use std::sync::Arc;

/// Why a round stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Reading or deleting outbox rows failed.
    #[error("outbox: {0}")]
    Store(#[from] StoreError),
    /// Sending a publish failed (not connected, client closed, payload too large).
    #[error("publish to {subject}: {source}")]
    Send {
        /// Where it was going.
        subject: String,
        /// async-nats' error.
        source: PublishError,
    },
    /// No (or a negative) PubAck arrived.
    #[error("no PubAck for {msg_id} on {subject}: {source}")]
    Ack {
        /// Where it went.
        subject: String,
        /// Its `Nats-Msg-Id`.
        msg_id: String,
        /// async-nats' error.
        source: PublishError,
    },
    /// The blocking store task panicked or was cancelled.
    #[error("store task: {0}")]
    Join(String),
    /// An event too large to publish could not be stored in the payload bucket (retried).
    #[error("storing oversized event {msg_id}: {source}")]
    Payload {
        /// Its `Nats-Msg-Id` (the event id).
        msg_id: String,
        /// Why.
        source: payloads::PayloadError,
    },
}

/// What one round did.
#[must_use]
#[derive(Debug, Default)]
pub struct Round {
    /// Event rows confirmed and deleted.
    pub events: usize,
    /// Dead-letter rows confirmed and deleted.
    pub dead_letters: usize,
    /// Of those, PubAcks marked `duplicate` (already in the stream).
    pub duplicates: usize,
    /// Rows larger than the server's `max_payload`, replaced by a dead letter saying so.
    pub too_large: usize,
    /// Of the events, those published in their small form with `payload_ref`.
    pub offloaded: usize,
    /// Of the dead letters, those published with their body cut.
    pub cut: usize,
    /// The peek was full: more rows are probably waiting.
    pub more: bool,
    /// Why the round stopped early, if it did. Confirmed rows were still deleted.
    pub error: Option<RelayError>,
    /// Rows the peek found (durable rows waiting, up to the round's limit).
    pub peeked: usize,
    /// How long the round took, from its peek of the outbox to the deletion of the rows
    /// confirmed.
    pub took: std::time::Duration,
}

/// How a row went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// As stored.
    AsIs,
    /// Replaced by a dead letter: the row is larger than the server's `max_payload`.
    Replaced,
    /// An event in its small form, the whole event stored as an object.
    Offloaded,
    /// A dead letter with its body cut.
    Cut,
}

/// Publishes outbox rows through a [`Publisher`], one round at a time.
#[derive(Debug, Clone)]
pub struct Relay<P> {
    publisher: P,
    subjects: Subjects,
    batch: usize,
    #[cfg(feature = "failpoints")]
    failpoints: failpoints::Failpoints,
}

impl<P: Publisher> Relay<P> {
    /// A relay publishing under `prefix`, at most `batch` rows per round.
    pub fn new(publisher: P, prefix: &str, batch: usize) -> Relay<P> {
        Relay {
            publisher,
            subjects: Subjects::new(prefix),
            batch: batch.max(1),
            #[cfg(feature = "failpoints")]
            failpoints: Default::default(),
        }
    }

    /// The publisher.
    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// The subject a row is published to: `<prefix>.events.<conv>.<msg>` for an event,
    /// `<prefix>.dlq.<conv>.<msg>` for a dead letter.
    pub fn subject(&self, row: &OutboxEntry) -> String {
        let (conv, msg) = (&row.conversation_id, &row.message_id);
        match row.kind {
            OutboxKind::Event => self.subjects.events(conv, msg),
            OutboxKind::DeadLetter => self.subjects.dlq(conv, msg),
        }
    }

    /// A row as stored, ready to send.
    fn message(&self, row: &OutboxEntry) -> Outgoing {
        Outgoing {
            subject: self.subject(row),
            msg_id: row.msg_id.clone(),
            headers: row.headers.clone(),
            payload: row.payload.clone().into(),
        }
    }

    /// Runs one round against `outbox` (see the module docs), timed ([`Round::took`]).
    pub async fn round<O: Outbox + ?Sized>(&self, outbox: &Arc<O>) -> Round {
        let started = tokio::time::Instant::now();
        let mut round = self.untimed_round(outbox).await;
        round.took = started.elapsed();
        round
    }

    async fn untimed_round<O: Outbox + ?Sized>(&self, outbox: &Arc<O>) -> Round {
        let mut round = Round::default();
        let limit = self.batch;
        let peeked = {
            let o = Arc::clone(outbox);
            tokio::task::spawn_blocking(move || o.peek(limit)).await
        };
        let rows = match peeked {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                round.error = Some(e.into());
                return round;
            }
            Err(e) => {
                round.error = Some(RelayError::Join(e.to_string()));
                return round;
            }
        };
        if rows.is_empty() {
            return round;
        }
        round.peeked = rows.len();
        round.more = rows.len() >= limit;

        // Send everything first (pipelined), stop at the first send error. A row the server can
        // never take (larger than its max_payload) goes out in a form that fits, so it cannot
        // block the outbox forever.
        let mut pending: Vec<(&OutboxEntry, String, AckFuture, Sent)> =
            Vec::with_capacity(rows.len());
        for row in &rows {
            let message = self.message(row);
            let subject = message.subject.clone();
            match self.publisher.send(message).await {
                Ok(ack) => pending.push((row, subject, ack, Sent::AsIs)),
                Err(source) if source.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    let (replacement, sent) = match self.oversized(row, subject, &source).await {
                        Ok(out) => out,
                        Err(e) => {
                            round.error = Some(e);
                            break;
                        }
                    };
                    let out_subject = replacement.subject.clone();
                    match self.publisher.send(replacement).await {
                        Ok(ack) => pending.push((row, out_subject, ack, sent)),
                        Err(source) => {
                            round.error = Some(RelayError::Send {
                                subject: out_subject,
                                source,
                            });
                            break;
                        }
                    }
                }
                Err(source) => {
                    round.error = Some(RelayError::Send { subject, source });
                    break;
                }
            }
        }

        // Await every PubAck at once (each has its own timeout: awaited one after the other, a
        // round of acks lost in an outage would take rows x timeout), then go through them in
        // order; keep the keys of the confirmed rows.
        let (meta, acks): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .map(|(row, subject, ack, sent)| ((row, subject, sent), ack))
            .unzip();
        let results = futures::future::join_all(acks).await;
        let mut confirmed = Vec::with_capacity(results.len());
        for ((row, subject, sent), result) in meta.into_iter().zip(results) {
            match result {
                Ok(ack) => {
                    if ack.duplicate {
                        round.duplicates += 1;
                    }
                    match (sent, row.kind) {
                        (Sent::Replaced, _) => round.too_large += 1,
                        (Sent::Offloaded, _) => {
                            round.events += 1;
                            round.offloaded += 1;
                        }
                        (Sent::Cut, _) => {
                            round.dead_letters += 1;
                            round.cut += 1;
                        }
                        (Sent::AsIs, OutboxKind::Event) => round.events += 1,
                        (Sent::AsIs, OutboxKind::DeadLetter) => round.dead_letters += 1,
                    }
                    confirmed.push(row.key);
                }
                Err(source) => {
                    tracing::warn!(%subject, msg_id = %row.msg_id, error = %source, "publish not confirmed; will retry");
                    if round.error.is_none() {
                        round.error = Some(RelayError::Ack {
                            subject,
                            msg_id: row.msg_id.clone(),
                            source,
                        });
                    }
                }
            }
        }

        #[cfg(feature = "failpoints")]
        self.failpoints.confirmed(confirmed.len());

        if !confirmed.is_empty() {
            let o = Arc::clone(outbox);
            let removed = tokio::task::spawn_blocking(move || o.remove(&confirmed)).await;
            let err = match removed {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(RelayError::Store(e)),
                Err(e) => Some(RelayError::Join(e.to_string())),
            };
            if let Some(e) = err {
                // The rows stay and are re-published; the duplicate window drops them.
                round.error.get_or_insert(e);
            }
        }
        round
    }
}
