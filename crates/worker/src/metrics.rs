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
        self.sum_micros
            .fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
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
    /// Time of the one sled flush per batch (group commit).
    pub batch_flush: Histogram,
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
