//! The `perf` report: every drain as a row, medians per contender, the worker/bare-consumer
//! ratio per round, latency under load; printed as tables, written as JSON and as an SVG plot
//! of latency against load.

use crate::drain::Drained;
use crate::stats::{bound_ms, Bounded, Percentiles};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// One drain in the report.
#[derive(Debug, Clone)]
pub struct DrainRow {
    /// nats-server version.
    pub server: String,
    /// Workload name.
    pub workload: String,
    /// Round, from 1.
    pub round: usize,
    /// Contender label.
    pub contender: String,
    /// What it measured.
    pub drained: Drained,
}

/// One latency run.
#[derive(Debug, Clone)]
pub struct LoadRow {
    /// Fraction of the measured maximum rate asked for (0.25, …).
    pub fraction: f64,
    /// Chunks/s actually offered.
    pub offered: f64,
    /// Call-ending chunk published → `tool_call.completed` received.
    pub latency: Option<Percentiles>,
    /// Where the time went, from the worker's `/metrics` at the end of the run
    /// ([`crate::stats::stages`]).
    pub stages: Vec<(&'static str, &'static str, Option<Bounded>)>,
}

/// Median of `v` (upper median for an even count); `None` when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Median of a contender's rates for one (server, workload).
pub fn median_rate(
    rows: &[DrainRow],
    server: &str,
    workload: &str,
    contender: &str,
) -> Option<f64> {
    median(
        rows.iter()
            .filter(|r| r.server == server && r.workload == workload && r.contender == contender)
            .map(|r| r.drained.rate())
            .collect(),
    )
}

/// Per-round ratios `a / b` of two contenders' rates for one (server, workload).
pub fn round_ratios(rows: &[DrainRow], server: &str, workload: &str, a: &str, b: &str) -> Vec<f64> {
    let rate = |round: usize, who: &str| {
        rows.iter()
            .find(|r| {
                r.server == server
                    && r.workload == workload
                    && r.round == round
                    && r.contender == who
            })
            .map(|r| r.drained.rate())
    };
    let rounds = rows.iter().map(|r| r.round).max().unwrap_or(0);
    (1..=rounds)
        .filter_map(|round| Some(rate(round, a)? / rate(round, b)?))
        .collect()
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The drain table: one line per (server, workload, contender) with medians.
pub fn drain_table(rows: &[DrainRow], contenders: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:<8} {:<16} {:>12} {:>10} {:>11} {:>14} {:>10} {:>9} {:>15}",
        "server",
        "workload",
        "contender",
        "inputs/s",
        "rounds",
        "CPU s/M",
        "server CPU s/M",
        "peak MiB",
        "avg batch",
        "apply/flush s"
    );
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.server.clone(), r.workload.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (server, workload) in &keys {
        for c in contenders {
            let mine: Vec<&DrainRow> = rows
                .iter()
                .filter(|r| &r.server == server && &r.workload == workload && &r.contender == c)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let rate = median(mine.iter().map(|r| r.drained.rate()).collect()).unwrap_or(0.0);
            let cpu = median(
                mine.iter()
                    .filter_map(|r| r.drained.cpu_per_million())
                    .collect(),
            );
            let server_cpu = median(
                mine.iter()
                    .filter_map(|r| r.drained.server_cpu_per_million())
                    .collect(),
            );
            let rss = median(
                mine.iter()
                    .filter_map(|r| r.drained.peak_rss.map(|b| b as f64 / 1048576.0))
                    .collect(),
            );
            let batch = median(
                mine.iter()
                    .filter_map(|r| r.drained.batches.map(|(b, n)| n as f64 / b.max(1) as f64))
                    .collect(),
            );
            let af = median(
                mine.iter()
                    .filter_map(|r| r.drained.apply_flush_secs.map(|(a, _)| a))
                    .collect(),
            )
            .zip(median(
                mine.iter()
                    .filter_map(|r| r.drained.apply_flush_secs.map(|(_, f)| f))
                    .collect(),
            ));
            let opt = |v: Option<f64>, p: usize| {
                v.map_or_else(|| "-".to_string(), |v| format!("{v:.p$}"))
            };
            let _ = writeln!(
                out,
                "{:<8} {:<8} {:<16} {:>12.0} {:>10} {:>11} {:>14} {:>10} {:>9} {:>15}",
                server,
                workload,
                c,
                rate,
                mine.iter()
                    .map(|r| format!("{:.0}k", r.drained.rate() / 1e3))
                    .collect::<Vec<_>>()
                    .join(","),
                opt(cpu, 1),
                opt(server_cpu, 1),
                opt(rss, 0),
                opt(batch, 0),
                af.map_or_else(|| "-".to_string(), |(a, f)| format!("{a:.2}/{f:.2}")),
            );
        }
    }
    out
}

/// The stages the load table shows the p99 of: an input's age when fetched and when durable,
/// and a relay round that found rows.
const STAGE_KEYS: [&str; 3] = ["fetched", "durable", "relay"];

/// Seconds as ms, `None` past the last bucket.
fn finite_ms(secs: f64) -> Option<f64> {
    secs.is_finite().then_some(secs * 1000.0)
}

/// The latency table.
pub fn load_table(loads: &[LoadRow], max_rate: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "latency, call-ending chunk published -> tool_call.completed (max drain rate {max_rate:.0}/s)"
    );
    let _ = writeln!(
        out,
        "{:>6} {:>12} {:>8} {:>9} {:>9} {:>9} {:>9}   p99 ms, from the worker's histograms: {}",
        "load",
        "offered/s",
        "calls",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        STAGE_KEYS.join(" / ")
    );
    for l in loads {
        match l.latency {
            Some(p) => {
                let stages: Vec<String> = STAGE_KEYS
                    .iter()
                    .map(|key| {
                        l.stages
                            .iter()
                            .find(|(k, _, _)| k == key)
                            .and_then(|(_, _, b)| b.as_ref())
                            .map_or_else(|| "-".to_string(), |b| bound_ms(b.p99, b.last))
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "{:>5.0}% {:>12.0} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2}   {}",
                    l.fraction * 100.0,
                    l.offered,
                    p.count,
                    ms(p.p50),
                    ms(p.p99),
                    ms(p.p999),
                    ms(p.max),
                    stages.join(" / ")
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:>5.0}% {:>12.0} (no samples)",
                    l.fraction * 100.0,
                    l.offered
                );
            }
        }
    }
    out
}

/// Everything as JSON.
pub fn to_json(meta: Value, rows: &[DrainRow], loads: &[LoadRow], startup_ms: &[f64]) -> Value {
    json!({
        "meta": meta,
        "drains": rows.iter().map(|r| json!({
            "server": r.server,
            "workload": r.workload,
            "round": r.round,
            "contender": r.contender,
            "inputs": r.drained.inputs,
            "seconds": r.drained.elapsed.as_secs_f64(),
            "inputs_per_s": r.drained.rate(),
            "cpu_s_per_million": r.drained.cpu_per_million(),
            "server_cpu_s_per_million": r.drained.server_cpu_per_million(),
            "peak_rss_bytes": r.drained.peak_rss,
            "batches": r.drained.batches.map(|(b, _)| b),
            "batched_inputs": r.drained.batches.map(|(_, n)| n),
            "apply_s": r.drained.apply_flush_secs.map(|(a, _)| a),
            "flush_s": r.drained.apply_flush_secs.map(|(_, f)| f),
        })).collect::<Vec<_>>(),
        "latency": loads.iter().map(|l| json!({
            "fraction": l.fraction,
            "offered_per_s": l.offered,
            "calls": l.latency.map(|p| p.count),
            "p50_ms": l.latency.map(|p| ms(p.p50)),
            "p99_ms": l.latency.map(|p| ms(p.p99)),
            "p999_ms": l.latency.map(|p| ms(p.p999)),
            "max_ms": l.latency.map(|p| ms(p.max)),
            // bucket upper bounds in ms (null: no observation, or past the last bound)
            "worker_stages": l.stages.iter().map(|(key, what, b)| json!({
                "stage": key,
                "what": what,
                "count": b.as_ref().map(|b| b.count),
                "p50_ms_at_most": b.as_ref().and_then(|b| finite_ms(b.p50)),
                "p90_ms_at_most": b.as_ref().and_then(|b| finite_ms(b.p90)),
                "p99_ms_at_most": b.as_ref().and_then(|b| finite_ms(b.p99)),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "start_to_healthy_ms": startup_ms,
    })
}

/// An SVG line plot of p50, p99 and p99.9 latency (ms) against offered load (chunks/s).
pub fn latency_svg(loads: &[LoadRow], title: &str) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let points: Vec<(f64, [f64; 3])> = loads
        .iter()
        .filter_map(|l| {
            let p = l.latency?;
            Some((l.offered, [ms(p.p50), ms(p.p99), ms(p.p999)]))
        })
        .collect();
    let x_max = points.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
    let y_max = points.iter().flat_map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let x = |v: f64| left + v / x_max * (w - left - right);
    let y = |v: f64| h - bottom - v / y_max * (h - top - bottom);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    // axes and ticks
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for i in 0..=5 {
        let xv = x_max * f64::from(i) / 5.0;
        let yv = y_max * f64::from(i) / 5.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}</text><text x="{}" y="{:.1}" text-anchor="end">{:.1}</text><line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##,
            x(xv),
            h - bottom + 16.0,
            xv,
            left - 6.0,
            y(yv) + 4.0,
            yv,
            y(yv),
            w - right,
            y(yv)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">offered load (chunks/s)</text>"#,
        (left + w - right) / 2.0,
        h - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">latency (ms)</text>"#,
        (top + h - bottom) / 2.0,
        (top + h - bottom) / 2.0
    );
    for (k, (name, color)) in [("p50", "#1f77b4"), ("p99", "#d62728"), ("p99.9", "#7f7f7f")]
        .iter()
        .enumerate()
    {
        let path: Vec<String> = points
            .iter()
            .map(|(xv, ys)| format!("{:.1},{:.1}", x(*xv), y(ys[k])))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (xv, ys) in &points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(*xv),
                y(ys[k])
            );
        }
        let ly = top + 14.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{name}</text>"#,
            left + 10.0,
            left + 30.0,
            left + 36.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn row(round: usize, contender: &str, secs: f64) -> DrainRow {
        DrainRow {
            server: "2.9.10".into(),
            workload: "typical".into(),
            round,
            contender: contender.into(),
            drained: Drained {
                inputs: 1000,
                elapsed: Duration::from_secs_f64(secs),
                cpu: Some(Duration::from_millis(500)),
                server_cpu: Some(Duration::from_millis(300)),
                peak_rss: Some(64 << 20),
                batches: Some((10, 1000)),
                apply_flush_secs: Some((0.1, 0.2)),
            },
        }
    }

    #[test]
    fn ratios_pair_contenders_by_round() {
        let rows = vec![
            row(1, "worker", 2.0),
            row(1, "bare consumer", 1.0),
            row(2, "worker", 4.0),
            row(2, "bare consumer", 1.0),
        ];
        let r = round_ratios(&rows, "2.9.10", "typical", "worker", "bare consumer");
        assert_eq!(r, vec![0.5, 0.25]);
        assert_eq!(
            median_rate(&rows, "2.9.10", "typical", "worker"),
            Some(500.0)
        );
        let table = drain_table(&rows, &["worker".into(), "bare consumer".into()]);
        assert!(table.contains("500"), "{table}");
        assert_eq!(rows[0].drained.cpu_per_million(), Some(500.0));
    }

    /// Percentiles of ten latencies, 5 ms at the median.
    fn ten_samples() -> Percentiles {
        Percentiles {
            count: 10,
            p50: Duration::from_millis(5),
            p90: Duration::from_millis(8),
            p99: Duration::from_millis(9),
            p999: Duration::from_millis(10),
            max: Duration::from_millis(10),
        }
    }

    #[test]
    fn svg_has_a_line_per_percentile() {
        let p = ten_samples();
        let loads = vec![
            LoadRow {
                fraction: 0.25,
                offered: 5000.0,
                latency: Some(p),
                stages: Vec::new(),
            },
            LoadRow {
                fraction: 0.5,
                offered: 10000.0,
                latency: Some(p),
                stages: Vec::new(),
            },
        ];
        let svg = latency_svg(&loads, "t");
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn a_latency_row_shows_where_the_time_went_from_the_worker_histograms() {
        let p = ten_samples();
        // 100 inputs fetched within 5 ms (99 within 1 ms), durable within 25 ms; no relay
        // round published anything
        let metrics = "\
toolstream_input_lag_seconds_bucket{stage=\"fetched\",le=\"0.001\"} 99
toolstream_input_lag_seconds_bucket{stage=\"fetched\",le=\"0.005\"} 100
toolstream_input_lag_seconds_bucket{stage=\"fetched\",le=\"+Inf\"} 100
toolstream_input_lag_seconds_bucket{stage=\"durable\",le=\"0.005\"} 10
toolstream_input_lag_seconds_bucket{stage=\"durable\",le=\"0.025\"} 100
toolstream_input_lag_seconds_bucket{stage=\"durable\",le=\"+Inf\"} 100
toolstream_relay_round_seconds_bucket{le=\"0.005\"} 0
toolstream_relay_round_seconds_bucket{le=\"+Inf\"} 0
";
        let loads = vec![LoadRow {
            fraction: 0.25,
            offered: 5000.0,
            latency: Some(p),
            stages: crate::stats::stages(metrics),
        }];
        let table = load_table(&loads, 20000.0);
        assert!(table.contains("fetched / durable / relay"), "{table}");
        assert!(table.contains("≤ 1 / ≤ 25 / -"), "{table}");
        let json = to_json(json!({}), &[], &loads, &[]);
        let stages = &json["latency"][0]["worker_stages"];
        assert_eq!(stages[0]["stage"], "fetched");
        assert_eq!(stages[0]["count"], 100);
        assert_eq!(stages[1]["p50_ms_at_most"], 25.0);
        assert_eq!(stages[1]["p99_ms_at_most"], 25.0);
        assert!(stages[4]["count"].is_null(), "no relay round: no figure");
    }
}
