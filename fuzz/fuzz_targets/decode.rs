//! `cargo +nightly fuzz run decode`: see `fuzz_targets::decode` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::decode(data));
