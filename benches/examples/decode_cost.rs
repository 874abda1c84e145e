//! In-process driver for counting what decoding one chunk costs, per provider, under
//! callgrind: instruction counts are repeatable where wall time on a shared machine is not.
//!
//! Every set of chunks is decoded by [`chunk_model::decode::decode_routed`] (what the worker
//! calls) inside a function of its own, so a profile splits the cost by set:
//!
//! - `typical_<provider>` — the provider's typical tool-call chunk
//!   ([`toolstream_benches::decode_inputs::TYPICAL`], the `typical/<provider>` bodies of the
//!   decode bench), `--iters` times;
//! - `harness_openai_chat` — the perf harness's typical workload (`--messages` openai-chat
//!   messages of 100 chunks with two parallel calls, as
//!   `toolstream_throughput::streams::openai_chat` makes them: mostly argument fragments);
//! - `recorded_<provider>` — every chunk of every recording under
//!   `tests/recordings/<provider>/`, `--rounds` times.
//!
//! It prints how many chunks each function decoded; instructions per chunk are the function's
//! inclusive instructions divided by that (this includes dropping the events decoded):
//!
//! ```text
//! cargo build --release -p toolstream-benches --example decode_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/decode.cg \
//!     target/release/examples/decode_cost > /tmp/decode.counts
//! callgrind_annotate --inclusive=yes /tmp/decode.cg | grep -E 'decode_cost::(typical|harness|recorded)_'
//! ```
//!
//! `--only <set>` runs one set; with callgrind collecting only inside `decode_routed`, the
//! total is then exactly what decoding that set cost (the figure the worker pays per chunk):
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/one.cg \
//!     --toggle-collect='chunk_model::decode::decode_routed' \
//!     target/release/examples/decode_cost --only harness_openai_chat
//! callgrind_annotate /tmp/one.cg | grep 'PROGRAM TOTALS'
//! ```
//!
//! `benches/decode_cost.sh` does that for every set and prints instructions per chunk.
//!
//! Without valgrind it runs the same loops and prints the counts (and the events decoded, a
//! checksum of sorts: the same inputs must give the same figures before and after a change).

use chunk_model::decode::{decode_routed, Route};
use chunk_model::{ChunkEvent, DecodeError, Provider};
use std::hint::black_box;
use toolstream_benches::arg;
use toolstream_benches::decode_inputs::{recorded, TYPICAL};

type Routed = Result<Vec<(Route, ChunkEvent)>, DecodeError>;

/// Decodes every chunk of `chunks` as `provider` `times` times; returns (chunks, events).
#[inline(always)]
fn run(provider: Provider, chunks: &[Vec<u8>], times: usize) -> (usize, usize) {
    let mut events = 0;
    for _ in 0..times {
        for chunk in chunks {
            let routed: Routed = decode_routed(black_box(provider), black_box(chunk));
            events += routed.map_or(0, |r| r.len());
        }
    }
    (chunks.len() * times, events)
}

// (each function does something of its own, so the compiler cannot fold them into one)
macro_rules! sets {
    ($($typical:ident, $recorded:ident => $provider:expr;)*) => {
        $(
            #[inline(never)]
            fn $typical(chunks: &[Vec<u8>], times: usize) -> (usize, usize) {
                black_box(stringify!($typical));
                run($provider, chunks, times)
            }

            #[inline(never)]
            fn $recorded(chunks: &[Vec<u8>], times: usize) -> (usize, usize) {
                black_box(stringify!($recorded));
                run($provider, chunks, times)
            }
        )*

        /// (provider, typical set, recorded set)
        #[allow(clippy::type_complexity)]
        const SETS: &[(Provider, fn(&[Vec<u8>], usize) -> (usize, usize), fn(&[Vec<u8>], usize) -> (usize, usize))] = &[
            $(($provider, $typical, $recorded),)*
        ];
    };
}

sets! {
    typical_openai_chat, recorded_openai_chat => Provider::OpenaiChat;
    typical_openai_responses, recorded_openai_responses => Provider::OpenaiResponses;
    typical_anthropic, recorded_anthropic => Provider::Anthropic;
    typical_gemini, recorded_gemini => Provider::Gemini;
    typical_bedrock, recorded_bedrock => Provider::Bedrock;
    typical_ollama, recorded_ollama => Provider::Ollama;
    typical_ai_sdk, recorded_ai_sdk => Provider::AiSdk;
}

#[inline(never)]
fn harness_openai_chat(chunks: &[Vec<u8>], times: usize) -> (usize, usize) {
    black_box("harness_openai_chat");
    run(Provider::OpenaiChat, chunks, times)
}

fn report(set: &str, (chunks, events): (usize, usize)) {
    println!("{set:<28} {chunks:>8} chunks {events:>8} events");
}

/// `--only <set>`: run that set alone (its name as printed), else all.
fn wanted(set: &str) -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--only") {
        Some(i) => args.get(i + 1).is_some_and(|only| only == set),
        None => true,
    }
}

fn main() {
    let iters = arg("--iters", 20_000);
    let messages = arg("--messages", 200);
    let rounds = arg("--rounds", 100);

    if wanted("harness_openai_chat") {
        let harness: Vec<Vec<u8>> = (0..messages)
            .flat_map(|m| {
                toolstream_throughput::streams::openai_chat(m % 200, m / 200, 2, 100).chunks
            })
            .collect();
        report("harness_openai_chat", harness_openai_chat(&harness, 1));
    }

    for (provider, typical, recorded_set) in SETS {
        let name = format!("typical_{}", provider.as_str());
        if wanted(&name) {
            let body = TYPICAL
                .iter()
                .find(|(p, _)| p == provider)
                .map(|(_, b)| vec![b.as_bytes().to_vec()])
                .unwrap_or_default();
            report(&name, typical(&body, iters));
        }
        let name = format!("recorded_{}", provider.as_str());
        if wanted(&name) {
            let chunks = recorded(*provider);
            report(&name, recorded_set(&chunks, rounds));
        }
    }
}
