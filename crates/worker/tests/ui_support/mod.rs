//! Support for the UI API tests (`ui_*.rs`): a raw HTTP client for the worker's `/v1` routes
//! and a Server-Sent Events reader that keeps what it read in frames, exactly as sent.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One SSE frame (comments are counted apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// A response head: status and headers (names lowercased).
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends a request (`headers` as `Name: value` lines) and returns the connection for reading.
async fn send(port: u16, method: &str, path: &str, headers: &[&str]) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("send request");
    BufReader::new(s)
}

async fn read_head(r: &mut BufReader<TcpStream>) -> Head {
    let mut line = String::new();
    r.read_line(&mut line).await.expect("status line");
    let status = line
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).await.expect("header line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    Head { status, headers }
}

/// A whole (non-streaming) request: head and body.
pub async fn request(port: u16, method: &str, path: &str, headers: &[&str]) -> (Head, String) {
    let mut r = send(port, method, path, headers).await;
    let head = tokio::time::timeout(Duration::from_secs(10), read_head(&mut r))
        .await
        .expect("a response head in time");
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(10), r.read_to_string(&mut body))
        .await
        .expect("the body in time")
        .expect("read body");
    (head, body)
}

/// GET with the bearer token; the body as JSON.
pub async fn get_json(port: u16, path: &str, token: &str) -> (u16, serde_json::Value) {
    let auth = format!("Authorization: Bearer {token}");
    let (head, body) = request(port, "GET", path, &[&auth]).await;
    let json = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("{path}: body is not JSON ({e}): {body:?}"));
    (head.status, json)
}

/// An open event stream.
pub struct Sse {
    pub head: Head,
    reader: BufReader<TcpStream>,
    /// Comment lines read (heartbeats, the greeting).
    pub comments: Vec<String>,
}

impl Sse {
    /// Opens `path` with the token and extra header lines; panics unless 200 with
    /// `text/event-stream`.
    pub async fn open(port: u16, path: &str, token: &str, extra: &[&str]) -> Sse {
        let sse = Sse::try_open(port, path, token, extra).await;
        match sse {
            Ok(s) => s,
            Err((head, body)) => panic!("{path}: {} {body}", head.status),
        }
    }

    /// [`Sse::open`], returning a refused request's head and body instead of panicking.
    pub async fn try_open(
        port: u16,
        path: &str,
        token: &str,
        extra: &[&str],
    ) -> Result<Sse, (Head, String)> {
        let auth = format!("Authorization: Bearer {token}");
        let mut headers = vec![auth.as_str()];
        headers.extend_from_slice(extra);
        let mut reader = send(port, "GET", path, &headers).await;
        let head = tokio::time::timeout(Duration::from_secs(10), read_head(&mut reader))
            .await
            .expect("a response head in time");
        if head.status != 200 {
            let mut body = String::new();
            let _ = reader.read_to_string(&mut body).await;
            return Err((head, body));
        }
        assert!(
            head.header("content-type")
                .is_some_and(|c| c.starts_with("text/event-stream")),
            "{:?}",
            head.headers
        );
        Ok(Sse {
            head,
            reader,
            comments: Vec::new(),
        })
    }

    /// The next frame; `None` when the connection ends (a frame cut by the end is dropped,
    /// as the SSE spec says) or nothing comes within `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<Frame> {
        tokio::time::timeout(limit, self.next_frame())
            .await
            .ok()
            .flatten()
    }

    async fn next_frame(&mut self) -> Option<Frame> {
        let (mut id, mut event, mut data) = (None, None::<String>, Vec::<String>::new());
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if !line.ends_with('\n') {
                return None; // cut mid-line by the end of the connection
            }
            let l = line.trim_end_matches('\n').trim_end_matches('\r');
            if l.is_empty() {
                if data.is_empty() && event.is_none() {
                    continue; // e.g. after a `retry:` line
                }
                return Some(Frame {
                    id,
                    event: event.unwrap_or_else(|| "message".into()),
                    data: data.join("\n"),
                });
            }
            if let Some(c) = l.strip_prefix(':') {
                self.comments.push(c.trim().to_string());
                continue;
            }
            let (field, value) = l.split_once(':').unwrap_or((l, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => id = Some(value.parse().expect("numeric id")),
                "event" => event = Some(value.to_string()),
                "data" => data.push(value.to_string()),
                _ => {}
            }
        }
    }

    /// Frames until one has id `last` (inclusive); panics with what it read after `limit`.
    pub async fn until_id(&mut self, last: u64, limit: Duration) -> Vec<Frame> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(f) => {
                    let done = f.id == Some(last);
                    out.push(f);
                    if done {
                        return out;
                    }
                }
                None => panic!(
                    "the stream ended or stalled before id {last}; read {} frame(s), last {:?}",
                    out.len(),
                    out.last()
                ),
            }
        }
    }
}

/// `target/ui-clients` with `npm ci` done for the current lockfile.
pub fn ui_clients() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ui-clients");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("ui-clients");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::read(src.join("package-lock.json")).unwrap();
    let installed = std::fs::read(dir.join("package-lock.json")).ok();
    for f in ["package.json", "package-lock.json", "check.mjs", "page.mjs"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let node = Command::new("node").arg("--version").output();
    let node = node.unwrap_or_else(|e| {
        panic!("node is required for the UI format tests (Debian: apt-get install nodejs npm): {e}")
    });
    let version = String::from_utf8_lossy(&node.stdout).to_string();
    let major: u32 = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(major >= 20, "Node 20 or later is required, found {version}");
    let fresh = installed.as_deref() == Some(&lock[..]) && dir.join("node_modules/ai").exists();
    if !fresh {
        let out = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("npm is required for the UI format tests (Debian: apt-get install npm): {e}")
            });
        assert!(
            out.status.success(),
            "npm ci in {} failed:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// Runs `node check.mjs <format>` in `dir` ([`ui_clients`]: the real `ai` / `@ag-ui/core`) on
/// an SSE body; its JSON answer. Panics when the client refuses the stream.
pub fn check(dir: &Path, format: &str, body: &str) -> serde_json::Value {
    use std::io::Write;
    let mut child = Command::new("node")
        .args(["check.mjs", format])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run node");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {format} client refused the stream: {}\n--- body ---\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The events of conversation `conv` on the events stream that `events` reads, once `want` of
/// its messages completed, each with its result: (stream sequence, payload) in stream order.
pub async fn conversation_done(
    events: &mut toolstream_testkit::harness::StreamLog,
    conv: &str,
    want: usize,
    log: impl Fn() -> String,
) -> Vec<(u64, String)> {
    events
        .until(
            toolstream_testkit::harness::WAIT,
            "every message completed with its result",
            |all| {
                let of = |t: &str| {
                    all.iter()
                        .map(|r| r.json())
                        .filter(|e| e["conversation_id"] == conv && e["type"] == t)
                        .count()
                };
                of("message.completed") == want && of("tool_result.completed") == want
            },
            log,
        )
        .await;
    events
        .all
        .iter()
        .filter(|r| r.json()["conversation_id"] == conv)
        .map(|r| (r.seq, String::from_utf8_lossy(&r.payload).into_owned()))
        .collect()
}
