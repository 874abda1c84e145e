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
//! A row larger than the server's `max_payload` (e.g. a call with megabytes of arguments, which
//! an event carries twice) is never dropped and never blocks the rows behind it
//! ([`crate::payloads`]):
//! - an event is stored whole in the payload bucket (object = its `event_id`, written only
//!   if missing) and then published in its small form with `payload_ref`, same subject and
//!   `Nats-Msg-Id`; if the bucket cannot be written the round fails and is retried;
//! - a dead letter keeps its reason and headers, with its body cut to fit and the
//!   `Toolstream-Body-*` headers (the whole body stored in the bucket when possible).
//!
//! Only a row that is not a readable event and still does not fit is replaced by a small dead
//! letter on `<prefix>.dlq.<conv>.<msg>` (reason `event_too_large`).
//!
//! The loop around rounds (wake-ups, backoff, shutdown) lives in the worker.

use crate::payloads::{self, Payloads};
use assembler::{OutboxEntry, OutboxKind, StoreError};
use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use chunk_model::{Event, Offload};
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

/// The headers of a row as a NATS header map.
fn header_map(headers: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(name.as_str(), value.as_str());
    }
    map
}

/// Publishes outbox rows to JetStream.
#[derive(Debug, Clone)]
pub struct Relay {
    js: Context,
    prefix: String,
    batch: usize,
    crash_point: Option<CrashPoint>,
    payloads: Payloads,
    hold_after_puts: Option<CrashPoint>,
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
            payloads: Payloads::new(js.clone(), payloads::BUCKET, 1),
            js,
            prefix: prefix.to_string(),
            batch: batch.max(1),
            crash_point: None,
            hold_after_puts: None,
        }
    }

    /// Where events and dead-letter bodies too large for `max_payload` go (default: bucket
    /// [`payloads::BUCKET`], created with one replica when missing).
    pub fn with_payloads(mut self, payloads: Payloads) -> Relay {
        self.payloads = payloads;
        self
    }

    /// Test failpoint: once `after` oversized events have been stored in the payload bucket,
    /// stop the relay for good right after storing, before publishing the event — the window
    /// a crash test kills the process in. `None` disables it.
    pub fn with_hold_after_payload_puts(mut self, after: Option<u64>) -> Relay {
        self.hold_after_puts = after.map(|after| CrashPoint {
            after,
            confirmed: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        });
        self
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

    /// What goes out instead of a row larger than `max_payload` (see the module docs): the
    /// subject, the message and how it was changed. An error only when an event could not be
    /// stored in the payload bucket (the round is retried).
    async fn oversized(
        &self,
        row: &OutboxEntry,
        subject: String,
        error: &PublishError,
    ) -> Result<(String, PublishMessage, Sent), RelayError> {
        let max_payload = self.payloads.max_payload();
        match row.kind {
            OutboxKind::DeadLetter => {
                let (headers, body) = payloads::fit_dead_letter(
                    &self.payloads,
                    row.headers.clone(),
                    &row.msg_id,
                    row.payload.clone().into(),
                )
                .await;
                let publish = PublishMessage::build()
                    .headers(header_map(&headers))
                    .message_id(&row.msg_id)
                    .payload(body);
                Ok((subject, publish, Sent::Cut))
            }
            OutboxKind::Event => {
                let Ok(event) = serde_json::from_slice::<Event>(&row.payload) else {
                    let (dlq_subject, replacement) = self.too_large(row, error);
                    tracing::error!(%subject, msg_id = %row.msg_id, size = row.payload.len(), error = %error,
                        "outbox row larger than the server's max_payload and not an event; dead-lettering it");
                    return Ok((dlq_subject, replacement, Sent::Replaced));
                };
                let (reference, written) = self
                    .payloads
                    .put(&event.event_id, &row.payload)
                    .await
                    .map_err(|source| RelayError::Payload {
                    msg_id: row.msg_id.clone(),
                    source,
                })?;
                tracing::info!(
                    %subject,
                    msg_id = %row.msg_id,
                    size = row.payload.len(),
                    max_payload,
                    bucket = %reference.bucket,
                    object = %reference.object,
                    written,
                    "event larger than the server's max_payload stored as an object; publishing it with payload_ref"
                );
                if let Some(hold) = &self.hold_after_puts {
                    let n = hold
                        .confirmed
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                        + 1;
                    if n >= hold.after {
                        tracing::error!(
                            object = %reference.object,
                            "failpoint: payload stored, holding the event (relay stopped)"
                        );
                        std::future::pending::<()>().await;
                    }
                }
                for level in [Offload::Slim, Offload::Bare] {
                    let small = event.offloaded(reference.clone(), level);
                    let body = match serde_json::to_vec(&small) {
                        Ok(body) => body,
                        Err(_) => continue,
                    };
                    if payloads::fits(&row.headers, Some(&row.msg_id), body.len(), max_payload) {
                        let publish = PublishMessage::build()
                            .headers(header_map(&row.headers))
                            .message_id(&row.msg_id)
                            .payload(body.into());
                        return Ok((subject, publish, Sent::Offloaded));
                    }
                }
                let (dlq_subject, replacement) = self.too_large(row, error);
                tracing::error!(%subject, msg_id = %row.msg_id, size = row.payload.len(), error = %error,
                    "event too large for max_payload even in its small form; dead-lettering it");
                Ok((dlq_subject, replacement, Sent::Replaced))
            }
        }
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
                    let (out_subject, replacement, sent) =
                        match self.oversized(row, subject, &source).await {
                            Ok(out) => out,
                            Err(e) => {
                                round.error = Some(e);
                                break;
                            }
                        };
                    match self.js.send_publish(out_subject.clone(), replacement).await {
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
