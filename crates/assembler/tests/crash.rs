//! Crash test: a child process (this test binary re-executed with `TOOLSTREAM_CRASH_DIR`)
//! works through a fixed workload like the worker does — apply a batch, flush, ack, relay the
//! outbox (record each row in a "published" log, then remove it) — and is SIGKILLed at random
//! points, many times. After every kill the parent reopens the store and checks:
//! - the state is exactly that of some prefix of the workload (no half-applied input): every
//!   message snapshot equals a crash-free reference store's after the same number of inputs;
//! - outbox and state agree: published rows ∪ outbox rows = exactly the reference's rows for
//!   that prefix (nothing lost, nothing extra), and a row published twice (killed between
//!   publish and remove) has the same id and bytes both times (JetStream dedupes by id).
//!
//! At the end the child runs to completion and the published rows, deduped by id, equal the
//! crash-free run's rows exactly.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Config, Input, InputKind, OutboxEntry, Seq, Store};
use chunk_model::Provider;
use common::{oa_delta, oa_finish};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "TOOLSTREAM_CRASH_DIR";
const BATCH: usize = 4;
const KILLS: usize = 24;
const MESSAGES: usize = 500;

/// One workload input (owned).
#[derive(Debug, Clone)]
struct Item {
    kind: InputKind,
    msg: String,
    seq: u64,
    body: Vec<u8>,
}

impl Item {
    fn input(&self) -> Input<'_> {
        Input {
            kind: self.kind,
            conversation_id: "c",
            message_id: &self.msg,
            provider: (self.kind == InputKind::Chunk).then_some(Provider::OpenaiChat),
            seq: Seq::Producer(self.seq),
            control: None,
            body: &self.body,
            origin: None,
        }
    }
}

/// A deterministic workload: many messages with two calls each (one message in four cut by
/// `length`, one chunk in fifty garbage), chunks of neighbouring seqs swapped (parking),
/// some chunks sent twice, and results — some before their call.
fn workload() -> Vec<Item> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut items = Vec::new();
    let mut result_seq = 0u64;
    for m in 0..MESSAGES {
        let msg = format!("m{m}");
        let mut bodies = Vec::new();
        for call in 0..2u32 {
            let id = format!("call_{m}_{call}");
            bodies.push(oa_delta(call, Some(&id), Some("lookup"), ""));
            let text = format!(
                "{{\"q\":\"{}\",\"n\":{}}}",
                "x".repeat((next() % 40) as usize),
                m
            );
            for piece in text.as_bytes().chunks(1 + (next() % 7) as usize) {
                bodies.push(oa_delta(
                    call,
                    None,
                    None,
                    std::str::from_utf8(piece).unwrap(),
                ));
            }
        }
        if next() % 50 == 0 {
            bodies.insert(2, b"{garbage".to_vec());
        }
        bodies.push(oa_finish(if m % 4 == 3 { "length" } else { "tool_calls" }));
        bodies.push(b"[DONE]".to_vec());
        let mut order: Vec<usize> = (0..bodies.len()).collect();
        for i in 0..order.len() - 1 {
            if next() % 5 == 0 {
                order.swap(i, i + 1);
            }
        }
        if m % 3 == 0 {
            let id = format!("call_{m}_0");
            items.push(result_item(&id, result_seq));
            result_seq += 1;
        }
        for i in order {
            let item = Item {
                kind: InputKind::Chunk,
                msg: msg.clone(),
                seq: i as u64,
                body: bodies[i].clone(),
            };
            if next() % 10 == 0 {
                items.push(item.clone());
            }
            items.push(item);
        }
        if m % 3 == 1 {
            let id = format!("call_{m}_1");
            items.push(result_item(&id, result_seq));
            result_seq += 1;
        }
    }
    items
}

fn result_item(id: &str, seq: u64) -> Item {
    Item {
        kind: InputKind::Result,
        msg: "tools".into(),
        seq,
        body: format!(r#"{{"tool_call_id":"{id}","output":"ok {id}"}}"#).into_bytes(),
    }
}

fn messages(items: &[Item]) -> Vec<String> {
    let mut m: Vec<String> = items.iter().map(|i| i.msg.clone()).collect();
    m.sort();
    m.dedup();
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn row_line(e: &OutboxEntry) -> (String, String) {
    (e.msg_id.clone(), hex(&e.payload))
}

fn read_acked(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("acked"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The child: works through the workload from the last ack, like the worker.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let items = workload();
    let store = common::reopen(&dir.join("db"), Config::default());
    let mut published = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("published"))
        .unwrap();
    let mut relay = |store: &Store| loop {
        let rows = store.outbox_peek(64).unwrap();
        if rows.is_empty() {
            break;
        }
        // "Publish" (durably record) the rows, then remove them: a kill in between
        // publishes them again on restart, with the same ids.
        for r in &rows {
            let (id, payload) = row_line(r);
            published
                .write_all(format!("{id}\t{payload}\n").as_bytes())
                .unwrap();
        }
        published.sync_data().unwrap();
        for r in &rows {
            store.outbox_remove(r.key).unwrap();
        }
    };
    relay(&store);
    std::fs::write(dir.join("started"), "1").unwrap();
    let mut at = read_acked(dir);
    while at < items.len() {
        let end = (at + BATCH).min(items.len());
        for item in &items[at..end] {
            let _ = store.apply(&item.input(), 0).unwrap();
        }
        store.flush().unwrap();
        let tmp = dir.join("acked.tmp");
        std::fs::write(&tmp, end.to_string()).unwrap();
        std::fs::rename(&tmp, dir.join("acked")).unwrap();
        relay(&store);
        at = end;
    }
    store.flush().unwrap();
    std::fs::write(dir.join("done"), "1").unwrap();
}

/// Rows published so far (complete lines only), in order.
fn published(dir: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join("published")).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Crash-free reference: rows after each prefix (cumulative) and snapshots on demand.
struct Reference {
    rows_after: Vec<usize>,
    rows: Vec<(String, String)>,
}

fn reference(items: &[Item]) -> Reference {
    let store = Store::open_memory(Config::default()).unwrap();
    let mut rows_after = vec![0];
    for item in items {
        let _ = store.apply(&item.input(), 0).unwrap();
        rows_after.push(store.outbox_len());
    }
    store.flush().unwrap();
    let rows = store
        .outbox_peek(usize::MAX)
        .unwrap()
        .iter()
        .map(row_line)
        .collect();
    Reference { rows_after, rows }
}

fn snapshots(store: &Store, msgs: &[String]) -> Vec<Option<chunk_model::MessageSnapshot>> {
    msgs.iter()
        .map(|m| store.message_snapshot("c", m).unwrap())
        .collect()
}

/// Checks a recovered store against the reference; returns the longest prefix it matches.
fn check_recovered(dir: &Path, items: &[Item], reference: &Reference) -> usize {
    let msgs = messages(items);
    let store = common::reopen(&dir.join("db"), Config::default());
    let outbox: Vec<(String, String)> = store
        .outbox_peek(usize::MAX)
        .unwrap()
        .iter()
        .map(row_line)
        .collect();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (id, payload) in published(dir).into_iter().chain(outbox) {
        if let Some(prev) = seen.insert(id.clone(), payload.clone()) {
            assert_eq!(
                prev, payload,
                "row {id} delivered twice with different bytes"
            );
        }
    }
    let recovered = snapshots(&store, &msgs);
    drop(store);
    let n = seen.len();
    let expected_rows: BTreeMap<String, String> = reference.rows[..n.min(reference.rows.len())]
        .iter()
        .cloned()
        .collect();
    assert_eq!(
        seen, expected_rows,
        "published ∪ outbox must be exactly a prefix of the reference rows"
    );
    // Find the prefix of inputs whose state this is.
    let candidates: Vec<usize> = (0..reference.rows_after.len())
        .filter(|&k| reference.rows_after[k] == n)
        .collect();
    assert!(!candidates.is_empty(), "no prefix emits {n} rows");
    let replay = Store::open_memory(Config::default()).unwrap();
    let mut applied = 0;
    let mut matched = None;
    for k in candidates {
        while applied < k {
            let _ = replay.apply(&items[applied].input(), 0).unwrap();
            applied += 1;
        }
        if snapshots(&replay, &msgs) == recovered {
            // Inputs that change nothing (duplicates) make neighbouring prefixes equal.
            matched = Some(k);
        }
    }
    matched.unwrap_or_else(|| {
        panic!("recovered state is not the state of any prefix emitting {n} rows")
    })
}

fn spawn_child(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[test]
fn sigkill_at_random_points_loses_and_duplicates_nothing() {
    let items = workload();
    let reference = reference(&items);
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = seed;
    let mut prefixes = Vec::new();
    let mut kills = 0;
    while kills < KILLS {
        if dir.path().join("done").exists() {
            break;
        }
        let _ = std::fs::remove_file(dir.path().join("started"));
        let mut child = spawn_child(dir.path());
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng.is_multiple_of(4) {
            // Anywhere, including while the child opens and recovers the store.
            std::thread::sleep(Duration::from_millis(rng % 600));
        } else {
            // While it works: wait until it has recovered, then a little longer.
            for _ in 0..500 {
                if dir.path().join("started").exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(rng % 80));
        }
        let _ = child.kill();
        let _ = child.wait();
        kills += 1;
        prefixes.push(check_recovered(dir.path(), &items, &reference));
    }
    eprintln!("recovered prefixes after {kills} kills: {prefixes:?}");
    // Let the child finish undisturbed.
    let status = spawn_child(dir.path()).wait().unwrap();
    assert!(status.success());
    assert!(dir.path().join("done").exists());
    let last = check_recovered(dir.path(), &items, &reference);
    assert_eq!(last, items.len());
    let mut all: BTreeMap<String, String> = BTreeMap::new();
    for (id, payload) in published(dir.path()) {
        all.insert(id, payload);
    }
    let expected: BTreeMap<String, String> = reference.rows.iter().cloned().collect();
    assert_eq!(
        all, expected,
        "every row of the crash-free run, published, none missing"
    );
    assert!(
        kills >= 20,
        "only {kills} kills: the workload finished too early"
    );
}

/// Found by the 1,000-kill soak: a worker killed while sled was writing a snapshot left
/// `snap.<lsn>.generating`, and sled 0.34 then refused to open the store at all ("corrupt
/// snapshot file found, crc does not match expected", sled #1527): every restart failed.
#[test]
fn a_snapshot_left_generating_by_a_kill_does_not_make_the_store_unreadable() {
    use assembler::storage::sled_backend::SledStorage;
    use assembler::storage::{Space, Storage, WriteSet};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let s = SledStorage::open(&path).unwrap();
        let mut w = WriteSet::default();
        w.put(Space::Meta, b"k".to_vec(), b"v".to_vec());
        s.commit(w).unwrap();
        s.flush().unwrap();
    }
    // what a kill between sled's snapshot write and its rename leaves: a name that sorts
    // after every finished snapshot, with contents whose checksum does not match
    std::fs::write(
        path.join("snap.FFFFFFFFFFFFFFF0.generating"),
        vec![7u8; 4096],
    )
    .unwrap();
    let s = SledStorage::open(&path).expect("the store opens after a kill mid-snapshot");
    assert_eq!(
        s.get(Space::Meta, b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(!path.join("snap.FFFFFFFFFFFFFFF0.generating").exists());
}
