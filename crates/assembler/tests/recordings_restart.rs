//! Every recorded provider stream under `tests/recordings/<provider>/`, applied through the
//! sled store twice: straight through, and with a restart (flush, drop, reopen) after every
//! chunk. Both must publish the same events and store the same snapshot: argument text and
//! structured pieces (Vertex `partialArgs`) are reloaded exactly from their stored pieces.
//! (What the events must *be* is pinned by the replay acceptance test in the worker crate.)

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::{framing, Provider};

fn apply_all(store: &Store, provider: Provider, frames: &[Vec<u8>], from: usize, to: usize) {
    for (seq, body) in frames.iter().enumerate().take(to).skip(from) {
        let input = Input {
            kind: InputKind::Chunk,
            conversation_id: "c",
            message_id: "m",
            provider: Some(provider),
            seq: Seq::Producer(seq as u64),
            control: None,
            body,
            origin: None,
        };
        let _ = store.apply(&input, 0).unwrap();
    }
}

#[test]
fn every_recording_assembles_the_same_across_a_restart_after_every_chunk() {
    let all = common::recordings();
    assert!(all.len() >= 30, "recordings not found: {}", all.len());
    for (provider, path) in all {
        let bytes = std::fs::read(&path).unwrap();
        let frames: Vec<Vec<u8>> = framing::split(&bytes)
            .unwrap()
            .into_iter()
            .map(|f| f.data)
            .collect();
        let straight = Store::open_temporary(Config::default()).unwrap();
        apply_all(&straight, provider, &frames, 0, frames.len());

        let dir = tempfile::tempdir().unwrap();
        for k in 0..frames.len() {
            let s = common::reopen(dir.path(), Config::default());
            apply_all(&s, provider, &frames, k, k + 1);
            s.flush().unwrap();
        }
        let restarted = common::reopen(dir.path(), Config::default());
        let name = path.display().to_string();
        assert_eq!(
            common::events(&restarted),
            common::events(&straight),
            "events of {name}"
        );
        assert_eq!(
            restarted.message_snapshot("c", "m").unwrap(),
            straight.message_snapshot("c", "m").unwrap(),
            "snapshot of {name}"
        );
        assert!(
            straight.message_snapshot("c", "m").unwrap().is_some(),
            "{name} stored nothing"
        );
    }
}
