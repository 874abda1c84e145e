//! Connection flags shared by the client commands (`publish`, `tail`).

use anyhow::Context;
use std::path::PathBuf;

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
    /// Who connects (for a server with users and permissions, deploy/nats-permissions.conf).
    #[command(flatten)]
    pub auth: ClientAuth,
}

/// NATS authentication and reply subjects of a client command. At most one kind of auth.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientAuth {
    /// NATS token authentication.
    #[arg(long, env = "TOOLSTREAM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// NATS user (with --password).
    #[arg(long, env = "TOOLSTREAM_USER")]
    pub user: Option<String>,
    /// NATS password (with --user); prefer the environment variable.
    #[arg(long, env = "TOOLSTREAM_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// File holding an nkey seed.
    #[arg(long, env = "TOOLSTREAM_NKEY_SEED_FILE", value_name = "FILE")]
    pub nkey_seed_file: Option<PathBuf>,
    /// NATS .creds file (JWT + seed).
    #[arg(long, env = "TOOLSTREAM_CREDS_FILE", value_name = "FILE")]
    pub creds_file: Option<PathBuf>,
    /// Prefix of this client's reply subjects (PubAcks, JetStream API answers) when the
    /// server lets each user subscribe only to its own [default: _INBOX].
    #[arg(long, env = "TOOLSTREAM_INBOX_PREFIX", value_name = "PREFIX")]
    pub inbox_prefix: Option<String>,
}

impl ClientAuth {
    /// Connect options with this authentication and inbox prefix.
    async fn options(&self) -> anyhow::Result<async_nats::ConnectOptions> {
        let kinds = [
            self.token.is_some(),
            self.user.is_some() || self.password.is_some(),
            self.nkey_seed_file.is_some(),
            self.creds_file.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() > 1 {
            anyhow::bail!(
                "set only one of --token, --user/--password, --nkey-seed-file, --creds-file"
            );
        }
        if self.user.is_some() != self.password.is_some() {
            anyhow::bail!("--user and --password go together");
        }
        let mut opts = match &self.creds_file {
            Some(path) => async_nats::ConnectOptions::with_credentials_file(path)
                .await
                .with_context(|| format!("--creds-file {}", path.display()))?,
            None => async_nats::ConnectOptions::new(),
        };
        if let Some(token) = &self.token {
            opts = opts.token(token.clone());
        }
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            opts = opts.user_and_password(user.clone(), password.clone());
        }
        if let Some(path) = &self.nkey_seed_file {
            opts = opts.nkey(crate::nats::connect::read_user_seed(path)?);
        }
        if let Some(prefix) = &self.inbox_prefix {
            opts = opts.custom_inbox_prefix(prefix);
        }
        Ok(opts)
    }
}

impl ClientArgs {
    /// Connects, with the URL in the error.
    pub async fn connect(&self) -> anyhow::Result<async_nats::Client> {
        self.auth
            .options()
            .await?
            .connect(&self.nats_url)
            .await
            .with_context(|| format!("connecting to NATS at {}", self.nats_url))
    }
}
