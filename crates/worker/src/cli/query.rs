//! `toolstream query message C M` and `toolstream query history C --target PROVIDER [...]`:
//! the worker's query service (serve/query.rs, README "Contracts") from the command line.
//! A reply stored by reference (`payload_ref`, larger than the server's `max_payload`) is
//! fetched whole; a service error (400, 404, 500) is one line on stderr and a non-zero exit.

use super::output::{columns, Style};
use anyhow::{bail, Context};
use chunk_model::wire::Subjects;
use chunk_model::MessageSnapshot;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `toolstream query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Server, subject prefix, auth and TLS (the same flags as `run`).
    #[command(flatten)]
    pub client: crate::cli::connection::ConnectionArgs,
    /// Print the service's JSON answer as it came (one line), for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    /// How long to wait for the answer (`500ms`, `5s`, `1m`).
    #[arg(long, default_value = "5s", value_parser = super::tail::parse_timeout, global = true)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub what: QueryWhat,
}

/// What to ask.
#[derive(Debug, clap::Subcommand)]
pub enum QueryWhat {
    /// The stored calls and results of one message (what a UI shows after a refresh).
    Message {
        /// Conversation id.
        conversation: String,
        /// Message id.
        message: String,
    },
    /// The conversation's history, valid for a provider's API.
    History {
        /// Conversation id.
        conversation: String,
        /// The format: openai-chat, openai-responses, anthropic, gemini, bedrock, ollama,
        /// mistral, ...
        #[arg(long, default_value = "openai-chat")]
        target: String,
        /// Longest result text sent, in characters (100..=10000) [default: 500].
        #[arg(long)]
        max_result_chars: Option<usize>,
        /// Keep only the last N messages (widened so no call loses its results).
        #[arg(long)]
        window: Option<usize>,
        /// Render tool history as plain text messages.
        #[arg(long)]
        strict_text: bool,
        /// Result text for a call with no recorded result [default: "[No result recorded]"].
        #[arg(long)]
        placeholder: Option<String>,
        /// Responses target: send each call's stored item id.
        #[arg(long)]
        send_item_ids: bool,
    },
}

/// Runs the command.
pub fn main(args: QueryArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let _entered = runtime.enter();
    let (subject, body) = request(&args)?;
    let answer = runtime.block_on(async {
        let (_, client) = args.client.connect("toolstream-query").await?;
        ask(&client, &subject, body, args.timeout).await
    })?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    if args.json {
        out.write_all(&answer)?;
        out.write_all(b"\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    match &args.what {
        QueryWhat::Message { .. } => {
            let snapshot: MessageSnapshot =
                serde_json::from_slice(&answer).context("the answer is not a message snapshot")?;
            for line in render_snapshot(&snapshot, &Style::stdout()) {
                writeln!(out, "{line}")?;
            }
        }
        QueryWhat::History { .. } => {
            let value: serde_json::Value =
                serde_json::from_slice(&answer).context("the answer is not JSON")?;
            writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The request's subject and body.
fn request(args: &QueryArgs) -> anyhow::Result<(String, Vec<u8>)> {
    let prefix = args.client.resolve()?.subject_prefix;
    let subjects = Subjects::new(&prefix);
    match &args.what {
        QueryWhat::Message {
            conversation,
            message,
        } => {
            super::input_log::check_ids(conversation, Some(message))?;
            Ok((subjects.query_message(conversation, message), Vec::new()))
        }
        QueryWhat::History {
            conversation,
            target,
            max_result_chars,
            window,
            strict_text,
            placeholder,
            send_item_ids,
        } => {
            super::input_log::check_ids(conversation, None)?;
            let mut body = serde_json::Map::new();
            body.insert("target".into(), target.clone().into());
            if let Some(n) = max_result_chars {
                body.insert("max_result_chars".into(), (*n).into());
            }
            if let Some(n) = window {
                body.insert("window".into(), (*n).into());
            }
            if *strict_text {
                body.insert("strict_text".into(), true.into());
            }
            if let Some(p) = placeholder {
                body.insert("placeholder".into(), p.clone().into());
            }
            if *send_item_ids {
                body.insert("send_item_ids".into(), true.into());
            }
            // the service names a bad target precisely; check here too, for a clear local error
            if serde_json::from_value::<chunk_model::history::HistoryRequest>(
                serde_json::Value::Object(body.clone()),
            )
            .is_err()
            {
                bail!("--target {target:?} is not a history format (openai-chat, openai-responses, anthropic, gemini, bedrock, ollama, mistral, ...)");
            }
            Ok((
                subjects.query_history(conversation),
                serde_json::to_vec(&body)?,
            ))
        }
    }
}

/// Sends one request to the query service; a service error becomes an error naming its code,
/// a reply by reference is fetched whole.
pub async fn ask(
    client: &async_nats::Client,
    subject: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> anyhow::Result<bytes::Bytes> {
    let reply = tokio::time::timeout(timeout, client.request(subject.to_string(), body.into()))
        .await
        .map_err(|_| anyhow::anyhow!("no answer on {subject} within {timeout:?}"))?
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => anyhow::anyhow!(
                "no query service answers on {subject}: is `toolstream run` up against this server (and this --subject-prefix)?"
            ),
            _ => anyhow::anyhow!("asking {subject}: {e}"),
        })?;
    if let Some((code, why)) = crate::serve::query::reply::service_error(&reply) {
        bail!("the query service answered {code}: {why}");
    }
    let js = async_nats::jetstream::new(client.clone());
    crate::serve::query::reply::answer(&js, reply)
        .await
        .context("fetching the answer stored in the payload bucket")
}

/// A message snapshot for a person: the message line, then one aligned row per call, then
/// results.
pub fn render_snapshot(s: &MessageSnapshot, style: &Style) -> Vec<String> {
    let mut out = vec![format!(
        "{} {}/{} · {} · {}{}",
        style.bold("message"),
        s.conversation_id,
        s.message_id,
        s.provider
            .map_or_else(|| "no provider".to_string(), |p| p.to_string()),
        word(&s.status),
        s.finish_reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    )];
    let mut rows = Vec::new();
    for c in &s.calls {
        let status = word(&c.status);
        rows.push(vec![
            format!("  #{}", c.tool_call.index),
            c.tool_call.id.clone(),
            c.tool_call.name.clone(),
            style.status(&status),
            c.reason.clone().unwrap_or_default(),
            excerpt(&c.tool_call.raw_arguments, 60),
        ]);
    }
    out.extend(columns(&rows));
    out.extend(result_lines(s, style));
    out
}

/// A snapshot's results, one line each: matched ones, then orphaned ones.
pub fn result_lines(s: &MessageSnapshot, style: &Style) -> Vec<String> {
    let matched = s.tool_results.iter().map(|r| {
        format!(
            "  result for {}{}: {}",
            r.tool_call_id,
            if r.is_error { " (error)" } else { "" },
            excerpt(&r.output, 80)
        )
    });
    let orphaned = s.orphaned_results.iter().map(|r| {
        format!(
            "  {} result for {}: {}",
            style.warn("orphaned"),
            r.tool_call_id,
            excerpt(&r.output, 80)
        )
    });
    matched.chain(orphaned).collect()
}

/// A status as the wire spells it (`completed`, `streaming`, ...).
pub fn word<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}

/// `text` on one line, cut at `max` characters with `…`.
pub fn excerpt(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut s: String = one_line.chars().take(max).collect();
    s.push('…');
    s
}
