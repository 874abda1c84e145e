//! The lease bucket: a JetStream key-value bucket spoken directly over its stream, in the
//! standard KV layout (stream `KV_<bucket>`, subjects `$KV.<bucket>.<key>`, deletes as
//! `KV-Operation: DEL` markers), so `nats kv ls/get/watch <bucket>` reads it.
//!
//! Only what nats-server 2.9 supports is used: compare-and-set publishes
//! (`Nats-Expected-Last-Subject-Sequence`), last-message-by-subject reads through the stream
//! leader (`$JS.API.STREAM.MSG.GET`), the subjects of a stream (`$JS.API.STREAM.INFO` with a
//! subjects filter). Every request has a deadline (`op_timeout`), shorter than a lease.

use super::{OwnershipConfig, OwnershipError};
use async_nats::jetstream::context::{CreateStreamErrorKind, GetStreamErrorKind, PublishErrorKind};
use async_nats::jetstream::stream::{
    self, DiscardPolicy, LastRawMessageErrorKind, RetentionPolicy, StorageType,
};
use async_nats::jetstream::{Context, ErrorCode};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;

/// The header a KV delete or purge marker carries.
const KV_OPERATION: &str = "KV-Operation";
/// The compare-and-set header: the publish is refused unless the key's last revision is this.
const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";

/// One key's current value in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its revision (the stream sequence of its last write).
    pub revision: u64,
    /// Its value; `None` for a delete or purge marker (the key is free).
    pub value: Option<Bytes>,
}

/// Why a write failed.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The key's revision was not the expected one (someone else wrote, or it expired).
    Conflict,
    /// The server did not answer in time, or refused for another reason.
    Other(String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Conflict => f.write_str("wrong last revision"),
            WriteError::Other(e) => f.write_str(e),
        }
    }
}

/// The lease bucket of one worker.
#[derive(Clone)]
pub(crate) struct Bucket {
    js: Context,
    stream: stream::Stream,
    /// `$KV.<bucket>.`
    prefix: String,
    op_timeout: Duration,
}

/// The stream config of a lease bucket (what `nats kv add --history 1 --ttl <ttl>` creates).
pub(crate) fn stream_config(cfg: &OwnershipConfig) -> stream::Config {
    stream::Config {
        name: format!("KV_{}", cfg.bucket),
        description: Some("toolstream partition leases (p.<k>) and live workers (w.<id>)".into()),
        subjects: vec![format!("$KV.{}.>", cfg.bucket)],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: cfg.replicas,
        max_messages_per_subject: 1,
        max_age: cfg.lease_ttl,
        // nats-server refuses a duplicate window longer than max_age (2.9 too).
        duplicate_window: cfg.lease_ttl.min(Duration::from_secs(120)),
        discard: DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        ..Default::default()
    }
}

impl Bucket {
    /// Creates the bucket when missing; checks it when present.
    pub(crate) async fn ensure(
        js: Context,
        cfg: &OwnershipConfig,
        op_timeout: Duration,
    ) -> Result<Bucket, OwnershipError> {
        let want = stream_config(cfg);
        Bucket::ensure_stream(js, want, &cfg.bucket, "ownership.lease_ttl", op_timeout).await
    }

    /// Creates the bucket `bucket` with stream config `want` when missing; checks it when
    /// present (`max_age_setting` names the setting its `max_age` comes from).
    pub(crate) async fn ensure_stream(
        js: Context,
        want: stream::Config,
        bucket: &str,
        max_age_setting: &str,
        op_timeout: Duration,
    ) -> Result<Bucket, OwnershipError> {
        let timed = |what: String| OwnershipError::Transient(format!("{what}: timed out"));
        let stream = match tokio::time::timeout(op_timeout * 4, js.get_stream(&want.name)).await {
            Err(_) => return Err(timed(format!("look up {}", want.name))),
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => match e.kind() {
                GetStreamErrorKind::JetStream(js_err)
                    if js_err.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    tracing::info!(%bucket, max_age = ?want.max_age,
                        replicas = want.num_replicas, "creating the bucket");
                    match tokio::time::timeout(op_timeout * 4, js.create_stream(want.clone())).await
                    {
                        Err(_) => return Err(timed(format!("create {}", want.name))),
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => match e.kind() {
                            // Another worker created it first: look again and check it.
                            CreateStreamErrorKind::JetStream(js_err)
                                if js_err.error_code() == ErrorCode::STREAM_NAME_EXIST =>
                            {
                                js.get_stream(&want.name).await.map_err(|e| {
                                    OwnershipError::Transient(format!("look up {}: {e}", want.name))
                                })?
                            }
                            CreateStreamErrorKind::JetStream(js_err) => {
                                return Err(OwnershipError::Bucket(format!(
                                    "create bucket {bucket} (stream {}): {js_err}",
                                    want.name
                                )))
                            }
                            _ => {
                                return Err(OwnershipError::Transient(format!(
                                    "create {}: {e}",
                                    want.name
                                )))
                            }
                        },
                    }
                }
                _ => {
                    return Err(OwnershipError::Transient(format!(
                        "look up {}: {e}",
                        want.name
                    )))
                }
            },
        };
        check(&stream.cached_info().config, &want, bucket, max_age_setting)?;
        Ok(Bucket {
            js,
            stream,
            prefix: format!("$KV.{bucket}."),
            op_timeout,
        })
    }

    /// The subject of `key`.
    pub(crate) fn subject(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The key of a subject of this bucket.
    pub(crate) fn key_of<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject.strip_prefix(self.prefix.as_str())
    }

    /// Every subject of the bucket (`$KV.<bucket>.>`), for a watch.
    pub(crate) fn all_subjects(&self) -> String {
        format!("{}>", self.prefix)
    }

    /// The key's last write, `None` when it has none (never written, or expired).
    pub(crate) async fn last(&self, key: &str) -> Result<Option<Entry>, String> {
        let subject = self.subject(key);
        let get = self.stream.get_last_raw_message_by_subject(&subject);
        match tokio::time::timeout(self.op_timeout, get).await {
            Err(_) => Err(format!("read {key}: timed out")),
            Ok(Ok(msg)) => {
                let marker = msg
                    .headers
                    .get(KV_OPERATION)
                    .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
                Ok(Some(Entry {
                    revision: msg.sequence,
                    value: (!marker).then_some(msg.payload),
                }))
            }
            Ok(Err(e)) => match e.kind() {
                LastRawMessageErrorKind::NoMessageFound => Ok(None),
                LastRawMessageErrorKind::JetStream(js_err)
                    if js_err.error_code() == ErrorCode::NO_MESSAGE_FOUND =>
                {
                    Ok(None)
                }
                _ => Err(format!("read {key}: {e}")),
            },
        }
    }

    /// The keys under `prefix` (e.g. `w.`) that have a message (values and markers alike).
    pub(crate) async fn keys_under(&self, prefix: &str) -> Result<Vec<String>, String> {
        let filter = format!("{}{prefix}>", self.prefix);
        let list = async {
            let mut subjects = self
                .stream
                .info_with_subjects(&filter)
                .await
                .map_err(|e| format!("list {filter}: {e}"))?;
            let mut keys = Vec::new();
            while let Some(item) = subjects.next().await {
                let (subject, _) = item.map_err(|e| format!("list {filter}: {e}"))?;
                if let Some(key) = self.key_of(&subject) {
                    keys.push(key.to_string());
                }
            }
            Ok::<_, String>(keys)
        };
        match tokio::time::timeout(self.op_timeout, list).await {
            Err(_) => Err(format!("list {filter}: timed out")),
            Ok(r) => r,
        }
    }

    /// Writes `value` to `key` if its last revision is `expect` (0: the key has no message).
    /// The new revision.
    pub(crate) async fn put_if(
        &self,
        key: &str,
        value: Bytes,
        expect: u64,
    ) -> Result<u64, WriteError> {
        let mut headers = HeaderMap::new();
        headers.insert(EXPECTED_LAST_SUBJECT_SEQUENCE, expect.to_string().as_str());
        self.publish(key, headers, value).await
    }

    /// Creates `key` unless it holds a value: on a free key (no message, or a delete marker)
    /// the write succeeds, else [`WriteError::Conflict`]. The new revision.
    pub(crate) async fn create(&self, key: &str, value: Bytes) -> Result<u64, WriteError> {
        match self.put_if(key, value.clone(), 0).await {
            Err(WriteError::Conflict) => {}
            other => return other,
        }
        match self.last(key).await.map_err(WriteError::Other)? {
            Some(Entry { value: Some(_), .. }) => Err(WriteError::Conflict),
            Some(Entry {
                revision,
                value: None,
            }) => self.put_if(key, value, revision).await,
            // Expired between the two requests.
            None => self.put_if(key, value, 0).await,
        }
    }

    /// Deletes `key` (a delete marker) if its last revision is `expect`.
    pub(crate) async fn delete_if(&self, key: &str, expect: u64) -> Result<u64, WriteError> {
        let mut headers = HeaderMap::new();
        headers.insert(KV_OPERATION, "DEL");
        headers.insert(EXPECTED_LAST_SUBJECT_SEQUENCE, expect.to_string().as_str());
        self.publish(key, headers, Bytes::new()).await
    }

    async fn publish(
        &self,
        key: &str,
        headers: HeaderMap,
        value: Bytes,
    ) -> Result<u64, WriteError> {
        let subject = self.subject(key);
        let write = async {
            let ack = self
                .js
                .publish_with_headers(subject, headers, value)
                .await
                .map_err(|e| WriteError::Other(format!("write {key}: {e}")))?;
            match ack.await {
                Ok(ack) => Ok(ack.sequence),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    Err(WriteError::Conflict)
                }
                Err(e) => Err(WriteError::Other(format!("write {key}: {e}"))),
            }
        };
        match tokio::time::timeout(self.op_timeout, write).await {
            Err(_) => Err(WriteError::Other(format!("write {key}: timed out"))),
            Ok(r) => r,
        }
    }
}

/// An existing bucket must have the wanted max age (for the lease bucket, the lease TTL: it is
/// what makes a dead owner's lease go away), keep one value per key, cover the bucket's
/// subjects, and have the configured replicas.
fn check(
    have: &stream::Config,
    want: &stream::Config,
    bucket: &str,
    max_age_setting: &str,
) -> Result<(), OwnershipError> {
    let mut wrong = Vec::new();
    if have.max_age != want.max_age {
        wrong.push(format!(
            "max_age is {:?} but {max_age_setting} makes it {:?}",
            have.max_age, want.max_age
        ));
    }
    if have.max_messages_per_subject != 1 {
        wrong.push(format!(
            "history is {} but the bucket needs 1",
            have.max_messages_per_subject
        ));
    }
    if have.subjects != want.subjects {
        wrong.push(format!(
            "subjects are {:?}, not {:?}",
            have.subjects, want.subjects
        ));
    }
    if have.num_replicas != want.num_replicas {
        wrong.push(format!(
            "replicas are {} but streams.replicas is {}",
            have.num_replicas, want.num_replicas
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(OwnershipError::Bucket(format!(
            "the bucket {bucket} (stream {}) exists with other settings: {}; every worker \
             must use the same settings (delete the bucket to change them: \
             `nats kv rm {bucket}`, while no worker runs)",
            want.name,
            wrong.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_keeps_one_value_per_key_for_the_lease_ttl_with_a_legal_duplicate_window() {
        let cfg = OwnershipConfig {
            lease_ttl: Duration::from_secs(2),
            replicas: 3,
            ..OwnershipConfig::default()
        };
        let c = stream_config(&cfg);
        assert_eq!(c.name, "KV_TOOLSTREAM_LEASES");
        assert_eq!(c.subjects, vec!["$KV.TOOLSTREAM_LEASES.>".to_string()]);
        assert_eq!(c.max_age, Duration::from_secs(2));
        assert!(c.duplicate_window <= c.max_age);
        assert_eq!(c.max_messages_per_subject, 1);
        assert_eq!(c.num_replicas, 3);
        let long = stream_config(&OwnershipConfig {
            lease_ttl: Duration::from_secs(3600),
            ..OwnershipConfig::default()
        });
        assert_eq!(long.duplicate_window, Duration::from_secs(120));
    }

    #[test]
    fn another_max_age_is_refused_naming_the_setting() {
        let cfg = OwnershipConfig::default();
        let want = stream_config(&cfg);
        let mut have = want.clone();
        assert!(check(&have, &want, "B", "ownership.lease_ttl").is_ok());
        have.max_age = Duration::from_secs(99);
        let err = check(&have, &want, "B", "ownership.lease_ttl")
            .expect_err("mismatch")
            .to_string();
        assert!(
            err.contains("max_age") && err.contains("lease_ttl"),
            "{err}"
        );
    }
}
