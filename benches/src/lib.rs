//! Shared fixtures for the benches (being built).
