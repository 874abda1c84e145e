//! Checkpoints: a store written out whole to one file ([`Store::export_checkpoint`]) and a new
//! store made from such a file ([`Store::import_checkpoint`]). The worker uploads them to NATS
//! so that a partition's next owner starts from the last checkpoint plus the input after it,
//! instead of the whole input history (README "Scale-out").
//!
//! A checkpoint is every keyspace's pairs as committed when it is written (flushed or not),
//! which is the state after every input applied so far: the caller writes it between inputs
//! (the single writer pauses), so it is consistent. Re-applying inputs that the checkpoint
//! already reflects is harmless: a redelivered input is recognized as a duplicate, exactly as
//! after a crash.
//!
//! Format: `TSCKPT1\n`, then records `space (u8) · key length (u32 LE) · key · value length
//! (u32 LE) · value`, then `END\n` and the record count (u64 LE), so a cut file is refused.

use super::Store;
use crate::config::Config;
use crate::error::StoreError;
use crate::storage::sled_backend::SledStorage;
use crate::storage::{Space, Storage, WriteSet};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8] = b"TSCKPT1\n";
const END: &[u8] = b"END\n";
/// Pairs committed per write set while importing.
const IMPORT_BATCH: usize = 4_096;

/// What a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointStats {
    /// Key-value pairs.
    pub pairs: u64,
    /// Bytes of the file.
    pub bytes: u64,
}

fn io(what: &str, e: std::io::Error) -> StoreError {
    StoreError::Corrupt {
        space: "checkpoint",
        detail: format!("{what}: {e}"),
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt {
        space: "checkpoint",
        detail: what.to_string(),
    }
}

impl Store {
    /// Writes every pair of the store to `file` (created or truncated, then synced). Call it
    /// while nothing is applied (see the module docs); it reads one keyspace at a time.
    pub fn export_checkpoint(&self, file: &Path) -> Result<CheckpointStats, StoreError> {
        let out = std::fs::File::create(file).map_err(|e| io("create", e))?;
        let mut w = BufWriter::new(out);
        let mut pairs = 0u64;
        let mut bytes = MAGIC.len() as u64;
        w.write_all(MAGIC).map_err(|e| io("write", e))?;
        for space in Space::ALL {
            for (key, value) in self.storage.scan_prefix(space, b"")? {
                // (compact states as JSON, so that a worker of any release imports it)
                let value = super::compact::at_rest(space, &value)?.unwrap_or(value);
                let (kl, vl) = (len32(&key)?, len32(&value)?);
                w.write_all(&[space.position() as u8])
                    .and_then(|()| w.write_all(&kl.to_le_bytes()))
                    .and_then(|()| w.write_all(&key))
                    .and_then(|()| w.write_all(&vl.to_le_bytes()))
                    .and_then(|()| w.write_all(&value))
                    .map_err(|e| io("write", e))?;
                pairs += 1;
                bytes += 9 + key.len() as u64 + value.len() as u64;
            }
        }
        w.write_all(END)
            .and_then(|()| w.write_all(&pairs.to_le_bytes()))
            .map_err(|e| io("write", e))?;
        bytes += END.len() as u64 + 8;
        let out = w.into_inner().map_err(|e| io("write", e.into_error()))?;
        out.sync_all().map_err(|e| io("sync", e))?;
        Ok(CheckpointStats { pairs, bytes })
    }

    /// Makes a store in `dir` (which must not hold one) from the checkpoint `file`, flushes it,
    /// and opens it with `config`.
    pub fn import_checkpoint(
        file: &Path,
        dir: &Path,
        config: Config,
    ) -> Result<(Store, CheckpointStats), StoreError> {
        let storage = SledStorage::open_with_cache(dir, config.storage_cache_bytes)?
            .with_at_rest(super::compact::at_rest);
        if Space::ALL
            .iter()
            .any(|s| storage.first_n(*s, 1).is_ok_and(|p| !p.is_empty()))
        {
            return Err(corrupt("the target directory already holds a store"));
        }
        let input = std::fs::File::open(file).map_err(|e| io("open", e))?;
        let bytes = input.metadata().map(|m| m.len()).unwrap_or(0);
        let mut r = BufReader::new(input);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(|e| io("read", e))?;
        if magic != MAGIC {
            return Err(corrupt("not a toolstream checkpoint"));
        }
        let mut pairs = 0u64;
        let mut set = WriteSet::default();
        // what is left of the file: no length prefix may claim more (a damaged one would
        // otherwise allocate what it claims, up to 4 GiB)
        let mut left = bytes.saturating_sub(MAGIC.len() as u64);
        loop {
            let mut tag = [0u8; 1];
            r.read_exact(&mut tag).map_err(|e| io("read", e))?;
            if tag[0] == END[0] {
                let mut rest = [0u8; 3];
                r.read_exact(&mut rest).map_err(|e| io("read", e))?;
                let mut count = [0u8; 8];
                r.read_exact(&mut count).map_err(|e| io("read", e))?;
                if rest != END[1..] || u64::from_le_bytes(count) != pairs {
                    return Err(corrupt("cut or damaged (the record count does not match)"));
                }
                break;
            }
            left = left.saturating_sub(1);
            let space = *Space::ALL
                .get(usize::from(tag[0]))
                .ok_or_else(|| corrupt("unknown keyspace"))?;
            let key = read_field(&mut r, &mut left)?;
            let value = read_field(&mut r, &mut left)?;
            set.put(space, key, value);
            pairs += 1;
            if set.writes.len() >= IMPORT_BATCH {
                storage.commit(std::mem::take(&mut set))?;
            }
        }
        if !set.is_empty() {
            storage.commit(set)?;
        }
        storage.flush()?;
        let store = Store::with_storage(Arc::new(storage), config)?;
        Ok((store, CheckpointStats { pairs, bytes }))
    }
}

fn len32(bytes: &[u8]) -> Result<u32, StoreError> {
    u32::try_from(bytes.len()).map_err(|_| corrupt("a value larger than 4 GiB"))
}

/// One length-prefixed field; `left` is what remains of the file, which the length may not
/// exceed.
fn read_field(r: &mut impl Read, left: &mut u64) -> Result<Vec<u8>, StoreError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(|e| io("read", e))?;
    *left = left.saturating_sub(4);
    let len = u64::from(u32::from_le_bytes(len));
    if len > *left {
        return Err(corrupt(
            "a length beyond the end of the file (cut or damaged)",
        ));
    }
    *left -= len;
    let mut out = vec![0u8; usize::try_from(len).map_err(|_| corrupt("a length beyond memory"))?];
    r.read_exact(&mut out).map_err(|e| io("read", e))?;
    Ok(out)
}
