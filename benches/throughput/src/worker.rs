//! The worker under test: `toolstream run` as a child process with a temp data dir and its
//! `/metrics` + `/healthz` on a free port; log kept in the temp dir for failure messages.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// The worker binary: `explicit`, else `toolstream` next to the running executable.
pub fn resolve_bin(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let bin = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("current exe")?
            .with_file_name("toolstream"),
    };
    if !bin.is_file() {
        bail!(
            "worker binary {} not found: build it first (cargo build --release -p toolstream) or pass --worker-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// A running worker process.
pub struct Worker {
    child: Option<Child>,
    metrics_port: u16,
    log: PathBuf,
}

impl Worker {
    /// Starts `bin run` against `nats_url` with its store under `dir`.
    pub fn start(
        bin: &Path,
        nats_url: &str,
        dir: &Path,
        extra: &[String],
    ) -> anyhow::Result<Worker> {
        let metrics_port = toolstream_testkit::free_port();
        // THROUGHPUT_WORKER_LOG keeps the worker's log past the run (with RUST_LOG, to see
        // where time goes); a directory keeps one per worker started (`worker-<unix ms>.log`)
        let log = match std::env::var_os("THROUGHPUT_WORKER_LOG").map(PathBuf::from) {
            Some(d) if d.is_dir() => {
                let ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or_default();
                d.join(format!("worker-{ms}.log"))
            }
            Some(path) => path,
            None => dir.join("worker.log"),
        };
        let log_file = std::fs::File::create(&log).context("worker log")?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--nats-url")
            .arg(nats_url)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .args(extra)
            // Per-message logging is not what is measured.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().context("log fd")?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        Ok(Worker {
            child: Some(child),
            metrics_port,
            log,
        })
    }

    /// The process id (`None` once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until `/healthz` answers 200 (polled every 50 ms).
    pub async fn wait_healthy(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.wait_healthy_every(limit, Duration::from_millis(50))
            .await
    }

    /// Waits until `/healthz` answers 200, polling every `poll`.
    pub async fn wait_healthy_every(
        &mut self,
        limit: Duration,
        poll: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "worker exited at start ({status}); log:\n{}",
                        self.log_tail()
                    );
                }
            }
            if let Ok(resp) = self.get("/healthz").await {
                if resp.starts_with("HTTP/1.1 200") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "worker not healthy within {limit:?}; log:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// The `/metrics` body.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let resp = self.get("/metrics").await?;
        Ok(resp
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    }

    async fn get(&self, path: &str) -> anyhow::Result<String> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await?;
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await??;
        Ok(out)
    }

    /// The last lines of the worker's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM (graceful drain), then SIGKILL if it has not exited within `grace`. Returns
    /// whether it exited on its own; when it had to be killed it says so on stderr, since
    /// whatever the process meant to write at exit (a profiler's report, when the worker
    /// binary is a script that runs it under one) is lost.
    pub async fn stop(&mut self, grace: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "worker {} did not exit within {grace:?} of SIGTERM: killed (under a profiler, give \
             it longer: perf --stop-grace-secs)",
            child.id()
        );
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in worker binary: a script that takes SIGTERM as `on_term` says.
    fn script(dir: &Path, on_term: &str) -> PathBuf {
        let path = dir.join("worker.sh");
        let text = format!("#!/bin/sh\ntrap '{on_term}' TERM\nwhile :; do sleep 0.05; done\n");
        std::fs::write(&path, text).expect("script written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("script made executable");
        path
    }

    /// A worker that takes a while to stop after SIGTERM is waited for within the grace; one
    /// that does not stop in it is killed, and `stop` says which happened.
    #[tokio::test]
    async fn stop_waits_out_a_slow_graceful_exit_and_kills_only_past_the_grace() {
        let dir = tempfile::tempdir().expect("temp dir");
        let slow = script(dir.path(), "sleep 0.3; exit 0");
        let mut w = Worker::start(&slow, "nats://127.0.0.1:1", dir.path(), &[]).expect("started");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(w.stop(Duration::from_secs(30)).await, "exited on its own");

        let deaf = script(dir.path(), ":");
        let mut w = Worker::start(&deaf, "nats://127.0.0.1:1", dir.path(), &[]).expect("started");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !w.stop(Duration::from_millis(300)).await,
            "killed past the grace"
        );
    }
}
