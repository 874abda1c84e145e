//! The connection and auth flags, written once: `toolstream run` and every client command
//! (`publish`, `tail`, `record`, `replay --from-nats`, `inspect`, `query`) flatten
//! [`ConnectionArgs`]. Each flag reads its `TOOLSTREAM_*` environment variable when absent.
//!
//! One path from flags to a connection: [`ConnectionArgs::lay_over`] puts the given flags over
//! a [`Config`] (the worker's file, or the defaults for a client), `Config::validate_connection`
//! (run/validate.rs) refuses what cannot work, and `crate::nats::connect::options` turns the
//! result into async-nats `ConnectOptions`.

use crate::run::config::Config;
use std::path::PathBuf;

/// Where the NATS server is, who connects, over what.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnectionArgs {
    /// TOML config file (see deploy/toolstream.toml for every setting); a client command
    /// takes its connection settings (URL, prefixes, auth, TLS) from the worker's file.
    #[arg(long, env = "TOOLSTREAM_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated [default: nats://127.0.0.1:4222].
    #[arg(long, env = "TOOLSTREAM_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// First token of every subject [default: toolstream].
    #[arg(long, env = "TOOLSTREAM_SUBJECT_PREFIX", value_name = "PREFIX")]
    pub subject_prefix: Option<String>,
    /// Prefix of reply subjects (PubAcks, JetStream API answers, pull deliveries); give the
    /// worker its own (e.g. _INBOX_toolstream) that only it may subscribe to [default: _INBOX].
    #[arg(long, env = "TOOLSTREAM_INBOX_PREFIX", value_name = "PREFIX")]
    pub inbox_prefix: Option<String>,

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
    /// Require TLS towards the server.
    #[arg(long, env = "TOOLSTREAM_TLS_REQUIRED", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub tls_required: Option<bool>,
    /// PEM file of CA certificates for the server's certificate.
    #[arg(long, env = "TOOLSTREAM_TLS_CA_FILE", value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key-file).
    #[arg(long, env = "TOOLSTREAM_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long, env = "TOOLSTREAM_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

fn set_opt<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}

impl ConnectionArgs {
    /// Puts the given flags over `c` (absent ones change nothing; `config` is the caller's to
    /// read first).
    pub fn lay_over(self, c: &mut Config) {
        set(&mut c.nats_url, self.nats_url);
        set(&mut c.subject_prefix, self.subject_prefix);
        set(&mut c.inbox_prefix, self.inbox_prefix);
        set_opt(&mut c.auth.token, self.token);
        set_opt(&mut c.auth.user, self.user);
        set_opt(&mut c.auth.password, self.password);
        set_opt(&mut c.auth.nkey_seed_file, self.nkey_seed_file);
        set_opt(&mut c.auth.creds_file, self.creds_file);
        set(&mut c.tls.required, self.tls_required);
        set_opt(&mut c.tls.ca_file, self.tls_ca_file);
        set_opt(&mut c.tls.cert_file, self.tls_cert_file);
        set_opt(&mut c.tls.key_file, self.tls_key_file);
    }

    /// A client command's settings: the defaults, the `--config` file, then these flags, checked
    /// by the same validation as the worker's.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        self.clone().lay_over(&mut c);
        c.validate_connection()?;
        Ok(c)
    }

    /// Resolves and connects as a client: fails at once (naming the server and the cause)
    /// when the server cannot be reached, instead of retrying like the worker.
    pub async fn connect(&self, name: &str) -> anyhow::Result<(Config, async_nats::Client)> {
        let config = self.resolve()?;
        let client = crate::nats::connect::connect_client(&config, name).await?;
        Ok((config, client))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        conn: ConnectionArgs,
    }

    #[test]
    fn client_flags_are_checked_like_the_workers() {
        let cli = Cli::parse_from(["x", "--token", "t", "--user", "u", "--password", "p"]);
        let err = cli.conn.resolve().unwrap_err().to_string();
        assert!(err.contains("only one"), "{err}");
        let cli = Cli::parse_from(["x", "--tls-cert-file", "/c.pem"]);
        assert!(cli.conn.resolve().is_err(), "a certificate without its key");
        let cli = Cli::parse_from(["x", "--subject-prefix", "a.*"]);
        assert!(cli.conn.resolve().is_err(), "a wildcard prefix");
        let cli = Cli::parse_from(["x", "--nats-url", "nats://h:1", "--subject-prefix", "acme"]);
        let c = cli.conn.resolve().unwrap();
        assert_eq!(
            (c.nats_url.as_str(), c.subject_prefix.as_str()),
            ("nats://h:1", "acme")
        );
    }
}
