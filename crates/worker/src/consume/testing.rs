//! Test helpers shared by the consume room's unit tests: a storage whose commits fail on
//! demand ([`flaky_store`]), one whose commits and flushes wait at gates ([`gated_store`],
//! whose flush gate can also fail flushes: [`Gate::fail_next`]) and a chunk input
//! ([`chunk_input`]).

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

/// Holds every flush, or every commit, of a store while closed: a disk that takes its time.
#[derive(Default)]
pub(crate) struct Gate {
    closed: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
    /// Flushes (or commits) that went through and returned.
    pub(crate) passed: std::sync::atomic::AtomicU64,
    /// Flushes (or commits) waiting while the gate is closed.
    pub(crate) held: std::sync::atomic::AtomicU64,
    /// Flushes that fail instead of going through (a disk error), counted down.
    failing: std::sync::atomic::AtomicU32,
}

impl Gate {
    /// Flushes (or commits) wait from now on.
    pub(crate) fn close(&self) {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// Waiting ones go on, and later ones do not wait.
    pub(crate) fn open(&self) {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.changed.notify_all();
    }

    /// The next `n` flushes through this gate fail, as on a disk error (commits ignore it).
    pub(crate) fn fail_next(&self, n: u32) {
        self.failing.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether this flush is one of those that fail (counting it).
    fn take_failure(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn pass(&self) {
        use std::sync::atomic::Ordering;
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        if *closed {
            self.held.fetch_add(1, Ordering::SeqCst);
            while *closed {
                closed = self.changed.wait(closed).unwrap_or_else(|p| p.into_inner());
            }
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A memory storage with faults on demand: its first `failures` commits fail (a disk that
/// recovers), its commits wait at `commit_gate` and its flushes at `flush_gate` while they
/// are closed (a slow disk, a slow fsync).
struct FaultyStorage {
    inner: assembler::storage::memory::MemoryStorage,
    failures: std::sync::atomic::AtomicU32,
    commit_gate: std::sync::Arc<Gate>,
    flush_gate: std::sync::Arc<Gate>,
}

impl assembler::storage::Storage for FaultyStorage {
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
        self.commit_gate.pass();
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Corrupt {
                space: "test",
                detail: "injected commit failure".into(),
            });
        }
        let committed = self.inner.commit(set);
        self.commit_gate.passed.fetch_add(1, Ordering::SeqCst);
        committed
    }
    fn remove(&self, space: assembler::storage::Space, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.remove(space, key)
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.flush_gate.pass();
        if self.flush_gate.take_failure() {
            return Err(StoreError::Backend {
                backend: "test",
                kind: assembler::BackendErrorKind::Io,
                detail: "injected flush failure".into(),
            });
        }
        let r = self.inner.flush();
        self.flush_gate
            .passed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        r
    }
}

fn faulty_store(
    failures: u32,
    commit_gate: std::sync::Arc<Gate>,
    flush_gate: std::sync::Arc<Gate>,
    config: assembler::Config,
) -> Store {
    let storage = FaultyStorage {
        inner: assembler::storage::memory::MemoryStorage::new(),
        failures: std::sync::atomic::AtomicU32::new(failures),
        commit_gate,
        flush_gate,
    };
    Store::with_storage(std::sync::Arc::new(storage), config).expect("store")
}

/// A memory store whose first `failures` commits fail, like a disk that recovers.
pub(crate) fn flaky_store(failures: u32) -> Store {
    faulty_store(
        failures,
        Default::default(),
        Default::default(),
        assembler::Config::default(),
    )
}

/// A memory store whose commits wait while `commit_gate` is closed, and its flushes while
/// `flush_gate` is (each counts what passed it).
pub(crate) fn gated_store(
    commit_gate: std::sync::Arc<Gate>,
    flush_gate: std::sync::Arc<Gate>,
    config: assembler::Config,
) -> Store {
    faulty_store(0, commit_gate, flush_gate, config)
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

/// A JetStream context on a client that never connects (it keeps trying in the background):
/// enough to build messages with [`jetstream_message`].
pub(crate) async fn offline_context() -> async_nats::jetstream::Context {
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect("nats://127.0.0.1:1")
        .await
        .expect("a client that connects in the background");
    async_nats::jetstream::new(client)
}

/// A JetStream message with reply subject `reply`, on `context`'s client.
pub(crate) fn jetstream_message(
    context: &async_nats::jetstream::Context,
    reply: &str,
) -> async_nats::jetstream::Message {
    async_nats::jetstream::Message {
        message: async_nats::Message {
            subject: "toolstream.chunks.c.m".into(),
            reply: Some(reply.into()),
            payload: bytes::Bytes::new(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        },
        context: context.clone(),
    }
}
