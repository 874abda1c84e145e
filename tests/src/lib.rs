//! # toolstream-testkit
//!
//! Starts a real `nats-server` with JetStream for integration tests: a free port on 127.0.0.1, a
//! temporary store directory, killed and removed on drop. Tests never touch a shared server.
//!
//! The binary is `$NATS_SERVER_BIN`, else `nats-server` on `PATH`, else `/usr/sbin/nats-server`
//! (Debian's package). When none exists, [`NatsServer::start`] fails with a message that says how
//! to install it: tests fail loudly, they never skip.
//!
//! Also here: [`recordings_dir`], the recorded provider streams under the repository's
//! `tests/recordings/`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server` owned by one test.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    config: Option<PathBuf>,
    bin: PathBuf,
}

/// Why the server could not be started.
#[derive(Debug)]
pub struct HarnessError(pub String);

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

/// Finds the `nats-server` binary (see the crate docs).
pub fn nats_server_bin() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
        return Ok(PathBuf::from(p));
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("nats-server");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let debian = PathBuf::from("/usr/sbin/nats-server");
    if debian.is_file() {
        return Ok(debian);
    }
    Err(HarnessError(
        "nats-server not found: install it with `apt-get install nats-server` (or run .ci/run, \
         which installs it), or set NATS_SERVER_BIN"
            .to_string(),
    ))
}

/// A free TCP port on 127.0.0.1 (bound and released; the kernel does not hand it out again
/// immediately).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port on 127.0.0.1")
}

impl NatsServer {
    /// Starts a server with JetStream on a free port and a fresh store dir.
    pub fn start() -> Result<NatsServer, HarnessError> {
        Self::start_inner(None)
    }

    /// Starts a server with an extra config file (e.g. subject mappings). The file must not set
    /// `port`, `listen` or `jetstream.store_dir`; the harness passes those on the command line.
    pub fn start_with_config(config_text: &str) -> Result<NatsServer, HarnessError> {
        Self::start_inner(Some(config_text))
    }

    fn start_inner(config_text: Option<&str>) -> Result<NatsServer, HarnessError> {
        let bin = nats_server_bin()?;
        let store = tempfile::tempdir().map_err(|e| HarnessError(format!("temp dir: {e}")))?;
        let config = match config_text {
            Some(text) => {
                let path = store.path().join("server.conf");
                std::fs::write(&path, text)
                    .map_err(|e| HarnessError(format!("write server.conf: {e}")))?;
                Some(path)
            }
            None => None,
        };
        let mut server = NatsServer {
            child: None,
            port: free_port(),
            store,
            config,
            bin,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        let jetstream_dir = self.store.path().join("js");
        let log = self.store.path().join("server.log");
        let mut cmd = Command::new(&self.bin);
        if let Some(conf) = &self.config {
            cmd.arg("-c").arg(conf);
        }
        cmd.arg("-a")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-js")
            .arg("-sd")
            .arg(&jetstream_dir)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| HarnessError(format!("spawn {}: {e}", self.bin.display())))?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(15))
    }

    /// Waits until the server answers the NATS protocol (its `INFO` line) on its port.
    fn wait_ready(&mut self, limit: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(HarnessError(format!(
                        "nats-server exited early ({status}); log:\n{}",
                        self.log()
                    )));
                }
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).is_ok() && &buf == b"INFO" {
                    let _ = s.write_all(b"");
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(HarnessError(format!(
                    "nats-server did not become ready on port {}; log:\n{}",
                    self.port,
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> &Path {
        self.store.path()
    }

    /// Kills the server with SIGKILL (its JetStream store stays).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same store (after [`Self::kill`]).
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.spawn()
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The repository's `tests/recordings/` directory (recorded provider streams).
pub fn recordings_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_starts_on_its_own_port_and_stops_on_drop() {
        let server = NatsServer::start().expect("nats-server must be installed for the tests");
        let port = server.port();
        assert_ne!(port, 4222, "tests never use the shared default port");
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        let store = server.store_dir().to_path_buf();
        drop(server);
        assert!(!store.exists(), "temp store is removed on drop");
        // the port is closed once the server is gone
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "server still listening after drop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn restart_keeps_port_and_store() {
        let mut server = NatsServer::start().expect("nats-server must be installed for the tests");
        let port = server.port();
        server.kill();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        server.restart().expect("restart");
        assert_eq!(server.port(), port);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
    }
}
