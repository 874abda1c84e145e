//! Latency percentiles and the printed table; the worker's own histograms read from its
//! `/metrics` text ([`bounded`], [`stages`]: where an input's time went, "at most" figures at
//! the buckets' resolution).

use std::time::Duration;

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Largest.
    pub max: Duration,
}

/// Nearest-rank percentiles; `None` for no samples.
pub fn percentiles(samples: &mut [Duration]) -> Option<Percentiles> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = |p: f64| -> Duration {
        let idx = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        samples[idx.clamp(1, samples.len()) - 1]
    };
    Some(Percentiles {
        count: samples.len(),
        p50: rank(50.0),
        p90: rank(90.0),
        p99: rank(99.0),
        p999: rank(99.9),
        max: samples[samples.len() - 1],
    })
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Percentiles of one histogram series in a Prometheus text exposition (the worker's
/// `/metrics`), each given as the upper bound of the bucket it falls in: the figures say
/// "at most", at the buckets' resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    /// Observations.
    pub count: u64,
    /// The bound at or below which half of them are, in seconds (`inf` past the last bound).
    pub p50: f64,
    /// The same for 90%.
    pub p90: f64,
    /// The same for 99%.
    pub p99: f64,
    /// The last finite bucket bound (what "past the last bound" is past).
    pub last: f64,
}

/// [`Bounded`] percentiles of the histogram `name` (the family, without `_bucket`) in
/// `metrics`, for the series whose labels (besides `le`) are `labels` as written, e.g.
/// `stage="durable"` (empty for a series without labels); `None` when it is absent or empty.
pub fn bounded(metrics: &str, name: &str, labels: &str) -> Option<Bounded> {
    let prefix = match labels.is_empty() {
        true => format!("{name}_bucket{{le=\""),
        false => format!("{name}_bucket{{{labels},le=\""),
    };
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (bound, count) = rest.split_once("\"} ")?;
        let bound = match bound {
            "+Inf" => f64::INFINITY,
            b => b.parse().ok()?,
        };
        buckets.push((bound, count.trim().parse().ok()?));
    }
    let count = buckets.iter().find(|(b, _)| b.is_infinite())?.1;
    if count == 0 {
        return None;
    }
    // (cumulative counts: the first bucket holding the rank)
    let at = |p: f64| -> f64 {
        let rank = (p * count as f64).ceil() as u64;
        buckets
            .iter()
            .find(|(_, n)| *n >= rank)
            .map_or(f64::INFINITY, |(b, _)| *b)
    };
    let last = buckets
        .iter()
        .map(|(b, _)| *b)
        .filter(|b| b.is_finite())
        .fold(0.0, f64::max);
    Some(Bounded {
        count,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        last,
    })
}

/// The worker's histograms that say where an input's time went, as (key, what, family,
/// labels): its age when the consume loop took it from the client and when it was durable
/// and settled (acked; its events are in the outbox from then), beside a batch's apply and
/// flush and a relay round that found rows to publish.
pub const STAGES: [(&str, &str, &str, &str); 5] = [
    (
        "fetched",
        "input age when fetched",
        "toolstream_input_lag_seconds",
        "stage=\"fetched\"",
    ),
    (
        "durable",
        "input age when durable (settled)",
        "toolstream_input_lag_seconds",
        "stage=\"durable\"",
    ),
    ("apply", "batch apply", "toolstream_batch_apply_seconds", ""),
    ("flush", "batch flush", "toolstream_batch_flush_seconds", ""),
    (
        "relay",
        "relay round that found rows",
        "toolstream_relay_round_seconds",
        "",
    ),
];

/// [`STAGES`] read from the worker's `/metrics`: (key, what, percentiles).
pub fn stages(metrics: &str) -> Vec<(&'static str, &'static str, Option<Bounded>)> {
    STAGES
        .iter()
        .map(|&(key, what, name, labels)| (key, what, bounded(metrics, name, labels)))
        .collect()
}

/// A [`Bounded`] figure in ms ("≤ 2.5"), or past the histogram's `last` bound ("> 2500").
pub fn bound_ms(secs: f64, last: f64) -> String {
    match secs.is_finite() {
        true => format!("≤ {}", secs * 1000.0),
        false => format!("> {}", last * 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_percentiles_read_one_series_from_cumulative_buckets() {
        let metrics = "\
# TYPE lag histogram
lag_bucket{stage=\"fetched\",le=\"0.001\"} 50
lag_bucket{stage=\"fetched\",le=\"0.01\"} 95
lag_bucket{stage=\"fetched\",le=\"0.1\"} 99
lag_bucket{stage=\"fetched\",le=\"+Inf\"} 100
lag_bucket{stage=\"durable\",le=\"0.001\"} 0
lag_bucket{stage=\"durable\",le=\"0.01\"} 0
lag_bucket{stage=\"durable\",le=\"0.1\"} 0
lag_bucket{stage=\"durable\",le=\"+Inf\"} 4
flush_bucket{le=\"0.001\"} 0
flush_bucket{le=\"+Inf\"} 0
";
        let fetched = bounded(metrics, "lag", "stage=\"fetched\"").unwrap();
        assert_eq!(fetched.count, 100);
        assert_eq!((fetched.p50, fetched.p90, fetched.p99), (0.001, 0.01, 0.1));
        let durable = bounded(metrics, "lag", "stage=\"durable\"").unwrap();
        assert_eq!(durable.count, 4);
        assert!(durable.p50.is_infinite() && durable.p99.is_infinite());
        assert_eq!(bounded(metrics, "flush", ""), None, "no observations");
        assert_eq!(bounded(metrics, "apply", ""), None, "absent");
        assert_eq!(durable.last, 0.1);
        assert_eq!(bound_ms(0.0025, 2.5), "≤ 2.5");
        assert_eq!(bound_ms(durable.p99, durable.last), "> 100");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = percentiles(&mut v).unwrap();
        assert_eq!(p.p50, Duration::from_millis(50));
        assert_eq!(p.p90, Duration::from_millis(90));
        assert_eq!(p.p99, Duration::from_millis(99));
        assert_eq!(p.p999, Duration::from_millis(100));
        assert_eq!(p.max, Duration::from_millis(100));
        assert!(percentiles(&mut []).is_none());
        let mut one = vec![Duration::from_millis(7)];
        assert_eq!(percentiles(&mut one).unwrap().p99, Duration::from_millis(7));
    }
}
