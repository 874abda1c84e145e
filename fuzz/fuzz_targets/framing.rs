//! `cargo +nightly fuzz run framing`: see `fuzz_targets::framing` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::framing(data));
