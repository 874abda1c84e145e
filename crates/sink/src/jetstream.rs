//! JetStream relay (being built).
