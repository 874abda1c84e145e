//! The live page (`/ui/`) in headless Chromium (Debian's `chromium`, driven by `playwright-core`
//! from tests/ui-clients) against the real binary and a real nats-server: a conversation's calls
//! appear and complete with their arguments and results; with argument previews on, a call
//! whose arguments stop halfway shows them partially (the worker's parse of the text so far),
//! then complete when the rest arrives; the worker is SIGKILLed while the page
//! is open, a message is published meanwhile, and after the restart the page has resumed and
//! shows it, every event delivered once; a reload shows the same. The screenshot lands in
//! `target/ui-clients/ui-page.png`.
//!
//! Needs Node 20+, npm and chromium; without them the test fails saying so (never skipped).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ops_support;
mod ui_support;

use common::{Call, Producer, StreamLog};
use ops_support::OpsWorker;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use toolstream_testkit::openai;

const CONV: &str = "ui-page";

fn calls(msg: &str) -> Vec<Call> {
    (0..2)
        .map(|i| Call {
            id: format!("call_{msg}_{i}"),
            name: if i == 0 { "get_weather" } else { "get_time" }.into(),
            args: json!({"city": format!("Paris {msg}"), "n": i}),
        })
        .collect()
}

/// The page driver (tests/ui-clients/page.mjs) and its line protocol.
struct Page {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Page {
    fn ask(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        match answer.trim().strip_prefix("ok") {
            Some(rest) if rest.trim().is_empty() => Value::Null,
            Some(rest) => serde_json::from_str(rest.trim()).unwrap(),
            None => panic!("the page: {answer}"),
        }
    }

    /// Waits until the page shows every call of `msgs` completed and has applied `events`.
    fn expect(&mut self, msgs: &[&str], events: usize) -> Value {
        let mut want = serde_json::Map::new();
        for m in msgs {
            for c in calls(m) {
                want.insert(c.id, json!("completed"));
            }
        }
        self.ask(&format!(
            "expect {}",
            json!({"calls": want, "applied": events})
        ))
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let exited = common::eventually(std::time::Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten()
        });
        if exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Publishes message `msg` (two calls) and a result for its first call.
async fn publish(producer: &Producer, msg: &str) {
    producer.openai_stream(CONV, msg, &calls(msg)).await;
    producer
        .result(
            CONV,
            msg,
            0,
            &format!("call_{msg}_0"),
            &format!("sunny in {msg}"),
        )
        .await;
}

/// How many events [`CONV`] has once `msgs` completed with their results.
async fn events_once_done(events: &mut StreamLog, worker: &OpsWorker, msgs: usize) -> usize {
    ui_support::conversation_done(events, CONV, msgs, || worker.log())
        .await
        .len()
}

#[tokio::test]
async fn the_live_page_shows_calls_resumes_after_a_worker_kill_and_shows_the_same_after_a_reload() {
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chromium is required for the live page test (Debian: apt-get install chromium)");
    let clients = tokio::task::spawn_blocking(ui_support::ui_clients);
    let server = toolstream_testkit::NatsServer::start().expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = OpsWorker::start_with_config(
        &server.url(),
        dir.path(),
        "toolstream.toml",
        // previews after every fragment (what the page shows must not depend on timing)
        "[assembler.previews]\nenabled = true\nmin_bytes = 1\nmin_interval_ms = 0\n",
    )
    .await;
    let client = common::client(&server.url()).await;
    let js = async_nats::jetstream::new(client.clone());
    let producer = Producer::new(js.clone());
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    publish(&producer, "m1").await;
    let n1 = events_once_done(&mut events, &worker, 1).await;
    let clients = clients.await.unwrap();

    let url = format!(
        "http://127.0.0.1:{}/ui/?conversation={CONV}",
        worker.metrics_port
    );
    let shot = clients.join("ui-page.png");
    let mut child = Command::new("node")
        .arg("page.mjs")
        .arg(&url)
        .arg(&shot)
        .arg(chromium)
        .current_dir(&clients)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run node page.mjs");
    let mut page = Page {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        child,
    };

    // calls appear and complete, with their arguments and result
    let shown = page.expect(&["m1"], n1);
    assert_eq!(shown["received"], n1, "each event delivered once: {shown}");
    let first = &shown["calls"]["call_m1_0"];
    assert_eq!(
        serde_json::from_str::<Value>(first["args"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris m1", "n": 0})
    );
    assert!(first["result"].as_str().unwrap().contains("sunny in m1"));
    assert_eq!(shown["completed"], json!(["m1"]));
    assert_eq!(first["partial"], false, "completed: the final state");

    // a call whose arguments stop halfway fills in live from its previews, then completes
    let live = [
        openai::role_chunk(),
        openai::call_start(0, "call_live", "plan_trip"),
        openai::args_chunk(0, "{\"city\": \"Par"),
    ];
    for (seq, c) in live.iter().enumerate() {
        producer
            .chunk(CONV, "live", "openai-chat", seq as u64, c)
            .await;
    }
    let partial = serde_json::to_string_pretty(&json!({"city": "Par"})).unwrap();
    let shown = page.ask(&format!(
        "expect {}",
        json!({"calls": {"call_live": "streaming"}, "args": {"call_live": partial}, "applied": 0})
    ));
    assert_eq!(shown["calls"]["call_live"]["partial"], true, "{shown}");
    let rest = [
        openai::args_chunk(0, "is\", \"days\": 3}"),
        openai::finish_chunk("tool_calls"),
        openai::DONE.to_vec(),
    ];
    for (seq, c) in rest.iter().enumerate() {
        producer
            .chunk(CONV, "live", "openai-chat", (live.len() + seq) as u64, c)
            .await;
    }
    producer
        .result(CONV, "live", 0, "call_live", "booked")
        .await;
    let n_live = events_once_done(&mut events, &worker, 2).await;
    let done = serde_json::to_string_pretty(&json!({"city": "Paris", "days": 3})).unwrap();
    let shown = page.ask(&format!(
        "expect {}",
        json!({"calls": {"call_live": "completed"}, "args": {"call_live": done}, "applied": n_live})
    ));
    assert_eq!(shown["calls"]["call_live"]["partial"], false, "{shown}");
    assert_eq!(
        shown["received"], n_live,
        "each event delivered once: {shown}"
    );

    // the worker dies under the open page; a message arrives meanwhile; the page resumes
    worker.kill();
    publish(&producer, "m2").await;
    worker.restart();
    worker.wait_status("/healthz", 200).await;
    let n2 = events_once_done(&mut events, &worker, 3).await;
    let shown = page.expect(&["m1", "m2"], n2);
    assert_eq!(
        shown["received"], n2,
        "after the resume: every event delivered once: {shown}"
    );
    assert_eq!(shown["applied"], n2);

    // a reload shows the same
    page.ask("reload");
    let reloaded = page.expect(&["m1", "m2"], n2);
    assert_eq!(reloaded["calls"], shown["calls"], "a reload shows the same");
    assert_eq!(reloaded["received"], n2);
    page.ask("screenshot");
    assert!(shot.exists());
    drop(page);
    let _ = worker.terminate();
}
