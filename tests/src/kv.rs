//! The partition lease bucket (`toolstream::ownership`, default `TOOLSTREAM_LEASES`) read the
//! way the server has it, for tests: who holds which partition under which epoch, and which
//! workers are live members. Read over the bucket's stream (`KV_<bucket>`, subjects
//! `$KV.<bucket>.<key>`, deletes as `KV-Operation` markers), so it needs no `kv` feature of
//! async-nats. Every read goes to the stream leader (`STREAM.MSG.GET`).

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::Context;
use futures::StreamExt;
use std::collections::BTreeMap;

/// One partition's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    /// The owner's worker id.
    pub worker: String,
    /// The lease's epoch (the revision of its create).
    pub epoch: u64,
    /// The key's current revision (grows with every renewal).
    pub revision: u64,
}

/// The live leases of partitions `0..partitions` in `bucket`: partition -> lease. An error
/// when the server cannot answer (e.g. a cluster electing a leader); retry then.
pub async fn leases(
    js: &Context,
    bucket: &str,
    partitions: u32,
) -> Result<BTreeMap<u32, StoredLease>, String> {
    let stream = js
        .get_stream(format!("KV_{bucket}"))
        .await
        .map_err(|e| format!("lease bucket {bucket}: {e}"))?;
    let mut out = BTreeMap::new();
    for k in 0..partitions {
        let subject = format!("$KV.{bucket}.p.{k}");
        match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => {
                if m.headers.get("KV-Operation").is_some() {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_slice(&m.payload)
                    .map_err(|e| format!("{subject}: not JSON: {e}"))?;
                let worker = v["worker"]
                    .as_str()
                    .ok_or_else(|| format!("{subject}: no worker in {v}"))?
                    .to_string();
                // The create carries no epoch: its own revision is the epoch.
                let epoch = v["epoch"].as_u64().unwrap_or(m.sequence);
                out.insert(
                    k,
                    StoredLease {
                        worker,
                        epoch,
                        revision: m.sequence,
                    },
                );
            }
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => {}
            Err(e) if e.to_string().contains("no message found") => {}
            Err(e) => return Err(format!("read {subject}: {e}")),
        }
    }
    Ok(out)
}

/// The ids of the live members (`w.<id>` keys holding a value), sorted.
pub async fn members(js: &Context, bucket: &str) -> Result<Vec<String>, String> {
    let stream = js
        .get_stream(format!("KV_{bucket}"))
        .await
        .map_err(|e| format!("lease bucket {bucket}: {e}"))?;
    let prefix = format!("$KV.{bucket}.w.");
    let mut subjects = stream
        .info_with_subjects(format!("{prefix}>"))
        .await
        .map_err(|e| format!("list {prefix}>: {e}"))?;
    let mut out = Vec::new();
    while let Some(s) = subjects.next().await {
        let (subject, _) = s.map_err(|e| format!("list {prefix}>: {e}"))?;
        let m = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => m,
            // Expired since the listing.
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => continue,
            Err(e) => return Err(format!("read {subject}: {e}")),
        };
        if m.headers.get("KV-Operation").is_none() {
            out.push(subject.trim_start_matches(prefix.as_str()).to_string());
        }
    }
    out.sort();
    Ok(out)
}
