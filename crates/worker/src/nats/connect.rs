//! The NATS connection: auth (token, user/password, nkey seed, `.creds`), TLS (CA, client
//! certificate, required), reconnects with capped exponential backoff forever, retry on the
//! initial connect, and connection events logged through `tracing`.

use crate::run::config::Config;
use anyhow::Context as _;
use async_nats::{ConnectOptions, Event};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest pause between two reconnect attempts.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// The pause before connection attempt number `attempt` (async-nats counts from 1, also for
/// the very first connect): none before the first, then 50 ms doubling, capped at
/// [`MAX_RECONNECT_DELAY`]. (Counting from 0 made every start and every reconnect wait 50 ms
/// before its first try: half of the worker's start to healthy.)
pub fn reconnect_delay(attempt: usize) -> Duration {
    if attempt <= 1 {
        return Duration::ZERO;
    }
    let shift = u32::try_from((attempt - 2).min(16)).unwrap_or(16);
    Duration::from_millis(50u64.saturating_mul(1u64 << shift)).min(MAX_RECONNECT_DELAY)
}

/// Called with every connection event (after it is logged), e.g. to keep `/healthz` current.
pub type EventHook = Arc<dyn Fn(&Event) + Send + Sync>;

/// The one place connection settings become async-nats options: auth (at most one kind, as
/// `Config::validate_connection` checked), TLS and the inbox prefix, for the worker and every
/// client command alike. Reads the nkey seed file and checks the TLS files exist.
pub async fn base_options(config: &Config) -> anyhow::Result<ConnectOptions> {
    let a = &config.auth;
    let mut opts = if let Some(path) = &a.creds_file {
        ConnectOptions::with_credentials_file(path)
            .await
            .with_context(|| format!("auth.creds_file (--creds-file) {}", path.display()))?
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
        opts = opts.nkey(read_user_seed(path).context("auth.nkey_seed_file (--nkey-seed-file)")?);
    }
    let t = &config.tls;
    if t.required {
        opts = opts.require_tls(true);
    }
    if let Some(ca) = &t.ca_file {
        if !ca.is_file() {
            anyhow::bail!(
                "tls.ca_file (--tls-ca-file) {} does not exist",
                ca.display()
            );
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
    Ok(opts.custom_inbox_prefix(&config.inbox_prefix))
}

/// The worker's connect options for `config`: [`base_options`], retried on the initial
/// connect and reconnected forever with capped backoff, events logged (an unreachable server
/// is said once with its cause, then at growing intervals) and handed to `hook`.
pub async fn options(
    config: &Config,
    name: &str,
    hook: Option<EventHook>,
) -> anyhow::Result<ConnectOptions> {
    let failures = Arc::new(AtomicU64::new(0));
    let url: Arc<str> = Arc::from(config.nats_url.as_str());
    Ok(base_options(config)
        .await?
        .name(name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(move |event| {
            let hook = hook.clone();
            let failures = Arc::clone(&failures);
            let url = Arc::clone(&url);
            async move {
                log_event(&event, &failures, &url).await;
                if let Some(hook) = &hook {
                    hook(&event);
                }
            }
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

/// Logs a connection event. A failed (re)connect attempt says why the server cannot be
/// reached ("connection refused to 127.0.0.1:4222") on the 1st, 2nd, 4th, 8th, … failure in a
/// row, not on every attempt: the client retries every [`MAX_RECONNECT_DELAY`] for as long as
/// the outage lasts.
async fn log_event(event: &Event, failures: &AtomicU64, url: &str) {
    match event {
        Event::Connected => {
            let failed = failures.swap(0, Ordering::Relaxed);
            if failed > 0 {
                tracing::info!(target: "toolstream::nats", url, failed_attempts = failed, "connected to NATS");
            } else {
                tracing::info!(target: "toolstream::nats", url, "connected to NATS");
            }
        }
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
        Event::ClientError(err) => {
            let n = failures.fetch_add(1, Ordering::Relaxed) + 1;
            if !n.is_power_of_two() {
                return;
            }
            // async-nats reports only the kind ("IO error"): find the cause by trying the
            // server's address once more.
            let why = match err {
                async_nats::ClientError::Other(kind) if kind == "IO error" => {
                    unreachable_cause(url).await
                }
                other => other.to_string(),
            };
            tracing::warn!(
                target: "toolstream::nats",
                failed_attempts = n,
                "cannot reach the NATS server: {why}; retrying every {}s at most",
                MAX_RECONNECT_DELAY.as_secs()
            );
        }
    }
}

/// Why the first server of `urls` cannot be reached, in words: "connection refused to
/// 127.0.0.1:4222", "no route to …", a name that does not resolve.
pub async fn unreachable_cause(urls: &str) -> String {
    let Some(first) = urls.split(',').map(str::trim).find(|u| !u.is_empty()) else {
        return "no server URL".to_string();
    };
    let addr: async_nats::ServerAddr = match first.parse() {
        Ok(a) => a,
        Err(e) => return format!("{first}: {e}"),
    };
    let target = format!("{}:{}", addr.host(), addr.port());
    let attempt = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(target.clone()),
    )
    .await;
    match attempt {
        Err(_) => format!("no answer from {target} within 2s"),
        Ok(Ok(_)) => format!("{target} accepts TCP connections but the NATS handshake failed (TLS, auth, or not a NATS server?)"),
        Ok(Err(e)) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => format!("connection refused to {target}"),
            _ => format!("{target}: {e}"),
        },
    }
}

/// The server addresses of a comma-separated `nats_url`.
fn server_addrs(nats_url: &str) -> anyhow::Result<Vec<async_nats::ServerAddr>> {
    nats_url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| u.parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("nats_url {nats_url:?}"))
}

/// Connects a client command: fails at once, naming the server and why it cannot be reached,
/// instead of retrying like the worker.
pub async fn connect_client(config: &Config, name: &str) -> anyhow::Result<async_nats::Client> {
    let opts = base_options(config)
        .await?
        .name(name)
        .connection_timeout(Duration::from_secs(5));
    match opts.connect(server_addrs(&config.nats_url)?).await {
        Ok(client) => Ok(client),
        Err(e) if matches!(e.kind(), async_nats::ConnectErrorKind::Io) => {
            let why = unreachable_cause(&config.nats_url).await;
            anyhow::bail!("cannot connect to NATS at {}: {why}", config.nats_url)
        }
        Err(e) => anyhow::bail!("cannot connect to NATS at {}: {e}", config.nats_url),
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
    opts.connect(server_addrs(&config.nats_url)?)
        .await
        .with_context(|| format!("connect to {}", config.nats_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_starts_immediately_grows_and_is_capped() {
        assert_eq!(reconnect_delay(0), Duration::ZERO);
        // async-nats asks with 1 for the first attempt of a connect or reconnect
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(50));
        assert_eq!(reconnect_delay(3), Duration::from_millis(100));
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
