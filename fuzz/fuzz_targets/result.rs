//! `cargo +nightly fuzz run result`: see `fuzz_targets::result` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::result(data));
