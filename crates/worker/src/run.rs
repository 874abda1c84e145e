//! `toolstream run` (being built).

/// Arguments of `toolstream run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Runs the worker.
pub fn main(_args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("run is not built yet")
}
