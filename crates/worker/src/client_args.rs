//! Connection flags shared by the client commands (`publish`, `tail`).

use anyhow::Context;

/// Where the NATS server is and which subjects the worker uses.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// NATS server URL.
    #[arg(
        long,
        env = "TOOLSTREAM_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
    /// Subject prefix (the worker's `subject_prefix`).
    #[arg(long, env = "TOOLSTREAM_SUBJECT_PREFIX", default_value = "toolstream")]
    pub subject_prefix: String,
}

impl ClientArgs {
    /// Connects, with the URL in the error.
    pub async fn connect(&self) -> anyhow::Result<async_nats::Client> {
        async_nats::connect(&self.nats_url)
            .await
            .with_context(|| format!("connecting to NATS at {}", self.nats_url))
    }
}
