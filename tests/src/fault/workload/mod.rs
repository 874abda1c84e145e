//! The fault workload: what producers publish, built from a seed.
//!
//! Every message is a [`MessagePlan`]: a provider stream (a recording of `tests/recordings/`
//! or a generated OpenAI chat / Anthropic stream), an optional explicit end, the tool results
//! for some of its calls (some published before the call's first chunk) and its pacing.
//! [`Workload::publish`] publishes every message in its own task, chunks spread over the
//! message's `spread`, so that a worker killed during the run is killed while input flows.
//!
//! Identities follow the README's contract: chunk `n` of `<conv>.<msg>` carries
//! `Toolstream-Seq: n` and `Nats-Msg-Id: <conv>:<msg>:<n>`; the explicit end is the next
//! sequence number with `Toolstream-Control: end`; result `k` on the message's results subject
//! carries `Toolstream-Seq: k` and `Nats-Msg-Id: <conv>:<msg>:r<k>`. Copies published on
//! purpose by [`Misbehaviour`] get a distinct `Nats-Msg-Id` (suffix `:dup…`, `:rep…`) so the
//! server keeps them and the worker has to recognize them.
//!
//! ## Layout
//! - `mod.rs` — the plans ([`MessagePlan`], [`WorkloadSpec`]) and [`Workload`]: building one
//!   from a seed, publishing it.
//! - `publish.rs` — publishing one message: its chunks, end, results and misbehaviour.
//! - `sources.rs` — recorded streams as plans, generated arguments and results.

mod publish;
mod sources;

use super::Rng;
use crate::harness::{anthropic_stream_cut, openai_chat_stream_cut, Call, Producer};
use crate::RECORDED_PROVIDERS as PROVIDERS;
use async_nats::HeaderMap;
use publish::publish_message;
use serde_json::{json, Value};
use sources::{
    arguments, big_arguments, completed_wire_ids, output, recording_plan, recordings_of,
    results_for,
};
use std::path::Path;
use std::time::{Duration, Instant};

/// A tool result for one call of a message, published on that message's results subject.
#[derive(Debug, Clone)]
pub struct ResultPlan {
    /// The call it answers (wire id).
    pub tool_call_id: String,
    /// Its output.
    pub output: String,
    /// Published before the message's first chunk (the worker keeps it until the call
    /// appears), else after the message's last chunk.
    pub before_call: bool,
}

/// Results with their results-subject sequence numbers.
pub type Sequenced<'a> = Vec<(u64, &'a ResultPlan)>;

/// One message of the workload.
#[derive(Debug, Clone)]
pub struct MessagePlan {
    /// `<conv>` token.
    pub conversation: String,
    /// `<msg>` token.
    pub message: String,
    /// `Toolstream-Provider` of every chunk.
    pub provider: String,
    /// Where the stream comes from (a recording's path under `tests/recordings/`, or
    /// `generated …`), for failure messages.
    pub source: String,
    /// The raw chunks, producer sequence numbers 0, 1, 2, …
    pub chunks: Vec<Vec<u8>>,
    /// Whether an explicit `Toolstream-Control: end` follows the chunks (as `toolstream
    /// replay` does at the end of a recording).
    pub end: bool,
    /// The producer stops after this many chunks and never sends anything else for the
    /// message (no end, no result after): the worker must end it `abandoned` / `timeout`
    /// after its idle timeout.
    pub stop_after: Option<usize>,
    /// Tool results for its calls.
    pub results: Vec<ResultPlan>,
    /// Publishing starts this long after [`Workload::publish`] starts.
    pub delay: Duration,
    /// The chunks are spread evenly over this long.
    pub spread: Duration,
}

impl MessagePlan {
    /// The chunks the producer really publishes (`stop_after` applied).
    pub fn published_chunks(&self) -> &[Vec<u8>] {
        match self.stop_after {
            Some(n) => &self.chunks[..n.min(self.chunks.len())],
            None => &self.chunks,
        }
    }

    /// Results published before the first chunk, then those published after the last one
    /// (none after when the producer stops mid-stream), with their results-subject sequence.
    pub fn results_in_order(&self) -> (Sequenced<'_>, Sequenced<'_>) {
        let mut seq = 0u64;
        let mut before = Vec::new();
        for r in self.results.iter().filter(|r| r.before_call) {
            before.push((seq, r));
            seq += 1;
        }
        let mut after = Vec::new();
        if self.stop_after.is_none() {
            for r in self.results.iter().filter(|r| !r.before_call) {
                after.push((seq, r));
                seq += 1;
            }
        }
        (before, after)
    }

    /// Whether an explicit end is published.
    pub fn publishes_end(&self) -> bool {
        self.end && self.stop_after.is_none()
    }
}

/// What a workload contains; [`Workload::build`] turns it into messages.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// Prefix of every conversation id (unique per run or round, e.g. `r3`); a valid subject
    /// token without `-` or `.`.
    pub tag: String,
    /// Seed of every random choice.
    pub seed: u64,
    /// Include every recording under `tests/recordings/<provider>/` (each in its own
    /// conversation, followed by an explicit end).
    pub recordings: bool,
    /// Conversations the generated messages are spread over.
    pub conversations: usize,
    /// Generated messages of 1–4 parallel calls, small arguments (tens of chunks each).
    pub short_messages: usize,
    /// Generated messages of about `long_chunks` chunks each (two parallel calls, fragments of
    /// a few chars).
    pub long_messages: usize,
    /// Chunks of each long message.
    pub long_chunks: usize,
    /// Size of the one huge argument (0 = none), published in fragments of
    /// 1..=`big_fragment` chars.
    pub big_argument_bytes: usize,
    /// Largest fragment of the huge argument.
    pub big_fragment: usize,
    /// Share of calls (with a known wire id) that get a tool result.
    pub result_share: f64,
    /// Share of those results published before their call.
    pub before_share: f64,
    /// Everything is published within about this long.
    pub spread: Duration,
}

impl WorkloadSpec {
    /// The CI size: every recording, 36 short and 2 long (2,000-chunk) generated messages, a
    /// 400 KB argument in fragments of 1–200 chars (~4,000 chunks), over 6 conversations,
    /// published over about 25 s.
    pub fn ci(tag: &str, seed: u64) -> WorkloadSpec {
        WorkloadSpec {
            tag: tag.to_string(),
            seed,
            recordings: true,
            conversations: 6,
            short_messages: 36,
            long_messages: 2,
            long_chunks: 2_000,
            big_argument_bytes: 400_000,
            big_fragment: 200,
            result_share: 0.5,
            before_share: 0.3,
            spread: Duration::from_secs(25),
        }
    }

    /// The same spec with every recording too.
    pub fn with_recordings(mut self) -> WorkloadSpec {
        self.recordings = true;
        self
    }

    /// A small workload without recordings, long streams or the huge argument (producer tests).
    pub fn small(tag: &str, seed: u64, messages: usize) -> WorkloadSpec {
        WorkloadSpec {
            tag: tag.to_string(),
            seed,
            recordings: false,
            conversations: 3,
            short_messages: messages,
            long_messages: 0,
            long_chunks: 0,
            big_argument_bytes: 0,
            big_fragment: 1,
            result_share: 0.5,
            before_share: 0.3,
            spread: Duration::from_secs(2),
        }
    }
}

/// The messages of one run, in a fixed order.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The spec's tag (prefix of every conversation id).
    pub tag: String,
    /// The spec's seed.
    pub seed: u64,
    /// Every message.
    pub messages: Vec<MessagePlan>,
}

/// Producer misbehaviour, applied by [`Workload::publish`].
#[derive(Debug, Clone, Default)]
pub struct Misbehaviour {
    /// Share of inputs published a second time (distinct `Nats-Msg-Id`, so the server keeps
    /// both copies).
    pub duplicate_share: f64,
    /// Chunks are published shuffled within consecutive windows of this many (0 or 1 = in
    /// order); sequence numbers stay with their chunks.
    pub reorder_window: usize,
    /// After a message is published, all of its inputs are published again this many times
    /// (distinct `Nats-Msg-Id`s): a redelivery storm.
    pub repeat: usize,
}

/// Counts of what [`Workload::publish`] published.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// Messages published to `TOOLSTREAM_IN` (copies included).
    pub inputs: usize,
    /// Of those, copies published on purpose (duplicates, storms).
    pub copies: usize,
}

const NAMES: [&str; 6] = [
    "get_weather",
    "search_docs",
    "run_sql",
    "send_email",
    "fetch_url",
    "create_ticket",
];

const WORDS: [&str; 12] = [
    "alpha",
    "beta",
    "gamma",
    "délta",
    "東京",
    "zeta",
    "eta",
    "θ",
    "iota",
    "kappa",
    "\"quoted\"",
    "back\\slash",
];

impl Workload {
    /// Builds the workload of `spec` (recordings read from `tests/recordings/`).
    pub fn build(spec: &WorkloadSpec) -> Result<Workload, String> {
        if spec.tag.is_empty() || spec.tag.contains(['.', '-', '*', '>', ' ']) {
            return Err(format!("bad workload tag {:?}", spec.tag));
        }
        let mut rng = Rng::new(spec.seed);
        let mut messages = Vec::new();
        let spread_ms = spec.spread.as_millis().max(1) as u64;
        if spec.recordings {
            let root = crate::recordings_dir();
            let mut k = 0usize;
            let mut answered_seen = 0usize;
            for provider in PROVIDERS {
                for path in recordings_of(&root.join(provider))? {
                    let mut plan = recording_plan(&root, provider, &path)?;
                    plan.conversation = format!("{}-rec{k}", spec.tag);
                    k += 1;
                    plan.delay = Duration::from_millis(rng.range(0, spread_ms * 9 / 10));
                    plan.spread = Duration::from_millis(rng.range(100, 2_000));
                    // results for completed calls with a wire id, also for some calls the
                    // recording answers itself (MCP, server tools, AI SDK tool-result parts):
                    // the provider's own result stands and the producer's is a
                    // duplicate_result dead letter, whatever the order and any crash (the
                    // reference expects both)
                    for (id, answered) in completed_wire_ids(&root, provider, &path)? {
                        // (every other call a recording answers gets one, so every workload
                        // with recordings has such duplicates, whatever the seed)
                        let publish = if answered {
                            answered_seen += 1;
                            answered_seen % 2 == 1
                        } else {
                            rng.chance(spec.result_share)
                        };
                        if publish {
                            plan.results.push(ResultPlan {
                                tool_call_id: id,
                                output: output(&mut rng),
                                before_call: rng.chance(spec.before_share),
                            });
                        }
                    }
                    messages.push(plan);
                }
            }
        }
        let conv = |i: usize| format!("{}-g{}", spec.tag, i % spec.conversations.max(1));
        for i in 0..spec.short_messages {
            let calls: Vec<Call> = (0..rng.range(1, 4))
                .map(|k| {
                    let size = rng.range(20, 600) as usize;
                    Call {
                        id: format!("call_{}_s{i}_{k}", spec.tag),
                        name: NAMES[rng.range(0, NAMES.len() as u64 - 1) as usize].to_string(),
                        args: arguments(&mut rng, size),
                    }
                })
                .collect();
            let frag_max = rng.range(3, 40) as usize;
            let mut cut = rng.fork();
            let (provider, chunks) = if rng.chance(0.5) {
                (
                    "openai-chat",
                    openai_chat_stream_cut(&calls, |_| cut.range(1, frag_max as u64) as usize),
                )
            } else {
                (
                    "anthropic",
                    anthropic_stream_cut(&calls, |_| cut.range(1, frag_max as u64) as usize),
                )
            };
            let results = results_for(&mut rng, spec, &calls);
            messages.push(MessagePlan {
                conversation: conv(i),
                message: format!("s{i}"),
                provider: provider.to_string(),
                source: format!("generated short {provider}, {} call(s)", calls.len()),
                chunks,
                end: false,
                stop_after: None,
                results,
                delay: Duration::from_millis(rng.range(0, spread_ms * 9 / 10)),
                spread: Duration::from_millis(rng.range(200, (spread_ms / 5).max(300))),
            });
        }
        for i in 0..spec.long_messages {
            // two calls of ~long_chunks/2 fragments of 1..=9 chars each (mean 5)
            let calls: Vec<Call> = (0..2)
                .map(|k| Call {
                    id: format!("toolu_{}_l{i}_{k}", spec.tag),
                    name: NAMES[(i + k) % NAMES.len()].to_string(),
                    args: arguments(&mut rng, spec.long_chunks * 5 / 2),
                })
                .collect();
            let mut cut = rng.fork();
            let (provider, chunks) = if i % 2 == 0 {
                (
                    "anthropic",
                    anthropic_stream_cut(&calls, |_| cut.range(1, 9) as usize),
                )
            } else {
                (
                    "openai-chat",
                    openai_chat_stream_cut(&calls, |_| cut.range(1, 9) as usize),
                )
            };
            let results = results_for(&mut rng, spec, &calls);
            messages.push(MessagePlan {
                conversation: conv(i + 1),
                message: format!("l{i}"),
                provider: provider.to_string(),
                source: format!("generated long {provider}, {} chunks", chunks.len()),
                chunks,
                end: false,
                stop_after: None,
                results,
                delay: Duration::from_millis(rng.range(0, spread_ms / 10)),
                spread: Duration::from_millis(spread_ms * 8 / 10),
            });
        }
        if spec.big_argument_bytes > 0 {
            let calls = vec![Call {
                id: format!("call_{}_big", spec.tag),
                name: "store_document".to_string(),
                args: big_arguments(&mut rng, spec.big_argument_bytes),
            }];
            let mut cut = rng.fork();
            let chunks =
                openai_chat_stream_cut(&calls, |_| cut.range(1, spec.big_fragment as u64) as usize);
            let results = results_for(&mut rng, spec, &calls);
            messages.push(MessagePlan {
                conversation: conv(0),
                message: "big".to_string(),
                provider: "openai-chat".to_string(),
                source: format!(
                    "generated openai-chat, {} byte argument in {} chunks",
                    spec.big_argument_bytes,
                    chunks.len()
                ),
                chunks,
                end: false,
                stop_after: None,
                results,
                delay: Duration::from_millis(rng.range(0, spread_ms / 20)),
                spread: Duration::from_millis(spread_ms * 9 / 10),
            });
        }
        Ok(Workload {
            tag: spec.tag.clone(),
            seed: spec.seed,
            messages,
        })
    }

    /// The plan of `conv`/`msg`.
    pub fn message(&self, conv: &str, msg: &str) -> Option<&MessagePlan> {
        self.messages
            .iter()
            .find(|m| m.conversation == conv && m.message == msg)
    }

    /// Inputs published without misbehaviour (chunks, ends, results).
    pub fn input_count(&self) -> usize {
        self.messages
            .iter()
            .map(|m| {
                let (b, a) = m.results_in_order();
                m.published_chunks().len() + usize::from(m.publishes_end()) + b.len() + a.len()
            })
            .sum()
    }

    /// Publishes every message (one task each, paced by its `delay` and `spread`) with
    /// `misbehaviour`; returns when everything was published (PubAck received) or the first
    /// failure.
    pub async fn publish(
        &self,
        producer: &Producer,
        misbehaviour: &Misbehaviour,
    ) -> Result<Published, String> {
        let start = Instant::now();
        let mut rng = Rng::new(self.seed ^ 0xB0B);
        let mut tasks = Vec::new();
        for plan in &self.messages {
            let plan = plan.clone();
            let producer = producer.clone();
            let misbehaviour = misbehaviour.clone();
            let rng = rng.fork();
            tasks.push(tokio::spawn(async move {
                publish_message(&producer, &plan, &misbehaviour, rng, start).await
            }));
        }
        let mut total = Published::default();
        let mut first_error = None;
        for t in tasks {
            match t.await {
                Ok(Ok(p)) => {
                    total.inputs += p.inputs;
                    total.copies += p.copies;
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("publish task failed: {e}"));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bug this pins: the workload published no producer result for a call its recording
    /// answers itself (from before `duplicate_result`), so the rule that the provider's own
    /// result stands and the producer's is a dead letter was never exercised under faults.
    #[test]
    fn recordings_get_producer_results_also_for_calls_they_answer_themselves() {
        let w = Workload::build(&WorkloadSpec::small("t", 7, 0).with_recordings()).unwrap();
        let root = crate::recordings_dir();
        let mut answered_with_producer_result = 0;
        for provider in PROVIDERS {
            for path in recordings_of(&root.join(provider)).unwrap() {
                for (id, answered) in completed_wire_ids(&root, provider, &path).unwrap() {
                    let published = w
                        .messages
                        .iter()
                        .any(|m| m.results.iter().any(|r| r.tool_call_id == id));
                    if answered && published {
                        answered_with_producer_result += 1;
                    }
                }
            }
        }
        assert!(
            answered_with_producer_result >= 2,
            "{answered_with_producer_result} call(s) answered by their recording got a producer \
             result too"
        );
    }
}
