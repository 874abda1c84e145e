//! The worker's one typed configuration, and how it is assembled: defaults, then a TOML file
//! (`--config FILE`), then `TOOLSTREAM_*` environment variables, then flags. clap reads a flag
//! or, when the flag is absent, its environment variable, into an `Option`; [`RunArgs::resolve`]
//! lays those over the file explicitly, so "not given" never overrides anything.
//!
//! `deploy/toolstream.toml` documents every setting and is parsed by a test.

use crate::duration::HumanDuration;
use anyhow::{bail, Context as _};
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

    /// Checks settings that cannot work together; names the setting at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        let c = &self.consumer;
        if c.partitions == 0 {
            bail!("consumer.partitions must be at least 1");
        }
        if c.partition >= c.partitions {
            bail!(
                "consumer.partition {} is out of range: partitions are 0..{}",
                c.partition,
                c.partitions
            );
        }
        if c.batch_size == 0 {
            bail!("consumer.batch_size must be at least 1");
        }
        // The relay publishes each event with Nats-Msg-Id = event_id and deletes its row after
        // the PubAck; a PubAck lost to a timeout, a reconnect or a crash means the same event is
        // published again, and only the events stream's duplicate window drops that copy.
        let window = self.streams.duplicate_window.get();
        let retry = self.relay.interval.get() + Duration::from_secs(60);
        if window < retry {
            bail!(
                "streams.duplicate_window ({window:?}) must be at least relay.interval + 60s \
                 ({retry:?}): an event whose PubAck was lost (timeout, reconnect, crash) is \
                 published again, and only the duplicate window keeps subscribers from seeing \
                 it twice"
            );
        }
        if c.max_deliver < 2 {
            bail!("consumer.max_deliver must be at least 2: a message is given up on after max_deliver - 1 stops of the worker while applying it alone, and with fewer any crash would dead-letter the messages the worker held (a bounded number, so a bad message never loops)");
        }
        if c.max_ack_pending < 1 {
            bail!("consumer.max_ack_pending must be at least 1");
        }
        if (c.max_ack_pending as u64) < c.batch_size as u64 {
            bail!(
                "consumer.max_ack_pending ({}) must be at least consumer.batch_size ({})",
                c.max_ack_pending,
                c.batch_size
            );
        }
        if c.ack_wait.get() < Duration::from_secs(1) {
            bail!("consumer.ack_wait must be at least 1s");
        }
        if c.fetch_expiry.get() < Duration::from_millis(100) {
            bail!("consumer.fetch_expiry must be at least 100ms");
        }
        if self.relay.batch == 0 {
            bail!("relay.batch must be at least 1");
        }
        // Intervals and timeouts feed tokio timers, which panic on a zero period or on an
        // instant past the end of time: keep them in a sane range.
        let day = Duration::from_secs(86_400);
        for (field, value) in [
            ("consumer.tick_interval", c.tick_interval.get()),
            ("relay.interval", self.relay.interval.get()),
        ] {
            if value < Duration::from_millis(1) || value > day {
                bail!("{field} must be between 1ms and 24h");
            }
        }
        for (field, value) in [
            ("consumer.ack_wait", c.ack_wait.get()),
            ("consumer.fetch_expiry", c.fetch_expiry.get()),
            ("consumer.nak_delay", c.nak_delay.get()),
            ("relay.shutdown_timeout", self.relay.shutdown_timeout.get()),
        ] {
            if value > day {
                bail!("{field} must be at most 24h");
            }
        }
        validate_prefix(&self.subject_prefix)?;
        if !is_subject(&self.inbox_prefix) {
            bail!(
                "inbox_prefix {:?} must be one or more non-empty subject tokens without wildcards or spaces",
                self.inbox_prefix
            );
        }
        for (field, name) in [
            ("streams.input", &self.streams.input),
            ("streams.events", &self.streams.events),
            ("streams.dlq", &self.streams.dlq),
            ("consumer.name", &self.consumer.name),
        ] {
            if name.is_empty()
                || name
                    .chars()
                    .any(|ch| matches!(ch, '.' | '*' | '>' | ' ' | '/' | '\\') || ch.is_control())
            {
                bail!("{field} {name:?} is not a valid JetStream name (no '.', '*', '>', '/', spaces)");
            }
        }
        let a = &self.auth;
        let kinds = [
            a.token.is_some(),
            a.user.is_some() || a.password.is_some(),
            a.nkey_seed_file.is_some(),
            a.creds_file.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() > 1 {
            bail!("auth: set only one of token, user/password, nkey_seed_file, creds_file");
        }
        if a.user.is_some() != a.password.is_some() {
            bail!("auth: user and password go together");
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            bail!("tls: cert_file and key_file go together");
        }
        Ok(())
    }
}

/// One or more non-empty subject tokens without wildcards, spaces or control characters.
fn is_subject(prefix: &str) -> bool {
    !prefix.is_empty()
        && !prefix.split('.').any(|t| {
            t.is_empty() || t.contains(['*', '>', ' ', '\t']) || t.chars().any(char::is_control)
        })
}

fn validate_prefix(prefix: &str) -> anyhow::Result<()> {
    if !is_subject(prefix) {
        bail!("subject_prefix {prefix:?} must be one or more non-empty subject tokens without wildcards or spaces");
    }
    Ok(())
}

/// Arguments of `toolstream run`. Every setting is optional here: given ones override the
/// config file; each reads its `TOOLSTREAM_*` environment variable when the flag is absent.
#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    /// TOML config file (see deploy/toolstream.toml for every setting).
    #[arg(long, env = "TOOLSTREAM_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,

    /// NATS server URL(s), comma-separated [default: nats://127.0.0.1:4222].
    #[arg(long, env = "TOOLSTREAM_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// Directory of the sled store [default: ./data].
    #[arg(long, env = "TOOLSTREAM_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// First token of every subject [default: toolstream].
    #[arg(long, env = "TOOLSTREAM_SUBJECT_PREFIX", value_name = "PREFIX")]
    pub subject_prefix: Option<String>,
    /// Prefix of the worker's reply subjects; give it its own (e.g. _INBOX_toolstream) that
    /// only it may subscribe to [default: _INBOX].
    #[arg(long, env = "TOOLSTREAM_INBOX_PREFIX", value_name = "PREFIX")]
    pub inbox_prefix: Option<String>,
    /// Log format [default: human]; the level comes from RUST_LOG.
    #[arg(long, env = "TOOLSTREAM_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Listen address of /metrics and /healthz [default: 127.0.0.1:9090].
    #[arg(long, env = "TOOLSTREAM_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

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

    /// Input stream name [default: TOOLSTREAM_IN].
    #[arg(long, env = "TOOLSTREAM_INPUT_STREAM", value_name = "NAME")]
    pub input_stream: Option<String>,
    /// Events stream name [default: TOOLSTREAM_EVENTS].
    #[arg(long, env = "TOOLSTREAM_EVENTS_STREAM", value_name = "NAME")]
    pub events_stream: Option<String>,
    /// Dead-letter stream name [default: TOOLSTREAM_DLQ].
    #[arg(long, env = "TOOLSTREAM_DLQ_STREAM", value_name = "NAME")]
    pub dlq_stream: Option<String>,
    /// Duplicate window of the events stream [default: 1h].
    #[arg(long, env = "TOOLSTREAM_DUPLICATE_WINDOW", value_name = "DURATION")]
    pub duplicate_window: Option<HumanDuration>,
    /// Replicas of each stream toolstream creates, 1..=5; 3 on a JetStream cluster [default: 1].
    #[arg(long, env = "TOOLSTREAM_REPLICAS", value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..=MAX_REPLICAS as i64))]
    pub replicas: Option<u8>,

    /// Durable consumer name [default: toolstream]; partition k uses <name>-p<k>-chunks and
    /// <name>-p<k>-results.
    #[arg(long, env = "TOOLSTREAM_CONSUMER", value_name = "NAME")]
    pub consumer: Option<String>,
    /// Number of partitions [default: 1].
    #[arg(long, env = "TOOLSTREAM_PARTITIONS", value_name = "N")]
    pub partitions: Option<u32>,
    /// The partition this worker owns [default: 0].
    #[arg(long, env = "TOOLSTREAM_PARTITION", value_name = "K")]
    pub partition: Option<u32>,
    /// Messages per batch, one sled flush per batch [default: 256].
    #[arg(long, env = "TOOLSTREAM_BATCH_SIZE", value_name = "N")]
    pub batch_size: Option<usize>,
    /// How long one pull request waits on the server [default: 5s].
    #[arg(long, env = "TOOLSTREAM_FETCH_EXPIRY", value_name = "DURATION")]
    pub fetch_expiry: Option<HumanDuration>,
    /// Deliveries of one message before the worker dead-letters it (store_error, poison) [default: 5].
    #[arg(long, env = "TOOLSTREAM_MAX_DELIVER", value_name = "N")]
    pub max_deliver: Option<i64>,
    /// Unacked messages the consumer may hold [default: 4096].
    #[arg(long, env = "TOOLSTREAM_MAX_ACK_PENDING", value_name = "N")]
    pub max_ack_pending: Option<i64>,
    /// Ack deadline before redelivery [default: 60s].
    #[arg(long, env = "TOOLSTREAM_ACK_WAIT", value_name = "DURATION")]
    pub ack_wait: Option<HumanDuration>,
    /// Redelivery delay after a storage error [default: 2s].
    #[arg(long, env = "TOOLSTREAM_NAK_DELAY", value_name = "DURATION")]
    pub nak_delay: Option<HumanDuration>,
    /// How often stream timeouts are checked [default: 1s].
    #[arg(long, env = "TOOLSTREAM_TICK_INTERVAL", value_name = "DURATION")]
    pub tick_interval: Option<HumanDuration>,

    /// Outbox rows published per relay round [default: 512].
    #[arg(long, env = "TOOLSTREAM_RELAY_BATCH", value_name = "N")]
    pub relay_batch: Option<usize>,
    /// Relay wakes at least this often [default: 1s].
    #[arg(long, env = "TOOLSTREAM_RELAY_INTERVAL", value_name = "DURATION")]
    pub relay_interval: Option<HumanDuration>,
    /// Longest wait for the outbox to drain on shutdown [default: 10s].
    #[arg(long, env = "TOOLSTREAM_SHUTDOWN_TIMEOUT", value_name = "DURATION")]
    pub shutdown_timeout: Option<HumanDuration>,

    /// Largest argument text of one call in bytes [default: 8388608].
    #[arg(long, env = "TOOLSTREAM_MAX_ARGUMENT_BYTES", value_name = "BYTES")]
    pub max_argument_bytes: Option<usize>,
    /// Most calls per message [default: 256].
    #[arg(long, env = "TOOLSTREAM_MAX_CALLS_PER_MESSAGE", value_name = "N")]
    pub max_calls_per_message: Option<usize>,
    /// Most chunk streams open at once [default: 100000].
    #[arg(long, env = "TOOLSTREAM_MAX_OPEN_STREAMS", value_name = "N")]
    pub max_open_streams: Option<usize>,
    /// A stream idle this long is ended, open calls abandoned [default: 300000].
    #[arg(long, env = "TOOLSTREAM_IDLE_TIMEOUT_MS", value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// An unfilled sequence gap ends the stream after this long [default: 30000].
    #[arg(long, env = "TOOLSTREAM_GAP_TIMEOUT_MS", value_name = "MS")]
    pub gap_timeout_ms: Option<u64>,
    /// A result without its call becomes orphaned after this long [default: 600000].
    #[arg(long, env = "TOOLSTREAM_ORPHAN_GRACE_MS", value_name = "MS")]
    pub orphan_grace_ms: Option<u64>,
    /// Completed messages are deleted this long after completion; 0 keeps them forever
    /// [default: 604800000 (7 days)].
    #[arg(long, env = "TOOLSTREAM_RETENTION_MS", value_name = "MS")]
    pub retention_ms: Option<u64>,
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

impl RunArgs {
    /// The effective configuration: defaults < file < environment < flags, validated.
    pub fn resolve(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        set(&mut c.nats_url, self.nats_url);
        set(&mut c.data_dir, self.data_dir);
        set(&mut c.subject_prefix, self.subject_prefix);
        set(&mut c.inbox_prefix, self.inbox_prefix);
        set(&mut c.log_format, self.log_format);
        set(&mut c.metrics_listen, self.metrics_listen);

        set_opt(&mut c.auth.token, self.token);
        set_opt(&mut c.auth.user, self.user);
        set_opt(&mut c.auth.password, self.password);
        set_opt(&mut c.auth.nkey_seed_file, self.nkey_seed_file);
        set_opt(&mut c.auth.creds_file, self.creds_file);
        set(&mut c.tls.required, self.tls_required);
        set_opt(&mut c.tls.ca_file, self.tls_ca_file);
        set_opt(&mut c.tls.cert_file, self.tls_cert_file);
        set_opt(&mut c.tls.key_file, self.tls_key_file);

        set(&mut c.streams.input, self.input_stream);
        set(&mut c.streams.events, self.events_stream);
        set(&mut c.streams.dlq, self.dlq_stream);
        set(&mut c.streams.duplicate_window, self.duplicate_window);
        set(&mut c.streams.replicas, self.replicas.map(usize::from));

        set(&mut c.consumer.name, self.consumer);
        set(&mut c.consumer.partitions, self.partitions);
        set(&mut c.consumer.partition, self.partition);
        set(&mut c.consumer.batch_size, self.batch_size);
        set(&mut c.consumer.fetch_expiry, self.fetch_expiry);
        set(&mut c.consumer.max_deliver, self.max_deliver);
        set(&mut c.consumer.max_ack_pending, self.max_ack_pending);
        set(&mut c.consumer.ack_wait, self.ack_wait);
        set(&mut c.consumer.nak_delay, self.nak_delay);
        set(&mut c.consumer.tick_interval, self.tick_interval);

        set(&mut c.relay.batch, self.relay_batch);
        set(&mut c.relay.interval, self.relay_interval);
        set(&mut c.relay.shutdown_timeout, self.shutdown_timeout);

        set(&mut c.assembler.max_argument_bytes, self.max_argument_bytes);
        set(
            &mut c.assembler.max_calls_per_message,
            self.max_calls_per_message,
        );
        set(&mut c.assembler.max_open_streams, self.max_open_streams);
        set(&mut c.assembler.idle_timeout_ms, self.idle_timeout_ms);
        set(&mut c.assembler.gap_timeout_ms, self.gap_timeout_ms);
        set(&mut c.assembler.orphan_grace_ms, self.orphan_grace_ms);
        set(&mut c.assembler.retention_ms, self.retention_ms);

        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }

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

    #[test]
    fn flags_override_the_file_and_absent_flags_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "subject_prefix = \"filepre\"\n[consumer]\nbatch_size = 7\nack_wait = \"30s\"\n",
        )
        .unwrap();
        let cli = Cli::parse_from(["x", "--config", path.to_str().unwrap(), "--batch-size", "9"]);
        let c = cli.args.resolve().unwrap();
        assert_eq!(c.consumer.batch_size, 9, "flag wins over file");
        assert_eq!(c.subject_prefix, "filepre", "file wins over default");
        assert_eq!(c.consumer.ack_wait.get(), Duration::from_secs(30));
        assert_eq!(c.consumer.max_deliver, 5, "default stays");
    }

    /// tokio's `interval` panics on a zero period, and `Instant + huge` overflows: such
    /// values used to pass validation and crash the worker at start.
    #[test]
    fn timer_settings_that_would_panic_are_refused_with_their_name() {
        for (flags, field) in [
            (["--tick-interval", "0s"], "consumer.tick_interval"),
            (["--relay-interval", "0s"], "relay.interval"),
            (["--shutdown-timeout", "400000h"], "relay.shutdown_timeout"),
        ] {
            let cli = Cli::parse_from(["x", flags[0], flags[1]]);
            let err = cli.args.resolve().unwrap_err();
            assert!(err.to_string().contains(field), "{flags:?}: {err}");
        }
    }

    /// Settings that cannot work together are refused at start, saying why: a duplicate
    /// window the relay's re-publication outlives would show events twice, and one delivery
    /// would let any crash dead-letter every input the worker held. (The timers themselves
    /// cannot conflict any more: they run on the settled watermark, see watermark.rs.)
    #[test]
    fn settings_that_cannot_work_together_are_refused_saying_why() {
        for (flags, field, why) in [
            (
                ["--duplicate-window", "10s"],
                "streams.duplicate_window",
                "published again",
            ),
            (["--max-deliver", "1"], "consumer.max_deliver", "crash"),
        ] {
            let cli = Cli::parse_from(["x", flags[0], flags[1]]);
            let err = cli.args.resolve().unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(why), "{flags:?}: {err}");
        }
        for ok in [
            ["--gap-timeout-ms", "0"],
            ["--idle-timeout-ms", "1"],
            ["--ack-wait", "24h"],
        ] {
            let cli = Cli::parse_from(["x", ok[0], ok[1]]);
            assert!(
                cli.args.resolve().is_ok(),
                "{ok:?} works with every other timer"
            );
        }
    }

    #[test]
    fn replicas_come_from_file_and_flag_and_stay_in_1_to_5() {
        assert_eq!(Config::default().streams.replicas, 1);
        let c = Config::from_toml("[streams]\nreplicas = 3\n").unwrap();
        assert_eq!(c.streams.replicas, 3);
        for bad in [0, 6] {
            let err = Config::from_toml(&format!("[streams]\nreplicas = {bad}\n")).unwrap_err();
            assert!(format!("{err:#}").contains("streams.replicas"), "{err:#}");
        }
        let c = Cli::parse_from(["x", "--replicas", "3"])
            .args
            .resolve()
            .unwrap();
        assert_eq!(c.streams.replicas, 3);
        for bad in ["0", "6", "three"] {
            assert!(
                Cli::try_parse_from(["x", "--replicas", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn partition_out_of_range_names_the_setting() {
        let cli = Cli::parse_from(["x", "--partitions", "2", "--partition", "2"]);
        let err = cli.args.resolve().unwrap_err();
        assert!(err.to_string().contains("consumer.partition"), "{err}");
    }

    #[test]
    fn two_auth_kinds_at_once_are_rejected() {
        let cli = Cli::parse_from(["x", "--token", "t", "--creds-file", "/x.creds"]);
        assert!(cli.args.resolve().is_err());
        let cli = Cli::parse_from(["x", "--user", "u"]);
        assert!(cli.args.resolve().is_err(), "user without password");
    }

    #[test]
    fn wildcards_in_the_prefix_are_rejected() {
        for bad in ["a.*", ">", "a..b", ""] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
        validate_prefix("acme.toolstream").unwrap();
    }
}
