//! `/metrics` and `/healthz` (being built).
