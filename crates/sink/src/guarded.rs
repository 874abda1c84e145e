//! Publishing for a partition owned through a lease (the worker's `ownership` module): a
//! [`Guarded`] publisher wraps the real one and
//!
//! - sends nothing once the lease's [`Guard`] says it is no longer valid: a worker that was
//!   paused past its lease (SIGSTOP, a stall, a network cut) publishes no event for a
//!   partition that has moved on, however far its outbox got;
//! - stamps every message with `Toolstream-Owner: <worker>/<epoch>` (who published it, under
//!   which lease), so a reader of the stream can check the fencing;
//! - answers "already in the stream" for the messages a new owner's rebuild produces again:
//!   the `Nats-Msg-Id`s found in the events and dead-letter streams when it took the partition
//!   over ([`published_ids`]). The stream's duplicate window (1 hour) would drop most of them;
//!   this set also covers what is older than the window.

use crate::payloads::{PayloadError, PayloadStore};
use crate::publisher::{AckFuture, Outgoing, Publisher};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use chunk_model::PayloadRef;
use futures::{FutureExt, StreamExt};
use std::collections::HashSet;
use std::sync::Arc;

/// Header naming who published a message under which lease: `<worker id>/<epoch>`.
pub const OWNER_HEADER: &str = "Toolstream-Owner";

/// Whether the lease a partition is owned under still holds. Must be cheap: it is asked before
/// every publish and every ack.
pub trait Guard: Send + Sync + 'static {
    /// True while the lease is held (and certainly not yet expired on the server).
    fn is_valid(&self) -> bool;
    /// `<worker id>/<epoch>`, for [`OWNER_HEADER`] and logs.
    fn owner(&self) -> String;
}

/// Called once per message confirmed from the published-id set (not sent).
pub type OnSkip = Arc<dyn Fn() + Send + Sync>;

/// A [`Publisher`] for a leased partition (see the module docs).
#[derive(Clone)]
pub struct Guarded<P> {
    inner: P,
    guard: Arc<dyn Guard>,
    owner: String,
    published: Arc<HashSet<String>>,
    on_skip: Option<OnSkip>,
}

impl<P> std::fmt::Debug for Guarded<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("owner", &self.owner)
            .field("published", &self.published.len())
            .finish()
    }
}

impl<P> Guarded<P> {
    /// Publishes through `inner` while `guard` holds; `published` are the ids already in the
    /// streams when the partition was taken over.
    pub fn new(inner: P, guard: Arc<dyn Guard>, published: Arc<HashSet<String>>) -> Guarded<P> {
        let owner = guard.owner();
        Guarded {
            inner,
            guard,
            owner,
            published,
            on_skip: None,
        }
    }

    /// Calls `on_skip` for every message confirmed from the published-id set (a metric).
    pub fn with_on_skip(mut self, on_skip: OnSkip) -> Guarded<P> {
        self.on_skip = Some(on_skip);
        self
    }
}

impl<P: PayloadStore> PayloadStore for Guarded<P> {
    fn max_payload(&self) -> usize {
        self.inner.max_payload()
    }

    async fn put(&self, object: &str, bytes: &[u8]) -> Result<(PayloadRef, bool), PayloadError> {
        if !self.guard.is_valid() {
            return Err(PayloadError::Object {
                bucket: "(any)".to_string(),
                object: object.to_string(),
                message: format!("lease {} no longer held: not stored", self.owner),
            });
        }
        self.inner.put(object, bytes).await
    }
}

impl<P: Publisher> Publisher for Guarded<P> {
    async fn send(&self, mut message: Outgoing) -> Result<AckFuture, PublishError> {
        if !self.guard.is_valid() {
            return Err(PublishError::with_source(
                PublishErrorKind::Other,
                format!("lease {} no longer held: not published", self.owner),
            ));
        }
        if self.published.contains(&message.msg_id) {
            // In the stream since before this owner's lease: confirmed without a second copy.
            if let Some(on_skip) = &self.on_skip {
                on_skip();
            }
            let ack = PublishAck {
                duplicate: true,
                ..Default::default()
            };
            return Ok(futures::future::ready(Ok(ack)).boxed());
        }
        message
            .headers
            .push((OWNER_HEADER.to_string(), self.owner.clone()));
        self.inner.send(message).await
    }
}

/// Why the ids already published could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the ids already in {stream}: {reason}")]
pub struct ScanError {
    /// The stream being read.
    pub stream: String,
    /// What failed.
    pub reason: String,
}

/// The `Nats-Msg-Id`s of every message in `stream` (up to its last sequence when called,
/// stored at or after `since` when given) whose subject `keep` accepts.
/// Read with an ordered consumer, so it never disturbs the stream's other consumers.
pub async fn published_ids(
    js: &async_nats::jetstream::Context,
    stream: &str,
    since: Option<async_nats::datetime::DateTime>,
    keep: impl Fn(&str) -> bool,
) -> Result<HashSet<String>, ScanError> {
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    let fail = |reason: String| ScanError {
        stream: stream.to_string(),
        reason,
    };
    let mut handle = js
        .get_stream(stream)
        .await
        .map_err(|e| fail(format!("stream: {e}")))?;
    let last = handle
        .info()
        .await
        .map_err(|e| fail(format!("stream info: {e}")))?
        .state
        .last_sequence;
    let mut ids = HashSet::new();
    if last == 0 {
        return Ok(ids);
    }
    let deliver_policy = match since {
        Some(start_time) => {
            async_nats::jetstream::consumer::DeliverPolicy::ByStartTime { start_time }
        }
        None => async_nats::jetstream::consumer::DeliverPolicy::All,
    };
    let consumer = handle
        .create_consumer(OrderedConfig {
            deliver_policy,
            // the ids are headers: the bodies (events, dead letters) are not read
            headers_only: true,
            ..Default::default()
        })
        .await
        .map_err(|e| fail(format!("ordered consumer: {e}")))?;
    if consumer.cached_info().num_pending == 0 {
        // nothing stored at or after `since`
        return Ok(ids);
    }
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| fail(format!("read: {e}")))?;
    while let Some(next) = messages.next().await {
        let message = next.map_err(|e| fail(format!("read: {e}")))?;
        let (seq, pending) = message
            .info()
            .map(|i| (i.stream_sequence, i.pending))
            .map_err(|e| fail(format!("message info: {e}")))?;
        if keep(message.subject.as_str()) {
            if let Some(id) = message.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                ids.insert(id.as_str().to_string());
            }
        }
        if seq >= last || pending == 0 {
            break;
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Relay;
    use crate::testing::{event_row, FakeOutbox, FakePublisher, Log, Step};
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Switch(AtomicBool);

    impl Guard for Switch {
        fn is_valid(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn owner(&self) -> String {
            "w1/42".to_string()
        }
    }

    fn setup(
        published: &[&str],
    ) -> (
        Log,
        FakePublisher,
        Arc<Switch>,
        Relay<Guarded<FakePublisher>>,
    ) {
        let log = Log::default();
        let fake = FakePublisher::new(&log, []);
        let switch = Arc::new(Switch(AtomicBool::new(true)));
        let ids = published.iter().map(|s| s.to_string()).collect();
        let relay = Relay::new(
            Guarded::new(fake.clone(), switch.clone(), Arc::new(ids)),
            "toolstream",
            16,
        );
        (log, fake, switch, relay)
    }

    #[tokio::test]
    async fn a_row_already_in_the_stream_is_confirmed_without_a_second_copy() {
        let (log, fake, _switch, relay) = setup(&[]);
        let outbox = FakeOutbox::new(&log);
        outbox.add(event_row(1, b"{}"));
        outbox.add(event_row(2, b"{}"));
        let first = event_row(1, b"{}").msg_id;
        let (log2, fake2, _s2, relay2) = setup(&[first.as_str()]);
        let outbox2 = FakeOutbox::new(&log2);
        outbox2.add(event_row(1, b"{}"));
        outbox2.add(event_row(2, b"{}"));
        let round = relay2.round(&outbox2).await;
        assert_eq!((round.events, round.duplicates), (2, 1), "{round:?}");
        assert!(outbox2.keys().is_empty(), "both rows confirmed and deleted");
        let sent: Vec<String> = fake2
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.msg_id.clone())
            .collect();
        assert_eq!(
            sent,
            vec![event_row(2, b"{}").msg_id],
            "only the new one went out"
        );
        // without the set both go out
        let round = relay.round(&outbox).await;
        assert_eq!((round.events, round.duplicates), (2, 0));
        assert_eq!(fake.sent.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn every_message_names_its_owner_and_epoch() {
        let (log, fake, _switch, relay) = setup(&[]);
        let outbox = FakeOutbox::new(&log);
        outbox.add(event_row(1, b"{}"));
        let _ = relay.round(&outbox).await;
        let sent = fake.sent.lock().unwrap();
        assert!(
            sent[0]
                .headers
                .contains(&(OWNER_HEADER.to_string(), "w1/42".to_string())),
            "{:?}",
            sent[0].headers
        );
    }

    #[tokio::test]
    async fn nothing_is_published_once_the_lease_no_longer_holds_and_the_rows_stay() {
        let (log, fake, switch, relay) = setup(&[]);
        let outbox = FakeOutbox::new(&log);
        outbox.add(event_row(1, b"{}"));
        outbox.add(event_row(2, b"{}"));
        switch.0.store(false, Ordering::SeqCst);
        let round = relay.round(&outbox).await;
        assert_eq!(round.events, 0);
        assert!(round.error.is_some(), "the round says why it stopped");
        assert!(fake.sent.lock().unwrap().is_empty(), "nothing sent");
        assert_eq!(
            outbox.keys(),
            vec![1, 2],
            "the rows stay for whoever rebuilds them"
        );
        assert!(!log.steps().iter().any(|s| matches!(s, Step::Sent(_))));
    }
}
