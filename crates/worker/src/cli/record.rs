//! `toolstream record --conversation C [--message M] [--since TIME] OUT`: copies a
//! conversation's chunks and results from the input stream into a file `toolstream replay`
//! reads (format: `cli/input_log.rs`), keeping subjects, headers and stream sequence numbers.
//! It reads through an ordered consumer: nothing is acknowledged, the worker is not affected.

use super::input_log::{self, Header};
use anyhow::{bail, Context};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `toolstream record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Server, subject prefix, auth and TLS (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
    /// Conversation to record.
    #[arg(long)]
    pub conversation: String,
    /// Only this message's chunks and results.
    #[arg(long)]
    pub message: Option<String>,
    /// Only inputs stored at or after this time: RFC 3339 (`2026-11-22T21:00:00Z`) or a
    /// duration ago (`90s`, `10m`, `2h`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Input stream name.
    #[arg(long, env = "TOOLSTREAM_INPUT_STREAM", default_value = "TOOLSTREAM_IN")]
    pub input_stream: String,
    /// The file to write (`-` for stdout).
    pub out: PathBuf,
}

/// `--since`: RFC 3339, or a duration before now.
pub fn parse_since(text: &str) -> anyhow::Result<async_nats::datetime::DateTime> {
    if let Ok(t) = async_nats::datetime::parse_rfc3339(text) {
        return Ok(t);
    }
    let ago = super::tail::parse_timeout(text).map_err(|_| {
        anyhow::anyhow!(
            "--since {text:?}: expected RFC 3339 (2026-11-22T21:00:00Z) or a duration ago (10m)"
        )
    })?;
    let now = crate::consume::watermark::now_ms() as i128 * 1_000_000;
    async_nats::datetime::from_nanos(now - ago.as_nanos() as i128)
        .map_err(|e| anyhow::anyhow!("--since {text:?}: {e}"))
}

/// Runs the command.
pub fn main(args: RecordArgs) -> anyhow::Result<ExitCode> {
    input_log::check_ids(&args.conversation, args.message.as_deref())?;
    let since = args.since.as_deref().map(parse_since).transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let progress = super::output::Progress::new("record");
    let (config, inputs) = runtime.block_on(async {
        let (config, client) = args.client.connect("toolstream-record").await?;
        let js = async_nats::jetstream::new(client);
        let inputs = input_log::read_inputs(
            &js,
            &args.input_stream,
            &config.subject_prefix,
            &args.conversation,
            args.message.as_deref(),
            since,
            |read, total| progress.show(read, total, "inputs"),
        )
        .await?;
        anyhow::Ok((config, inputs))
    })?;
    progress.done();
    if inputs.is_empty() {
        bail!(
            "stream {} holds no input of conversation {:?}{}{}: nothing recorded",
            args.input_stream,
            args.conversation,
            args.message
                .as_deref()
                .map(|m| format!(", message {m:?}"))
                .unwrap_or_default(),
            if since.is_some() { " since then" } else { "" }
        );
    }
    let header = Header {
        toolstream_recording: input_log::FORMAT_VERSION,
        conversation: args.conversation.clone(),
        message: args.message.clone(),
        stream: args.input_stream.clone(),
        subject_prefix: config.subject_prefix.clone(),
        recorded_at_ms: crate::consume::watermark::now_ms(),
        inputs: inputs.len(),
    };
    if args.out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        input_log::write(&mut out, &header, &inputs)?;
    } else {
        let file = std::fs::File::create(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
        let mut out = std::io::BufWriter::new(file);
        input_log::write(&mut out, &header, &inputs)
            .with_context(|| format!("writing {}", args.out.display()))?;
        out.flush()?;
    }
    let messages: std::collections::BTreeSet<&str> =
        inputs.iter().map(|i| i.subject.as_str()).collect();
    eprintln!(
        "toolstream record: {} input(s) on {} subject(s), stream seq {}..={}, written to {}",
        inputs.len(),
        messages.len(),
        inputs.first().map_or(0, |i| i.stream_seq),
        inputs.last().map_or(0, |i| i.stream_seq),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
