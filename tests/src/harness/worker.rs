//! The `toolstream` binary as a child process: start, kill, restart, terminate, logs, metrics.

use super::{eventually, tail, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `toolstream` binary running `run` against a test server.
pub struct Worker {
    bin: PathBuf,
    child: Option<Child>,
    url: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// Length of the log when the current process was started: its lines follow.
    log_offset: u64,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    starts: u32,
}

impl Worker {
    /// Starts the `toolstream` binary `bin` as `run` on `url` with a store in `data_dir` and
    /// test-friendly timings (short ack wait, fetch expiry, tick and relay intervals; see
    /// [`Worker::TEST_DEFAULTS`]), plus `extra` flags (a flag in `extra` replaces its default),
    /// and extra environment variables. Its stderr is appended to `<data_dir>.log`.
    pub fn start_bin(
        bin: &Path,
        url: &str,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        let mut w = Worker::new(bin, url, data_dir, extra, env);
        w.spawn();
        w
    }

    /// A worker that is not started yet ([`Worker::try_restart`] starts it).
    pub fn new(
        bin: &Path,
        url: &str,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        Worker {
            bin: bin.to_path_buf(),
            child: None,
            url: url.to_string(),
            data_dir: data_dir.to_path_buf(),
            log_path: data_dir.with_extension("log"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            starts: 0,
            log_offset: 0,
        }
    }

    /// Test-friendly timings passed unless `extra` names the flag.
    pub const TEST_DEFAULTS: [(&'static str, &'static str); 7] = [
        ("--metrics-listen", "127.0.0.1:0"),
        ("--ack-wait", "4s"),
        ("--fetch-expiry", "1s"),
        ("--tick-interval", "200ms"),
        ("--relay-interval", "200ms"),
        ("--nak-delay", "200ms"),
        ("--shutdown-timeout", "20s"),
    ];

    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        self.starts += 1;
        self.log_offset = std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open worker log {}: {e}", self.log_path.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run")
            .args(["--nats-url", &self.url])
            .arg("--data-dir")
            .arg(&self.data_dir);
        for (flag, value) in Self::TEST_DEFAULTS {
            if !self.extra.iter().any(|e| e == flag) {
                cmd.args([flag, value]);
            }
        }
        let child = cmd
            .args(&self.extra)
            .env("RUST_LOG", "info,toolstream=debug,sink=debug")
            .env_remove("TOOLSTREAM_CONFIG")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("spawn {} run: {e}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process if it runs (SIGKILL) and starts it again; an error instead of a panic.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.kill();
        self.try_spawn()
    }

    /// How many times the process was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// How many starts logged "JetStream ready" (provisioned and consuming).
    pub fn ready_count(&self) -> usize {
        self.log().matches("JetStream ready").count()
    }

    /// What the current process logged so far (read from its start offset, so it stays cheap
    /// however long the log of earlier starts is).
    pub fn current_log(&self) -> String {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            if f.seek(SeekFrom::Start(self.log_offset)).is_ok() {
                let mut bytes = Vec::new();
                let _ = f.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
        text
    }

    /// Whether the current process has logged "JetStream ready".
    pub fn is_ready(&self) -> bool {
        self.starts > 0 && self.current_log().contains("JetStream ready")
    }

    /// The file the worker's stderr goes to.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// SIGKILL: no shutdown path at all.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process is frozen (no thread runs, no timer fires) until [`Worker::resume`];
    /// its connections stay open. Returns whether a process was there to stop.
    pub fn pause(&mut self) -> bool {
        self.signal("-STOP")
    }

    /// SIGCONT after [`Worker::pause`].
    pub fn resume(&mut self) -> bool {
        self.signal("-CONT")
    }

    fn signal(&mut self, sig: &str) -> bool {
        match self.child.as_ref() {
            Some(c) => Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status()
                .is_ok_and(|s| s.success()),
            None => false,
        }
    }

    /// Starts the binary again on the same store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let exited = eventually(WAIT, || c.try_wait().ok().flatten());
        match exited {
            Some(status) => status.success(),
            None => {
                let _ = c.kill();
                let _ = c.wait();
                false
            }
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits (bounded) for the process to exit on its own; its exit success.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<bool> {
        let c = self.child.as_mut()?;
        let status = eventually(limit, || c.try_wait().ok().flatten())?;
        self.child = None;
        Some(status.success())
    }

    /// Whether the current process became ready (its "JetStream ready" line) within `limit`.
    pub fn wait_ready_for(&self, limit: Duration) -> bool {
        eventually(limit, || self.is_ready()).is_some()
    }

    /// Waits until the current process has provisioned and started consuming (its "JetStream
    /// ready" log line), so a test does not signal a process that is still starting.
    pub fn wait_ready(&self) {
        eventually(WAIT, || self.is_ready()).unwrap_or_else(|| {
            panic!(
                "worker start {} not ready:\n{}",
                self.starts,
                tail(&self.log(), 40)
            )
        });
    }

    /// The current process's `/metrics` text (port read from its "listening" log line).
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let log = self.log();
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("metrics and health endpoint listening"))
            .expect("metrics endpoint logged its address");
        let start = line.find("127.0.0.1:").expect("address in log line");
        let addr: String = line[start..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
            .collect();
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to /metrics");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Everything the worker logged (all starts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}
