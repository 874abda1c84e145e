//! In-process driver for finding where a chunk's time goes, by the chunk's role in its stream.
//!
//! It applies the perf harness's typical workload (openai-chat messages of 100 chunks with two
//! parallel calls, 200 conversations streaming at once, interleaved round-robin) through a real
//! sled [`Store`] in a temporary directory, as the worker does: batches of `--batch` inputs
//! applied one commit each, then one flush, then the relay's work (peek the durable outbox
//! rows, delete them). Every apply goes through a function named after the chunk's role, so
//! a profile splits the cost by role:
//!
//! - `apply_opening` — the role chunk and the calls' start chunks;
//! - `apply_fragment` — an argument fragment (the ordinary chunk);
//! - `apply_call_end` — the `finish_reason` chunk, which ends every call (`tool_call.completed`);
//! - `apply_message_end` — `[DONE]`, which completes the message (`message.completed`);
//! - `flush_batch` and `relay_round`.
//!
//! It prints the wall time per role (µs per input, from `Instant`); for a repeatable count run
//! it under callgrind and read the same functions' inclusive instructions:
//!
//! ```text
//! cargo build --release -p toolstream-benches --example completion_cost
//! target/release/examples/completion_cost --chunks 200000
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/completion_cost --chunks 40000
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep -E 'apply_|flush_batch|relay_round'
//! ```

use assembler::{Applied, Config, Input, InputKind, Seq, Store, StoreError};
use chunk_model::Provider;
use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolstream_benches::arg;

const CONVERSATIONS: usize = 200;
const CHUNKS: usize = 100;
const CALLS: usize = 2;

/// A chunk's role in its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Opening,
    Fragment,
    CallEnd,
    MessageEnd,
}

const ROLES: [Role; 4] = [
    Role::Opening,
    Role::Fragment,
    Role::CallEnd,
    Role::MessageEnd,
];

struct Chunk {
    conv: String,
    msg: String,
    seq: u64,
    body: Vec<u8>,
    role: Role,
}

/// One message as the harness makes it (`toolstream_throughput::streams::openai_chat`), each
/// chunk with its role: the role chunk and the call starts open, the `finish_reason` chunk
/// ends the calls, `[DONE]` the message.
fn message(conv: usize, msg: usize) -> Vec<(Vec<u8>, Role)> {
    let stream = toolstream_throughput::streams::openai_chat(conv, msg, CALLS, CHUNKS);
    let last = stream.chunks.len() - 1;
    stream
        .chunks
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let role = match i {
                i if i <= CALLS => Role::Opening,
                i if i == stream.finish_index => Role::CallEnd,
                i if i == last => Role::MessageEnd,
                _ => Role::Fragment,
            };
            (body, role)
        })
        .collect()
}

/// The typical backlog: waves of one message per conversation, interleaved round-robin.
fn backlog(target: usize) -> Vec<Chunk> {
    let messages = target.div_ceil(CHUNKS).max(1);
    let mut out = Vec::with_capacity(messages * CHUNKS);
    let mut made = 0;
    for m in 0.. {
        if made == messages {
            break;
        }
        let mut queues: Vec<VecDeque<Chunk>> = Vec::new();
        for c in 0..CONVERSATIONS {
            if made == messages {
                break;
            }
            made += 1;
            let (conv, msg) = (format!("conv-{c}"), format!("c{c}m{m}"));
            queues.push(
                message(c, m)
                    .into_iter()
                    .zip(0u64..)
                    .map(|((body, role), seq)| Chunk {
                        conv: conv.clone(),
                        msg: msg.clone(),
                        seq,
                        body,
                        role,
                    })
                    .collect(),
            );
        }
        while !queues.is_empty() {
            queues.retain_mut(|q| match q.pop_front() {
                Some(c) => {
                    out.push(c);
                    true
                }
                None => false,
            });
        }
    }
    out
}

// (each role's function does something of its own, so the compiler cannot fold them into one)

fn input(c: &Chunk) -> Input<'_> {
    Input {
        kind: InputKind::Chunk,
        conversation_id: &c.conv,
        message_id: &c.msg,
        provider: Some(Provider::OpenaiChat),
        seq: Seq::Producer(c.seq),
        control: None,
        body: &c.body,
        origin: None,
    }
}

#[inline(never)]
fn apply_opening(store: &Store, c: &Chunk, now: u64) -> Result<Applied, StoreError> {
    black_box(Role::Opening);
    store.apply(&input(c), now)
}

#[inline(never)]
fn apply_fragment(store: &Store, c: &Chunk, now: u64) -> Result<Applied, StoreError> {
    black_box(Role::Fragment);
    store.apply(&input(c), now)
}

#[inline(never)]
fn apply_call_end(store: &Store, c: &Chunk, now: u64) -> Result<Applied, StoreError> {
    black_box(Role::CallEnd);
    store.apply(&input(c), now)
}

#[inline(never)]
fn apply_message_end(store: &Store, c: &Chunk, now: u64) -> Result<Applied, StoreError> {
    black_box(Role::MessageEnd);
    store.apply(&input(c), now)
}

#[inline(never)]
fn flush_batch(store: &Store) -> Result<(), StoreError> {
    store.flush()
}

/// The relay's store work for one wake-up: peek durable rows, delete them (publishing is not
/// measured here). Returns the rows delivered.
#[inline(never)]
fn relay_round(store: &Store) -> Result<usize, StoreError> {
    let mut n = 0;
    loop {
        let rows = store.outbox_peek(256)?;
        if rows.is_empty() {
            return Ok(n);
        }
        n += rows.len();
        for r in rows {
            store.outbox_remove(r.key)?;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let chunks = arg("--chunks", 100_000);
    let batch = arg("--batch", 90).max(1);
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), Config::default())?;
    let backlog = backlog(chunks);
    let mut time = [Duration::ZERO; 4];
    let mut count = [0usize; 4];
    let (mut flush_time, mut relay_time, mut flushes, mut rows) =
        (Duration::ZERO, Duration::ZERO, 0usize, 0usize);
    let mut events = 0usize;
    // every flush's wall time: the slow ones (materializations) are what a call-ending chunk
    // caught behind them waits for
    let mut each_flush: Vec<Duration> = Vec::new();
    let started = Instant::now();
    for (b, inputs) in backlog.chunks(batch).enumerate() {
        // publish times: 1 ms per batch, well inside every timeout
        let now = 1_700_000_000_000 + b as u64;
        for c in inputs {
            let t = Instant::now();
            let applied = match c.role {
                Role::Opening => apply_opening(&store, c, now)?,
                Role::Fragment => apply_fragment(&store, c, now)?,
                Role::CallEnd => apply_call_end(&store, c, now)?,
                Role::MessageEnd => apply_message_end(&store, c, now)?,
            };
            match black_box(applied) {
                Applied::Accepted { events: n } => events += n,
                other => return Err(format!("{} seq {}: {other:?}", c.msg, c.seq).into()),
            }
            let i = ROLES.iter().position(|r| *r == c.role).unwrap_or(0);
            time[i] += t.elapsed();
            count[i] += 1;
        }
        let t = Instant::now();
        flush_batch(&store)?;
        each_flush.push(t.elapsed());
        flush_time += t.elapsed();
        flushes += 1;
        let t = Instant::now();
        rows += relay_round(&store)?;
        relay_time += t.elapsed();
    }
    let total = started.elapsed();
    println!(
        "{} chunks in {:.2} s ({:.0}/s), batches of {batch}",
        backlog.len(),
        total.as_secs_f64(),
        backlog.len() as f64 / total.as_secs_f64()
    );
    for (i, role) in ROLES.iter().enumerate() {
        let per = time[i].as_secs_f64() * 1e6 / count[i].max(1) as f64;
        println!(
            "{:<12} {:>8} inputs {:>9.1} µs each {:>7.2} s",
            format!("{role:?}"),
            count[i],
            per,
            time[i].as_secs_f64()
        );
    }
    println!(
        "flush        {flushes:>8} batches {:>8.1} µs each {:>7.2} s",
        flush_time.as_secs_f64() * 1e6 / flushes.max(1) as f64,
        flush_time.as_secs_f64()
    );
    each_flush.sort();
    let at = |q: f64| {
        let i = ((each_flush.len() as f64 * q) as usize).min(each_flush.len().saturating_sub(1));
        each_flush.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "flush wall   p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
    if rows != events {
        return Err(format!("{events} events applied, {rows} delivered").into());
    }
    println!(
        "relay        {rows:>8} rows    {:>8.1} µs each {:>7.2} s",
        relay_time.as_secs_f64() * 1e6 / rows.max(1) as f64,
        relay_time.as_secs_f64()
    );
    Ok(())
}
