//! The worker's one typed configuration, and how it is assembled: defaults, then a TOML file
//! (`--config FILE`), then `TOOLSTREAM_*` environment variables, then flags. clap reads a flag
//! or, when the flag is absent, its environment variable, into an `Option`; [`RunArgs::resolve`]
//! lays those over the file explicitly, so "not given" never overrides anything.
//!
//! `deploy/toolstream.toml` documents every setting and is parsed by a test.

use crate::run::duration::HumanDuration;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// How a worker comes to own its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Assignment {
    /// This worker owns `consumer.partition`, fixed (one worker per partition).
    #[default]
    Static,
    /// Workers share `consumer.partitions` through leases in a NATS key-value bucket
    /// (`[ownership]`): they balance the partitions as they join and leave, and take over a
    /// dead worker's partitions by rebuilding them from the input stream.
    Leases,
}

/// The whole worker configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// NATS server URL(s), comma-separated (default `nats://127.0.0.1:4222`).
    pub nats_url: String,
    /// Directory of the sled store (default `./data`). With more than one partition the
    /// store of partition `k` is `<data_dir>/partition-<k>`.
    pub data_dir: PathBuf,
    /// First subject token of every subject toolstream uses (default `toolstream`).
    pub subject_prefix: String,
    /// Prefix of the worker's reply subjects (JetStream API answers, PubAcks and its pull
    /// deliveries, which carry every input) (default `_INBOX`). Give the worker its own, e.g.
    /// `_INBOX_toolstream`, and allow only the worker to subscribe to it
    /// (deploy/nats-permissions.conf): whoever may subscribe to the worker's inbox reads every
    /// conversation's chunks.
    pub inbox_prefix: String,
    /// Log format: `human` or `json` (default `human`). The level comes from `RUST_LOG`
    /// (default `info`).
    pub log_format: LogFormat,
    /// Address of the HTTP listener for `/metrics` and `/healthz` (default `127.0.0.1:9090`).
    pub metrics_listen: SocketAddr,
    /// NATS authentication (at most one kind).
    pub auth: AuthConfig,
    /// TLS towards the NATS server.
    pub tls: TlsConfig,
    /// JetStream streams.
    pub streams: StreamsConfig,
    /// The durable pull consumer and the consume loop.
    pub consumer: ConsumerConfig,
    /// The outbox relay that publishes events.
    pub relay: RelayConfig,
    /// Limits and timeouts of the assembler.
    pub assembler: assembler::Config,
    /// The HTTP API for UIs on the `metrics_listen` listener (`/v1/…`, docs/contracts.md,
    /// "HTTP API for UIs").
    pub ui: UiConfig,
    /// Leases of partitions when `consumer.assignment = "leases"` (`crate::ownership`): the
    /// bucket, the lease TTL, renewals, this worker's id. The bucket's replicas are
    /// `streams.replicas`.
    pub ownership: crate::ownership::OwnershipConfig,
}

/// The HTTP API for UIs (`/v1/conversations/…`), served on `metrics_listen`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiConfig {
    /// Serve `/v1/…` at all (default true).
    pub enabled: bool,
    /// Bearer token every `/v1/…` request must carry (`Authorization: Bearer <token>`, or
    /// `?access_token=` for browsers' `EventSource`, which cannot set headers). Unset: no
    /// authentication, allowed only while `metrics_listen` is a loopback address; on any other
    /// address `/v1/…` answers 403 until a token is set.
    pub token: Option<String>,
    /// Origins allowed to call the API from a browser (CORS), e.g. `https://app.example.com`,
    /// or `*` for any (default none: same-origin only).
    pub cors_origins: Vec<String>,
    /// Most event streams served at once; one more is refused with 503 (default 256).
    pub max_streams: usize,
    /// A comment line is sent on an idle event stream this often, so proxies keep it open
    /// (default `15s`, 1s..=5m).
    pub heartbeat: HumanDuration,
    /// A client that does not take a write for this long is closed (default `30s`, 1s..=10m).
    pub write_timeout: HumanDuration,
    /// How long `GET …/messages/{msg}` waits for the events its snapshot reflects to be on the
    /// events stream before answering 503 (default `5s`, 100ms..=1m).
    pub snapshot_timeout: HumanDuration,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: true,
            token: None,
            cors_origins: Vec::new(),
            max_streams: 256,
            heartbeat: secs(15),
            write_timeout: secs(30),
            snapshot_timeout: secs(5),
        }
    }
}

impl UiConfig {
    /// Checks the `[ui]` settings; names the one at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(token) = &self.token {
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                anyhow::bail!(
                    "ui.token must be non-empty printable ASCII without spaces (it travels in an \
                     Authorization header)"
                );
            }
        }
        for origin in &self.cors_origins {
            if !valid_origin(origin) {
                anyhow::bail!(
                    "ui.cors_origins: {origin:?} is not an origin: expected `*` or \
                     scheme://host[:port] (http or https, no path), e.g. https://app.example.com"
                );
            }
        }
        if !(1..=100_000).contains(&self.max_streams) {
            anyhow::bail!("ui.max_streams must be between 1 and 100000");
        }
        for (field, value, min, max) in [
            ("ui.heartbeat", self.heartbeat.get(), 1_000, 300_000),
            ("ui.write_timeout", self.write_timeout.get(), 1_000, 600_000),
            (
                "ui.snapshot_timeout",
                self.snapshot_timeout.get(),
                100,
                60_000,
            ),
        ] {
            let ms = value.as_millis();
            if ms < min || ms > max {
                anyhow::bail!(
                    "{field} must be between {:?} and {:?}",
                    Duration::from_millis(min as u64),
                    Duration::from_millis(max as u64)
                );
            }
        }
        Ok(())
    }

    /// Whether requests must carry the token: always when one is set.
    pub fn auth_required(&self) -> bool {
        self.token.is_some()
    }
}

/// `*`, or `http(s)://host[:port]` with nothing after.
fn valid_origin(origin: &str) -> bool {
    if origin == "*" {
        return true;
    }
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match rest {
        Some(host) => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        }
        None => false,
    }
}

/// NATS authentication. Set at most one of: `token`; `user` + `password`; `nkey_seed_file`;
/// `creds_file`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Token authentication.
    pub token: Option<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password (with `user`). Prefer the `TOOLSTREAM_PASSWORD` environment variable.
    pub password: Option<String>,
    /// File holding an nkey seed (`SU...`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT + nkey seed) for decentralized auth.
    pub creds_file: Option<PathBuf>,
}

/// TLS towards the NATS server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Require TLS even if the URL is `nats://` (a `tls://` URL requires it anyway).
    pub required: bool,
    /// PEM file of CA certificates that sign the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (with `key_file`) for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// JetStream streams, created when missing and checked when present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsConfig {
    /// Input stream: chunks and results (default `TOOLSTREAM_IN`).
    pub input: String,
    /// Events stream (default `TOOLSTREAM_EVENTS`).
    pub events: String,
    /// Dead-letter stream (default `TOOLSTREAM_DLQ`).
    pub dlq: String,
    /// Duplicate window of the events stream: a re-published event with the same
    /// `Nats-Msg-Id` within it is dropped (default `1h`).
    pub duplicate_window: HumanDuration,
    /// Replicas of each of the three streams when toolstream creates them: 1 on a single
    /// server, 3 (or 5) on a JetStream cluster so a stream survives the loss of a node
    /// (default 1, range 1..=5). An existing stream with another count is an error.
    #[serde(deserialize_with = "deserialize_replicas")]
    pub replicas: usize,
}

/// The largest replica count JetStream allows.
pub const MAX_REPLICAS: usize = 5;

/// `streams.replicas` from TOML: 1..=[`MAX_REPLICAS`], the setting named when out of range.
fn deserialize_replicas<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if (1..=MAX_REPLICAS).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!(
            "streams.replicas must be between 1 and {MAX_REPLICAS}, not {n}"
        )))
    }
}

/// The durable pull consumer and the consume loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Durable consumer name (default `toolstream`); partition `k` of several reads through
    /// `<name>-p<k>-chunks` and `<name>-p<k>-results`.
    pub name: String,
    /// Number of partitions the server maps conversations onto (default 1 = unpartitioned).
    pub partitions: u32,
    /// The partition this worker owns, `0..partitions` (default 0), when `assignment` is
    /// `static`.
    pub partition: u32,
    /// `static` (default): this worker owns `partition`; `leases`: workers share the
    /// partitions through leases (see [`Assignment`]).
    pub assignment: Assignment,
    /// With `assignment = "leases"`: how often each owned partition's store is checkpointed to
    /// the `TOOLSTREAM_CHECKPOINTS` object store bucket, so a new owner reads about this much
    /// input instead of the partition's whole history (default `60s`).
    pub checkpoint_interval: HumanDuration,
    /// Most messages applied per batch, with one sled flush per batch (default 256).
    pub batch_size: usize,
    /// How long one pull request waits on the server for messages (default `5s`).
    pub fetch_expiry: HumanDuration,
    /// With nothing being applied or flushed, how long a batch smaller than `batch_size`
    /// waits for more messages before it is applied (default `2ms`; `0ms`: never; at most
    /// `1s` and a tenth of `ack_wait`). Every batch pays a flush (`fdatasync`) and hand-offs
    /// between threads whatever its size, so when input is sparse this trades latency
    /// (about this much at the median: tokio's timers round up to the next millisecond; the
    /// README's "Batches that wait for company" has the tail) for fewer, larger batches and
    /// less CPU (see the consume loop's docs). Under a backlog a batch fills at once, or the
    /// last one is still being applied or flushed, and nothing waits longer than it takes to
    /// fill a batch.
    pub batch_linger: HumanDuration,
    /// Deliveries of one message before the worker gives up on it with a dead letter (default
    /// 5): a message that keeps failing to be stored (`store_error`), or during which the
    /// worker stopped `max_deliver - 1` times while applying it alone (`poison`; on a leased
    /// partition `max_deliver - 2` alone after one stop in its takeover group, at least 1,
    /// whichever workers stopped: `crate::ownership::attempts`). The server's consumer
    /// redelivers without limit (`max_deliver = -1` there), so no message is ever dropped
    /// without a dead letter, and a crash never uses up another message's deliveries.
    pub max_deliver: i64,
    /// Unacknowledged messages the server lets the consumer hold (default 4096).
    pub max_ack_pending: i64,
    /// Time to ack a delivered message before the server redelivers it (default `60s`).
    pub ack_wait: HumanDuration,
    /// Redelivery delay after a storage error (nak with delay; default `2s`).
    pub nak_delay: HumanDuration,
    /// How often stream timeouts are checked when no input arrives (default `1s`).
    pub tick_interval: HumanDuration,
}

/// The outbox relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelayConfig {
    /// Outbox rows published per round, pipelined (default 512).
    pub batch: usize,
    /// Relay wakes at least this often even without a nudge (default `1s`).
    pub interval: HumanDuration,
    /// Longest time shutdown waits for the outbox to drain (default `10s`).
    pub shutdown_timeout: HumanDuration,
}

fn secs(n: u64) -> HumanDuration {
    HumanDuration(Duration::from_secs(n))
}

impl Default for Config {
    fn default() -> Config {
        Config {
            nats_url: "nats://127.0.0.1:4222".to_string(),
            data_dir: PathBuf::from("./data"),
            subject_prefix: "toolstream".to_string(),
            inbox_prefix: "_INBOX".to_string(),
            log_format: LogFormat::Human,
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            auth: AuthConfig::default(),
            tls: TlsConfig::default(),
            streams: StreamsConfig::default(),
            consumer: ConsumerConfig::default(),
            relay: RelayConfig::default(),
            assembler: assembler::Config::default(),
            ui: UiConfig::default(),
            ownership: crate::ownership::OwnershipConfig::default(),
        }
    }
}

impl Default for StreamsConfig {
    fn default() -> Self {
        StreamsConfig {
            input: "TOOLSTREAM_IN".to_string(),
            events: "TOOLSTREAM_EVENTS".to_string(),
            dlq: "TOOLSTREAM_DLQ".to_string(),
            duplicate_window: secs(3600),
            replicas: 1,
        }
    }
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            name: "toolstream".to_string(),
            partitions: 1,
            partition: 0,
            assignment: Assignment::Static,
            checkpoint_interval: secs(60),
            batch_size: 256,
            fetch_expiry: secs(5),
            batch_linger: HumanDuration(Duration::from_millis(2)),
            max_deliver: 5,
            max_ack_pending: 4096,
            ack_wait: secs(60),
            nak_delay: secs(2),
            tick_interval: secs(1),
        }
    }
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch: 512,
            interval: secs(1),
            shutdown_timeout: secs(10),
        }
    }
}

impl Config {
    /// Parses a TOML config text (unknown keys are errors).
    pub fn from_toml(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text)?;
        Ok(config)
    }

    /// Reads and parses a TOML config file.
    pub fn from_file(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read config file {}", path.display()))?;
        Config::from_toml(&text).with_context(|| format!("config file {}", path.display()))
    }

    /// A copy safe to print: token and password replaced by `<redacted>`.
    pub fn redacted(&self) -> Config {
        let mut c = self.clone();
        for secret in [&mut c.auth.token, &mut c.auth.password, &mut c.ui.token] {
            if secret.is_some() {
                *secret = Some("<redacted>".to_string());
            }
        }
        c
    }

    /// The sled directory of this worker's partition.
    pub fn store_dir(&self) -> PathBuf {
        if self.consumer.partitions > 1 {
            self.data_dir
                .join(format!("partition-{}", self.consumer.partition))
        } else {
            self.data_dir.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = Config::default();
        assert_eq!(c.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.subject_prefix, "toolstream");
        assert_eq!(c.consumer.batch_size, 256);
        assert_eq!(c.consumer.batch_linger.get(), Duration::from_millis(2));
        assert_eq!(c.consumer.max_deliver, 5);
        assert_eq!(c.consumer.ack_wait.get(), Duration::from_secs(60));
        assert_eq!(c.streams.duplicate_window.get(), Duration::from_secs(3600));
        assert_eq!(c.metrics_listen.to_string(), "127.0.0.1:9090");
        c.validate().unwrap();
    }

    #[test]
    fn ui_settings_have_defaults_and_bad_values_are_refused_by_name() {
        let ui = UiConfig::default();
        assert!(ui.enabled);
        assert_eq!(ui.max_streams, 256);
        assert_eq!(ui.heartbeat.get(), Duration::from_secs(15));
        ui.validate().unwrap();
        let c = Config::from_toml(
            "[ui]\ntoken = \"s3cret\"\ncors_origins = [\"https://app.example.com\", \"http://localhost:5173\", \"*\"]\n",
        )
        .unwrap();
        c.ui.validate().unwrap();
        assert_eq!(c.redacted().ui.token.as_deref(), Some("<redacted>"));
        for (toml, field) in [
            ("[ui]\ntoken = \"\"\n", "ui.token"),
            ("[ui]\ntoken = \"a b\"\n", "ui.token"),
            (
                "[ui]\ncors_origins = [\"app.example.com\"]\n",
                "ui.cors_origins",
            ),
            (
                "[ui]\ncors_origins = [\"https://a.com/path\"]\n",
                "ui.cors_origins",
            ),
            ("[ui]\nmax_streams = 0\n", "ui.max_streams"),
            ("[ui]\nheartbeat = \"10ms\"\n", "ui.heartbeat"),
            ("[ui]\nwrite_timeout = \"1h\"\n", "ui.write_timeout"),
            ("[ui]\nsnapshot_timeout = \"0s\"\n", "ui.snapshot_timeout"),
        ] {
            let err = Config::from_toml(toml).unwrap().ui.validate().unwrap_err();
            assert!(err.to_string().contains(field), "{toml}: {err}");
        }
    }

    #[test]
    fn a_misspelt_key_in_the_file_is_an_error_not_ignored() {
        let err = Config::from_toml("[consumer]\nbatch_sise = 3\n").unwrap_err();
        assert!(format!("{err:#}").contains("batch_sise"), "{err:#}");
        let err = Config::from_toml("[assembler]\nidle_timeout = 3\n").unwrap_err();
        assert!(format!("{err:#}").contains("idle_timeout"), "{err:#}");
    }
}
