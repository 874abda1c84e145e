//! The `toolstream` binary: parses the command line and hands over to the library (its map:
//! `src/lib.rs`).

use clap::Parser;

fn main() -> std::process::ExitCode {
    toolstream::cli::Cli::parse().run()
}
