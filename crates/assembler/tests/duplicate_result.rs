//! One result per call, decided once: a second result for a call is a visible
//! `duplicate_result` dead letter (it used to be dropped without a trace by
//! `core::matching::takes_result`), the provider's own in-stream result stands over a
//! producer's, and between producer results the first one taken stands. Which result stands
//! never depends on how the chunk and result subjects interleave, so a crash and redelivery
//! cannot change it.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::storage::sled_backend::SledStorage;
use assembler::{Applied, Config, Input, InputKind, Origin, Seq, Store};
use chunk_model::{Event, EventType, Provider};
use common::{dead_letters, events, is_dead, oa_delta, oa_finish, result, two_call_stream};
use serde_json::{json, Value};
use std::sync::Arc;

const SERVER_CALL: &str = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE";
const CLIENT_CALL: &str = "toolu_01T1x1fJ34qAmk2tNTrN7Up6";

fn chunk_of<'a>(provider: Provider, msg: &'a str, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        kind: InputKind::Chunk,
        conversation_id: "c",
        message_id: msg,
        provider: Some(provider),
        seq: Seq::Producer(seq),
        control: None,
        body,
        origin: None,
    }
}

/// Applies a producer result on `results.c.tools` at `now`, unnumbered (as `toolstream
/// publish` sends them), with the origin a real input has.
fn apply_producer_result(store: &Store, stream_seq: u64, body: &[u8], now: u64) -> Applied {
    let origin = Origin {
        subject: "toolstream.results.c.tools".into(),
        stream_seq,
    };
    let input = Input {
        kind: InputKind::Result,
        conversation_id: "c",
        message_id: "tools",
        provider: None,
        seq: Seq::Transport(stream_seq),
        control: None,
        body,
        origin: Some(&origin),
    };
    store.apply(&input, now).unwrap()
}

fn whole(id: &str, output: &str) -> Vec<u8> {
    json!({"tool_call_id": id, "output": output})
        .to_string()
        .into_bytes()
}

/// The result events, as (type, call id, output).
fn result_events(evs: &[Event]) -> Vec<(EventType, String, String)> {
    evs.iter()
        .filter_map(|e| {
            let r = e.tool_result.as_ref()?;
            Some((e.event_type, r.tool_call_id.clone(), r.output.clone()))
        })
        .collect()
}

/// The events and the dead letters of a run (see [`event_set`], [`dead_set`]).
type Outcome = (Vec<String>, Vec<(String, Value)>);

/// (code, body as JSON) of every dead letter, sorted.
fn dead_set(store: &Store) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = dead_letters(store)
        .into_iter()
        .map(|(reason, body)| (reason, serde_json::from_slice(&body).unwrap()))
        .collect();
    out.sort_by_key(|(r, b)| (r.clone(), b.to_string()));
    out
}

/// Every event as JSON, sorted (the order differs between interleavings; the events must
/// not). `message.completed` lists the results matched by the time the message completed,
/// which depends on when they arrived: it is kept with its calls only, and each result it
/// lists must be the one that stands (checked against the result events).
fn event_set(store: &Store) -> Vec<String> {
    let evs = events(store);
    let standing = result_events(&evs);
    let mut out: Vec<String> = evs
        .into_iter()
        .map(|mut e| {
            if let Some(listed) = e.tool_results.take() {
                for r in listed {
                    assert!(
                        standing
                            .iter()
                            .any(|(_, id, out)| *id == r.tool_call_id && *out == r.output),
                        "message.completed lists a result that does not stand: {r:?}"
                    );
                }
            }
            serde_json::to_string(&e).unwrap()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn regression_a_second_result_for_an_answered_call_is_a_duplicate_result_dead_letter_not_dropped() {
    let store = Store::open_memory(Config::default()).unwrap();
    for (seq, body) in two_call_stream().iter().enumerate() {
        let _ = store
            .apply(&common::chunk("c", "m1", seq as u64, body), 1)
            .unwrap();
    }
    let first = whole("call_a", "18 degrees");
    let applied = apply_producer_result(&store, 10, &first, 2);
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");

    let second = whole("call_a", "19 degrees");
    let applied = apply_producer_result(&store, 11, &second, 3);
    assert!(is_dead(
        &applied,
        "duplicate_result: call call_a already has a result"
    ));

    // a message of two results, one answering an answered call: applied, with the one
    // result that does not stand dead-lettered alone (in toolstream's own result shape)
    let both = json!([
        {"tool_call_id": "call_b", "output": "12:00"},
        {"tool_call_id": "call_a", "output": "20 degrees", "is_error": true}
    ])
    .to_string();
    let applied = apply_producer_result(&store, 12, both.as_bytes(), 4);
    assert!(matches!(applied, Applied::Accepted { .. }), "{applied:?}");

    let evs = events(&store);
    assert_eq!(
        result_events(&evs),
        vec![
            (
                EventType::ToolResultCompleted,
                "call_a".into(),
                "18 degrees".into()
            ),
            (
                EventType::ToolResultCompleted,
                "call_b".into(),
                "12:00".into()
            ),
        ],
        "the first result stands, nothing else is published"
    );
    let dead = dead_letters(&store);
    assert_eq!(dead.len(), 2);
    for (reason, _) in &dead {
        assert_eq!(
            reason,
            "duplicate_result: call call_a already has a result (the first one stands)"
        );
    }
    let bodies: Vec<Value> = dead
        .iter()
        .map(|(_, b)| serde_json::from_slice(b).unwrap())
        .collect();
    assert_eq!(
        bodies,
        vec![
            // a message holding this result only: its own body, as sent
            json!({"tool_call_id": "call_a", "output": "19 degrees"}),
            // one of several results in a message: the result alone, in toolstream's shape
            json!({"tool_call_id": "call_a", "output": "20 degrees", "is_error": true}),
        ]
    );
    let rows = common::durable_rows(&store, 100);
    let dlq: Vec<_> = rows
        .iter()
        .filter(|r| r.kind == assembler::OutboxKind::DeadLetter)
        .collect();
    // on the results message's dead-letter subject, naming the input it came in
    assert!(dlq.iter().all(|r| r.message_id == "tools"));
    let subjects: Vec<(&str, &str)> = dlq
        .iter()
        .flat_map(|r| r.headers.iter())
        .filter(|(h, _)| h == "Toolstream-Stream-Seq")
        .map(|(h, v)| (h.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        subjects,
        vec![
            ("Toolstream-Stream-Seq", "11"),
            ("Toolstream-Stream-Seq", "12")
        ]
    );
    let snap = store.message_snapshot("c", "m1").unwrap().unwrap();
    assert_eq!(snap.tool_results.len(), 2);
}

#[test]
fn a_streamed_result_under_way_keeps_its_call_against_a_later_whole_one() {
    let store = Store::open_memory(Config::default()).unwrap();
    for (seq, body) in two_call_stream().iter().enumerate() {
        let _ = store
            .apply(&common::chunk("c", "m1", seq as u64, body), 1)
            .unwrap();
    }
    let piece = br#"{"tool_call_id":"call_a","delta":"18 "}"#;
    assert!(matches!(
        store.apply(&result("c", "r1", 0, piece), 2).unwrap(),
        Applied::Accepted { .. }
    ));
    // another producer's whole result, and a piece of another message's stream: neither joins
    let other = whole("call_a", "cold");
    let applied = apply_producer_result(&store, 20, &other, 3);
    assert!(is_dead(
        &applied,
        "duplicate_result: a streamed result for call call_a is under way"
    ));
    let stray = br#"{"tool_call_id":"call_a","delta":"stray"}"#;
    let applied = store.apply(&result("c", "r2", 0, stray), 3).unwrap();
    assert!(is_dead(
        &applied,
        "duplicate_result: a streamed result for call call_a from another message"
    ));
    let rest = br#"{"tool_call_id":"call_a","delta":"degrees"}"#;
    let done = br#"{"tool_call_id":"call_a","done":true}"#;
    let _ = store.apply(&result("c", "r1", 1, rest), 4).unwrap();
    let _ = store.apply(&result("c", "r1", 2, done), 5).unwrap();
    assert_eq!(
        result_events(&events(&store)),
        vec![(
            EventType::ToolResultCompleted,
            "call_a".into(),
            "18 degrees".into()
        )]
    );
    assert_eq!(
        dead_set(&store)
            .into_iter()
            .map(|(_, b)| b)
            .collect::<Vec<_>>(),
        vec![
            json!({"tool_call_id": "call_a", "delta": "stray"}),
            json!({"tool_call_id": "call_a", "output": "cold"}),
        ]
    );
}

#[test]
fn a_result_for_an_id_already_orphaned_on_its_message_is_a_duplicate_result_dead_letter() {
    let config = Config {
        orphan_grace_ms: 100,
        ..Config::default()
    };
    let store = Store::open_memory(config).unwrap();
    let a = whole("call_x", "first");
    let b = whole("call_x", "second");
    let _ = store.apply(&result("c", "r1", 0, &a), 0).unwrap();
    store.tick(200).unwrap();
    let _ = store.apply(&result("c", "r1", 1, &b), 300).unwrap();
    store.tick(500).unwrap();
    assert_eq!(
        result_events(&events(&store)),
        vec![(
            EventType::ToolResultOrphaned,
            "call_x".into(),
            "first".into()
        )]
    );
    assert_eq!(
        dead_set(&store),
        vec![(
            "duplicate_result: a result for call call_x was already orphaned on this message (the first one stands)".to_string(),
            json!({"tool_call_id": "call_x", "output": "second"})
        )]
    );
}

#[test]
fn a_producer_result_for_a_call_of_an_open_anthropic_message_waits_for_its_end_and_is_listed() {
    let store = Store::open_memory(Config::default()).unwrap();
    let chunks = common::recording("anthropic/server_tool_web_search.sse");
    let end = chunks
        .iter()
        .position(|c| c.windows(13).any(|w| w == b"message_delta"))
        .unwrap();
    for (seq, body) in chunks[..end].iter().enumerate() {
        let _ = store
            .apply(&chunk_of(Provider::Anthropic, "m1", seq as u64, body), 1)
            .unwrap();
    }
    let r = whole(CLIENT_CALL, "added tokio 1.47.1");
    let _ = apply_producer_result(&store, 1, &r, 2);
    assert!(
        !result_events(&events(&store))
            .iter()
            .any(|(_, id, _)| id == CLIENT_CALL),
        "matched before the message ended (the provider could still answer the call)"
    );
    for (seq, body) in chunks.iter().enumerate().skip(end) {
        let _ = store
            .apply(&chunk_of(Provider::Anthropic, "m1", seq as u64, body), 3)
            .unwrap();
    }
    let evs = events(&store);
    let completed = evs
        .iter()
        .find(|e| e.event_type == EventType::MessageCompleted)
        .unwrap();
    let listed: Vec<&str> = completed
        .tool_results
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| r.tool_call_id.as_str())
        .collect();
    assert_eq!(listed, vec![SERVER_CALL, CLIENT_CALL]);
    assert!(dead_letters(&store).is_empty());
}

/// The inputs of the race: the recorded Anthropic stream (a server tool call answered in the
/// stream, then a client tool call), and three producer results: one for the server tool call
/// (the provider's own stands over it), one for the client call (stands), and a second one for
/// the client call (the first stands).
struct Race {
    chunks: Vec<Vec<u8>>,
    results: Vec<Vec<u8>>,
}

impl Race {
    fn new() -> Race {
        Race {
            chunks: common::recording("anthropic/server_tool_web_search.sse"),
            results: vec![
                whole(SERVER_CALL, "my own search"),
                whole(CLIENT_CALL, "added"),
                whole(CLIENT_CALL, "added again"),
            ],
        }
    }

    /// Applies input `k` of the merged order: `false` = next chunk, `true` = next result.
    fn apply_order(&self, store: &Store, order: &[bool], from: usize) {
        let (mut c, mut r) = (0usize, 0usize);
        for (k, is_result) in order.iter().enumerate() {
            if *is_result {
                if k >= from {
                    let _ =
                        apply_producer_result(store, 100 + r as u64, &self.results[r], k as u64);
                }
                r += 1;
            } else {
                if k >= from {
                    let _ = store
                        .apply(
                            &chunk_of(Provider::Anthropic, "m1", c as u64, &self.chunks[c]),
                            k as u64,
                        )
                        .unwrap();
                }
                c += 1;
            }
        }
    }

    /// Every merge of the chunk stream with the results stream (each in its own order).
    fn orders(&self) -> Vec<Vec<bool>> {
        let (n, m) = (self.chunks.len(), self.results.len());
        let mut out = Vec::new();
        // positions of the results among n + m slots, increasing
        let total = n + m;
        for a in 0..total {
            for b in a + 1..total {
                for c in b + 1..total {
                    let mut order = vec![false; total];
                    order[a] = true;
                    order[b] = true;
                    order[c] = true;
                    out.push(order);
                }
            }
        }
        assert_eq!(out.len(), total * (total - 1) * (total - 2) / 6);
        debug_assert!(m == 3);
        out
    }
}

#[test]
fn the_providers_own_result_stands_over_a_producers_in_any_interleaving() {
    let race = Race::new();
    let orders = race.orders();
    let mut reference: Option<Outcome> = None;
    // every 5th of the 2,600 merges (all of them take ~12 s in a debug build): each result
    // still lands before, between and after every stage of the stream
    for order in orders.iter().step_by(5) {
        let store = Store::open_memory(Config::default()).unwrap();
        race.apply_order(&store, order, 0);
        let got = (event_set(&store), dead_set(&store));
        match &reference {
            None => {
                let evs = events(&store);
                let results = result_events(&evs);
                assert_eq!(results.len(), 2, "{results:?}");
                assert!(results
                    .iter()
                    .any(|(_, id, out)| id == SERVER_CALL && out.contains("tokio-rs/tokio")));
                assert!(results
                    .iter()
                    .any(|(_, id, out)| id == CLIENT_CALL && out == "added"));
                let codes: Vec<&str> = got.1.iter().map(|(r, _)| r.as_str()).collect();
                assert_eq!(
                    codes,
                    vec![
                        "duplicate_result: call toolu_01T1x1fJ34qAmk2tNTrN7Up6 already has a result (the first one stands)",
                        "duplicate_result: the provider's own result for call srvtoolu_01WYG3ziw53XMcoyKL4XcZmE, carried in its stream, stands over this one",
                    ]
                );
                reference = Some(got);
            }
            Some(want) => assert_eq!(&got, want, "order {order:?}"),
        }
    }
}

#[test]
fn a_crash_never_changes_which_result_stands() {
    let race = Race::new();
    let orders = race.orders();
    let want = {
        let store = Store::open_memory(Config::default()).unwrap();
        race.apply_order(&store, &orders[0], 0);
        (event_set(&store), dead_set(&store))
    };
    // A sample of the interleavings, each cut by a crash at a different point: what was
    // flushed stays, the rest is redelivered (every input again, the chunks first this time).
    let total = race.chunks.len() + race.results.len();
    let mut runs = 0;
    for (k, order) in orders.iter().enumerate().step_by(97) {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(SledStorage::open(dir.path()).unwrap());
        let store = Store::with_storage(storage.clone(), Config::default()).unwrap();
        let crash_at = 1 + k % (total - 1);
        let flush_at = crash_at / 2;
        let prefix: Vec<bool> = order[..flush_at].to_vec();
        race.apply_order(&store, &prefix, 0);
        store.flush().unwrap();
        race.apply_order(&store, &order[..crash_at], flush_at);
        storage.discard_unflushed();
        drop(store);
        drop(storage);
        let store = common::reopen(dir.path(), Config::default());
        let redelivery: Vec<bool> = (0..total).map(|i| i >= race.chunks.len()).collect();
        race.apply_order(&store, &redelivery, 0);
        assert_eq!(
            (event_set(&store), dead_set(&store)),
            want,
            "order {order:?}, crash after {crash_at}"
        );
        runs += 1;
    }
    assert!(runs >= 20, "{runs} runs");
}

#[test]
fn two_producer_results_of_an_openai_call_the_first_taken_stands_whatever_the_chunks_do() {
    // OpenAI chat streams carry no results of their own: a producer result matches as soon
    // as its call is known, and the next one is the duplicate.
    let store = Store::open_memory(Config::default()).unwrap();
    let a = whole("call_1", "one");
    let b = whole("call_1", "two");
    let _ = apply_producer_result(&store, 1, &a, 0);
    let applied = apply_producer_result(&store, 2, &b, 0);
    assert!(is_dead(
        &applied,
        "duplicate_result: call call_1 already has a result (the first one stands)"
    ));
    let body = oa_delta(0, Some("call_1"), Some("f"), "{}");
    let _ = store.apply(&common::chunk("c", "m1", 0, &body), 1).unwrap();
    assert_eq!(
        result_events(&events(&store)),
        vec![(
            EventType::ToolResultCompleted,
            "call_1".into(),
            "one".into()
        )],
        "matched once the call is known, before the message ends"
    );
    let fin = oa_finish("tool_calls");
    let _ = store.apply(&common::chunk("c", "m1", 1, &fin), 2).unwrap();
    assert_eq!(dead_set(&store).len(), 1);
}
