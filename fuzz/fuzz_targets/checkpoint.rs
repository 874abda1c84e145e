//! `cargo +nightly fuzz run checkpoint`: see `fuzz_targets::checkpoint` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::checkpoint(data));
