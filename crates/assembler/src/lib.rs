//! # assembler
//!
//! toolstream's heart: a pure assembly core (normalized chunk events → tool-call events) and
//! the durable store around it (sled), with ordering, dedupe, parking, timeouts, results,
//! snapshots and the outbox.
//!
//! ## Layout
//! - [`config`] — [`Config`]: limits and timeouts.
//! - [`input`] — [`Input`] (one JetStream message), [`Seq`], [`Control`], [`Applied`].
//! - [`store`] — [`Store`]: `apply` (one atomic commit per input), `tick` (timeouts),
//!   `flush` (durability point), outbox access, snapshots. The imperative shell.
//! - [`outbox`] — [`OutboxEntry`]: events and dead letters waiting for the relay.
//! - [`error`] — [`StoreError`]: storage failures only (bad input is dead-lettered).
//! - [`storage`] — the storage seam (atomic `commit`, durable `flush`) with sled and in-memory
//!   implementations.
//! - [`core`] — the pure core: [`core::step`] over [`core::MessageState`], ends, ordering
//!   decisions, result assembly. No I/O, no clock.
//! - [`keys`] — byte keys whose order is the wanted order.

pub mod config;
pub mod core;
pub mod error;
pub mod input;
pub mod keys;
pub mod outbox;
pub mod storage;
pub mod store;

pub use config::Config;
pub use error::StoreError;
pub use input::{Applied, Control, Input, InputKind, Origin, Seq};
pub use outbox::{OutboxEntry, OutboxKind};
pub use store::Store;
