//! The hash maps of the apply path, keyed by stream, message and storage keys.
//!
//! std's SipHash cost ~240 instructions per lookup of a stream key, ~18 lookups per input
//! (callgrind over `benches/examples/completion_cost.rs`): a tenth of an input's apply.
//! `ahash` is keyed per process like SipHash (producers choose conversation ids, so a
//! fixed-key hash would let them collide on purpose) and several times cheaper.

/// A hash map of the apply path.
pub type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
