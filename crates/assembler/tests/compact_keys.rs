//! A completed message keeps few keys until retention (issue 8, memory flat under sustained
//! load: every stored key costs sled memory for as long as it exists): its producer-number
//! fingerprints packed per 32 numbers, its argument pieces joined into one value per call.
//! Duplicate detection and the stored text are unchanged by it, also across a reopen.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::storage::sled_backend::SledStorage;
use assembler::storage::{Space, Storage, WriteSet};
use assembler::{keys, Applied, Config, InputKind, Store};
use chunk_model::CallStatus;
use common::*;
use std::sync::Arc;

/// A call of `n` argument fragments: start, fragments, finish, `[DONE]` (n + 3 chunks).
fn long_call(n: usize) -> (Vec<Vec<u8>>, String) {
    let mut bodies = vec![oa_delta(0, Some("call_x"), Some("write"), "{\"t\":\"")];
    let mut text = String::from("{\"t\":\"");
    for i in 0..n {
        let frag = format!("{i:03}-");
        text.push_str(&frag);
        bodies.push(oa_delta(0, None, None, &frag));
    }
    bodies.push(oa_delta(0, None, None, "\"}"));
    text.push_str("\"}");
    bodies.push(oa_finish("tool_calls"));
    bodies.push(b"[DONE]".to_vec());
    (bodies, text)
}

fn sled_store(storage: &Arc<SledStorage>) -> Store {
    Store::with_storage(storage.clone() as Arc<dyn Storage>, Config::default()).unwrap()
}

/// Applies every body with a flush after each (each fragment reaches sled on its own, as
/// when many streams interleave within a batch).
fn apply_flushing(s: &Store, bodies: &[Vec<u8>]) {
    for (i, body) in bodies.iter().enumerate() {
        let v = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        assert!(matches!(v, Applied::Accepted { .. }), "#{i}: {v:?}");
        s.flush().unwrap();
    }
}

fn keys_in(storage: &dyn Storage, space: Space) -> usize {
    storage.count(space).unwrap()
}

#[test]
fn a_completed_message_keeps_one_args_key_per_call_and_one_fingerprint_key_per_32_numbers() {
    let storage = Arc::new(SledStorage::temporary().unwrap());
    let s = sled_store(&storage);
    let (bodies, text) = long_call(60); // 63 chunks: numbers 0..=62, two groups
    apply_flushing(&s, &bodies);
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].status, CallStatus::Completed);
    assert_eq!(snap.calls[0].tool_call.raw_arguments, text);
    assert_eq!(
        keys_in(&*storage, Space::Args),
        1,
        "the pieces joined at completion"
    );
    assert_eq!(
        keys_in(&*storage, Space::SeenSets),
        2,
        "numbers 0..32 and 32..63"
    );
    assert_eq!(keys_in(&*storage, Space::Seen), 0, "no key per number");
}

#[test]
fn redelivered_chunks_of_a_completed_message_are_duplicates_and_other_bytes_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (bodies, text) = long_call(40);
    {
        let s = Store::open(&path, Config::default()).unwrap();
        for (i, body) in bodies.iter().enumerate() {
            let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
            if i % 7 == 0 {
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
    }
    let s = reopen(&path, Config::default());
    let other = oa_delta(0, None, None, "\"tampered\"");
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(
            s.apply(&chunk("c", "m", i as u64, body), 0).unwrap(),
            Applied::Duplicate,
            "#{i}: the same bytes again are a redelivery"
        );
        let v = s.apply(&chunk("c", "m", i as u64, &other), 0).unwrap();
        assert!(is_dead(&v, "conflicting_duplicate"), "#{i}: {v:?}");
    }
    let snap = s.message_snapshot("c", "m").unwrap().unwrap();
    assert_eq!(snap.calls[0].tool_call.raw_arguments, text);
    assert_eq!(dead_reasons(&s).len(), bodies.len());
}

/// A number taken within one unit of work (parked chunks released by the one that fills the
/// gap) is known to the duplicate check right after, before any flush.
#[test]
fn numbers_taken_by_released_parked_chunks_are_known_at_once() {
    let s = Store::open_temporary(Config::default()).unwrap();
    let b = two_call_stream();
    for i in (1..4).rev() {
        assert_eq!(
            s.apply(&chunk("c", "m", i as u64, &b[i]), 0).unwrap(),
            Applied::Parked
        );
    }
    let _ = s.apply(&chunk("c", "m", 0, &b[0]), 0).unwrap();
    let other = oa_delta(0, None, None, "\"Rome\"");
    for i in 0..4u64 {
        let v = s.apply(&chunk("c", "m", i, &other), 0).unwrap();
        assert!(is_dead(&v, "conflicting_duplicate"), "#{i}: {v:?}");
    }
}

/// A store written before the packing keeps one fingerprint key per number in `Space::Seen`:
/// those still decide duplicates.
#[test]
fn per_number_fingerprints_of_an_older_store_still_decide_duplicates() {
    let storage = Arc::new(SledStorage::temporary().unwrap());
    let b = two_call_stream();
    {
        let s = sled_store(&storage);
        for (i, body) in b.iter().enumerate() {
            let _ = s.apply(&chunk("c", "m", i as u64, body), 0).unwrap();
        }
        s.flush().unwrap();
    }
    // Rewrite the packed fingerprints as an older store had them.
    let skey = keys::stream(InputKind::Chunk, "c", "m");
    let packed = storage.scan_prefix(Space::SeenSets, &skey).unwrap();
    assert_eq!(packed.len(), 1);
    let mut w = WriteSet::default();
    for e in packed[0].1.chunks_exact(9) {
        w.put(
            Space::Seen,
            keys::parked(&skey, u64::from(e[0])),
            e[1..].to_vec(),
        );
    }
    w.delete(Space::SeenSets, packed[0].0.clone());
    storage.commit(w).unwrap();
    storage.flush().unwrap();
    let s = sled_store(&storage);
    assert_eq!(
        s.apply(&chunk("c", "m", 2, &b[2]), 0).unwrap(),
        Applied::Duplicate
    );
    let v = s
        .apply(&chunk("c", "m", 2, &oa_delta(0, None, None, "x")), 0)
        .unwrap();
    assert!(is_dead(&v, "conflicting_duplicate"), "{v:?}");
}
