//! `toolstream publish` as a separate command per step, against a real nats-server and the
//! real worker: what a second command sends is stored and applied (results, a continued
//! stream, an end sent alone), a duplicate the user did not ask for fails the command, and
//! message ids of conversations with `:` in their ids do not collide. Each test is named for
//! the bug it pins (issue 7, items 3 and 4; issue 8, item 4).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use chunk_model::wire::msg_id;
use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// A running server and worker (the shared end-to-end setup).
async fn setup() -> E2e {
    E2e::start(toolstream_bin(), &[]).await
}

/// Runs `toolstream publish --nats-url <url> <args>` with `stdin` as its input.
async fn publish(url: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut argv = vec!["publish".to_string(), "--nats-url".into(), url.to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let stdin = stdin.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolstream"))
            .args(&argv)
            .env_remove("TOOLSTREAM_NATS_URL")
            .env_remove("TOOLSTREAM_SUBJECT_PREFIX")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn toolstream publish");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&stdin)
            .expect("write stdin");
        child.wait_with_output().expect("toolstream publish output")
    })
    .await
    .expect("publish task")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the command succeeded; returns its stderr.
fn ok(out: &Output) -> String {
    assert!(out.status.success(), "publish failed: {}", stderr(out));
    stderr(out)
}

/// `frames` as an SSE recording.
fn sse(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(f);
        out.extend_from_slice(b"\n\n");
    }
    out
}

fn calls(prefix: &str) -> Vec<Call> {
    vec![
        Call {
            id: format!("{prefix}_a"),
            name: "lookup".into(),
            args: json!({"q": format!("{prefix} one"), "n": 1}),
        },
        Call {
            id: format!("{prefix}_b"),
            name: "fetch".into(),
            args: json!({"url": format!("https://example.com/{prefix}")}),
        },
    ]
}

/// The events of (`conv`, `msg`) read so far.
fn events_of(all: &[Read], conv: &str, msg: &str) -> Vec<Value> {
    all.iter()
        .map(Read::json)
        .filter(|e| e["conversation_id"] == conv && e["message_id"] == msg)
        .collect()
}

fn has_result(events: &[Value], call: &str, output: &str) -> bool {
    events.iter().any(|e| {
        e["type"] == "tool_result.completed"
            && e["tool_result"]["tool_call_id"] == call
            && e["tool_result"]["output"] == output
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publish_results_commands_both_store_their_result() {
    let s = setup().await;
    let calls = calls("call");
    let stream = sse(&openai_chat_stream(&calls));
    ok(&publish(
        &s.server.url(),
        &["--conversation", "c1", "--message", "m1", "-"],
        &stream,
    )
    .await);
    // one command per tool result, as two executors would send them
    for (call, output) in [("call_a", "result A"), ("call_b", "result B")] {
        let body = json!({"tool_call_id": call, "output": output}).to_string();
        let out = publish(
            &s.server.url(),
            &["--results", "--conversation", "c1", "--message", "m1", "-"],
            body.as_bytes(),
        )
        .await;
        let err = ok(&out);
        assert!(!err.contains("already stored"), "{err}");
    }
    let mut events = StreamLog::new(&s.js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "both results applied",
            |all| {
                let evs = events_of(all, "c1", "m1");
                has_result(&evs, "call_a", "result A") && has_result(&evs, "call_b", "result B")
            },
            || s.worker.log(),
        )
        .await;
    // both stored in the input stream, neither with a Toolstream-Seq
    let mut input = StreamLog::new(&s.js, "TOOLSTREAM_IN");
    input.poll().await;
    let results: Vec<&Read> = input
        .all
        .iter()
        .filter(|r| r.subject.contains(".results."))
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.header("Toolstream-Seq").is_none()));
    let ids: Vec<String> = results
        .iter()
        .map(|r| r.header("Nats-Msg-Id").unwrap_or_default())
        .collect();
    let want: Vec<String> = ["call_a", "call_b"]
        .iter()
        .map(|c| {
            msg_id::msg_id(
                "c1",
                "m1",
                msg_id::Input::Results(&[msg_id::ResultItem::Whole(c)]),
            )
        })
        .collect();
    assert_eq!(ids, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_seq_start_continues_a_stream_in_a_later_command() {
    let s = setup().await;
    let calls = calls("cont");
    let frames = openai_chat_stream(&calls);
    let half = frames.len() / 2;
    let args = ["--conversation", "c2", "--message", "m2"];
    ok(&publish(
        &s.server.url(),
        &[&args[..], &["-"]].concat(),
        &sse(&frames[..half]),
    )
    .await);
    let start = half.to_string();
    let rest = [&args[..], &["--seq-start", &start, "-"]].concat();
    ok(&publish(&s.server.url(), &rest, &sse(&frames[half..])).await);
    let mut events = StreamLog::new(&s.js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the continued message completed",
            |all| {
                events_of(all, "c2", "m2")
                    .iter()
                    .any(|e| e["type"] == "message.completed")
            },
            || s.worker.log(),
        )
        .await;
    let evs = events_of(&events.all, "c2", "m2");
    check_message(&evs, &calls).unwrap_or_else(|e| panic!("{e}: {evs:#?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_end_after_an_earlier_command_ends_the_stream() {
    let s = setup().await;
    let calls = calls("open");
    let mut frames = openai_chat_stream(&calls);
    frames.truncate(frames.len() - 2); // no finish_reason, no [DONE]: calls stay open
    let args = ["--conversation", "c3", "--message", "m3"];
    ok(&publish(
        &s.server.url(),
        &[&args[..], &["-"]].concat(),
        &sse(&frames),
    )
    .await);
    // an end alone must say where the stream is...
    let out = publish(&s.server.url(), &[&args[..], &["--end"]].concat(), b"").await;
    assert!(!out.status.success(), "an unnumbered end was accepted");
    assert!(stderr(&out).contains("--seq-start"), "{}", stderr(&out));
    // ... and then ends it: the worker applies it after the earlier command's chunks
    let n = frames.len().to_string();
    ok(&publish(
        &s.server.url(),
        &[&args[..], &["--end", "--seq-start", &n]].concat(),
        b"",
    )
    .await);
    let mut events = StreamLog::new(&s.js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the ended message completed",
            |all| {
                events_of(all, "c3", "m3")
                    .iter()
                    .any(|e| e["type"] == "message.completed")
            },
            || s.worker.log(),
        )
        .await;
    let evs = events_of(&events.all, "c3", "m3");
    let done = evs
        .iter()
        .find(|e| e["type"] == "message.completed")
        .expect("completed");
    let reasons: Vec<&Value> = done["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| &c["reason"])
        .collect();
    // ended by the explicit end, not by the idle timeout
    assert_eq!(reasons, [&json!("stream_ended"), &json!("stream_ended")]);
    let mut input = StreamLog::new(&s.js, "TOOLSTREAM_IN");
    input.poll().await;
    let end = input
        .all
        .iter()
        .find(|r| r.header("Toolstream-Control").as_deref() == Some("end"))
        .expect("the end is stored");
    assert_eq!(end.header("Toolstream-Seq"), Some(n.clone()));
    assert_eq!(
        end.header("Nats-Msg-Id"),
        Some(msg_id::msg_id(
            "c3",
            "m3",
            msg_id::Input::End(frames.len() as u64)
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_the_user_did_not_mean_is_an_error() {
    let s = setup().await;
    let stream = sse(&openai_chat_stream(&calls("dup")));
    let args = ["--conversation", "c4", "--message", "m4", "-"];
    ok(&publish(&s.server.url(), &args, &stream).await);
    // the same stream again, e.g. a forgotten --seq-start: nothing new is stored, and the
    // command says so by failing
    let out = publish(&s.server.url(), &args, &stream).await;
    assert!(!out.status.success(), "duplicates reported as success");
    let err = stderr(&out);
    let first = msg_id::msg_id("c4", "m4", msg_id::Input::Chunk(0));
    assert!(err.contains("NOT stored"), "{err}");
    assert!(
        err.contains(&format!("seq 0 (Nats-Msg-Id {first})")),
        "{err}"
    );
    assert!(err.contains("--retry"), "{err}");
    // a second result for a call is an error too
    let body = json!({"tool_call_id": "dup_a", "output": "x"}).to_string();
    let results = ["--results", "--conversation", "c4", "--message", "m4", "-"];
    ok(&publish(&s.server.url(), &results, body.as_bytes()).await);
    let out = publish(&s.server.url(), &results, body.as_bytes()).await;
    assert!(!out.status.success(), "a second result reported as success");
    assert!(stderr(&out).contains("results frame 0"), "{}", stderr(&out));
    // a resend the user means is fine
    let out = publish(
        &s.server.url(),
        &[&["--retry"], &args[..]].concat(),
        &stream,
    )
    .await;
    let err = ok(&out);
    assert!(err.contains("already stored"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_ids_of_colon_conversations_do_not_collide() {
    let s = setup().await;
    // the old `<conv>:<msg>:<seq>` made both `k11:a:b:<seq>`
    let pairs = [
        ("k11:a", "b", calls("colon1")),
        ("k11", "a:b", calls("colon2")),
    ];
    for (conv, msg, calls) in &pairs {
        let out = publish(
            &s.server.url(),
            &["--conversation", conv, "--message", msg, "-"],
            &sse(&openai_chat_stream(calls)),
        )
        .await;
        let err = ok(&out);
        assert!(!err.contains("already stored"), "{conv}/{msg}: {err}");
    }
    let mut events = StreamLog::new(&s.js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "both messages completed",
            |all| completed_messages(all) == 2,
            || s.worker.log(),
        )
        .await;
    for (conv, msg, calls) in &pairs {
        let evs = events_of(&events.all, conv, msg);
        check_message(&evs, calls).unwrap_or_else(|e| panic!("{conv}/{msg}: {e}"));
    }
    let mut input = StreamLog::new(&s.js, "TOOLSTREAM_IN");
    input.poll().await;
    let n = openai_chat_stream(&pairs[0].2).len() + openai_chat_stream(&pairs[1].2).len();
    assert_eq!(input.all.len(), n, "every chunk of both messages stored");
    let a0 = msg_id::msg_id("k11:a", "b", msg_id::Input::Chunk(0));
    let b0 = msg_id::msg_id("k11", "a:b", msg_id::Input::Chunk(0));
    assert_ne!(a0, b0);
    let ids: Vec<String> = input
        .all
        .iter()
        .filter_map(|r| r.header("Nats-Msg-Id"))
        .collect();
    assert!(ids.contains(&a0) && ids.contains(&b0), "{ids:?}");
}
