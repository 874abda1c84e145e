//! Model test: random deliver / redeliver / reorder / restart / time-advance sequences against
//! the sled store, compared with a trivially correct in-memory model (inputs applied in
//! sequence order to the pure core, timers checked by brute force). Identical events per
//! message and identical final snapshots.
//!
//! Restart = flush, drop the store, reopen the same directory. Crash = drop every commit since
//! the last flush (`SledStorage::discard_unflushed`, what a crash loses), drop, reopen; the
//! model goes back to its state at the last flush. Inputs lost that way arrive again in the
//! final phase, as JetStream redelivers unacked messages. (A real SIGKILL is `tests/crash.rs`.)

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::core::{self, emit, Limits, MessagePhase, MessageState, PendingResult, StepOutput};
use assembler::storage::sled_backend::SledStorage;
use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::wire::Reason;
use chunk_model::{Event, EventType, MessageSnapshot, Provider, ResultInput};
use common::{oa_delta, oa_finish};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const GAP: u64 = 1_000;
const IDLE: u64 = 5_000;
const GRACE: u64 = 3_000;

fn config() -> Config {
    Config {
        gap_timeout_ms: GAP,
        idle_timeout_ms: IDLE,
        orphan_grace_ms: GRACE,
        // smaller than the workload's messages: states are evicted and read back throughout
        message_cache_entries: 2,
        ..Config::default()
    }
}

/// One input stream of the workload.
#[derive(Debug, Clone)]
struct StreamSpec {
    kind: InputKind,
    msg: String,
    bodies: Vec<Vec<u8>>,
}

#[derive(Debug, Clone)]
struct CallSpec {
    id: Option<String>,
    name: Option<String>,
    pieces: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum EndSpec {
    ToolCalls,
    Length,
    Done,
    Never,
}

fn call_spec(k: usize) -> impl Strategy<Value = CallSpec> {
    (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        0u32..1000,
        1usize..4,
        prop::bool::weighted(0.85),
    )
        .prop_map(move |(has_id, has_name, n, parts, valid)| {
            let text = if valid {
                format!("{{\"n\":{n},\"k\":\"{k}\"}}")
            } else {
                format!("{{\"n\":{n}")
            };
            let step = text.len().div_ceil(parts);
            let pieces = text
                .as_bytes()
                .chunks(step)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            CallSpec {
                id: has_id.then(|| format!("call_{k}")),
                name: has_name.then(|| format!("fn_{}", n % 3)),
                pieces,
            }
        })
}

fn message_bodies(calls: &[CallSpec], end: EndSpec, garbage: Option<usize>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        for (p, piece) in c.pieces.iter().enumerate() {
            let (id, name) = if p == 0 {
                (c.id.as_deref(), c.name.as_deref())
            } else {
                (None, None)
            };
            out.push(oa_delta(i as u32, id, name, piece));
        }
    }
    match end {
        EndSpec::ToolCalls => out.push(oa_finish("tool_calls")),
        EndSpec::Length => out.push(oa_finish("length")),
        EndSpec::Done => out.push(b"[DONE]".to_vec()),
        EndSpec::Never => {}
    }
    if let Some(at) = garbage {
        let at = at % (out.len() + 1);
        out.insert(at, b"{garbage".to_vec());
    }
    out
}

fn workload() -> impl Strategy<Value = Vec<StreamSpec>> {
    let msg = (
        prop::collection::vec(any::<u8>(), 0..3),
        prop_oneof![
            Just(EndSpec::ToolCalls),
            Just(EndSpec::Length),
            Just(EndSpec::Done),
            Just(EndSpec::Never)
        ],
        prop::option::weighted(0.2, 0usize..10),
    );
    (
        prop::collection::vec(msg, 1..4),
        prop::collection::vec(0usize..8, 0..4),
    )
        .prop_flat_map(|(msgs, result_ids)| {
            let total: usize = msgs.iter().map(|(c, _, _)| c.len()).sum();
            let specs: Vec<BoxedStrategy<CallSpec>> =
                (0..total).map(|k| call_spec(k).boxed()).collect();
            (Just(msgs), specs, Just(result_ids))
        })
        .prop_map(|(msgs, specs, result_ids)| {
            let mut streams = Vec::new();
            let mut k = 0;
            for (m, (calls, end, garbage)) in msgs.iter().enumerate() {
                let these: Vec<CallSpec> = specs[k..k + calls.len()].to_vec();
                k += calls.len();
                streams.push(StreamSpec {
                    kind: InputKind::Chunk,
                    msg: format!("m{m}"),
                    bodies: message_bodies(&these, *end, *garbage),
                });
            }
            if !result_ids.is_empty() {
                let bodies = result_ids
                    .iter()
                    .map(|id| {
                        format!(r#"{{"tool_call_id":"call_{id}","output":"out {id}"}}"#)
                            .into_bytes()
                    })
                    .collect();
                streams.push(StreamSpec {
                    kind: InputKind::Result,
                    msg: "tools".into(),
                    bodies,
                });
            }
            streams
        })
}

#[derive(Debug, Clone)]
enum Op {
    Deliver { stream: usize, seq: usize },
    Flush,
    Restart,
    Crash,
    Tick(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (0usize..8, 0usize..12).prop_map(|(stream, seq)| Op::Deliver { stream, seq }),
        2 => Just(Op::Flush),
        1 => Just(Op::Restart),
        1 => Just(Op::Crash),
        2 => prop_oneof![1u64..200, Just(GAP), Just(GRACE), Just(IDLE)].prop_map(Op::Tick),
    ];
    prop::collection::vec(op, 0..60)
}

// ---------------------------------------------------------------------------------------
// The model: inputs in sequence order straight into the pure core; timers by brute force.

#[derive(Default, Clone)]
struct ModelStream {
    next: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    gap_since: Option<u64>,
    activity: u64,
    closed: bool,
}

#[derive(Default, Clone)]
struct Model {
    streams: BTreeMap<(InputKind, String), ModelStream>,
    msgs: BTreeMap<String, MessageState>,
    /// call id → (message, position, resolved)
    registered: HashMap<String, (String, u32, bool)>,
    pending: BTreeMap<String, (PendingResult, bool)>,
    events: Vec<Event>,
    order: u64,
}

impl Model {
    fn message(&mut self, msg: &str, provider: Option<Provider>) -> &mut MessageState {
        if !self.msgs.contains_key(msg) {
            let m = MessageState::new("c", msg, None, self.order);
            self.order += 1;
            self.msgs.insert(msg.to_string(), m);
        }
        let m = self.msgs.get_mut(msg).unwrap();
        if m.provider.is_none() {
            m.provider = provider;
        }
        m
    }

    fn deliver(&mut self, kind: InputKind, msg: &str, seq: u64, body: &[u8], now: u64) {
        // timers that ran out by this input's time come first, as a tick would have run them
        if self.streams.contains_key(&(kind, msg.to_string())) {
            self.expire_stream(&(kind, msg.to_string()), now);
        }
        self.expire_orphans(now);
        let st = self.streams.entry((kind, msg.to_string())).or_default();
        if seq < st.next || st.pending.contains_key(&seq) {
            return;
        }
        if st.closed {
            st.next = st.next.max(seq + 1);
            st.activity = now;
            return;
        }
        if seq > st.next {
            st.pending.insert(seq, body.to_vec());
            st.activity = now;
            st.gap_since.get_or_insert(now);
            return;
        }
        self.apply_run(kind, msg, body.to_vec(), now);
    }

    /// Applies the input at `next` and every pending successor.
    fn apply_run(&mut self, kind: InputKind, msg: &str, first: Vec<u8>, now: u64) {
        let mut body = first;
        let mut drained = false;
        loop {
            {
                let st = self.streams.get_mut(&(kind, msg.to_string())).unwrap();
                st.next += 1;
                st.activity = now;
            }
            self.apply_one(kind, msg, &body, now);
            let st = self.streams.get_mut(&(kind, msg.to_string())).unwrap();
            match st.pending.remove(&st.next) {
                Some(b) => {
                    body = b;
                    drained = true;
                }
                None => break,
            }
        }
        let st = self.streams.get_mut(&(kind, msg.to_string())).unwrap();
        if st.pending.is_empty() {
            st.gap_since = None;
        } else if drained {
            st.gap_since = Some(now);
        }
    }

    fn apply_one(&mut self, kind: InputKind, msg: &str, body: &[u8], now: u64) {
        match kind {
            InputKind::Chunk => {
                let Ok(evs) = chunk_model::decode(Provider::OpenaiChat, body) else {
                    // a lost chunk closes its stream like a gap (`lost_chunk`)
                    let st = self.streams.get_mut(&(kind, msg.to_string())).unwrap();
                    st.pending.clear();
                    st.gap_since = None;
                    st.closed = true;
                    self.end(msg, Reason::LostChunk, now);
                    return;
                };
                let mut out = StepOutput::default();
                let m = self.message(msg, Some(Provider::OpenaiChat));
                for ev in evs {
                    core::step(m, ev, &Limits::default(), &mut out);
                }
                self.after_step(msg, out, now);
            }
            InputKind::Result => {
                let Ok(results) = chunk_model::decode_result(body) else {
                    return;
                };
                for r in results {
                    self.result(msg, r, now);
                }
            }
        }
    }

    fn after_step(&mut self, msg: &str, out: StepOutput, now: u64) {
        self.events.extend(out.events);
        for pos in out.registered {
            let id = self.msgs[msg].calls[pos as usize].id.clone().unwrap();
            if self.registered.get(&id).is_some_and(|r| r.2) {
                continue;
            }
            self.registered
                .insert(id.clone(), (msg.to_string(), pos, false));
            if self.pending.get(&id).is_some_and(|p| p.0.done) {
                self.matched(&id);
            }
        }
        for r in out.results {
            self.result(msg, r, now);
        }
        if let Some(ev) = core::complete_if_done(self.msgs.get_mut(msg).unwrap()) {
            self.events.push(ev);
        }
    }

    fn result(&mut self, rmsg: &str, r: ResultInput, now: u64) {
        let id = r.tool_call_id().to_string();
        if self.registered.get(&id).is_some_and(|x| x.2) {
            return;
        }
        let entry = self
            .pending
            .entry(id.clone())
            .or_insert_with(|| (PendingResult::new(rmsg, now), true));
        let _ = entry.0.absorb(r);
        entry.1 = true;
        if entry.0.done && self.registered.contains_key(&id) {
            self.matched(&id);
        }
    }

    fn matched(&mut self, id: &str) {
        let (p, _) = self.pending.remove(id).unwrap();
        let reg = self.registered.get_mut(id).unwrap();
        reg.2 = true;
        let (cmsg, _) = (reg.0.clone(), reg.1);
        let result = p.to_result(id);
        let m = self.msgs.get_mut(&cmsg).unwrap();
        m.tool_results.push(result.clone());
        let provider = m.provider;
        self.events.push(emit::result_event(
            "c",
            &cmsg,
            provider,
            &result,
            EventType::ToolResultCompleted,
            None,
        ));
    }

    fn tick(&mut self, now: u64) {
        let keys: Vec<(InputKind, String)> = self.streams.keys().cloned().collect();
        for key in &keys {
            self.expire_gap(key, now);
        }
        for key in &keys {
            self.expire_idle(key, now);
        }
        self.expire_orphans(now);
    }

    /// The gap, else the idle timeout, of one stream (what the store runs before an input).
    fn expire_stream(&mut self, key: &(InputKind, String), now: u64) {
        if !self.expire_gap(key, now) {
            self.expire_idle(key, now);
        }
    }

    /// Returns whether the stream's gap ran out.
    fn expire_gap(&mut self, key: &(InputKind, String), now: u64) -> bool {
        let st = self.streams.get_mut(key).unwrap();
        if st.gap_since.is_none_or(|t| now - t < GAP) {
            return false;
        }
        match key.0 {
            InputKind::Chunk => {
                st.pending.clear();
                st.gap_since = None;
                st.closed = true;
                self.end(&key.1, Reason::Gap, now);
            }
            InputKind::Result => {
                let (first, body) = st.pending.pop_first().unwrap();
                st.next = first;
                self.apply_run(key.0, &key.1, body, now);
            }
        }
        true
    }

    fn expire_idle(&mut self, key: &(InputKind, String), now: u64) {
        if key.0 != InputKind::Chunk {
            return;
        }
        let open = self
            .msgs
            .get(&key.1)
            .is_some_and(|m| m.phase != MessagePhase::Completed);
        if open && now - self.streams[key].activity >= IDLE {
            self.end(&key.1, Reason::Timeout, now);
        }
    }

    fn expire_orphans(&mut self, now: u64) {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (p, live))| *live && p.orphan_expired(now, GRACE))
            .map(|(k, _)| k.clone())
            .collect();
        for id in due {
            if self.registered.contains_key(&id) {
                self.pending.get_mut(&id).unwrap().1 = false;
                continue;
            }
            let (p, _) = self.pending.remove(&id).unwrap();
            let result = p.to_result(&id);
            // a second result orphaned under an id this message already orphaned: the first
            // stays, no second event with the same id
            if self
                .msgs
                .get(&p.message_id)
                .is_some_and(|m| m.orphaned_results.iter().any(|r| r.tool_call_id == id))
            {
                continue;
            }
            let provider = self.msgs.values().find_map(|m| m.provider);
            self.events.push(emit::result_event(
                "c",
                &p.message_id,
                provider,
                &result,
                EventType::ToolResultOrphaned,
                Some("no_call"),
            ));
            self.message(&p.message_id, None)
                .orphaned_results
                .push(result);
        }
    }

    fn end(&mut self, msg: &str, reason: Reason, now: u64) {
        let mut out = StepOutput::default();
        let m = self.message(msg, Some(Provider::OpenaiChat));
        core::step::abandon(m, reason, &mut out);
        self.after_step(msg, out, now);
    }

    fn snapshot(&self, msg: &str) -> Option<MessageSnapshot> {
        self.msgs.get(msg).map(core::snapshot::to_snapshot)
    }
}

fn input<'a>(spec: &'a StreamSpec, seq: usize) -> Input<'a> {
    Input {
        kind: spec.kind,
        conversation_id: "c",
        message_id: &spec.msg,
        provider: (spec.kind == InputKind::Chunk).then_some(Provider::OpenaiChat),
        seq: Seq::Producer(seq as u64),
        control: None,
        body: &spec.bodies[seq],
        origin: None,
    }
}

fn by_message(events: &[Event]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        out.entry(e.message_id.clone())
            .or_default()
            .push(serde_json::to_string(e).unwrap());
    }
    out
}

fn open(path: &std::path::Path) -> (Store, Arc<SledStorage>) {
    for _ in 0..200 {
        if let Ok(storage) = SledStorage::open(path) {
            let storage = Arc::new(storage);
            let store = Store::with_storage(storage.clone(), config()).unwrap();
            return (store, storage);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot reopen {}", path.display());
}

fn run(streams: Vec<StreamSpec>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let (first, storage) = open(dir.path());
    let mut store = Some(first);
    let mut storage = Some(storage);
    let mut model = Model::default();
    let mut flushed = Model::default();
    let mut now = 0u64;
    let deliver = |store: &Store, model: &mut Model, s: usize, seq: usize, now: u64| {
        let spec = &streams[s];
        let _ = store.apply(&input(spec, seq), now).unwrap();
        model.deliver(spec.kind, &spec.msg, seq as u64, &spec.bodies[seq], now);
    };
    for op in ops {
        match op {
            Op::Deliver { stream, seq } => {
                let s = stream % streams.len();
                if streams[s].bodies.is_empty() {
                    continue;
                }
                let seq = seq % streams[s].bodies.len();
                deliver(store.as_ref().unwrap(), &mut model, s, seq, now);
            }
            Op::Flush => {
                store.as_ref().unwrap().flush().unwrap();
                flushed = model.clone();
            }
            Op::Restart | Op::Crash => {
                if matches!(op, Op::Restart) {
                    store.as_ref().unwrap().flush().unwrap();
                    flushed = model.clone();
                } else {
                    storage.as_ref().unwrap().discard_unflushed();
                    model = flushed.clone();
                }
                drop(store.take());
                drop(storage.take());
                let (s, st) = open(dir.path());
                store = Some(s);
                storage = Some(st);
            }
            Op::Tick(d) => {
                now += d;
                store.as_ref().unwrap().tick(now).unwrap();
                model.tick(now);
            }
        }
    }
    // Finally every input arrives, in order, possibly again.
    for (s, spec) in streams.iter().enumerate() {
        for seq in 0..spec.bodies.len() {
            deliver(store.as_ref().unwrap(), &mut model, s, seq, now);
        }
    }
    let store = store.unwrap();
    let got: Vec<Event> = common::events(&store);
    prop_assert_eq!(by_message(&got), by_message(&model.events));
    for spec in &streams {
        let a = store.message_snapshot("c", &spec.msg).unwrap();
        let b = model.snapshot(&spec.msg);
        prop_assert_eq!(a, b, "snapshot of {}", spec.msg);
    }
    prop_assert_eq!(store.open_streams(), {
        model
            .msgs
            .values()
            .filter(|m| m.phase != MessagePhase::Completed && m.provider.is_some())
            .count()
    });
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_in_order_model_under_redelivery_reorder_restart_and_time(
        streams in workload(),
        ops in ops(),
    ) {
        run(streams, ops)?;
    }
}
