//! [`Outbox`]: what delivery needs from the store. The rows themselves
//! ([`assembler::OutboxEntry`]) are written by the assembler in the same sled batch as the
//! state that produced them; delivery only reads the oldest durable rows and deletes the rows
//! it delivered. [`assembler::Store`] is the real outbox; tests use an in-memory one.
//!
//! The one rule every sink keeps: a row is deleted only after its delivery is confirmed (a
//! PubAck for JetStream, a flushed write for JSON lines), so a crash anywhere loses nothing.

use assembler::{OutboxEntry, StoreError};

/// The outbox as delivery sees it. Blocking calls: async callers run them on the blocking pool.
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` oldest *durable* rows (made durable by a flush), oldest first.
    fn peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Deletes the rows with these keys (missing keys are fine).
    fn remove(&self, keys: &[u64]) -> Result<(), StoreError>;
    /// How many rows are waiting (durable or not).
    fn len(&self) -> usize;
    /// Whether no row is waiting.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Outbox for assembler::Store {
    fn peek(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.outbox_peek(limit)
    }

    fn remove(&self, keys: &[u64]) -> Result<(), StoreError> {
        for key in keys {
            self.outbox_remove(*key)?;
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.outbox_len()
    }
}
