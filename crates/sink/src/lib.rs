//! # sink
//!
//! Delivery, whole: everything between an event made durable in the assembler's outbox and
//! the event in a stream (or a JSON line). Its one rule: a row leaves the outbox only after
//! its delivery is confirmed, so a crash anywhere loses nothing, and a re-delivery carries the
//! same `Nats-Msg-Id`, so the stream's duplicate window keeps it from showing twice.
//!
//! ## Layout
//! - `outbox.rs` — [`outbox::Outbox`]: what delivery needs from the store (oldest durable
//!   rows, delete rows, count); [`assembler::Store`] implements it.
//! - `publisher.rs` — [`publisher::Publisher`]: the seam between the relay and JetStream
//!   (send one message, get the future of its PubAck; store an oversized payload).
//! - `jetstream.rs` — [`jetstream::JetStream`]: the real publisher (async-nats).
//! - `relay/` — the outbox relay: `mod.rs` one round ([`relay::Relay::round`]: peek, publish
//!   pipelined, await the PubAcks, delete exactly the confirmed rows), `oversize.rs` rows
//!   larger than `max_payload`, `task.rs` the loop ([`relay::RelayTask`]: wake-ups, interval,
//!   backoff, the bounded drain at shutdown), `failpoints.rs` crash points for the worker's
//!   crash tests (cargo feature `failpoints` only), `tests.rs` paused-time tests with a fake
//!   publisher and outbox.
//! - `guarded.rs` — [`guarded::Guarded`]: publishing for a partition owned through a lease:
//!   nothing once the lease is lost, `Toolstream-Owner` on every message, and the ids a
//!   takeover's rebuild makes again confirmed without a second copy ([`guarded::published_ids`]).
//! - `backoff.rs` — [`backoff::Backoff`]: the one capped exponential backoff (the worker's
//!   retry loops use it too).
//! - `payloads.rs` — what does not fit the server's `max_payload`: events stored whole in the
//!   `TOOLSTREAM_PAYLOADS` object store bucket and published with `payload_ref`, dead letters
//!   with their body cut (`Toolstream-Body-*` headers), query replies by reference.
//! - `jsonl.rs` — the JSON-lines sink on the same [`outbox::Outbox`] (stdout for
//!   `toolstream replay`, files).
//! - `testing.rs` (tests only) — fakes for the paused-time tests: a scripted publisher and an
//!   in-memory outbox.
//! - `tests/jetstream.rs` — the relay against a real nats-server (testkit): `Nats-Msg-Id`,
//!   deduplicated re-publish, an oversized event by reference.

pub mod backoff;
pub mod guarded;
pub mod jetstream;
pub mod jsonl;
pub mod outbox;
pub mod payloads;
pub mod publisher;
pub mod relay;

/// Fakes for tests: this crate's unit tests, and its integration tests through the `testing`
/// feature (off in a release build).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
