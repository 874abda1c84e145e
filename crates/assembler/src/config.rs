//! The assembler's typed configuration: limits and timeouts, with documented defaults.

use serde::{Deserialize, Serialize};

/// Limits and timeouts of the assembler. Every field has a default; unknown fields are an
/// error so that a misspelt setting is noticed instead of silently ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest argument text of one call, in bytes (default 8 MiB). A fragment that would
    /// exceed it ends *that* call `invalid` with reason `argument_limit`; the text assembled so
    /// far is kept.
    pub max_argument_bytes: usize,
    /// Calls per message (default 256). Calls past it end `invalid` with reason `call_limit`
    /// as soon as they appear; their argument text is not stored, but each still keeps a small
    /// record (id, name) in the message.
    pub max_calls_per_message: usize,
    /// Most chunk streams open at once (default 100,000). A chunk that would open one more is
    /// dead-lettered with reason `open_stream_limit`.
    pub max_open_streams: usize,
    /// A stream with no input for this long is ended: open calls `abandoned` (`timeout`).
    pub idle_timeout_ms: u64,
    /// A sequence gap not filled this long after the first chunk was parked behind it ends
    /// the stream: open calls `abandoned` (`gap`), parked chunks discarded.
    pub gap_timeout_ms: u64,
    /// A tool result whose call has not appeared this long after the result arrived becomes
    /// `tool_result.orphaned`.
    pub orphan_grace_ms: u64,
    /// A message is deleted this long after its `message.completed` was emitted (default 7
    /// days; `0` keeps everything forever): its state, argument pieces, call-id index
    /// entries and parked inputs. Its stream records stay as small tombstones (watermark
    /// only, chunk stream closed) for another `retention_ms`, so a redelivered chunk is a
    /// duplicate instead of a new open stream. A result arriving later for one of its
    /// calls finds no call and becomes `tool_result.orphaned` after `orphan_grace_ms`.
    /// Outbox rows are never deleted by retention (the relay owns them). Work is bounded:
    /// at most [`crate::store::EXPIRE_PER_TICK`] messages per `Store::tick`.
    pub retention_ms: u64,
    /// Most completed messages kept (default 50,000; `0`: no count bound, only
    /// `retention_ms`), like Kafka's `retention.bytes` beside `retention.ms`: when more are
    /// kept, the oldest (by completion) are deleted early, exactly as `retention_ms` deletes
    /// them (state, argument pieces, call-id index entries, parked inputs; stream tombstones
    /// left). Tombstones are bounded by the same number: past it the oldest are dropped
    /// early. Each stored message costs memory (sled keeps per-page state for every page of
    /// the database, ~1 KB per kept message), so this bounds the memory of history by
    /// configuration instead of by completion rate × `retention_ms`. Whichever bound comes
    /// first deletes.
    ///
    /// What the count bound gives up, with `n` this setting and completions counted per store
    /// (per partition): a message is kept only until `n` more complete after it, so
    /// - snapshots and histories no longer show it. Messages whose calls still await their
    ///   results (a completed function or custom call without a result: its tool is still
    ///   running) go last: among the oldest 2,000 kept, the answered ones are deleted first,
    ///   so a late result still finds its call, and only a store still over the bound deletes
    ///   the oldest of those still running (a store whose producers never send results): the
    ///   bound holds. A result arriving after its message was deleted becomes
    ///   `tool_result.orphaned` (after `orphan_grace_ms`);
    /// - a redelivered chunk of the message is a duplicate while its tombstone exists: until
    ///   about `n` further messages were deleted after it, ~2 `n` completions after its own.
    ///   After that (a producer re-publishing an old message, a JetStream redelivery slower
    ///   than 2 `n` completions) its chunks open a new stream and end as any new stream
    ///   would (sequence 0 starts a call that ends `abandoned`/`timeout`, a later number
    ///   waits for a gap that ends `gap`) instead of being dropped as duplicates.
    ///
    /// Work is bounded as for `retention_ms`: per `Store::tick` at most
    /// [`crate::store::EXPIRE_PER_TICK`] messages deleted and as many tombstones dropped.
    /// The counts are kept in memory (read from the retention index at open, one keys-only
    /// pass, only when this is not 0). Messages completed by a store older than the
    /// retention index are neither counted nor deleted.
    pub retention_max_messages: usize,
    /// Memory sled may use for its page cache, in bytes (default 64 MiB; sled's own default
    /// is 1 GiB). The argument text of open calls lives in the store, not in the process's
    /// memory, so this (plus the storage's layers of writes, see
    /// [`crate::storage::sled_backend::MATERIALIZE_BYTES`] and
    /// [`crate::storage::sled_backend::SPILL_BYTES`]) bounds what stored data costs in RAM;
    /// a larger cache only saves disk reads.
    pub storage_cache_bytes: u64,
    /// Most message states kept in memory between inputs (default 10,000). Every state is
    /// stored at each commit; past this many, the least recently loaded are dropped from
    /// memory and read back from the store when their stream goes on, so memory does not
    /// grow with the number of open streams (`max_open_streams`).
    pub message_cache_entries: usize,
    /// Argument previews: `tool_call.delta` events for calls still streaming (off by
    /// default). See [`Previews`].
    pub previews: Previews,
}

/// Argument previews (`tool_call.delta`): while a call streams, a delta event carries the text
/// appended since the call's previous delta and a best-effort parse of the text so far. Off by
/// default: each delta is one more outbox row and one more published event.
///
/// Throttled per call, on the inputs' publish time (JetStream's, never the worker's clock, so
/// a redelivery or restart decides the same): a call's next delta is due after a chunk when at
/// least `min_bytes` were appended since its previous delta and either it has had none yet,
/// `min_interval_ms` passed since it, or [`crate::core::preview::FLUSH_PENDING_BYTES`] are
/// waiting. So a call of `n` bytes streamed over `t` ms gets at most `n / min_bytes` deltas and
/// at most `1 + t / min_interval_ms + n / FLUSH_PENDING_BYTES`. Each byte of text is carried
/// by one delta at most. A call whose arguments arrive as structured pieces (Vertex
/// `partialArgs`) gets no deltas; a call that ended gets none any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Previews {
    /// Emit `tool_call.delta` events (default false).
    pub enabled: bool,
    /// Least new argument text (bytes) a delta carries (default 64; 0 counts as 1).
    pub min_bytes: usize,
    /// Least time (ms, on publish times) between two deltas of one call (default 250).
    pub min_interval_ms: u64,
    /// `partial_arguments` is computed only while the call's text is at most this long (bytes,
    /// default 16384; 0: never): each computation reads the whole text so far, so the bound
    /// keeps the cost of a delta, and its size, independent of the argument's length.
    pub partial_max_bytes: usize,
}

impl Default for Previews {
    fn default() -> Previews {
        Previews {
            enabled: false,
            min_bytes: 64,
            min_interval_ms: 250,
            partial_max_bytes: 16 * 1024,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_argument_bytes: 8 * 1024 * 1024,
            max_calls_per_message: 256,
            max_open_streams: 100_000,
            idle_timeout_ms: 300_000,
            gap_timeout_ms: 30_000,
            orphan_grace_ms: 600_000,
            retention_ms: 604_800_000,
            retention_max_messages: 50_000,
            storage_cache_bytes: 64 * 1024 * 1024,
            message_cache_entries: 10_000,
            previews: Previews::default(),
        }
    }
}
