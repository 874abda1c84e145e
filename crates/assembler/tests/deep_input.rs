//! No input may crash the worker (issue 8 item 2): input that nests 100,000 levels deep (a
//! Vertex `partialArgs` path, OpenAI argument text, a chunk or a result body) ends its call
//! `invalid` or is dead-lettered with a reason, on a thread with a small stack, where an
//! unbounded recursion would overflow it. And arguments deeper than chunk_model's
//! `MAX_ARGUMENT_DEPTH` (64) are refused, so what is stored can be read back.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Config, Input, OutboxKind, Store};
use chunk_model::{Event, Provider};
use common::{chunk, events, oa_delta, oa_finish, result};

/// Runs `f` on a thread with a 256 KiB stack: a recursion per level of a 100,000-deep input
/// overflows it (and aborts the test binary), a bounded one does not.
fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// Applies one input (its outcome is read from the outbox).
fn apply(store: &Store, input: &Input<'_>, now_ms: u64) -> Result<(), assembler::StoreError> {
    store.apply(input, now_ms).map(|_| ())
}

fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

fn gemini<'a>(msg: &'a str, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        provider: Some(Provider::Gemini),
        ..chunk("c1", msg, seq, body)
    }
}

fn call_outcome(evs: &[Event]) -> (String, Option<String>) {
    let last = evs
        .iter()
        .rev()
        .find(|e| e.event_type.as_str().starts_with("tool_call."))
        .expect("a tool_call event");
    (last.event_type.as_str().to_string(), last.reason.clone())
}

#[test]
fn a_partial_args_path_100000_levels_deep_ends_the_call_invalid_not_a_stack_overflow() {
    let (evs, snapshot_ok) = on_a_small_stack(|| {
        let store = Store::open_memory(Config::default()).unwrap();
        let path = format!("${}", ".a".repeat(100_000));
        let first = serde_json::to_vec(&serde_json::json!({"candidates": [{"content": {"parts": [
            {"functionCall": {"name": "f", "willContinue": true,
                "partialArgs": [{"jsonPath": path, "stringValue": "x"}]}}]}}]}))
        .unwrap();
        let close = br#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]},"finishReason":"STOP"}]}"#;
        apply(&store, &gemini("m1", 0, &first), 1).unwrap();
        apply(&store, &gemini("m1", 1, close), 2).unwrap();
        let snapshot_ok = store.message_snapshot("c1", "m1").unwrap().is_some();
        (events(&store), snapshot_ok)
    });
    assert_eq!(
        call_outcome(&evs),
        (
            "tool_call.invalid".to_string(),
            Some("invalid_partial_args".to_string())
        )
    );
    assert_eq!(
        evs.last().map(|e| e.event_type.as_str()),
        Some("message.completed")
    );
    assert!(snapshot_ok);
}

#[test]
fn openai_arguments_nested_100000_deep_end_the_call_invalid_argument_depth_not_a_crash() {
    let evs = on_a_small_stack(|| {
        let store = Store::open_memory(Config::default()).unwrap();
        let text = nested(100_000);
        // in pieces, as a stream sends it
        let mut seq = 0;
        apply(
            &store,
            &chunk("c1", "m1", seq, &oa_delta(0, Some("call_1"), Some("f"), "")),
            1,
        )
        .unwrap();
        for piece in text.as_bytes().chunks(20_000) {
            seq += 1;
            let body = oa_delta(0, None, None, std::str::from_utf8(piece).unwrap());
            apply(&store, &chunk("c1", "m1", seq, &body), 1).unwrap();
        }
        apply(
            &store,
            &chunk("c1", "m1", seq + 1, &oa_finish("tool_calls")),
            2,
        )
        .unwrap();
        events(&store)
    });
    assert_eq!(
        call_outcome(&evs),
        (
            "tool_call.invalid".to_string(),
            Some("argument_depth".to_string())
        )
    );
    let invalid = evs
        .iter()
        .find(|e| e.event_type.as_str() == "tool_call.invalid")
        .unwrap();
    let call = invalid.tool_call.as_ref().unwrap();
    assert!(call.arguments.is_null());
    assert_eq!(call.raw_arguments.len(), 200_000, "raw text kept");
}

#[test]
fn arguments_deeper_than_64_levels_are_refused_so_the_stored_message_reads_back() {
    // 126 levels parse with serde_json's defaults (127), but the message record nests
    // arguments 3 levels deeper and message.completed 4: past what any reader accepts, so
    // such a call used to complete into a record the store could not read back.
    for (levels, want) in [
        (64, ("tool_call.completed", None)),
        (65, ("tool_call.invalid", Some("argument_depth"))),
        (126, ("tool_call.invalid", Some("argument_depth"))),
    ] {
        let store = Store::open_temporary(Config::default()).unwrap();
        let body = oa_delta(0, Some("call_1"), Some("f"), &nested(levels));
        apply(&store, &chunk("c1", "m1", 0, &body), 1).unwrap();
        apply(&store, &chunk("c1", "m1", 1, &oa_finish("tool_calls")), 2).unwrap();
        let evs = events(&store);
        let (ty, reason) = call_outcome(&evs);
        assert_eq!((ty.as_str(), reason.as_deref()), want, "{levels} levels");
        let snap = store.message_snapshot("c1", "m1").unwrap().unwrap();
        assert_eq!(snap.calls.len(), 1, "{levels} levels");
        // every event, as published, reads back with serde_json's default limit
        for row in common::durable_rows(&store, usize::MAX) {
            if row.kind == OutboxKind::Event {
                serde_json::from_slice::<Event>(&row.payload).unwrap();
            }
        }
    }
}

#[test]
fn a_chunk_nested_100000_deep_is_dead_lettered_with_a_recursion_limit_reason() {
    let rows = on_a_small_stack(|| {
        let store = Store::open_memory(Config::default()).unwrap();
        let deep_object = format!(
            "{{\"choices\":[],\"x\":{}1{}}}",
            "{\"a\":".repeat(100_000),
            "}".repeat(100_000)
        );
        let deep_array = nested(100_000);
        apply(&store, &chunk("c1", "m1", 0, deep_object.as_bytes()), 1).unwrap();
        apply(&store, &chunk("c1", "m2", 0, deep_array.as_bytes()), 1).unwrap();
        apply(&store, &result("c1", "m3", 0, deep_array.as_bytes()), 1).unwrap();
        common::durable_rows(&store, usize::MAX)
    });
    let reasons: Vec<String> = rows
        .iter()
        .filter(|r| r.kind == OutboxKind::DeadLetter)
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == "Toolstream-Reason")
                .map(|(_, v)| v.clone())
        })
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    for reason in &reasons {
        assert!(reason.starts_with("decode_error: "), "{reason}");
        assert!(
            reason.contains("nested deeper than 127 levels (recursion limit)"),
            "{reason}"
        );
    }
}

#[test]
fn a_result_whose_output_nests_up_to_the_input_limit_is_not_dead_lettered() {
    let store = Store::open_memory(Config::default()).unwrap();
    let body = format!(
        "{{\"tool_call_id\":\"call_1\",\"output\":{}}}",
        nested(MAX_OK_RESULT_DEPTH)
    );
    apply(&store, &result("c1", "m1", 0, body.as_bytes()), 1).unwrap();
    let dead: Vec<_> = common::durable_rows(&store, usize::MAX)
        .into_iter()
        .filter(|r| r.kind == OutboxKind::DeadLetter)
        .collect();
    assert!(
        dead.is_empty(),
        "a result within the limit is not dead-lettered"
    );
}

/// Deepest output accepted inside `{"tool_call_id", "output": …}` (one level for the object).
const MAX_OK_RESULT_DEPTH: usize = chunk_model::depth::MAX_JSON_DEPTH - 1;
