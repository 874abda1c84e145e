//! In-memory [`Storage`]: `BTreeMap`s behind one mutex. Commits are atomic because they hold
//! the lock; nothing is durable (a dropped store is gone). For model tests and benches of
//! the store logic without disk.

use super::{Pair, Space, Storage, Write, WriteSet};
use crate::error::StoreError;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// Keyspaces in memory.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    trees: Mutex<Vec<Tree>>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> MemoryStorage {
        MemoryStorage {
            trees: Mutex::new(vec![Tree::new(); Space::ALL.len()]),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Tree>> {
        // A panic while holding the lock cannot leave a half-applied commit: writes are
        // applied to the maps only after the set is complete, so the data is still usable.
        match self.trees.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

fn tree(trees: &[Tree], space: Space) -> Option<&Tree> {
    trees.get(space.position())
}

impl Storage for MemoryStorage {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let trees = self.lock();
        Ok(tree(&trees, space).and_then(|t| t.get(key).cloned()))
    }

    fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        let trees = self.lock();
        let Some(t) = tree(&trees, space) else {
            return Ok(Vec::new());
        };
        Ok(t.range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn first_n(&self, space: Space, limit: usize) -> Result<Vec<Pair>, StoreError> {
        let trees = self.lock();
        Ok(tree(&trees, space)
            .map(|t| {
                t.iter()
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    fn count(&self, space: Space) -> Result<usize, StoreError> {
        let trees = self.lock();
        Ok(tree(&trees, space).map(|t| t.len()).unwrap_or(0))
    }

    fn commit(&self, set: WriteSet) -> Result<(), StoreError> {
        let mut trees = self.lock();
        for w in set.writes {
            match w {
                Write::Put(space, k, v) => {
                    if let Some(t) = trees.get_mut(space.position()) {
                        t.insert(k, v);
                    }
                }
                Write::Delete(space, k) => {
                    if let Some(t) = trees.get_mut(space.position()) {
                        t.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }

    fn remove(&self, space: Space, key: &[u8]) -> Result<bool, StoreError> {
        let mut trees = self.lock();
        Ok(trees
            .get_mut(space.position())
            .is_some_and(|t| t.remove(key).is_some()))
    }

    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
