//! sled [`Storage`]: one tree per [`Space`]; a commit is one sled transaction over all trees
//! (atomic across trees, including after a crash); `flush` is `Db::flush` (fsync of the log).

use super::{Pair, Space, Storage, Write, WriteSet};
use crate::error::StoreError;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::path::Path;

/// A sled database with one tree per keyspace.
#[derive(Debug, Clone)]
pub struct SledStorage {
    db: sled::Db,
    trees: Vec<sled::Tree>,
}

impl SledStorage {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<SledStorage, StoreError> {
        // Flushes happen when the caller says so (group commit), not on a background timer.
        let db = sled::Config::new().path(path).flush_every_ms(None).open()?;
        SledStorage::with_db(db)
    }

    /// A database in a temporary directory, removed when dropped.
    pub fn temporary() -> Result<SledStorage, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .flush_every_ms(None)
            .open()?;
        SledStorage::with_db(db)
    }

    fn with_db(db: sled::Db) -> Result<SledStorage, StoreError> {
        let trees = Space::ALL
            .iter()
            .map(|s| db.open_tree(s.name()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SledStorage { db, trees })
    }

    fn tree(&self, space: Space) -> Result<&sled::Tree, StoreError> {
        self.trees.get(space.position()).ok_or(StoreError::Corrupt {
            space: space.name(),
            detail: "tree not open".into(),
        })
    }
}

impl Storage for SledStorage {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tree(space)?.get(key)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        self.tree(space)?
            .scan_prefix(prefix)
            .map(|r| {
                r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .map_err(StoreError::from)
            })
            .collect()
    }

    fn first_n(&self, space: Space, limit: usize) -> Result<Vec<Pair>, StoreError> {
        self.tree(space)?
            .iter()
            .take(limit)
            .map(|r| {
                r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .map_err(StoreError::from)
            })
            .collect()
    }

    fn count(&self, space: Space) -> Result<usize, StoreError> {
        Ok(self.tree(space)?.len())
    }

    fn commit(&self, set: WriteSet) -> Result<(), StoreError> {
        if set.is_empty() {
            return Ok(());
        }
        let result = self.trees.as_slice().transaction(|trees| {
            for w in &set.writes {
                match w {
                    Write::Put(space, k, v) => {
                        if let Some(t) = trees.get(space.position()) {
                            t.insert(k.as_slice(), v.as_slice())?;
                        }
                    }
                    Write::Delete(space, k) => {
                        if let Some(t) = trees.get(space.position()) {
                            t.remove(k.as_slice())?;
                        }
                    }
                }
            }
            Ok::<(), ConflictableTransactionError<()>>(())
        });
        match result {
            Ok(()) => Ok(()),
            Err(TransactionError::Storage(e)) => Err(StoreError::Sled(e)),
            Err(TransactionError::Abort(())) => Err(StoreError::Corrupt {
                space: "transaction",
                detail: "aborted".into(),
            }),
        }
    }

    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.tree(space)?.remove(key)?.is_some())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}
