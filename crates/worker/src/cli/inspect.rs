//! `toolstream inspect C [M]`: what the store holds for a conversation (or one message), and
//! why: each call's state and reason, the argument fragments with the chunk numbers they came
//! from, results, and for a call whose arguments are not JSON the exact place they break
//! (offset, line, column, a marked excerpt, and the chunk that carried that byte).
//!
//! Two sources for the store's view:
//! - a running worker, through its query service (`query.message` per message; the messages
//!   of a conversation are the ones its inputs name on the input stream);
//! - `--data-dir DIR`: a stopped worker's store, opened read-only
//!   (`assembler::Store::open_to_inspect`; a running worker holds the store's lock).
//!
//! The fragments come from the input stream (an ordered consumer, no effect on the worker):
//! each chunk decoded again with its provider. With `--data-dir` and no server answering they
//! are left out, saying so.

use super::input_log::{self, RecordedInput};
use super::output::{columns, Style};
use super::query::{excerpt, result_lines, word};
use anyhow::{bail, Context};
use chunk_model::{ChunkEvent, MessageSnapshot, Provider};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `toolstream inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Server, subject prefix, auth and TLS (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
    /// Conversation id.
    pub conversation: String,
    /// Only this message.
    pub message: Option<String>,
    /// Read a stopped worker's store in this directory instead of asking a running worker.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON object (for scripts) instead of text for a person.
    #[arg(long)]
    pub json: bool,
    /// Input stream name.
    #[arg(long, env = "TOOLSTREAM_INPUT_STREAM", default_value = "TOOLSTREAM_IN")]
    pub input_stream: String,
    /// Dead-letter stream name.
    #[arg(long, env = "TOOLSTREAM_DLQ_STREAM", default_value = "TOOLSTREAM_DLQ")]
    pub dlq_stream: String,
    /// How long to wait for each answer of the query service.
    #[arg(long, default_value = "5s", value_parser = super::tail::parse_timeout)]
    pub timeout: Duration,
}

/// The whole report (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    /// The conversation.
    pub conversation: String,
    /// `query service` or `data dir <path>`.
    pub source: String,
    /// Why fragments are missing, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragments_unavailable: Option<String>,
    /// Each message.
    pub messages: Vec<MessageReport>,
}

/// One message.
#[derive(Debug, Serialize)]
pub struct MessageReport {
    /// What the store holds.
    pub snapshot: MessageSnapshot,
    /// Per call (same order as `snapshot.calls`): fragments and the JSON break.
    pub calls: Vec<CallReport>,
    /// Inputs of this message on the input stream.
    pub inputs: usize,
    /// Its dead letters on the dead-letter stream: the inputs it did not assemble, and why.
    pub dead_letters: Vec<DeadLetter>,
}

/// One dead letter of a message.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeadLetter {
    /// The input's stream sequence (`Toolstream-Stream-Seq`), when it had one.
    pub stream_seq: Option<u64>,
    /// `Toolstream-Reason`: `code: detail`.
    pub reason: String,
}

/// What inspect adds to a stored call.
#[derive(Debug, Default, Serialize)]
pub struct CallReport {
    /// The call's id.
    pub id: String,
    /// Argument fragments in the order applied.
    pub fragments: Vec<Fragment>,
    /// Where the arguments stop being JSON (calls that did not complete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_break: Option<JsonBreak>,
}

/// One argument fragment and the chunk it came from.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Fragment {
    /// The chunk's `Toolstream-Seq` (absent when the producer did not number).
    pub seq: Option<u64>,
    /// The chunk's JetStream stream sequence.
    pub stream_seq: u64,
    /// The argument text it added.
    pub text: String,
    /// The chunk was dead-lettered (see the message's `dead_letters`): its text is not in the
    /// call.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dead_lettered: bool,
}

/// Where argument text stops being JSON.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct JsonBreak {
    /// Byte offset of the first byte that cannot be JSON (the length when the text ends early).
    pub offset: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The parser's words.
    pub error: String,
    /// Text around the offset, on one line.
    pub excerpt: String,
    /// Spaces then `^` under the offset in `excerpt`.
    pub marker: String,
    /// The fragment (index into `fragments`) that carried the offending byte, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragment: Option<usize>,
}

/// Where `text` stops being JSON, or `None` when it is JSON.
pub fn json_break(text: &str) -> Option<JsonBreak> {
    let err = serde_json::from_str::<serde::de::IgnoredAny>(text).err()?;
    let (line, column) = (err.line(), err.column());
    let offset = if err.classify() == serde_json::error::Category::Eof || line == 0 {
        text.len()
    } else {
        let line_start: usize = text
            .split_inclusive('\n')
            .take(line.saturating_sub(1))
            .map(str::len)
            .sum();
        // serde_json's column counts bytes, 1-based, and points at the offending byte
        (line_start + column.saturating_sub(1)).min(text.len())
    };
    let mut before_start = offset.saturating_sub(40);
    while !text.is_char_boundary(before_start) {
        before_start -= 1;
    }
    let mut after_end = (offset + 30).min(text.len());
    while !text.is_char_boundary(after_end) {
        after_end += 1;
    }
    let mut at = offset;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let flat = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    };
    let before = flat(&text[before_start..at]);
    let after = flat(&text[at..after_end]);
    let lead = if before_start > 0 { "…" } else { "" };
    let tail = if after_end < text.len() { "…" } else { "" };
    let marker = format!(
        "{}^",
        " ".repeat(lead.chars().count() + before.chars().count())
    );
    let message = err.to_string();
    let error = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    Some(JsonBreak {
        offset,
        line: line.max(1),
        column,
        error,
        excerpt: format!("{lead}{before}{after}{tail}"),
        marker,
        fragment: None,
    })
}

/// The calls of one message as its chunks said them: fragments per call, in the order the
/// provider opened the calls (the order the store numbers them).
#[derive(Debug, Default)]
struct Traces {
    calls: Vec<Trace>,
}

#[derive(Debug, Default)]
struct Trace {
    wire_id: Option<String>,
    index: Option<u32>,
    item: Option<String>,
    fragments: Vec<Fragment>,
}

impl Traces {
    /// The trace a reference names, opening one for a fragment that names none known.
    fn find(&mut self, r: &chunk_model::CallRef, open: bool) -> Option<&mut Trace> {
        let pos = self
            .calls
            .iter()
            .rposition(|t| r.wire_id.is_some() && t.wire_id == r.wire_id)
            .or_else(|| {
                self.calls
                    .iter()
                    .rposition(|t| r.item_id.is_some() && t.item == r.item_id)
            })
            .or_else(|| {
                self.calls.iter().rposition(|t| {
                    r.index.is_some()
                        && t.index == r.index
                        && (r.wire_id.is_none() || t.wire_id.is_none())
                })
            });
        let pos = match pos {
            Some(p) => p,
            None if open => {
                self.calls.push(Trace::default());
                self.calls.len() - 1
            }
            None => return None,
        };
        let t = self.calls.get_mut(pos)?;
        if t.wire_id.is_none() {
            t.wire_id.clone_from(&r.wire_id);
        }
        if t.item.is_none() {
            t.item.clone_from(&r.item_id);
        }
        if t.index.is_none() {
            t.index = r.index;
        }
        Some(t)
    }

    /// Adds one chunk's call statements (already decoded) to the calls they name.
    fn add(&mut self, input: &RecordedInput, events: Vec<ChunkEvent>) {
        let seq = input
            .header(chunk_model::wire::headers::SEQ)
            .and_then(|s| s.trim().parse().ok());
        for e in events {
            let (at, text) = match &e {
                ChunkEvent::CallFragment(f) => {
                    let mut text = f.arguments.clone().unwrap_or_default();
                    if !f.path_values.is_empty() {
                        text.push_str(&format!("⟨{} path value(s)⟩", f.path_values.len()));
                    }
                    (&f.at, text)
                }
                ChunkEvent::CallEnd(end) => match &end.arguments {
                    // an end carrying the whole arguments (Gemini, Bedrock): one fragment
                    Some(args) => (&end.at, args.to_string()),
                    None => continue,
                },
                _ => continue,
            };
            let open = matches!(e, ChunkEvent::CallFragment(_));
            if let Some(t) = self.find(at, open) {
                if !text.is_empty() {
                    t.fragments.push(Fragment {
                        seq,
                        stream_seq: input.stream_seq,
                        text,
                        dead_lettered: false,
                    });
                }
            }
        }
    }
}

/// The inputs of each message (by message id, in stream order) and the fragments of its calls.
fn trace_inputs(prefix: &str, inputs: &[RecordedInput]) -> BTreeMap<String, (usize, Traces)> {
    let subjects = chunk_model::wire::Subjects::new(prefix);
    let mut providers: BTreeMap<String, Provider> = BTreeMap::new();
    let mut conversation_provider: Option<Provider> = None;
    let mut out: BTreeMap<String, (usize, Traces)> = BTreeMap::new();
    for input in inputs {
        let Ok(parsed) = subjects.parse_input(&input.subject) else {
            continue;
        };
        let msg = parsed.message_id.to_string();
        let entry = out.entry(msg.clone()).or_default();
        entry.0 += 1;
        if parsed.kind != chunk_model::wire::InputKind::Chunk {
            continue;
        }
        let named = input
            .header(chunk_model::wire::headers::PROVIDER)
            .and_then(Provider::parse);
        if let Some(p) = named {
            providers.entry(msg.clone()).or_insert(p);
            conversation_provider.get_or_insert(p);
        }
        let Some(provider) = providers.get(&msg).copied().or(conversation_provider) else {
            continue;
        };
        let Ok(body) = input.payload() else {
            continue;
        };
        // OpenAI chat with n > 1: choice k is its own message, `<msg>~choice<k>`
        let Ok(routed) = chunk_model::decode::decode_routed(provider, &body) else {
            continue;
        };
        let mut by_choice: BTreeMap<u32, Vec<ChunkEvent>> = BTreeMap::new();
        for (route, event) in routed {
            if let chunk_model::decode::Route::Choice(k) = route {
                by_choice.entry(k).or_default().push(event);
            }
        }
        for (k, events) in by_choice {
            let id = chunk_model::decode::openai_chat::choice_message(&msg, k).into_owned();
            out.entry(id).or_default().1.add(input, events);
        }
    }
    out
}

/// Joins the store's calls with the traces of their chunks: by wire id first, then in order.
fn call_reports(
    snapshot: &MessageSnapshot,
    traces: Option<&Traces>,
    dead: &[DeadLetter],
) -> Vec<CallReport> {
    let mut taken = vec![false; traces.map_or(0, |t| t.calls.len())];
    let mut out = Vec::with_capacity(snapshot.calls.len());
    for (pos, call) in snapshot.calls.iter().enumerate() {
        let mut report = CallReport {
            id: call.tool_call.id.clone(),
            ..Default::default()
        };
        if let Some(traces) = traces {
            let by_id = traces
                .calls
                .iter()
                .position(|t| t.wire_id.as_deref() == Some(call.tool_call.id.as_str()));
            let chosen = by_id.or_else(|| {
                (pos..traces.calls.len())
                    .chain(0..pos.min(traces.calls.len()))
                    .find(|i| !taken[*i] && traces.calls[*i].wire_id.is_none())
            });
            if let Some(i) = chosen {
                taken[i] = true;
                report.fragments = traces.calls[i].fragments.clone();
                for f in &mut report.fragments {
                    f.dead_lettered = dead.iter().any(|d| d.stream_seq == Some(f.stream_seq));
                }
            }
        }
        let custom = matches!(call.tool_call.kind, chunk_model::CallKind::Custom);
        if call.status == chunk_model::CallStatus::Invalid && !custom {
            report.json_break = json_break(&call.tool_call.raw_arguments).map(|mut b| {
                // the applied fragments make the text: find the one holding the offset
                let mut end = 0;
                let applied: Vec<usize> = (0..report.fragments.len())
                    .filter(|i| !report.fragments[*i].dead_lettered)
                    .collect();
                b.fragment = applied.iter().copied().find(|i| {
                    end += report.fragments[*i].text.len();
                    end > b.offset
                });
                if b.fragment.is_none() {
                    // the text ended early: the last fragment is where it stops
                    b.fragment = applied.last().copied();
                }
                b
            });
        }
        out.push(report);
    }
    out
}

/// Dead letters per message id (the last subject token), in stream order.
fn dead_letters(messages: &[async_nats::jetstream::Message]) -> BTreeMap<String, Vec<DeadLetter>> {
    let mut out: BTreeMap<String, Vec<DeadLetter>> = BTreeMap::new();
    for m in messages {
        let Some(msg) = m.subject.rsplit('.').next() else {
            continue;
        };
        let header = |name: &str| {
            m.headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        out.entry(msg.to_string()).or_default().push(DeadLetter {
            stream_seq: header(chunk_model::wire::headers::STREAM_SEQ)
                .and_then(|s| s.trim().parse().ok()),
            reason: header(chunk_model::wire::headers::REASON)
                .unwrap_or_else(|| "(no reason header)".to_string()),
        });
    }
    out
}

/// Runs the command.
pub fn main(args: InspectArgs) -> anyhow::Result<ExitCode> {
    input_log::check_ids(&args.conversation, args.message.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let _entered = runtime.enter();
    let config = args.client.resolve()?;
    let prefix = config.subject_prefix.clone();
    let progress = super::output::Progress::new("inspect");

    // the store's view first when it is a directory: it needs no server
    let offline = match &args.data_dir {
        Some(dir) => {
            let store = assembler::Store::open_to_inspect(dir, assembler::Config::default())
                .map_err(|e| {
                    let text = e.to_string();
                    if text.contains("could not acquire lock") {
                        anyhow::anyhow!(
                            "the store in {} is in use by a running worker: leave out --data-dir, \
                             inspect then asks that worker's query service",
                            dir.display()
                        )
                    } else {
                        anyhow::anyhow!("cannot open the store in {}: {text}", dir.display())
                    }
                })?
                .with_context(|| format!("{} holds no toolstream store", dir.display()))?;
            let snapshots = match &args.message {
                Some(m) => store
                    .message_snapshot(&args.conversation, m)?
                    .into_iter()
                    .collect(),
                None => store.conversation(&args.conversation)?,
            };
            Some(snapshots)
        }
        None => None,
    };

    // the inputs, for the fragments (and, from a running worker, the message ids)
    let connected = runtime.block_on(async {
        let (_, client) = args.client.connect("toolstream-inspect").await?;
        let js = async_nats::jetstream::new(client.clone());
        let inputs = input_log::read_inputs(
            &js,
            &args.input_stream,
            &prefix,
            &args.conversation,
            args.message.as_deref(),
            None,
            |read, total| progress.show(read, total, "inputs"),
        )
        .await?;
        // the dead letters say why an input was not assembled (a lost chunk ends its calls)
        let filter = chunk_model::wire::Subjects::new(&prefix)
            .dlq(&args.conversation, args.message.as_deref().unwrap_or("*"));
        let dead = input_log::read_stream(&js, &args.dlq_stream, &filter, None, |_, _| {})
            .await
            .map(|messages| dead_letters(&messages))
            .unwrap_or_default();
        anyhow::Ok((client, inputs, dead))
    });
    progress.done();
    let (client, inputs, mut dead, unavailable) = match connected {
        Ok((client, inputs, dead)) => (Some(client), inputs, dead, None),
        Err(e) if offline.is_some() => (None, Vec::new(), BTreeMap::new(), Some(format!("{e:#}"))),
        Err(e) => return Err(e),
    };
    let traces = trace_inputs(&prefix, &inputs);

    let (source, snapshots) = match offline {
        Some(s) => (
            format!(
                "data dir {}",
                args.data_dir
                    .as_deref()
                    .unwrap_or_else(|| std::path::Path::new("?"))
                    .display()
            ),
            s,
        ),
        None => {
            let Some(client) = &client else {
                bail!("not connected");
            };
            let ids: Vec<String> = match &args.message {
                Some(m) => vec![m.clone()],
                None => {
                    let mut ids = Vec::new();
                    for input in &inputs {
                        if let Ok(p) =
                            chunk_model::wire::Subjects::new(&prefix).parse_input(&input.subject)
                        {
                            if !ids.iter().any(|i| i == p.message_id) {
                                ids.push(p.message_id.to_string());
                            }
                        }
                    }
                    // the other choices' messages of an OpenAI n > 1 stream
                    for id in traces.keys() {
                        if !ids.contains(id) {
                            ids.push(id.clone());
                        }
                    }
                    ids
                }
            };
            let subjects = chunk_model::wire::Subjects::new(&prefix);
            let mut snapshots = Vec::new();
            for id in ids {
                let subject = subjects.query_message(&args.conversation, &id);
                let answer = runtime.block_on(super::query::ask(
                    client,
                    &subject,
                    Vec::new(),
                    args.timeout,
                ));
                match answer {
                    Ok(body) => snapshots.push(
                        serde_json::from_slice::<MessageSnapshot>(&body)
                            .context("the answer is not a message snapshot")?,
                    ),
                    // inputs the worker has not seen yet (or that were all dead letters)
                    Err(e) if e.to_string().contains("404") => {}
                    Err(e) => return Err(e),
                }
            }
            ("query service".to_string(), snapshots)
        }
    };
    if snapshots.is_empty() {
        bail!(
            "the store ({source}) holds no {} of conversation {:?}{}",
            if args.message.is_some() {
                "such message"
            } else {
                "message"
            },
            args.conversation,
            if inputs.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} input(s) on the input stream: not applied yet?)",
                    inputs.len()
                )
            }
        );
    }
    let report = Report {
        conversation: args.conversation.clone(),
        source,
        fragments_unavailable: unavailable,
        messages: snapshots
            .into_iter()
            .map(|snapshot| {
                let t = traces.get(&snapshot.message_id);
                let dead_letters = dead.remove(&snapshot.message_id).unwrap_or_default();
                MessageReport {
                    calls: call_reports(&snapshot, t.map(|(_, t)| t), &dead_letters),
                    inputs: t.map_or(0, |(n, _)| *n),
                    dead_letters,
                    snapshot,
                }
            })
            .collect(),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        for line in render(&report, &Style::stdout()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The report for a person.
pub fn render(report: &Report, style: &Style) -> Vec<String> {
    let mut out = vec![format!(
        "{} {} · from the {}",
        style.bold("conversation"),
        report.conversation,
        report.source
    )];
    if let Some(why) = &report.fragments_unavailable {
        out.push(style.warn(&format!("fragments not shown: {why}")));
    }
    for m in &report.messages {
        let s = &m.snapshot;
        out.push(String::new());
        out.push(format!(
            "{} {} · {} · {}{} · {} input(s)",
            style.bold("message"),
            s.message_id,
            s.provider
                .map_or_else(|| "no provider".to_string(), |p| p.to_string()),
            word(&s.status),
            s.finish_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            m.inputs
        ));
        // one aligned table of the calls, each row followed by its fragments and break
        let rows: Vec<Vec<String>> = s
            .calls
            .iter()
            .map(|c| {
                vec![
                    format!("  #{}", c.tool_call.index),
                    c.tool_call.id.clone(),
                    c.tool_call.name.clone(),
                    style.status(&word(&c.status)),
                    c.reason.clone().unwrap_or_default(),
                    format!("{} byte(s) of arguments", c.tool_call.raw_arguments.len()),
                ]
            })
            .collect();
        let call_lines = columns(&rows);
        for (line, r) in call_lines.into_iter().zip(&m.calls) {
            out.push(line);
            if !r.fragments.is_empty() {
                out.push(format!("      {} fragment(s):", r.fragments.len()));
                let rows: Vec<Vec<String>> = r
                    .fragments
                    .iter()
                    .map(|f| {
                        vec![
                            format!(
                                "        seq {}",
                                f.seq.map_or_else(|| "-".to_string(), |n| n.to_string())
                            ),
                            style.dim(&format!("stream #{}", f.stream_seq)),
                            format!(
                                "{}{}",
                                serde_json::to_string(&f.text).unwrap_or_default(),
                                if f.dead_lettered {
                                    style.bad("  (dead letter: not in the call)")
                                } else {
                                    String::new()
                                }
                            ),
                        ]
                    })
                    .collect();
                out.extend(columns(&rows));
            }
            if let Some(b) = &r.json_break {
                out.push(format!(
                    "      {} at offset {} (line {}, column {}): {}",
                    style.bad("JSON breaks"),
                    b.offset,
                    b.line,
                    b.column,
                    b.error
                ));
                out.push(format!("        {}", b.excerpt));
                out.push(format!("        {}", style.bad(&b.marker)));
                if let Some(f) = b.fragment.and_then(|i| r.fragments.get(i)) {
                    out.push(format!(
                        "        in the fragment of chunk seq {} (stream #{})",
                        f.seq.map_or_else(|| "-".to_string(), |n| n.to_string()),
                        f.stream_seq
                    ));
                }
            }
        }
        for d in &m.dead_letters {
            out.push(format!(
                "  {} {}: {}",
                style.bad("dead letter"),
                d.stream_seq
                    .map_or_else(|| "(no stream seq)".to_string(), |n| format!("stream #{n}")),
                excerpt(&d.reason, 160)
            ));
        }
        out.extend(result_lines(s, style));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_break_is_the_first_byte_that_cannot_be_json() {
        let b = json_break(r#"{"city": "Paris", "days": }"#).unwrap();
        assert_eq!(b.offset, 26, "{b:?}");
        assert_eq!(&r#"{"city": "Paris", "days": }"#[b.offset..], "}");
        assert_eq!(b.excerpt.chars().nth(b.marker.len() - 1), Some('}'));
        assert!(json_break(r#"{"a": [1, 2]}"#).is_none());
    }

    #[test]
    fn text_that_ends_early_breaks_at_its_end() {
        let text = r#"{"query": "weather in Par"#;
        let b = json_break(text).unwrap();
        assert_eq!(b.offset, text.len());
        assert!(b.error.contains("EOF"), "{}", b.error);
    }

    fn chunk(stream_seq: u64, seq: u64, body: &str) -> RecordedInput {
        RecordedInput {
            stream_seq,
            subject: "toolstream.chunks.c.m".into(),
            published_ms: 0,
            headers: vec![
                ("Toolstream-Provider".into(), "anthropic".into()),
                ("Toolstream-Seq".into(), seq.to_string()),
            ],
            body: Some(body.into()),
            body_hex: None,
        }
    }

    /// An Anthropic call at content index 1 behind a text block: its fragments are found by
    /// index after its start named the id, and the text block's stop opens no call.
    #[test]
    fn fragments_follow_a_call_by_its_index_once_its_start_named_it() {
        let inputs = [
            chunk(
                10,
                0,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            chunk(11, 1, r#"{"type":"content_block_stop","index":0}"#),
            chunk(
                12,
                2,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#,
            ),
            chunk(
                13,
                3,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}"#,
            ),
            chunk(
                14,
                4,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            ),
            chunk(15, 5, r#"{"type":"content_block_stop","index":1}"#),
        ];
        let traces = trace_inputs("toolstream", &inputs);
        let (count, t) = &traces["m"];
        assert_eq!(*count, 6);
        assert_eq!(t.calls.len(), 1, "{t:?}");
        assert_eq!(t.calls[0].wire_id.as_deref(), Some("toolu_1"));
        let got: Vec<(Option<u64>, u64, &str)> = t.calls[0]
            .fragments
            .iter()
            .map(|f| (f.seq, f.stream_seq, f.text.as_str()))
            .collect();
        assert_eq!(got, [(Some(3), 13, "{\"a\": "), (Some(4), 14, "1}")]);
    }

    /// OpenAI chat with n > 1: choice 1's call is a call of message `<msg>~choice1`, not of the
    /// subject's message.
    #[test]
    fn fragments_of_another_choice_belong_to_that_choices_message() {
        let mut input = chunk(
            20,
            0,
            r#"{"object":"chat.completion.chunk","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_k1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":null}]}"#,
        );
        input.headers[0].1 = "openai-chat".into();
        let traces = trace_inputs("toolstream", &[input]);
        let other = chunk_model::decode::openai_chat::choice_message("m", 1);
        let (_, t) = &traces[other.as_ref()];
        assert_eq!(t.calls[0].wire_id.as_deref(), Some("call_k1"));
        assert_eq!(t.calls[0].fragments[0].text, "{\"x\":1}");
        assert!(traces["m"].1.calls.is_empty(), "{traces:?}");
    }

    #[test]
    fn a_break_on_a_later_line_counts_the_lines_before() {
        let text = "{\n  \"a\": 1,\n  \"b\": x\n}";
        let b = json_break(text).unwrap();
        assert_eq!(&text[b.offset..b.offset + 1], "x");
        assert_eq!(b.line, 3);
    }
}
