//! Opening a stopped worker's store to look at it (`toolstream inspect --data-dir`):
//! [`Store::open_to_inspect`] reads what is stored and changes nothing toolstream owns.
//!
//! Unlike [`Store::open`], it does not count an interrupted attempt as a stop of the process
//! (`store::attempts`: that note belongs to the worker's next start, and counting it here would
//! bring a poison verdict closer), and it refuses a directory that holds no store instead of
//! creating one. sled still recovers its own log on open, as any open does; a worker running
//! on the directory holds sled's lock and the open fails.

use super::{Inner, Store};
use crate::config::Config;
use crate::error::StoreError;
use crate::storage::sled_backend::SledStorage;
use crate::storage::{Space, Storage};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

impl Store {
    /// Opens the store in `path` for reading: snapshots ([`Store::message_snapshot`],
    /// [`Store::conversation`]) work; nothing is applied, ticked or drained by this call.
    /// `Ok(None)` when `path` holds no store.
    pub fn open_to_inspect(path: &Path, config: Config) -> Result<Option<Store>, StoreError> {
        if !path.join("db").is_file() || !path.join("conf").is_file() {
            return Ok(None);
        }
        let storage = SledStorage::open_with_cache(path, config.storage_cache_bytes)?
            .with_at_rest(super::compact::at_rest);
        let inner = Inner::load(&storage, config)?;
        let outbox_len = storage.count(Space::Outbox)?;
        let durable_before = inner.outbox_next;
        Ok(Some(Store {
            storage: Arc::new(storage),
            inner: Arc::new(Mutex::new(inner)),
            outbox_len: Arc::new(AtomicUsize::new(outbox_len)),
            durable_before: Arc::new(AtomicU64::new(durable_before)),
            relay_told: Arc::new(AtomicU64::new(durable_before)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Retries `open` while a just-dropped handle still holds sled's file lock (sled lets go
    /// of it when its background threads drop the database; found failing under a parallel
    /// test run, like `tests/common::reopen` in the integration tests).
    fn retry<T>(mut open: impl FnMut() -> Result<T, StoreError>) -> T {
        let mut last = None;
        for _ in 0..200 {
            match open() {
                Ok(v) => return v,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("cannot reopen the store: {last:?}");
    }

    #[test]
    fn a_directory_without_a_store_is_not_made_into_one() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("nothing");
        assert!(Store::open_to_inspect(&empty, Config::default())
            .unwrap()
            .is_none());
        assert!(!empty.exists(), "inspect created {}", empty.display());
    }

    #[test]
    fn a_stopped_store_is_read_and_its_attempt_note_left_for_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), Config::default()).unwrap();
            assert_eq!(store.begin_attempt(42).unwrap(), 0);
            // the process "stops" here: the note stays
        }
        let store =
            retry(|| Store::open_to_inspect(dir.path(), Config::default())).expect("a store");
        assert!(store.conversation("c").unwrap().is_empty());
        drop(store);
        // the worker's next start counts the stop once, as if inspect had never looked
        let store = retry(|| Store::open(dir.path(), Config::default()));
        assert_eq!(store.begin_attempt(42).unwrap(), 1);
    }
}
