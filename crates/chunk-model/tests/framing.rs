//! Tests for the recorded-stream framing reader: one test per SSE / NDJSON / JSON-array
//! quirk, named for it, plus detection, line numbers and a no-panic property test.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunk_model::framing::{detect, split, split_as, Frame, Framing, FramingError};
use proptest::prelude::*;

fn data(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| String::from_utf8(f.data.clone()).unwrap())
        .collect()
}

fn ok(input: &str) -> Vec<Frame> {
    split(input.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{input}"))
}

#[test]
fn sse_data_lines_become_frames_and_done_passes_through() {
    let frames = ok("data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, r#"{"a":2}"#, "[DONE]"]);
    assert!(frames.iter().all(|f| f.event.is_none()));
}

#[test]
fn sse_event_name_is_kept_per_event_and_reset_after_it() {
    let frames =
        ok("event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: {\"x\":1}\n\n");
    assert_eq!(frames[0].event.as_deref(), Some("message_start"));
    assert_eq!(frames[1].event, None);
}

#[test]
fn sse_comment_lines_are_skipped() {
    let frames = ok(": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\ndata: {\"a\":1}\n\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#]);
    assert_eq!(detect(b": OPENROUTER PROCESSING\n\n"), Some(Framing::Sse));
}

#[test]
fn sse_crlf_line_ends() {
    let frames = ok("event: ping\r\ndata: {\"a\":1}\r\n\r\ndata: {\"b\":2}\r\n\r\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, r#"{"b":2}"#]);
    assert_eq!(frames[0].event.as_deref(), Some("ping"));
}

#[test]
fn sse_bare_cr_line_ends() {
    let frames = ok("data: {\"a\":1}\r\rdata: {\"b\":2}\r\r");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, r#"{"b":2}"#]);
}

#[test]
fn sse_space_after_colon_is_optional_and_only_one_is_removed() {
    let frames = ok("data:{\"a\":1}\n\ndata:  [DONE]\n\n");
    // The second keeps one leading space by the spec; frame data is trimmed.
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, "[DONE]"]);
}

#[test]
fn sse_multi_line_data_joins_with_newline() {
    let frames = ok("data: {\"a\":\ndata: 1}\n\n");
    assert_eq!(data(&frames), vec!["{\"a\":\n1}"]);
    let value: serde_json::Value = serde_json::from_slice(&frames[0].data).unwrap();
    assert_eq!(value["a"], 1);
}

#[test]
fn sse_trailing_whitespace_after_the_json_is_tolerated() {
    let frames = ok("data: {\"a\":1}   \t\n\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#]);
}

#[test]
fn sse_id_retry_and_unknown_fields_are_ignored() {
    let frames = ok("id: 42\nretry: 3000\nfoo: bar\nnocolon\ndata: {\"a\":1}\n\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#]);
    assert_eq!(detect(b"id: 1\ndata: x\n\n"), Some(Framing::Sse));
    assert_eq!(detect(b"retry: 10\n\n"), Some(Framing::Sse));
}

#[test]
fn sse_event_without_data_is_not_a_frame() {
    let frames = ok("event: ping\n\ndata: {\"a\":1}\n\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#]);
    assert_eq!(
        frames[0].event, None,
        "the ping's name does not leak into the next event"
    );
}

#[test]
fn sse_empty_data_line_is_an_empty_frame() {
    let frames = ok("data:\n\n");
    assert_eq!(frames.len(), 1);
    assert!(frames[0].data.is_empty());
}

#[test]
fn sse_event_open_at_end_of_recording_is_kept() {
    let frames = ok("data: {\"a\":1}\n\ndata: {\"cut\":");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, r#"{"cut":"#]);
}

#[test]
fn sse_frames_carry_the_line_of_their_first_data_line() {
    let frames = ok(": c\n\nevent: e\ndata: {\"a\":1}\n\ndata: {\"b\":\ndata: 2}\n\n");
    let lines: Vec<usize> = frames.iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![4, 6]);
}

#[test]
fn sse_byte_order_mark_is_skipped() {
    let frames = split(b"\xEF\xBB\xBFdata: {\"a\":1}\n\n").unwrap();
    assert_eq!(data(&frames), vec![r#"{"a":1}"#]);
}

#[test]
fn ndjson_one_value_per_non_blank_line() {
    let frames = ok("{\"a\":1}\n\n{\"b\":2}\n   \n{\"c\":3}");
    assert_eq!(
        data(&frames),
        vec![r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#]
    );
    let lines: Vec<usize> = frames.iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![1, 3, 5]);
    assert!(frames.iter().all(|f| f.event.is_none()));
}

#[test]
fn ndjson_crlf_is_tolerated() {
    let frames = ok("{\"a\":1}\r\n{\"b\":2}\r\n");
    assert_eq!(data(&frames), vec![r#"{"a":1}"#, r#"{"b":2}"#]);
    assert_eq!(detect(b"{\"a\":1}\r\n"), Some(Framing::Ndjson));
}

#[test]
fn ndjson_line_containing_data_colon_text_is_not_mistaken_for_sse() {
    let frames = ok("{\"text\":\"data: not a field\"}\n");
    assert_eq!(data(&frames), vec![r#"{"text":"data: not a field"}"#]);
}

#[test]
fn json_array_elements_become_frames_byte_for_byte() {
    let input = "[{\"a\": [1, 2]},\r\n {\"s\": \"],{\\\"x\"} , {}]";
    assert_eq!(detect(input.as_bytes()), Some(Framing::JsonArray));
    let frames = ok(input);
    assert_eq!(
        data(&frames),
        vec![r#"{"a": [1, 2]}"#, r#"{"s": "],{\"x"}"#, "{}"]
    );
    let lines: Vec<usize> = frames.iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![1, 2, 2]);
}

#[test]
fn json_array_that_is_empty_has_no_frames() {
    assert_eq!(ok("  [ ]  "), vec![]);
}

#[test]
fn json_array_cut_off_is_an_error_with_its_line() {
    let err = split(b"[{\"a\":1},\n{\"b\":").unwrap_err();
    assert!(
        matches!(err, FramingError::BadArray { line: 2, .. }),
        "{err}"
    );
    let err = split(b"[{\"a\":1}").unwrap_err();
    assert!(matches!(err, FramingError::BadArray { .. }), "{err}");
}

#[test]
fn json_array_with_trailing_content_or_missing_comma_is_an_error() {
    assert!(matches!(
        split(b"[{}] {}"),
        Err(FramingError::BadArray { .. })
    ));
    assert!(matches!(
        split(b"[{} {}]"),
        Err(FramingError::BadArray { .. })
    ));
}

#[test]
fn blank_input_has_no_frames() {
    assert_eq!(ok(""), vec![]);
    assert_eq!(ok(" \r\n\n\t"), vec![]);
    assert_eq!(detect(b"  \n"), None);
}

#[test]
fn undetectable_input_is_an_error_naming_its_line() {
    let err = split(b"\n\nhello world\nmore").unwrap_err();
    assert_eq!(
        err,
        FramingError::Undetected {
            line: 3,
            excerpt: "hello world".to_string()
        }
    );
    assert_eq!(
        detect(b"database: x"),
        None,
        "`data` must be the whole field name"
    );
}

#[test]
fn explicit_framing_overrides_detection() {
    // An NDJSON file of arrays would be detected as one JSON array; split_as reads lines.
    let frames = split_as(Framing::Ndjson, b"[1]\n[2]\n").unwrap();
    assert_eq!(data(&frames), vec!["[1]", "[2]"]);
}

#[test]
fn every_recording_in_the_repo_splits() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings");
    let mut count = 0;
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        // `expected/` holds what replay must print for each recording, not recordings
        if !dir.is_dir() || dir.file_name().is_some_and(|n| n == "expected") {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            if !path.is_file() {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let frames = split(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!frames.is_empty(), "{} has no frames", path.display());
            count += 1;
        }
    }
    assert!(count >= 15, "found only {count} recordings");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = split(&bytes);
        for framing in [Framing::Sse, Framing::Ndjson, Framing::JsonArray] {
            let _ = split_as(framing, &bytes);
        }
    }

    #[test]
    fn sse_of_arbitrary_single_line_payloads_round_trips(
        payloads in prop::collection::vec("[^\r\n]{1,40}", 1..8),
        crlf in any::<bool>(),
    ) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let text: String = payloads.iter().map(|p| format!("data: {p}{nl}{nl}")).collect();
        let frames = split_as(Framing::Sse, text.as_bytes()).unwrap();
        let expected: Vec<String> = payloads
            .iter()
            .map(|p| p.trim_matches(|c: char| c.is_ascii_whitespace()).to_string())
            .collect();
        let got: Vec<String> = frames
            .iter()
            .map(|f| String::from_utf8(f.data.clone()).unwrap())
            .collect();
        prop_assert_eq!(got, expected);
    }
}
