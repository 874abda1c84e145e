//! Store checkpoints (`Store::export_checkpoint` / `Store::import_checkpoint`) from damaged
//! files: a checkpoint comes from NATS, and whatever it holds, importing it returns an error
//! or a store, never a panic.
//!
//! Input format: a mode byte, then
//! - even mode byte, **raw**: the rest is written as the checkpoint file and imported into a
//!   fresh directory;
//! - odd mode byte, **structured**: a count byte (`n = b % 8`), `n` damages of 4 bytes each
//!   (kind, position low, position high, value: see [`Damage`]), then an
//!   [`crate::assembler_target`] input (its optional header and ops) that builds a store in
//!   memory; the store is exported, the damages applied to the file in order, and the file
//!   imported into a fresh directory.
//!
//! Invariants:
//! - no panic: import returns an error or a store; a store it returns answers
//!   `message_snapshot`, `conversation`, `outbox_peek` and `tick` (errors allowed, panics
//!   not);
//! - an export that was not damaged imports: the same number of pairs, every message's
//!   `message_snapshot`, the conversation and the outbox rows equal the original's.
//!
//! Files and stores go under `$TMPDIR` (a tmpfs such as `/dev/shm` makes the fuzzer faster)
//! and are removed after each input.

use crate::assembler_target::build_store;
use assembler::{Config, Store};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The conversation [`build_store`] writes.
const CONV: &str = "c1";

/// One damage to a checkpoint file. `at` is taken modulo the file's length (plus one for a
/// cut or an insertion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Bit `value % 8` of the byte at `at` flipped (kind `% 4 == 0`).
    Flip {
        /// Position.
        at: u16,
        /// Which bit.
        value: u8,
    },
    /// The byte at `at` set to `value` (kind `% 4 == 1`).
    Set {
        /// Position.
        at: u16,
        /// The new byte.
        value: u8,
    },
    /// The file cut at `at` (kind `% 4 == 2`).
    Cut {
        /// Position.
        at: u16,
    },
    /// `value` inserted at `at` (kind `% 4 == 3`).
    Insert {
        /// Position.
        at: u16,
        /// The byte.
        value: u8,
    },
}

impl Damage {
    fn read(b: [u8; 4]) -> Damage {
        let at = u16::from_le_bytes([b[1], b[2]]);
        match b[0] % 4 {
            0 => Damage::Flip { at, value: b[3] },
            1 => Damage::Set { at, value: b[3] },
            2 => Damage::Cut { at },
            _ => Damage::Insert { at, value: b[3] },
        }
    }

    /// The 4 bytes [`checkpoint`] reads as this damage.
    pub fn bytes(&self) -> [u8; 4] {
        let (kind, at, value) = match *self {
            Damage::Flip { at, value } => (0, at, value),
            Damage::Set { at, value } => (1, at, value),
            Damage::Cut { at } => (2, at, 0),
            Damage::Insert { at, value } => (3, at, value),
        };
        let [lo, hi] = at.to_le_bytes();
        [kind, lo, hi, value]
    }

    /// Applies the damage to `file`.
    pub fn apply(&self, file: &mut Vec<u8>) {
        let len = file.len();
        let within = |at: u16, n: usize| usize::from(at) % n.max(1);
        match *self {
            Damage::Flip { at, value } if len > 0 => file[within(at, len)] ^= 1 << (value % 8),
            Damage::Set { at, value } if len > 0 => file[within(at, len)] = value,
            Damage::Cut { at } => file.truncate(within(at, len + 1)),
            Damage::Insert { at, value } => file.insert(within(at, len + 1), value),
            Damage::Flip { .. } | Damage::Set { .. } => {}
        }
    }
}

/// Writes a structured input: `damages` to an export of the store `script` (an assembler
/// target input) builds.
pub fn structured_input(damages: &[Damage], script: &[u8]) -> Vec<u8> {
    let mut out = vec![1, damages.len().min(7) as u8];
    for d in damages.iter().take(7) {
        out.extend(d.bytes());
    }
    out.extend_from_slice(script);
    out
}

/// The config stores are imported with: the assembler target's, with a small sled cache.
pub fn config() -> Config {
    Config {
        storage_cache_bytes: 1024 * 1024,
        ..crate::assembler_target::config()
    }
}

/// A fresh path under `$TMPDIR`, removed (file or directory) when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(what: &str) -> TempPath {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TempPath(
            std::env::temp_dir().join(format!("toolstream-fuzz-{what}-{}-{n}", std::process::id())),
        )
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs one input (module docs).
pub fn checkpoint(data: &[u8]) {
    let _ = checkpoint_checked(data);
}

/// What [`checkpoint_checked`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointChecked {
    /// The import returned a store.
    pub imported: bool,
    /// Messages whose snapshots were compared with the original's.
    pub snapshots_compared: usize,
}

/// [`checkpoint`], saying what it did (so tests can show the checks are not vacuous).
pub fn checkpoint_checked(data: &[u8]) -> CheckpointChecked {
    let Some((&mode, rest)) = data.split_first() else {
        return CheckpointChecked::default();
    };
    if mode % 2 == 0 {
        let file = TempPath::new("raw");
        std::fs::write(&file.0, rest).expect("write the checkpoint file");
        let dir = TempPath::new("store");
        let imported = import(&file.0, &dir.0);
        return CheckpointChecked {
            imported,
            snapshots_compared: 0,
        };
    }
    let (&count, mut rest) = rest.split_first().unwrap_or((&0, &[]));
    let mut damages = Vec::new();
    for _ in 0..count % 8 {
        let mut b = [0u8; 4];
        let n = rest.len().min(4);
        b[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        damages.push(Damage::read(b));
    }
    let (original, messages) = build_store(rest);
    let file = TempPath::new("export");
    let stats = original.export_checkpoint(&file.0).expect("export");
    let mut bytes = std::fs::read(&file.0).expect("read the export");
    assert_eq!(stats.bytes, bytes.len() as u64, "export counts its bytes");
    let pristine = bytes.clone();
    for d in &damages {
        d.apply(&mut bytes);
    }
    let dir = TempPath::new("store");
    if bytes != pristine {
        std::fs::write(&file.0, &bytes).expect("write the damaged file");
        let imported = import(&file.0, &dir.0);
        return CheckpointChecked {
            imported,
            snapshots_compared: 0,
        };
    }
    let (copy, copy_stats) = Store::import_checkpoint(&file.0, &dir.0, config())
        .unwrap_or_else(|e| panic!("an undamaged export imports: {e}"));
    assert_eq!(copy_stats.pairs, stats.pairs, "every pair imported");
    let mut checked = CheckpointChecked {
        imported: true,
        snapshots_compared: 0,
    };
    for m in &messages {
        let a = original
            .message_snapshot(CONV, m)
            .expect("original snapshot");
        let b = copy.message_snapshot(CONV, m).expect("imported snapshot");
        assert_eq!(a, b, "message {m} imports as it was exported");
        checked.snapshots_compared += usize::from(a.is_some());
    }
    assert_eq!(
        original.conversation(CONV).expect("original conversation"),
        copy.conversation(CONV).expect("imported conversation"),
    );
    let rows = |s: &Store| {
        s.outbox_peek(usize::MAX)
            .expect("outbox")
            .into_iter()
            .map(|r| (r.key, r.kind, r.payload))
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&original), rows(&copy), "the outbox imports as it was");
    assert_eq!(original.open_streams(), copy.open_streams());
    checked
}

/// Imports `file` into `dir`; a store it returns is used a little (errors allowed). Whether
/// it returned one.
fn import(file: &Path, dir: &Path) -> bool {
    let Ok((store, _)) = Store::import_checkpoint(file, dir, config()) else {
        return false;
    };
    for m in 0..crate::assembler_target::MESSAGES {
        let _ = store.message_snapshot(CONV, &format!("m{m}"));
    }
    let _ = store.conversation(CONV);
    let _ = store.outbox_peek(usize::MAX);
    let _ = store.tick(u64::MAX / 2);
    true
}
