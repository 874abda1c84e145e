//! The outbox relay to JetStream, one round at a time.
//!
//! A round peeks the oldest outbox rows, publishes them pipelined (all sent, then every PubAck
//! awaited in order), and deletes exactly the rows whose PubAck arrived. Event rows go to
//! `<prefix>.events.<conv>.<msg>`, dead letters to `<prefix>.dlq.<conv>.<msg>`, each with
//! `Nats-Msg-Id` = the row's `msg_id` plus the row's own headers. A PubAck marked
//! `duplicate` is success: the stream already holds that event (a re-publish after a crash
//! between PubAck and delete). A row is never deleted before its PubAck, so a crash anywhere
//! loses nothing, and the stream's duplicate window keeps a re-publish from showing twice.
//!
//! A row the server can never take (larger than its `max_payload`, e.g. a call with megabytes
//! of arguments, which an event carries twice) would block every row behind it forever; it is
//! replaced by a small dead letter on `<prefix>.dlq.<conv>.<msg>` (reason `event_too_large`,
//! naming the event id and size) and deleted once that is confirmed.
//!
//! The loop around rounds (wake-ups, backoff, shutdown) lives in the worker.

use assembler::{OutboxEntry, OutboxKind, StoreError};
use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use std::future::IntoFuture;
use std::sync::Arc;

/// Dead-letter header naming why (the same header the store's dead letters carry).
pub const HEADER_REASON: &str = "Toolstream-Reason";

/// What the relay needs from the store: the oldest rows, and deleting rows. Blocking calls;
/// the relay runs them on the blocking pool.
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` oldest *durable* rows (made durable by a flush), oldest first.
    fn peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Deletes the rows with these keys (missing keys are fine).
    fn remove(&self, keys: &[u64]) -> Result<(), StoreError>;
}

impl Outbox for assembler::Store {
    fn peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.outbox_peek(limit)
    }

    fn remove(&self, keys: &[u64]) -> Result<(), StoreError> {
        for key in keys {
            self.outbox_remove(*key)?;
        }
        Ok(())
    }
}

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
    /// The peek was full: more rows are probably waiting.
    pub more: bool,
    /// Why the round stopped early, if it did. Confirmed rows were still deleted.
    pub error: Option<RelayError>,
}

/// How a row went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// As stored.
    AsIs,
    /// Replaced by a dead letter: the row is larger than the server's `max_payload`.
    Replaced,
}

/// Publishes outbox rows to JetStream.
#[derive(Debug, Clone)]
pub struct Relay {
    js: Context,
    prefix: String,
    batch: usize,
    crash_point: Option<CrashPoint>,
}

/// A test failpoint: abort the process once this many publishes have been confirmed, after
/// their PubAcks and before their outbox rows are deleted — the window in which a crash makes
/// the relay publish the same events again (deduplicated by `Nats-Msg-Id`).
#[derive(Debug, Clone)]
struct CrashPoint {
    after: u64,
    confirmed: Arc<std::sync::atomic::AtomicU64>,
}

impl Relay {
    /// A relay publishing under `prefix`, at most `batch` rows per round.
    pub fn new(js: Context, prefix: &str, batch: usize) -> Relay {
        Relay {
            js,
            prefix: prefix.to_string(),
            batch: batch.max(1),
            crash_point: None,
        }
    }

    /// Test failpoint: abort the process when `after` publishes have been confirmed, before
    /// their rows are deleted (see the crash tests). `None` disables it.
    pub fn with_crash_after_confirmed(mut self, after: Option<u64>) -> Relay {
        self.crash_point = after.map(|after| CrashPoint {
            after,
            confirmed: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        });
        self
    }

    /// The subject a row is published to.
    pub fn subject(&self, row: &OutboxEntry) -> String {
        let kind = match row.kind {
            OutboxKind::Event => "events",
            OutboxKind::DeadLetter => "dlq",
        };
        format!(
            "{}.{kind}.{}.{}",
            self.prefix, row.conversation_id, row.message_id
        )
    }

    /// The dead letter that replaces a row too large to publish: on
    /// `<prefix>.dlq.<conv>.<msg>`, reason `event_too_large`, the row's headers, and a small
    /// JSON body naming the row (`event_id`, kind, size) instead of the row itself.
    fn too_large(&self, row: &OutboxEntry, error: &PublishError) -> (String, PublishMessage) {
        let subject = format!(
            "{}.dlq.{}.{}",
            self.prefix, row.conversation_id, row.message_id
        );
        let mut headers = HeaderMap::new();
        for (name, value) in &row.headers {
            headers.insert(name.as_str(), value.as_str());
        }
        headers.insert(HEADER_REASON, format!("event_too_large: {error}").as_str());
        let kind = match row.kind {
            OutboxKind::Event => "event",
            OutboxKind::DeadLetter => "dead_letter",
        };
        let body = serde_json::json!({
            "reason": "event_too_large",
            "kind": kind,
            "event_id": row.msg_id,
            "conversation_id": row.conversation_id,
            "message_id": row.message_id,
            "size": row.payload.len(),
        });
        let publish = PublishMessage::build()
            .headers(headers)
            .message_id(format!("too_large:{}", row.msg_id))
            .payload(body.to_string().into_bytes().into());
        (subject, publish)
    }

    /// Runs one round against `outbox` (see the module docs).
    pub async fn round<O: Outbox>(&self, outbox: &Arc<O>) -> Round {
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
        round.more = rows.len() >= limit;

        // Send everything first (pipelined), stop at the first send error. A row the server can
        // never take (larger than its max_payload) is replaced by a dead letter saying so, so
        // it cannot block the outbox forever.
        let mut pending: Vec<(&OutboxEntry, String, PublishAckFuture, Sent)> =
            Vec::with_capacity(rows.len());
        for row in &rows {
            let subject = self.subject(row);
            let mut headers = HeaderMap::new();
            for (name, value) in &row.headers {
                headers.insert(name.as_str(), value.as_str());
            }
            let publish = PublishMessage::build()
                .headers(headers)
                .message_id(&row.msg_id)
                .payload(row.payload.clone().into());
            match self.js.send_publish(subject.clone(), publish).await {
                Ok(ack) => pending.push((row, subject, ack, Sent::AsIs)),
                Err(source) if source.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    let (dlq_subject, replacement) = self.too_large(row, &source);
                    tracing::error!(
                        %subject,
                        msg_id = %row.msg_id,
                        size = row.payload.len(),
                        error = %source,
                        "outbox row larger than the server's max_payload; dead-lettering it"
                    );
                    match self.js.send_publish(dlq_subject.clone(), replacement).await {
                        Ok(ack) => pending.push((row, dlq_subject, ack, Sent::Replaced)),
                        Err(source) => {
                            round.error = Some(RelayError::Send {
                                subject: dlq_subject,
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
            .map(|(row, subject, ack, sent)| ((row, subject, sent), ack.into_future()))
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

        if let Some(cp) = &self.crash_point {
            let n = confirmed.len() as u64;
            let total = cp
                .confirmed
                .fetch_add(n, std::sync::atomic::Ordering::SeqCst)
                + n;
            if total >= cp.after {
                tracing::error!(
                    confirmed = total,
                    "failpoint: aborting between PubAck and outbox delete"
                );
                std::process::abort();
            }
        }

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
