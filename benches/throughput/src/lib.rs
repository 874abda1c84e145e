//! # toolstream-throughput — toolstream measured end to end
//!
//! Binaries over one library:
//! - `throughput` — one paced or burst run ([`paced`]): K conversations stream openai-chat
//!   tool calls into a fresh nats-server and the real worker; chunks/s and the latency from a
//!   message's call-ending chunk to its `tool_call.completed`.
//! - `perf` — the performance report ([`drain`], [`report`]): the worker draining a preloaded
//!   backlog against the bare consumer and the bare relay in the same run, alternating, on the
//!   typical and the mixed workload and on each nats-server given; then latency at fractions of
//!   the measured drain rate; a table, a JSON file and an SVG plot.
//! - `scaleout` — one backlog drained by 1, 2 and 3 leased workers.
//! - `pull_stall` — drains a backlog with the baselines' pull stream again and again and says
//!   what the server holds whenever the stream goes quiet for a second (the README's "Known
//!   limits": a drain that stalls for about 10 s).
//!
//! ## Layout
//! - [`streams`] — the generated openai-chat streams (the typical workload).
//! - [`workloads`] — backlogs: the typical one and the mixed one (every provider's recordings,
//!   parallel calls, text, arguments from bytes to hundreds of KiB, tool results).
//! - [`drain`] — preload a backlog, then drain it with the worker, the bare consumer or the bare
//!   relay; rate, CPU, peak RSS.
//! - [`paced`] — one paced run and its latencies.
//! - [`worker`] — the worker process: start, wait healthy, scrape `/metrics`, stop.
//! - [`procfs`] — CPU time and peak RSS of a process from `/proc`.
//! - [`stats`] — percentiles and formatting.
//! - [`report`] — the table, JSON and SVG of a `perf` run.

pub mod drain;
pub mod paced;
pub mod procfs;
pub mod report;
pub mod stats;
pub mod streams;
pub mod worker;
pub mod workloads;

/// A nats-server binary by name: `debian` (the testkit's, the oldest supported), `current`
/// (the pinned current release) or a path.
pub fn server_bin(name: &str) -> anyhow::Result<toolstream_testkit::ServerBin> {
    let r = match name {
        "debian" => toolstream_testkit::debian_server(),
        "current" => toolstream_testkit::current_server(),
        path => {
            let path = std::path::PathBuf::from(path);
            toolstream_testkit::server_version(&path)
                .map(|version| toolstream_testkit::ServerBin { path, version })
        }
    };
    r.map_err(|e| anyhow::anyhow!("nats-server {name:?}: {e}"))
}

/// The harnesses' runtime: two worker threads (the machine's cores), timers and I/O.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")
}
