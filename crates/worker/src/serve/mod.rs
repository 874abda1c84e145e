//! What the worker answers besides events: queries over the NATS service API ([`query`]), the
//! HTTP endpoint ([`http`]: `/metrics`, `/healthz`) and the counters behind it ([`metrics`]).

pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod query;
