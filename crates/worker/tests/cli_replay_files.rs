//! `toolstream replay` of recorded provider streams as a new user tried it (issue 12, item 7),
//! no server needed: a replay that decoded nothing (`--provider gemini` on an OpenAI
//! recording) or whose chunks failed to decode (`--provider anthropic`) says so and exits
//! non-zero; `replay -` reads standard input; the timeline shows each chunk as sent (not
//! re-serialized, not cut at ~120 characters) and an Anthropic text block's
//! `content_block_stop` as a block end, not a call end.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn recording(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/recordings")
        .join(rel)
}

fn replay(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolstream"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolstream replay");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn replay_with_the_wrong_provider_says_nothing_was_replayed_and_fails() {
    let file = recording("openai-chat/parallel_calls.sse");
    let file = file.to_str().unwrap();
    let out = replay(&["--provider", "gemini", file], None);
    assert!(
        !out.status.success(),
        "exit 0 for a replay that decoded nothing"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("meant anything to the gemini decoder") && err.contains("openai-chat"),
        "{err}"
    );
    let out = replay(&["--provider", "anthropic", file], None);
    assert!(
        !out.status.success(),
        "exit 0 with every chunk a decode_error"
    );
    let err = text(&out.stderr);
    assert!(err.contains("could not be decoded as anthropic"), "{err}");
    // the right provider (detected) still succeeds
    assert!(replay(&[file], None).status.success());
}

#[test]
fn replay_dash_reads_standard_input() {
    let file = recording("openai-chat/parallel_calls.sse");
    let bytes = std::fs::read(&file).unwrap();
    let from_stdin = replay(&["-"], Some(&bytes));
    assert!(from_stdin.status.success(), "{}", text(&from_stdin.stderr));
    let from_file = replay(&[file.to_str().unwrap()], None);
    let types = |o: &Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .map(|l| {
                let e: serde_json::Value = serde_json::from_str(l).unwrap();
                format!("{} {}", e["type"], e["tool_call"]["id"])
            })
            .collect()
    };
    assert_eq!(types(&from_stdin), types(&from_file));
    assert_eq!(
        types(&from_stdin).len(),
        7,
        "3 started, 3 completed, 1 message.completed"
    );
}

#[test]
fn the_timeline_shows_chunks_as_sent_and_a_text_blocks_stop_as_a_block_end() {
    let file = recording("anthropic/single_call.sse");
    let out = replay(&["--timeline", file.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    // every data line of the recording appears byte for byte (the `{"type": "ping"}` keeps
    // its space; message_start, over 120 characters, is whole)
    let source = std::fs::read_to_string(&file).unwrap();
    for data in source.lines().filter_map(|l| l.strip_prefix("data: ")) {
        assert!(page.contains(data), "{data} not shown as sent:\n{page}");
    }
    let lines: Vec<&str> = page.lines().collect();
    let after = |needle: &str| -> &str {
        let i = lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} missing:\n{page}"));
        lines[i + 1]
    };
    assert!(
        after(r#"{"type":"content_block_stop","index":0}"#)
            .contains("block end index=0 (no tool call there)"),
        "{page}"
    );
    assert!(
        after(r#"{"type":"content_block_stop","index":1}"#).contains("call end index=1"),
        "{page}"
    );
}

/// OpenAI chat with `n: 2`: the timeline shows choice 1's statements and events as its own
/// message's, not as choice 0's.
#[test]
fn the_timeline_shows_another_choices_calls_as_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two_choices.sse");
    let call = |choice: u32, id: &str| {
        format!(
            r#"{{"index":{choice},"delta":{{"tool_calls":[{{"index":0,"id":"{id}","type":"function","function":{{"name":"f","arguments":"{{\"x\":{choice}}}"}}}}]}},"finish_reason":null}}"#
        )
    };
    let chunks = [
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","choices":[{},{}]}}"#,
            call(0, "call_c0"),
            call(1, "call_c1")
        ),
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"},{"index":1,"delta":{},"finish_reason":"tool_calls"}]}"#.to_string(),
        "[DONE]".to_string(),
    ];
    let sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    std::fs::write(&file, sse).unwrap();
    let out = replay(&["--timeline", file.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(
        page.contains("choice 1: fragment index=0 id=call_c1"),
        "{page}"
    );
    assert!(
        page.contains("tool_call.completed #0 call_c1 f {\"x\":1} (message two_choices~choice1)"),
        "{page}"
    );
}
