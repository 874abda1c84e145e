//! The JSON-lines sink: drains the assembler's outbox into any `Write` (stdout for
//! `toolstream replay`, a file), one event per line, exactly as it would be published.
//!
//! The same delivery as the relay, on the same [`Outbox`]: rows are removed only after the
//! line was written and the writer flushed, so a failed write loses nothing (the rows stay and
//! are written again by the next call).

use crate::outbox::Outbox;
use assembler::{OutboxKind, StoreError};
use chunk_model::wire::headers;
use std::io::Write;

/// Rows read per pass.
const BATCH: usize = 256;

/// What [`drain`] wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[must_use]
pub struct Drained {
    /// Event lines written.
    pub events: usize,
    /// Dead-letter rows seen, as `(reason, payload excerpt)`; they are not events, so they are
    /// reported to the caller instead of written.
    pub dead_letters: Vec<String>,
}

/// Why draining stopped.
#[derive(Debug, thiserror::Error)]
pub enum JsonlError {
    /// Reading or deleting outbox rows failed.
    #[error("outbox: {0}")]
    Store(#[from] StoreError),
    /// Writing a line failed.
    #[error("write: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes every durable outbox row to `out` (events as lines, dead letters reported) and
/// removes them. Rows not yet flushed are left for a later call.
pub fn drain<O: Outbox + ?Sized>(outbox: &O, out: &mut impl Write) -> Result<Drained, JsonlError> {
    let mut drained = Drained::default();
    loop {
        let rows = outbox.peek(BATCH)?;
        if rows.is_empty() {
            return Ok(drained);
        }
        for row in &rows {
            match row.kind {
                OutboxKind::Event => {
                    out.write_all(&row.payload)?;
                    out.write_all(b"\n")?;
                    drained.events += 1;
                }
                OutboxKind::DeadLetter => {
                    let reason = row
                        .headers
                        .iter()
                        .find(|(k, _)| k == headers::REASON)
                        .map(|(_, v)| v.as_str())
                        .unwrap_or("unknown reason");
                    drained.dead_letters.push(format!(
                        "{reason}: {}",
                        chunk_model::error::excerpt(&row.payload)
                    ));
                }
            }
        }
        out.flush()?;
        let keys: Vec<u64> = rows.iter().map(|row| row.key).collect();
        outbox.remove(&keys)?;
    }
}
