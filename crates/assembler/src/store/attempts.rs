//! Suspect inputs and poison: how the store remembers that the process stopped while it was
//! applying one input alone.
//!
//! The worker applies an input that is delivered again (after a crash, a lost ack, a nak)
//! alone, after [`Store::begin_attempt`] made a note of it durable. A note still there at the
//! next open means the process stopped in the middle of that input — perhaps because of it
//! (a stack overflow, an abort). [`Store::open`] turns such a note into one more recorded stop
//! for that input; the worker gives up on an input after enough of them and dead-letters it
//! (poison) instead of crashing on it forever, while the inputs that were merely fetched with
//! it are applied alone, get no stop recorded, and are not punished for it.

use super::Store;
use crate::error::StoreError;
use crate::storage::{Space, Storage, WriteSet};

/// Meta key: the stream sequence of the input being applied alone right now.
const ATTEMPT: &[u8] = b"attempt";
/// Meta key prefix: stops recorded per stream sequence.
const STOPS: &[u8] = b"stops/";

fn stops_key(stream_seq: u64) -> Vec<u8> {
    let mut k = STOPS.to_vec();
    k.extend_from_slice(&stream_seq.to_be_bytes());
    k
}

fn read_u64(bytes: &[u8]) -> Option<u64> {
    bytes.get(..8)?.try_into().ok().map(u64::from_be_bytes)
}

fn stops_of(storage: &dyn Storage, stream_seq: u64) -> Result<u32, StoreError> {
    Ok(storage
        .get(Space::Meta, &stops_key(stream_seq))?
        .as_deref()
        .and_then(read_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)))
}

/// At open: a note left by a process that stopped mid-attempt becomes one more stop of that
/// input (made durable at once, so it is counted once).
pub(crate) fn recover(storage: &dyn Storage) -> Result<(), StoreError> {
    let Some(seq) = storage
        .get(Space::Meta, ATTEMPT)?
        .as_deref()
        .and_then(read_u64)
    else {
        return Ok(());
    };
    let stops = stops_of(storage, seq)?.saturating_add(1);
    let mut w = WriteSet::default();
    w.put(
        Space::Meta,
        stops_key(seq),
        u64::from(stops).to_be_bytes().to_vec(),
    );
    w.delete(Space::Meta, ATTEMPT.to_vec());
    storage.commit(w)?;
    storage.flush()
}

impl Store {
    /// Notes durably (this flushes) that the input at `stream_seq` is about to be applied
    /// alone; returns how many times the process stopped during earlier attempts at it.
    pub fn begin_attempt(&self, stream_seq: u64) -> Result<u32, StoreError> {
        let storage = self.storage.as_ref();
        let stops = stops_of(storage, stream_seq)?;
        let mut w = WriteSet::default();
        w.put(
            Space::Meta,
            ATTEMPT.to_vec(),
            stream_seq.to_be_bytes().to_vec(),
        );
        storage.commit(w)?;
        self.flush()?;
        Ok(stops)
    }

    /// The attempt at `stream_seq` finished (applied or dead-lettered): forget the note and
    /// the stops (durable with the next flush).
    pub fn end_attempt(&self, stream_seq: u64) -> Result<(), StoreError> {
        let mut w = WriteSet::default();
        w.delete(Space::Meta, ATTEMPT.to_vec());
        w.delete(Space::Meta, stops_key(stream_seq));
        self.storage.commit(w)
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::memory::MemoryStorage;
    use crate::{Config, Store};
    use std::sync::Arc;

    #[test]
    fn a_note_left_by_a_stopped_process_counts_one_stop_per_open() {
        let storage = Arc::new(MemoryStorage::new());
        let open = || Store::with_storage(storage.clone(), Config::default()).unwrap();
        let s = open();
        assert_eq!(s.begin_attempt(42).unwrap(), 0);
        drop(s); // the process stops mid-attempt
        let s = open();
        assert_eq!(s.begin_attempt(42).unwrap(), 1);
        drop(s);
        let s = open();
        assert_eq!(s.begin_attempt(42).unwrap(), 2);
        s.end_attempt(42).unwrap();
        drop(s);
        let s = open();
        assert_eq!(s.begin_attempt(42).unwrap(), 0, "forgotten once applied");
        assert_eq!(s.begin_attempt(7).unwrap(), 0, "another input has no stops");
    }
}
