//! Test helpers shared by the consume room's unit tests: a storage whose commits fail on
//! demand ([`flaky_store`]) and a chunk input ([`chunk_input`]).

use super::inputs::{parse_message, OwnedInput};
use assembler::{Store, StoreError};
use async_nats::HeaderMap;
use bytes::Bytes;
use chunk_model::wire::headers;
use chunk_model::wire::Subjects;

/// The default subject names.
pub(crate) fn subjects() -> Subjects {
    Subjects::new("toolstream")
}

/// A storage whose first `failures` commits fail, like a disk that recovers.
struct FlakyStorage {
    inner: assembler::storage::memory::MemoryStorage,
    failures: std::sync::atomic::AtomicU32,
}

impl assembler::storage::Storage for FlakyStorage {
    fn get(
        &self,
        space: assembler::storage::Space,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(space, key)
    }
    fn scan_prefix(
        &self,
        space: assembler::storage::Space,
        prefix: &[u8],
    ) -> Result<Vec<assembler::storage::Pair>, StoreError> {
        self.inner.scan_prefix(space, prefix)
    }
    fn first_n(
        &self,
        space: assembler::storage::Space,
        limit: usize,
    ) -> Result<Vec<assembler::storage::Pair>, StoreError> {
        self.inner.first_n(space, limit)
    }
    fn count(&self, space: assembler::storage::Space) -> Result<usize, StoreError> {
        self.inner.count(space)
    }
    fn commit(&self, set: assembler::storage::WriteSet) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Corrupt {
                space: "test",
                detail: "injected commit failure".into(),
            });
        }
        self.inner.commit(set)
    }
    fn remove(&self, space: assembler::storage::Space, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.remove(space, key)
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
}

pub(crate) fn flaky_store(failures: u32) -> Store {
    let storage = FlakyStorage {
        inner: assembler::storage::memory::MemoryStorage::new(),
        failures: std::sync::atomic::AtomicU32::new(failures),
    };
    Store::with_storage(std::sync::Arc::new(storage), assembler::Config::default()).expect("store")
}

pub(crate) fn chunk_input(seq: u64) -> OwnedInput {
    let body = Bytes::from_static(
        br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}"#,
    );
    let mut h = HeaderMap::new();
    h.insert(headers::PROVIDER, "openai-chat");
    parse_message(
        &subjects(),
        "toolstream.chunks.c.m",
        Some(&h),
        &body,
        seq,
        0,
    )
    .expect("input")
}
