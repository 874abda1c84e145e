//! # toolstream
//!
//! The `toolstream` binary as a library: `main.rs` only parses the command line
//! ([`cli::Cli`]) and hands over. Everything lives in five rooms.
//!
//! ## Layout
//! - `cli/` — the commands and their flags:
//!   - `cli/mod.rs` — [`cli::Cli`]: the subcommands and the one place errors become an exit code;
//!   - `cli/connection.rs` — the connection and auth flags, written once: `run` and every
//!     client command flatten them (validated by `Config::validate_connection`, turned into
//!     options by `nats::connect::base_options`);
//!   - `cli/replay.rs` — `toolstream replay`: provider streams, `record` files, or
//!     `--from-nats`, through the real assembler on a scratch store, events printed as JSON
//!     lines (`--timeline` for a person, `--diff` against the events stream);
//!   - `cli/record.rs` — `toolstream record`: a conversation's inputs copied off the input
//!     stream into a file; `cli/input_log.rs` — that file's format, reading the input stream
//!     through an ordered consumer, and applying inputs exactly as the worker does;
//!   - `cli/inspect.rs` — `toolstream inspect`: the store's calls, their fragments and chunk
//!     numbers, results, where an invalid call's JSON breaks (query service or `--data-dir`);
//!   - `cli/query.rs` — `toolstream query message|history`: the query service;
//!   - `cli/publish.rs` — `toolstream publish`: a recorded stream (or tool results) to JetStream
//!     as a producer would send it, ids from `chunk_model::wire::msg_id`;
//!   - `cli/tail.rs` — `toolstream tail`: events as JSON lines, live or from the start;
//!   - `cli/output.rs` — color (terminals only), aligned columns, progress on stderr.
//! - `run/` — `toolstream run`, the JetStream worker:
//!   - `run/mod.rs` — the wiring from configuration to a clean exit, and the shutdown order;
//!   - `run/args.rs` (the flags and environment variables, laid over the file),
//!     `run/config.rs` (the typed settings, defaults, the TOML file), `run/validate.rs` (the
//!     settings refused together), `run/duration.rs` (human durations);
//!   - `run/ready.rs` — provisioning retried (with `sink::backoff::Backoff`) until the server is
//!     ready, or a fatal error ends the start;
//!   - `run/shutdown.rs` — the one stop path; `run/private_dir.rs` — the data directory,
//!     created 0700; `run/redact.rs` — what logs may show of a reason;
//!   - `run/failpoints.rs` — test crashes, compiled only with the feature `failpoints`.
//! - `nats/` — talking to the server: `nats/connect.rs` (auth, TLS, reconnects) and
//!   `nats/provision.rs` (streams, consumers, checked never reconfigured). Subjects, header
//!   names, `Nats-Msg-Id`s and dead-letter codes come from the wire contract,
//!   `chunk_model::wire`.
//! - `consume/` — fetch → apply → flush → ack:
//!   - `consume/mod.rs` — [`consume::ConsumeLoop`]: the loop, pulling, ticking the timers;
//!   - `consume/inputs.rs` — subject, headers and body into an assembler input;
//!   - `consume/delivery.rs` — the reply subject's delivery info (stream sequence, publish
//!     time, delivered before), read once per message;
//!   - `consume/batch.rs` — one batch through the store, then every message settled;
//!   - `consume/apply.rs` — applying on the blocking pool, storage errors retried in place;
//!   - `consume/poison.rs` — a redelivered input applied alone, behind a note;
//!   - `consume/settle.rs` — ack, term or nak, decided once; straight dead letters;
//!   - `consume/watermark.rs` — the settled watermark, the clock of the store's timers;
//!   - `consume/testing.rs`, `consume/nats_tests.rs` — test-only: fakes for the paused-time
//!     tests, and the loop run in-process against a real nats-server.
//! - `serve/` — what the worker answers: `serve/query.rs` (snapshots and history over the
//!   NATS service API), `serve/http.rs` (`/metrics`, `/healthz`, and `/v1/…` handed to
//!   `serve/ui/`), `serve/metrics.rs` (the counters and histograms), `serve/ui/` (the HTTP API
//!   for UIs: `events.rs` resumable Server-Sent Events read from the events stream,
//!   `snapshot.rs` a message's snapshot with the exact `offset` of the last event it reflects).

pub mod cli;
pub(crate) mod consume;
pub(crate) mod nats;
pub mod ownership;
pub(crate) mod run;
pub(crate) mod serve;
