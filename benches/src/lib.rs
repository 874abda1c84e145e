//! Shared fixtures for the benches.
//!
//! - [`decode_inputs`] — the chunks the decode benches and the decode cost driver feed the
//!   decoders: one typical tool-call chunk per provider, and the recorded streams under
//!   `tests/recordings/`.

pub mod decode_inputs;
