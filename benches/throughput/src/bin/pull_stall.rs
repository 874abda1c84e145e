//! `pull_stall`: looks for the pull stream's stalls ("Known limits" in the README: now and
//! then a drain receives nothing for about 10 s in the middle of a backlog).
//!
//! Drains a preloaded typical backlog again and again with the baselines' pull stream (the
//! worker's consumer settings, `drain::bare_stream`), acking each message as it arrives, each
//! drain on a fresh server provisioned by the worker. Whenever a second passes without a
//! message it asks the server what the consumer holds: the pull requests waiting
//! (`num_waiting`; 0 while messages are pending means the server holds no request of this
//! client's), the messages pending and unacked, the delivered and acked sequences. Prints a
//! line per drain, per such second and per pull-stream status, and a last line with the
//! drains that had a gap of a second or more.
//!
//! ```sh
//! cargo build --release -p toolstream -p toolstream-throughput
//! target/release/pull_stall --drains 100 --server debian
//! ```

use anyhow::Context;
use async_nats::jetstream::{self, AckKind};
use clap::Parser;
use futures::StreamExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;
use toolstream_throughput::{drain, server_bin, worker, workloads};

#[derive(Parser)]
#[command(
    about = "Drains a backlog again and again, saying what the server holds whenever the pull stream goes quiet"
)]
struct Args {
    /// Drains to run.
    #[arg(long, default_value_t = 30)]
    drains: usize,
    /// Inputs in the backlog (the typical workload).
    #[arg(long, default_value_t = 202_000)]
    backlog: usize,
    /// nats-server: debian, current, or a path.
    #[arg(long, default_value = "debian")]
    server: String,
    /// The worker binary that provisions each server (default: `toolstream` next to this
    /// binary).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    toolstream_throughput::runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let provisioner = worker::resolve_bin(args.worker_bin.as_deref())?;
    let server = server_bin(&args.server)?;
    let backlog = workloads::typical(args.backlog);
    let mut gapped = Vec::new();
    for n in 0..args.drains {
        let (nats, _dir) =
            drain::provisioned(&server, &provisioner, &[], Duration::from_secs(20)).await?;
        let client = async_nats::connect(nats.url()).await.context("connect")?;
        drain::preload(&client, &backlog).await?;
        let (consumer, mut messages) = drain::bare_stream(&jetstream::new(client)).await?;
        let t0 = Instant::now();
        let (mut acked, mut last, mut widest) = (0usize, Instant::now(), Duration::ZERO);
        while acked < backlog.inputs.len() {
            match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(Ok(m))) => {
                    widest = widest.max(last.elapsed());
                    m.ack_with(AckKind::Ack)
                        .await
                        .map_err(|e| anyhow::anyhow!("ack: {e}"))?;
                    acked += 1;
                    last = Instant::now();
                }
                Ok(Some(Err(e))) => println!("drain {n}: pull stream status after {acked}: {e}"),
                Ok(None) => anyhow::bail!("drain {n}: the pull stream ended"),
                Err(_) => {
                    // (a failed or slow info request is said and the drain goes on: the
                    // server or the connection may be what stalls)
                    let mut c = consumer.clone();
                    match c.info().await {
                        Ok(info) => println!(
                            "drain {n}: nothing for {:.1?} after {acked} acked: the server \
                             holds {} pull request(s), {} pending, {} unacked, delivered up \
                             to {}, acked up to {}",
                            last.elapsed(),
                            info.num_waiting,
                            info.num_pending,
                            info.num_ack_pending,
                            info.delivered.stream_sequence,
                            info.ack_floor.stream_sequence,
                        ),
                        Err(e) => println!(
                            "drain {n}: nothing for {:.1?} after {acked} acked, and no \
                             consumer info: {e}",
                            last.elapsed()
                        ),
                    }
                    if last.elapsed() > Duration::from_secs(60) {
                        anyhow::bail!("drain {n}: nothing for a minute");
                    }
                }
            }
        }
        println!(
            "drain {n}: {acked} in {:.2?}, widest gap {widest:.2?}",
            t0.elapsed()
        );
        if widest >= Duration::from_secs(1) {
            gapped.push(n);
        }
    }
    println!(
        "{} of {} drains had a gap of a second or more: {gapped:?}",
        gapped.len(),
        args.drains
    );
    Ok(())
}
