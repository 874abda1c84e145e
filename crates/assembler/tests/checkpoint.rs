//! Checkpoints (a leased partition's next owner starts from one, README "Scale-out"): a store
//! exported mid-stream and imported elsewhere goes on exactly like the original — the same
//! snapshots, the same outbox, the same events for the rest of the input — and inputs the
//! checkpoint already reflects are duplicates there, as after a crash. A cut file is refused.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Applied, Config, Store};
use common::*;

fn outbox_ids(store: &Store) -> Vec<String> {
    durable_rows(store, usize::MAX)
        .into_iter()
        .map(|r| r.msg_id)
        .collect()
}

#[test]
fn an_imported_checkpoint_goes_on_exactly_like_the_store_it_was_taken_from() {
    let dir = tempfile::tempdir().unwrap();
    let original = Store::open(&dir.path().join("a"), Config::default()).unwrap();
    let stream = two_call_stream();
    // one message complete, another half way (its first call still open)
    for (i, body) in stream.iter().enumerate() {
        let _ = original
            .apply(&chunk("c", "done", i as u64, body), 1_000)
            .unwrap();
    }
    for (i, body) in stream.iter().take(2).enumerate() {
        let _ = original
            .apply(&chunk("c", "open", i as u64, body), 2_000)
            .unwrap();
    }
    original.flush().unwrap();

    let file = dir.path().join("checkpoint");
    let written = original.export_checkpoint(&file).unwrap();
    assert!(written.pairs > 0 && written.bytes == std::fs::metadata(&file).unwrap().len());
    let (copy, read) =
        Store::import_checkpoint(&file, &dir.path().join("b"), Config::default()).unwrap();
    assert_eq!(read.pairs, written.pairs);

    assert_eq!(copy.open_streams(), original.open_streams());
    assert_eq!(outbox_ids(&copy), outbox_ids(&original));
    for msg in ["done", "open"] {
        assert_eq!(
            serde_json::to_value(copy.message_snapshot("c", msg).unwrap()).unwrap(),
            serde_json::to_value(original.message_snapshot("c", msg).unwrap()).unwrap(),
            "snapshot of {msg}"
        );
    }

    // an input the checkpoint reflects is a duplicate in the copy, as after a crash
    let again = copy
        .apply(&chunk("c", "open", 1, &stream[1]), 2_000)
        .unwrap();
    assert!(matches!(again, Applied::Duplicate), "{again:?}");
    let _ = original
        .apply(&chunk("c", "open", 1, &stream[1]), 2_000)
        .unwrap();

    // the rest of the stream gives both the same events
    for (i, body) in stream.iter().enumerate().skip(2) {
        let _ = original
            .apply(&chunk("c", "open", i as u64, body), 3_000)
            .unwrap();
        let _ = copy
            .apply(&chunk("c", "open", i as u64, body), 3_000)
            .unwrap();
    }
    let (a, b) = (events(&original), events(&copy));
    assert_eq!(
        serde_json::to_value(&b).unwrap(),
        serde_json::to_value(&a).unwrap()
    );
    assert!(a
        .iter()
        .any(|e| e.event_type.as_str() == "message.completed" && e.message_id == "open"));
}

#[test]
fn a_cut_checkpoint_is_refused_and_a_store_is_never_imported_over_another() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a"), Config::default()).unwrap();
    for (i, body) in two_call_stream().iter().enumerate() {
        let _ = store
            .apply(&chunk("c", "m", i as u64, body), 1_000)
            .unwrap();
    }
    let file = dir.path().join("checkpoint");
    store.export_checkpoint(&file).unwrap();
    let whole = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &whole[..whole.len() - 20]).unwrap();
    let refused = Store::import_checkpoint(&cut, &dir.path().join("b"), Config::default());
    assert!(refused.is_err(), "a cut file is refused");
    let over = Store::import_checkpoint(&file, &dir.path().join("a-again"), Config::default());
    assert!(over.is_ok());
    drop(over);
    // (sled may hold the just-dropped database's lock a moment: ask until that is not why)
    let mut why = String::new();
    for _ in 0..200 {
        match Store::import_checkpoint(&file, &dir.path().join("a-again"), Config::default()) {
            Ok(_) => panic!("a directory that holds a store is never overwritten"),
            Err(e) => why = e.to_string(),
        }
        if why.contains("already holds a store") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(why.contains("already holds a store"), "{why}");
}
