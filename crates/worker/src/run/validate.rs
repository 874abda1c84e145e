//! Settings that cannot work together are refused at start, naming the setting at fault
//! ([`Config::validate`], called by [`super::args::RunArgs::resolve`]).

use super::config::Config;
use anyhow::bail;
use chunk_model::wire::check_prefix;
use std::time::Duration;

impl Config {
    /// Checks settings that cannot work together; names the setting at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.ui.validate()?;
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
        if c.assignment == super::config::Assignment::Leases {
            self.ownership
                .validate()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            if c.checkpoint_interval.get() < Duration::from_secs(1) {
                bail!(
                    "consumer.checkpoint_interval ({:?}) must be at least 1s: each checkpoint \
                     writes the partition's whole store",
                    c.checkpoint_interval.get()
                );
            }
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
        let linger = c.batch_linger.get();
        if linger > Duration::from_secs(1) {
            bail!(
                "consumer.batch_linger ({linger:?}) must be at most 1s: every input of a short \
                 batch waits that long before it is applied"
            );
        }
        if linger * 10 > c.ack_wait.get() {
            bail!(
                "consumer.batch_linger ({linger:?}) must be at most a tenth of consumer.ack_wait \
                 ({:?}): a batch's inputs wait out the linger unacked, and the server redelivers \
                 what is not acked in time",
                c.ack_wait.get()
            );
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
        self.validate_connection()?;
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
        Ok(())
    }

    /// The settings of the connection alone (subject and inbox prefixes, auth, TLS): the one
    /// check of the flags `run` and every client command share (`cli/connection.rs`).
    pub fn validate_connection(&self) -> anyhow::Result<()> {
        validate_prefix(&self.subject_prefix)?;
        if let Err(e) = check_prefix(&self.inbox_prefix) {
            bail!(
                "inbox_prefix {:?} must be one or more subject tokens: a token {e}",
                self.inbox_prefix
            );
        }
        if self.nats_url.split(',').all(|u| u.trim().is_empty()) {
            bail!("nats_url is empty: give the server's URL (nats://host:4222)");
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

/// The subject prefix: one or more subject tokens (`chunk_model::wire::tokens`' rule).
fn validate_prefix(prefix: &str) -> anyhow::Result<()> {
    if let Err(e) = check_prefix(prefix) {
        bail!("subject_prefix {prefix:?} must be one or more subject tokens: a token {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_in_the_prefix_are_rejected() {
        for bad in ["a.*", ">", "a..b", ""] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
        validate_prefix("acme.toolstream").unwrap();
    }
}
