//! Shared fixtures for the benches.
//!
//! - [`decode_inputs`] — the chunks the decode benches and the decode cost driver feed the
//!   decoders: one typical tool-call chunk per provider, and the recorded streams under
//!   `tests/recordings/`.
//! - [`arg`] — a numeric command-line option of the instruction-count drivers in `examples/`.

pub mod decode_inputs;

/// The value after `name` on the command line (`--chunks 20000`), or `default` when it is
/// missing or not a number.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
