//! What the worker answers besides events: queries over the NATS service API ([`query`]), the
//! HTTP endpoint ([`http`]: `/metrics`, `/healthz`) and the counters behind it ([`metrics`]),
//! and the HTTP API for UIs ([`ui`]: `/v1/…`, event streams and snapshots).

pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod query;
pub(crate) mod ui;
