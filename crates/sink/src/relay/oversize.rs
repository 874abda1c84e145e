//! What goes out instead of a row larger than the server's `max_payload` (never dropped,
//! never blocking the rows behind it; see [`crate::payloads`]):
//! - an event is stored whole in the payload bucket (object = its `event_id`, written only if
//!   missing) and then published in its small form with `payload_ref`, same subject and
//!   `Nats-Msg-Id`; if the bucket cannot be written the round fails and is retried;
//! - a dead letter keeps its reason and headers, with its body cut to fit and the
//!   `Toolstream-Body-*` headers (the whole body stored in the bucket when possible);
//! - a row that is not a readable event and still does not fit is replaced by a small dead
//!   letter on `<prefix>.dlq.<conv>.<msg>` (reason `event_too_large`).

use super::{Relay, RelayError, Sent};
use crate::payloads;
use crate::publisher::{Outgoing, Publisher};
use assembler::{OutboxEntry, OutboxKind};
use async_nats::jetstream::context::PublishError;
use chunk_model::wire::{headers, msg_id, DeadLetterCode};
use chunk_model::{Event, Offload};

impl<P: Publisher> Relay<P> {
    /// The dead letter that replaces a row too large to publish: on
    /// `<prefix>.dlq.<conv>.<msg>`, reason `event_too_large`, the row's headers, and a small
    /// JSON body naming the row (`event_id`, kind, size) instead of the row itself.
    pub(super) fn too_large(&self, row: &OutboxEntry, error: &PublishError) -> Outgoing {
        let mut kept: Vec<(String, String)> = row
            .headers
            .iter()
            .filter(|(name, _)| name != headers::REASON)
            .cloned()
            .collect();
        kept.push((
            headers::REASON.to_string(),
            DeadLetterCode::EventTooLarge.with(error),
        ));
        let kind = match row.kind {
            OutboxKind::Event => "event",
            OutboxKind::DeadLetter => "dead_letter",
        };
        let body = serde_json::json!({
            "reason": DeadLetterCode::EventTooLarge.as_str(),
            "kind": kind,
            "event_id": row.msg_id,
            "conversation_id": row.conversation_id,
            "message_id": row.message_id,
            "size": row.payload.len(),
        });
        Outgoing {
            subject: self.subjects.dlq(&row.conversation_id, &row.message_id),
            msg_id: msg_id::too_large(&row.msg_id),
            headers: kept,
            payload: body.to_string().into_bytes().into(),
        }
    }

    /// What goes out instead of `row` (see the module docs) and how it was changed. An error
    /// only when an event could not be stored in the payload bucket (the round is retried).
    pub(super) async fn oversized(
        &self,
        row: &OutboxEntry,
        subject: String,
        error: &PublishError,
    ) -> Result<(Outgoing, Sent), RelayError> {
        let max_payload = self.publisher.max_payload();
        match row.kind {
            OutboxKind::DeadLetter => {
                let (headers, body) = payloads::fit_dead_letter(
                    &self.publisher,
                    row.headers.clone(),
                    &row.msg_id,
                    row.payload.clone().into(),
                )
                .await;
                let message = Outgoing {
                    subject,
                    msg_id: row.msg_id.clone(),
                    headers,
                    payload: body,
                };
                Ok((message, Sent::Cut))
            }
            OutboxKind::Event => {
                let Ok(event) = serde_json::from_slice::<Event>(&row.payload) else {
                    tracing::error!(%subject, msg_id = %row.msg_id, size = row.payload.len(), error = %error,
                        "outbox row larger than the server's max_payload and not an event; dead-lettering it");
                    return Ok((self.too_large(row, error), Sent::Replaced));
                };
                let (reference, written) = self
                    .publisher
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
                #[cfg(feature = "failpoints")]
                self.failpoints.payload_stored(&reference.object).await;
                for level in [Offload::Slim, Offload::Bare] {
                    let small = event.offloaded(reference.clone(), level);
                    let body = match serde_json::to_vec(&small) {
                        Ok(body) => body,
                        Err(_) => continue,
                    };
                    if payloads::fits(&row.headers, Some(&row.msg_id), body.len(), max_payload) {
                        let message = Outgoing {
                            subject,
                            msg_id: row.msg_id.clone(),
                            headers: row.headers.clone(),
                            payload: body.into(),
                        };
                        return Ok((message, Sent::Offloaded));
                    }
                }
                tracing::error!(%subject, msg_id = %row.msg_id, size = row.payload.len(), error = %error,
                    "event too large for max_payload even in its small form; dead-lettering it");
                Ok((self.too_large(row, error), Sent::Replaced))
            }
        }
    }
}
