//! [`JetStream`]: the real [`Publisher`]. Sends each message with `Nats-Msg-Id` and its
//! headers through an async-nats JetStream context without waiting (the PubAck is awaited by
//! the relay, a whole round at once), and keeps what exceeds `max_payload` in the payload
//! bucket ([`Payloads`]).

use crate::payloads::{self, PayloadError, PayloadStore, Payloads};
use crate::publisher::{AckFuture, Outgoing, Publisher};
use async_nats::jetstream::context::PublishError;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use chunk_model::PayloadRef;
use futures::FutureExt;
use std::future::IntoFuture;

/// Publishes to JetStream. Cheap to clone.
#[derive(Debug, Clone)]
pub struct JetStream {
    js: Context,
    payloads: Payloads,
}

impl JetStream {
    /// Publishes through `js`; large payloads go to bucket [`payloads::BUCKET`], created with
    /// one replica when missing (see [`JetStream::with_payloads`]).
    pub fn new(js: Context) -> JetStream {
        JetStream {
            payloads: Payloads::new(js.clone(), payloads::BUCKET, 1),
            js,
        }
    }

    /// Where events and dead-letter bodies too large for `max_payload` go.
    pub fn with_payloads(mut self, payloads: Payloads) -> JetStream {
        self.payloads = payloads;
        self
    }

    /// The payload bucket.
    pub fn payloads(&self) -> &Payloads {
        &self.payloads
    }
}

/// Headers as a NATS header map (a name given twice keeps its last value).
fn header_map(headers: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(name.as_str(), value.as_str());
    }
    map
}

impl PayloadStore for JetStream {
    fn max_payload(&self) -> usize {
        self.payloads.max_payload()
    }

    async fn put(&self, object: &str, bytes: &[u8]) -> Result<(PayloadRef, bool), PayloadError> {
        self.payloads.put(object, bytes).await
    }
}

impl Publisher for JetStream {
    async fn send(&self, message: Outgoing) -> Result<AckFuture, PublishError> {
        let publish = PublishMessage::build()
            .headers(header_map(&message.headers))
            .message_id(message.msg_id)
            .payload(message.payload);
        let ack = self.js.send_publish(message.subject, publish).await?;
        Ok(ack.into_future().boxed())
    }
}
