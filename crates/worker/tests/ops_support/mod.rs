//! Support for the query and HTTP integration tests (on top of `common`, which every test
//! using this module also declares): the worker with a `/metrics` + `/healthz` port the test
//! chooses, a tiny HTTP GET, and a NATS service request that turns `Nats-Service-Error` replies
//! into `Err`.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use crate::common::eventually_async;
pub use crate::common::WAIT;

/// `toolstream run` (the shared [`crate::common::Worker`]) with a `/metrics` + `/healthz`
/// port the test chose. Derefs to the worker (`log`, `terminate`, ...).
pub struct OpsWorker {
    worker: crate::common::Worker,
    /// Port of `/metrics` and `/healthz`.
    pub metrics_port: u16,
}

impl OpsWorker {
    /// Starts the worker on `url` with its store in `data_dir` and quick test timings.
    pub fn start(url: &str, data_dir: &Path) -> OpsWorker {
        OpsWorker::start_with(url, data_dir, &[])
    }

    /// [`OpsWorker::start`] with extra `toolstream run` flags.
    pub fn start_with(url: &str, data_dir: &Path, extra: &[&str]) -> OpsWorker {
        let metrics_port = toolstream_testkit::free_port();
        let listen = format!("127.0.0.1:{metrics_port}");
        let mut args = vec!["--metrics-listen", listen.as_str()];
        args.extend_from_slice(extra);
        OpsWorker {
            worker: crate::common::Worker::start(url, data_dir, &args),
            metrics_port,
        }
    }

    /// [`OpsWorker::start_with`] on a config file: writes `toml` to `dir/<file>`, starts the
    /// worker with `--config` it and its store in `dir/data`, and waits for `/healthz` 200.
    pub async fn start_with_config(url: &str, dir: &Path, file: &str, toml: &str) -> OpsWorker {
        let config = dir.join(file);
        std::fs::write(&config, toml).unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
        let config = config
            .to_str()
            .unwrap_or_else(|| panic!("{} is not UTF-8", config.display()));
        let worker = OpsWorker::start_with(url, &dir.join("data"), &["--config", config]);
        worker.wait_status("/healthz", 200).await;
        worker
    }

    /// GET `path` on the metrics port: (status, body).
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get(self.metrics_port, path).await
    }

    /// Polls `path` until its status is `want`; panics with the log after [`WAIT`].
    pub async fn wait_status(&self, path: &str, want: u16) -> String {
        eventually_async(WAIT, || async move {
            match self.get(path).await {
                Ok((status, body)) if status == want => Some(body),
                _ => None,
            }
        })
        .await
        .unwrap_or_else(|| panic!("{path} never answered {want}; worker log:\n{}", self.log()))
    }
}

impl std::ops::Deref for OpsWorker {
    type Target = crate::common::Worker;
    fn deref(&self) -> &Self::Target {
        &self.worker
    }
}

impl std::ops::DerefMut for OpsWorker {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.worker
    }
}

/// A one-shot HTTP/1.1 GET on 127.0.0.1: (status, body).
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .map_err(|_| std::io::Error::other("HTTP read timed out"))??;
    let status = out
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of one sample line (`name value`) in a Prometheus text body.
pub fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A service error reply: code and status text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    /// `Nats-Service-Error-Code`.
    pub code: u16,
    /// `Nats-Service-Error`.
    pub status: String,
}

/// Sends a request (bounded by 10 s: an unanswered query is a failure, not a hang) and
/// splits service errors from answers.
pub async fn query(
    client: &async_nats::Client,
    subject: &str,
    body: &str,
) -> Result<serde_json::Value, ServiceError> {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer to {subject} within 10s"))
    .unwrap_or_else(|e| panic!("request {subject}: {e}"));
    if let Some(h) = &reply.headers {
        if let Some(code) = h.get("Nats-Service-Error-Code") {
            return Err(ServiceError {
                code: code.as_str().parse().unwrap_or(0),
                status: h
                    .get("Nats-Service-Error")
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(serde_json::from_slice(&reply.payload).unwrap_or_else(|e| {
        panic!(
            "answer to {subject} is not JSON ({e}): {}",
            String::from_utf8_lossy(&reply.payload)
        )
    }))
}

/// Waits until the input and events streams exist and the input stream has at least
/// `consumers` consumers (the worker's durable consumers), whatever they are named.
pub async fn wait_provisioned(js: &async_nats::jetstream::Context, consumers: usize) {
    eventually_async(WAIT, || async move {
        if js.get_stream("TOOLSTREAM_EVENTS").await.is_err() {
            return false;
        }
        let Ok(mut input) = js.get_stream("TOOLSTREAM_IN").await else {
            return false;
        };
        input
            .info()
            .await
            .is_ok_and(|info| info.state.consumer_count >= consumers)
    })
    .await
    .unwrap_or_else(|| panic!("worker did not provision JetStream in time"));
}
