//! Snapshots: the stored calls and results of a message or a conversation, read back (state
//! and argument text) and converted by [`crate::core::snapshot`].

use super::inner::Inner;
use super::txn::load_args;
use crate::core::snapshot::to_snapshot;
use crate::core::MessageState;
use crate::error::StoreError;
use crate::keys;
use crate::storage::{Space, Storage};
use chunk_model::MessageSnapshot;

fn stored(storage: &dyn Storage, mkey: &[u8], bytes: &[u8]) -> Result<MessageState, StoreError> {
    let mut m = super::compact::decode_message(bytes)?;
    load_args(storage, mkey, &mut m)?;
    Ok(m)
}

/// A cached message with its argument text read back (the cache does not hold it).
fn with_text(
    storage: &dyn Storage,
    mkey: &[u8],
    m: &MessageState,
) -> Result<MessageState, StoreError> {
    let mut m = m.clone();
    load_args(storage, mkey, &mut m)?;
    Ok(m)
}

/// One message's snapshot (cache first: it holds the newest state of open messages).
pub(crate) fn message(
    inner: &Inner,
    storage: &dyn Storage,
    conv: &str,
    msg: &str,
) -> Result<Option<MessageSnapshot>, StoreError> {
    let mkey = keys::message(conv, msg);
    if let Some(m) = inner.messages.get(&mkey) {
        return Ok(Some(to_snapshot(&with_text(storage, &mkey, m)?)));
    }
    match storage.get(Space::Messages, &mkey)? {
        Some(bytes) => Ok(Some(to_snapshot(&stored(storage, &mkey, &bytes)?))),
        None => Ok(None),
    }
}

/// Every message of a conversation, in first-seen order.
pub(crate) fn conversation(
    inner: &Inner,
    storage: &dyn Storage,
    conv: &str,
) -> Result<Vec<MessageSnapshot>, StoreError> {
    let mut all: Vec<(u64, MessageSnapshot)> = Vec::new();
    for (mkey, bytes) in storage.scan_prefix(Space::Messages, &keys::conversation(conv))? {
        let m = match inner.messages.get(&mkey) {
            Some(m) => to_snapshot_with_order(&with_text(storage, &mkey, m)?),
            None => to_snapshot_with_order(&stored(storage, &mkey, &bytes)?),
        };
        all.push(m);
    }
    all.sort_by_key(|(order, _)| *order);
    Ok(all.into_iter().map(|(_, s)| s).collect())
}

fn to_snapshot_with_order(m: &MessageState) -> (u64, MessageSnapshot) {
    (m.order, to_snapshot(m))
}
