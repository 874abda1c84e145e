//! `cargo +nightly fuzz run assembler`: see `fuzz_targets::assembler` for the input format and the
//! invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::assembler(data));
