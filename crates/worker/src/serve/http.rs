//! The worker's HTTP listener: a minimal HTTP/1.1 server on tokio with the operations routes,
//! `GET /metrics` (Prometheus text format, see [`crate::serve::metrics::Metrics::render`]) and
//! `GET /healthz` (200 when connected to NATS and the store is open, 503 otherwise), and the
//! HTTP API for UIs under `/v1/` and the live page at `/ui/` ([`crate::serve::ui`], when
//! `ui.enabled`).
//!
//! Hand-rolled on purpose: a few fixed routes, one response per connection (`Connection: close`),
//! request heads capped at [`MAX_HEAD`] bytes and read under [`READ_TIMEOUT`]. A web framework
//! would be most of the binary's dependency tree for this.
//!
//! Shutdown: [`serve`] takes a `tokio::sync::watch::Receiver<bool>`; it stops accepting when the
//! value becomes `true` or the sender is dropped (the same type as `query::serve`).

use crate::serve::metrics::Metrics;
use crate::serve::ui::Api;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Largest request head (request line + headers) read before answering 431.
pub const MAX_HEAD: usize = 8 * 1024;

/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Liveness facts that `run` keeps current and `/healthz` reports.
#[derive(Debug, Default)]
pub struct Health {
    nats_connected: AtomicBool,
    store_open: AtomicBool,
    queries_served: AtomicBool,
}

impl Health {
    /// Records whether the NATS client is connected (set from the client's event callback).
    pub fn set_nats_connected(&self, connected: bool) {
        self.nats_connected.store(connected, Ordering::Relaxed);
    }

    /// Records whether the sled store is open (set after open, cleared at shutdown).
    pub fn set_store_open(&self, open: bool) {
        self.store_open.store(open, Ordering::Relaxed);
    }

    /// Records that the query service's endpoints are subscribed on the server (set once by
    /// `serve::query::serve`, after a flush).
    pub fn set_queries_served(&self, served: bool) {
        self.queries_served.store(served, Ordering::Relaxed);
    }

    /// Whether the query service answers.
    pub fn queries_served(&self) -> bool {
        self.queries_served.load(Ordering::Relaxed)
    }

    /// Whether the NATS client is connected.
    pub fn nats_connected(&self) -> bool {
        self.nats_connected.load(Ordering::Relaxed)
    }

    /// Whether the store is open.
    pub fn store_open(&self) -> bool {
        self.store_open.load(Ordering::Relaxed)
    }

    /// Healthy means all three: connected to NATS, the store open, and the query service
    /// answering (so a UI that waits for `/healthz` never gets "no responders" from a query).
    #[must_use]
    pub fn is_healthy(&self) -> bool {
        self.nats_connected() && self.store_open() && self.queries_served()
    }
}

/// The store-backed gauges `/metrics` shows; `None` when the store could not be read.
pub trait StoreGauges: Send + Sync + 'static {
    /// Messages whose stream is still open.
    fn open_streams(&self) -> Option<u64>;
    /// Outbox rows not yet confirmed published.
    fn outbox_depth(&self) -> Option<u64>;
}

impl StoreGauges for assembler::Store {
    fn open_streams(&self) -> Option<u64> {
        Some(assembler::Store::open_streams(self) as u64)
    }

    fn outbox_depth(&self) -> Option<u64> {
        Some(assembler::Store::outbox_len(self) as u64)
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until `shutdown` turns `true` (or its sender
/// is dropped). The worker binds the listener before anything else (`run::run`), so a taken
/// port refuses the start; tests bind port 0 and read the address.
pub async fn serve_on<G: StoreGauges>(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    gauges: Arc<G>,
    health: Arc<Health>,
    ui: Option<Arc<Api>>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    match listener.local_addr() {
        Ok(local) => tracing::info!(addr = %local, "metrics and health endpoint listening"),
        Err(_) => tracing::info!("metrics and health endpoint listening"),
    }
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let state = State {
                        metrics: metrics.clone(),
                        gauges: gauges.clone(),
                        health: health.clone(),
                        ui: ui.clone(),
                    };
                    tokio::spawn(async move {
                        if let Err(err) = handle(stream, state).await {
                            tracing::debug!(error = %err, "http connection ended with an error");
                        }
                    });
                }
                Err(err) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %err, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    tracing::info!("metrics and health endpoint stopped");
    Ok(())
}

/// What a connection handler needs.
struct State<G> {
    metrics: Arc<Metrics>,
    gauges: Arc<G>,
    health: Arc<Health>,
    ui: Option<Arc<Api>>,
}

/// A response to write: status line parts, content type, body.
struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
}

impl Response {
    fn text(status: u16, reason: &'static str, body: impl Into<String>) -> Response {
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// Reads one request head, answers it, closes.
async fn handle<G: StoreGauges>(mut stream: TcpStream, state: State<G>) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(HeadError::TooLarge)) => {
            let resp = Response::text(431, "Request Header Fields Too Large", "head too large\n");
            return write_response(&mut stream, resp, false).await;
        }
        Ok(Err(HeadError::Io(err))) => return Err(err),
        Err(_elapsed) => return Ok(()),
    };
    let (method, path) = match parse_request_line(&head) {
        Some(parts) => parts,
        None => {
            let resp = Response::text(400, "Bad Request", "malformed request line\n");
            return write_response(&mut stream, resp, false).await;
        }
    };
    if let Some(ui) = &state.ui {
        if path.starts_with("/v1/") {
            let ui = Arc::clone(ui);
            return ui.handle(stream, &head).await;
        }
        let bare = path.split('?').next().unwrap_or(path);
        if bare == "/ui/" || bare == "/ui" {
            // the live page: static, no data in it (it asks /v1 with the user's token)
            let resp = Response {
                status: 200,
                reason: "OK",
                content_type: "text/html; charset=utf-8",
                body: crate::serve::ui::PAGE.to_string(),
            };
            return write_response(&mut stream, resp, method == "HEAD").await;
        }
    }
    let head_only = method == "HEAD";
    let resp = route(method, path, &state).await;
    write_response(&mut stream, resp, head_only).await
}

/// Picks the response for a method and path (query string ignored).
async fn route<G: StoreGauges>(method: &str, path: &str, state: &State<G>) -> Response {
    let path = path.split('?').next().unwrap_or(path);
    if method != "GET" && method != "HEAD" {
        return Response::text(405, "Method Not Allowed", "only GET and HEAD\n");
    }
    match path {
        "/metrics" => {
            let gauges = state.gauges.clone();
            // sled reads off the async threads.
            let (open, depth) =
                tokio::task::spawn_blocking(move || (gauges.open_streams(), gauges.outbox_depth()))
                    .await
                    .unwrap_or((None, None));
            let mut body = state.metrics.render(open, depth);
            let health = &state.health;
            body.push_str(&format!(
                "# HELP toolstream_nats_connected Whether the NATS client is connected (1) or not (0).\n\
                 # TYPE toolstream_nats_connected gauge\n\
                 toolstream_nats_connected {}\n\
                 # HELP toolstream_store_open Whether the sled store is open (1) or not (0).\n\
                 # TYPE toolstream_store_open gauge\n\
                 toolstream_store_open {}\n",
                u8::from(health.nats_connected()),
                u8::from(health.store_open()),
            ));
            Response {
                status: 200,
                reason: "OK",
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body,
            }
        }
        "/healthz" => {
            let h = &state.health;
            let body = format!(
                "{{\"status\":\"{}\",\"nats_connected\":{},\"store_open\":{},\"queries_served\":{}}}\n",
                if h.is_healthy() { "ok" } else { "unavailable" },
                h.nats_connected(),
                h.store_open(),
                h.queries_served()
            );
            let (status, reason) = if h.is_healthy() {
                (200, "OK")
            } else {
                (503, "Service Unavailable")
            };
            Response {
                status,
                reason,
                content_type: "application/json",
                body,
            }
        }
        _ => Response::text(404, "Not Found", "routes: /metrics, /healthz\n"),
    }
}

/// Why a request head could not be read.
enum HeadError {
    /// Longer than [`MAX_HEAD`] without the blank line.
    TooLarge,
    /// The socket failed or closed early.
    Io(std::io::Error),
}

/// Reads up to the blank line that ends the request head.
async fn read_head(stream: &mut TcpStream) -> Result<String, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before the request head ended",
            )));
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(end) = find_head_end(&buf) {
            if end > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            buf.truncate(end);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// The position of the `\r\n\r\n` (or bare `\n\n`) that ends a request head.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n"))
}

/// `GET /metrics HTTP/1.1` → `("GET", "/metrics")`.
fn parse_request_line(head: &str) -> Option<(&str, &str)> {
    let line = head.lines().next()?;
    let mut parts = line.split_ascii_whitespace();
    let method = parts.next()?;
    let path = parts.next()?;
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    Some((method, path))
}

/// Writes the response and flushes; the connection is closed by the caller dropping it.
async fn write_response(
    stream: &mut TcpStream,
    resp: Response,
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.status,
        resp.reason,
        resp.content_type,
        resp.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if !head_only {
        stream.write_all(resp.body.as_bytes()).await?;
    }
    stream.flush().await?;
    stream.shutdown().await
}

/// Completes when shutdown is asked for or every sender is gone (the `watch::Ref` is dropped
/// inside, so the caller's future stays `Send`).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// Fixed gauges instead of a store.
    struct FakeGauges(Option<u64>, Option<u64>);

    impl StoreGauges for FakeGauges {
        fn open_streams(&self) -> Option<u64> {
            self.0
        }
        fn outbox_depth(&self) -> Option<u64> {
            self.1
        }
    }

    struct Running {
        addr: SocketAddr,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    async fn start(metrics: Arc<Metrics>, health: Arc<Health>) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, rx) = watch::channel(false);
        let gauges = Arc::new(FakeGauges(Some(4), Some(9)));
        let task = tokio::spawn(serve_on(listener, metrics, gauges, health, None, rx));
        Running { addr, stop, task }
    }

    async fn request(addr: SocketAddr, raw: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out
            .split_ascii_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (status, body)
    }

    #[tokio::test]
    async fn healthz_is_503_until_nats_the_store_and_the_query_service_are_up() {
        let health = Arc::new(Health::default());
        let srv = start(Arc::new(Metrics::default()), health.clone()).await;
        let get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let (status, body) = request(srv.addr, get).await;
        assert_eq!(status, 503);
        assert!(body.contains("\"nats_connected\":false"));
        health.set_store_open(true);
        assert_eq!(
            request(srv.addr, get).await.0,
            503,
            "store alone is not healthy"
        );
        health.set_nats_connected(true);
        assert_eq!(
            request(srv.addr, get).await.0,
            503,
            "not before the query service answers"
        );
        health.set_queries_served(true);
        let (status, body) = request(srv.addr, get).await;
        assert_eq!(status, 200);
        assert!(body.contains("\"status\":\"ok\""));
        health.set_nats_connected(false);
        assert_eq!(
            request(srv.addr, get).await.0,
            503,
            "a lost connection shows"
        );
        srv.stop.send(true).unwrap();
        srv.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_show_counters_moving_and_store_gauges() {
        let metrics = Arc::new(Metrics::default());
        let srv = start(metrics.clone(), Arc::new(Health::default())).await;
        let get = "GET /metrics HTTP/1.1\r\n\r\n";
        let (status, body) = request(srv.addr, get).await;
        assert_eq!(status, 200);
        assert!(body.contains("\ntoolstream_chunks_in_total 0\n"));
        Metrics::add(&metrics.chunks_in, 12);
        let (_, body) = request(srv.addr, get).await;
        assert!(body.contains("\ntoolstream_chunks_in_total 12\n"), "{body}");
        assert!(body.contains("\ntoolstream_open_streams 4\n"));
        assert!(body.contains("\ntoolstream_outbox_depth 9\n"));
        assert!(body.contains("\ntoolstream_nats_connected 0\n"));
        srv.stop.send(true).unwrap();
        srv.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn unknown_paths_methods_and_garbage_get_errors_not_hangs() {
        let srv = start(Arc::new(Metrics::default()), Arc::new(Health::default())).await;
        assert_eq!(request(srv.addr, "GET /nope HTTP/1.1\r\n\r\n").await.0, 404);
        assert_eq!(
            request(srv.addr, "POST /metrics HTTP/1.1\r\n\r\n").await.0,
            405
        );
        assert_eq!(request(srv.addr, "hello\r\n\r\n").await.0, 400);
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert_eq!(request(srv.addr, &huge).await.0, 431);
        let (status, body) = request(srv.addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").await;
        assert_eq!(status, 200, "query strings are ignored");
        assert!(!body.is_empty());
        srv.stop.send(true).unwrap();
        srv.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn dropping_the_shutdown_sender_stops_the_server() {
        let srv = start(Arc::new(Metrics::default()), Arc::new(Health::default())).await;
        drop(srv.stop);
        srv.task.await.unwrap().unwrap();
    }
}
