//! Backlogs to drain: every input as a producer publishes it (subject, `Toolstream-*` headers,
//! `Nats-Msg-Id` per the README's contract), in the order concurrent producers interleave them.
//!
//! - [`typical`] — openai-chat messages of 100 chunks with two parallel calls (the shape most
//!   traffic has), 200 conversations streaming at once.
//! - [`mixed`] — the fault workload's mix, repeated: every provider's recordings (parallel
//!   calls, text between calls, errors, truncation, server tools), generated short and long
//!   (2,000-chunk) streams, one 400 KB argument in 1–200 char fragments per copy, and tool
//!   results (some before their call).

use crate::streams;
use async_nats::HeaderMap;
use bytes::Bytes;
use chunk_model::wire::{headers, msg_id, InputKind, Subjects};
use std::collections::VecDeque;
use toolstream_testkit::fault::{Workload, WorkloadSpec};

/// One input message.
#[derive(Debug, Clone)]
pub struct Input {
    /// Its subject.
    pub subject: String,
    /// Its headers, `Nats-Msg-Id` included.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

/// A backlog and what draining it must produce.
#[derive(Debug, Clone)]
pub struct Backlog {
    /// `typical` or `mixed`.
    pub name: &'static str,
    /// Every input, in publish order.
    pub inputs: Vec<Input>,
    /// Messages in it: each ends with exactly one `message.completed`.
    pub messages: usize,
}

impl Backlog {
    /// Chunks (inputs on chunk subjects).
    pub fn chunks(&self) -> usize {
        self.inputs
            .iter()
            .filter(|i| i.subject.contains(".chunks."))
            .count()
    }
}

/// Builds the named backlog with at least `target` inputs.
pub fn build(name: &str, target: usize) -> anyhow::Result<Backlog> {
    match name {
        "typical" => Ok(typical(target)),
        "mixed" => mixed(target),
        other => anyhow::bail!("unknown workload {other:?} (typical, mixed)"),
    }
}

fn chunk_input(
    subjects: &Subjects,
    conv: &str,
    msg: &str,
    provider: &str,
    seq: u64,
    body: Vec<u8>,
) -> Input {
    let mut h = HeaderMap::new();
    h.insert(headers::PROVIDER, provider);
    h.insert(headers::SEQ, seq.to_string().as_str());
    h.insert(
        headers::MSG_ID,
        msg_id::msg_id(conv, msg, msg_id::Input::Chunk(seq)).as_str(),
    );
    Input {
        subject: subjects.input(InputKind::Chunk, conv, msg),
        headers: h,
        body: Bytes::from(body),
    }
}

/// Round-robin over the per-message queues: the order concurrent producers interleave in.
fn interleave(mut queues: Vec<VecDeque<Input>>) -> Vec<Input> {
    let mut out = Vec::with_capacity(queues.iter().map(VecDeque::len).sum());
    while !queues.is_empty() {
        queues.retain_mut(|q| match q.pop_front() {
            Some(input) => {
                out.push(input);
                true
            }
            None => false,
        });
    }
    out
}

/// 200 conversations, each streaming 100-chunk, two-call openai-chat messages one after
/// the other, until `target` chunks.
pub fn typical(target: usize) -> Backlog {
    const CONVERSATIONS: usize = 200;
    const CHUNKS: usize = 100;
    let subjects = Subjects::new("toolstream");
    let messages = target.div_ceil(CHUNKS).max(1);
    let mut inputs = Vec::with_capacity(messages * CHUNKS);
    let waves = messages.div_ceil(CONVERSATIONS);
    let mut made = 0;
    for m in 0..waves {
        let mut queues = Vec::new();
        for c in 0..CONVERSATIONS {
            if made == messages {
                break;
            }
            made += 1;
            let stream = streams::openai_chat(c, m, 2, CHUNKS);
            let (conv, msg) = (format!("conv-{c}"), format!("c{c}m{m}"));
            queues.push(
                stream
                    .chunks
                    .into_iter()
                    .zip(0u64..)
                    .map(|(body, seq)| {
                        chunk_input(&subjects, &conv, &msg, "openai-chat", seq, body)
                    })
                    .collect(),
            );
        }
        inputs.extend(interleave(queues));
    }
    Backlog {
        name: "typical",
        inputs,
        messages,
    }
}

/// Copies of the fault suite's CI workload (distinct conversations each) until `target`
/// inputs.
pub fn mixed(target: usize) -> anyhow::Result<Backlog> {
    let subjects = Subjects::new("toolstream");
    let mut inputs = Vec::new();
    let mut messages = 0;
    let mut copy = 0u64;
    while inputs.len() < target {
        let workload = Workload::build(&WorkloadSpec::ci(&format!("mix{copy}"), 7 + copy))
            .map_err(anyhow::Error::msg)?;
        copy += 1;
        let mut queues = Vec::with_capacity(workload.messages.len());
        for plan in &workload.messages {
            messages += 1;
            let (conv, msg) = (plan.conversation.as_str(), plan.message.as_str());
            let mut q = VecDeque::new();
            let (before, after) = plan.results_in_order();
            let result = |seq: u64, call: &str, output: &str| {
                let mut h = HeaderMap::new();
                h.insert(headers::SEQ, seq.to_string().as_str());
                h.insert(
                    headers::MSG_ID,
                    msg_id::msg_id(
                        conv,
                        msg,
                        msg_id::Input::Results(&[msg_id::ResultItem::Whole(call)]),
                    )
                    .as_str(),
                );
                Input {
                    subject: subjects.input(InputKind::Result, conv, msg),
                    headers: h,
                    body: Bytes::from(
                        serde_json::json!({"tool_call_id": call, "output": output}).to_string(),
                    ),
                }
            };
            for (seq, r) in &before {
                q.push_back(result(*seq, &r.tool_call_id, &r.output));
            }
            for (body, seq) in plan.published_chunks().iter().zip(0u64..) {
                q.push_back(chunk_input(
                    &subjects,
                    conv,
                    msg,
                    &plan.provider,
                    seq,
                    body.clone(),
                ));
            }
            if plan.publishes_end() {
                let seq = plan.chunks.len() as u64;
                let mut h = HeaderMap::new();
                h.insert(headers::PROVIDER, plan.provider.as_str());
                h.insert(headers::SEQ, seq.to_string().as_str());
                h.insert(headers::CONTROL, headers::CONTROL_END);
                h.insert(
                    headers::MSG_ID,
                    msg_id::msg_id(conv, msg, msg_id::Input::End(seq)).as_str(),
                );
                q.push_back(Input {
                    subject: subjects.input(InputKind::Chunk, conv, msg),
                    headers: h,
                    body: Bytes::new(),
                });
            }
            for (seq, r) in &after {
                q.push_back(result(*seq, &r.tool_call_id, &r.output));
            }
            queues.push(q);
        }
        inputs.extend(interleave(queues));
    }
    Ok(Backlog {
        name: "mixed",
        inputs,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_has_the_asked_size_and_interleaves_conversations() {
        let b = typical(1_000);
        assert_eq!(b.messages, 10);
        assert_eq!(b.chunks(), 1_000);
        // the first ten inputs are the first chunk of ten different messages
        let firsts: std::collections::HashSet<&str> =
            b.inputs[..10].iter().map(|i| i.subject.as_str()).collect();
        assert_eq!(firsts.len(), 10);
    }

    #[test]
    fn mixed_has_every_recorded_provider_and_results() {
        let b = mixed(1).expect("mixed workload");
        assert!(b.messages > 40, "{} messages", b.messages);
        let providers: std::collections::HashSet<String> = b
            .inputs
            .iter()
            .filter_map(|i| i.headers.get(headers::PROVIDER).map(|v| v.to_string()))
            .collect();
        for p in toolstream_testkit::RECORDED_PROVIDERS {
            assert!(providers.contains(p), "{p} missing from {providers:?}");
        }
        assert!(b.inputs.iter().any(|i| i.subject.contains(".results.")));
    }
}
