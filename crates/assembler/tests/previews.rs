//! Argument previews (`tool_call.delta`, `Config::previews`) through the store: off by default;
//! on, they change no other event, a call's deltas are contiguous and concatenate to a prefix
//! of the text it assembled (every recorded provider stream), the throttle bounds them by bytes
//! and by publish time, none follows the call's end, and a redelivery or a crash and restart
//! never emits one twice (same ids, same bytes). `partial_arguments` is the best-effort parse
//! of the text so far: a property test runs it on every prefix of generated JSON.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::core::preview::{partial_json, FLUSH_PENDING_BYTES};
use assembler::storage::sled_backend::SledStorage;
use assembler::{Config, Input, InputKind, OutboxKind, Previews, Seq, Store};
use chunk_model::{Event, EventType, Provider};
use common::{chunk, events, is_terminal, oa_delta, oa_finish};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn with_previews(previews: Previews) -> Config {
    Config {
        previews,
        ..Config::default()
    }
}

/// Previews on every chunk that adds text.
fn eager() -> Config {
    with_previews(Previews {
        enabled: true,
        min_bytes: 1,
        min_interval_ms: 0,
        partial_max_bytes: 1 << 20,
    })
}

/// A call `call_big` whose arguments `{"path":"/tmp/x","content":"…"}` arrive in `frag`-byte
/// fragments, then the finish.
fn fragmented(content_len: usize, frag: usize) -> (Vec<Vec<u8>>, String) {
    let text = serde_json::to_string(
        &json!({"path": "/tmp/x", "content": "ab\"c\\d é ".repeat(content_len / 10)}),
    )
    .unwrap();
    let mut bodies = vec![oa_delta(0, Some("call_big"), Some("write_file"), "")];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(frag) {
        bodies.push(oa_delta(0, None, None, &piece.iter().collect::<String>()));
    }
    bodies.push(oa_finish("tool_calls"));
    (bodies, text)
}

/// Applies `bodies` as chunks of c/m, chunk `i` published at `at(i)`.
fn apply_all(store: &Store, bodies: &[Vec<u8>], at: impl Fn(usize) -> u64) {
    for (i, b) in bodies.iter().enumerate() {
        let _ = store.apply(&chunk("c", "m", i as u64, b), at(i)).unwrap();
    }
}

fn deltas(evs: &[Event]) -> Vec<&Event> {
    evs.iter()
        .filter(|e| e.event_type == EventType::ToolCallDelta)
        .collect()
}

fn without_deltas(evs: &[Event]) -> Vec<Event> {
    evs.iter()
        .filter(|e| e.event_type != EventType::ToolCallDelta)
        .cloned()
        .collect()
}

/// Checks the deltas of every call in `evs`: each after the call's start and before its end,
/// offsets contiguous from 0, `partial_arguments` the parse of the text so far; returns the
/// concatenated text per (message, call index).
fn check_deltas(evs: &[Event]) -> BTreeMap<(String, u32), String> {
    let mut text: BTreeMap<(String, u32), String> = BTreeMap::new();
    let mut started: HashMap<(String, u32), bool> = HashMap::new();
    let mut ended: HashMap<(String, u32), bool> = HashMap::new();
    for e in evs {
        let Some(call) = &e.tool_call else { continue };
        let key = (e.message_id.clone(), call.index);
        match e.event_type {
            EventType::ToolCallStarted => {
                started.insert(key, true);
            }
            EventType::ToolCallDelta => {
                assert!(
                    started.contains_key(&key),
                    "a delta before its start: {e:?}"
                );
                assert!(
                    !ended.contains_key(&key),
                    "a delta after its call ended: {e:?}"
                );
                assert_eq!(call.arguments, Value::Null, "a delta is never a completion");
                assert!(call.raw_arguments.is_empty());
                let so_far = text.entry(key).or_default();
                assert_eq!(
                    e.arguments_offset,
                    Some(so_far.len() as u64),
                    "deltas are contiguous"
                );
                let delta = e.arguments_delta.as_deref().unwrap();
                assert!(!delta.is_empty(), "a delta carries text");
                so_far.push_str(delta);
                if let Some(partial) = &e.partial_arguments {
                    assert_eq!(Some(partial), partial_json(so_far).as_ref());
                }
            }
            _ => {
                ended.insert(key, true);
            }
        }
    }
    text
}

/// The final raw text of each call (its terminal event), by (message, call index).
fn finals(evs: &[Event]) -> BTreeMap<(String, u32), String> {
    evs.iter()
        .filter(|e| is_terminal(e))
        .filter_map(|e| {
            let c = e.tool_call.as_ref()?;
            Some(((e.message_id.clone(), c.index), c.raw_arguments.clone()))
        })
        .collect()
}

#[test]
fn previews_are_off_by_default_and_emit_nothing() {
    assert!(!Config::default().previews.enabled);
    let (bodies, _) = fragmented(4_000, 3);
    let store = Store::open_memory(Config::default()).unwrap();
    apply_all(&store, &bodies, |i| i as u64 * 1_000);
    let evs = events(&store);
    assert!(deltas(&evs).is_empty(), "{:?}", deltas(&evs).first());
    assert_eq!(evs.len(), 3, "started, completed, message.completed");
}

#[test]
fn deltas_concatenate_to_a_prefix_of_the_arguments_and_change_no_other_event() {
    let (bodies, text) = fragmented(2_000, 7);
    let off = Store::open_memory(Config::default()).unwrap();
    apply_all(&off, &bodies, |i| i as u64);
    let on = Store::open_memory(eager()).unwrap();
    apply_all(&on, &bodies, |i| i as u64);
    let (off, on) = (events(&off), events(&on));
    assert_eq!(without_deltas(&on), off, "the other events are unchanged");
    let streamed = check_deltas(&on);
    let got = &streamed[&("m".to_string(), 0)];
    assert!(text.starts_with(got.as_str()));
    assert_eq!(got, &text, "min_bytes 1: every fragment previewed");
    let completed = &off[1];
    assert_eq!(completed.event_type, EventType::ToolCallCompleted);
    assert_eq!(completed.tool_call.as_ref().unwrap().raw_arguments, text);
    // the last preview with a parse shows the arguments as far as they went
    let last = deltas(&on).last().copied().unwrap();
    let partial = last.partial_arguments.as_ref().unwrap();
    assert_eq!(partial["path"], "/tmp/x");
}

/// Every recorded provider stream, previews on every chunk: the events other than deltas are
/// the same as with previews off, and each call's deltas concatenate to a prefix of its final
/// raw text (the text it assembled; a provider restating the whole input at the end, as the
/// AI SDK's `tool-call` does, is accepted only when the restatement extends the preview).
#[test]
fn every_recorded_stream_previews_a_prefix_of_each_calls_text_and_nothing_else_changes() {
    let root = common::recordings_root();
    let mut files = 0;
    let mut previewed = 0;
    for (provider, file) in common::recordings() {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let bodies = common::recording(&rel);
        let run = |config: Config| {
            let store = Store::open_memory(config).unwrap();
            for (i, b) in bodies.iter().enumerate() {
                let input = Input {
                    provider: Some(provider),
                    ..chunk("c", "m", i as u64, b)
                };
                let _ = store.apply(&input, i as u64).unwrap();
            }
            events(&store)
        };
        let (off, on) = (run(Config::default()), run(eager()));
        assert_eq!(without_deltas(&on), off, "{rel}");
        let finals = finals(&on);
        for (key, text) in check_deltas(&on) {
            let last = &finals[&key];
            assert!(
                last.starts_with(&text),
                "{rel} {key:?}: previewed {text:?}, ended with {last:?}"
            );
            previewed += 1;
        }
        files += 1;
    }
    assert!(files >= 40, "{files} recordings");
    assert!(previewed >= 30, "{previewed} calls previewed");
}

#[test]
fn the_throttle_bounds_deltas_by_bytes_and_by_publish_time() {
    let (bodies, text) = fragmented(20_000, 10);
    let cfg = Previews {
        enabled: true,
        min_bytes: 100,
        min_interval_ms: 500,
        partial_max_bytes: 1024,
    };
    let store = Store::open_memory(with_previews(cfg)).unwrap();
    // a fragment every 10 ms: the interval is the tighter bound
    let mut seen = 0;
    let mut times = Vec::new();
    for (i, b) in bodies.iter().enumerate() {
        let now = i as u64 * 10;
        let _ = store.apply(&chunk("c", "m", i as u64, b), now).unwrap();
        let evs = events(&store);
        let n = deltas(&evs).len();
        times.extend(std::iter::repeat_n(now, n - seen));
        seen = n;
    }
    let evs = events(&store);
    let ds = deltas(&evs);
    let span = (bodies.len() as u64 - 1) * 10;
    assert!(ds.len() >= 2, "{} deltas", ds.len());
    assert!(
        ds.len() as u64 <= 1 + span / 500,
        "{} deltas in {span} ms",
        ds.len()
    );
    assert!(ds.len() <= text.len() / 100);
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= 500, "deltas at {times:?}");
    }
    for d in &ds {
        assert!(d.arguments_delta.as_ref().unwrap().len() >= 100);
        // past partial_max_bytes there is no parse
        if d.arguments_offset.unwrap() as usize + d.arguments_delta.as_ref().unwrap().len() > 1024 {
            assert!(d.partial_arguments.is_none());
        }
    }
    assert!(
        ds[0].partial_arguments.is_some(),
        "the first preview is small enough to parse"
    );
    check_deltas(&evs);

    // all at once (one publish time): bytes alone, and a backlog of FLUSH_PENDING_BYTES is
    // not held back by the interval
    let (bodies, text) = fragmented(300_000, 1_000);
    let cfg = Previews {
        min_bytes: 1_000,
        ..cfg
    };
    let store = Store::open_memory(with_previews(cfg)).unwrap();
    apply_all(&store, &bodies, |_| 7);
    let evs = events(&store);
    let ds = deltas(&evs);
    let most = 1 + text.len() / FLUSH_PENDING_BYTES;
    assert!(
        ds.len() >= most - 1 && ds.len() <= most,
        "{} deltas",
        ds.len()
    );
    for d in &ds[1..] {
        let len = d.arguments_delta.as_ref().unwrap().len();
        assert!(
            (FLUSH_PENDING_BYTES..FLUSH_PENDING_BYTES + 4_000).contains(&len),
            "{len}"
        );
    }
}

/// Anthropic: call 0 ends (`content_block_stop`) while call 1 still streams; nothing of call
/// 0 is previewed after its end, although its last text was never previewed.
#[test]
fn no_delta_follows_the_end_of_its_call() {
    let start = |i: u32, id: &str| json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":id,"name":"f","input":{}}});
    let delta = |i: u32, text: &str| json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":text}});
    let stop = |i: u32| json!({"type":"content_block_stop","index":i});
    let bodies: Vec<Vec<u8>> = [
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude"}}),
        start(0, "toolu_a"),
        delta(0, "{\"a\": \"0123456789"),
        delta(0, "0123456789"),
        delta(0, "\"}"),
        stop(0),
        start(1, "toolu_b"),
        delta(1, "{\"b\": \"0123456789"),
        delta(1, "0123456789"),
        delta(1, "0123456789"),
        delta(1, "0123456789\"}"),
        stop(1),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"}}),
        json!({"type":"message_stop"}),
    ]
    .iter()
    .map(|v| serde_json::to_vec(v).unwrap())
    .collect();
    let cfg = Previews {
        enabled: true,
        min_bytes: 15,
        min_interval_ms: 0,
        partial_max_bytes: 1024,
    };
    let store = Store::open_memory(with_previews(cfg)).unwrap();
    for (i, b) in bodies.iter().enumerate() {
        let input = Input {
            provider: Some(Provider::Anthropic),
            ..chunk("c", "m", i as u64, b)
        };
        let _ = store.apply(&input, i as u64 * 1_000).unwrap();
    }
    let evs = events(&store);
    let text = check_deltas(&evs);
    assert_eq!(
        text[&("m".into(), 0)],
        "{\"a\": \"0123456789",
        "the rest of call 0 ended it"
    );
    assert_eq!(
        text[&("m".into(), 1)],
        "{\"b\": \"012345678901234567890123456789",
        "min_bytes 15: one delta per 2 fragments"
    );
    let kinds: Vec<(EventType, u32)> = evs
        .iter()
        .filter_map(|e| Some((e.event_type, e.tool_call.as_ref()?.index)))
        .collect();
    let end_of_0 = kinds
        .iter()
        .position(|k| *k == (EventType::ToolCallCompleted, 0))
        .unwrap();
    assert!(
        kinds[end_of_0..]
            .iter()
            .all(|k| *k != (EventType::ToolCallDelta, 0)),
        "{kinds:?}"
    );
}

/// Each input applied twice in a row (a redelivery): the second is a duplicate and emits no
/// delta again.
#[test]
fn a_redelivered_chunk_emits_no_delta_again() {
    let (bodies, _) = fragmented(600, 5);
    let store = Store::open_memory(eager()).unwrap();
    for (i, b) in bodies.iter().enumerate() {
        let _ = store
            .apply(&chunk("c", "m", i as u64, b), i as u64)
            .unwrap();
        let again = store
            .apply(&chunk("c", "m", i as u64, b), i as u64 + 1)
            .unwrap();
        assert_eq!(again, assembler::Applied::Duplicate);
    }
    let evs = events(&store);
    let mut ids: Vec<&str> = evs.iter().map(|e| e.event_id.as_str()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "every event id once");
    assert!(deltas(&evs).len() > 50);
}

/// Opens sled at `path`, retrying while a just-dropped handle still holds its lock.
fn open_sled(path: &std::path::Path) -> Arc<SledStorage> {
    for _ in 0..200 {
        if let Ok(s) = SledStorage::open(path) {
            return Arc::new(s);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot open {}", path.display());
}

/// The published rows of a run: (event id → bytes) of every event row the relay saw.
fn published(store: &Store, into: &mut BTreeMap<String, Vec<u8>>) {
    store.flush().unwrap();
    for row in store.outbox_peek(usize::MAX).unwrap() {
        if row.kind == OutboxKind::Event {
            if let Some(before) = into.get(&row.msg_id) {
                assert_eq!(before, &row.payload, "{}: same id, other bytes", row.msg_id);
            }
            into.insert(row.msg_id.clone(), row.payload.clone());
        }
        store.outbox_remove(row.key).unwrap();
    }
}

/// A crash at many points (what was not flushed is lost, every input is redelivered after the
/// restart, the flushed ones as duplicates) and a plain restart (the call state read back from
/// storage holds no preview text): the rows published, by id, are exactly those of a run
/// without a crash, byte for byte, so JetStream's dedupe by `Nats-Msg-Id` shows each delta once.
#[test]
fn a_crash_and_restart_publish_the_same_deltas_with_the_same_ids() {
    let (bodies, _) = fragmented(3_000, 9);
    let cfg = with_previews(Previews {
        enabled: true,
        min_bytes: 40,
        min_interval_ms: 30,
        partial_max_bytes: 2_000,
    });
    let at = |i: usize| (i as u64) * 7;
    let want = {
        let store = Store::open_memory(cfg.clone()).unwrap();
        let mut rows = BTreeMap::new();
        apply_all(&store, &bodies, at);
        published(&store, &mut rows);
        rows
    };
    assert!(
        want.values()
            .filter(|b| String::from_utf8_lossy(b).contains("tool_call.delta"))
            .count()
            > 10
    );
    for crash_at in (3..bodies.len()).step_by(bodies.len() / 12) {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = BTreeMap::new();
        {
            let storage = open_sled(dir.path());
            let store = Store::with_storage(storage.clone(), cfg.clone()).unwrap();
            let flushed = crash_at / 2;
            for (i, b) in bodies.iter().enumerate().take(flushed) {
                let _ = store.apply(&chunk("c", "m", i as u64, b), at(i)).unwrap();
            }
            published(&store, &mut rows);
            // a plain restart here: the preview state comes back from storage
            drop(store);
            drop(storage);
            let storage = open_sled(dir.path());
            let store = Store::with_storage(storage.clone(), cfg.clone()).unwrap();
            for (i, b) in bodies.iter().enumerate().take(crash_at).skip(flushed) {
                let _ = store.apply(&chunk("c", "m", i as u64, b), at(i)).unwrap();
                if i == (flushed + crash_at) / 2 {
                    published(&store, &mut rows);
                }
            }
            storage.discard_unflushed();
        }
        let store = common::reopen(dir.path(), cfg.clone());
        apply_all(&store, &bodies, at);
        published(&store, &mut rows);
        assert_eq!(rows, want, "crash after {crash_at} inputs");
    }
}

/// A JSON value of bounded depth with awkward strings and numbers.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        "[a-z\"\\\\/\u{1}\n é😀]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\"\\\\ ]{0,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Never a panic, on any text.
    #[test]
    fn partial_json_never_panics(text in "\\PC{0,64}", raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = partial_json(&text);
        let _ = partial_json(&String::from_utf8_lossy(&raw));
    }

    /// Every prefix of an object or array's JSON text (compact or pretty) has a partial value
    /// of the same kind, and the whole text parses to the value itself.
    #[test]
    fn every_prefix_of_a_json_document_has_a_partial_value(
        v in json_value(),
        pretty in any::<bool>(),
        wrap in any::<bool>(),
    ) {
        let v = if wrap { json!({"args": v}) } else { json!([v]) };
        let text = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
        prop_assert_eq!(partial_json(&text), Some(v.clone()));
        for (i, _) in text.char_indices().skip(1) {
            let prefix = &text[..i];
            let partial = partial_json(prefix);
            prop_assert!(partial.is_some(), "no partial for {:?}", prefix);
            let partial = partial.unwrap();
            prop_assert_eq!(partial.is_object(), v.is_object(), "{:?} -> {}", prefix, partial);
            prop_assert_eq!(partial.is_array(), v.is_array(), "{:?} -> {}", prefix, partial);
        }
    }
}

#[test]
fn inputs_of_other_kinds_than_chunks_emit_no_delta() {
    // a results input for a call still streaming: no preview comes from it
    let store = Store::open_memory(eager()).unwrap();
    let first = oa_delta(0, Some("call_a"), Some("f"), "{\"a\":");
    let _ = store.apply(&chunk("c", "m", 0, &first), 0).unwrap();
    let n = deltas(&events(&store)).len();
    assert_eq!(n, 1);
    let body = br#"{"tool_call_id":"call_a","output":"x"}"#;
    let input = Input {
        kind: InputKind::Result,
        provider: None,
        seq: Seq::Producer(0),
        ..chunk("c", "m", 0, body)
    };
    let _ = store.apply(&input, 10_000).unwrap();
    assert_eq!(deltas(&events(&store)).len(), 1);
}
