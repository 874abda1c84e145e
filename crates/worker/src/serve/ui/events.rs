//! `GET /v1/conversations/{conv}/events`: the conversation's events as Server-Sent Events, read
//! from the events stream through an ordered consumer (ephemeral, no acks) filtered on
//! `<prefix>.events.<conv>.>` (or `.<msg>` with `?message=`), so any worker serves any
//! conversation and the consume loop is never involved.
//!
//! Each frame is `id: <stream sequence>`, `event: <type>`, `data: <the event as published>`.
//! `Last-Event-ID` (what `EventSource` sends on a reconnect; it wins over the URL) or
//! `?after=N` resumes strictly after N: the consumer starts at stream sequence N + 1, so a
//! client that resumes with the last id it saw sees every later event once.
//!
//! A resumed `ai-sdk` / `ag-ui` stream continues where a stream read from the start would be
//! at N: before the consumer starts, the message's `message.completed` and results up to N are
//! read ([`resume_state`]), so a message already done at N ends at once the way the format ends
//! a finished message (`start`, `start-step`, `finish-step`, `finish`, `[DONE]`; `RUN_STARTED`,
//! `RUN_FINISHED`), and one completed at or before N whose last result comes after N ends with
//! that result. A `toolstream` stream never ends on its own (resumed or not, with `?message=`
//! or not): it is the events as published, and results can still come after
//! `message.completed`; the client knows from the `message.completed` it already has.
//!
//! Never a silent skip: an `after` older than what the stream still holds is 410 before the
//! stream starts; on a stream with limits (age, count, size) an event of this conversation
//! deleted before it was sent ends the stream with an `error` event (`behind`) naming the last
//! id sent. A client that takes no write for `ui.write_timeout` is closed; it resumes with
//! `Last-Event-ID`. Idle streams get a comment every `ui.heartbeat`.

use super::formats::{self, Format, Translator};
use super::{cors_headers, snapshot, write_error, Api, ApiError, Request};
use crate::serve::metrics::Metrics;
use async_nats::jetstream;
use futures::StreamExt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// What the client asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StreamRequest {
    /// Only this message's events.
    pub(crate) message: Option<String>,
    /// Resume strictly after this stream sequence (0 = from the start).
    pub(crate) after: u64,
    /// The wire.
    pub(crate) format: Format,
}

impl StreamRequest {
    /// Reads `?message=`, `?after=` / `Last-Event-ID` and `?format=` (`ai-sdk` and `ag-ui`
    /// describe one message, so they need `?message=`).
    pub(crate) fn of(request: &Request) -> Result<StreamRequest, ApiError> {
        let format = match request.query.get("format") {
            None => Format::Toolstream,
            Some(f) => Format::parse(f).ok_or_else(|| {
                ApiError::new(
                    400,
                    "bad_format",
                    format!("format {f:?} is not served: toolstream, ai-sdk or ag-ui"),
                )
            })?,
        };
        let message = match request.query.get("message") {
            Some(m) => Some(super::id_param("message", m)?),
            None => None,
        };
        if format != Format::Toolstream && message.is_none() {
            return Err(ApiError::new(
                400,
                "message_required",
                "formats ai-sdk and ag-ui stream one message: add ?message=<msg>",
            ));
        }
        let parse = |what: &str, v: &str| {
            v.trim().parse::<u64>().map_err(|_| {
                ApiError::new(
                    400,
                    "bad_after",
                    format!("{what} must be an event id (a stream sequence, 0 or more), not {v:?}"),
                )
            })
        };
        let after = match (request.header("last-event-id"), request.query.get("after")) {
            (Some(id), _) if !id.trim().is_empty() => parse("Last-Event-ID", id)?,
            (_, Some(after)) => parse("after", after)?,
            _ => 0,
        };
        Ok(StreamRequest {
            message,
            after,
            format,
        })
    }
}

/// Serves one event stream until the client leaves, the worker stops or the stream fails.
pub(crate) async fn serve(
    api: &Api,
    mut stream: TcpStream,
    request: &Request,
    conversation: &str,
    cors: Option<&str>,
) -> std::io::Result<()> {
    let wanted = match StreamRequest::of(request) {
        Ok(w) => w,
        Err(e) => return write_error(&mut stream, &e, cors).await,
    };
    let counts = &api.metrics.ui_streams;
    // the permit lives as long as the stream
    let Ok(_permit) = api.streams.clone().try_acquire_owned() else {
        Metrics::add(&counts.rejected_limit, 1);
        let e = ApiError::new(
            503,
            "too_many_streams",
            format!(
                "this worker serves at most {} event streams (ui.max_streams); try again or another worker",
                api.config.max_streams
            ),
        );
        return write_error(&mut stream, &e, cors).await;
    };
    let mut translator = Translator::new(
        wanted.format,
        conversation,
        wanted.message.as_deref().unwrap_or_default(),
    );
    let (consumer_messages, limited) = match open(api, conversation, &wanted).await {
        Ok(opened) => opened,
        Err(e) => return write_error(&mut stream, &e, cors).await,
    };
    if let Err(e) = resume_state(api, conversation, &wanted, &mut translator).await {
        return write_error(&mut stream, &e, cors).await;
    }
    let mut head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
         Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n{}{}Connection: close\r\n\r\n\
         retry: 1000\n: toolstream events of {conversation} after {}\n\n",
        cors_headers(cors),
        if wanted.format == Format::AiSdk {
            "x-vercel-ai-ui-message-stream: v1\r\n"
        } else {
            ""
        },
        wanted.after
    );
    for part in translator.opening() {
        head.push_str(&format!("data: {part}\n\n"));
    }
    let (mut read, write) = stream.into_split();
    let _open = counts.opened();
    let mut session = Session {
        api,
        write,
        write_timeout: api.config.write_timeout.get(),
        last_sent: wanted.after,
        limited,
        translator_format: wanted.format,
        translator,
    };
    let outcome = match session.send(head.as_bytes()).await {
        // already done where it resumed: ended like a message that finishes now
        Ok(()) if session.translator.done() => session.finish().await,
        Ok(()) => session.pump(consumer_messages, &mut read).await,
        Err(e) => Err(e),
    };
    if let Err(e) = &outcome {
        tracing::debug!(conversation, error = %e, "event stream ended");
    }
    let _ = session.write.shutdown().await;
    Ok(())
}

/// The ordered consumer's messages.
type Messages = jetstream::consumer::pull::Ordered;

/// For an `ai-sdk` / `ag-ui` stream resumed after N (`wanted.after`): tells `translator` what
/// the message's events up to N said about its end (the `message.completed` and the results;
/// their parts were sent before and are not sent again), so [`Translator::done`] is what it
/// would be at N on a stream read from the start. Without it a stream resumed after the
/// message's `message.completed` never saw it, and waited forever for the end.
async fn resume_state(
    api: &Api,
    conversation: &str,
    wanted: &StreamRequest,
    translator: &mut Translator,
) -> Result<(), ApiError> {
    let Some(message) = &wanted.message else {
        return Ok(());
    };
    if wanted.format == Format::Toolstream || wanted.after == 0 {
        return Ok(());
    }
    let subject = api.subjects.events(conversation, message);
    let last = snapshot::last_sequence(api, &subject)
        .await?
        .min(wanted.after);
    let mut ends = Vec::new();
    snapshot::read_up_to(api, &subject, last, |seq, payload| {
        let ty = serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|e| e.get("type").and_then(|t| t.as_str()).map(str::to_string));
        if matches!(
            ty.as_deref(),
            Some("message.completed" | "tool_result.completed")
        ) {
            ends.push((seq, payload.to_vec()));
        }
    })
    .await?;
    for (seq, payload) in ends {
        let event = whole_event(&api.js, seq, &payload)
            .await
            .map_err(|e| ApiError::new(503, "events_stream_unavailable", e))?;
        // the parts were sent on the stream the client resumes; only the state is kept
        let _ = translator.translate(&event);
    }
    Ok(())
}

/// The event published at `seq`, whole: fetched from the payload bucket when it was published
/// by reference (`payload_ref`).
async fn whole_event(
    js: &jetstream::Context,
    seq: u64,
    payload: &[u8],
) -> Result<serde_json::Value, String> {
    let event: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("event {seq} is not JSON ({e})"))?;
    let Some(reference) = event.get("payload_ref").cloned() else {
        return Ok(event);
    };
    let reference: chunk_model::PayloadRef =
        serde_json::from_value(reference).map_err(|e| format!("event {seq}: payload_ref ({e})"))?;
    let whole = sink::payloads::fetch(js, &reference)
        .await
        .map_err(|e| format!("event {seq} published by reference: {e}"))?;
    serde_json::from_slice(&whole)
        .map_err(|e| format!("event {seq} stored by reference is not JSON ({e})"))
}

/// Checks `after` against the stream and opens the ordered consumer; also says whether the
/// stream has limits that can delete events before they are read.
async fn open(
    api: &Api,
    conversation: &str,
    wanted: &StreamRequest,
) -> Result<(Messages, bool), ApiError> {
    let unavailable = |e: String| ApiError::new(503, "events_stream_unavailable", e);
    let mut events = api
        .js
        .get_stream(&api.events_stream)
        .await
        .map_err(|e| unavailable(format!("events stream {}: {e}", api.events_stream)))?;
    let info = events
        .info()
        .await
        .map_err(|e| unavailable(format!("events stream {}: {e}", api.events_stream)))?;
    let state = &info.state;
    if wanted.after > state.last_sequence {
        return Err(ApiError::new(
            400,
            "bad_after",
            format!(
                "event id {} is beyond the events stream's last sequence {}",
                wanted.after, state.last_sequence
            ),
        ));
    }
    if wanted.after > 0 && state.first_sequence > wanted.after + 1 {
        return Err(ApiError::new(
            410,
            "gone",
            format!(
                "events after {} are no longer all on the events stream (it starts at {}): \
                 reload the snapshot (GET …/messages/{{msg}}) and resume from its offset",
                wanted.after, state.first_sequence
            ),
        ));
    }
    let c = &info.config;
    let limited = c.max_age != Duration::ZERO
        || c.max_messages > 0
        || c.max_bytes > 0
        || c.max_messages_per_subject > 0;
    let filter = match &wanted.message {
        Some(m) => api.subjects.events(conversation, m),
        None => api.subjects.events_filter(Some(conversation)),
    };
    let deliver_policy = if wanted.after == 0 {
        jetstream::consumer::DeliverPolicy::All
    } else {
        jetstream::consumer::DeliverPolicy::ByStartSequence {
            start_sequence: wanted.after + 1,
        }
    };
    let consumer = events
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: filter,
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable(format!("reading the events stream: {e}")))?;
    let messages = consumer
        .messages()
        .await
        .map_err(|e| unavailable(format!("reading the events stream: {e}")))?;
    Ok((messages, limited))
}

/// One open event stream.
struct Session<'a> {
    api: &'a Api,
    write: OwnedWriteHalf,
    write_timeout: Duration,
    /// The id of the last event sent (or the `after` it started from).
    last_sent: u64,
    /// The events stream can delete events on its own (limits).
    limited: bool,
    /// Events into the client's format.
    translator: Translator,
    translator_format: Format,
}

impl Session<'_> {
    /// Sends events and heartbeats until something ends the stream.
    async fn pump(
        &mut self,
        mut messages: Messages,
        read: &mut tokio::net::tcp::OwnedReadHalf,
    ) -> anyhow::Result<()> {
        let beat = self.api.config.heartbeat.get();
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
        let mut shutdown = self.api.shutdown.clone();
        let mut scratch = [0u8; 512];
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => {
                    self.send_error("shutting_down", "the worker is stopping: resume with Last-Event-ID").await?;
                    return Ok(());
                }
                n = read.read(&mut scratch) => match n {
                    // the client left (or sent something: a request body is not expected)
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(_) => continue,
                },
                _ = heartbeat.tick() => {
                    self.send(b": keep-alive\n\n").await?;
                }
                next = messages.next() => match next {
                    None => {
                        self.send_error("stream_ended", "the events stream ended: resume with Last-Event-ID").await?;
                        return Ok(());
                    }
                    Some(Err(e)) => {
                        self.send_error("events_stream_error", &format!("reading the events stream failed ({e}): resume with Last-Event-ID")).await?;
                        return Ok(());
                    }
                    Some(Ok(message)) => {
                        let seq = match message.info() {
                            Ok(info) => info.stream_sequence,
                            Err(e) => {
                                self.send_error("events_stream_error", &format!("a message without metadata ({e}): resume with Last-Event-ID")).await?;
                                return Ok(());
                            }
                        };
                        if seq <= self.last_sent {
                            // an ordered consumer's reset can deliver again what was sent
                            continue;
                        }
                        if self.limited && seq > self.last_sent + 1 && !self.nothing_deleted().await? {
                            return Ok(());
                        }
                        let frame = match self.translator_frames(seq, &message.payload).await {
                            Ok(frame) => frame,
                            Err(why) => {
                                self.send_error("events_stream_error", &why).await?;
                                return Ok(());
                            }
                        };
                        self.send(frame.as_bytes()).await?;
                        self.last_sent = seq;
                        heartbeat.reset();
                        if self.translator.done() {
                            return self.finish().await;
                        }
                    }
                }
            }
        }
    }

    /// On a stream with limits, whether every sequence between the last sent and now is still
    /// stored or never was ours: limits delete from the front, so when the stream still starts
    /// at or before `last_sent + 1`, nothing the consumer passed was deleted. Otherwise the
    /// client is told (`behind`) and `false` returned.
    async fn nothing_deleted(&mut self) -> anyhow::Result<bool> {
        let first = match self.api.js.get_stream(&self.api.events_stream).await {
            Ok(mut s) => match s.info().await {
                Ok(info) => Some(info.state.first_sequence),
                Err(_) => None,
            },
            Err(_) => None,
        };
        match first {
            Some(first) if first <= self.last_sent + 1 => Ok(true),
            Some(first) => {
                Metrics::add(&self.api.metrics.ui_streams.closed_behind, 1);
                self.send_error(
                    "behind",
                    &format!(
                        "the events stream deleted events after {} (it starts at {first}) before \
                         they were sent: reload the snapshot and resume from its offset",
                        self.last_sent
                    ),
                )
                .await?;
                Ok(false)
            }
            None => {
                self.send_error(
                    "events_stream_error",
                    "cannot check the events stream's first sequence: resume with Last-Event-ID",
                )
                .await?;
                Ok(false)
            }
        }
    }

    fn format(&self) -> Format {
        self.translator_format
    }

    /// Ends a done message the format's way (`finish-step`, `finish`, `[DONE]`;
    /// `RUN_FINISHED`).
    async fn finish(&mut self) -> anyhow::Result<()> {
        let mut end = String::new();
        for part in self.translator.closing() {
            end.push_str(&format!("data: {part}\n\n"));
        }
        if self.format() == Format::AiSdk {
            end.push_str("data: [DONE]\n\n");
        }
        self.send(end.as_bytes()).await?;
        Ok(())
    }

    /// Writes within `ui.write_timeout`; a client that took no write for that long fell
    /// behind (counted) and the stream ends.
    async fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match send(&mut self.write, bytes, self.write_timeout).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    Metrics::add(&self.api.metrics.ui_streams.closed_behind, 1);
                }
                Err(e.into())
            }
        }
    }

    /// One event's frames in the client's format; a format other than `toolstream` reads the
    /// whole event (fetched from the payload bucket when it was published by reference).
    async fn translator_frames(&mut self, seq: u64, payload: &[u8]) -> Result<String, String> {
        if self.format() == Format::Toolstream {
            return Ok(frame(seq, payload));
        }
        let event = whole_event(&self.api.js, seq, payload).await?;
        let parts = self.translator.translate(&event);
        Ok(formats::frames(seq, &parts))
    }

    /// An error (no id: it is not an event of the stream), then the caller closes: an `error`
    /// event in `toolstream`, the format's own error part otherwise.
    async fn send_error(&mut self, code: &str, message: &str) -> anyhow::Result<()> {
        let text = if self.format() == Format::Toolstream {
            let body = serde_json::json!({
                "error": code,
                "message": message,
                "last_event_id": self.last_sent,
            });
            format!("event: error\ndata: {body}\n\n")
        } else {
            let message = format!("{message} (last event id {})", self.last_sent);
            format!("data: {}\n\n", self.translator.error(code, &message))
        };
        self.send(text.as_bytes()).await
    }
}

/// Completes when shutdown is asked for or the sender is gone (the `watch::Ref` is dropped
/// inside, so the future stays `Send`).
async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// `id:`, `event:` (the event's type) and `data:` lines of one event.
fn frame(seq: u64, payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let ty = serde_json::from_slice::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .filter(|t| t.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "message".to_string());
    let mut out = format!("id: {seq}\nevent: {ty}\n");
    // published events are one line; a newline would end the data field, so split on it
    for line in text.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Writes and flushes within `limit`; a client that does not read for that long is an error.
async fn send(write: &mut OwnedWriteHalf, bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    match tokio::time::timeout(limit, async {
        write.write_all(bytes).await?;
        write.flush().await
    })
    .await
    {
        Ok(done) => done,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client took no write within ui.write_timeout",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(head: &str) -> Request {
        Request::parse(head).unwrap()
    }

    #[test]
    fn last_event_id_wins_over_after_and_bad_values_are_400() {
        let r = req("GET /v1/conversations/c/events?after=5 HTTP/1.1\r\nLast-Event-ID: 9\r\n\r\n");
        assert_eq!(StreamRequest::of(&r).unwrap().after, 9);
        let r = req("GET /v1/conversations/c/events?after=5&message=m1 HTTP/1.1\r\n\r\n");
        assert_eq!(
            StreamRequest::of(&r).unwrap(),
            StreamRequest {
                message: Some("m1".into()),
                after: 5,
                format: Format::Toolstream,
            }
        );
        for bad in [
            "GET /e?after=-1 HTTP/1.1\r\n\r\n",
            "GET /e?after=x HTTP/1.1\r\n\r\n",
            "GET /e HTTP/1.1\r\nLast-Event-ID: abc\r\n\r\n",
        ] {
            let e = StreamRequest::of(&req(bad)).unwrap_err();
            assert_eq!((e.status, e.code.as_str()), (400, "bad_after"), "{bad}");
        }
        let e = StreamRequest::of(&req("GET /e?format=nope HTTP/1.1\r\n\r\n")).unwrap_err();
        assert_eq!(e.code, "bad_format");
        let e = StreamRequest::of(&req("GET /e?format=ai-sdk HTTP/1.1\r\n\r\n")).unwrap_err();
        assert_eq!(e.code, "message_required");
        let r = req("GET /e?format=ag-ui&message=m HTTP/1.1\r\n\r\n");
        assert_eq!(StreamRequest::of(&r).unwrap().format, Format::AgUi);
        let e = StreamRequest::of(&req("GET /e?message=a.b HTTP/1.1\r\n\r\n")).unwrap_err();
        assert_eq!(e.code, "bad_message");
    }

    #[test]
    fn a_frame_carries_the_sequence_the_type_and_the_event_unchanged() {
        let event = br#"{"type":"tool_call.completed","event_id":"ev_1"}"#;
        assert_eq!(
            frame(42, event),
            "id: 42\nevent: tool_call.completed\ndata: {\"type\":\"tool_call.completed\",\"event_id\":\"ev_1\"}\n\n"
        );
        assert_eq!(
            frame(1, b"a\nb"),
            "id: 1\nevent: message\ndata: a\ndata: b\n\n"
        );
    }
}
