//! Measures the memory the store needs for open streams (issue 8): peak RSS (`VmHWM` of
//! `/proc/self/status`) and time, on a real sled store in a temporary directory, applying
//! OpenAI chat chunks and flushing once per 256 inputs like the worker (and draining the
//! outbox like the relay).
//!
//! Modes (one per process, since the peak is per process):
//! - `open N K [FRAG]` — opens N streams, each with a started call and K bytes of argument
//!   text in fragments of FRAG bytes (default 64), interleaved round-robin like concurrent
//!   streams; none of them ends. Reports peak RSS.
//! - `sustained MINUTES CONCURRENT K [FRAG]` — keeps CONCURRENT streams open for MINUTES:
//!   each time a stream has received its K bytes it ends (finish + `[DONE]`, its call
//!   completes), its tool's result follows at once (one result input; set `OSM_NO_RESULTS=1`
//!   for none: then every call awaits its result, which the count bound of
//!   `retention_max_messages` never deletes) and a new stream takes its place.
//!   `Store::tick` runs every second. RSS is
//!   sampled every 5 seconds (`t_s rss_mib hwm_mib completed_messages open_streams inputs
//!   retained_messages tombstones`; the last two are `-` when `retention_max_messages` is 0).
//!
//! Figures of the issue:
//! ```sh
//! cargo run --release -p assembler --example open_streams_memory -- open 10000 100
//! cargo run --release -p assembler --example open_streams_memory -- open 100000 100
//! cargo run --release -p assembler --example open_streams_memory -- open 2000 100000 1024
//! cargo run --release -p assembler --example open_streams_memory -- open 2048 524288 4096
//! cargo run --release -p assembler --example open_streams_memory -- sustained 5 20000 4096 256
//! ```
//! (`open 2048 524288 4096` is 1 GiB of open argument text.) Set
//! `TOOLSTREAM_CONFIG_JSON='{"storage_cache_bytes":...}'` to try other assembler settings.
//!
//! Measured on the shared 2-core machine (peak RSS; throughput is noisy there):
//!
//! | mode | before (text in RAM, sled cache 1 GiB) | after (text in store, 64 MiB, 10,000 states) |
//! | --- | --- | --- |
//! | `open 10000 100` | 70 MiB | 67 MiB |
//! | `open 100000 100` | 527–542 MiB (9,901 inputs/s) | 193–208 MiB (15,067 inputs/s, same quiet run) |
//! | `open 2000 100000 1024` (191 MiB of text) | 516 MiB | 94 MiB |
//! | `open 2048 524288 4096` (1 GiB of text) | 1,714 MiB | 141 MiB |
//!
//! Sustained load with retention deleting during the run (`retention_ms` 60 s, so deletes
//! start a minute in):
//! ```sh
//! TOOLSTREAM_CONFIG_JSON='{"retention_ms":60000}' \
//!   cargo run --release -p assembler --example open_streams_memory -- sustained 7 20000 4096 256
//! ```
//! Before the packed fingerprints and joined argument pieces (about 42 sled keys per completed
//! 20-chunk message: one fingerprint per number, one argument piece per flushed fragment),
//! RSS jumped by ~140 MiB when retention started deleting (124 MiB at 56 s, 265 at 74 s) and
//! stayed there: median 281 MiB from 120 s to the end (420 s, 30,530 messages). After (about
//! 6 keys per message): no jump, median 139 MiB over the same window, 139–143 MiB from 240 s
//! to the end (33,749 messages). Same machine, both runs at the same time. A 10-minute run
//! after (`sustained 10 ...`): 155–158 MiB from 150 s to 603 s, 71,108 messages. Where it went
//! (heaptrack, before, 5,000 streams, 2 min, 20 s retention: heap peak 139 MiB ≈ RSS, so not
//! allocator fragmentation; `MALLOC_ARENA_MAX=2` did not change RSS either): sled's per-page
//! state (`PageCache::link`: a page record and its list of log fragments for every page,
//! cached or not) 33 MiB, node contents in sled's cache 27 MiB, sled's fixed start-up
//! allocation 20 MiB, node rewrites 12 MiB, the store's own open calls 5 MiB. After: heap
//! peak 92 MiB, per-page state 8 MiB, node rewrites 5 MiB. Without retention (`sustained 6
//! 20000 4096 256`), RSS grows by 1.1 KB per completed message kept (before: 2.2 KB), 0.7 KB
//! with a 16 MiB sled cache (before: 2.6 KB): bounded by `retention_ms` × the completion rate.
//! The open-stream figures did not move (this session, runs side by side under load):
//! `open 100000 100` 236 MiB before, 213 MiB after (alone-ish: 184 / 244 MiB, the figure
//! varies with load); `open 2048 524288 4096` 144 / 146 MiB. glibc keeps ~30 MiB more than
//! the heap after bursts (sled's 512 KiB log buffers raise its dynamic mmap threshold):
//! `sustained 1 20000 4096 256` 131 MiB, with `MALLOC_MMAP_THRESHOLD_=131072` 100 MiB.
//!
//! Retention by count (`retention_max_messages`, default 50,000 messages and as many
//! tombstones): history bounded by configuration instead of by completion rate ×
//! `retention_ms`. The runs below never reach `retention_ms` (7 days); only the count bound
//! deletes. Measured at 2d4a0ad, when the count bound deleted every message and this example
//! sent no results; since 0583a49 the bound deletes a message whose tool is still running (no
//! result yet) last, so the example answers every call at once (the same deletions; the runs
//! at the end of this section are with answers; `OSM_NO_RESULTS=1` for none). Each pair ran side by side on the
//! shared 2-core machine (`0` = no count bound,
//! the behaviour before); medians of the 5 s samples in the window after both counts reached
//! the bound, and the growth per completed message there (least squares on the samples):
//! ```sh
//! osm=target/release/examples/open_streams_memory   # cargo build --release -p assembler --example open_streams_memory
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":0}' $osm sustained 26 20000 4096 256
//! $osm sustained 26 20000 4096 256                   # the default, 50,000
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":0}' $osm sustained 16 2000 4096 256
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":50000}' $osm sustained 16 2000 4096 256
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":0}' $osm sustained 12 2000 256 64
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":50000}' $osm sustained 12 2000 256 64
//! TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":N}' $osm sustained 8 20000 4096 256  # N = 0, 5000, 20000
//! ```
//!
//! | run | window | no count bound | count bound |
//! | --- | --- | --- | --- |
//! | `sustained 26 20000 4096 256`, bound 50,000 (default) | 1,290–1,564 s | 204.5 MiB (199 → 211), +462 B per message, 118,505 → 144,216 messages | 186 MiB (186–186), +0 B, 97,901 → 113,689 messages, 50,000 + 50,000 kept |
//! | `sustained 16 2000 4096 256`, bound 50,000 | 720–965 s | 137 MiB (130 → 150), +605 B per message (240–965 s) | 128 MiB (127–132), +119 B, 115,054 → 135,857 messages |
//! | `sustained 12 2000 256 64`, bound 50,000 | 480–720 s | 137.5 MiB (123 → 143), +227 B per message (240–720 s) | 145 MiB (141–145), +15 B (300–720 s), 172,741 → 231,144 messages |
//! | `sustained 8 20000 4096 256`, bounds 5,000 / 20,000 | 360–485 s | 157 → 167 MiB, +1,259 B per message | 5,000: 149–150 MiB, +112 B; 20,000: 153–156 MiB, +230 B (tombstones still filling) |
//!
//!
//! At HEAD (cc17abd) with every call answered, `sustained 7 2000 256 64` side by side, 240–420 s
//! (`TOOLSTREAM_CONFIG_JSON='{"retention_max_messages":N}'`, N = 0, 5000; the default unset):
//! no bound 114 MiB (108 → 122), +216 B per message; bound 5,000: 94 MiB (89 → 94), +42 B;
//! bound 50,000 (default, reached at 211 s): 148 MiB (146 → 155), +168 B, still settling 3
//! minutes after reaching the bound (the 12-minute run above settled at 141–145 MiB). The same
//! with `OSM_NO_RESULTS=1` and the bound 5,000 (`sustained 3 2000 256 64`) under 37a286d, which
//! never deleted a running tool's message by count: 86,693 kept at 3 minutes. At 0583a49
//! (those go last, not never; `sustained 4 2000 256 64`, 120–240 s, side by side): bound 5,000
//! 63–64 MiB flat, 5,036–5,182 kept; no bound 91 → 101 MiB.
//!
//! So: without the bound RSS grows for as long as messages are kept (0.2–1.3 KB per message,
//! more for larger messages: sled's per-page state follows the stored bytes); with it RSS is
//! flat once the counts reach it. What a kept message costs depends on its size, so the bound
//! holds memory only as far as message sizes are bounded (a bytes bound would be tighter).
//! Costs seen: the first deletes raise RSS by a step (+30 MiB at 60–90 s in the 256-byte run:
//! sled rewriting nodes, as with `retention_ms`), and deleting takes time from applying (the
//! bounded runs applied 16–20% fewer inputs: 1,587 vs 1,964/s, 2,849 vs 3,410/s, 2,575 vs
//! 3,149/s), as retention by time does once it deletes. The open-stream peaks, re-checked
//! with the bound in place (no message completes there, so it does not apply; run alone right
//! after): `open 100000 100` 211 MiB, `open 2048 524288 4096` 139 MiB.

use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::Provider;
use std::time::{Duration, Instant};

const BATCH: usize = 256;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn chunk(id: Option<&str>, args: &str) -> Vec<u8> {
    let mut call = serde_json::json!({"index": 0, "type": "function",
        "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["function"]["name"] = "lookup".into();
    }
    serde_json::to_vec(
        &serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]}),
    )
    .unwrap_or_default()
}

const FINISH: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;

/// The worker's loop in small: apply, one flush per 256 inputs, relay drains the outbox.
struct Driver {
    store: Store,
    in_batch: usize,
    applied: u64,
    started: Instant,
    last_tick: Instant,
}

impl Driver {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn apply(&mut self, conv: &str, msg: &str, seq: u64, body: &[u8]) -> Result<()> {
        self.apply_kind(InputKind::Chunk, conv, msg, seq, body)
    }

    fn apply_kind(
        &mut self,
        kind: InputKind,
        conv: &str,
        msg: &str,
        seq: u64,
        body: &[u8],
    ) -> Result<()> {
        let input = Input {
            kind,
            conversation_id: conv,
            message_id: msg,
            provider: (kind == InputKind::Chunk).then_some(Provider::OpenaiChat),
            seq: Seq::Producer(seq),
            control: None,
            body,
            origin: None,
        };
        let now = self.now_ms();
        let verdict = self.store.apply(&input, now)?;
        if matches!(verdict, assembler::Applied::DeadLettered { .. }) {
            return Err(format!("{conv}/{msg} #{seq} dead-lettered: {verdict:?}").into());
        }
        self.applied += 1;
        self.in_batch += 1;
        if self.in_batch >= BATCH {
            self.end_batch()?;
        }
        Ok(())
    }

    fn end_batch(&mut self) -> Result<()> {
        self.in_batch = 0;
        self.store.flush()?;
        loop {
            let rows = self.store.outbox_peek(1024)?;
            if rows.is_empty() {
                break;
            }
            for r in rows {
                self.store.outbox_remove(r.key)?;
            }
        }
        if self.last_tick.elapsed() >= Duration::from_secs(1) {
            self.last_tick = Instant::now();
            let now = self.now_ms();
            self.store.tick(now)?;
        }
        Ok(())
    }
}

fn config() -> Result<Config> {
    match std::env::var("TOOLSTREAM_CONFIG_JSON") {
        Ok(json) => Ok(serde_json::from_str(&json)?),
        Err(_) => Ok(Config::default()),
    }
}

fn arg(args: &[String], i: usize, default: Option<usize>) -> Result<usize> {
    match args.get(i) {
        Some(s) => Ok(s.replace('_', "").parse()?),
        None => default.ok_or_else(|| format!("missing argument {i}").into()),
    }
}

fn names(i: usize) -> (String, String, String) {
    (
        format!("conv{}", i / 100),
        format!("msg{i}"),
        format!("call_{i}"),
    )
}

fn open(args: &[String]) -> Result<()> {
    let n = arg(args, 2, None)?;
    let k = arg(args, 3, None)?;
    let frag = arg(args, 4, Some(64))?.max(1);
    let dir = tempfile::tempdir()?;
    let mut config = config()?;
    config.max_open_streams = config.max_open_streams.max(n);
    config.max_argument_bytes = config.max_argument_bytes.max(k + 16);
    config.idle_timeout_ms = u64::MAX / 4;
    let store = Store::open(&dir.path().join("db"), config)?;
    let base = status_kib("VmRSS:");
    let mut d = Driver {
        store,
        in_batch: 0,
        applied: 0,
        started: Instant::now(),
        last_tick: Instant::now(),
    };
    let body = chunk(None, &"a".repeat(frag));
    let rounds = k.div_ceil(frag);
    for i in 0..n {
        let (conv, msg, id) = names(i);
        d.apply(&conv, &msg, 0, &chunk(Some(&id), "{\"q\":\""))?;
    }
    let mut last = Instant::now();
    for r in 0..rounds {
        for i in 0..n {
            let (conv, msg, _) = names(i);
            d.apply(&conv, &msg, 1 + r as u64, &body)?;
        }
        if last.elapsed() >= Duration::from_secs(10) {
            last = Instant::now();
            eprintln!(
                "  round {}/{rounds}: rss {:.0} MiB, peak {:.0} MiB",
                r + 1,
                mib(status_kib("VmRSS:")),
                mib(status_kib("VmHWM:"))
            );
        }
    }
    d.end_batch()?;
    let secs = d.started.elapsed().as_secs_f64();
    println!(
        "open {n} streams x {k} bytes (fragments of {frag}; {:.0} MiB of open argument text): \
         open_streams {}, {} inputs in {secs:.1} s ({:.0}/s), rss at start {:.0} MiB, \
         rss now {:.0} MiB, peak rss {:.0} MiB",
        (n * rounds * frag) as f64 / 1048576.0,
        d.store.open_streams(),
        d.applied,
        d.applied as f64 / secs,
        mib(base),
        mib(status_kib("VmRSS:")),
        mib(status_kib("VmHWM:")),
    );
    Ok(())
}

fn sustained(args: &[String]) -> Result<()> {
    let minutes = arg(args, 2, None)?;
    let concurrent = arg(args, 3, None)?.max(1);
    let k = arg(args, 4, None)?;
    let frag = arg(args, 5, Some(64))?.max(1);
    let answer = std::env::var("OSM_NO_RESULTS").is_err();
    let dir = tempfile::tempdir()?;
    let mut config = config()?;
    config.max_open_streams = config.max_open_streams.max(concurrent);
    config.max_argument_bytes = config.max_argument_bytes.max(k + 16);
    let store = Store::open(&dir.path().join("db"), config)?;
    let mut d = Driver {
        store,
        in_batch: 0,
        applied: 0,
        started: Instant::now(),
        last_tick: Instant::now(),
    };
    let body = chunk(None, &"a".repeat(frag));
    let close = chunk(None, "\"}");
    let rounds = k.div_ceil(frag) as u64;
    // slot → (stream number, next seq); streams start staggered so they end staggered.
    let mut slots: Vec<(usize, u64)> = (0..concurrent).map(|i| (i, 0)).collect();
    let mut next_stream = concurrent;
    let mut completed = 0u64;
    let deadline = Duration::from_secs(60 * minutes as u64);
    let mut last_sample = Instant::now();
    println!(
        "t_s rss_mib hwm_mib completed_messages open_streams inputs retained_messages \
         tombstones"
    );
    let sample = |d: &Driver, completed: u64| {
        // `-` when `retention_max_messages` is 0 (nothing is counted)
        let (kept, tombstones) = match d.store.retained() {
            Some(r) => (r.messages.to_string(), r.tombstones.to_string()),
            None => ("-".to_string(), "-".to_string()),
        };
        println!(
            "{:.0} {:.0} {:.0} {completed} {} {} {kept} {tombstones}",
            d.started.elapsed().as_secs_f64(),
            mib(status_kib("VmRSS:")),
            mib(status_kib("VmHWM:")),
            d.store.open_streams(),
            d.applied
        );
    };
    sample(&d, completed);
    'outer: loop {
        for (slot, (stream, seq)) in slots.iter_mut().enumerate() {
            let (conv, msg, id) = names(*stream);
            // stagger: slot s joins in round s % rounds
            let stagger = (slot as u64) % (rounds + 3);
            if *seq == 0 && d.applied < stagger * concurrent as u64 {
                continue;
            }
            match *seq {
                0 => d.apply(&conv, &msg, 0, &chunk(Some(&id), "{\"q\":\""))?,
                s if s <= rounds => d.apply(&conv, &msg, s, &body)?,
                s if s == rounds + 1 => d.apply(&conv, &msg, s, &close)?,
                s if s == rounds + 2 => d.apply(&conv, &msg, s, FINISH)?,
                s => {
                    d.apply(&conv, &msg, s, b"[DONE]")?;
                    if answer {
                        // the agent's tool answers at once (the count bound deletes a message
                        // whose tool is still running last)
                        let body = format!("{{\"tool_call_id\":\"{id}\",\"output\":\"ok\"}}");
                        d.apply_kind(InputKind::Result, &conv, &msg, 0, body.as_bytes())?;
                    }
                    completed += 1;
                    *stream = next_stream;
                    next_stream += 1;
                    *seq = 0;
                    continue;
                }
            }
            *seq += 1;
            if last_sample.elapsed() >= Duration::from_secs(5) {
                last_sample = Instant::now();
                sample(&d, completed);
                if d.started.elapsed() >= deadline {
                    break 'outer;
                }
            }
        }
    }
    d.end_batch()?;
    let secs = d.started.elapsed().as_secs_f64();
    println!(
        "sustained {minutes} min, {concurrent} concurrent streams x {k} bytes (fragments of \
         {frag}): {completed} messages completed, {} inputs ({:.0}/s), peak rss {:.0} MiB",
        d.applied,
        d.applied as f64 / secs,
        mib(status_kib("VmHWM:"))
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("open") => open(&args),
        Some("sustained") => sustained(&args),
        _ => Err("usage: open_streams_memory open N K [FRAG] | \
                  sustained MINUTES CONCURRENT K [FRAG]"
            .into()),
    }
}
