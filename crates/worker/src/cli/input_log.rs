//! A conversation's inputs as the input stream holds them, shared by `record`, `replay` of a
//! recording and `replay --from-nats`: read through an ordered consumer (no effect on the
//! worker's durable consumers), written to and read from a file, and applied to a scratch
//! store exactly as the worker applies them (`consume::inputs::parse_message`, each input at
//! its JetStream time).
//!
//! ## The recording file (`toolstream record`)
//! JSON lines. The first is the header, `{"toolstream_recording":1,"conversation":…,
//! "message":…|null,"stream":…,"subject_prefix":…,"recorded_at_ms":…,"inputs":N}`; then one
//! line per input message in stream order: `{"stream_seq","subject","published_ms","headers":
//! [[name,value],…],"body"}` (`body` is the payload as text; a payload that is not UTF-8 is
//! `body_hex` instead). Subjects, headers and stream sequence numbers are kept, so a replay
//! orders, dedupes and dead-letters exactly like the worker did.

use crate::consume::inputs::OwnedInput;
use anyhow::{bail, Context};
use assembler::{Applied, Store, StoreError};
use async_nats::jetstream;
use bytes::Bytes;
use chunk_model::wire::Subjects;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The header line's key and version.
pub const FORMAT_KEY: &str = "toolstream_recording";
/// The version written.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of a recording.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Header {
    /// Always [`FORMAT_VERSION`].
    pub toolstream_recording: u32,
    /// The conversation recorded.
    pub conversation: String,
    /// The one message recorded, or every message of the conversation.
    pub message: Option<String>,
    /// The stream read.
    pub stream: String,
    /// The worker's subject prefix.
    pub subject_prefix: String,
    /// When the recording was made (ms since the epoch): a replay runs the store's timers up
    /// to this time, as the worker's had by then.
    pub recorded_at_ms: u64,
    /// Input lines that follow.
    pub inputs: usize,
}

/// One input message as stored in the input stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordedInput {
    /// Its JetStream stream sequence.
    pub stream_seq: u64,
    /// Its subject.
    pub subject: String,
    /// When JetStream stored it (ms since the epoch).
    pub published_ms: u64,
    /// Its headers, in order, as (name, value).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The payload as text (when UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The payload in hex (when not UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_hex: Option<String>,
}

impl RecordedInput {
    /// From a message read off the stream.
    fn from_message(m: &jetstream::Message) -> anyhow::Result<RecordedInput> {
        let info = m
            .info()
            .map_err(|e| anyhow::anyhow!("reading a message's JetStream info: {e}"))?;
        let published_ms =
            crate::consume::watermark::nanos_to_ms(info.published.unix_timestamp_nanos());
        let mut headers = Vec::new();
        if let Some(h) = &m.headers {
            for (name, values) in h.iter() {
                for v in values {
                    headers.push((name.to_string(), v.as_str().to_string()));
                }
            }
        }
        let (body, body_hex) = match std::str::from_utf8(&m.payload) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (None, Some(hex(&m.payload))),
        };
        Ok(RecordedInput {
            stream_seq: info.stream_sequence,
            subject: m.subject.to_string(),
            published_ms,
            headers,
            body,
            body_hex,
        })
    }

    /// The payload bytes.
    pub fn payload(&self) -> anyhow::Result<Vec<u8>> {
        match (&self.body, &self.body_hex) {
            (Some(text), _) => Ok(text.as_bytes().to_vec()),
            (None, Some(h)) => unhex(h)
                .with_context(|| format!("stream_seq {}: body_hex is not hex", self.stream_seq)),
            (None, None) => Ok(Vec::new()),
        }
    }

    /// The headers as a NATS header map.
    pub fn header_map(&self) -> async_nats::HeaderMap {
        let mut map = async_nats::HeaderMap::new();
        for (k, v) in &self.headers {
            map.append(k.as_str(), v.as_str());
        }
        map
    }

    /// The value of header `name` (ASCII case ignored).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> anyhow::Result<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        bail!("odd length");
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .context("not a hex digit")
        })
        .collect()
}

/// Writes a recording: the header line, then one line per input.
pub fn write(
    out: &mut impl Write,
    header: &Header,
    inputs: &[RecordedInput],
) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, header)?;
    out.write_all(b"\n")?;
    for input in inputs {
        serde_json::to_writer(&mut *out, input)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Reads a recording, or `None` when `bytes` is not one (a provider stream instead).
pub fn parse(bytes: &[u8]) -> Option<anyhow::Result<(Header, Vec<RecordedInput>)>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next()?;
    let value: serde_json::Value = serde_json::from_str(first).ok()?;
    value.get(FORMAT_KEY)?;
    Some((|| {
        let header: Header =
            serde_json::from_value(value).context("the recording's header line")?;
        if header.toolstream_recording != FORMAT_VERSION {
            bail!(
                "recording version {} (this toolstream reads version {FORMAT_VERSION})",
                header.toolstream_recording
            );
        }
        let inputs = lines
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str::<RecordedInput>(line)
                    .with_context(|| format!("recording line {}", i + 2))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((header, inputs))
    })())
}

/// `<prefix>.chunks.<conv>.<msg or >>` and the same for `results` (under `p.*` when the
/// stream holds partitioned subjects): a conversation's (or one message's) inputs. Two
/// filters, each a subset of one of the stream's subjects (nats-server 2.9 refuses a filter
/// spanning two, and allows one per consumer).
pub fn input_filters(
    prefix: &str,
    partitioned: bool,
    conv: &str,
    msg: Option<&str>,
) -> [String; 2] {
    let last = msg.unwrap_or(">");
    let p = if partitioned {
        format!("{prefix}.p.*")
    } else {
        prefix.to_string()
    };
    [
        format!("{p}.chunks.{conv}.{last}"),
        format!("{p}.results.{conv}.{last}"),
    ]
}

/// `<prefix>.events.<conv>.<msg or >>`.
pub fn events_filter(prefix: &str, conv: &str, msg: Option<&str>) -> String {
    format!("{prefix}.events.{conv}.{}", msg.unwrap_or(">"))
}

/// Checks `--conversation` and `--message` are subject tokens.
pub fn check_ids(conv: &str, msg: Option<&str>) -> anyhow::Result<()> {
    for (what, token) in [("conversation", Some(conv)), ("message", msg)] {
        if let Some(t) = token {
            if let Err(e) = chunk_model::wire::check_token(t) {
                bail!("{what} {t:?} is not a valid subject token: it {e}");
            }
        }
    }
    Ok(())
}

/// Every message of `stream` matching `filter` stored at or after `since`, in stream order,
/// read through an ordered consumer (ephemeral, no acks: the worker's consumers are not
/// touched). `progress` is called with (read, total) now and then.
pub async fn read_stream(
    js: &jetstream::Context,
    stream_name: &str,
    filter: &str,
    since: Option<async_nats::datetime::DateTime>,
    mut progress: impl FnMut(u64, u64),
) -> anyhow::Result<Vec<jetstream::Message>> {
    let stream = js.get_stream(stream_name).await.with_context(|| {
        format!("opening stream {stream_name} (has `toolstream run` started against this server?)")
    })?;
    let deliver_policy = match since {
        Some(start_time) => jetstream::consumer::DeliverPolicy::ByStartTime { start_time },
        None => jetstream::consumer::DeliverPolicy::All,
    };
    let mut consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating an ordered consumer on {stream_name}"))?;
    let total = consumer
        .info()
        .await
        .with_context(|| format!("reading the ordered consumer on {stream_name}"))?
        .num_pending;
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    progress(0, total);
    if total == 0 {
        return Ok(out);
    }
    let mut messages = consumer
        .messages()
        .await
        .with_context(|| format!("reading {stream_name}"))?;
    while let Some(next) = messages.next().await {
        let m = next.map_err(|e| anyhow::anyhow!("reading {stream_name}: {e}"))?;
        let pending = m.info().map(|i| i.pending).unwrap_or(0);
        out.push(m);
        let read = out.len() as u64;
        if read.is_multiple_of(256) || pending == 0 {
            progress(read, total.max(read));
        }
        if pending == 0 || read >= total {
            break;
        }
    }
    Ok(out)
}

/// Whether the input stream holds partitioned subjects (`<prefix>.p.<k>.…`).
pub async fn partitioned(
    js: &jetstream::Context,
    stream_name: &str,
    prefix: &str,
) -> anyhow::Result<bool> {
    let mut stream = js.get_stream(stream_name).await.with_context(|| {
        format!("opening stream {stream_name} (has `toolstream run` started against this server?)")
    })?;
    let info = stream
        .info()
        .await
        .with_context(|| format!("reading stream {stream_name}"))?;
    let partitioned_prefix = format!("{prefix}.p.");
    Ok(info
        .config
        .subjects
        .iter()
        .any(|s| s.starts_with(&partitioned_prefix)))
}

/// A conversation's (or message's) inputs, read off the input stream.
pub async fn read_inputs(
    js: &jetstream::Context,
    stream_name: &str,
    prefix: &str,
    conv: &str,
    msg: Option<&str>,
    since: Option<async_nats::datetime::DateTime>,
    progress: impl FnMut(u64, u64),
) -> anyhow::Result<Vec<RecordedInput>> {
    let partitioned = partitioned(js, stream_name, prefix).await?;
    let mut progress = progress;
    let mut all = Vec::new();
    for filter in input_filters(prefix, partitioned, conv, msg) {
        let read = read_stream(js, stream_name, &filter, since, &mut progress).await?;
        for m in &read {
            all.push(RecordedInput::from_message(m)?);
        }
    }
    // chunks and results were read apart: back into the one order the worker read them in
    all.sort_by_key(|i| i.stream_seq);
    Ok(all)
}

/// What applying a recording did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Inputs applied (including duplicates and parked ones).
    pub inputs: usize,
    /// Inputs dead-lettered, as (stream seq, reason).
    pub dead_letters: Vec<(u64, String)>,
}

/// Applies `inputs` to `store` the way the worker does: each parsed from subject, headers and
/// body (`consume::inputs::parse_message`) and applied at its JetStream time, the timers run
/// up to each input's time before it (the worker's settled watermark trails its inputs), and
/// finally up to `end_ms`. Events and dead letters stay in the store's outbox (flushed at
/// the end; `on_applied`, called after each input, may flush and drain it).
pub fn apply(
    store: &Store,
    prefix: &str,
    inputs: &[RecordedInput],
    end_ms: u64,
    mut on_applied: impl FnMut(&RecordedInput, &OwnedInput, &Result<Applied, StoreError>),
) -> anyhow::Result<Outcome> {
    let subjects = Subjects::new(prefix);
    let mut done = Outcome::default();
    let mut ticked = 0u64;
    for input in inputs {
        let body = Bytes::from(input.payload()?);
        let headers = input.header_map();
        let parsed = match crate::consume::inputs::parse_message(
            &subjects,
            &input.subject,
            Some(&headers),
            &body,
            input.stream_seq,
            input.published_ms,
        ) {
            Ok(p) => p,
            Err(rejected) => {
                done.dead_letters.push((input.stream_seq, rejected.reason));
                continue;
            }
        };
        // The worker's timers run on the settled watermark, which trails the newest input by
        // up to 2 s: a timer due before this input was published had run by then.
        let watermark = input.published_ms.saturating_sub(2_000);
        if watermark > ticked {
            store
                .tick(watermark)
                .context("running the store's timers")?;
            ticked = watermark;
        }
        let outcome = match &parsed.rejected {
            None => store.apply(&parsed.as_input(), parsed.published_ms),
            Some(reason) => store.reject(&parsed.as_input(), reason, parsed.published_ms),
        };
        on_applied(input, &parsed, &outcome);
        let outcome =
            outcome.with_context(|| format!("applying stream_seq {}", input.stream_seq))?;
        if let Applied::DeadLettered { reason } = outcome {
            done.dead_letters.push((input.stream_seq, reason));
        }
        done.inputs += 1;
    }
    if end_ms > ticked {
        store.tick(end_ms).context("running the store's timers")?;
    }
    store.flush().context("flushing the scratch store")?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_round_trips_through_its_file_form() {
        let header = Header {
            toolstream_recording: FORMAT_VERSION,
            conversation: "c1".into(),
            message: None,
            stream: "TOOLSTREAM_IN".into(),
            subject_prefix: "toolstream".into(),
            recorded_at_ms: 5,
            inputs: 2,
        };
        let inputs = vec![
            RecordedInput {
                stream_seq: 3,
                subject: "toolstream.chunks.c1.m1".into(),
                published_ms: 1,
                headers: vec![("Toolstream-Seq".into(), "0".into())],
                body: Some("{\"a\":1}".into()),
                body_hex: None,
            },
            RecordedInput {
                stream_seq: 4,
                subject: "toolstream.chunks.c1.m1".into(),
                published_ms: 2,
                headers: vec![],
                body: None,
                body_hex: Some(hex(&[0xff, 0x00, 0x7b])),
            },
        ];
        let mut buf = Vec::new();
        write(&mut buf, &header, &inputs).unwrap();
        let (h, back) = parse(&buf).expect("a recording").unwrap();
        assert_eq!(h, header);
        assert_eq!(back, inputs);
        assert_eq!(back[1].payload().unwrap(), vec![0xff, 0x00, 0x7b]);
        assert!(parse(b"data: {\"id\":1}\n\n").is_none(), "an SSE stream");
        assert!(parse(b"{\"id\":\"x\",\"object\":\"chat.completion.chunk\"}\n").is_none());
    }

    #[test]
    fn filters_cover_one_conversation_or_message() {
        assert_eq!(
            input_filters("ts", false, "c", None),
            ["ts.chunks.c.>", "ts.results.c.>"]
        );
        assert_eq!(
            input_filters("ts", true, "c", Some("m")),
            ["ts.p.*.chunks.c.m", "ts.p.*.results.c.m"]
        );
        assert_eq!(events_filter("ts", "c", Some("m")), "ts.events.c.m");
    }
}
