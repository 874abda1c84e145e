//! `toolstream publish`: sends a recorded provider stream (SSE, NDJSON or a JSON array, split by
//! `chunk_model::framing`) to JetStream the way a producer should (design.md, "Input
//! contract"): one message per chunk body, byte for byte, on `<prefix>.chunks.<conv>.<msg>` with
//! `Toolstream-Provider`, `Toolstream-Seq` (0-based) and `Nats-Msg-Id = <conv>:<msg>:<seq>`,
//! each confirmed by a PubAck. With `--results`, each frame is a tool-result message for
//! `<prefix>.results.<conv>.<msg>` (ids `<conv>:<msg>:r<seq>`, so they never collide with the
//! message's chunk ids in the shared input stream's duplicate window). The conversation is in
//! the id because message ids are only unique within a conversation: design.md's
//! `<msg>:<seq>` made the server drop a second conversation's `m1` chunks as duplicates.
//!
//! Used by the quickstart, the tests and for manual debugging.

use anyhow::{bail, Context};
use bytes::Bytes;
use chunk_model::{framing, Provider};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// How many publishes may await their PubAck at once.
const IN_FLIGHT: usize = 256;

/// Arguments of `toolstream publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// NATS server and subject prefix.
    #[command(flatten)]
    pub client: crate::client_args::ClientArgs,
    /// Provider stream format or vendor alias (openai-chat, anthropic, gemini, ...). When
    /// omitted for chunks, it is detected from the recording's first chunk that says.
    #[arg(long)]
    pub provider: Option<String>,
    /// Conversation id (a subject token).
    #[arg(long)]
    pub conversation: String,
    /// Message id (a subject token).
    #[arg(long)]
    pub message: String,
    /// The frames are tool results for `<prefix>.results.<conv>.<msg>`, not provider chunks.
    #[arg(long)]
    pub results: bool,
    /// After the last frame, send an explicit end (`Toolstream-Control: end`).
    #[arg(long)]
    pub end: bool,
    /// The recorded stream (`-` for stdin).
    pub file: PathBuf,
}

/// What a publish run did, printed at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Published {
    /// Messages confirmed by a PubAck.
    pub acked: usize,
    /// Of those, how many the stream reported as duplicates (already stored).
    pub duplicates: usize,
    /// The stream that stored them.
    pub stream: String,
}

/// Runs the command.
pub fn main(args: PublishArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let subject = subject(&args)?;
    let published = runtime.block_on(run(&args, &subject))?;
    eprintln!(
        "toolstream publish: {} message(s) to {subject} acked by stream {}{}",
        published.acked,
        if published.stream.is_empty() {
            "-"
        } else {
            published.stream.as_str()
        },
        if published.duplicates > 0 {
            format!(" ({} already stored: duplicates)", published.duplicates)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `<prefix>.chunks|results.<conv>.<msg>`, with the tokens checked.
fn subject(args: &PublishArgs) -> anyhow::Result<String> {
    for (what, token) in [
        ("--conversation", &args.conversation),
        ("--message", &args.message),
    ] {
        if token.is_empty() || token.contains(['.', '*', '>', ' ', '\t', '\r', '\n']) {
            bail!("{what} {token:?} is not a valid subject token (no dots, spaces or wildcards)");
        }
    }
    let kind = if args.results { "results" } else { "chunks" };
    Ok(format!(
        "{}.{kind}.{}.{}",
        args.client.subject_prefix, args.conversation, args.message
    ))
}

/// Reads the recording and returns its frames' bodies.
fn read_frames(file: &PathBuf) -> anyhow::Result<Vec<Vec<u8>>> {
    let bytes = if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).context("reading stdin")?;
        buf
    } else {
        std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
    };
    let frames = framing::split(&bytes)
        .map_err(|e| anyhow::anyhow!("splitting {} into chunks: {e}", file.display()))?;
    Ok(frames.into_iter().map(|f| f.data).collect())
}

/// The provider header: the flag, or detected from the chunks.
fn provider(args: &PublishArgs, frames: &[Vec<u8>]) -> anyhow::Result<Option<Provider>> {
    if let Some(name) = &args.provider {
        return Ok(Some(name.parse::<Provider>()?));
    }
    if args.results {
        return Ok(None);
    }
    match frames.iter().find_map(|f| chunk_model::detect_provider(f)) {
        Some(p) => Ok(Some(p)),
        None => bail!(
            "could not detect the provider of {}: pass --provider",
            args.file.display()
        ),
    }
}

/// Connects, publishes every frame in order with bounded pipelining, awaits every PubAck.
async fn run(args: &PublishArgs, subject: &str) -> anyhow::Result<Published> {
    let frames = read_frames(&args.file)?;
    let provider = provider(args, &frames)?;
    let client = args.client.connect().await?;
    let js = async_nats::jetstream::new(client.clone());

    let mut messages: Vec<(async_nats::HeaderMap, Bytes)> = Vec::with_capacity(frames.len() + 1);
    let id_kind = if args.results { ":r" } else { ":" };
    for (seq, body) in frames.into_iter().enumerate() {
        let mut headers = headers(provider, seq as u64);
        headers.insert(
            "Nats-Msg-Id",
            format!("{}:{}{id_kind}{seq}", args.conversation, args.message).as_str(),
        );
        messages.push((headers, Bytes::from(body)));
    }
    if args.end {
        let seq = messages.len() as u64;
        let mut headers = headers(provider, seq);
        headers.insert("Toolstream-Control", "end");
        headers.insert(
            "Nats-Msg-Id",
            format!("{}:{}{id_kind}{seq}", args.conversation, args.message).as_str(),
        );
        messages.push((headers, Bytes::new()));
    }

    let mut out = Published::default();
    let mut pending = FuturesOrdered::new();
    for (seq, (headers, body)) in messages.into_iter().enumerate() {
        let ack = js
            .publish_with_headers(subject.to_string(), headers, body)
            .await
            .with_context(|| format!("publishing seq {seq} to {subject}"))?;
        pending.push_back(async move { (seq, ack.await) });
        if pending.len() >= IN_FLIGHT {
            if let Some((seq, result)) = pending.next().await {
                record(&mut out, seq, subject, result)?;
            }
        }
    }
    while let Some((seq, result)) = pending.next().await {
        record(&mut out, seq, subject, result)?;
    }
    client
        .flush()
        .await
        .context("flushing the NATS connection")?;
    Ok(out)
}

/// `Toolstream-Provider` (when known) and `Toolstream-Seq`.
fn headers(provider: Option<Provider>, seq: u64) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    if let Some(p) = provider {
        headers.insert("Toolstream-Provider", p.as_str());
    }
    headers.insert("Toolstream-Seq", seq.to_string().as_str());
    headers
}

/// Counts one PubAck or turns its failure into a clear error.
fn record(
    out: &mut Published,
    seq: usize,
    subject: &str,
    result: Result<
        async_nats::jetstream::publish::PublishAck,
        async_nats::jetstream::context::PublishError,
    >,
) -> anyhow::Result<()> {
    match result {
        Ok(ack) => {
            out.acked += 1;
            if ack.duplicate {
                out.duplicates += 1;
            }
            out.stream = ack.stream;
            Ok(())
        }
        Err(err) => {
            let hint = if matches!(
                err.kind(),
                async_nats::jetstream::context::PublishErrorKind::StreamNotFound
            ) {
                " (no JetStream stream captures this subject: start `toolstream run` against this \
                 server first, it creates the input stream)"
            } else {
                ""
            };
            bail!("PubAck for seq {seq} on {subject} failed: {err}{hint}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(results: bool, conv: &str) -> PublishArgs {
        PublishArgs {
            client: crate::client_args::ClientArgs {
                nats_url: String::new(),
                subject_prefix: "ts".into(),
            },
            provider: None,
            conversation: conv.into(),
            message: "m1".into(),
            results,
            end: false,
            file: PathBuf::from("x"),
        }
    }

    #[test]
    fn subjects_follow_the_input_contract() {
        assert_eq!(subject(&args(false, "c1")).unwrap(), "ts.chunks.c1.m1");
        assert_eq!(subject(&args(true, "c1")).unwrap(), "ts.results.c1.m1");
    }

    #[test]
    fn ids_with_dots_or_wildcards_are_refused_not_silently_split() {
        for bad in ["a.b", "*", ">", "", "a b"] {
            assert!(subject(&args(false, bad)).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn provider_is_detected_from_the_first_chunk_that_names_it() {
        let frames = vec![
            b": ping".to_vec(),
            br#"{"id":"x","object":"chat.completion.chunk","choices":[]}"#.to_vec(),
        ];
        assert_eq!(
            provider(&args(false, "c"), &frames).unwrap(),
            Some(Provider::OpenaiChat)
        );
        assert_eq!(provider(&args(true, "c"), &frames).unwrap(), None);
        assert!(provider(&args(false, "c"), &[b"[DONE]".to_vec()]).is_err());
    }
}
