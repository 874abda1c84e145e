//! Worker metrics: named counters and latency histograms, rendered in Prometheus text format
//! by [`Metrics::render`] for `/metrics`. Labels are low-cardinality (no conversation ids).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A fixed-bucket latency histogram, lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Non-cumulative bucket counts (for rendering; +Inf is `count` minus their sum).
    pub fn bucket_counts(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    /// Sum of observations in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// Everything the worker counts. Shared as `Arc<Metrics>`; gauges that the store knows
/// (open streams, outbox depth) are read from it at render time.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Chunk messages consumed (`toolstream_chunks_in_total`).
    pub chunks_in: AtomicU64,
    /// Result messages consumed (`toolstream_results_in_total`).
    pub results_in: AtomicU64,
    /// Inputs that were duplicates and changed nothing.
    pub duplicates: AtomicU64,
    /// Inputs parked ahead of a sequence gap.
    pub parked: AtomicU64,
    /// Inputs sent to the dead-letter subject.
    pub dead_letters: AtomicU64,
    /// Events published and confirmed by a PubAck (`toolstream_events_out_total`).
    pub events_out: AtomicU64,
    /// Publish attempts that failed and will be retried.
    pub publish_errors: AtomicU64,
    /// Batches applied.
    pub batches: AtomicU64,
    /// Storage errors (batch retried).
    pub store_errors: AtomicU64,
    /// Time to apply one fetched batch (decode + transactions).
    pub batch_apply: Histogram,
    /// Time of one store flush (group commit: it makes every batch applied before it began
    /// durable, so there are at most as many flushes as batches).
    pub batch_flush: Histogram,
    /// How long after JetStream stored an input the worker reached it, by stage
    /// (`toolstream_input_lag_seconds`): where an input's latency goes before its event.
    pub input_lag: InputLag,
    /// Time of one relay round that found rows to publish, from its peek of the outbox to
    /// the deletion of the rows confirmed, failed rounds included
    /// (`toolstream_relay_round_seconds`).
    pub relay_round: Histogram,
    /// The UI event streams (`GET /v1/conversations/{conv}/events`).
    pub ui_streams: UiStreamMetrics,
    /// Partitions held through leases (`consumer.assignment = "leases"` only).
    pub leases: LeaseMetrics,
}

/// An input's age, from the moment JetStream stored it (the timestamp in its reply subject,
/// on the server's clock) to a stage of the worker (on the worker's clock: skew between the
/// two hosts shifts every figure, and an age the clocks make negative counts as zero).
#[derive(Debug, Default)]
pub struct InputLag {
    /// The consume loop took it from the client into a batch (`stage="fetched"`; async-nats
    /// buffers what the pull consumer delivered): the time in JetStream, on the wire and in
    /// that buffer, any backlog ahead of it, and the batch's linger if it waited for more
    /// input (`consumer.batch_linger`). Every delivery counts: a redelivery is counted again, at
    /// its age since it was first stored.
    pub fetched: Histogram,
    /// The loop saw the flush that made it durable return, and it is acked or terminated now
    /// (`stage="durable"`): the fetched age plus batching, applying and the flush. Counted
    /// once per input, when it is settled for good (not when it is nak'd); an input refused
    /// before the store is dead-lettered straight to NATS and counted only when fetched. Its
    /// events are in the outbox from here; the relay publishes them next
    /// (`toolstream_relay_round_seconds`).
    pub durable: Histogram,
}

impl InputLag {
    /// The age now of an input stored at `stored_us` (µs since the epoch), given `now_us`.
    pub fn age(stored_us: u64, now_us: u64) -> Duration {
        Duration::from_micros(now_us.saturating_sub(stored_us))
    }

    fn render_into(&self, out: &mut String) {
        let name = "toolstream_input_lag_seconds";
        write_header(
            out,
            name,
            "Age of an input (since JetStream stored it) when the consume loop took it from the client, and when it was durable and settled (acked or terminated).",
            "histogram",
        );
        self.fetched
            .render_samples(out, name, Some(("stage", "fetched")));
        self.durable
            .render_samples(out, name, Some(("stage", "durable")));
    }
}

/// Partitions held through leases (`crate::run::leased`): shown on `/metrics` once the worker
/// runs with leases.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    /// Set when the worker shares partitions through leases.
    pub enabled: std::sync::atomic::AtomicBool,
    /// The epoch of each partition this worker runs an engine for now.
    pub owned: std::sync::Mutex<std::collections::BTreeMap<u32, u64>>,
    /// Leases acquired (`toolstream_leases_acquired_total`).
    pub acquired: AtomicU64,
    /// Leases lost (`toolstream_leases_revoked_total`): expired, refused, or the engine's lease
    /// no longer held.
    pub revoked: AtomicU64,
    /// Partitions handed off to a worker that joined (`toolstream_leases_handed_off_total`).
    pub handed_off: AtomicU64,
    /// Takeovers that started from a checkpoint (`toolstream_takeovers_total{from="checkpoint"}`)
    /// and from the first input (`{from="start"}`).
    pub from_checkpoint: AtomicU64,
    /// See `from_checkpoint`.
    pub from_start: AtomicU64,
    /// Events and dead letters a rebuild made again that were already in their stream,
    /// confirmed without a second copy (`toolstream_already_published_total`).
    pub already_published: AtomicU64,
}

impl LeaseMetrics {
    fn render_into(&self, out: &mut String) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner()).clone();
        write_header(
            out,
            "toolstream_owned_partitions",
            "Partitions this worker runs an engine for under a lease.",
            "gauge",
        );
        out.push_str(&format!("toolstream_owned_partitions {}\n", owned.len()));
        write_header(
            out,
            "toolstream_lease_epoch",
            "The lease epoch of each partition this worker owns.",
            "gauge",
        );
        for (partition, epoch) in &owned {
            out.push_str(&format!(
                "toolstream_lease_epoch{{partition=\"{partition}\"}} {epoch}\n"
            ));
        }
        for (name, help, value) in [
            (
                "toolstream_leases_acquired_total",
                "Partition leases acquired.",
                load(&self.acquired),
            ),
            (
                "toolstream_leases_revoked_total",
                "Partition leases lost (expired, refused, or no longer held by the engine).",
                load(&self.revoked),
            ),
            (
                "toolstream_leases_handed_off_total",
                "Partitions handed off gracefully to a worker that joined.",
                load(&self.handed_off),
            ),
            (
                "toolstream_already_published_total",
                "Events and dead letters a takeover's rebuild made again that were already in \
                 their stream: confirmed without a second copy.",
                load(&self.already_published),
            ),
        ] {
            write_header(out, name, help, "counter");
            out.push_str(&format!("{name} {value}\n"));
        }
        write_labelled(
            out,
            "toolstream_takeovers_total",
            "Partitions started under a new lease: from a checkpoint, or from the first input.",
            "from",
            &[
                ("checkpoint", load(&self.from_checkpoint)),
                ("start", load(&self.from_start)),
            ],
        );
    }
}

/// The UI event streams of the HTTP API (`crate::serve::ui`): how many are open, and how
/// many were opened, closed because the client fell behind, or refused.
#[derive(Debug, Default)]
pub struct UiStreamMetrics {
    /// Streams open now (`toolstream_ui_streams_open`): from the response head until the
    /// stream ends.
    pub open: AtomicU64,
    /// Streams opened (`toolstream_ui_streams_opened_total`).
    pub opened: AtomicU64,
    /// Streams closed because the client fell behind
    /// (`toolstream_ui_streams_closed_behind_total`): it took no write for `ui.write_timeout`,
    /// or the events stream's limits deleted events it had not been sent yet (`behind`).
    pub closed_behind: AtomicU64,
    /// Stream requests refused by the token check (`…_rejected_total{reason="auth"}`).
    pub rejected_auth: AtomicU64,
    /// Stream requests refused over `ui.max_streams` (`…_rejected_total{reason="limit"}`).
    pub rejected_limit: AtomicU64,
}

impl UiStreamMetrics {
    /// Counts a stream as opened and open until the returned guard drops.
    pub fn opened(&self) -> OpenStream<'_> {
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenStream(self)
    }

    fn render_into(&self, out: &mut String) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write_header(
            out,
            "toolstream_ui_streams_open",
            "UI event streams (/v1/conversations/{conv}/events) open now.",
            "gauge",
        );
        out.push_str(&format!(
            "toolstream_ui_streams_open {}\n",
            load(&self.open)
        ));
        write_header(
            out,
            "toolstream_ui_streams_opened_total",
            "UI event streams opened.",
            "counter",
        );
        out.push_str(&format!(
            "toolstream_ui_streams_opened_total {}\n",
            load(&self.opened)
        ));
        write_header(
            out,
            "toolstream_ui_streams_closed_behind_total",
            "UI event streams closed because the client fell behind (no write taken within \
             ui.write_timeout, or events deleted by the stream's limits before they were sent).",
            "counter",
        );
        out.push_str(&format!(
            "toolstream_ui_streams_closed_behind_total {}\n",
            load(&self.closed_behind)
        ));
        write_labelled(
            out,
            "toolstream_ui_streams_rejected_total",
            "UI event stream requests refused: reason auth (token) or limit (ui.max_streams).",
            "reason",
            &[
                ("auth", load(&self.rejected_auth)),
                ("limit", load(&self.rejected_limit)),
            ],
        );
    }
}

/// An open UI stream: counted in [`UiStreamMetrics::open`] until dropped.
#[derive(Debug)]
pub struct OpenStream<'a>(&'a UiStreamMetrics);

impl Drop for OpenStream<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Renders every metric in the Prometheus text exposition format (version 0.0.4).
    ///
    /// `open_streams` and `outbox_depth` are gauges read from the store by the caller; `None`
    /// (the store could not be read) leaves that gauge out rather than reporting a false zero.
    pub fn render(&self, open_streams: Option<u64>, outbox_depth: Option<u64>) -> String {
        let mut out = String::with_capacity(4096);
        let counters: [(&str, &str, &AtomicU64); 9] = [
            (
                "toolstream_chunks_in_total",
                "Chunk messages consumed.",
                &self.chunks_in,
            ),
            (
                "toolstream_results_in_total",
                "Tool-result messages consumed.",
                &self.results_in,
            ),
            (
                "toolstream_duplicates_total",
                "Inputs that were duplicates and changed nothing.",
                &self.duplicates,
            ),
            (
                "toolstream_parked_total",
                "Inputs parked ahead of a sequence gap.",
                &self.parked,
            ),
            (
                "toolstream_dead_letters_total",
                "Inputs sent to the dead-letter subject.",
                &self.dead_letters,
            ),
            (
                "toolstream_events_out_total",
                "Events published and confirmed by a PubAck.",
                &self.events_out,
            ),
            (
                "toolstream_publish_errors_total",
                "Event publish attempts that failed and will be retried.",
                &self.publish_errors,
            ),
            (
                "toolstream_batches_total",
                "Fetched batches applied.",
                &self.batches,
            ),
            (
                "toolstream_store_errors_total",
                "Storage errors (the batch is retried).",
                &self.store_errors,
            ),
        ];
        for (name, help, counter) in counters {
            write_header(&mut out, name, help, "counter");
            out.push_str(&format!("{name} {}\n", counter.load(Ordering::Relaxed)));
        }
        let gauges = [
            (
                "toolstream_open_streams",
                "Messages whose stream is still open in the store.",
                open_streams,
            ),
            (
                "toolstream_outbox_depth",
                "Events durable in the outbox and not yet confirmed published.",
                outbox_depth,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                write_header(&mut out, name, help, "gauge");
                out.push_str(&format!("{name} {v}\n"));
            }
        }
        self.batch_apply.render_into(
            &mut out,
            "toolstream_batch_apply_seconds",
            "Time to decode and apply one fetched batch.",
        );
        self.batch_flush.render_into(
            &mut out,
            "toolstream_batch_flush_seconds",
            "Time of one store flush (group commit: it covers every batch applied before it began).",
        );
        self.input_lag.render_into(&mut out);
        self.relay_round.render_into(
            &mut out,
            "toolstream_relay_round_seconds",
            "Time of one relay round that found rows to publish: peek, publish, PubAcks, delete.",
        );
        self.ui_streams.render_into(&mut out);
        self.leases.render_into(&mut out);
        out
    }
}

/// Writes the `# HELP` and `# TYPE` lines of one metric family.
fn write_header(out: &mut String, name: &str, help: &str, kind: &str) {
    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
}

/// A counter with one label: its header, then one line per (label value, count).
fn write_labelled(out: &mut String, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
    write_header(out, name, help, "counter");
    for (value, count) in values {
        out.push_str(&format!("{name}{{{label}=\"{value}\"}} {count}\n"));
    }
}

impl Histogram {
    /// Appends this histogram as a Prometheus `histogram` family: cumulative `_bucket` lines
    /// (ending with `+Inf`), `_sum` and `_count`.
    fn render_into(&self, out: &mut String, name: &str, help: &str) {
        write_header(out, name, help, "histogram");
        self.render_samples(out, name, None);
    }

    /// The sample lines alone, with one more label on each when given (several series of one
    /// family).
    fn render_samples(&self, out: &mut String, name: &str, label: Option<(&str, &str)>) {
        // (`first`: the label before `le` in a bucket's braces; `braced`: alone, in its own)
        let (first, braced) = match label {
            Some((k, v)) => (format!("{k}=\"{v}\","), format!("{{{k}=\"{v}\"}}")),
            None => (String::new(), String::new()),
        };
        // Read count first: buckets only grow, so clamping keeps the series monotone even while
        // observations race with rendering.
        let count = self.count();
        let mut cumulative = 0u64;
        for (bound, n) in LATENCY_BUCKETS.iter().zip(self.bucket_counts()) {
            cumulative = cumulative.saturating_add(n).min(count);
            out.push_str(&format!(
                "{name}_bucket{{{first}le=\"{bound}\"}} {cumulative}\n"
            ));
        }
        out.push_str(&format!("{name}_bucket{{{first}le=\"+Inf\"}} {count}\n"));
        out.push_str(&format!("{name}_sum{braced} {}\n", self.sum_seconds()));
        out.push_str(&format!("{name}_count{braced} {count}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_reports_counters_and_cumulative_histogram_buckets() {
        let m = Metrics::default();
        Metrics::add(&m.chunks_in, 7);
        Metrics::add(&m.events_out, 3);
        m.batch_apply.observe(Duration::from_micros(300)); // first bucket
        m.batch_apply.observe(Duration::from_millis(20)); // le=0.025
        m.batch_apply.observe(Duration::from_secs(10)); // only +Inf
        let text = m.render(Some(2), Some(5));
        assert!(text.contains("# TYPE toolstream_chunks_in_total counter\n"));
        assert!(text.contains("\ntoolstream_chunks_in_total 7\n"));
        assert!(text.contains("\ntoolstream_events_out_total 3\n"));
        assert!(text.contains("\ntoolstream_open_streams 2\n"));
        assert!(text.contains("\ntoolstream_outbox_depth 5\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_bucket{le=\"0.01\"} 1\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_bucket{le=\"0.025\"} 2\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_bucket{le=\"2.5\"} 2\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("toolstream_batch_apply_seconds_count 3\n"));
        assert!(text.contains("toolstream_batch_flush_seconds_count 0\n"));
    }

    #[test]
    fn input_lag_renders_one_histogram_family_with_a_series_per_stage() {
        let m = Metrics::default();
        let stored = 1_000_000_000;
        let lag = &m.input_lag;
        // ages of 0.7 ms (le=0.001) and 30 ms (le=0.05)
        lag.fetched.observe(InputLag::age(stored, stored + 700));
        lag.durable.observe(InputLag::age(stored, stored + 30_000));
        // a clock behind the server's: no negative age, the first bucket
        lag.durable.observe(InputLag::age(stored, stored - 5));
        // a 3 ms relay round (le=0.005)
        m.relay_round.observe(Duration::from_millis(3));
        let text = m.render(None, None);
        let name = "toolstream_input_lag_seconds";
        assert_eq!(
            text.matches(&format!("# TYPE {name} histogram\n")).count(),
            1
        );
        for (series, value) in [
            ("_bucket{stage=\"fetched\",le=\"0.0005\"}", 0),
            ("_bucket{stage=\"fetched\",le=\"0.001\"}", 1),
            ("_bucket{stage=\"durable\",le=\"0.0005\"}", 1),
            ("_bucket{stage=\"durable\",le=\"0.025\"}", 1),
            ("_bucket{stage=\"durable\",le=\"0.05\"}", 2),
            ("_bucket{stage=\"durable\",le=\"+Inf\"}", 2),
            ("_count{stage=\"fetched\"}", 1),
            ("_count{stage=\"durable\"}", 2),
        ] {
            let line = format!("\n{name}{series} {value}\n");
            assert!(text.contains(&line), "{line:?} in {text}");
        }
        assert!(text.contains(&format!("{name}_sum{{stage=\"fetched\"}} 0.0007\n")));
        assert!(text.contains("toolstream_relay_round_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("toolstream_relay_round_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("toolstream_relay_round_seconds_count 1\n"));
    }

    #[test]
    fn ui_streams_are_open_while_their_guard_lives_and_refusals_render_by_reason() {
        let m = Metrics::default();
        let a = m.ui_streams.opened();
        let b = m.ui_streams.opened();
        drop(a);
        Metrics::add(&m.ui_streams.rejected_limit, 2);
        Metrics::add(&m.ui_streams.closed_behind, 1);
        let text = m.render(None, None);
        assert!(text.contains("# TYPE toolstream_ui_streams_open gauge\n"));
        assert!(text.contains("\ntoolstream_ui_streams_open 1\n"), "{text}");
        assert!(text.contains("\ntoolstream_ui_streams_opened_total 2\n"));
        assert!(text.contains("\ntoolstream_ui_streams_closed_behind_total 1\n"));
        assert!(text.contains("\ntoolstream_ui_streams_rejected_total{reason=\"auth\"} 0\n"));
        assert!(text.contains("\ntoolstream_ui_streams_rejected_total{reason=\"limit\"} 2\n"));
        drop(b);
        let text = m.render(None, None);
        assert!(text.contains("\ntoolstream_ui_streams_open 0\n"));
        assert!(text.contains("\ntoolstream_ui_streams_opened_total 2\n"));
    }

    #[test]
    fn unreadable_store_gauges_are_left_out_not_reported_as_zero() {
        let text = Metrics::default().render(None, None);
        assert!(!text.contains("toolstream_open_streams"));
        assert!(!text.contains("toolstream_outbox_depth"));
        assert!(text.contains("toolstream_dead_letters_total 0"));
    }

    #[test]
    fn every_sample_line_belongs_to_a_declared_family() {
        let text = Metrics::default().render(Some(0), Some(0));
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap_or_default().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                assert!(
                    declared.iter().any(|d| name == d
                        || name
                            .strip_prefix(d.as_str())
                            .is_some_and(|s| { ["_bucket", "_sum", "_count"].contains(&s) })),
                    "sample {line:?} has no # TYPE"
                );
            }
        }
    }
}
