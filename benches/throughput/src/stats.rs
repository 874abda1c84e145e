//! Latency percentiles and the printed table.

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

#[cfg(test)]
mod tests {
    use super::*;

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
