//! Publishing input the way a producer does: the contract's headers, PubAck awaited, retried
//! while the server is away; and paced OpenAI streams for tests that kill things mid-flow.

use super::streams::{openai_chat_stream, Call};
use super::WAIT;
use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::HeaderMap;
use chunk_model::wire::{headers, InputKind, Subjects};
use std::time::{Duration, Instant};

/// Publishes input the way a producer does: headers of the contract, PubAck awaited, retried
/// while the server is away.
#[derive(Clone)]
pub struct Producer {
    pub js: jetstream::Context,
    pub prefix: String,
}

impl Producer {
    /// A producer for the default prefix.
    pub fn new(js: jetstream::Context) -> Producer {
        Producer {
            js,
            prefix: "toolstream".to_string(),
        }
    }

    /// Publishes `body` on `subject` with `headers` and `Nats-Msg-Id = msg_id`, retrying until
    /// a PubAck arrives (bounded by [`WAIT`]); panics when none does.
    pub async fn publish(&self, subject: &str, headers: HeaderMap, msg_id: &str, body: &[u8]) {
        if let Err(e) = self.try_publish(subject, headers, msg_id, body).await {
            panic!("{e}");
        }
    }

    /// [`Producer::publish`] returning the failure instead of panicking.
    pub async fn try_publish(
        &self,
        subject: &str,
        headers: HeaderMap,
        msg_id: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let p = PublishMessage::build()
                .headers(headers.clone())
                .message_id(msg_id)
                .payload(body.to_vec().into());
            let result = match self.js.send_publish(subject.to_string(), p).await {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if Instant::now() > deadline {
                        return Err(format!("publish to {subject} failed for {WAIT:?}: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Publishes chunk number `seq` of a message's stream.
    pub async fn chunk(&self, conv: &str, msg: &str, provider: &str, seq: u64, body: &[u8]) {
        let mut h = HeaderMap::new();
        h.insert(headers::PROVIDER, provider);
        h.insert(headers::SEQ, seq.to_string().as_str());
        let subject = Subjects::new(&self.prefix).input(InputKind::Chunk, conv, msg);
        self.publish(&subject, h, &format!("{conv}:{msg}:{seq}"), body)
            .await;
    }

    /// Publishes chunk number `seq` of a message's stream straight to its partition's subject
    /// (`<prefix>.p.<k>.chunks.<conv>.<msg>`, `k` of `partitions`), as the deploy mapping
    /// would put it: for tests on a plain server without the mapping.
    #[allow(clippy::too_many_arguments)]
    pub async fn partitioned_chunk(
        &self,
        partitions: u32,
        conv: &str,
        msg: &str,
        provider: &str,
        seq: u64,
        body: &[u8],
    ) {
        let mut h = HeaderMap::new();
        h.insert(headers::PROVIDER, provider);
        h.insert(headers::SEQ, seq.to_string().as_str());
        let k = Subjects::partition_of(partitions, conv);
        let subject = format!("{}.p.{k}.chunks.{conv}.{msg}", self.prefix);
        self.publish(&subject, h, &format!("{conv}:{msg}:{seq}"), body)
            .await;
    }

    /// Publishes a whole OpenAI chat stream carrying `calls` as message `msg`.
    pub async fn openai_stream(&self, conv: &str, msg: &str, calls: &[Call]) {
        for (seq, body) in openai_chat_stream(calls).iter().enumerate() {
            self.chunk(conv, msg, "openai-chat", seq as u64, body).await;
        }
    }

    /// Publishes a whole tool result on the results subject of `msg`.
    pub async fn result(&self, conv: &str, msg: &str, seq: u64, tool_call_id: &str, output: &str) {
        let mut h = HeaderMap::new();
        h.insert(headers::SEQ, seq.to_string().as_str());
        let body = serde_json::json!({"tool_call_id": tool_call_id, "output": output});
        let subject = Subjects::new(&self.prefix).input(InputKind::Result, conv, msg);
        self.publish(
            &subject,
            h,
            &format!("{conv}:{msg}:r{seq}"),
            body.to_string().as_bytes(),
        )
        .await;
    }
}

/// Streams message `i` (conversation `c{i}`, message `m{i}`) as the OpenAI chat chunks of
/// `calls_of(i)` for every `i` in `0..messages`, one task per message, pausing `pace` between
/// chunks so that a test can kill or restart things while input is still flowing.
pub fn spawn_paced_openai_streams(
    producer: &Producer,
    messages: usize,
    calls_of: fn(usize) -> Vec<Call>,
    pace: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..messages)
        .map(|i| {
            let producer = producer.clone();
            tokio::spawn(async move {
                for (seq, body) in openai_chat_stream(&calls_of(i)).iter().enumerate() {
                    producer
                        .chunk(
                            &format!("c{i}"),
                            &format!("m{i}"),
                            "openai-chat",
                            seq as u64,
                            body,
                        )
                        .await;
                    tokio::time::sleep(pace).await;
                }
            })
        })
        .collect()
}

/// `n` conversation ids `<tag>-<i>` that partition `k` of `partitions` holds.
pub fn conversations_of(partitions: u32, k: u32, n: usize, tag: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .filter(|c| Subjects::partition_of(partitions, c) == k)
        .take(n)
        .collect()
}
