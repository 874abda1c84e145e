//! The HTTP API for UIs (docs/contracts.md, "HTTP API for UIs"), on the worker's HTTP listener
//! next to `/metrics` and `/healthz`:
//!
//! - `GET /v1/conversations/{conv}/events` — Server-Sent Events of the conversation's events,
//!   read from the events stream (any worker serves any conversation); [`events`].
//! - `GET /ui/` — a live page over the event stream ([`PAGE`]).
//! - `GET /v1/conversations/{conv}/messages/{msg}` — the stored snapshot (the query service's
//!   answer, asked over NATS so the partition that holds it answers) with the `offset` of the
//!   last event it reflects; [`snapshot`].
//!
//! Nothing here touches the store or the consume loop: events come from JetStream, snapshots
//! from the query service.
//!
//! The room: `mod.rs` (the request: route, query string, headers, auth, CORS, JSON errors),
//! `events.rs` (the event stream), `formats.rs` (`?format=ai-sdk|ag-ui`), `snapshot.rs`
//! (snapshot + offset).

pub(crate) mod events;
pub(crate) mod formats;
pub(crate) mod snapshot;

use crate::run::config::UiConfig;
use crate::serve::metrics::Metrics;
use async_nats::jetstream;
use chunk_model::wire::Subjects;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};

/// The live page served at `/ui/` (plain HTML and JavaScript, no build step): it follows a
/// conversation's event stream, resumes after a dropped connection, and shows the same after a
/// reload (the stream is replayed from its start).
pub const PAGE: &str = include_str!("page.html");

/// What the `/v1` routes need; one per worker, shared by every connection.
pub struct Api {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) subjects: Subjects,
    pub(crate) events_stream: String,
    pub(crate) config: UiConfig,
    /// Whether the listener is a loopback address (no token needed there).
    pub(crate) loopback: bool,
    pub(crate) streams: Arc<Semaphore>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Where the event streams are counted (`toolstream_ui_streams_*`): the worker's metrics
    /// after [`Api::with_metrics`], counts nobody renders before.
    pub(crate) metrics: Arc<Metrics>,
}

impl Api {
    /// The API for a worker with these settings; `loopback` says whether the listener is on a
    /// loopback address.
    pub fn new(
        client: async_nats::Client,
        subject_prefix: &str,
        events_stream: &str,
        config: UiConfig,
        loopback: bool,
        shutdown: watch::Receiver<bool>,
    ) -> Api {
        let js = jetstream::new(client.clone());
        let streams = Arc::new(Semaphore::new(config.max_streams));
        Api {
            client,
            js,
            subjects: Subjects::new(subject_prefix),
            events_stream: events_stream.to_string(),
            config,
            loopback,
            streams,
            shutdown,
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Counts the event streams in `metrics` (the worker's, rendered on `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Api {
        self.metrics = metrics;
        self
    }

    /// Answers one request whose path starts with `/v1/` (the caller read its head).
    pub async fn handle(&self, mut stream: TcpStream, head: &str) -> std::io::Result<()> {
        let request = match Request::parse(head) {
            Some(r) => r,
            None => {
                let e = ApiError::new(400, "bad_request", "malformed request line");
                return write_error(&mut stream, &e, None).await;
            }
        };
        let cors = self.cors_origin(&request);
        if request.method == "OPTIONS" {
            return self.preflight(&mut stream, &request, cors.as_deref()).await;
        }
        if request.method != "GET" {
            let e = ApiError::new(405, "method_not_allowed", "only GET (and OPTIONS)");
            return write_error(&mut stream, &e, cors.as_deref()).await;
        }
        if let Err(e) = self.authorize(&request) {
            if matches!(Route::of(&request.path), Ok(Route::Events { .. })) {
                Metrics::add(&self.metrics.ui_streams.rejected_auth, 1);
            }
            return write_error(&mut stream, &e, cors.as_deref()).await;
        }
        match Route::of(&request.path) {
            Ok(Route::Events { conversation }) => {
                events::serve(self, stream, &request, &conversation, cors.as_deref()).await
            }
            Ok(Route::Message {
                conversation,
                message,
            }) => match snapshot::answer(self, &conversation, &message).await {
                Ok(body) => write_json(&mut stream, 200, &body, cors.as_deref(), &[]).await,
                Err(e) => write_error(&mut stream, &e, cors.as_deref()).await,
            },
            Err(e) => write_error(&mut stream, &e, cors.as_deref()).await,
        }
    }

    /// The token check: a configured token is always required; without one, only a loopback
    /// listener serves.
    fn authorize(&self, request: &Request) -> Result<(), ApiError> {
        let Some(token) = &self.config.token else {
            if self.loopback {
                return Ok(());
            }
            return Err(ApiError::new(
                403,
                "auth_not_configured",
                "ui.token is not set and the listener is not a loopback address: set a token to \
                 serve /v1 on this address",
            ));
        };
        let given = request
            .header("authorization")
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .or_else(|| request.query.get("access_token").map(String::as_str));
        match given {
            Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::new(401, "unauthorized", "wrong bearer token")),
            None => Err(ApiError::new(
                401,
                "unauthorized",
                "a bearer token is required (Authorization: Bearer <token>, or ?access_token=)",
            )),
        }
    }

    /// The allowed `Origin` to echo, if the request has one that the config allows.
    fn cors_origin(&self, request: &Request) -> Option<String> {
        let origin = request.header("origin")?;
        let allowed = self
            .config
            .cors_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin));
        allowed.then(|| origin.to_string())
    }

    /// A CORS preflight: 204 with the allowed method and headers, or 403.
    async fn preflight(
        &self,
        stream: &mut TcpStream,
        request: &Request,
        cors: Option<&str>,
    ) -> std::io::Result<()> {
        if cors.is_none() {
            let origin = request.header("origin").unwrap_or("(none)");
            let e = ApiError::new(
                403,
                "origin_not_allowed",
                format!("origin {origin} is not in ui.cors_origins"),
            );
            return write_error(stream, &e, None).await;
        }
        let head = format!(
            "HTTP/1.1 204 No Content\r\n{}Access-Control-Allow-Methods: GET, OPTIONS\r\n\
             Access-Control-Allow-Headers: Authorization, Last-Event-ID, Cache-Control\r\n\
             Access-Control-Max-Age: 600\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            cors_headers(cors)
        );
        stream.write_all(head.as_bytes()).await?;
        stream.shutdown().await
    }
}

/// The two routes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Events {
        conversation: String,
    },
    Message {
        conversation: String,
        message: String,
    },
}

impl Route {
    /// `/v1/conversations/{conv}/events` or `/v1/conversations/{conv}/messages/{msg}`; ids are
    /// percent-decoded and must be subject tokens (the contract's token rule).
    fn of(path: &str) -> Result<Route, ApiError> {
        let parts: Vec<&str> = path.split('/').collect();
        let not_found = || {
            ApiError::new(
                404,
                "not_found",
                "routes: /v1/conversations/{conv}/events, /v1/conversations/{conv}/messages/{msg}",
            )
        };
        match parts.as_slice() {
            ["", "v1", "conversations", conv, "events"] => Ok(Route::Events {
                conversation: id_param("conversation", conv)?,
            }),
            ["", "v1", "conversations", conv, "messages", msg] => Ok(Route::Message {
                conversation: id_param("conversation", conv)?,
                message: id_param("message", msg)?,
            }),
            _ => Err(not_found()),
        }
    }
}

/// A percent-decoded id that is a valid subject token.
pub(crate) fn id_param(what: &str, raw: &str) -> Result<String, ApiError> {
    let bad = |why: String| ApiError::new(400, format!("bad_{what}"), why);
    let id = percent_decode(raw).ok_or_else(|| bad(format!("the {what} id is not UTF-8")))?;
    chunk_model::wire::check_token(&id).map_err(|e| {
        bad(format!(
            "the {what} id {id:?} is not a valid subject token: {e}"
        ))
    })?;
    Ok(id)
}

/// One parsed request head.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: HashMap<String, String>,
    headers: Vec<(String, String)>,
}

impl Request {
    /// Parses the request line, the query string and the headers.
    pub(crate) fn parse(head: &str) -> Option<Request> {
        let mut lines = head.lines();
        let line = lines.next()?;
        let mut parts = line.split_ascii_whitespace();
        let method = parts.next()?.to_string();
        let target = parts.next()?;
        let version = parts.next()?;
        if !version.starts_with("HTTP/1.") || parts.next().is_some() {
            return None;
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut params = HashMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = percent_decode(&k.replace('+', " "))?;
            let v = percent_decode(&v.replace('+', " "))?;
            params.insert(k, v);
        }
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Some(Request {
            method,
            path: path.to_string(),
            query: params,
            headers,
        })
    }

    /// A header's value (name case-insensitive), the first if repeated.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `%XX` decoding; `None` when the result is not UTF-8 or an escape is broken.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Equal bytes, compared in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A refused request: status, a stable code, a message for a person.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) code: String,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// `{"error": code, "message": message}`.
    pub(crate) fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": self.code, "message": self.message})
    }
}

/// The reason phrase of the statuses the API uses.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The CORS response headers for an allowed origin (empty without one).
pub(crate) fn cors_headers(origin: Option<&str>) -> String {
    match origin {
        Some(o) => format!(
            "Access-Control-Allow-Origin: {o}\r\nVary: Origin\r\n\
             Access-Control-Expose-Headers: x-vercel-ai-ui-message-stream\r\n"
        ),
        None => String::new(),
    }
}

/// Writes a JSON response and closes.
pub(crate) async fn write_json(
    stream: &mut TcpStream,
    status: u16,
    body: &serde_json::Value,
    cors: Option<&str>,
    extra: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut text = body.to_string();
    text.push('\n');
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\n{}",
        reason(status),
        text.len(),
        cors_headers(cors),
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(text.as_bytes()).await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// Writes an [`ApiError`] as its JSON with its status.
pub(crate) async fn write_error(
    stream: &mut TcpStream,
    error: &ApiError,
    cors: Option<&str>,
) -> std::io::Result<()> {
    let extra: &[(&str, &str)] = if error.status == 401 {
        &[("WWW-Authenticate", "Bearer")]
    } else {
        &[]
    };
    write_json(stream, error.status, &error.body(), cors, extra).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_decode_ids_and_refuse_what_is_not_a_token() {
        assert_eq!(
            Route::of("/v1/conversations/c%201x/events")
                .unwrap_err()
                .code,
            "bad_conversation"
        );
        assert_eq!(
            Route::of("/v1/conversations/conv-1/events").unwrap(),
            Route::Events {
                conversation: "conv-1".into()
            }
        );
        assert_eq!(
            Route::of("/v1/conversations/k11%3Aa/messages/m~choice1").unwrap(),
            Route::Message {
                conversation: "k11:a".into(),
                message: "m~choice1".into()
            }
        );
        for bad in [
            "/v1/conversations/a.b/events",
            "/v1/conversations/%2A/events",
        ] {
            assert_eq!(Route::of(bad).unwrap_err().status, 400, "{bad}");
        }
        assert_eq!(
            Route::of("/v1/conversations/c/messages/m%ZZ")
                .unwrap_err()
                .status,
            400
        );
        for missing in [
            "/v1/conversations/c",
            "/v1/x",
            "/v1/conversations/c/events/x",
        ] {
            assert_eq!(Route::of(missing).unwrap_err().status, 404, "{missing}");
        }
    }

    #[test]
    fn request_heads_parse_query_and_headers_case_insensitively() {
        let r = Request::parse(
            "GET /v1/conversations/c/events?after=12&message=m%201&x HTTP/1.1\r\n\
             Last-Event-ID: 40\r\nAUTHORIZATION: Bearer t\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/v1/conversations/c/events");
        assert_eq!(r.query.get("after").map(String::as_str), Some("12"));
        assert_eq!(r.query.get("message").map(String::as_str), Some("m 1"));
        assert_eq!(r.query.get("x").map(String::as_str), Some(""));
        assert_eq!(r.header("last-event-id"), Some("40"));
        assert_eq!(r.header("authorization"), Some("Bearer t"));
        assert!(Request::parse("GET /x\r\n\r\n").is_none());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
