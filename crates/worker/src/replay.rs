//! `toolstream replay` (being built by the lead).

/// Arguments of `toolstream replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {}

/// Runs the command.
pub fn main(_args: ReplayArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("replay is not built yet")
}
