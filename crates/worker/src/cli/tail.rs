//! `toolstream tail`: prints toolstream's events as JSON lines, one per event, as a UI would
//! receive them on `<prefix>.events.<conv or *>.>`.
//!
//! Live by default (a core subscription: only events published from now on). With
//! `--from-start`, an ordered JetStream consumer on the events stream replays what is stored
//! first, so nothing published before `tail` started is missed (the quickstart uses this).
//! `--count N` exits successfully after N events; `--timeout D` bounds the wait (a failure if
//! `--count` was not reached, success otherwise). `--full` prints an event published by
//! reference (`payload_ref`, too large for the server's `max_payload`) as the whole event
//! fetched from the object store, size and SHA-256 checked.

use anyhow::{bail, Context};
use futures::StreamExt;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;
use tokio::time::Instant;

/// Arguments of `toolstream tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// Server, subject prefix, auth and TLS (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
    /// Only this conversation's events (default: every conversation).
    #[arg(long)]
    pub conversation: Option<String>,
    /// Replay the events already stored in the events stream before following new ones.
    #[arg(long)]
    pub from_start: bool,
    /// Exit after this many events.
    #[arg(long)]
    pub count: Option<u64>,
    /// Give up after this long (`500ms`, `30s`, `2m`; a bare number is seconds).
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Print events published by reference (`payload_ref`) as the whole event, fetched from
    /// the object store.
    #[arg(long)]
    pub full: bool,
}

/// Parses `500ms`, `30s`, `2m`, `1h` or bare seconds.
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (e.g. 500ms, 30s, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(format!("invalid duration {text:?} (e.g. 500ms, 30s, 2m)")),
    }
}

/// How a tail ended.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailEnd {
    /// `--count` events were printed.
    CountReached,
    /// The timeout passed (with this many events printed).
    TimedOut(u64),
    /// The subscription closed (connection gone for good).
    Closed(u64),
}

/// Runs the command.
pub fn main(args: TailArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let end = runtime.block_on(run(&args))?;
    match (end, args.count) {
        (TailEnd::CountReached, _) => Ok(ExitCode::SUCCESS),
        (TailEnd::TimedOut(_), None) => Ok(ExitCode::SUCCESS),
        (TailEnd::TimedOut(seen), Some(want)) => bail!(
            "timed out after {:?} with {seen} of {want} events",
            args.timeout.unwrap_or_default()
        ),
        (TailEnd::Closed(seen), _) => bail!("the event subscription closed after {seen} events"),
    }
}

/// The filter subject: `<prefix>.events.<conv or *>.>`.
fn filter(args: &TailArgs) -> anyhow::Result<String> {
    if let Some(c) = &args.conversation {
        if let Err(e) = chunk_model::wire::check_token(c) {
            bail!("--conversation {c:?} is not a valid subject token: it {e}");
        }
    }
    Ok(
        chunk_model::wire::Subjects::new(&args.client.resolve()?.subject_prefix)
            .events_filter(args.conversation.as_deref()),
    )
}

/// A source of event payloads: live subscription or ordered consumer.
enum Source {
    Live(async_nats::Subscriber),
    Stored(Box<async_nats::jetstream::consumer::pull::Ordered>),
}

impl Source {
    /// The next payload, `None` when the source closed.
    async fn next(&mut self) -> Option<anyhow::Result<bytes::Bytes>> {
        match self {
            Source::Live(sub) => sub.next().await.map(|m| Ok(m.payload)),
            Source::Stored(msgs) => msgs.next().await.map(|r| {
                r.map(|m| m.message.payload.clone())
                    .map_err(|e| anyhow::anyhow!("reading the events stream: {e}"))
            }),
        }
    }
}

async fn run(args: &TailArgs) -> anyhow::Result<TailEnd> {
    let subject = filter(args)?;
    let (_, client) = args.client.connect("toolstream-tail").await?;
    let mut source = if args.from_start {
        let js = async_nats::jetstream::new(client.clone());
        let stream_name = js.stream_by_subject(subject.clone()).await.with_context(|| {
            format!("no JetStream stream holds {subject}: has `toolstream run` started against this server?")
        })?;
        let stream = js
            .get_stream(&stream_name)
            .await
            .with_context(|| format!("opening stream {stream_name}"))?;
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject.clone(),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating an ordered consumer on {stream_name}"))?;
        Source::Stored(Box::new(
            consumer
                .messages()
                .await
                .context("reading the events stream")?,
        ))
    } else {
        Source::Live(
            client
                .subscribe(subject.clone())
                .await
                .with_context(|| format!("subscribing to {subject}"))?,
        )
    };
    eprintln!("toolstream tail: following {subject}");
    // A timeout beyond what the clock can represent means "no deadline".
    let deadline = args.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut seen = 0u64;
    let stdout = std::io::stdout();
    loop {
        if args.count.is_some_and(|want| seen >= want) {
            return Ok(TailEnd::CountReached);
        }
        let next = match deadline {
            Some(d) => match tokio::time::timeout_at(d, source.next()).await {
                Ok(n) => n,
                Err(_) => return Ok(TailEnd::TimedOut(seen)),
            },
            None => source.next().await,
        };
        let mut payload = match next {
            Some(p) => p?,
            None => return Ok(TailEnd::Closed(seen)),
        };
        if args.full {
            if let Some(reference) = payload_ref(&payload) {
                let js = async_nats::jetstream::new(client.clone());
                payload = sink::payloads::fetch(&js, &reference)
                    .await
                    .with_context(|| format!("fetching the event behind {}", reference.object))?
                    .into();
            }
        }
        let mut out = stdout.lock();
        out.write_all(&payload).context("writing to stdout")?;
        out.write_all(b"\n").context("writing to stdout")?;
        out.flush().context("writing to stdout")?;
        seen += 1;
    }
}

/// The `payload_ref` of an event published by reference.
fn payload_ref(payload: &[u8]) -> Option<chunk_model::PayloadRef> {
    #[derive(serde::Deserialize)]
    struct Small {
        payload_ref: Option<chunk_model::PayloadRef>,
    }
    serde_json::from_slice::<Small>(payload).ok()?.payload_ref
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(conv: Option<&str>) -> TailArgs {
        TailArgs {
            client: crate::cli::connection::ConnectionArgs::default(),
            conversation: conv.map(String::from),
            from_start: false,
            count: None,
            timeout: None,
            full: false,
        }
    }

    #[test]
    fn only_events_published_by_reference_have_a_payload_ref() {
        assert!(payload_ref(br#"{"type":"tool_call.completed"}"#).is_none());
        assert!(payload_ref(b"not json").is_none());
        let r = payload_ref(
            br#"{"type":"tool_call.completed","payload_ref":{"bucket":"B","object":"ev_1","size":3,"sha256":"ab"}}"#,
        )
        .expect("a reference");
        assert_eq!(
            (r.bucket.as_str(), r.object.as_str(), r.size),
            ("B", "ev_1", 3)
        );
    }

    #[test]
    fn filter_covers_one_or_every_conversation() {
        assert_eq!(filter(&args(None)).unwrap(), "toolstream.events.*.>");
        assert_eq!(filter(&args(Some("c1"))).unwrap(), "toolstream.events.c1.>");
        assert!(filter(&args(Some("a.b"))).is_err());
    }

    #[test]
    fn timeouts_take_units_or_bare_seconds() {
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("5x").is_err());
    }
}
