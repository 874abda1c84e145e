//! A three-node JetStream cluster of real `nats-server` processes for fault tests: nodes
//! `n1`..`n3` on free client, route and monitoring ports of 127.0.0.1, each with its own store
//! directory; SIGKILL a node and start it again on the same ports and store.

use crate::{free_port, HarnessError, ServerBin};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to answer on its port, or the cluster to form (each of: a full
/// mesh of routes, an agreed meta leader, every node current).
const START_LIMIT: Duration = Duration::from_secs(30);

/// The cluster name the nodes share.
pub const CLUSTER_NAME: &str = "toolstream-test";

struct Node {
    name: String,
    client_port: u16,
    route_port: u16,
    http_port: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// Three `nats-server` processes forming one JetStream cluster; killed and removed on drop.
pub struct NatsCluster {
    nodes: Vec<Node>,
    bin: ServerBin,
    dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts three nodes of `bin` and waits until the cluster is formed: every node routes to
    /// both others, all agree on a JetStream meta leader, and every node is current with it.
    pub fn start(bin: &ServerBin) -> Result<NatsCluster, HarnessError> {
        NatsCluster::start_with_config(bin, "")
    }

    /// Like [`NatsCluster::start`], with `extra` (e.g. the deploy config's subject mappings)
    /// appended to every node's config; it must not set ports, listen addresses, `cluster`
    /// or `jetstream`.
    pub fn start_with_config(bin: &ServerBin, extra: &str) -> Result<NatsCluster, HarnessError> {
        let dir = tempfile::tempdir().map_err(|e| HarnessError(format!("temp dir: {e}")))?;
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 9 {
            let p = free_port();
            if p != 4222 && !ports.contains(&p) {
                ports.push(p);
            }
        }
        let route_ports: Vec<u16> = ports[3..6].to_vec();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let name = format!("n{}", i + 1);
            let node_dir = dir.path().join(&name);
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| HarnessError(format!("create {}: {e}", node_dir.display())))?;
            let routes: Vec<String> = route_ports
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != i)
                .map(|(_, p)| format!("\"nats-route://127.0.0.1:{p}\""))
                .collect();
            let log = node_dir.join("server.log");
            let conf = node_dir.join("server.conf");
            let text = format!(
                "server_name: {name}\n\
                 listen: \"127.0.0.1:{client}\"\n\
                 http: \"127.0.0.1:{http}\"\n\
                 log_file: \"{log}\"\n\
                 jetstream {{\n  store_dir: \"{store}\"\n}}\n\
                 cluster {{\n  name: \"{CLUSTER_NAME}\"\n  listen: \"127.0.0.1:{route}\"\n  \
                 routes: [{routes}]\n}}\n{extra}\n",
                client = ports[i],
                http = ports[6 + i],
                route = route_ports[i],
                log = log.display(),
                store = node_dir.join("js").display(),
                routes = routes.join(", "),
            );
            std::fs::write(&conf, text)
                .map_err(|e| HarnessError(format!("write {}: {e}", conf.display())))?;
            nodes.push(Node {
                name,
                client_port: ports[i],
                route_port: route_ports[i],
                http_port: ports[6 + i],
                conf,
                log,
                child: None,
            });
        }
        let mut cluster = NatsCluster {
            nodes,
            bin: bin.clone(),
            dir,
        };
        for i in 0..3 {
            cluster.spawn(i)?;
        }
        for i in 0..3 {
            cluster.wait_port(i)?;
        }
        // A leader is not enough: on CI a leader killed 5 ms after the first election, while
        // the other two had no route to each other yet, left nats-server 2.9.10 without a meta
        // leader for 30 s. A formed cluster is a full mesh whose members all caught up.
        cluster.wait_mesh(START_LIMIT)?;
        // (a node that died after answering on its port would only time out below)
        if let Some(i) = (0..3).find(|&i| !cluster.is_running(i)) {
            return Err(HarnessError(format!(
                "{} exited while the cluster formed; log:\n{}",
                cluster.nodes[i].name,
                tail(&cluster.log(i), 30)
            )));
        }
        cluster.wait_meta_leader(START_LIMIT)?;
        for i in 0..3 {
            cluster.wait_current(i, START_LIMIT)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), HarnessError> {
        let node = &mut self.nodes[i];
        let child = Command::new(&self.bin.path)
            .arg("-c")
            .arg(&node.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| HarnessError(format!("spawn {}: {e}", self.bin)))?;
        node.child = Some(child);
        Ok(())
    }

    /// Waits until node `i` answers the NATS protocol on its client port.
    fn wait_port(&mut self, i: usize) -> Result<(), HarnessError> {
        let deadline = Instant::now() + START_LIMIT;
        let port = self.nodes[i].client_port;
        loop {
            if let Some(child) = self.nodes[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.nodes[i].child = None;
                    return Err(HarnessError(format!(
                        "{} exited early ({status}); log:\n{}",
                        self.nodes[i].name,
                        self.log(i)
                    )));
                }
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).is_ok() && &buf == b"INFO" {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(HarnessError(format!(
                    "{} did not answer on port {port}; log:\n{}",
                    self.nodes[i].name,
                    self.log(i)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client that knows every node, so it survives the loss of any one (retries its first
    /// connect).
    pub async fn client(&self) -> async_nats::Client {
        let addrs: Vec<async_nats::ServerAddr> = self
            .urls()
            .iter()
            .map(|u| u.parse().expect("node URL"))
            .collect();
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(addrs)
            .await
            .expect("test client connects to the cluster")
    }

    /// The server binary the nodes run.
    pub fn bin(&self) -> &ServerBin {
        &self.bin
    }

    /// Number of nodes (3).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never empty; for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s server name (`n1`..`n3`).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The index of the node named `name` (as JetStream reports leaders, e.g. `n2`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Node `i`'s client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// Every node's client URL.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// Every node's client URL, comma-separated (the worker's `--nats-url`).
    pub fn urls_joined(&self) -> String {
        self.urls().join(",")
    }

    /// Node `i`'s client, route and monitoring ports.
    pub fn ports(&self, i: usize) -> (u16, u16, u16) {
        let n = &self.nodes[i];
        (n.client_port, n.route_port, n.http_port)
    }

    /// Node `i`'s store directory (JetStream's `store_dir`).
    pub fn store_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.nodes[i].name).join("js")
    }

    /// Whether node `i`'s process is running.
    pub fn is_running(&mut self, i: usize) -> bool {
        match self.nodes[i].child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILLs node `i` (its store stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again on the same ports and store (after [`Self::kill`]) and waits until
    /// it answers on its client port. [`Self::wait_current`] waits for it to catch up.
    pub fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_port(i)
    }

    /// The meta leader as node `i` sees it (from its `/jsz`), if it sees one.
    pub fn meta_leader_seen_by(&self, i: usize) -> Option<String> {
        let (status, body) = http_get(self.nodes[i].http_port, "/jsz")?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["meta_cluster"]["leader"]
            .as_str()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
    }

    /// The running nodes that hold a client connection named `client_name` (from each node's
    /// `/connz`), e.g. the worker's `toolstream-<consumer>-p<partition>`.
    pub fn nodes_serving(&mut self, client_name: &str) -> Vec<usize> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .collect();
        running
            .into_iter()
            .filter(|&i| {
                http_get(self.nodes[i].http_port, "/connz?limit=4096")
                    .filter(|(status, _)| *status == 200)
                    .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                    .and_then(|v| {
                        v["connections"].as_array().map(|conns| {
                            conns
                                .iter()
                                .any(|c| c["name"].as_str() == Some(client_name))
                        })
                    })
                    .unwrap_or(false)
            })
            .collect()
    }

    /// The distinct servers node `i` has a route to (from its `/routez`; 2.10 and later pool
    /// several connections per server, so connections are counted by remote id).
    pub fn routed_peers(&self, i: usize) -> Option<usize> {
        let (status, body) = http_get(self.nodes[i].http_port, "/routez")?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let mut ids: Vec<&str> = v["routes"]
            .as_array()?
            .iter()
            .filter_map(|r| r["remote_id"].as_str())
            .filter(|id| !id.is_empty())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Some(ids.len())
    }

    /// Waits until every running node has a route to every other running node (never true
    /// while no node runs).
    pub fn wait_mesh(&mut self, limit: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + limit;
        loop {
            let running: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.is_running(i))
                .collect();
            let seen: Vec<Option<usize>> = running.iter().map(|&i| self.routed_peers(i)).collect();
            let others = running.len().saturating_sub(1);
            if !running.is_empty() && seen.iter().all(|n| *n == Some(others)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError(format!(
                    "no full mesh of routes within {limit:?} (running {running:?} route to \
                     {seen:?} servers each); logs:\n{}",
                    self.logs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every running node names the same, running JetStream meta leader; its name.
    pub fn wait_meta_leader(&mut self, limit: Duration) -> Result<String, HarnessError> {
        let deadline = Instant::now() + limit;
        loop {
            let running: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.is_running(i))
                .collect();
            let seen: Vec<Option<String>> = running
                .iter()
                .map(|&i| self.meta_leader_seen_by(i))
                .collect();
            if let Some(Some(leader)) = seen.first() {
                let agreed = seen.iter().all(|s| s.as_deref() == Some(leader));
                let up = self.index_of(leader).is_some_and(|k| running.contains(&k));
                if agreed && up {
                    return Ok(leader.clone());
                }
            }
            if Instant::now() > deadline {
                return Err(HarnessError(format!(
                    "no JetStream meta leader agreed on within {limit:?} (running {running:?} \
                     see {seen:?}); logs:\n{}",
                    self.logs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until node `i` reports itself healthy (`/healthz`: JetStream current with the meta
    /// leader and with its streams and consumers).
    pub fn wait_current(&mut self, i: usize, limit: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + limit;
        loop {
            let last = http_get(self.nodes[i].http_port, "/healthz");
            if matches!(last, Some((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError(format!(
                    "{} not healthy within {limit:?} (last /healthz answer {last:?}); log:\n{}",
                    self.nodes[i].name,
                    tail(&self.log(i), 30)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// The last lines of every node's log (for failure messages).
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| format!("--- {} ---\n{}", self.nodes[i].name, tail(&self.log(i), 20)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The directory holding every node's config, log and store.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A plain HTTP/1.0 GET on 127.0.0.1:`port` (the monitoring endpoints): status and body.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_serving_a_named_client_is_found_through_connz() {
        let bin = crate::debian_server().expect("Debian's nats-server");
        let mut cluster = NatsCluster::start(&bin).expect("cluster starts");
        let (port, _, _) = cluster.ports(1);
        let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.write_all(b"CONNECT {\"name\":\"probe\",\"verbose\":false}\r\nPING\r\n")
            .unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !String::from_utf8_lossy(&seen).contains("PONG") {
            let n = conn.read(&mut buf).expect("server answers PING");
            assert!(n > 0, "connection closed");
            seen.extend_from_slice(&buf[..n]);
        }
        assert_eq!(cluster.nodes_serving("probe"), vec![1]);
        assert!(cluster.nodes_serving("nobody").is_empty());
        cluster.kill(1);
        assert!(cluster.nodes_serving("probe").is_empty());
    }
}
