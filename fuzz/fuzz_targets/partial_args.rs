//! `cargo +nightly fuzz run partial_args`: see `fuzz_targets::partial_args` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::partial_args(data));
