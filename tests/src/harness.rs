//! Shared code of the integration tests, the fault suite and the soak: the real `toolstream`
//! binary as a child process ([`Worker`]), a producer that publishes chunks and results with
//! the contract's headers ([`Producer`]), readers of the events and dead-letter streams that
//! poll with a deadline ([`StreamLog`]), and generated provider streams
//! ([`openai_chat_stream`], [`anthropic_stream`]).
//!
//! The worker crate's tests reach this through `crates/worker/tests/common/mod.rs`, which only
//! adds the binary path Cargo gives them (`CARGO_BIN_EXE_toolstream`).

use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::HeaderMap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Default deadline for anything a test waits for.
pub const WAIT: Duration = Duration::from_secs(60);

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
            .env("RUST_LOG", "info,toolstream=debug")
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
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
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
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status.success());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the current process became ready (its "JetStream ready" line) within `limit`.
    pub fn wait_ready_for(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.is_ready() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Waits until the current process has provisioned and started consuming (its "JetStream
    /// ready" log line), so a test does not signal a process that is still starting.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT;
        while !self.is_ready() {
            assert!(
                Instant::now() < deadline,
                "worker start {} not ready:\n{}",
                self.starts,
                tail(&self.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// Connects a test client (retrying while the server starts).
pub async fn client(url: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await
        .expect("test client connects")
}

/// Waits until the worker has provisioned its streams and consumer.
pub async fn wait_provisioned(js: &jetstream::Context, consumer: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(stream) = js.get_stream("TOOLSTREAM_IN").await {
            if stream.consumer_info(consumer).await.is_ok()
                && js.get_stream("TOOLSTREAM_EVENTS").await.is_ok()
                && js.get_stream("TOOLSTREAM_DLQ").await.is_ok()
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "worker did not provision JetStream in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes input the way a producer does: headers of the contract, PubAck awaited, retried
/// while the server is away.
#[derive(Clone)]
pub struct Producer {
    pub js: jetstream::Context,
    pub prefix: String,
}

impl Producer {
    /// A producer for the default prefix.
    pub fn new(js: jetstream::Context) -> Producer {
        Producer {
            js,
            prefix: "toolstream".to_string(),
        }
    }

    /// Publishes `body` on `subject` with `headers` and `Nats-Msg-Id = msg_id`, retrying until
    /// a PubAck arrives (bounded by [`WAIT`]); panics when none does.
    pub async fn publish(&self, subject: &str, headers: HeaderMap, msg_id: &str, body: &[u8]) {
        if let Err(e) = self.try_publish(subject, headers, msg_id, body).await {
            panic!("{e}");
        }
    }

    /// [`Producer::publish`] returning the failure instead of panicking.
    pub async fn try_publish(
        &self,
        subject: &str,
        headers: HeaderMap,
        msg_id: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let p = PublishMessage::build()
                .headers(headers.clone())
                .message_id(msg_id)
                .payload(body.to_vec().into());
            let result = match self.js.send_publish(subject.to_string(), p).await {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if Instant::now() > deadline {
                        return Err(format!("publish to {subject} failed for {WAIT:?}: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Publishes chunk number `seq` of a message's stream.
    pub async fn chunk(&self, conv: &str, msg: &str, provider: &str, seq: u64, body: &[u8]) {
        let mut h = HeaderMap::new();
        h.insert("Toolstream-Provider", provider);
        h.insert("Toolstream-Seq", seq.to_string().as_str());
        let subject = format!("{}.chunks.{conv}.{msg}", self.prefix);
        self.publish(&subject, h, &format!("{conv}:{msg}:{seq}"), body)
            .await;
    }

    /// Publishes a whole OpenAI chat stream carrying `calls` as message `msg`.
    pub async fn openai_stream(&self, conv: &str, msg: &str, calls: &[Call]) {
        for (seq, body) in openai_chat_stream(calls).iter().enumerate() {
            self.chunk(conv, msg, "openai-chat", seq as u64, body).await;
        }
    }

    /// Publishes a whole tool result on the results subject of `msg`.
    pub async fn result(&self, conv: &str, msg: &str, seq: u64, tool_call_id: &str, output: &str) {
        let mut h = HeaderMap::new();
        h.insert("Toolstream-Seq", seq.to_string().as_str());
        let body = serde_json::json!({"tool_call_id": tool_call_id, "output": output});
        let subject = format!("{}.results.{conv}.{msg}", self.prefix);
        self.publish(
            &subject,
            h,
            &format!("{conv}:{msg}:r{seq}"),
            body.to_string().as_bytes(),
        )
        .await;
    }
}

/// Streams message `i` (conversation `c{i}`, message `m{i}`) as the OpenAI chat chunks of
/// `calls_of(i)` for every `i` in `0..messages`, one task per message, pausing `pace` between
/// chunks so that a test can kill or restart things while input is still flowing.
pub fn spawn_paced_openai_streams(
    producer: &Producer,
    messages: usize,
    calls_of: fn(usize) -> Vec<Call>,
    pace: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..messages)
        .map(|i| {
            let producer = producer.clone();
            tokio::spawn(async move {
                for (seq, body) in openai_chat_stream(&calls_of(i)).iter().enumerate() {
                    producer
                        .chunk(
                            &format!("c{i}"),
                            &format!("m{i}"),
                            "openai-chat",
                            seq as u64,
                            body,
                        )
                        .await;
                    tokio::time::sleep(pace).await;
                }
            })
        })
        .collect()
}

/// One message read from a stream.
#[derive(Debug, Clone)]
pub struct Read {
    /// Its subject.
    pub subject: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its stream sequence.
    pub seq: u64,
}

impl Read {
    /// The payload as JSON (panics if it is not: events are JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.payload))
        })
    }

    /// A header value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.as_str().to_string())
    }
}

/// Reads a stream message by message, by sequence (no consumer: survives server restarts).
pub struct StreamLog {
    js: jetstream::Context,
    stream: String,
    next: u64,
    /// Everything read so far, in stream order.
    pub all: Vec<Read>,
}

impl StreamLog {
    /// A reader of `stream` from its first message.
    pub fn new(js: &jetstream::Context, stream: &str) -> StreamLog {
        StreamLog {
            js: js.clone(),
            stream: stream.to_string(),
            next: 1,
            all: Vec::new(),
        }
    }

    /// Reads whatever is new; transient errors are ignored (the next poll retries).
    pub async fn poll(&mut self) {
        let Ok(mut stream) = self.js.get_stream(&self.stream).await else {
            return;
        };
        let Ok(info) = stream.info().await else {
            return;
        };
        let last = info.state.last_sequence;
        while self.next <= last {
            match stream.get_raw_message(self.next).await {
                Ok(m) => self.all.push(Read {
                    subject: m.subject.to_string(),
                    headers: m.headers,
                    payload: m.payload.to_vec(),
                    seq: m.sequence,
                }),
                Err(e) => {
                    // deleted/absent sequences are skipped; anything else retried next poll
                    if !e.to_string().contains("not found") {
                        return;
                    }
                }
            }
            self.next += 1;
        }
    }

    /// Polls until `done(all)` holds; panics with `what` and the log after `limit`.
    pub async fn until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&[Read]) -> bool,
        log: impl Fn() -> String,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            self.poll().await;
            if done(&self.all) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; have {} message(s) in {}: {:#?}\n--- worker log (tail) ---\n{}",
                    self.all.len(),
                    self.stream,
                    self.all.iter().rev().take(5).map(|r| (&r.subject, String::from_utf8_lossy(&r.payload))).collect::<Vec<_>>(),
                    tail(&log(), 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Events grouped by message id, in stream order.
pub fn by_message(events: &[Read]) -> BTreeMap<(String, String), Vec<Value>> {
    let mut out: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for e in events {
        let v = e.json();
        let key = (
            v["conversation_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            v["message_id"].as_str().unwrap_or_default().to_string(),
        );
        out.entry(key).or_default().push(v);
    }
    out
}

/// Asserts that no `event_id` occurs twice among `events` (JetStream's dedupe held).
pub fn assert_each_event_once(events: &[Read]) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let id = e.json()["event_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *counts.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events published twice: {twice:?}");
}

/// Number of `message.completed` events read so far.
pub fn completed_messages(events: &[Read]) -> usize {
    events
        .iter()
        .filter(|e| {
            serde_json::from_slice::<Value>(&e.payload)
                .map(|v| v["type"] == "message.completed")
                .unwrap_or(false)
        })
        .count()
}

/// A tool call a generated stream carries.
#[derive(Debug, Clone)]
pub struct Call {
    /// Wire id.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments (serialized compactly and cut into small fragments).
    pub args: Value,
}

/// Cuts `text` into pieces of at most `n` chars.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    pieces_by(text, |_| n)
}

/// Cuts `text` into pieces of `len(i)` chars for the `i`-th piece (at least 1; the last one
/// may be shorter).
pub fn pieces_by(text: &str, mut len: impl FnMut(usize) -> usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let n = len(out.len()).max(1);
        let end = (at + n).min(chars.len());
        out.push(chars[at..end].iter().collect());
        at = end;
    }
    out
}

/// An OpenAI Chat Completions stream with parallel `calls`, arguments in 5-char fragments,
/// ending with `finish_reason: tool_calls` and `[DONE]`.
pub fn openai_chat_stream(calls: &[Call]) -> Vec<Vec<u8>> {
    openai_chat_stream_cut(calls, |_| 5)
}

/// [`openai_chat_stream`] with argument fragments of `frag(i)` chars (`i` counts fragments).
pub fn openai_chat_stream_cut(calls: &[Call], frag: impl FnMut(usize) -> usize) -> Vec<Vec<u8>> {
    let mut frag = frag;
    let mut out = Vec::new();
    let head = serde_json::json!({"id":"chatcmpl-t","object":"chat.completion.chunk","model":"gpt-4o",
        "choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]});
    out.push(head.to_string().into_bytes());
    for (i, c) in calls.iter().enumerate() {
        let start = serde_json::json!({"id":"chatcmpl-t","object":"chat.completion.chunk","model":"gpt-4o",
            "choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":c.id,"type":"function",
                "function":{"name":c.name,"arguments":""}}]},"finish_reason":null}]});
        out.push(start.to_string().into_bytes());
        for p in pieces_by(&c.args.to_string(), &mut frag) {
            let frag = serde_json::json!({"id":"chatcmpl-t","object":"chat.completion.chunk","model":"gpt-4o",
                "choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"function":{"arguments":p}}]},
                "finish_reason":null}]});
            out.push(frag.to_string().into_bytes());
        }
    }
    let fin = serde_json::json!({"id":"chatcmpl-t","object":"chat.completion.chunk","model":"gpt-4o",
        "choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]});
    out.push(fin.to_string().into_bytes());
    out.push(b"[DONE]".to_vec());
    out
}

/// An Anthropic Messages stream with `calls` as tool_use blocks (after one text block),
/// `input_json_delta` fragments of 5 chars, ending with `stop_reason: tool_use`.
pub fn anthropic_stream(calls: &[Call]) -> Vec<Vec<u8>> {
    anthropic_stream_cut(calls, |_| 5)
}

/// [`anthropic_stream`] with argument fragments of `frag(i)` chars (`i` counts fragments).
pub fn anthropic_stream_cut(calls: &[Call], frag: impl FnMut(usize) -> usize) -> Vec<Vec<u8>> {
    let mut frag = frag;
    let mut out = Vec::new();
    out.push(
        serde_json::json!({"type":"message_start","message":{"id":"msg_t","type":"message",
        "role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,
        "usage":{"input_tokens":10,"output_tokens":1}}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_start","index":0,
        "content_block":{"type":"text","text":""}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_delta","index":0,
        "delta":{"type":"text_delta","text":"Let me check."}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_stop","index":0})
            .to_string()
            .into_bytes(),
    );
    for (i, c) in calls.iter().enumerate() {
        let block = i + 1;
        out.push(
            serde_json::json!({"type":"content_block_start","index":block,
            "content_block":{"type":"tool_use","id":c.id,"name":c.name,"input":{}}})
            .to_string()
            .into_bytes(),
        );
        for p in pieces_by(&c.args.to_string(), &mut frag) {
            out.push(
                serde_json::json!({"type":"content_block_delta","index":block,
                "delta":{"type":"input_json_delta","partial_json":p}})
                .to_string()
                .into_bytes(),
            );
        }
        out.push(
            serde_json::json!({"type":"content_block_stop","index":block})
                .to_string()
                .into_bytes(),
        );
    }
    out.push(
        serde_json::json!({"type":"message_delta","delta":{"stop_reason":"tool_use",
        "stop_sequence":null},"usage":{"output_tokens":42}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"message_stop"})
            .to_string()
            .into_bytes(),
    );
    out
}

/// Checks the events of one message against its calls: each call `started` then
/// `completed` once with exactly its arguments, `message.completed` last listing every call
/// as completed; event ids unique. Returns a description of the first violation.
pub fn check_message(events: &[Value], calls: &[Call]) -> Result<(), String> {
    let mut seen_ids = std::collections::BTreeSet::new();
    for e in events {
        let id = e["event_id"].as_str().unwrap_or_default().to_string();
        if !seen_ids.insert(id.clone()) {
            return Err(format!("event {id} appears twice"));
        }
    }
    let calls_events: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("tool_call."))
        })
        .collect();
    for c in calls {
        let of_call: Vec<&str> = calls_events
            .iter()
            .filter(|e| e["tool_call"]["id"] == c.id.as_str())
            .map(|e| e["type"].as_str().unwrap_or_default())
            .collect();
        if of_call != ["tool_call.started", "tool_call.completed"] {
            return Err(format!("call {}: events {of_call:?}", c.id));
        }
        let completed = calls_events
            .iter()
            .find(|e| e["tool_call"]["id"] == c.id.as_str() && e["type"] == "tool_call.completed")
            .ok_or("no completed")?;
        if completed["tool_call"]["arguments"] != c.args {
            return Err(format!(
                "call {}: arguments {} != {}",
                c.id, completed["tool_call"]["arguments"], c.args
            ));
        }
        if completed["tool_call"]["name"] != c.name.as_str() {
            return Err(format!(
                "call {}: name {}",
                c.id, completed["tool_call"]["name"]
            ));
        }
    }
    if calls_events.len() != calls.len() * 2 {
        return Err(format!(
            "{} call events for {} calls",
            calls_events.len(),
            calls.len()
        ));
    }
    let done: Vec<(usize, &Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "message.completed")
        .collect();
    let [(pos, done)] = done.as_slice() else {
        return Err(format!("{} message.completed events", done.len()));
    };
    let last_call_event = events
        .iter()
        .rposition(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("tool_call."))
        })
        .unwrap_or(0);
    if *pos < last_call_event {
        return Err("message.completed before a call event".to_string());
    }
    let listed: Vec<(&str, &str)> = done["calls"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["tool_call"]["id"].as_str().unwrap_or_default(),
                        c["status"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<(&str, &str)> = calls.iter().map(|c| (c.id.as_str(), "completed")).collect();
    if listed != want {
        return Err(format!("message.completed lists {listed:?}, want {want:?}"));
    }
    Ok(())
}
