//! `toolstream replay`: runs recorded provider streams through the real assembler on a sled
//! store (temporary, or `--data-dir`) and prints the events, one JSON object per line, exactly
//! as `toolstream run` would publish them. No server needed.
//!
//! Each FILE is one message of the conversation `replay` (message id: the file name without
//! extension, made a valid subject token; `_2`, `_3`, … when two files share a name). Chunks get producer sequence numbers 0, 1, 2, … and a logical clock
//! (one millisecond per chunk), so no timeout fires during a replay. The end of a file is an
//! explicit end of stream: a call the recording never finished ends `abandoned`, never
//! `completed`.
//!
//! Errors (unreadable file, unknown provider, undetectable format) are one line on stderr and a
//! non-zero exit; invalid tool calls are events, not errors. Chunks the decoder rejects are
//! reported on stderr (they would go to the dead-letter subject) and the replay goes on.

use anyhow::{anyhow, bail, Context};
use assembler::{Applied, Control, Input, InputKind, Seq, Store};
use chunk_model::framing;
use chunk_model::{ChunkEvent, Event, Provider};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `toolstream replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Provider stream format (openai-chat, openai-responses, anthropic, gemini, bedrock,
    /// ollama, ai-sdk, or a vendor alias such as openai, azure, groq, mistral). Detected from
    /// the chunks when omitted.
    #[arg(long, short)]
    pub provider: Option<String>,
    /// Keep the sled store here instead of a temporary one (inspect it afterwards, or replay
    /// more files into the same conversation).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Conversation id to replay into.
    #[arg(long, default_value = "replay")]
    pub conversation: String,
    /// Show, for a person, each chunk, what it decoded to and the events it caused, instead of
    /// JSON lines.
    #[arg(long)]
    pub timeline: bool,
    /// Recorded streams: SSE (`data:` lines) or NDJSON, detected per file.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs the command.
pub fn main(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let forced = match &args.provider {
        Some(name) => Some(name.parse::<Provider>()?),
        None => None,
    };
    if let Err(e) = chunk_model::wire::check_token(&args.conversation) {
        bail!(
            "--conversation {:?} is not a valid subject token: it {e}",
            args.conversation
        );
    }
    // Read and frame every file before touching the store: a bad file fails the command
    // without printing half a replay.
    let mut recordings: Vec<Recording> = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let mut rec = Recording::load(path, forced)?;
        rec.message_id = distinct(&rec.message_id, |id| {
            recordings.iter().any(|r| r.message_id == id)
        });
        recordings.push(rec);
    }

    let config = assembler::Config::default();
    let store = match &args.data_dir {
        Some(dir) => {
            crate::run::private_dir::ensure_private(dir)?;
            Store::open(dir, config).with_context(|| format!("open store at {}", dir.display()))?
        }
        None => Store::open_temporary(config).context("open temporary store")?,
    };

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut clock = 0u64;
    let mut rejected = 0usize;
    for rec in &recordings {
        rejected += replay_one(&store, &args, rec, &mut clock, &mut out)?;
    }
    out.flush()?;
    if rejected > 0 {
        eprintln!("toolstream: {rejected} chunk(s) could not be decoded (dead letters, see above)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One recorded stream, framed, with its provider.
struct Recording {
    message_id: String,
    provider: Provider,
    chunks: Vec<Vec<u8>>,
}

impl Recording {
    fn load(path: &Path, forced: Option<Provider>) -> anyhow::Result<Recording> {
        let bytes =
            std::fs::read(path).map_err(|e| anyhow!("cannot read {}: {e}", path.display()))?;
        let frames = framing::split(&bytes)
            .map_err(|e| anyhow!("{}: cannot frame the recording: {e}", path.display()))?;
        let chunks: Vec<Vec<u8>> = frames.into_iter().map(|f| f.data).collect();
        let provider = match forced {
            Some(p) => p,
            None => chunks
                .iter()
                .find_map(|c| chunk_model::detect_provider(c))
                .ok_or_else(|| {
                    anyhow!(
                        "{}: cannot tell the provider from the chunks; pass --provider",
                        path.display()
                    )
                })?,
        };
        Ok(Recording {
            message_id: message_token(path),
            provider,
            chunks,
        })
    }
}

/// Replays one recording; returns how many chunks were dead-lettered.
fn replay_one(
    store: &Store,
    args: &ReplayArgs,
    rec: &Recording,
    clock: &mut u64,
    out: &mut impl Write,
) -> anyhow::Result<usize> {
    let conv = args.conversation.as_str();
    if args.timeline {
        writeln!(
            out,
            "── {} · provider {} · {} chunk(s)",
            rec.message_id,
            rec.provider,
            rec.chunks.len()
        )?;
    }
    let mut rejected = 0;
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
            rejected += 1;
            eprintln!("{} chunk {seq}: {reason}", rec.message_id);
        }
        if args.timeline {
            timeline_chunk(out, rec.provider, seq as u64, chunk, &applied)?;
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
        emit(store, out)?;
    }
    Ok(rejected)
}

/// Flushes the store (the outbox hands out only durable rows) and prints the events as JSON
/// lines.
fn emit(store: &Store, out: &mut impl Write) -> anyhow::Result<()> {
    store.flush().context("flush store")?;
    let _ = sink::jsonl::drain(store, out)?;
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
        writeln!(out, "{text}")?;
    }
    Ok(())
}

fn timeline_chunk(
    out: &mut impl Write,
    provider: Provider,
    seq: u64,
    chunk: &[u8],
    applied: &Applied,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "[{seq:>4}] {}",
        chunk_model::error::excerpt(&without_noise(chunk))
    )?;
    match chunk_model::decode(provider, chunk) {
        Ok(events) if events.is_empty() => writeln!(out, "       · nothing about tool calls")?,
        Ok(events) => {
            for e in events {
                writeln!(out, "       · {}", describe_chunk_event(&e))?;
            }
        }
        Err(_) => {}
    }
    if !matches!(applied, Applied::Accepted { .. }) {
        writeln!(out, "       → {}", describe(applied))?;
    }
    Ok(())
}

/// Top-level fields that say nothing about tool calls and would fill the excerpt.
const NOISE: [&str; 7] = [
    "id",
    "object",
    "created",
    "model",
    "system_fingerprint",
    "service_tier",
    "created_at",
];

/// The chunk without [`NOISE`] fields, for a person to read (the chunk as-is when not JSON).
fn without_noise(chunk: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(chunk) {
        Ok(serde_json::Value::Object(mut map)) => {
            for key in NOISE {
                map.remove(key);
            }
            serde_json::to_vec(&map).unwrap_or_else(|_| chunk.to_vec())
        }
        _ => chunk.to_vec(),
    }
}

fn describe(applied: &Applied) -> String {
    match applied {
        Applied::Accepted { events } => format!("applied, {events} event(s)"),
        Applied::Duplicate => "duplicate, ignored".to_string(),
        Applied::Parked => "parked until the sequence gap fills".to_string(),
        Applied::DeadLettered { reason } => format!("dead letter: {reason}"),
    }
}

fn describe_chunk_event(e: &ChunkEvent) -> String {
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
