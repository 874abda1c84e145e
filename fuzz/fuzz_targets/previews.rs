//! `cargo +nightly fuzz run previews`: see `fuzz_targets::previews` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::previews(data));
