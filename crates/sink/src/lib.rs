//! # sink
//!
//! Where toolstream's events go once the assembler has made them durable in its outbox.
//!
//! ## Layout
//! - `jsonl` — writes events as JSON lines (stdout for `toolstream replay`, files).
//! - `jetstream` — the outbox relay to JetStream: publish with `Nats-Msg-Id = event_id`, await
//!   the PubAck (a duplicate ack is success), then delete the outbox row.
//! - `payloads` — what does not fit the server's `max_payload`: events stored whole in the
//!   `TOOLSTREAM_PAYLOADS` object store bucket and published with `payload_ref`, dead letters
//!   with their body cut (`Toolstream-Body-*` headers), query replies by reference.

pub mod jetstream;
pub mod jsonl;
pub mod payloads;
