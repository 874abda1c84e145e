//! # assembler
//!
//! toolstream's heart: a pure assembly core (normalized chunk events → tool-call events) and
//! the durable store around it (sled), with ordering, dedupe, parking, timeouts, results,
//! snapshots and the outbox.
//!
//! ## Layout
//! - [`core`] — the functional core: no I/O, no clock (time is a value). It decides; the store
//!   carries out.
//!   - `core::state` — [`core::MessageState`] / [`core::CallState`].
//!   - `core::step` — one normalized chunk event → events + argument writes (identity
//!     matching, appending, ends, limits); calls into `core::end`, never the reverse.
//!   - `core::end` — ending calls/messages, judging arguments, `message.completed` once.
//!   - `core::output` — [`core::StepOutput`] / [`core::ArgOp`], what a step caused.
//!   - `core::emit` — events with deterministic ids, synthetic call ids.
//!   - `core::order` — per-stream ordering decisions (apply / duplicate / park) and timers,
//!     with the gap decision documented.
//!   - `core::results` — tool results assembled while they wait for their call.
//!   - `core::matching` — matching results to calls and orphaning them: pure functions
//!     returning [`core::ResultDecision`], [`core::RegisterDecision`],
//!     [`core::OrphanDecision`], with the rules documented.
//!   - `core::snapshot` — a message's state as a `chunk_model::MessageSnapshot`.
//!   - `core::preview` — argument previews (`tool_call.delta`, off by default): throttle,
//!     delta text, `partial_arguments`.
//! - [`store`] — [`Store`], the imperative shell: `apply` (one atomic commit per input:
//!   state + outbox rows + watermark), `tick` (gap / idle / orphan timeouts, one commit
//!   each, then retention of completed messages), `flush` (the durability point), outbox
//!   access, snapshots.
//!   - `store::apply` — ordering, numbering, decoding, stepping the core, persisting a step.
//!   - `store::close` — ending a chunk stream for toolstream's reasons (`gap`, `lost_chunk`,
//!     `timeout`), dead-lettering what was parked behind a hole.
//!   - `store::results` — carrying out `core::matching`'s decisions.
//!   - `store::dead_letter` — an input's facts and its dead-letter row.
//!   - `store::retention` — deleting completed messages after `retention_ms` (the
//!     [`storage::Space::Done`] index, stream tombstones, what happens on redelivery).
//!   - `store::seen` — which producer numbers a stream has seen, packed per 32 numbers
//!     (one value per group, so a retained message keeps few keys).
//!   - `store::compact` — the binary form in which commits write stream and message states
//!     (JSON again at rest in sled and in checkpoints; readers take both).
//!   - `store::checkpoint` — the whole store to one file and back (a leased partition's
//!     checkpoint, uploaded by the worker).
//!   - `store::attempts` — the durable note of an input applied alone, and the stops of the
//!     process while applying it (poison detection, see the worker's consume loop).
//!   - `store::tick`, `store::snapshot`, `store::txn` (a unit of work), `store::inner`
//!     (cache and timer indexes, rebuilt from storage), [`store::records`].
//! - [`storage`] — the storage seam with its written contract (what `commit` makes atomic,
//!   what only `flush` makes durable); [`storage::sled_backend`] (one sled tree behind
//!   in-memory layers of writes: `layer` — the layers and the log entries commits write as
//!   they go; `wal` — the flush log's segment files, one append and one `fdatasync` per flush;
//!   `materialize` — a layer frozen by every 256th flush, written to sled a slice per
//!   flush; maps sled's errors to [`StoreError`]) and [`storage::memory`].
//! - [`keys`] — byte keys whose order is the wanted order.
//! - `hash` — the keyed, cheap hash maps and sets of the apply path.
//! - [`config`] — [`Config`]: limits and timeouts, documented defaults.
//! - [`input`] — [`Input`] (one JetStream message), [`Seq`], [`Control`], [`Applied`];
//!   [`InputKind`] is the wire contract's (`chunk_model::wire`).
//! - [`outbox`] — [`OutboxEntry`]: events and dead letters waiting for the relay.
//! - [`error`] — [`StoreError`]: storage failures only (bad input is dead-lettered), typed
//!   without any backend's error type ([`BackendErrorKind`]).
//!
//! Header names, `Nats-Msg-Id` formats, reasons and dead-letter codes come from
//! `chunk_model::wire` (README "Contracts").

#![warn(missing_docs)]

pub mod config;
pub mod core;
pub mod error;
pub(crate) mod hash;
pub mod input;
pub mod keys;
pub mod outbox;
pub mod storage;
pub mod store;

pub use config::{Config, Previews};
pub use error::{BackendErrorKind, StoreError};
pub use input::{Applied, Control, Input, InputKind, Origin, Seq};
pub use outbox::{OutboxEntry, OutboxKind};
pub use store::{CheckpointStats, Store};
