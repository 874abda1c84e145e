//! The NATS connection: auth (token, user/password, nkey seed, `.creds`), TLS (CA, client
//! certificate, required), reconnects with capped exponential backoff forever, retry on the
//! initial connect, and connection events logged through `tracing`.

use crate::run::config::Config;
use anyhow::Context as _;
use async_nats::{ConnectOptions, Event};
use std::sync::Arc;
use std::time::Duration;

/// Longest pause between two reconnect attempts.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// The reconnect delay after `attempts` failed attempts: 0 for the first, then 50 ms doubling,
/// capped at [`MAX_RECONNECT_DELAY`].
pub fn reconnect_delay(attempts: usize) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let shift = u32::try_from(attempts.min(16)).unwrap_or(16);
    let ms = 50u64.saturating_mul(1u64 << shift) / 2;
    Duration::from_millis(ms).min(MAX_RECONNECT_DELAY)
}

/// Called with every connection event (after it is logged), e.g. to keep `/healthz` current.
pub type EventHook = Arc<dyn Fn(&Event) + Send + Sync>;

/// Builds the connect options for `config` (reads the nkey seed file).
pub async fn options(
    config: &Config,
    name: &str,
    hook: Option<EventHook>,
) -> anyhow::Result<ConnectOptions> {
    let a = &config.auth;
    let mut opts = if let Some(path) = &a.creds_file {
        ConnectOptions::with_credentials_file(path)
            .await
            .with_context(|| format!("auth.creds_file {}", path.display()))?
    } else {
        ConnectOptions::new()
    };
    if let Some(token) = &a.token {
        opts = opts.token(token.clone());
    }
    if let (Some(user), Some(password)) = (&a.user, &a.password) {
        opts = opts.user_and_password(user.clone(), password.clone());
    }
    if let Some(path) = &a.nkey_seed_file {
        opts = opts.nkey(read_user_seed(path).context("auth.nkey_seed_file")?);
    }
    let t = &config.tls;
    if t.required {
        opts = opts.require_tls(true);
    }
    if let Some(ca) = &t.ca_file {
        if !ca.is_file() {
            anyhow::bail!("tls.ca_file {} does not exist", ca.display());
        }
        opts = opts.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) {
        for (field, p) in [("tls.cert_file", cert), ("tls.key_file", key)] {
            if !p.is_file() {
                anyhow::bail!("{field} {} does not exist", p.display());
            }
        }
        opts = opts.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(opts
        .custom_inbox_prefix(&config.inbox_prefix)
        .name(name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(move |event| {
            log_event(&event);
            if let Some(hook) = &hook {
                hook(&event);
            }
            async {}
        }))
}

/// The user nkey seed (the line starting with `SU`) of a seed file.
pub fn read_user_seed(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("SU"))
        .map(str::to_string)
        .with_context(|| format!("{}: no user seed (a line starting with SU)", path.display()))
}

fn log_event(event: &Event) {
    match event {
        Event::Connected => tracing::info!(target: "toolstream::nats", "connected to NATS"),
        Event::Disconnected => {
            tracing::warn!(target: "toolstream::nats", "disconnected from NATS; reconnecting")
        }
        Event::LameDuckMode => {
            tracing::warn!(target: "toolstream::nats", "server entered lame duck mode")
        }
        Event::Draining => tracing::info!(target: "toolstream::nats", "connection draining"),
        Event::Closed => tracing::info!(target: "toolstream::nats", "connection closed"),
        Event::SlowConsumer(sid) => {
            tracing::warn!(target: "toolstream::nats", sid, "slow consumer")
        }
        Event::ServerError(err) => {
            tracing::error!(target: "toolstream::nats", error = %err, "server error")
        }
        // every failed reconnect attempt lands here during an outage: a warning, not an error
        Event::ClientError(err) => {
            tracing::warn!(target: "toolstream::nats", error = %err, "client error")
        }
    }
}

/// Connects (in the background when the server is not up yet: the client keeps retrying, and
/// requests wait for it).
pub async fn connect(
    config: &Config,
    name: &str,
    hook: Option<EventHook>,
) -> anyhow::Result<async_nats::Client> {
    let opts = options(config, name, hook).await?;
    let urls: Vec<&str> = config
        .nats_url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let addrs: Vec<async_nats::ServerAddr> = urls
        .iter()
        .map(|u| u.parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("nats_url {:?}", config.nats_url))?;
    opts.connect(addrs)
        .await
        .with_context(|| format!("connect to {}", config.nats_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_starts_immediately_grows_and_is_capped() {
        assert_eq!(reconnect_delay(0), Duration::ZERO);
        assert_eq!(reconnect_delay(1), Duration::from_millis(50));
        assert_eq!(reconnect_delay(2), Duration::from_millis(100));
        assert!(reconnect_delay(5) > reconnect_delay(4));
        assert_eq!(reconnect_delay(1000), MAX_RECONNECT_DELAY);
    }

    #[tokio::test]
    async fn a_missing_nkey_seed_file_names_the_setting() {
        let mut c = Config::default();
        c.auth.nkey_seed_file = Some("/nonexistent/seed.nk".into());
        let err = options(&c, "t", None).await.err().unwrap();
        assert!(
            format!("{err:#}").contains("auth.nkey_seed_file"),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn a_missing_ca_file_names_the_setting() {
        let mut c = Config::default();
        c.tls.ca_file = Some("/nonexistent/ca.pem".into());
        let err = options(&c, "t", None).await.err().unwrap();
        assert!(format!("{err:#}").contains("tls.ca_file"), "{err:#}");
    }
}
