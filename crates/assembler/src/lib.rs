//! # assembler
//!
//! (being built) The pure assembly core and its sled store.
