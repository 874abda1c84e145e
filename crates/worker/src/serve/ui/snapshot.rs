//! `GET /v1/conversations/{conv}/messages/{msg}`: the stored snapshot (the query service's
//! answer, asked over NATS, so the worker whose partition holds the message answers) with the
//! `offset` of the last event it reflects: a page renders the snapshot, then subscribes with
//! `after=offset` and sees each event it did not already show exactly once.
//!
//! How the offset is made exact (docs/contracts.md, "HTTP API for UIs"). Let `L(t)` be the
//! sequence of the last event on the message's subject at time `t`.
//! 1. `L1 = L(before)`; the snapshot `S`; `L2 = L(after)`. If `L1 != L2` an event was published
//!    meanwhile: start again. Otherwise no event was published while `S` was read.
//! 2. Every event with sequence `<= L1` is reflected by `S`: the relay publishes an event only
//!    after the commit that produced it is durable, and `S` is read from the store after that
//!    publication.
//! 3. `S` reflects no event after `L1`: the events a snapshot implies are known from it (event
//!    ids are deterministic: `tool_call.started` for each call with a name, its terminal event
//!    for each ended call, `tool_result.completed` / `tool_result.orphaned` for each result,
//!    `message.completed` when completed). They must all be among the events `<= L1`; when one
//!    is not, it was committed and not yet published (the outbox): wait and start again, up to
//!    `ui.snapshot_timeout` (then 503, ask again).
//!
//! So the events after `offset = L1` are exactly those `S` does not show.

use super::{Api, ApiError};
use async_nats::jetstream;
use chunk_model::{event_id, CallStatus, EventSubject, EventType, MessageSnapshot, MessageStatus};
use futures::StreamExt;
use std::collections::HashSet;
use std::time::Duration;

/// How long one query or stream read may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The body of a 200: `{conversation_id, message_id, offset, snapshot}`.
pub(crate) async fn answer(
    api: &Api,
    conversation: &str,
    message: &str,
) -> Result<serde_json::Value, ApiError> {
    let subject = api.subjects.events(conversation, message);
    let deadline = tokio::time::Instant::now() + api.config.snapshot_timeout.get();
    loop {
        let before = last_sequence(api, &subject).await?;
        let raw = ask_snapshot(api, conversation, message).await?;
        let after = last_sequence(api, &subject).await?;
        let why = if before == after {
            let snapshot: MessageSnapshot = serde_json::from_value(raw.clone()).map_err(|e| {
                ApiError::new(
                    502,
                    "bad_snapshot",
                    format!("the query service's answer: {e}"),
                )
            })?;
            let published = event_ids_up_to(api, &subject, before).await?;
            let missing: Vec<String> = implied_event_ids(&snapshot)
                .into_iter()
                .filter(|id| !published.contains(id))
                .collect();
            if missing.is_empty() {
                return Ok(serde_json::json!({
                    "conversation_id": conversation,
                    "message_id": message,
                    "offset": before,
                    "snapshot": raw,
                }));
            }
            format!(
                "{} event(s) the snapshot reflects are not on the events stream yet (the outbox)",
                missing.len()
            )
        } else {
            format!("events were published while the snapshot was read ({before} → {after})")
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::new(
                503,
                "snapshot_not_settled",
                format!("no consistent snapshot within ui.snapshot_timeout: {why}; ask again"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids of the events a snapshot reflects (see the module doc, step 3).
pub(crate) fn implied_event_ids(s: &MessageSnapshot) -> Vec<String> {
    let (conv, msg) = (s.conversation_id.as_str(), s.message_id.as_str());
    let mut ids = Vec::new();
    for call in &s.calls {
        let index = call.tool_call.index;
        if !call.tool_call.name.is_empty() {
            ids.push(event_id(
                conv,
                msg,
                EventSubject::Call(index),
                EventType::ToolCallStarted,
            ));
        }
        let terminal = match call.status {
            CallStatus::Streaming => None,
            CallStatus::Completed => Some(EventType::ToolCallCompleted),
            CallStatus::Invalid => Some(EventType::ToolCallInvalid),
            CallStatus::Abandoned => Some(EventType::ToolCallAbandoned),
        };
        if let Some(ty) = terminal {
            ids.push(event_id(conv, msg, EventSubject::Call(index), ty));
        }
    }
    for r in &s.tool_results {
        ids.push(event_id(
            conv,
            msg,
            EventSubject::Result(&r.tool_call_id),
            EventType::ToolResultCompleted,
        ));
    }
    for r in &s.orphaned_results {
        ids.push(event_id(
            conv,
            msg,
            EventSubject::Result(&r.tool_call_id),
            EventType::ToolResultOrphaned,
        ));
    }
    if s.status == MessageStatus::Completed {
        ids.push(event_id(
            conv,
            msg,
            EventSubject::Message,
            EventType::MessageCompleted,
        ));
    }
    ids
}

fn unavailable(what: String) -> ApiError {
    ApiError::new(503, "events_stream_unavailable", what)
}

/// The sequence of the last event on `subject` (0 when there is none).
pub(crate) async fn last_sequence(api: &Api, subject: &str) -> Result<u64, ApiError> {
    let stream = api
        .js
        .get_stream_no_info(&api.events_stream)
        .await
        .map_err(|e| unavailable(format!("events stream {}: {e}", api.events_stream)))?;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok(m.sequence),
        Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(unavailable(format!("the last event on {subject}: {e}"))),
    }
}

/// The `event_id`s of the events on `subject` up to sequence `last` (inclusive).
async fn event_ids_up_to(api: &Api, subject: &str, last: u64) -> Result<HashSet<String>, ApiError> {
    let mut ids = HashSet::new();
    read_up_to(api, subject, last, |_, payload| {
        if let Some(id) = serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|v| {
                v.get("event_id")
                    .and_then(|i| i.as_str())
                    .map(str::to_string)
            })
        {
            ids.insert(id);
        }
    })
    .await?;
    Ok(ids)
}

/// Hands each event on `subject` up to sequence `last` (inclusive) to `each` as (sequence,
/// payload as published), in stream order; nothing when `last` is 0. Ends at the first event
/// past `last` or when none is left; bounded by [`ASK_TIMEOUT`].
pub(crate) async fn read_up_to(
    api: &Api,
    subject: &str,
    last: u64,
    mut each: impl FnMut(u64, &[u8]),
) -> Result<(), ApiError> {
    if last == 0 {
        return Ok(());
    }
    let stream = api
        .js
        .get_stream_no_info(&api.events_stream)
        .await
        .map_err(|e| unavailable(format!("events stream {}: {e}", api.events_stream)))?;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable(format!("reading {subject}: {e}")))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| unavailable(format!("reading {subject}: {e}")))?;
    let read = async {
        while let Some(next) = messages.next().await {
            let message = next.map_err(|e| unavailable(format!("reading {subject}: {e}")))?;
            let info = message
                .info()
                .map_err(|e| unavailable(format!("reading {subject}: {e}")))?;
            let (seq, pending) = (info.stream_sequence, info.pending);
            if seq > last {
                break;
            }
            each(seq, &message.payload);
            // `pending` 0: nothing more on the subject (events up to `last` deleted by limits)
            if seq == last || pending == 0 {
                break;
            }
        }
        Ok::<(), ApiError>(())
    };
    tokio::time::timeout(ASK_TIMEOUT, read)
        .await
        .map_err(|_| unavailable(format!("reading {subject} up to {last} took too long")))?
}

/// Asks the query service for the snapshot; its error codes become the answer's status, a
/// reply by reference is fetched whole.
async fn ask_snapshot(
    api: &Api,
    conversation: &str,
    message: &str,
) -> Result<serde_json::Value, ApiError> {
    let subject = api.subjects.query_message(conversation, message);
    let reply = tokio::time::timeout(
        ASK_TIMEOUT,
        api.client.request(subject.clone(), bytes::Bytes::new()),
    )
    .await
    .map_err(|_| {
        ApiError::new(
            504,
            "query_timeout",
            format!("the query service did not answer within {ASK_TIMEOUT:?}"),
        )
    })?
    .map_err(|e| match e.kind() {
        async_nats::RequestErrorKind::NoResponders => ApiError::new(
            503,
            "query_service_unavailable",
            "no worker answers queries for this conversation right now",
        ),
        _ => ApiError::new(
            503,
            "query_service_unavailable",
            format!("asking {subject}: {e}"),
        ),
    })?;
    if let Some((status, why)) = crate::serve::query::reply::service_error(&reply) {
        let (status, code) = match status {
            404 => (404, "unknown_message"),
            400 => (400, "bad_request"),
            _ => (502, "query_failed"),
        };
        return Err(ApiError::new(status, code, why));
    }
    let body = crate::serve::query::reply::answer(&api.js, reply)
        .await
        .map_err(|e| ApiError::new(502, "query_failed", format!("the stored answer: {e}")))?;
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            502,
            "bad_snapshot",
            format!("the query service's answer: {e}"),
        )
    })
}
