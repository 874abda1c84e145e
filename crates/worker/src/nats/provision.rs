//! JetStream provisioning: create the input, events and dead-letter streams and this worker's
//! durable pull consumer when missing; check them when present. A setting that differs from
//! what toolstream needs is a [`Mismatch`] naming the field, reported as a fatal error: the
//! worker never reconfigures an existing stream or consumer silently.
//!
//! Every stream is created with `streams.replicas` replicas (3 on a cluster); an existing
//! stream with another count is a mismatch like any other.
//!
//! Only nats-server 2.9 features are used (one filter subject per consumer, no metadata).

use crate::run::config::Config;
use async_nats::jetstream::consumer::{self, pull, AckPolicy, DeliverPolicy, FromConsumer};
use async_nats::jetstream::context::{
    ConsumerInfoErrorKind, CreateStreamErrorKind, GetStreamErrorKind,
};
use async_nats::jetstream::stream::{self, ConsumerErrorKind, RetentionPolicy, StorageType};
use async_nats::jetstream::Context;
use async_nats::jetstream::ErrorCode;
use chunk_model::wire::Subjects;
use std::collections::BTreeSet;
use std::fmt;

/// One setting of an existing stream or consumer that differs from what toolstream needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The setting, as JetStream names it (`subjects`, `retention`, `ack_policy`, ...).
    pub field: &'static str,
    /// What the server has.
    pub found: String,
    /// What toolstream needs.
    pub expected: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is {} but toolstream needs {}",
            self.field, self.found, self.expected
        )
    }
}

/// How provisioning failed.
#[derive(Debug)]
pub enum ProvisionError {
    /// The server is not reachable or answered with a transient error: retry.
    Transient(anyhow::Error),
    /// An existing stream/consumer is incompatible, or the request was refused: stop and say why.
    Fatal(anyhow::Error),
}

impl fmt::Display for ProvisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProvisionError::Transient(e) => write!(f, "{e:#}"),
            ProvisionError::Fatal(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for ProvisionError {}

/// The stream configs toolstream needs: input, events, dead letters.
pub fn desired_streams(config: &Config, subjects: &Subjects) -> [stream::Config; 3] {
    let base = |name: &str, subjects: Vec<String>, description: &str| stream::Config {
        name: name.to_string(),
        subjects,
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: config.streams.replicas,
        description: Some(description.to_string()),
        ..Default::default()
    };
    let input = base(
        &config.streams.input,
        subjects.input_stream_subjects(config.consumer.partitions),
        "toolstream input: raw provider chunks and tool results",
    );
    let mut events = base(
        &config.streams.events,
        subjects.events_stream_subjects(),
        "toolstream events: completed tool calls and results",
    );
    events.duplicate_window = config.streams.duplicate_window.get();
    let mut dlq = base(
        &config.streams.dlq,
        subjects.dlq_stream_subjects(),
        "toolstream dead letters: input that could not be assembled",
    );
    // the relay re-publishes a dead-letter row whose PubAck was lost, like an event row
    dlq.duplicate_window = config.streams.duplicate_window.get();
    [input, events, dlq]
}

/// The durable consumers of this worker's partition, as (name, filter subject): `<name>`
/// (whole stream) unpartitioned, else `<name>-p<k>-chunks` and `<name>-p<k>-results`.
pub fn consumer_names(config: &Config, subjects: &Subjects) -> Vec<(String, String)> {
    subjects
        .consumer_filters(config.consumer.partitions, config.consumer.partition)
        .into_iter()
        .map(|(suffix, filter)| (format!("{}{suffix}", config.consumer.name), filter))
        .collect()
}

/// The pull consumer config toolstream needs, for one (name, filter).
pub fn desired_consumer(config: &Config, name: &str, filter: &str) -> pull::Config {
    let c = &config.consumer;
    pull::Config {
        durable_name: Some(name.to_string()),
        description: Some("toolstream worker".to_string()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait: c.ack_wait.get(),
        // The server redelivers without limit and never drops a message on its own: the
        // worker bounds deliveries itself (consumer.max_deliver: a dead letter, never silence).
        max_deliver: -1,
        max_ack_pending: c.max_ack_pending,
        filter_subject: filter.to_string(),
        ..Default::default()
    }
}

fn sorted(v: &[String]) -> BTreeSet<&str> {
    v.iter().map(String::as_str).collect()
}

/// Settings of an existing stream that differ from `want` (duplicate window checked only when
/// `check_duplicates`).
pub fn stream_mismatches(
    have: &stream::Config,
    want: &stream::Config,
    check_duplicates: bool,
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if sorted(&have.subjects) != sorted(&want.subjects) {
        out.push(Mismatch {
            field: "subjects",
            found: format!("{:?}", have.subjects),
            expected: format!("{:?}", want.subjects),
        });
    }
    if have.retention != want.retention {
        out.push(Mismatch {
            field: "retention",
            found: format!("{:?}", have.retention),
            expected: format!("{:?}", want.retention),
        });
    }
    if have.storage != want.storage {
        out.push(Mismatch {
            field: "storage",
            found: format!("{:?}", have.storage),
            expected: format!("{:?}", want.storage),
        });
    }
    // the server reports an unset count (0) as 1
    if have.num_replicas.max(1) != want.num_replicas.max(1) {
        out.push(Mismatch {
            field: "num_replicas",
            found: have.num_replicas.max(1).to_string(),
            expected: want.num_replicas.max(1).to_string(),
        });
    }
    if have.no_ack {
        out.push(Mismatch {
            field: "no_ack",
            found: "true".to_string(),
            expected: "false (publishes must be acknowledged)".to_string(),
        });
    }
    if check_duplicates && have.duplicate_window != want.duplicate_window {
        out.push(Mismatch {
            field: "duplicate_window",
            found: format!("{:?}", have.duplicate_window),
            expected: format!("{:?}", want.duplicate_window),
        });
    }
    out
}

/// Settings of an existing consumer that differ from `want`.
pub fn consumer_mismatches(have: &consumer::Config, want: &pull::Config) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut push = |field, found: String, expected: String| {
        out.push(Mismatch {
            field,
            found,
            expected,
        })
    };
    if have.deliver_subject.is_some() {
        push(
            "deliver_subject",
            format!("{:?} (a push consumer)", have.deliver_subject),
            "none (a pull consumer)".to_string(),
        );
    }
    if have.ack_policy != want.ack_policy {
        push(
            "ack_policy",
            format!("{:?}", have.ack_policy),
            format!("{:?}", want.ack_policy),
        );
    }
    if have.filter_subject != want.filter_subject {
        push(
            "filter_subject",
            format!("{:?}", have.filter_subject),
            format!("{:?}", want.filter_subject),
        );
    }
    if have.max_deliver != want.max_deliver {
        push(
            "max_deliver",
            have.max_deliver.to_string(),
            want.max_deliver.to_string(),
        );
    }
    if have.max_ack_pending != want.max_ack_pending {
        push(
            "max_ack_pending",
            have.max_ack_pending.to_string(),
            want.max_ack_pending.to_string(),
        );
    }
    if have.ack_wait != want.ack_wait {
        push(
            "ack_wait",
            format!("{:?}", have.ack_wait),
            format!("{:?}", want.ack_wait),
        );
    }
    out
}

fn fatal_mismatch(what: &str, name: &str, mismatches: &[Mismatch]) -> ProvisionError {
    let list: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
    ProvisionError::Fatal(anyhow::anyhow!(
        "existing {what} {name} is incompatible: {}. toolstream does not reconfigure it; \
         change it with `nats {what} edit {name}` (or delete it) or change toolstream's settings",
        list.join("; ")
    ))
}

/// Looks the stream `name` up: `None` when the server has none of that name.
async fn look_up_stream(
    js: &Context,
    name: &str,
) -> Result<Option<stream::Stream>, ProvisionError> {
    match js.get_stream(name).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(js_err)
                if js_err.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(ProvisionError::Transient(anyhow::anyhow!(
                "look up stream {name}: {e}"
            ))),
        },
    }
}

/// Checks the stream a lookup found against `want`, or creates it when the lookup found none.
async fn ensure_stream(
    js: &Context,
    want: &stream::Config,
    check_duplicates: bool,
    found: Result<Option<stream::Stream>, ProvisionError>,
) -> Result<stream::Stream, ProvisionError> {
    if let Some(s) = found? {
        // (the lookup's answer is the stream's info: no second request for it)
        let mismatches = stream_mismatches(&s.cached_info().config, want, check_duplicates);
        return match mismatches.is_empty() {
            true => Ok(s),
            false => Err(fatal_mismatch("stream", &want.name, &mismatches)),
        };
    }
    tracing::info!(stream = %want.name, subjects = ?want.subjects, "creating stream");
    js.create_stream(want.clone())
        .await
        .map_err(|e| match e.kind() {
            // overlapping subjects with another stream, bad config: nothing to retry
            CreateStreamErrorKind::JetStream(js_err)
                if js_err.error_code() != ErrorCode::STREAM_NAME_EXIST =>
            {
                ProvisionError::Fatal(anyhow::anyhow!("create stream {}: {js_err}", want.name))
            }
            _ => ProvisionError::Transient(anyhow::anyhow!("create stream {}: {e}", want.name)),
        })
}

/// Creates or checks the three streams; returns the input stream. The three lookups go out
/// at once (one round trip at a start that finds them in place, instead of three); then each
/// is checked or created in turn, input, events, dead letters, and the first failure stops
/// it: a start refused over one stream creates none after it.
pub async fn provision_streams(
    js: &Context,
    config: &Config,
    subjects: &Subjects,
) -> Result<stream::Stream, ProvisionError> {
    let [input, events, dlq] = desired_streams(config, subjects);
    let (found_input, found_events, found_dlq) = tokio::join!(
        look_up_stream(js, &input.name),
        look_up_stream(js, &events.name),
        look_up_stream(js, &dlq.name),
    );
    let input_stream = ensure_stream(js, &input, false, found_input).await?;
    ensure_stream(js, &events, true, found_events).await?;
    ensure_stream(js, &dlq, false, found_dlq).await?;
    Ok(input_stream)
}

/// Creates or checks the three streams and this worker's consumers; returns the consumers.
pub async fn provision(
    js: &Context,
    config: &Config,
    subjects: &Subjects,
) -> Result<Vec<consumer::PullConsumer>, ProvisionError> {
    let input_stream = provision_streams(js, config, subjects).await?;
    let mut consumers = Vec::new();
    for (name, filter) in consumer_names(config, subjects) {
        let want = desired_consumer(config, &name, &filter);
        consumers.push(ensure_consumer(js, &input_stream, &name, &want).await?);
    }
    Ok(consumers)
}

/// Creates `want` or checks the existing consumer `name`: one request either way (the
/// handle is made from the lookup's or the creation's answer).
async fn ensure_consumer(
    js: &Context,
    input_stream: &stream::Stream,
    name: &str,
    want: &pull::Config,
) -> Result<consumer::PullConsumer, ProvisionError> {
    match input_stream.consumer_info(name).await {
        Ok(info) => {
            let mismatches = consumer_mismatches(&info.config, want);
            if !mismatches.is_empty() {
                return Err(fatal_mismatch("consumer", name, &mismatches));
            }
            let config =
                pull::Config::try_from_consumer_config(info.config.clone()).map_err(|e| {
                    ProvisionError::Fatal(anyhow::anyhow!(
                        "consumer {name} is not a pull consumer: {e}"
                    ))
                })?;
            Ok(consumer::Consumer::new(config, info, js.clone()))
        }
        Err(e) => {
            let not_found = match e.kind() {
                ConsumerInfoErrorKind::NotFound => true,
                ConsumerInfoErrorKind::JetStream(js_err) => {
                    js_err.error_code() == ErrorCode::CONSUMER_NOT_FOUND
                }
                _ => false,
            };
            if !not_found {
                return Err(ProvisionError::Transient(anyhow::anyhow!(
                    "look up consumer {name}: {e}"
                )));
            }
            if want.filter_subject.is_empty() {
                tracing::info!(consumer = %name, "creating durable consumer of the whole stream");
            } else {
                tracing::info!(consumer = %name, filter = %want.filter_subject, "creating durable consumer");
            }
            input_stream
                .create_consumer(want.clone())
                .await
                .map_err(|e| match e.kind() {
                    // refused by the server (bad filter, limits): retrying cannot help
                    ConsumerErrorKind::JetStream(js_err) => ProvisionError::Fatal(anyhow::anyhow!(
                        "create consumer {name} with filter {:?}: {js_err}",
                        want.filter_subject
                    )),
                    _ => ProvisionError::Transient(anyhow::anyhow!("create consumer {name}: {e}")),
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn setup() -> (Config, Subjects) {
        let c = Config::default();
        let s = Subjects::new(&c.subject_prefix);
        (c, s)
    }

    #[test]
    fn matching_streams_in_another_subject_order_are_compatible() {
        let (c, s) = setup();
        let [input, events, _] = desired_streams(&c, &s);
        let mut have = input.clone();
        have.subjects.reverse();
        assert!(stream_mismatches(&have, &input, false).is_empty());
        assert_eq!(events.duplicate_window, Duration::from_secs(3600));
    }

    #[test]
    fn a_work_queue_input_stream_is_reported_by_field_name() {
        let (c, s) = setup();
        let [input, _, _] = desired_streams(&c, &s);
        let mut have = input.clone();
        have.retention = RetentionPolicy::WorkQueue;
        have.storage = StorageType::Memory;
        let m = stream_mismatches(&have, &input, false);
        let fields: Vec<_> = m.iter().map(|m| m.field).collect();
        assert_eq!(fields, vec!["retention", "storage"]);
    }

    #[test]
    fn a_changed_partition_count_shows_as_a_subjects_mismatch() {
        let (mut c, s) = setup();
        let [one, _, _] = desired_streams(&c, &s);
        c.consumer.partitions = 4;
        let [four, _, _] = desired_streams(&c, &s);
        let m = stream_mismatches(&one, &four, false);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].field, "subjects");
    }

    #[test]
    fn a_shorter_duplicate_window_on_the_events_stream_is_reported() {
        let (c, s) = setup();
        let [_, events, _] = desired_streams(&c, &s);
        let mut have = events.clone();
        have.duplicate_window = Duration::from_secs(120);
        assert_eq!(
            stream_mismatches(&have, &events, true)[0].field,
            "duplicate_window"
        );
    }

    #[test]
    fn every_stream_gets_the_configured_replicas_and_another_count_is_reported() {
        let (mut c, s) = setup();
        let single = desired_streams(&c, &s);
        assert!(single.iter().all(|st| st.num_replicas == 1));
        c.streams.replicas = 3;
        let r3 = desired_streams(&c, &s);
        assert!(r3.iter().all(|st| st.num_replicas == 3));
        for (have, want) in single.iter().zip(&r3) {
            let m = stream_mismatches(have, want, true);
            assert_eq!(m.len(), 1, "{m:?}");
            assert_eq!(m[0].field, "num_replicas");
            assert_eq!((m[0].found.as_str(), m[0].expected.as_str()), ("1", "3"));
        }
        // a stream created without a count (0 = the server's default of 1) matches 1
        let mut unset = single[0].clone();
        unset.num_replicas = 0;
        assert!(stream_mismatches(&unset, &single[0], false).is_empty());
    }

    #[test]
    fn an_ack_none_consumer_is_reported() {
        let (c, _) = setup();
        let want = desired_consumer(&c, "toolstream", "");
        let have = consumer::Config {
            durable_name: want.durable_name.clone(),
            ack_policy: AckPolicy::None,
            ack_wait: want.ack_wait,
            max_deliver: 5,
            max_ack_pending: want.max_ack_pending,
            ..Default::default()
        };
        let fields: Vec<_> = consumer_mismatches(&have, &want)
            .iter()
            .map(|m| m.field)
            .collect();
        assert_eq!(fields, vec!["ack_policy", "max_deliver"]);
    }

    #[test]
    fn partition_consumers_have_their_own_names_and_filters() {
        let (mut c, s) = setup();
        c.consumer.partitions = 3;
        c.consumer.partition = 1;
        let names = consumer_names(&c, &s);
        assert_eq!(
            names,
            vec![
                (
                    "toolstream-p1-chunks".to_string(),
                    "toolstream.p.1.chunks.>".to_string()
                ),
                (
                    "toolstream-p1-results".to_string(),
                    "toolstream.p.1.results.>".to_string()
                ),
            ]
        );
        let want = desired_consumer(&c, &names[0].0, &names[0].1);
        assert_eq!(want.durable_name.as_deref(), Some("toolstream-p1-chunks"));
        assert_eq!(want.filter_subject, "toolstream.p.1.chunks.>");
    }
}
