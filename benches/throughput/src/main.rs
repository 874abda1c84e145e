//! # throughput — toolstream end to end, measured
//!
//! Starts its own `nats-server` (toolstream-testkit: free port, temp store), starts the real
//! worker binary (`toolstream run`) on a temp data dir, publishes K conversations × M messages
//! of N-chunk openai-chat tool-call streams concurrently (headers as a producer sends them),
//! subscribes to the events and reports:
//!
//! - chunks/s from the first publish to the last expected event received;
//! - latency percentiles (p50/p90/p99/max) from the publish of the chunk that ends a call (the
//!   `finish_reason` chunk) to that call's `tool_call.completed` event, and to the message's
//!   `message.completed`;
//! - where the time went, from the worker's own histograms on its `/metrics`
//!   ([`stats::stages`]): an input's age when fetched and when durable, a batch's apply and
//!   flush, a relay round; then its counters and apply / flush buckets as printed.
//!
//! Bounded: gives up after `--timeout-secs` and exits non-zero with what arrived.
//!
//! ```sh
//! cargo build --release -p toolstream -p toolstream-throughput
//! target/release/throughput --conversations 200 --chunks 100
//! ```
//!
//! The library (`src/lib.rs`) holds the run itself ([`toolstream_throughput::paced`]); the
//! performance report with baselines is the `perf` binary.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use toolstream_throughput::paced::{self, PacedArgs};
use toolstream_throughput::stats;

/// End-to-end throughput and latency of toolstream on this machine.
#[derive(Debug, Parser)]
#[command(name = "throughput")]
struct Args {
    /// Concurrent conversations (K).
    #[arg(long, default_value_t = 200)]
    conversations: usize,
    /// Messages per conversation, streamed one after the other.
    #[arg(long, default_value_t = 1)]
    messages: usize,
    /// Chunks per message stream (M), `[DONE]` included.
    #[arg(long, default_value_t = 100)]
    chunks: usize,
    /// Parallel tool calls per message.
    #[arg(long, default_value_t = 2)]
    calls: usize,
    /// Pause between two chunks of one stream (0 = as fast as possible: saturation).
    #[arg(long, default_value_t = 0)]
    chunk_interval_ms: u64,
    /// PubAcks a producer may await at once (per conversation).
    #[arg(long, default_value_t = 32)]
    in_flight: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 180)]
    timeout_secs: u64,
    /// The worker binary (default: `toolstream` next to this binary).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Extra argument for `toolstream run` (repeatable), e.g. `--worker-arg=--batch-size=512`.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Start every conversation within one chunk interval, so their messages end together (a
    /// burst); by default they start at random offsets within a message and end at a steady
    /// rate.
    #[arg(long)]
    lockstep: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    toolstream_throughput::runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let worker_bin = toolstream_throughput::worker::resolve_bin(args.worker_bin.as_deref())?;
    let paced_args = PacedArgs {
        conversations: args.conversations,
        messages: args.messages,
        chunks: args.chunks,
        calls: args.calls,
        chunk_interval: Duration::from_millis(args.chunk_interval_ms),
        in_flight: args.in_flight,
        timeout: Duration::from_secs(args.timeout_secs),
        worker_args: args.worker_args.clone(),
        stagger: !args.lockstep,
    };
    eprintln!(
        "publishing {} conversations x {} message(s) x ~{} chunks ({} calls each)",
        args.conversations, args.messages, args.chunks, args.calls
    );
    let r = paced::run(&paced_args, &worker_bin, None).await?;
    if let Some(first) = r.publish_errors.first() {
        eprintln!(
            "{} producer(s) failed; first: {first}",
            r.publish_errors.len()
        );
    }

    println!();
    println!("toolstream end-to-end throughput");
    println!(
        "  conversations x messages x chunks : {} x {} x {} ({} calls/message)",
        args.conversations, args.messages, r.chunks_per_message, r.calls_per_message
    );
    println!(
        "  chunk interval per stream         : {} ms",
        args.chunk_interval_ms
    );
    println!(
        "  chunks published (PubAck'd)       : {} in {:.3} s",
        r.total_chunks,
        r.published_in.as_secs_f64()
    );
    if let Some(e2e) = r.end_to_end {
        println!(
            "  first publish -> last event       : {:.3} s",
            e2e.as_secs_f64()
        );
        println!(
            "  throughput                        : {:.0} chunks/s ({:.0} calls/s)",
            r.total_chunks as f64 / e2e.as_secs_f64(),
            r.calls_completed.0 as f64 / e2e.as_secs_f64()
        );
    }
    println!(
        "  tool_call.completed               : {} of {}",
        r.calls_completed.0, r.calls_completed.1
    );
    println!(
        "  message.completed                 : {} of {}",
        r.messages_completed.0, r.messages_completed.1
    );
    println!("  duplicate events                  : {}", r.duplicates);
    println!("  completed calls with unknown ids  : {}", r.unexpected);
    println!("  events by type                    : {:?}", r.by_type);
    println!();
    println!("  latency from the call-ending chunk's publish (ms)");
    println!(
        "  {:<22} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "event", "n", "p50", "p90", "p99", "p99.9", "max"
    );
    for (name, p) in [
        ("tool_call.completed", r.call_latency),
        ("message.completed", r.message_latency),
    ] {
        if let Some(p) = p {
            println!(
                "  {:<22} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name,
                p.count,
                stats::ms(p.p50),
                stats::ms(p.p90),
                stats::ms(p.p99),
                stats::ms(p.p999),
                stats::ms(p.max)
            );
        }
    }
    println!();
    stage_table(&r.metrics);
    println!();
    println!("  worker /metrics");
    for line in r.metrics.lines().filter(|l| {
        [
            "toolstream_chunks_in_total",
            "toolstream_events_out_total",
            "toolstream_batches_total",
            "toolstream_duplicates_total",
            "toolstream_dead_letters_total",
            "toolstream_batch_apply_seconds_sum",
            "toolstream_batch_apply_seconds_count",
            "toolstream_batch_flush_seconds_sum",
            "toolstream_batch_flush_seconds_count",
            "toolstream_batch_flush_seconds_bucket",
            "toolstream_batch_apply_seconds_bucket",
        ]
        .iter()
        .any(|m| l.starts_with(m))
    }) {
        println!("    {line}");
    }
    r.check(paced_args.timeout)
}

/// Where an input's time went, from the worker's own histograms (`/metrics`,
/// [`stats::STAGES`]). Bucket bounds, so each figure is "at most".
fn stage_table(metrics: &str) {
    println!("  where the time went (worker /metrics, ms, bucket upper bounds)");
    println!(
        "  {:<34} {:>9} {:>9} {:>9} {:>9}",
        "stage", "n", "p50", "p90", "p99"
    );
    for (_, what, bounded) in stats::stages(metrics) {
        match bounded {
            Some(b) => println!(
                "  {:<34} {:>9} {:>9} {:>9} {:>9}",
                what,
                b.count,
                stats::bound_ms(b.p50, b.last),
                stats::bound_ms(b.p90, b.last),
                stats::bound_ms(b.p99, b.last)
            ),
            None => println!("  {what:<34} {:>9}", "-"),
        }
    }
}
