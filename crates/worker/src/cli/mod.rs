//! The command line: `toolstream run | replay | publish | tail | record | inspect | query`, and the one place an error
//! becomes an exit code.

pub(crate) mod connection;
pub(crate) mod input_log;
pub(crate) mod inspect;
pub(crate) mod output;
pub mod publish;
pub(crate) mod query;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod tail;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Turns streamed LLM tool-call chunks into complete, consistent tool-call events.
#[derive(Debug, Parser)]
#[command(name = "toolstream", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the worker: consume chunks from NATS JetStream, assemble them in sled, publish events.
    Run(Box<crate::run::RunArgs>),
    /// Replay recorded provider streams through the assembler and print the events.
    Replay(replay::ReplayArgs),
    /// Publish a recorded provider stream (or tool results) to JetStream as a producer would.
    Publish(publish::PublishArgs),
    /// Print toolstream's events as JSON lines as they arrive.
    Tail(tail::TailArgs),
    /// Copy a conversation's chunks and results from the input stream into a file `replay` reads.
    Record(record::RecordArgs),
    /// Ask the worker's query service: a message's stored calls, or a conversation's history.
    Query(query::QueryArgs),
    /// Show what the store holds for a conversation: calls, fragments and the chunks they came
    /// from, results, and where an invalid call's JSON breaks.
    Inspect(inspect::InspectArgs),
}

impl Cli {
    /// Runs the command; an error is one line on stderr and a failing exit code.
    pub fn run(self) -> ExitCode {
        let result = match self.command {
            Command::Run(args) => crate::run::main(*args),
            Command::Replay(args) => replay::main(args),
            Command::Publish(args) => publish::main(args),
            Command::Tail(args) => tail::main(args),
            Command::Record(args) => record::main(args),
            Command::Query(args) => query::main(args),
            Command::Inspect(args) => inspect::main(args),
        };
        match result {
            Ok(code) => code,
            Err(err) => {
                eprintln!("toolstream: {err:#}");
                ExitCode::FAILURE
            }
        }
    }
}
