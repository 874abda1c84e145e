//! `toolstream run`'s flags (each reading its `TOOLSTREAM_*` environment variable when absent)
//! and how they are laid over the config file: [`RunArgs::resolve`].

use super::config::{Config, LogFormat, MAX_REPLICAS};
use super::duration::HumanDuration;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Arguments of `toolstream run`. Every setting is optional here: given ones override the
/// config file; each reads its `TOOLSTREAM_*` environment variable when the flag is absent.
#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Server, subject prefix, auth and TLS: the flags every client command takes too.
    #[command(flatten)]
    pub connection: crate::cli::connection::ConnectionArgs,
    /// Directory of the sled store [default: ./data].
    #[arg(long, env = "TOOLSTREAM_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log format [default: human]; the level comes from RUST_LOG.
    #[arg(long, env = "TOOLSTREAM_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Listen address of /metrics and /healthz [default: 127.0.0.1:9090].
    #[arg(long, env = "TOOLSTREAM_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

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
    /// How partitions are owned: `static` (this worker owns --partition) or `leases` (workers
    /// share --partitions through leases in NATS, balance them, take over a dead one's)
    /// [default: static].
    #[arg(long, env = "TOOLSTREAM_ASSIGNMENT", value_name = "MODE")]
    pub assignment: Option<crate::run::config::Assignment>,
    /// With --assignment leases: how long a partition's lease lives without renewal, the
    /// longest a dead worker's partitions wait for a new owner [default: 15s].
    #[arg(long, env = "TOOLSTREAM_LEASE_TTL", value_name = "DURATION")]
    pub lease_ttl: Option<HumanDuration>,
    /// With --assignment leases: this worker's id, unique among live workers
    /// [default: $HOSTNAME, process id and a random suffix].
    #[arg(long, env = "TOOLSTREAM_WORKER_ID", value_name = "ID")]
    pub worker_id: Option<String>,
    /// With --assignment leases: how often each owned partition is checkpointed to NATS, about
    /// the most input a takeover reads again [default: 60s].
    #[arg(long, env = "TOOLSTREAM_CHECKPOINT_INTERVAL", value_name = "DURATION")]
    pub checkpoint_interval: Option<HumanDuration>,
    /// Messages per batch, one sled flush per batch [default: 256].
    #[arg(long, env = "TOOLSTREAM_BATCH_SIZE", value_name = "N")]
    pub batch_size: Option<usize>,
    /// How long one pull request waits on the server [default: 5s].
    #[arg(long, env = "TOOLSTREAM_FETCH_EXPIRY", value_name = "DURATION")]
    pub fetch_expiry: Option<HumanDuration>,
    /// With nothing applied or flushed, how long a short batch waits for more messages;
    /// 0ms: never, at most 1s and a tenth of --ack-wait [default: 2ms].
    #[arg(long, env = "TOOLSTREAM_BATCH_LINGER", value_name = "DURATION")]
    pub batch_linger: Option<HumanDuration>,
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
    /// Most completed messages kept; past it the oldest answered ones are deleted early (0: no
    /// count bound) [default: 50000].
    #[arg(long, env = "TOOLSTREAM_RETENTION_MAX_MESSAGES", value_name = "N")]
    pub retention_max_messages: Option<usize>,
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

impl RunArgs {
    /// The effective configuration: defaults < file < environment < flags, validated.
    pub fn resolve(self) -> anyhow::Result<Config> {
        let mut c = match &self.connection.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        self.connection.lay_over(&mut c);
        set(&mut c.data_dir, self.data_dir);
        set(&mut c.log_format, self.log_format);
        set(&mut c.metrics_listen, self.metrics_listen);

        set(&mut c.streams.input, self.input_stream);
        set(&mut c.streams.events, self.events_stream);
        set(&mut c.streams.dlq, self.dlq_stream);
        set(&mut c.streams.duplicate_window, self.duplicate_window);
        set(&mut c.streams.replicas, self.replicas.map(usize::from));

        set(&mut c.consumer.name, self.consumer);
        set(&mut c.consumer.partitions, self.partitions);
        set(&mut c.consumer.partition, self.partition);
        set(&mut c.consumer.assignment, self.assignment);
        set(
            &mut c.consumer.checkpoint_interval,
            self.checkpoint_interval,
        );
        set(&mut c.ownership.lease_ttl, self.lease_ttl.map(|d| d.get()));
        if self.worker_id.is_some() {
            c.ownership.worker_id = self.worker_id;
        }
        set(&mut c.consumer.batch_size, self.batch_size);
        set(&mut c.consumer.fetch_expiry, self.fetch_expiry);
        set(&mut c.consumer.batch_linger, self.batch_linger);
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
        set(
            &mut c.assembler.retention_max_messages,
            self.retention_max_messages,
        );

        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
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

    /// A linger is 0 (never) to 1s, and at most a tenth of the ack wait: longer, every input
    /// of a short batch would wait that long before it is applied, unacked.
    #[test]
    fn a_batch_linger_of_zero_to_one_second_is_taken_and_a_longer_one_refused() {
        for (text, ms) in [("0ms", 0), ("5ms", 5), ("1s", 1000)] {
            let cli = Cli::parse_from(["x", "--batch-linger", text]);
            let c = cli.args.resolve().unwrap();
            assert_eq!(c.consumer.batch_linger.get(), Duration::from_millis(ms));
        }
        for flags in [
            vec!["--batch-linger", "1001ms"],
            vec!["--batch-linger", "200ms", "--ack-wait", "1s"],
        ] {
            let cli = Cli::parse_from(["x"].into_iter().chain(flags.iter().copied()));
            let err = cli.args.resolve().unwrap_err().to_string();
            assert!(err.contains("consumer.batch_linger"), "{flags:?}: {err}");
        }
        let cli = Cli::parse_from(["x", "--batch-linger", "100ms", "--ack-wait", "1s"]);
        assert!(cli.args.resolve().is_ok(), "a tenth of ack_wait is taken");
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
        // lease settings are checked only when leases are used
        for (flags, field) in [
            (["--lease-ttl", "100ms"], "ownership.lease_ttl"),
            (
                ["--checkpoint-interval", "10ms"],
                "consumer.checkpoint_interval",
            ),
        ] {
            let leased = Cli::parse_from(["x", "--assignment", "leases", flags[0], flags[1]]);
            let err = leased.args.resolve().unwrap_err().to_string();
            assert!(err.contains(field), "{flags:?}: {err}");
            let fixed = Cli::parse_from(["x", flags[0], flags[1]]);
            assert!(fixed.args.resolve().is_ok(), "{flags:?} without leases");
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
}
