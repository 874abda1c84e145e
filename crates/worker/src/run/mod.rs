//! `toolstream run`: wires config → tracing → store → NATS connection → provisioning → the
//! consume loop, the outbox relay, the query service and the HTTP endpoint, then waits for the
//! one shutdown path.
//!
//! Shutdown order (SIGINT/SIGTERM): stop fetching and finish the batch in hand (the consume
//! loop), flush sled, drain the outbox for at most `relay.shutdown_timeout`, stop the query
//! service and HTTP, flush the NATS client. Whatever is left in the outbox is published on the
//! next start.
//!
//! The room: `args` (the flags) → `config` (the typed settings) → `validate` (the ones refused
//! together), `duration` (human durations), `shutdown` (the one stop path), `private_dir` (the
//! data directory, 0700), `redact` (what logs may show), `failpoints` (test crashes, feature
//! `failpoints` only), `ready` (provisioning retried until the server is ready).

pub(crate) mod args;
pub(crate) mod checkpoint;
pub(crate) mod config;
pub(crate) mod duration;
pub(crate) mod engine;
pub(crate) mod failpoints;
mod leased;
pub(crate) mod private_dir;
mod ready;
pub(crate) mod redact;
pub(crate) mod shutdown;
mod validate;

use crate::nats::provision;
use crate::run::config::{Assignment, Config, LogFormat};
use crate::serve::http::Health;
use crate::serve::metrics::Metrics;
use anyhow::Context as _;
use async_nats::jetstream;
use chunk_model::wire::Subjects;
use engine::{Engine, Running, Stop};
use ready::Consumers;
use sink::relay::Drained;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub use args::RunArgs;

/// Runs the command.
pub fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    failpoints::refuse_unless_compiled_in()?;
    let print = args.print_config;
    let config = args.resolve()?;
    if print {
        print!("{}", toml::to_string_pretty(&config.redacted())?);
        return Ok(ExitCode::SUCCESS);
    }
    init_tracing(config.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("toolstream")
        .build()
        .context("start the tokio runtime")?;
    runtime.block_on(run(config))
}

/// Logs to stderr, human or JSON; level from `RUST_LOG` (default `info`). Colors only when
/// stderr is a terminal: a log redirected to a file or a collector gets plain text.
fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // async-nats logs every failed connect attempt at info as a bare "IO error"; the worker
    // says it itself, with the cause (nats::connect). Its lines are back with RUST_LOG naming it.
    let names_async_nats = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("async_nats"));
    if !names_async_nats {
        if let Ok(quiet) = "async_nats=warn".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// An event carries a call's arguments twice (raw and parsed): with the server's `max_payload`
/// below that, the biggest calls' events are published in their small form with `payload_ref`
/// (the whole event in the payload bucket, `sink::payloads`). That is the designed path, not a
/// fault: the default `max_argument_bytes` (8 MiB) is above what the default server
/// `max_payload` (1 MiB) carries inline, so it is said once, as information, with the size
/// above which it happens.
fn say_when_events_go_by_reference(client: &async_nats::Client, config: &Config) {
    let max_payload = client.server_info().max_payload;
    let needed = config
        .assembler
        .max_argument_bytes
        .saturating_mul(2)
        .saturating_add(64 * 1024);
    if max_payload > 0 && max_payload < needed {
        tracing::info!(
            max_payload,
            max_argument_bytes = config.assembler.max_argument_bytes,
            "the server's max_payload is below what the events of calls with more than about \
             {} KiB of arguments need: those are stored whole in the payload bucket and \
             published with payload_ref, as designed (raise max_payload, \
             deploy/nats-server.conf, to publish them inline)",
            max_payload.saturating_sub(64 * 1024) / 2 / 1024
        );
    }
}

/// Longest wait for each service and the final client flush at exit.
const FINAL_WAIT: Duration = Duration::from_secs(5);

/// Runs a service; logs at once if it ends with an error (e.g. the metrics port is taken),
/// instead of only at shutdown. The worker goes on without it.
async fn report_early_exit(
    name: &'static str,
    service: impl std::future::Future<Output = anyhow::Result<()>>,
) {
    if let Err(e) = service.await {
        tracing::error!(error = %format!("{e:#}"), "{name} stopped; the worker goes on without it");
    }
}

/// The worker, from an effective configuration to a clean exit.
pub async fn run(config: Config) -> anyhow::Result<ExitCode> {
    let (trigger, mut shutdown) = shutdown::channel();
    shutdown::listen_for_signals(trigger.clone());

    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());

    // The metrics/health port is part of the worker's contract with its supervisor: a worker
    // that cannot listen on it (a second worker on the same port) refuses to start.
    let http_listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on metrics_listen {} for /metrics and /healthz (another worker \
                 on the same port? give each its own --metrics-listen)",
                config.metrics_listen
            )
        })?;

    // A static partition's store opens while the client connects (sled's open and the
    // connection's round trips overlap, a few ms each at a start), and before anything is
    // asked of the server: a store that cannot open (a second worker on the same directory)
    // refuses the start at once, with or without a server, its error first, having changed
    // nothing there. (Leased partitions open theirs when their lease is acquired.)
    let opening = match config.consumer.assignment {
        Assignment::Static => {
            let config = config.clone();
            Some(tokio::spawn(async move {
                engine::open_store(&config, &config.store_dir()).await
            }))
        }
        Assignment::Leases => None,
    };
    let running = Arc::new(Running::default());

    let subjects = Subjects::new(&config.subject_prefix);
    let client_name = match config.consumer.assignment {
        Assignment::Static => format!(
            "toolstream-{}-p{}",
            config.consumer.name, config.consumer.partition
        ),
        Assignment::Leases => format!("toolstream-{}-leases", config.consumer.name),
    };
    let hook_health = Arc::clone(&health);
    // provisioning waits for this instead of polling the connection state
    let connected = Arc::new(tokio::sync::Notify::new());
    let hook_connected = Arc::clone(&connected);
    let hook: crate::nats::connect::EventHook =
        Arc::new(move |event: &async_nats::Event| match event {
            async_nats::Event::Connected => {
                hook_health.set_nats_connected(true);
                hook_connected.notify_one();
            }
            async_nats::Event::Disconnected | async_nats::Event::Closed => {
                hook_health.set_nats_connected(false)
            }
            _ => {}
        });
    let client = match crate::nats::connect::connect(&config, &client_name, Some(hook)).await {
        Ok(client) => client,
        Err(e) => {
            if let Some(opening) = opening {
                opened(opening.await)?;
            }
            return Err(e);
        }
    };
    if client.connection_state() == async_nats::connection::State::Connected {
        health.set_nats_connected(true);
    }
    let js = jetstream::new(client.clone());
    tracing::info!(url = %config.nats_url, "NATS client started");

    // (the client connects in the background meanwhile: `connect` does not wait for it)
    let static_store = match opening {
        Some(opening) => Some(opened(opening.await)?),
        None => None,
    };
    let Some(consumers) =
        ready::provision_until_ready(&client, &connected, &js, &config, &subjects, &mut shutdown)
            .await?
    else {
        tracing::info!("shutdown before provisioning finished");
        return Ok(ExitCode::SUCCESS);
    };
    tracing::info!(
        input = %config.streams.input,
        events = %config.streams.events,
        dlq = %config.streams.dlq,
        consumers = ?match &consumers {
            Consumers::Static(_) => provision::consumer_names(&config, &subjects)
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>(),
            Consumers::Leased => vec!["(one set per leased partition)".to_string()],
        },
        "JetStream ready"
    );

    say_when_events_go_by_reference(&client, &config);

    // Events, dead-letter bodies and query replies larger than max_payload go to this bucket.
    // Opened (created when missing) beside the start, not before it: a relay or query that
    // needs it first waits for the same attempt, and if that fails they retry on first need.
    let payloads =
        sink::payloads::Payloads::new(js.clone(), sink::payloads::BUCKET, config.streams.replicas);
    tokio::spawn({
        let payloads = payloads.clone();
        async move {
            match payloads.bucket().await {
                Ok(_) => tracing::info!(bucket = %payloads.bucket_name(), "payload bucket ready"),
                Err(e) => tracing::warn!(
                    error = %e,
                    "payload bucket not available yet; retried when needed"
                ),
            }
        }
    });

    // The HTTP API for UIs reads the events stream and asks the query service; it never
    // touches the store or the consume loop.
    let ui = config.ui.enabled.then(|| {
        let loopback = http_listener
            .local_addr()
            .map(|a| a.ip().is_loopback())
            .unwrap_or(false);
        if !loopback && config.ui.token.is_none() {
            tracing::warn!(
                "ui.token is not set and metrics_listen is not a loopback address: /v1 answers \
                 403 until a token is set (ui.enabled = false turns it off)"
            );
        }
        Arc::new(
            crate::serve::ui::Api::new(
                client.clone(),
                &config.subject_prefix,
                &config.streams.events,
                config.ui.clone(),
                loopback,
                shutdown.receiver(),
            )
            .with_metrics(Arc::clone(&metrics)),
        )
    });
    // GET /metrics, /healthz and /v1/….
    let http_handle = tokio::spawn(report_early_exit(
        "http endpoint",
        crate::serve::http::serve_on(
            http_listener,
            Arc::clone(&metrics),
            Arc::clone(&running),
            Arc::clone(&health),
            ui,
            shutdown.receiver(),
        ),
    ));
    let shared = engine::Shared {
        config: config.clone(),
        client: client.clone(),
        js: js.clone(),
        subjects: subjects.clone(),
        metrics: Arc::clone(&metrics),
        health: Arc::clone(&health),
        payloads: payloads.clone(),
    };
    let clean = match (consumers, static_store) {
        (Consumers::Static(consumers), Some(store)) => {
            let engine = Engine::start_static(&shared, store, consumers, &shutdown).await?;
            running.add(&engine);
            health.set_store_open(true);
            // Wait for the one shutdown path (or a consume loop that should never end).
            let (clean, drained) = tokio::select! {
                _ = shutdown.wait() => engine.stop(Stop::Graceful).await,
                _ = wait_for_end(&engine) => {
                    trigger.trigger();
                    engine.stop(Stop::Graceful).await
                }
            };
            say_drained(drained);
            clean
        }
        (Consumers::Static(_), None) | (Consumers::Leased, Some(_)) => {
            anyhow::bail!("provisioning disagrees with consumer.assignment")
        }
        (Consumers::Leased, None) => {
            health.set_store_open(true);
            leased::run(&shared, &running, &trigger, &mut shutdown).await?
        }
    };
    trigger.trigger();

    // The services stop on the shutdown signal; none of these waits may hang the exit (a
    // disconnected client cannot flush).
    if tokio::time::timeout(FINAL_WAIT, http_handle).await.is_err() {
        tracing::warn!("http endpoint did not stop in time");
    }
    health.set_store_open(false);
    if client.connection_state() != async_nats::connection::State::Connected {
        tracing::warn!(
            "not connected at exit: unsent acks mean redeliveries, which the store recognizes"
        );
    } else {
        match tokio::time::timeout(FINAL_WAIT, client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "final client flush failed"),
            Err(_) => tracing::warn!("final client flush timed out (not connected?)"),
        }
    }
    if !clean {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The static store from its opening task.
fn opened(
    joined: Result<anyhow::Result<Arc<assembler::Store>>, tokio::task::JoinError>,
) -> anyhow::Result<Arc<assembler::Store>> {
    joined.context("open the store")?
}

/// Completes when an engine's consume loop ended without being asked to (a failure).
async fn wait_for_end(engine: &Engine) {
    while !engine.consume_ended() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Says how the final outbox drain ended.
fn say_drained(drained: Drained) {
    match drained {
        Drained::Empty => tracing::info!("stopped; every event published"),
        Drained::Incomplete => {
            tracing::info!("stopped; events still in the outbox are published on the next start")
        }
    }
}
