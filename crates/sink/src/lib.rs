//! # sink
//!
//! Where toolstream's events go once the assembler has made them durable in its outbox.
//!
//! ## Layout
//! - `jsonl` — writes events as JSON lines (stdout for `toolstream replay`, files).
//! - `jetstream` — the outbox relay to JetStream: publish with `Nats-Msg-Id = event_id`, await
//!   the PubAck (a duplicate ack is success), then delete the outbox row.

pub mod jetstream;
pub mod jsonl;
