//! # sink
//!
//! (being built) Event sinks and the outbox relay.
