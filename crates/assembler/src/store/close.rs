//! Ending a chunk stream's message for a toolstream reason: closing it at a hole (a gap that
//! did not fill, a lost chunk: parked chunks become dead letters) or ending it idle.

use super::apply::after_step_of;
use super::dead_letter::{dead_letter, Item};
use super::records::ParkedInput;
use super::txn::Txn;
use crate::core::{self, StepOutput};
use crate::error::StoreError;
use crate::input::{InputKind, Seq};
use crate::keys;
use crate::storage::Space;
use chunk_model::decode::openai_chat::choice_message;
use chunk_model::wire::{DeadLetterCode, Reason};

/// Closes a chunk stream with a hole (`gap`, `lost_chunk`): every parked chunk behind it is
/// dead-lettered (`stream_closed: <reason>`), later chunks will be too, and the message ends
/// with its open calls `abandoned` (`reason`).
pub(crate) fn close_stream(
    txn: &mut Txn<'_>,
    skey: &[u8],
    conv: &str,
    msg: &str,
    reason: Reason,
    now: u64,
) -> Result<(), StoreError> {
    let next = txn.stream(skey)?.next;
    let why = DeadLetterCode::StreamClosed.with(reason);
    for (k, v) in txn.storage.scan_prefix(Space::Parked, skey)? {
        let seq = k
            .get(skey.len()..)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        // released earlier in this same commit (their deletes are staged, not yet visible)
        if seq.is_some_and(|s| s < next) {
            continue;
        }
        let parked = ParkedInput::decode(&v)?;
        let item = Item {
            kind: InputKind::Chunk,
            conv,
            msg,
            provider: parked.header.provider,
            seq: Seq::Producer(seq.unwrap_or(0)),
            control: parked.header.control.as_ref(),
            body: &parked.body,
            origin: parked.header.origin.as_ref(),
        };
        let _dead = dead_letter(txn, &item, &why);
        txn.writes.delete(Space::Parked, k);
    }
    let st = txn.stream_mut(skey)?;
    st.discard_parked();
    st.closed = true;
    end_stream(txn, skey, conv, msg, reason, now)
}

/// Ends a chunk stream's message for a toolstream reason (`gap`, `timeout`, `lost_chunk`):
/// open calls `abandoned`. A stream that never named a provider has nothing assembled (every
/// chunk of it was dead-lettered) and gets no message of its own.
pub(crate) fn end_stream(
    txn: &mut Txn<'_>,
    skey: &[u8],
    conv: &str,
    msg: &str,
    reason: Reason,
    now: u64,
) -> Result<(), StoreError> {
    let provider = txn.stream(skey)?.provider;
    if provider.is_none() && txn.message_mut(conv, msg)?.is_none() {
        txn.stream_mut(skey)?.open = false;
        return Ok(());
    }
    // every choice's message (OpenAI chat `n > 1`) ends with its stream
    for k in 0..txn.stream(skey)?.choice_count() {
        let choice = choice_message(msg, k);
        if k > 0 && txn.message_mut(conv, &choice)?.is_none() {
            continue;
        }
        let mut out = StepOutput::default();
        let mkey = keys::message(conv, &choice);
        txn.message_or_new_at(&mkey, conv, &choice, provider)?;
        txn.hold_text(&mkey)?;
        core::step::abandon(txn.loaded_message(&mkey)?, reason, &mut out);
        let chunk_stream = keys::stream(InputKind::Chunk, conv, msg);
        let target = (conv, choice.as_ref(), mkey.as_slice());
        after_step_of(txn, target, (msg, &chunk_stream), out, None, now)?;
    }
    Ok(())
}
