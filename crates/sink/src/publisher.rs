//! [`Publisher`]: the seam between the relay ([`crate::relay`]: its rounds and its loop) and
//! JetStream. The relay decides what goes out, in which order, and which outbox rows may be
//! deleted; a publisher only sends one message and hands back the future of its PubAck.
//! [`crate::jetstream::JetStream`] is the real one; the relay's tests use a fake.
//!
//! A publisher is also the relay's [`PayloadStore`]: where an event too large for the
//! server's `max_payload` is stored before its small form is published.

use crate::payloads::PayloadStore;
use async_nats::jetstream::context::PublishError;
use async_nats::jetstream::publish::PublishAck;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::future::Future;

/// One message to publish: subject, `Nats-Msg-Id`, headers (in order; a name given twice
/// keeps its last value) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Where it goes.
    pub subject: String,
    /// Its `Nats-Msg-Id`: the stream drops a second message with the same id inside its
    /// duplicate window.
    pub msg_id: String,
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub payload: Bytes,
}

/// The PubAck of a sent message, still to come: the stream's acknowledgement (a `duplicate`
/// one is success too), or why none came (timeout, no responders, a negative ack).
pub type AckFuture = BoxFuture<'static, Result<PublishAck, PublishError>>;

/// Sends messages to the stream. See the module docs.
pub trait Publisher: PayloadStore + Send + Sync + 'static {
    /// Sends `message` without waiting for its PubAck (so a round can pipeline a batch). An
    /// error of kind `MaxPayloadExceeded` means the message can never be sent as it is.
    fn send(
        &self,
        message: Outgoing,
    ) -> impl Future<Output = Result<AckFuture, PublishError>> + Send;
}
