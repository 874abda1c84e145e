//! `toolstream publish`: sends a recorded provider stream (SSE, NDJSON or a JSON array, split
//! by `chunk_model::framing`) or tool results to JetStream the way a producer should
//! (docs/contracts.md, "Input"), each message confirmed by a PubAck. Ids:
//! `chunk_model::wire::msg_id` (one builder, format in its docs).
//!
//! **Chunks** go one per frame, byte for byte, to `<prefix>.chunks.<conv>.<msg>` with
//! `Toolstream-Provider` and `Toolstream-Seq` numbered from `--seq-start` (default 0), so a
//! producer can continue a message's stream in a later command. `--end` sends an explicit end
//! (`Toolstream-Control: end`, empty body) numbered right after this command's chunks: the
//! worker orders a message's chunks by `Toolstream-Seq`, so an end with the next expected
//! number is applied after every chunk before it, and waits parked behind a gap like any
//! chunk. (An end without a number would be applied as soon as it is delivered, ending the
//! message while earlier chunks still wait behind a gap; an end numbered like an applied chunk
//! is a duplicate the worker drops.) Without chunks, `--end` therefore needs `--seq-start N`,
//! N = how many chunks the message's stream already has. Its id contains `end`, so it never
//! collides with a chunk id.
//!
//! **Results** (`--results`) go one per frame to `<prefix>.results.<conv>.<msg>`, each parsed
//! with `chunk_model::decode_result` (a frame that is not a tool result is refused: the worker
//! would dead-letter it) because its id is derived from the `tool_call_id`s it carries. They
//! carry **no** `Toolstream-Seq`: the worker orders and dedupes a results stream by the
//! JetStream stream sequence then, so every stored results message is applied once and a
//! second command's results are applied too. With producer numbers the results stream of a
//! message would have to be numbered contiguously from 0 across every command and executor
//! that ever answers it; two commands each sending number 0 made the second a duplicate in the
//! worker even under a fresh id. Results are independent of each other (matched by call id),
//! so there is no gap to detect; a call's streamed pieces sent by one command are stored, and
//! so delivered, in the order sent.
//!
//! **Duplicates**: a PubAck that says `duplicate` means the input stream already held a
//! message with that id (within its duplicate window), so the server dropped this one. That is
//! an error naming the message, unless `--retry` says the run resends on purpose; then it is
//! reported as "already stored". The server sees a repeated id only within the input stream's
//! duplicate window (JetStream's default, 2 minutes); later, a repeated chunk is stored again
//! and the worker drops it by its `Toolstream-Seq` when the bytes are the same; a whole result
//! for a call that already has one is a `duplicate_result` dead letter (a call keeps one
//! result; README, "Dead letters").
//!
//! Used by the quickstart, the tests and for manual debugging.

use anyhow::{bail, Context};
use bytes::Bytes;
use chunk_model::wire::msg_id::{msg_id, Input, ResultItem};
use chunk_model::wire::{self, InputKind, Subjects};
use chunk_model::{framing, Provider, ResultInput};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// How many publishes may await their PubAck at once.
const IN_FLIGHT: usize = 256;

/// Arguments of `toolstream publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// Server, subject prefix, auth and TLS (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
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
    /// They are sent without `Toolstream-Seq`, with ids made of their tool_call_ids.
    #[arg(long, conflicts_with = "end")]
    pub results: bool,
    /// After the last chunk, send an explicit end (`Toolstream-Control: end`) numbered after
    /// it. Without chunks (no FILE), pass `--seq-start N`, N = the chunks the message already has.
    #[arg(long)]
    pub end: bool,
    /// Number of the first chunk (`Toolstream-Seq`), to continue a message's stream that an
    /// earlier command started. For results: the number of each call's first streamed piece.
    #[arg(long, value_name = "N")]
    pub seq_start: Option<u64>,
    /// This run resends messages on purpose: ones the stream already holds are reported as
    /// already stored instead of failing the command.
    #[arg(long)]
    pub retry: bool,
    /// The recorded stream (`-` for stdin). Optional with `--end`.
    #[arg(required_unless_present = "end")]
    pub file: Option<PathBuf>,
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outgoing {
    /// What it is, for messages ("seq 3", "end (seq 5)", "results frame 0").
    label: String,
    /// Its `Nats-Msg-Id`.
    id: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

/// What a publish run did, printed at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Published {
    /// Messages confirmed by a PubAck.
    pub acked: usize,
    /// Of those, the ones the stream reported as duplicates (already stored), as
    /// (label, id).
    pub duplicates: Vec<(String, String)>,
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
    let frames = match &args.file {
        Some(file) => read_frames(file)?,
        None => Vec::new(),
    };
    let messages = messages(&args, frames)?;
    let published = runtime.block_on(run(&args, &subject, messages))?;
    let stream = if published.stream.is_empty() {
        "-"
    } else {
        published.stream.as_str()
    };
    let dups = published.duplicates.len();
    if dups > 0 && !args.retry {
        let listed: Vec<String> = published
            .duplicates
            .iter()
            .take(10)
            .map(|(label, id)| format!("{label} (Nats-Msg-Id {id})"))
            .collect();
        bail!(
            "{} of {} message(s) to {subject} NOT stored: stream {stream} already holds a message \
             with the same Nats-Msg-Id, so the server dropped {}: {}{}. An earlier command sent \
             these ids: continue a message's chunks with --seq-start N (N = chunks already \
             sent); a call's result is stored once. Pass --retry when resending on purpose.",
            dups,
            published.acked,
            if dups == 1 { "it" } else { "them" },
            listed.join(", "),
            if dups > listed.len() { ", ..." } else { "" }
        );
    }
    eprintln!(
        "toolstream publish: {} message(s) to {subject} acked by stream {stream}{}",
        published.acked,
        if dups > 0 {
            format!(" ({dups} already stored: duplicates, expected with --retry)")
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
        if let Err(e) = wire::check_token(token) {
            bail!("{what} {token:?} is not a valid subject token: it {e}");
        }
    }
    let kind = if args.results {
        InputKind::Result
    } else {
        InputKind::Chunk
    };
    let prefix = args.client.resolve()?.subject_prefix;
    Ok(Subjects::new(&prefix).input(kind, &args.conversation, &args.message))
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

/// The provider header: the flag, or detected from the chunks (none for results, or for an
/// end sent alone: the worker takes the provider an earlier chunk named).
fn provider(args: &PublishArgs, frames: &[Vec<u8>]) -> anyhow::Result<Option<Provider>> {
    if let Some(name) = &args.provider {
        return Ok(Some(name.parse::<Provider>()?));
    }
    if args.results || frames.is_empty() {
        return Ok(None);
    }
    match frames.iter().find_map(|f| chunk_model::detect_provider(f)) {
        Some(p) => Ok(Some(p)),
        None => bail!(
            "could not detect the provider of {}: pass --provider",
            args.file
                .as_ref()
                .map_or_else(|| "the input".to_string(), |f| f.display().to_string())
        ),
    }
}

/// Every message of the run, in order, with its headers and id.
fn messages(args: &PublishArgs, frames: Vec<Vec<u8>>) -> anyhow::Result<Vec<Outgoing>> {
    let (conv, msg) = (args.conversation.as_str(), args.message.as_str());
    let start = args.seq_start.unwrap_or(0);
    let provider = provider(args, &frames)?;
    let provider_header = |headers: &mut Vec<(&'static str, String)>| {
        if let Some(p) = provider {
            headers.push((wire::headers::PROVIDER, p.as_str().to_string()));
        }
    };
    let mut out = Vec::with_capacity(frames.len() + 1);
    if args.results {
        // per call: the number of its next streamed piece
        let mut pieces: HashMap<String, u64> = HashMap::new();
        for (i, body) in frames.into_iter().enumerate() {
            let results = chunk_model::decode_result(&body).map_err(|e| {
                anyhow::anyhow!(
                    "results frame {i} is not a tool result (the worker would dead-letter it): {e}"
                )
            })?;
            let items: Vec<ResultItem<'_>> = results
                .iter()
                .map(|r| match r {
                    ResultInput::Complete(r) => ResultItem::Whole(&r.tool_call_id),
                    ResultInput::Delta { tool_call_id, .. } => {
                        let next = pieces.entry(tool_call_id.clone()).or_insert(start);
                        *next += 1;
                        ResultItem::Delta(tool_call_id, *next - 1)
                    }
                    ResultInput::Done { tool_call_id, .. } => ResultItem::Done(tool_call_id),
                })
                .collect();
            let calls: Vec<&str> = results.iter().map(ResultInput::tool_call_id).collect();
            let mut headers = Vec::new();
            provider_header(&mut headers);
            out.push(Outgoing {
                label: format!("results frame {i} (call {})", calls.join(", ")),
                id: msg_id(conv, msg, Input::Results(&items)),
                headers,
                body,
            });
        }
        return Ok(out);
    }
    if args.end && frames.is_empty() && args.seq_start.is_none() {
        bail!(
            "--end without chunks ends a stream an earlier command sent: pass --seq-start N, N = \
             the number of chunks that stream has (the end must carry the next Toolstream-Seq, \
             or the worker drops it as a duplicate of chunk 0)"
        );
    }
    let mut seq = start;
    for body in frames {
        let mut headers = Vec::new();
        provider_header(&mut headers);
        headers.push((wire::headers::SEQ, seq.to_string()));
        out.push(Outgoing {
            label: format!("seq {seq}"),
            id: msg_id(conv, msg, Input::Chunk(seq)),
            headers,
            body,
        });
        seq += 1;
    }
    if args.end {
        let mut headers = Vec::new();
        provider_header(&mut headers);
        headers.push((wire::headers::SEQ, seq.to_string()));
        headers.push((
            wire::headers::CONTROL,
            wire::headers::CONTROL_END.to_string(),
        ));
        out.push(Outgoing {
            label: format!("end (seq {seq})"),
            id: msg_id(conv, msg, Input::End(seq)),
            headers,
            body: Vec::new(),
        });
    }
    Ok(out)
}

/// Connects, publishes every message in order with bounded pipelining, awaits every PubAck.
async fn run(
    args: &PublishArgs,
    subject: &str,
    messages: Vec<Outgoing>,
) -> anyhow::Result<Published> {
    let (_, client) = args.client.connect("toolstream-publish").await?;
    let js = async_nats::jetstream::new(client.clone());
    let mut out = Published::default();
    let mut pending = FuturesOrdered::new();
    for m in messages {
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &m.headers {
            headers.insert(*name, value.as_str());
        }
        headers.insert(wire::headers::MSG_ID, m.id.as_str());
        let ack = js
            .publish_with_headers(subject.to_string(), headers, Bytes::from(m.body))
            .await
            .with_context(|| format!("publishing {} to {subject}", m.label))?;
        let (label, id) = (m.label, m.id);
        pending.push_back(async move { (label, id, ack.await) });
        if pending.len() >= IN_FLIGHT {
            if let Some((label, id, result)) = pending.next().await {
                record(&mut out, label, id, subject, result)?;
            }
        }
    }
    while let Some((label, id, result)) = pending.next().await {
        record(&mut out, label, id, subject, result)?;
    }
    client
        .flush()
        .await
        .context("flushing the NATS connection")?;
    Ok(out)
}

/// Counts one PubAck or turns its failure into a clear error.
fn record(
    out: &mut Published,
    label: String,
    id: String,
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
                out.duplicates.push((label, id));
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
            bail!("PubAck for {label} on {subject} failed: {err}{hint}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(results: bool, conv: &str) -> PublishArgs {
        PublishArgs {
            client: crate::cli::connection::ConnectionArgs {
                subject_prefix: Some("ts".into()),
                ..Default::default()
            },
            provider: None,
            conversation: conv.into(),
            message: "m1".into(),
            results,
            end: false,
            seq_start: None,
            retry: false,
            file: Some(PathBuf::from("x")),
        }
    }

    fn header<'a>(m: &'a Outgoing, name: &str) -> Option<&'a str> {
        m.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    const CHUNK: &[u8] = br#"{"id":"x","object":"chat.completion.chunk","choices":[]}"#;

    #[test]
    fn chunks_are_numbered_from_seq_start_and_the_end_right_after_them() {
        let mut a = args(false, "c1");
        a.seq_start = Some(5);
        a.end = true;
        let out = messages(&a, vec![CHUNK.to_vec(), CHUNK.to_vec()]).unwrap();
        let seqs: Vec<_> = out.iter().map(|m| header(m, "Toolstream-Seq")).collect();
        assert_eq!(seqs, [Some("5"), Some("6"), Some("7")]);
        let ids: Vec<&str> = out.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            ["chunks.c1.m1.5", "chunks.c1.m1.6", "chunks.c1.m1.end.7"]
        );
        assert_eq!(header(&out[2], "Toolstream-Control"), Some("end"));
        assert!(out[2].body.is_empty());
    }

    #[test]
    fn an_end_alone_needs_the_number_of_chunks_already_sent() {
        let mut a = args(false, "c1");
        a.end = true;
        a.file = None;
        let err = messages(&a, Vec::new()).unwrap_err().to_string();
        assert!(err.contains("--seq-start"), "{err}");
        a.seq_start = Some(9);
        let out = messages(&a, Vec::new()).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].id, "chunks.c1.m1.end.9");
        assert_eq!(header(&out[0], "Toolstream-Seq"), Some("9"));
        assert_eq!(header(&out[0], "Toolstream-Provider"), None);
    }

    #[test]
    fn results_carry_no_seq_and_ids_of_their_calls() {
        let frames = vec![
            br#"{"tool_call_id":"call_a","output":"1"}"#.to_vec(),
            br#"{"tool_call_id":"call_b","delta":"x"}"#.to_vec(),
            br#"{"tool_call_id":"call_b","delta":"y"}"#.to_vec(),
            br#"{"tool_call_id":"call_b","done":true}"#.to_vec(),
            br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t:1","content":"a"},
                {"type":"tool_result","tool_use_id":"t.2","content":"b"}]}"#
                .to_vec(),
        ];
        let out = messages(&args(true, "c1"), frames).unwrap();
        let ids: Vec<&str> = out.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "results.c1.m1.call_a",
                "results.c1.m1.call_b:d0",
                "results.c1.m1.call_b:d1",
                "results.c1.m1.call_b:done",
                "results.c1.m1.t%3A1.t%2E2",
            ]
        );
        assert!(out.iter().all(|m| header(m, "Toolstream-Seq").is_none()));
        let bad = messages(&args(true, "c1"), vec![b"{}".to_vec()]);
        assert!(bad.is_err());
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
