//! `cargo +nightly fuzz run history`: see `fuzz_targets::history` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::history(data));
