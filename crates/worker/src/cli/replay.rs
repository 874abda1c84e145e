//! `toolstream replay`: runs recorded streams through the real assembler on a sled store
//! (temporary, or `--data-dir`) and prints the events, one JSON object per line, exactly as
//! `toolstream run` would publish them. No server needed, except for `--from-nats`.
//!
//! Three sources:
//! - **A provider stream** (SSE or NDJSON, `-` for stdin): each FILE is one message of the
//!   conversation `replay` (message id: the file name without extension, made a valid subject
//!   token; `_2`, `_3`, … when two files share a name). Chunks get producer sequence numbers
//!   0, 1, 2, … and a logical clock (one millisecond per chunk), so no timeout fires during a
//!   replay. The end of a file is an explicit end of stream: a call the recording never
//!   finished ends `abandoned`, never `completed`.
//! - **A `toolstream record` file** (detected by its header line, `cli/input_log.rs`): the
//!   inputs with their subjects, headers and stream sequence numbers, applied as the worker
//!   applied them, each at its JetStream time, the timers run up to the recording's time.
//! - **`--from-nats --conversation C [--message M]`**: the same, read straight from the input
//!   stream (an ordered consumer: the worker is not affected). `--diff` compares the events
//!   produced with the ones on the events stream and exits non-zero on a difference.
//!
//! Errors (unreadable file, unknown provider, undetectable format) are one line on stderr and a
//! non-zero exit; invalid tool calls are events, not errors. Chunks the decoder rejects are
//! reported on stderr (they would go to the dead-letter subject), the replay goes on, and the
//! exit is non-zero; so is a provider stream none of whose chunks meant anything to the
//! decoder (a wrong `--provider`).

use super::input_log::{self, RecordedInput};
use anyhow::{anyhow, bail, Context};
use assembler::{Applied, Control, Input, InputKind, Seq, Store};
use chunk_model::framing;
use chunk_model::{ChunkEvent, Event, Provider};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `toolstream replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Provider stream format (openai-chat, openai-responses, anthropic, gemini, bedrock,
    /// ollama, ai-sdk, or a vendor alias such as openai, azure, groq, mistral). Detected from
    /// the chunks when omitted. Not for recordings or --from-nats: their headers name it.
    #[arg(long, short)]
    pub provider: Option<String>,
    /// Keep the sled store here instead of a temporary one (inspect it afterwards with
    /// `toolstream inspect --data-dir`, or replay more files into the same conversation).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Conversation: the one provider streams are replayed into [default: replay]; with
    /// --from-nats, the one read from the input stream.
    #[arg(long)]
    pub conversation: Option<String>,
    /// With --from-nats: only this message's chunks and results.
    #[arg(long, requires = "from_nats")]
    pub message: Option<String>,
    /// Show, for a person, each chunk as sent, what it decoded to and the events it caused,
    /// instead of JSON lines.
    #[arg(long, conflicts_with = "diff")]
    pub timeline: bool,
    /// Read the conversation's inputs from the input stream instead of files.
    #[arg(long, requires = "conversation", conflicts_with = "files")]
    pub from_nats: bool,
    /// Print the events as JSON lines even on a terminal (they are JSON lines whenever stdout
    /// is not a terminal; on one, a line per event for a person).
    #[arg(long, conflicts_with = "timeline")]
    pub json: bool,
    /// With --from-nats: compare the events produced with those on the events stream; print
    /// every difference and exit non-zero when there is one.
    #[arg(long, requires = "from_nats")]
    pub diff: bool,
    /// Input stream name (with --from-nats).
    #[arg(long, env = "TOOLSTREAM_INPUT_STREAM", default_value = "TOOLSTREAM_IN")]
    pub input_stream: String,
    /// Events stream name (with --diff).
    #[arg(
        long,
        env = "TOOLSTREAM_EVENTS_STREAM",
        default_value = "TOOLSTREAM_EVENTS"
    )]
    pub events_stream: String,
    /// Server, subject prefix, auth and TLS, for --from-nats (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
    /// Recorded streams: SSE (`data:` lines) or NDJSON, detected per file, or files written by
    /// `toolstream record`; `-` reads standard input.
    #[arg(required_unless_present = "from_nats")]
    pub files: Vec<PathBuf>,
}

/// Whether the events are shown for a person: at a terminal, unless `--json` (or the timeline,
/// or `--diff`, which compares JSON).
fn human(args: &ReplayArgs) -> bool {
    !args.json && !args.timeline && !args.diff && super::output::stdout_is_terminal()
}

/// The conversation provider streams are replayed into.
const DEFAULT_CONVERSATION: &str = "replay";

/// Runs the command.
pub fn main(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    if args.from_nats {
        return from_nats(&args);
    }
    let forced = match &args.provider {
        Some(name) => Some(name.parse::<Provider>()?),
        None => None,
    };
    let conversation = args
        .conversation
        .clone()
        .unwrap_or_else(|| DEFAULT_CONVERSATION.to_string());
    if let Err(e) = chunk_model::wire::check_token(&conversation) {
        bail!("--conversation {conversation:?} is not a valid subject token: it {e}");
    }
    // Read and frame every file before touching the store: a bad file fails the command
    // without printing half a replay.
    let mut sources: Vec<Source> = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let bytes = read_source(path)?;
        if let Some(recorded) = input_log::parse(&bytes) {
            let (header, inputs) =
                recorded.with_context(|| format!("{}: a toolstream recording", path.display()))?;
            if forced.is_some() {
                bail!(
                    "{}: a toolstream recording names its provider in its headers; drop --provider",
                    path.display()
                );
            }
            sources.push(Source::Recorded {
                prefix: header.subject_prefix,
                end_ms: header.recorded_at_ms.saturating_sub(SETTLE_MS),
                inputs,
            });
            continue;
        }
        let mut rec = Recording::load(path, &bytes, forced)?;
        rec.message_id = distinct(&rec.message_id, |id| {
            sources
                .iter()
                .any(|r| matches!(r, Source::Stream(r) if r.message_id == id))
        });
        sources.push(Source::Stream(rec));
    }

    let store = open_store(&args)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut clock = 0u64;
    let mut problems = Vec::new();
    for source in &sources {
        match source {
            Source::Stream(rec) => {
                let done = replay_one(&store, &args, &conversation, rec, &mut clock, &mut out)?;
                if done.rejected > 0 {
                    problems.push(format!(
                        "{}: {} of {} chunk(s) could not be decoded as {} (dead letters, see above)",
                        rec.path,
                        done.rejected,
                        rec.chunks.len(),
                        rec.provider
                    ));
                }
                if done.meaningful == 0 && !rec.chunks.is_empty() {
                    problems.push(format!(
                        "{}: none of its {} chunk(s) meant anything to the {} decoder: nothing was \
                         replayed{}",
                        rec.path,
                        rec.chunks.len(),
                        rec.provider,
                        match (forced, rec.detected) {
                            (Some(_), Some(d)) if d != rec.provider =>
                                format!(" (the chunks look like {d}: drop --provider)"),
                            _ => " (is --provider right?)".to_string(),
                        }
                    ));
                }
            }
            Source::Recorded {
                prefix,
                end_ms,
                inputs,
            } => {
                let dead = replay_inputs(&store, &args, prefix, inputs, *end_ms, &mut out)?;
                if !dead.is_empty() {
                    problems.push(format!(
                        "{} of {} input(s) were dead-lettered (see above)",
                        dead.len(),
                        inputs.len()
                    ));
                }
            }
        }
    }
    out.flush()?;
    drop(out);
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("toolstream replay: {p}");
    }
    Ok(ExitCode::FAILURE)
}

/// The worker's settled watermark trails the newest input by up to this much
/// (consume/watermark.rs): timers are run up to a recording's time minus it.
const SETTLE_MS: u64 = 2_000;

/// What one replay source is.
enum Source {
    /// A provider stream: one message.
    Stream(Recording),
    /// Inputs recorded off the input stream (`toolstream record`).
    Recorded {
        prefix: String,
        end_ms: u64,
        inputs: Vec<RecordedInput>,
    },
}

/// A file's bytes, or standard input for `-`.
fn read_source(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| anyhow!("cannot read standard input: {e}"))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| anyhow!("cannot read {}: {e}", path.display()))
}

/// The scratch store: temporary, or `--data-dir`.
fn open_store(args: &ReplayArgs) -> anyhow::Result<Store> {
    let config = assembler::Config::default();
    Ok(match &args.data_dir {
        Some(dir) => {
            crate::run::private_dir::ensure_private(dir)?;
            Store::open(dir, config).with_context(|| format!("open store at {}", dir.display()))?
        }
        None => Store::open_temporary(config).context("open temporary store")?,
    })
}

/// Applies recorded inputs (a recording file, or read off the input stream), printing the
/// events (or the timeline). Returns the dead letters as (stream seq, reason).
fn replay_inputs(
    store: &Store,
    args: &ReplayArgs,
    prefix: &str,
    inputs: &[RecordedInput],
    end_ms: u64,
    out: &mut impl Write,
) -> anyhow::Result<Vec<(u64, String)>> {
    let mut providers: BTreeMap<String, Provider> = BTreeMap::new();
    let mut calls = CallsSeen::default();
    let mut failed: Option<anyhow::Error> = None;
    let done = input_log::apply(
        store,
        prefix,
        inputs,
        end_ms,
        |recorded, parsed, applied| {
            if !args.timeline || failed.is_some() {
                return;
            }
            let key = format!("{}.{}", parsed.conversation_id(), parsed.message_id());
            if let Some(p) = parsed.provider {
                providers.insert(key.clone(), p);
            }
            let provider = providers.get(&key).copied();
            let label = format!(
                "#{} {} {}{}",
                recorded.stream_seq,
                recorded.subject,
                recorded
                    .header(chunk_model::wire::headers::SEQ)
                    .map(|s| format!("seq {s}"))
                    .unwrap_or_default(),
                recorded
                    .header(chunk_model::wire::headers::CONTROL)
                    .map(|c| format!(" · {}: {c}", chunk_model::wire::headers::CONTROL))
                    .unwrap_or_default()
            );
            let result = (|| {
                writeln!(out, "{}", label.trim_end())?;
                let body = recorded.payload()?;
                let kind = parsed.kind;
                timeline_chunk(
                    out, "      ", kind, provider, &key, &body, applied, &mut calls,
                )?;
                timeline_events(store, out)
            })();
            if let Err(e) = result {
                failed = Some(e);
            }
        },
    )?;
    if let Some(e) = failed {
        return Err(e);
    }
    for (seq, reason) in &done.dead_letters {
        eprintln!("stream seq {seq}: dead letter: {reason}");
    }
    if args.timeline {
        writeln!(out, "end of recording: timers run")?;
        timeline_events(store, out)?;
    } else {
        emit(store, out, human(args))?;
    }
    Ok(done.dead_letters)
}

/// `replay --from-nats`: the conversation's inputs read off the input stream, replayed on a
/// scratch store; with `--diff`, compared with the events stream.
fn from_nats(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    if args.provider.is_some() {
        bail!("--from-nats: the inputs' headers name their provider; drop --provider");
    }
    let conv = args
        .conversation
        .as_deref()
        .context("--from-nats needs --conversation")?;
    let msg = args.message.as_deref();
    input_log::check_ids(conv, msg)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // the client's tasks (JetStream contexts, timers) need the runtime entered
    let _entered = runtime.enter();
    let progress = super::output::Progress::new("replay");
    let (config, client) = runtime.block_on(args.client.connect("toolstream-replay"))?;
    let js = async_nats::jetstream::new(client);
    let prefix = config.subject_prefix.clone();
    let inputs = runtime.block_on(input_log::read_inputs(
        &js,
        &args.input_stream,
        &prefix,
        conv,
        msg,
        None,
        |read, total| progress.show(read, total, "inputs"),
    ))?;
    progress.done();
    if inputs.is_empty() {
        bail!(
            "stream {} holds no input of conversation {conv:?}{}",
            args.input_stream,
            msg.map(|m| format!(", message {m:?}")).unwrap_or_default()
        );
    }
    let end_ms = crate::consume::watermark::now_ms().saturating_sub(SETTLE_MS);
    let store = open_store(args)?;
    if !args.diff {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let dead = replay_inputs(&store, args, &prefix, &inputs, end_ms, &mut out)?;
        out.flush()?;
        if !dead.is_empty() {
            eprintln!(
                "toolstream replay: {} of {} input(s) were dead-lettered (see above)",
                dead.len(),
                inputs.len()
            );
            return Ok(ExitCode::FAILURE);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut produced = Vec::new();
    let _ = replay_inputs(&store, args, &prefix, &inputs, end_ms, &mut produced)?;
    let produced = parse_lines(&produced)?;
    let published = runtime.block_on(published_events(
        &js,
        &args.events_stream,
        &input_log::events_filter(&prefix, conv, msg),
        &progress,
    ))?;
    progress.done();
    let differences = diff_events(&produced, &published);
    let style = super::output::Style::stdout();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for d in &differences {
        writeln!(out, "{}", style.bad(d))?;
    }
    let messages: BTreeSet<&str> = produced
        .iter()
        .chain(published.iter())
        .filter_map(|e| e["message_id"].as_str())
        .collect();
    if differences.is_empty() {
        writeln!(
            out,
            "{} {} input(s) replayed: {} event(s), the same as the {} published, in {} message(s)",
            style.good("no difference:"),
            inputs.len(),
            produced.len(),
            published.len(),
            messages.len()
        )?;
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(
            out,
            "{} {} difference(s) between the {} event(s) replayed and the {} published",
            style.bad("DIFFERENT:"),
            differences.len(),
            produced.len(),
            published.len()
        )?;
        Ok(ExitCode::FAILURE)
    }
}

/// JSON lines as values.
fn parse_lines(bytes: &[u8]) -> anyhow::Result<Vec<serde_json::Value>> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).context("an event line"))
        .collect()
}

/// The events on the events stream under `filter`; one published by reference
/// (`payload_ref`) is fetched whole from the payload bucket.
async fn published_events(
    js: &async_nats::jetstream::Context,
    stream: &str,
    filter: &str,
    progress: &super::output::Progress,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let messages = input_log::read_stream(js, stream, filter, None, |read, total| {
        progress.show(read, total, "published events")
    })
    .await?;
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let mut value: serde_json::Value = serde_json::from_slice(&m.payload)
            .with_context(|| format!("an event on {} is not JSON", m.subject))?;
        if let Some(reference) = value
            .get("payload_ref")
            .and_then(|r| serde_json::from_value::<chunk_model::PayloadRef>(r.clone()).ok())
        {
            let whole = sink::payloads::fetch(js, &reference)
                .await
                .with_context(|| format!("fetching the event behind {}", reference.object))?;
            value = serde_json::from_slice(&whole).context("an offloaded event")?;
        }
        out.push(value);
    }
    Ok(out)
}

/// Every difference between the events a replay produced and those published, per message
/// in order (messages interleave differently on the stream; within a message the order is
/// the contract). An event published twice (same `event_id`, a relay retry outside the
/// duplicate window) is one.
pub(crate) fn diff_events(
    produced: &[serde_json::Value],
    published: &[serde_json::Value],
) -> Vec<String> {
    fn by_message<'a>(
        events: &'a [serde_json::Value],
        side: &str,
        out: &mut Vec<String>,
    ) -> BTreeMap<String, Vec<&'a serde_json::Value>> {
        let mut map: BTreeMap<String, Vec<&serde_json::Value>> = BTreeMap::new();
        let mut seen: BTreeMap<String, &'a serde_json::Value> = BTreeMap::new();
        for e in events {
            let id = e["event_id"].as_str().unwrap_or_default().to_string();
            if !id.is_empty() {
                if let Some(first) = seen.get(&id) {
                    if *first != e {
                        out.push(format!(
                            "{side}: event {id} twice with different content: {}",
                            changed_fields(first, e, "").join("; ")
                        ));
                    }
                    continue;
                }
                seen.insert(id, e);
            }
            let key = format!(
                "{}/{}",
                e["conversation_id"].as_str().unwrap_or("?"),
                e["message_id"].as_str().unwrap_or("?")
            );
            map.entry(key).or_default().push(e);
        }
        map
    }
    fn name(e: &serde_json::Value) -> String {
        let mut s = e["type"].as_str().unwrap_or("?").to_string();
        if let Some(id) = e["tool_call"]["id"].as_str() {
            s.push_str(&format!(" {id}"));
        } else if let Some(id) = e["tool_result"]["tool_call_id"].as_str() {
            s.push_str(&format!(" for {id}"));
        }
        s
    }
    let mut out = Vec::new();
    let ours = by_message(produced, "replay", &mut out);
    let theirs = by_message(published, "published", &mut out);
    let keys: BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
    for key in keys {
        let empty = Vec::new();
        let (a, b) = (
            ours.get(key).unwrap_or(&empty),
            theirs.get(key).unwrap_or(&empty),
        );
        for i in 0..a.len().max(b.len()) {
            match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) if x == y => {}
                (Some(x), Some(y)) => {
                    let fields: Vec<String> = changed_fields(x, y, "");
                    out.push(format!(
                        "{key} event {i}: replay {} / published {}: {}",
                        name(x),
                        name(y),
                        fields.join("; ")
                    ));
                }
                (Some(x), None) => out.push(format!(
                    "{key} event {i}: replay produced {} ({}), never published",
                    name(x),
                    x["event_id"].as_str().unwrap_or("?")
                )),
                (None, Some(y)) => out.push(format!(
                    "{key} event {i}: published {} ({}), not produced by the replay",
                    name(y),
                    y["event_id"].as_str().unwrap_or("?")
                )),
                (None, None) => {}
            }
        }
    }
    out
}

/// The paths at which two JSON values differ, with both values (cut).
fn changed_fields(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Vec<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    changed_fields(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        &path,
                    )
                })
                .collect()
        }
        (x, y) if x == y => Vec::new(),
        (x, y) => vec![format!(
            "{} replay {} / published {}",
            if at.is_empty() { "(event)" } else { at },
            cut(&x.to_string()),
            cut(&y.to_string())
        )],
    }
}

fn cut(text: &str) -> String {
    const MAX: usize = 200;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let mut s: String = text.chars().take(MAX).collect();
    s.push('…');
    s
}

/// One provider stream, framed, with its provider.
struct Recording {
    path: String,
    message_id: String,
    provider: Provider,
    /// What the chunks look like, whatever `--provider` said.
    detected: Option<Provider>,
    chunks: Vec<Vec<u8>>,
}

impl Recording {
    fn load(path: &Path, bytes: &[u8], forced: Option<Provider>) -> anyhow::Result<Recording> {
        let name = if path.as_os_str() == "-" {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        let frames = framing::split(bytes)
            .map_err(|e| anyhow!("{name}: cannot frame the recording: {e}"))?;
        let chunks: Vec<Vec<u8>> = frames.into_iter().map(|f| f.data).collect();
        let detected = chunks.iter().find_map(|c| chunk_model::detect_provider(c));
        let provider = match forced.or(detected) {
            Some(p) => p,
            None => bail!("{name}: cannot tell the provider from the chunks; pass --provider"),
        };
        let message_id = if path.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            message_token(path)
        };
        Ok(Recording {
            path: name,
            message_id,
            provider,
            detected,
            chunks,
        })
    }
}

/// What replaying one provider stream did.
struct StreamDone {
    /// Chunks dead-lettered.
    rejected: usize,
    /// Chunk events the decoder found in the whole stream.
    meaningful: usize,
}

/// Replays one provider stream.
fn replay_one(
    store: &Store,
    args: &ReplayArgs,
    conv: &str,
    rec: &Recording,
    clock: &mut u64,
    out: &mut impl Write,
) -> anyhow::Result<StreamDone> {
    if args.timeline {
        writeln!(
            out,
            "── {} · provider {} · {} chunk(s)",
            rec.message_id,
            rec.provider,
            rec.chunks.len()
        )?;
    }
    let mut done = StreamDone {
        rejected: 0,
        meaningful: 0,
    };
    let mut calls = CallsSeen::default();
    let total = rec.chunks.len() as u64;
    for (seq, chunk) in rec.chunks.iter().enumerate() {
        *clock += 1;
        let input = Input {
            kind: InputKind::Chunk,
            conversation_id: conv,
            message_id: &rec.message_id,
            provider: Some(rec.provider),
            seq: Seq::Producer(seq as u64),
            control: None,
            body: chunk,
            origin: None,
        };
        let applied = store.apply(&input, *clock)?;
        if let Applied::DeadLettered { reason } = &applied {
            done.rejected += 1;
            eprintln!("{} chunk {seq}: {reason}", rec.message_id);
        }
        // `[DONE]` decodes as an end of stream for every provider: it says nothing about
        // whether the chunks were understood.
        done.meaningful += chunk_model::decode(rec.provider, chunk).map_or(0, |events| {
            events
                .iter()
                .filter(|e| !matches!(e, ChunkEvent::StreamEnd))
                .count()
        });
        if args.timeline {
            timeline_chunk(
                out,
                &format!("[{seq:>4}]"),
                InputKind::Chunk,
                Some(rec.provider),
                &rec.message_id,
                chunk,
                &Ok(applied),
                &mut calls,
            )?;
            timeline_events(store, out)?;
        }
    }
    // End of file = end of stream: calls the recording never ended are abandoned.
    *clock += 1;
    let end = Input {
        kind: InputKind::Chunk,
        conversation_id: conv,
        message_id: &rec.message_id,
        provider: Some(rec.provider),
        seq: Seq::Producer(total),
        control: Some(Control::End),
        body: b"",
        origin: None,
    };
    let applied = store.apply(&end, *clock)?;
    if args.timeline {
        writeln!(
            out,
            "[{total:>4}] end of recording → {}",
            describe(&applied)
        )?;
        timeline_events(store, out)?;
    } else {
        emit(store, out, human(args))?;
    }
    Ok(done)
}

/// Flushes the store (the outbox hands out only durable rows) and prints the events: JSON
/// lines, or for a person at a terminal (`human`) one aligned, colored line per event.
fn emit(store: &Store, out: &mut impl Write, human: bool) -> anyhow::Result<()> {
    store.flush().context("flush store")?;
    if !human {
        let _ = sink::jsonl::drain(store, out)?;
        return Ok(());
    }
    let mut buf = Vec::new();
    let _ = sink::jsonl::drain(store, &mut buf)?;
    let style = super::output::Style::stdout();
    let mut rows = Vec::new();
    for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: Event = serde_json::from_slice(line)?;
        let kind = event.event_type.as_str();
        let status = kind.rsplit('.').next().unwrap_or(kind);
        let mut what = String::new();
        if let Some(call) = &event.tool_call {
            what = format!("#{} {} {}", call.index, call.id, call.name);
        }
        if let Some(result) = &event.tool_result {
            what = format!("for {}", result.tool_call_id);
        }
        if let Some(calls) = &event.calls {
            what = format!("{} call(s)", calls.len());
        }
        let detail = match (&event.tool_call, &event.tool_result) {
            (Some(call), _) if !call.raw_arguments.is_empty() => {
                super::query::excerpt(&call.raw_arguments, 60)
            }
            (_, Some(result)) => super::query::excerpt(&result.output, 60),
            _ => String::new(),
        };
        let kind_shown = match status {
            "completed" if kind != "message.completed" => style.good(kind),
            "invalid" => style.bad(kind),
            "abandoned" | "orphaned" => style.warn(kind),
            _ => kind.to_string(),
        };
        rows.push(vec![
            event.message_id.clone(),
            kind_shown,
            what,
            event
                .reason
                .as_ref()
                .or(event.finish_reason.as_ref())
                .cloned()
                .unwrap_or_default(),
            detail,
        ]);
    }
    for line in super::output::columns(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Flushes and prints pending events for a person.
fn timeline_events(store: &Store, out: &mut impl Write) -> anyhow::Result<()> {
    store.flush().context("flush store")?;
    let mut buf = Vec::new();
    let _ = sink::jsonl::drain(store, &mut buf)?;
    for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: Event = serde_json::from_slice(line)?;
        let mut text = format!("       ⇒ {}", event.event_type.as_str());
        if let Some(call) = &event.tool_call {
            text.push_str(&format!(" #{} {} {}", call.index, call.id, call.name));
            if event.event_type == chunk_model::EventType::ToolCallCompleted {
                text.push_str(&format!(" {}", call.arguments));
            }
        }
        if let Some(result) = &event.tool_result {
            text.push_str(&format!(" for {}", result.tool_call_id));
        }
        if let Some(reason) = event.reason.as_ref().or(event.finish_reason.as_ref()) {
            text.push_str(&format!(" ({reason})"));
        }
        if let Some(calls) = &event.calls {
            text.push_str(&format!(" [{} call(s)]", calls.len()));
        }
        if chunk_model::decode::openai_chat::is_other_choice(&event.message_id) {
            text.push_str(&format!(" (message {})", event.message_id));
        }
        writeln!(out, "{text}")?;
    }
    Ok(())
}

/// The content indexes per message at which a call was seen, so an end at an index without
/// one (an Anthropic text block's `content_block_stop`) is not shown as a call's end.
#[derive(Default)]
struct CallsSeen {
    indexes: BTreeSet<(String, u32)>,
}

/// The longest part of a chunk shown in a timeline (the rest is counted, not hidden silently).
const SHOWN_CHARS: usize = 2_000;

/// One chunk for a person: as sent (not re-serialized), then what it decoded to, then what the
/// store did with it when that was not a plain apply.
#[allow(clippy::too_many_arguments)]
fn timeline_chunk(
    out: &mut impl Write,
    head: &str,
    kind: InputKind,
    provider: Option<Provider>,
    message: &str,
    chunk: &[u8],
    applied: &Result<Applied, assembler::StoreError>,
    calls: &mut CallsSeen,
) -> anyhow::Result<()> {
    let text = String::from_utf8_lossy(chunk);
    let shown: String = text.chars().take(SHOWN_CHARS).collect();
    let more = text.len().saturating_sub(shown.len());
    if chunk.is_empty() {
        writeln!(out, "{head} (empty body)")?;
    } else if more > 0 {
        writeln!(out, "{head} {} … ({more} more bytes)", shown.trim_end())?;
    } else {
        writeln!(out, "{head} {}", shown.trim_end())?;
    }
    let decoded = match (kind, provider) {
        (InputKind::Result, _) => chunk_model::decode_result(chunk)
            .map(|results| {
                results
                    .iter()
                    .map(|r| format!("tool result for {}", r.tool_call_id()))
                    .collect::<Vec<_>>()
            })
            .map_err(|e| e.to_string()),
        // OpenAI chat with n > 1: another choice's statements are its own message's
        (InputKind::Chunk, Some(p)) if !chunk.is_empty() => {
            chunk_model::decode::decode_routed(p, chunk)
                .map(|events| {
                    events
                        .iter()
                        .map(|(route, e)| match route {
                            chunk_model::decode::Route::Choice(k) if *k > 0 => {
                                let other =
                                    chunk_model::decode::openai_chat::choice_message(message, *k);
                                format!("choice {k}: {}", describe_chunk_event(e, &other, calls))
                            }
                            _ => describe_chunk_event(e, message, calls),
                        })
                        .collect()
                })
                .map_err(|e| e.to_string())
        }
        (InputKind::Chunk, _) => Ok(Vec::new()),
    };
    match decoded {
        Ok(lines) if lines.is_empty() && !chunk.is_empty() => {
            writeln!(out, "       · nothing about tool calls")?
        }
        Ok(lines) => {
            for l in lines {
                writeln!(out, "       · {l}")?;
            }
        }
        Err(e) => writeln!(out, "       · does not decode: {e}")?,
    }
    match applied {
        Ok(Applied::Accepted { .. }) => {}
        Ok(other) => writeln!(out, "       → {}", describe(other))?,
        Err(e) => writeln!(out, "       → store error: {e}")?,
    }
    Ok(())
}

fn describe(applied: &Applied) -> String {
    match applied {
        Applied::Accepted { events } => format!("applied, {events} event(s)"),
        Applied::Duplicate => "duplicate, ignored".to_string(),
        Applied::Parked => "parked until the sequence gap fills".to_string(),
        Applied::DeadLettered { reason } => format!("dead letter: {reason}"),
    }
}

fn describe_chunk_event(e: &ChunkEvent, message: &str, calls: &mut CallsSeen) -> String {
    fn at(r: &chunk_model::CallRef) -> String {
        let mut s = String::new();
        if let Some(i) = r.index {
            s.push_str(&format!(" index={i}"));
        }
        if let Some(id) = &r.wire_id {
            s.push_str(&format!(" id={id}"));
        }
        if let Some(item) = &r.item_id {
            s.push_str(&format!(" item={item}"));
        }
        s
    }
    match e {
        ChunkEvent::CallFragment(f) => {
            if let Some(i) = f.at.index {
                calls.indexes.insert((message.to_string(), i));
            }
            let mut s = format!("fragment{}", at(&f.at));
            if let Some(n) = &f.name {
                s.push_str(&format!(" name={n}"));
            }
            if let Some(a) = &f.arguments {
                s.push_str(&format!(" +args {a:?}"));
            }
            if !f.path_values.is_empty() {
                s.push_str(&format!(" +{} path value(s)", f.path_values.len()));
            }
            s
        }
        ChunkEvent::CallEnd(end)
            if end.at.wire_id.is_none()
                && end.at.item_id.is_none()
                && end.name.is_none()
                && end.arguments.is_none()
                && end
                    .at
                    .index
                    .is_some_and(|i| !calls.indexes.contains(&(message.to_string(), i))) =>
        {
            format!("block end{} (no tool call there)", at(&end.at))
        }
        ChunkEvent::CallEnd(end) => {
            let mut s = format!("call end{}", at(&end.at));
            if let Some(n) = &end.name {
                s.push_str(&format!(" name={n}"));
            }
            if let Some(a) = &end.arguments {
                s.push_str(&format!(" args={a}"));
            }
            s
        }
        ChunkEvent::MessageEnd { finish, reason } => format!("message end: {reason} ({finish:?})"),
        ChunkEvent::StreamEnd => "end of stream".to_string(),
        ChunkEvent::ProviderError { message } => format!("provider error: {message}"),
        ChunkEvent::ToolResult(r) => format!("tool result for {}", r.tool_call_id()),
        ChunkEvent::Reasoning(r) => format!("reasoning block [{}]", r.index),
        ChunkEvent::ResultBlock(r) => format!("tool result block [{}]", r.index),
    }
}

/// `base`, or `base_2`, `base_3`, … : the first that `taken` refuses. Two files with the same
/// name (`anthropic/parallel_calls.sse`, `bedrock/parallel_calls.ndjson`) become two messages
/// instead of the second being taken for duplicates of the first.
fn distinct(base: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}_{n}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or_else(|| base.to_string())
}

/// The file name without its extension as a message id: characters that cannot stand in a
/// subject token become `_`.
fn message_token(path: &Path) -> String {
    let name = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "message".to_string());
    chunk_model::wire::tokens::sanitize_token(&name, "message")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chunk_model::wire::is_token;

    #[test]
    fn file_names_become_subject_tokens() {
        assert_eq!(
            message_token(Path::new("/x/parallel calls.sse")),
            "parallel_calls"
        );
        assert!(is_token(&message_token(Path::new("a.b*c>d"))));
        assert!(!is_token("a.b"));
    }

    #[test]
    fn diff_names_the_message_event_and_field_that_changed_and_events_on_one_side_only() {
        let ev = |id: &str, msg: &str, finish: &str| {
            serde_json::json!({"event_id": id, "type": "message.completed",
                "conversation_id": "c", "message_id": msg, "finish_reason": finish})
        };
        let ours = vec![ev("e1", "m1", "stop"), ev("e2", "m2", "stop")];
        assert!(diff_events(&ours, &ours).is_empty());
        // other messages interleave differently on the stream: no difference
        let swapped = vec![ours[1].clone(), ours[0].clone()];
        assert!(diff_events(&ours, &swapped).is_empty());
        let changed = vec![ev("e1", "m1", "length"), ev("e2", "m2", "stop")];
        let d = diff_events(&ours, &changed);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with("c/m1 event 0") && d[0].contains("finish_reason"),
            "{d:?}"
        );
        let d = diff_events(&ours, &ours[..1]);
        assert!(d[0].contains("never published"), "{d:?}");
        // the same event id twice with different content on one side is a difference too
        let twice = vec![
            ev("e1", "m1", "stop"),
            ev("e1", "m1", "length"),
            ev("e2", "m2", "stop"),
        ];
        assert_eq!(diff_events(&ours, &twice).len(), 1);
        // an exact duplicate (a relay retry outside the duplicate window) is not
        let dup = vec![ours[0].clone(), ours[0].clone(), ours[1].clone()];
        assert!(diff_events(&ours, &dup).is_empty());
    }

    #[test]
    fn files_with_the_same_name_get_distinct_message_ids() {
        let taken = ["calls".to_string(), "calls_2".to_string()];
        assert_eq!(
            distinct("calls", |id| taken.iter().any(|t| t == id)),
            "calls_3"
        );
        assert_eq!(
            distinct("other", |id| taken.iter().any(|t| t == id)),
            "other"
        );
    }
}
