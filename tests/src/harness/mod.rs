//! Shared code of the integration tests, the fault suite and the soak: the real `toolstream`
//! binary as a child process ([`Worker`]), a producer that publishes chunks and results with
//! the contract's headers ([`Producer`]), readers of the events and dead-letter streams that
//! poll with a deadline ([`StreamLog`]), and generated provider streams
//! ([`openai_chat_stream`], [`anthropic_stream`]).
//!
//! The worker crate's tests reach this through `crates/worker/tests/common/mod.rs`, which only
//! adds the binary path Cargo gives them (`CARGO_BIN_EXE_toolstream`).
//!
//! ## Layout
//! - `mod.rs` — [`WAIT`], [`client`], [`wait_provisioned`], [`tail`]; re-exports the rest and
//!   the waits of [`crate::wait`] ([`eventually`], [`eventually_async`]).
//! - `worker.rs` — [`Worker`]: the binary as a child process (kill, restart, logs, metrics).
//! - `e2e.rs` — [`E2e`]: server + data directory + worker + client + producer, provisioned.
//! - `producer.rs` — [`Producer`], [`spawn_paced_openai_streams`].
//! - `read.rs` — [`StreamLog`], [`Read`] and the checks over events read.
//! - `streams.rs` — [`Call`] and generated OpenAI/Anthropic streams.

use async_nats::jetstream;
use std::cell::RefCell;
use std::time::Duration;

/// Default deadline for anything a test waits for.
pub const WAIT: Duration = Duration::from_secs(60);

mod e2e;
mod producer;
mod read;
mod streams;
mod worker;

pub use crate::wait::{eventually, eventually_async, POLL};
pub use e2e::E2e;
pub use producer::{conversations_of, spawn_paced_openai_streams, Producer};
pub use read::{
    assert_each_event_once, by_message, check_message, completed_messages, message_key, Read,
    StreamLog,
};
pub use streams::{
    anthropic_stream, anthropic_stream_cut, openai_chat_stream, openai_chat_stream_cut, pieces,
    pieces_by, Call,
};
pub use worker::Worker;

/// Connects a test client (retrying while the server starts).
pub async fn client(url: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await
        .expect("test client connects")
}

/// Waits until the worker has provisioned its streams and consumer.
pub async fn wait_provisioned(js: &jetstream::Context, consumer: &str) {
    eventually_async(WAIT, || async move {
        let Ok(stream) = js.get_stream("TOOLSTREAM_IN").await else {
            return false;
        };
        stream.consumer_info(consumer).await.is_ok()
            && js.get_stream("TOOLSTREAM_EVENTS").await.is_ok()
            && js.get_stream("TOOLSTREAM_DLQ").await.is_ok()
    })
    .await
    .unwrap_or_else(|| panic!("worker did not provision JetStream in time"));
}

/// Waits until `consumer` on `TOOLSTREAM_IN` has settled every input: nothing pending and
/// nothing unacknowledged. After [`WAIT`], `Err` with the last reading.
pub async fn wait_settled(js: &jetstream::Context, consumer: &str) -> Result<(), String> {
    let last = RefCell::new(String::from("no reading"));
    let last_seen = &last;
    let settled = eventually_async(WAIT, || async move {
        let reading = async {
            let stream = js
                .get_stream("TOOLSTREAM_IN")
                .await
                .map_err(|e| e.to_string())?;
            let info = stream
                .consumer_info(consumer)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((info.num_pending, info.num_ack_pending))
        };
        match reading.await {
            Ok((0, 0)) => true,
            Ok((pending, ack_pending)) => {
                *last_seen.borrow_mut() = format!("{ack_pending} ack pending, {pending} pending");
                false
            }
            Err(e) => {
                *last_seen.borrow_mut() = e;
                false
            }
        }
    })
    .await;
    settled.ok_or_else(|| format!("{consumer} did not settle its input: {}", last.borrow()))
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The partition the server's subject mapping puts each conversation on: a core publish to
/// each one's `toolstream.query.history.<conv>` (nobody answering), seen on the mapped
/// `toolstream.p.<k>.query.history.<conv>`.
pub async fn partitions_of(admin: &async_nats::Client, convs: &[String]) -> Vec<u32> {
    use futures::StreamExt;
    let mut sub = admin
        .subscribe("toolstream.p.*.query.history.*")
        .await
        .expect("subscribe to the mapped query subjects");
    admin.flush().await.expect("flush the subscription");
    let mut out = Vec::new();
    for conv in convs {
        admin
            .publish(format!("toolstream.query.history.{conv}"), "".into())
            .await
            .expect("publish a query");
        let m = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("mapped subject")
            .expect("subscription open");
        let tokens: Vec<&str> = m.subject.split('.').collect();
        assert_eq!(tokens.last(), Some(&conv.as_str()), "{}", m.subject);
        out.push(tokens[2].parse().expect("partition token"));
    }
    out
}
