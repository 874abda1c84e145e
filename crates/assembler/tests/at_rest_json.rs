//! What earlier releases read stays JSON: commits write stream and message states in a
//! compact binary form (`store/compact.rs`), but a store settled by a clean stop holds them as
//! JSON records in sled's keyspaces, and so does a checkpoint, so that a rollback reads a
//! settled store and every worker of a rolling upgrade imports a checkpoint.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::storage::Space;
use assembler::{Config, Store};
use common::*;

/// Spaces holding stream and message states (their one-byte prefixes in the sled tree).
const STATE_SPACES: [Space; 2] = [Space::Streams, Space::Messages];

/// Applies a finished message and one still open, as the worker does.
fn fill(store: &Store) {
    let stream = two_call_stream();
    for (i, body) in stream.iter().enumerate() {
        let _ = store
            .apply(&chunk("c", "done", i as u64, body), 1_000)
            .unwrap();
    }
    for (i, body) in stream.iter().take(2).enumerate() {
        let _ = store
            .apply(&chunk("c", "open", i as u64, body), 2_000)
            .unwrap();
    }
    store.flush().unwrap();
}

#[test]
fn a_settled_store_holds_its_states_as_json_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    fill(&store);
    store.flush_settled().unwrap();
    drop(store);

    // (right after the drop, sled's threads may still hold the lock: a plain open failed once
    // in a busy run)
    let db = open_raw_sled(dir.path());
    let tree = db.open_tree("toolstream_v1").unwrap();
    let mut states = 0;
    for space in STATE_SPACES {
        for item in tree.scan_prefix([space as u8]) {
            let (key, value) = item.unwrap();
            assert_eq!(
                value.first(),
                Some(&b'{'),
                "{space:?} {key:?} is not JSON at rest"
            );
            let _: serde_json::Value = serde_json::from_slice(&value).unwrap();
            states += 1;
        }
    }
    // two streams and two messages
    assert_eq!(states, 4);
}

#[test]
fn a_checkpoint_holds_states_as_json_records_and_imports_as_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a"), Config::default()).unwrap();
    fill(&store);
    let file = dir.path().join("checkpoint");
    store.export_checkpoint(&file).unwrap();

    // the format (store/checkpoint.rs): magic, then space · key len · key · value len · value
    let bytes = std::fs::read(&file).unwrap();
    let mut at = b"TSCKPT1\n".len();
    let mut states = 0;
    while !bytes[at..].starts_with(b"END\n") {
        let space = bytes[at];
        let kl = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        let vl_at = at + 5 + kl;
        let vl = u32::from_le_bytes(bytes[vl_at..vl_at + 4].try_into().unwrap()) as usize;
        let value = &bytes[vl_at + 4..vl_at + 4 + vl];
        if STATE_SPACES
            .iter()
            .any(|s| s.position() == usize::from(space))
        {
            assert_eq!(
                value.first(),
                Some(&b'{'),
                "a state record in the checkpoint is not JSON"
            );
            states += 1;
        }
        at = vl_at + 4 + vl;
    }
    assert_eq!(states, 4);

    let (copy, _) =
        Store::import_checkpoint(&file, &dir.path().join("b"), Config::default()).unwrap();
    for msg in ["done", "open"] {
        assert_eq!(
            serde_json::to_value(copy.message_snapshot("c", msg).unwrap()).unwrap(),
            serde_json::to_value(store.message_snapshot("c", msg).unwrap()).unwrap(),
        );
    }
}
