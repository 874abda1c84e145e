//! The `toolstream` binary (being built).
fn main() {}
