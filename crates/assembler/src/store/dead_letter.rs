//! Dead letters the store writes: one input's facts ([`Item`]) and its dead-letter row, with
//! the wire contract's headers and `Nats-Msg-Id` ([`chunk_model::wire`]).

use super::apply::fingerprint;
use super::txn::Txn;
use crate::input::{Applied, Control, InputKind, Origin, Seq};
use crate::outbox::{OutboxEntry, OutboxKind};
use chunk_model::wire::{headers, msg_id};
use chunk_model::Provider;

/// One input's facts, owned or borrowed (a live input or a parked one).
#[derive(Clone, Copy)]
pub(crate) struct Item<'a> {
    pub(crate) kind: InputKind,
    pub(crate) conv: &'a str,
    pub(crate) msg: &'a str,
    pub(crate) provider: Option<Provider>,
    pub(crate) seq: Seq,
    pub(crate) control: Option<&'a Control>,
    pub(crate) body: &'a [u8],
    pub(crate) origin: Option<&'a Origin>,
}

/// Writes a dead letter for `item` (its sequence number is consumed by the caller).
pub(crate) fn dead_letter(txn: &mut Txn<'_>, item: &Item<'_>, reason: &str) -> Applied {
    let numbered = match item.seq {
        Seq::Producer(s) => msg_id::Numbered::Producer(s),
        Seq::Transport(s) => msg_id::Numbered::Transport(s),
    };
    // Deterministic (a redelivery maps to the same id, which the DLQ stream drops) and
    // unambiguous: tokens are length-prefixed, and different bytes at one number differ.
    let msg_id = msg_id::store_dead_letter(
        item.kind,
        item.conv,
        item.msg,
        numbered,
        fingerprint(item.control, item.body),
    );
    let mut headers = vec![(headers::REASON.to_string(), reason.to_string())];
    if let Some(o) = item.origin {
        headers.push((headers::SUBJECT.to_string(), o.subject.clone()));
        headers.push((headers::STREAM_SEQ.to_string(), o.stream_seq.to_string()));
    }
    txn.push_row(OutboxEntry {
        key: 0,
        kind: OutboxKind::DeadLetter,
        conversation_id: item.conv.to_string(),
        message_id: item.msg.to_string(),
        msg_id,
        headers,
        payload: item.body.to_vec(),
    });
    Applied::DeadLettered {
        reason: reason.to_string(),
    }
}

/// Writes a dead letter for one part of `item` (a tool result in it that does not stand):
/// the same headers, subject and numbering as the input's own, with `body` as its body. The id
/// is deterministic from the input and `body`, so a redelivered input that is applied again
/// writes the same dead letter (dropped by the DLQ stream's duplicate window).
pub(crate) fn dead_letter_part(
    txn: &mut Txn<'_>,
    item: &Item<'_>,
    body: &[u8],
    reason: &str,
) -> Applied {
    let part = Item {
        body,
        control: None,
        ..*item
    };
    dead_letter(txn, &part, reason)
}
