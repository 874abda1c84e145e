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
    /// The partition this worker owns, `0..partitions` (default 0).
    pub partition: u32,
    /// Most messages applied per batch, with one sled flush per batch (default 256).
    pub batch_size: usize,
    /// How long one pull request waits on the server for messages (default `5s`).
    pub fetch_expiry: HumanDuration,
    /// Deliveries of one message before the worker gives up on it with a dead letter (default
    /// 5): a message that keeps failing to be stored (`store_error`), or during which the
    /// worker stopped `max_deliver - 1` times while applying it alone (`poison`). The
    /// server's consumer redelivers without limit (`max_deliver = -1` there), so no message
    /// is ever dropped without a dead letter, and a crash never uses up another message's
    /// deliveries.
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
            batch_size: 256,
            fetch_expiry: secs(5),
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
        for secret in [&mut c.auth.token, &mut c.auth.password] {
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
        assert_eq!(c.consumer.max_deliver, 5);
        assert_eq!(c.consumer.ack_wait.get(), Duration::from_secs(60));
        assert_eq!(c.streams.duplicate_window.get(), Duration::from_secs(3600));
        assert_eq!(c.metrics_listen.to_string(), "127.0.0.1:9090");
        c.validate().unwrap();
    }

    #[test]
    fn a_misspelt_key_in_the_file_is_an_error_not_ignored() {
        let err = Config::from_toml("[consumer]\nbatch_sise = 3\n").unwrap_err();
        assert!(format!("{err:#}").contains("batch_sise"), "{err:#}");
        let err = Config::from_toml("[assembler]\nidle_timeout = 3\n").unwrap_err();
        assert!(format!("{err:#}").contains("idle_timeout"), "{err:#}");
    }
}
