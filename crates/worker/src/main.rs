//! # toolstream
//!
//! The binary: a thin `main` that parses the command line and hands over.
//!
//! ## Layout
//! - `replay` — `toolstream replay`: recorded streams through the real assembler on a temporary
//!   sled store, events printed as JSON lines. No server needed.
//! - `publish` — `toolstream publish`: a recorded stream to JetStream as a producer would send it.
//! - `tail` — `toolstream tail`: events as JSON lines, live or from the start of the stream.
//! - `client_args` — the connection flags `publish` and `tail` share.
//! - `run` — `toolstream run`: the JetStream worker, wiring these together:
//!   - `config` (typed settings and the ones refused together), `connect`, `provision`
//!     (streams, consumers, the payload bucket);
//!   - `consume` — fetch → apply (redelivered inputs alone, behind a note: poison) → flush →
//!     ack; `watermark` — the settled watermark, the clock of the store's timers;
//!   - `relay_task` (the outbox relay), `query` (snapshots, history), `http` + `metrics`,
//!     `shutdown` (the one stop path), `subjects`, `redact` (what logs may show),
//!     `private_dir` (the data directory, created 0700), `duration` (human durations).
//! - `publish/msg_id` — the one builder of unambiguous `Nats-Msg-Id`s.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod client_args;
mod config;
mod connect;
mod consume;
mod duration;
mod http;
mod metrics;
mod private_dir;
mod provision;
mod publish;
mod query;
mod redact;
mod relay_task;
mod replay;
mod run;
mod shutdown;
mod subjects;
mod tail;
mod watermark;

/// Turns streamed LLM tool-call chunks into complete, consistent tool-call events.
#[derive(Debug, Parser)]
#[command(name = "toolstream", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the worker: consume chunks from NATS JetStream, assemble them in sled, publish events.
    Run(Box<run::RunArgs>),
    /// Replay recorded provider streams through the assembler and print the events.
    Replay(replay::ReplayArgs),
    /// Publish a recorded provider stream (or tool results) to JetStream as a producer would.
    Publish(publish::PublishArgs),
    /// Print toolstream's events as JSON lines as they arrive.
    Tail(tail::TailArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Replay(args) => replay::main(args),
        Command::Publish(args) => publish::main(args),
        Command::Tail(args) => tail::main(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolstream: {err:#}");
            ExitCode::FAILURE
        }
    }
}
