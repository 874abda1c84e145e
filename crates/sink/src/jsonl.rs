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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{event_row, FakeOutbox, Log, Step};

    #[test]
    fn events_become_lines_dead_letters_are_reported_and_every_row_leaves() {
        let log = Log::default();
        let outbox = FakeOutbox::new(&log);
        outbox.add(event_row(1, br#"{"a":1}"#));
        let mut dead = event_row(2, b"garbage");
        dead.kind = OutboxKind::DeadLetter;
        dead.headers = vec![(headers::REASON.into(), "decode_error: bad".into())];
        outbox.add(dead);
        outbox.add(event_row(3, br#"{"b":2}"#));
        let mut out = Vec::new();

        let drained = drain(&*outbox, &mut out).unwrap();

        assert_eq!(out, b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(drained.events, 2);
        assert_eq!(drained.dead_letters, ["decode_error: bad: garbage"]);
        assert!(outbox.keys().is_empty());
    }

    /// A writer whose flush fails: nothing it was given counts as delivered.
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::other("disk full"))
        }
    }

    #[test]
    fn a_failed_write_keeps_every_row() {
        let log = Log::default();
        let outbox = FakeOutbox::new(&log);
        outbox.add(event_row(1, b"{}"));
        outbox.add(event_row(2, b"{}"));

        assert!(matches!(
            drain(&*outbox, &mut Broken),
            Err(JsonlError::Io(_))
        ));
        assert_eq!(outbox.keys(), [1, 2]);
        assert!(!log.steps().iter().any(|s| matches!(s, Step::Removed(_))));
    }
}
