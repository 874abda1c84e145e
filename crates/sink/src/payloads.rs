//! Payloads too large for the server's `max_payload`, kept in a JetStream object store bucket
//! (`TOOLSTREAM_PAYLOADS`, provisioned by the worker) so that nothing is dropped for its size.
//!
//! - An **event** too large to publish is stored whole, byte for byte, as the object named by
//!   its `event_id`, and published in a small form carrying `payload_ref`
//!   (`{bucket, object, size, sha256}`, see [`chunk_model::Event::offloaded`]). The object is
//!   stored before the event is published and stored again only when missing or different, so
//!   a crash in between re-publishes the same event (same `Nats-Msg-Id`) over the same object.
//! - A **dead letter** too large to publish keeps its reason and headers; its body is cut to
//!   what fits and headers say so ([`fit_dead_letter`]): `Toolstream-Body-Truncated: <original
//!   size>`, `Toolstream-Body-Sha256: <hex>`, and `Toolstream-Body-Ref: <bucket>/<object>`
//!   when the whole body was stored (object `dlq_<sha256>`). A dead letter always exists: if
//!   the bucket cannot take the body, the cut dead letter is published without the reference.
//! - A **query reply** too large to send is stored as `reply_<sha256 of the request>` and the
//!   reply is `{"payload_ref": {…}}` instead ([`fit_reply`]).
//!
//! Sizes are checked the way the server checks them: headers (NATS wire form) plus body
//! against `max_payload`, with [`SLACK`] bytes to spare.

use async_nats::jetstream::object_store::{self, ObjectStore};
use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::Context;
use bytes::Bytes;
use chunk_model::event::{hex, sha256};
use chunk_model::wire::headers;
use chunk_model::PayloadRef;
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The bucket toolstream stores large payloads in.
pub const BUCKET: &str = "TOOLSTREAM_PAYLOADS";
/// Bytes kept free under `max_payload` for what is not counted exactly.
pub const SLACK: usize = 512;
/// Longest header value a cut dead letter keeps (a header can be as large as a body).
const MAX_HEADER_VALUE: usize = 4096;

/// Where payloads too large for `max_payload` are kept: [`Payloads`] (the bucket), or a fake
/// in tests. The relay's [`crate::publisher::Publisher`] is one too.
pub trait PayloadStore: Send + Sync {
    /// The connected server's `max_payload` (what a message may weigh, headers included).
    fn max_payload(&self) -> usize;

    /// Stores `bytes` as `object` unless exactly these bytes are there already; the reference
    /// and whether they were written now (see [`Payloads::put`]).
    fn put(
        &self,
        object: &str,
        bytes: &[u8],
    ) -> impl std::future::Future<Output = Result<(PayloadRef, bool), PayloadError>> + Send;
}

impl PayloadStore for Payloads {
    fn max_payload(&self) -> usize {
        Payloads::max_payload(self)
    }

    async fn put(&self, object: &str, bytes: &[u8]) -> Result<(PayloadRef, bool), PayloadError> {
        Payloads::put(self, object, bytes).await
    }
}

/// Why a payload could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The bucket could not be opened or created.
    #[error("object store bucket {bucket}: {message}")]
    Bucket {
        /// Its name.
        bucket: String,
        /// What went wrong.
        message: String,
    },
    /// Reading or writing the object failed.
    #[error("object {object} in bucket {bucket}: {message}")]
    Object {
        /// The bucket.
        bucket: String,
        /// The object.
        object: String,
        /// What went wrong.
        message: String,
    },
}

/// The payload bucket: opened (or created, when allowed) on first use, then cached.
#[derive(Clone)]
pub struct Payloads {
    js: Context,
    bucket: String,
    /// `Some(replicas)`: create the bucket when missing; `None`: only open it.
    create: Option<usize>,
    /// The description a created bucket gets.
    description: &'static str,
    store: Arc<OnceCell<ObjectStore>>,
}

/// The payload bucket's description.
const PAYLOADS_DESCRIPTION: &str =
    "toolstream: events, dead-letter bodies and query replies larger than max_payload";

impl std::fmt::Debug for Payloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payloads")
            .field("bucket", &self.bucket)
            .field("create", &self.create)
            .field("open", &self.store.initialized())
            .finish()
    }
}

impl Payloads {
    /// The bucket `bucket`, created with `replicas` replicas (file storage, no age limit)
    /// when missing.
    pub fn new(js: Context, bucket: &str, replicas: usize) -> Payloads {
        Payloads {
            js,
            bucket: bucket.to_string(),
            create: Some(replicas.max(1)),
            description: PAYLOADS_DESCRIPTION,
            store: Arc::new(OnceCell::new()),
        }
    }

    /// The same, for another bucket: a created bucket says `description`.
    pub fn described(mut self, description: &'static str) -> Payloads {
        self.description = description;
        self
    }

    /// The bucket `bucket`, which must exist already (never created from here).
    pub fn open(js: Context, bucket: &str) -> Payloads {
        Payloads {
            js,
            bucket: bucket.to_string(),
            create: None,
            description: PAYLOADS_DESCRIPTION,
            store: Arc::new(OnceCell::new()),
        }
    }

    /// The bucket's name.
    pub fn bucket_name(&self) -> &str {
        &self.bucket
    }

    /// The connected server's `max_payload`.
    pub fn max_payload(&self) -> usize {
        self.js.client().max_payload()
    }

    /// Opens the bucket, creating it when missing (if allowed). Cached once open.
    pub async fn bucket(&self) -> Result<ObjectStore, PayloadError> {
        self.store
            .get_or_try_init(|| async {
                let err = |e: &dyn std::fmt::Display| PayloadError::Bucket {
                    bucket: self.bucket.clone(),
                    message: e.to_string(),
                };
                match self.js.get_object_store(&self.bucket).await {
                    Ok(store) => Ok(store),
                    Err(get) => {
                        let Some(replicas) = self.create else {
                            return Err(err(&get));
                        };
                        let created = self
                            .js
                            .create_object_store(object_store::Config {
                                bucket: self.bucket.clone(),
                                description: Some(self.description.to_string()),
                                storage: StorageType::File,
                                num_replicas: replicas,
                                ..Default::default()
                            })
                            .await;
                        match created {
                            Ok(store) => {
                                tracing::info!(bucket = %self.bucket, replicas, "created the object store bucket");
                                Ok(store)
                            }
                            // another worker may have created it meanwhile
                            Err(create) => self
                                .js
                                .get_object_store(&self.bucket)
                                .await
                                .map_err(|_| err(&create)),
                        }
                    }
                }
            })
            .await
            .cloned()
    }

    /// Stores `bytes` as `object` unless the bucket already holds exactly these bytes under
    /// that name (same size and SHA-256): idempotent, so a retry after a crash rewrites
    /// nothing. Returns the reference and whether it was written now.
    pub async fn put(
        &self,
        object: &str,
        bytes: &[u8],
    ) -> Result<(PayloadRef, bool), PayloadError> {
        let store = self.bucket().await?;
        let digest = sha256(bytes);
        let reference = PayloadRef {
            bucket: self.bucket.clone(),
            object: object.to_string(),
            size: bytes.len() as u64,
            sha256: hex(&digest),
        };
        let nats_digest = format!("SHA-256={}", base64_url(&digest));
        if let Ok(info) = store.info(object).await {
            if !info.deleted
                && info.size == bytes.len()
                && info.digest.as_deref() == Some(nats_digest.as_str())
            {
                return Ok((reference, false));
            }
        }
        let mut reader = bytes;
        store
            .put(object, &mut reader)
            .await
            .map_err(|e| PayloadError::Object {
                bucket: self.bucket.clone(),
                object: object.to_string(),
                message: e.to_string(),
            })?;
        Ok((reference, true))
    }
}

/// What a subscriber does with a `payload_ref`: reads the object and checks its size and
/// SHA-256, so what it returns is exactly what the reference names (for an event: the whole
/// event JSON).
pub async fn fetch(js: &Context, reference: &PayloadRef) -> Result<Vec<u8>, PayloadError> {
    use tokio::io::AsyncReadExt;
    let err = |message: String| PayloadError::Object {
        bucket: reference.bucket.clone(),
        object: reference.object.clone(),
        message,
    };
    let store = js
        .get_object_store(&reference.bucket)
        .await
        .map_err(|e| PayloadError::Bucket {
            bucket: reference.bucket.clone(),
            message: e.to_string(),
        })?;
    let mut object = store
        .get(&reference.object)
        .await
        .map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::with_capacity(usize::try_from(reference.size).unwrap_or(0));
    object
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 != reference.size || hex(&sha256(&bytes)) != reference.sha256 {
        return Err(err(format!(
            "holds {} bytes with SHA-256 {}, not the {} bytes with SHA-256 {} referenced",
            bytes.len(),
            hex(&sha256(&bytes)),
            reference.size,
            reference.sha256
        )));
    }
    Ok(bytes)
}

/// Size of a message with these headers (plus `Nats-Msg-Id: msg_id` when given) and a body of
/// `body_len` bytes, as the server counts it against `max_payload`.
pub fn wire_size(headers: &[(String, String)], msg_id: Option<&str>, body_len: usize) -> usize {
    let line = |k: &str, v: &str| k.len() + 2 + v.len() + 2;
    let mut n = b"NATS/1.0\r\n".len() + 2;
    for (k, v) in headers {
        n += line(k, v);
    }
    if let Some(id) = msg_id {
        n += line(headers::MSG_ID, id);
    }
    n + body_len
}

/// Whether such a message fits under `max_payload` with [`SLACK`] to spare.
pub fn fits(
    headers: &[(String, String)],
    msg_id: Option<&str>,
    body_len: usize,
    max_payload: usize,
) -> bool {
    wire_size(headers, msg_id, body_len) + SLACK <= max_payload
}

/// A dead letter that fits under `max_payload`: unchanged when it fits; otherwise its headers
/// kept (values over 4 KiB cut), the `Toolstream-Body-*` headers added, the whole body stored
/// in `payloads` when possible, and the body cut to what fits. Never fails: a dead letter that
/// cannot keep its body still keeps its reason.
pub async fn fit_dead_letter<S: PayloadStore + ?Sized>(
    payloads: &S,
    mut headers: Vec<(String, String)>,
    msg_id: &str,
    body: Bytes,
) -> (Vec<(String, String)>, Bytes) {
    let max_payload = payloads.max_payload();
    if fits(&headers, Some(msg_id), body.len(), max_payload) {
        return (headers, body);
    }
    for (_, value) in headers.iter_mut() {
        if value.len() > MAX_HEADER_VALUE {
            let mut end = MAX_HEADER_VALUE;
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            value.truncate(end);
        }
    }
    let digest = hex(&sha256(&body));
    headers.push((headers::BODY_TRUNCATED.to_string(), body.len().to_string()));
    headers.push((headers::BODY_SHA256.to_string(), digest.clone()));
    let object = format!("dlq_{digest}");
    let stored = match payloads.put(&object, &body).await {
        Ok((r, _)) => {
            headers.push((
                headers::BODY_REF.to_string(),
                format!("{}/{}", r.bucket, r.object),
            ));
            true
        }
        Err(e) => {
            tracing::error!(
                error = %e,
                %msg_id,
                size = body.len(),
                "dead-letter body too large to publish and not stored; the dead letter carries it cut"
            );
            false
        }
    };
    let room = max_payload.saturating_sub(wire_size(&headers, Some(msg_id), 0) + SLACK);
    let cut = body.slice(..room.min(body.len()));
    tracing::warn!(
        %msg_id,
        size = body.len(),
        kept = cut.len(),
        max_payload,
        stored,
        "dead letter larger than the server's max_payload: published with its body cut"
    );
    (headers, cut)
}

/// A query reply that fits: unchanged when it does, else stored and replaced by
/// `{"payload_ref":{…}}`. The object is named by the request (`reply_<sha256 of request>`,
/// e.g. subject and body), so asking again replaces it instead of adding one more, and an
/// unchanged reply is not written again; a reader that fetches a reply replaced meanwhile sees
/// a size/SHA-256 mismatch and asks again.
pub async fn fit_reply(
    payloads: &Payloads,
    request: &[u8],
    body: Bytes,
) -> Result<Bytes, PayloadError> {
    if fits(&[], None, body.len(), payloads.max_payload()) {
        return Ok(body);
    }
    let object = format!("reply_{}", hex(&sha256(request)));
    let (reference, _) = payloads.put(&object, &body).await?;
    let reply = serde_json::json!({ "payload_ref": reference });
    Ok(Bytes::from(reply.to_string()))
}

/// Base64, URL-safe alphabet with padding (the form of an object's `SHA-256=` digest).
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= group.len() {
                out.push(char::from(ALPHABET[*s as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_the_object_store_digest_form() {
        assert_eq!(base64_url(b""), "");
        assert_eq!(base64_url(b"f"), "Zg==");
        assert_eq!(base64_url(b"fo"), "Zm8=");
        assert_eq!(base64_url(b"foo"), "Zm9v");
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8=");
        // SHA-256 of "" as nats.go / async-nats write it
        assert_eq!(
            base64_url(&sha256(b"")),
            "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU="
        );
    }

    #[test]
    fn wire_size_counts_headers_like_the_server() {
        let h = vec![("A".to_string(), "b".to_string())];
        // "NATS/1.0\r\n" + "A: b\r\n" + "\r\n" + body
        assert_eq!(wire_size(&h, None, 5), 10 + 6 + 2 + 5);
        assert_eq!(
            wire_size(&h, Some("x"), 0),
            10 + 6 + "Nats-Msg-Id: x\r\n".len() + 2
        );
        assert!(fits(&h, None, 100, 100 + 18 + SLACK));
        assert!(!fits(&h, None, 101, 100 + 18 + SLACK));
    }
}
