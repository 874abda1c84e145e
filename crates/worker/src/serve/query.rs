//! The query service (docs/contracts.md, "Query API"): NATS request/reply through the async-nats
//! service API, so it shows up in `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` as service
//! `toolstream` with the crate's version.
//!
//! - `<prefix>.query.message.<conv>.<msg>` → the stored [`MessageSnapshot`] JSON: what a UI
//!   shows after a refresh (the same calls and results the events said).
//! - `<prefix>.query.history.<conv>` with a JSON [`HistoryRequest`] body (empty body = every
//!   default, target `openai-chat`) → the provider-valid [`RenderedHistory`] JSON.
//!
//! Failures are service errors (`Nats-Service-Error` / `Nats-Service-Error-Code` headers, empty
//! body), never silence: 400 for a bad subject or body, 404 for an unknown message or
//! conversation, 500 for a store or rendering failure. sled reads run on `spawn_blocking`.
//!
//! Partitions: `prefix` is the query subject prefix. Unpartitioned it is the subject prefix
//! (`toolstream`); a worker owning partition `k` passes `<subject prefix>.p.<k>`, and
//! deploy/nats-server.conf maps `toolstream.query.*` requests to the partition that holds the
//! conversation, exactly like its input.
//!
//! A reply larger than the server's `max_payload` (e.g. the snapshot of a message with a
//! 1 MiB argument, which a snapshot carries twice) is stored in the payload bucket as
//! `reply_<sha256 of subject and request body>` (one object per distinct request, replaced
//! when the answer changes) and the reply is `{"payload_ref":{"bucket","object","size",
//! "sha256"}}` instead: fetch the object for the whole reply (`sink::payloads::fit_reply`);
//! a size/SHA-256 mismatch means the answer changed meanwhile: ask again. If it cannot be
//! stored the request gets a 500 service error saying so, never silence.
//!
//! Shutdown: [`serve`] takes a `tokio::sync::watch::Receiver<bool>`; it stops the service when
//! the value becomes `true` (or the sender is dropped), then lets requests in flight finish
//! (bounded by [`DRAIN_TIMEOUT`]).
//!
//! Leased partitions: [`serve`] also takes the lease's guard. Once the lease no longer holds
//! (a worker that was paused past it, or that lost it), a request is answered with a 503
//! service error ("moved: ask again") instead of this store's possibly stale state, and the
//! service stops within [`FENCE_CHECK`], so the partition's new owner answers the next one.

use async_nats::service::ServiceExt;
use bytes::Bytes;
use chunk_model::encode::HistoryFormat;
use chunk_model::history::{self, HistoryOptions, HistoryRequest, RenderedHistory};
use chunk_model::wire::Subjects;
use chunk_model::MessageSnapshot;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The service name in NATS service discovery.
pub const SERVICE_NAME: &str = "toolstream";

/// How long shutdown waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a leased partition's service checks its lease between requests.
pub const FENCE_CHECK: Duration = Duration::from_millis(100);

/// The query subject prefix a worker serves under: `subject_prefix` when unpartitioned,
/// `<subject_prefix>.p.<partition>` when the server maps queries onto partitions
/// (deploy/nats-server.conf), so each query reaches the one worker whose store holds the
/// conversation.
pub fn query_prefix(subject_prefix: &str, partitions: u32, partition: u32) -> String {
    Subjects::new(subject_prefix).query_prefix(partitions, partition)
}

/// Why a query could not be answered. Each maps to a service error code.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The subject does not name a conversation (and message).
    #[error("bad query subject {0:?}: expected <prefix>.query.message.<conv>.<msg> or <prefix>.query.history.<conv>")]
    BadSubject(String),
    /// The history request body is not a valid request.
    #[error("bad history request body: {0}")]
    BadBody(String),
    /// No such message in this worker's store.
    #[error("no message {message:?} in conversation {conversation:?} (unknown, or not yet seen by this worker)")]
    UnknownMessage {
        /// The conversation asked for.
        conversation: String,
        /// The message asked for.
        message: String,
    },
    /// No message of this conversation in this worker's store.
    #[error("no messages stored for conversation {0:?}")]
    UnknownConversation(String),
    /// The store failed.
    #[error("store read failed: {0}")]
    Store(String),
    /// Rendering or serializing the answer failed.
    #[error("rendering the answer failed: {0}")]
    Render(String),
    /// This worker's lease on the conversation's partition no longer holds: another worker
    /// owns it now, and answers from the partition's current state.
    #[error("the conversation's partition moved to another worker: ask again")]
    Moved,
}

impl QueryError {
    /// The service error code (HTTP-like).
    pub fn code(&self) -> usize {
        match self {
            QueryError::BadSubject(_) | QueryError::BadBody(_) => 400,
            QueryError::UnknownMessage { .. } | QueryError::UnknownConversation(_) => 404,
            QueryError::Store(_) | QueryError::Render(_) => 500,
            QueryError::Moved => 503,
        }
    }

    /// As a service error; the text is made header-safe (one line).
    pub fn to_service_error(&self) -> async_nats::service::error::Error {
        let status: String = self
            .to_string()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        async_nats::service::error::Error {
            status,
            code: self.code(),
        }
    }
}

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `query.message.<conv>.<msg>`
    Message,
    /// `query.history.<conv>`
    History,
}

/// Serves queries against `store` until `shutdown` turns `true`. Fails at once if the service
/// cannot be registered (e.g. not connected).
pub async fn serve(
    client: async_nats::Client,
    store: Arc<assembler::Store>,
    payloads: sink::payloads::Payloads,
    prefix: String,
    health: Arc<crate::serve::http::Health>,
    guard: Option<Arc<dyn sink::guarded::Guard>>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let holds = move || guard.as_ref().is_none_or(|g| g.is_valid());
    let service = client
        .service_builder()
        .description("toolstream queries: stored tool calls of a message, provider-valid history of a conversation")
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("registering the query service: {e}"))?;
    let message_subject = Subjects::new(&prefix).query_message_endpoint();
    let history_subject = Subjects::new(&prefix).query_history_endpoint();
    let mut messages = service
        .endpoint_builder()
        .name("message")
        .add(message_subject.clone())
        .await
        .map_err(|e| anyhow::anyhow!("adding endpoint {message_subject}: {e}"))?;
    let mut histories = service
        .endpoint_builder()
        .name("history")
        .add(history_subject.clone())
        .await
        .map_err(|e| anyhow::anyhow!("adding endpoint {history_subject}: {e}"))?;
    // The endpoints' subscriptions reach the server before /healthz says the worker is up.
    client
        .flush()
        .await
        .map_err(|e| anyhow::anyhow!("flushing the query service's subscriptions: {e}"))?;
    health.set_queries_served(true);
    tracing::info!(%message_subject, %history_subject, "query service started");

    let prefix: Arc<str> = Arc::from(prefix);
    let mut in_flight = JoinSet::new();
    let mut fence = tokio::time::interval(FENCE_CHECK);
    fence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (kind, request) = tokio::select! {
            () = stopped(&mut shutdown) => break,
            _ = fence.tick() => {
                if holds() {
                    continue;
                }
                tracing::warn!("lease lost: the query service stops (the partition's new owner answers)");
                break;
            }
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
            r = messages.next() => match r {
                Some(r) => (Kind::Message, r),
                None => break,
            },
            r = histories.next() => match r {
                Some(r) => (Kind::History, r),
                None => break,
            },
        };
        if !holds() {
            let subject = request.message.subject.to_string();
            if let Err(err) = request
                .respond(Err(QueryError::Moved.to_service_error()))
                .await
            {
                tracing::warn!(%subject, error = %err, "sending a query response failed");
            }
            continue;
        }
        let store = store.clone();
        let prefix = prefix.clone();
        let payloads = payloads.clone();
        in_flight.spawn(async move {
            let subject = request.message.subject.to_string();
            let answer =
                match answer(kind, &prefix, &subject, &request.message.payload, store).await {
                    // too large for max_payload: stored, answered by reference
                    Ok(body) => {
                        // the object is named by the request: subject, NUL, body
                        let mut key = subject.as_bytes().to_vec();
                        key.push(0);
                        key.extend_from_slice(&request.message.payload);
                        sink::payloads::fit_reply(&payloads, &key, body)
                            .await
                            .map_err(|e| {
                                QueryError::Render(format!("reply larger than max_payload: {e}"))
                            })
                    }
                    Err(e) => Err(e),
                };
            let response = match answer {
                Ok(body) => Ok(body),
                Err(err) => {
                    tracing::debug!(%subject, code = err.code(), error = %err, "query refused");
                    Err(err.to_service_error())
                }
            };
            if let Err(err) = request.respond(response).await {
                tracing::warn!(%subject, error = %err, "sending a query response failed");
            }
        });
    }
    service
        .stop()
        .await
        .map_err(|e| anyhow::anyhow!("stopping the query service: {e}"))?;
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("query service: requests still in flight after {DRAIN_TIMEOUT:?}; dropped");
    }
    tracing::info!("query service stopped");
    Ok(())
}

/// Answers one request: parse, read the store off the async threads, render.
async fn answer(
    kind: Kind,
    prefix: &str,
    subject: &str,
    body: &[u8],
    store: Arc<assembler::Store>,
) -> Result<Bytes, QueryError> {
    match kind {
        Kind::Message => {
            let (conv, msg) = parse_message_subject(prefix, subject)?;
            let (c, m) = (conv.clone(), msg.clone());
            let snapshot = tokio::task::spawn_blocking(move || store.message_snapshot(&c, &m))
                .await
                .map_err(|e| QueryError::Store(e.to_string()))?
                .map_err(|e| QueryError::Store(e.to_string()))?;
            match snapshot {
                Some(s) => to_json(&s),
                None => Err(QueryError::UnknownMessage {
                    conversation: conv,
                    message: msg,
                }),
            }
        }
        Kind::History => {
            let conv = parse_history_subject(prefix, subject)?;
            let request = parse_history_body(body)?;
            let c = conv.clone();
            let snapshots = tokio::task::spawn_blocking(move || store.conversation(&c))
                .await
                .map_err(|e| QueryError::Store(e.to_string()))?
                .map_err(|e| QueryError::Store(e.to_string()))?;
            let rendered = render_history(&conv, &snapshots, &request)?;
            to_json(&rendered)
        }
    }
}

/// Renders a conversation's history; an empty conversation is a 404, not an empty history,
/// so a typo in a conversation id is not mistaken for "no tool calls".
fn render_history(
    conv: &str,
    snapshots: &[MessageSnapshot],
    request: &HistoryRequest,
) -> Result<RenderedHistory, QueryError> {
    if snapshots.is_empty() {
        return Err(QueryError::UnknownConversation(conv.to_string()));
    }
    history::render(snapshots, request.target, &request.options)
        .map_err(|e| QueryError::Render(e.to_string()))
}

/// Serializes an answer.
fn to_json<T: serde::Serialize>(value: &T) -> Result<Bytes, QueryError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| QueryError::Render(e.to_string()))
}

/// `<prefix>.query.message.<conv>.<msg>` → `(conv, msg)`.
fn parse_message_subject(prefix: &str, subject: &str) -> Result<(String, String), QueryError> {
    Subjects::new(prefix)
        .parse_query_message(subject)
        .map(|(conv, msg)| (conv.to_string(), msg.to_string()))
        .map_err(|_| QueryError::BadSubject(subject.to_string()))
}

/// `<prefix>.query.history.<conv>` → `conv`.
fn parse_history_subject(prefix: &str, subject: &str) -> Result<String, QueryError> {
    Subjects::new(prefix)
        .parse_query_history(subject)
        .map(str::to_string)
        .map_err(|_| QueryError::BadSubject(subject.to_string()))
}

/// Parses a history request body: empty = defaults with target `openai-chat`; `target` may
/// be omitted too.
fn parse_history_body(body: &[u8]) -> Result<HistoryRequest, QueryError> {
    if body.trim_ascii().is_empty() {
        return Ok(HistoryRequest {
            target: HistoryFormat::OpenaiChat,
            options: HistoryOptions::default(),
        });
    }
    let mut value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| QueryError::BadBody(e.to_string()))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| QueryError::BadBody("expected a JSON object".to_string()))?;
    // Anything else is refused, so a misspelt option (`max_results_chars`) does not silently
    // fall back to its default.
    if let Some(unknown) = object
        .keys()
        .find(|k| !HistoryRequest::FIELDS.contains(&k.as_str()))
    {
        return Err(QueryError::BadBody(format!(
            "unknown field {unknown:?} (expected one of: {})",
            HistoryRequest::FIELDS.join(", ")
        )));
    }
    object
        .entry("target")
        .or_insert_with(|| serde_json::Value::String("openai-chat".to_string()));
    serde_json::from_value(value).map_err(|e| QueryError::BadBody(e.to_string()))
}

/// Completes when shutdown is asked for or every sender is gone (the `watch::Ref` is dropped
/// inside, so the caller's future stays `Send`).
/// How a client reads a reply of this service.
pub mod reply {
    use bytes::Bytes;

    /// The service error a reply carries (`Nats-Service-Error-Code`, `Nats-Service-Error`):
    /// its code (0 when it is not a number) and text.
    pub fn service_error(reply: &async_nats::Message) -> Option<(u16, String)> {
        let headers = reply.headers.as_ref()?;
        let code = headers.get("Nats-Service-Error-Code")?;
        let text = headers
            .get("Nats-Service-Error")
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        Some((code.as_str().parse().unwrap_or(0), text))
    }

    /// The answer's bytes: the payload, or the whole answer from the payload bucket when the
    /// reply holds only its reference (see the module docs).
    pub async fn answer(
        js: &async_nats::jetstream::Context,
        reply: async_nats::Message,
    ) -> Result<Bytes, sink::payloads::PayloadError> {
        #[derive(serde::Deserialize)]
        struct ByReference {
            payload_ref: chunk_model::PayloadRef,
        }
        match serde_json::from_slice::<ByReference>(&reply.payload) {
            Ok(r) => Ok(sink::payloads::fetch(js, &r.payload_ref).await?.into()),
            Err(_) => Ok(reply.payload),
        }
    }
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_subjects_parse_under_plain_and_partition_prefixes() {
        assert_eq!(
            parse_message_subject("toolstream", "toolstream.query.message.c1.m1").unwrap(),
            ("c1".to_string(), "m1".to_string())
        );
        assert_eq!(
            parse_message_subject("toolstream.p.2", "toolstream.p.2.query.message.c.m").unwrap(),
            ("c".to_string(), "m".to_string())
        );
        for bad in [
            "toolstream.query.message.c1",
            "toolstream.query.history.c1",
            "other.query.message.c.m",
        ] {
            let err = parse_message_subject("toolstream", bad).unwrap_err();
            assert_eq!(err.code(), 400, "{bad}");
        }
    }

    #[test]
    fn partitioned_workers_serve_queries_under_their_partition() {
        assert_eq!(query_prefix("toolstream", 1, 0), "toolstream");
        assert_eq!(query_prefix("toolstream", 4, 3), "toolstream.p.3");
        let prefix = query_prefix("toolstream", 4, 3);
        assert_eq!(
            parse_history_subject(&prefix, "toolstream.p.3.query.history.c1").unwrap(),
            "c1"
        );
    }

    #[test]
    fn history_subject_names_one_conversation() {
        assert_eq!(
            parse_history_subject("toolstream", "toolstream.query.history.c9").unwrap(),
            "c9"
        );
        assert!(parse_history_subject("toolstream", "toolstream.query.history.").is_err());
    }

    #[test]
    fn empty_history_body_means_openai_chat_with_defaults() {
        let r = parse_history_body(b"  ").unwrap();
        assert_eq!(r.target, HistoryFormat::OpenaiChat);
        assert_eq!(r.options, HistoryOptions::default());
        let r = parse_history_body(br#"{"max_result_chars":800}"#).unwrap();
        assert_eq!(r.target, HistoryFormat::OpenaiChat);
        assert_eq!(r.options.max_result_chars, 800);
        let r = parse_history_body(br#"{"target":"anthropic"}"#).unwrap();
        assert_eq!(r.target, HistoryFormat::Anthropic);
    }

    #[test]
    fn misspelt_history_options_are_refused_not_defaulted() {
        let err = parse_history_body(br#"{"max_results_chars":800}"#).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.to_string().contains("max_results_chars"));
        for bad in [&b"[1]"[..], b"{", br#"{"target":"nope"}"#] {
            assert_eq!(parse_history_body(bad).unwrap_err().code(), 400);
        }
    }

    #[test]
    fn service_errors_are_single_line_with_codes() {
        let err = QueryError::BadBody("line one\nline two".into());
        let se = err.to_service_error();
        assert_eq!(se.code, 400);
        assert!(!se.status.contains('\n'));
        let err = QueryError::UnknownMessage {
            conversation: "c".into(),
            message: "m".into(),
        };
        assert_eq!(err.to_service_error().code, 404);
    }

    #[test]
    fn unknown_conversation_history_is_404_not_empty() {
        let req = parse_history_body(b"").unwrap();
        let err = render_history("c-unknown", &[], &req).unwrap_err();
        assert_eq!(err.code(), 404);
    }
}

/// The lease fence of a leased partition's query service, against a real nats-server.
#[cfg(test)]
mod fence_tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use toolstream_testkit::NatsServer;

    struct Lease(AtomicBool);

    impl sink::guarded::Guard for Lease {
        fn is_valid(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn owner(&self) -> String {
            "w/1".into()
        }
    }

    /// The service error code of a reply, `None` for an answer without one.
    fn code(reply: &async_nats::Message) -> Option<String> {
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|v| v.as_str().to_string())
    }

    #[tokio::test]
    async fn a_deposed_owners_query_service_answers_nothing_from_its_store_and_stops() {
        let server = NatsServer::start().expect("nats-server");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = async_nats::jetstream::new(client.clone());
        let store =
            Arc::new(assembler::Store::open_memory(assembler::Config::default()).expect("store"));
        let lease = Arc::new(Lease(AtomicBool::new(true)));
        let (_stop, shutdown) = watch::channel(false);
        let serving = tokio::spawn(serve(
            client.clone(),
            store,
            sink::payloads::Payloads::new(js, sink::payloads::BUCKET, 1),
            "toolstream.p.0".into(),
            Arc::new(crate::serve::http::Health::default()),
            Some(lease.clone() as Arc<dyn sink::guarded::Guard>),
            shutdown,
        ));
        let subject = "toolstream.p.0.query.message.c.m";
        let ask = || async {
            tokio::time::timeout(
                Duration::from_secs(5),
                client.request(subject, Bytes::new()),
            )
            .await
            .expect("an answer or a refusal in time")
        };
        // the owner answers from its store (this message is unknown there: 404)
        let mut answered = None;
        for _ in 0..50 {
            if let Ok(reply) = ask().await {
                answered = Some(reply);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let answered = answered.expect("the service answers while the lease holds");
        assert_eq!(code(&answered).as_deref(), Some("404"));

        // the lease lapses: no answer from this store any more (a 503 "ask again" while
        // the service is still up, then no responder at all), and the service ends
        lease.0.store(false, Ordering::SeqCst);
        match ask().await {
            Ok(reply) => assert_eq!(code(&reply).as_deref(), Some("503"), "{reply:?}"),
            Err(e) => assert_eq!(
                e.kind(),
                async_nats::client::RequestErrorKind::NoResponders,
                "{e}"
            ),
        }
        let ended = tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("the service stops once the lease no longer holds");
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
        let after = ask().await;
        assert!(
            after.is_err() || code(after.as_ref().unwrap()).as_deref() == Some("503"),
            "{after:?}"
        );
    }
}
