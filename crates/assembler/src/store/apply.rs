//! Applying one input: ordering (duplicate / park / apply / release parked), decoding,
//! stepping the core, matching results, dead letters. Everything lands in one [`Txn`].
//!
//! Every input gets exactly one visible outcome: applied, a duplicate of the same bytes, or a
//! dead letter with a reason. A chunk that will not be assembled (undecodable, rejected by the
//! caller, no provider, over the open-stream limit, numbered unlike its stream) is a hole in
//! its stream: the stream is closed like a sequence gap ([`close_stream`]): open calls end
//! `abandoned` (`lost_chunk`), parked chunks and later chunks are dead-lettered
//! (`stream_closed`), so a `completed` call is always the whole call. Other outcomes that
//! used to leave no trace are dead letters too: a duplicate number with other bytes
//! (`conflicting_duplicate`; the first one stays applied) and a call statement after the
//! message ended (`after_message_end`).

use super::close::close_stream;
use super::dead_letter::{dead_letter, Item};
use super::inner::Inner;
use super::records::{ParkedHeader, ParkedInput};
use super::results::{apply_results, register, release_on_end, stream_results};
use super::txn::Txn;
use crate::core::{self, Admission, StepOutput};
use crate::error::StoreError;
use crate::input::{Applied, Control, Input, InputKind, Seq};
use crate::keys;
use crate::storage::{Space, Storage};
use chunk_model::decode::openai_chat::choice_message;
use chunk_model::decode::Route;
use chunk_model::wire::{DeadLetterCode, Reason};
use chunk_model::{ChunkEvent, Provider};

/// Applies `input` in one commit. Returns the verdict and the number of outbox rows written.
/// With `rejected`, the caller could not read the input (bad headers): it is dead-lettered
/// with that reason and, for a chunk, ends its stream like any lost chunk.
pub(crate) fn apply(
    inner: &mut Inner,
    storage: &dyn Storage,
    input: &Input<'_>,
    rejected: Option<&str>,
    now: u64,
) -> Result<(Applied, usize), StoreError> {
    let mut txn = Txn::new(inner, storage);
    let verdict = admit(&mut txn, input, rejected, now)?;
    let (events, rows) = txn.commit()?;
    let verdict = match verdict {
        Applied::Accepted { .. } => Applied::Accepted { events },
        other => other,
    };
    Ok((verdict, rows))
}

fn admit(
    txn: &mut Txn<'_>,
    input: &Input<'_>,
    rejected: Option<&str>,
    now: u64,
) -> Result<Applied, StoreError> {
    let skey = keys::stream(input.kind, input.conversation_id, input.message_id);
    let item = Item {
        kind: input.kind,
        conv: input.conversation_id,
        msg: input.message_id,
        provider: input.provider,
        seq: input.seq,
        control: input.control.as_ref(),
        body: input.body,
        origin: input.origin,
    };
    // Timeouts that ran out by this input's publish time come first, as a tick would have
    // applied them (`store::tick::expire_due`).
    super::tick::expire_due(
        txn,
        &skey,
        input.kind,
        input.conversation_id,
        input.message_id,
        now,
    )?;
    // (before the stream is looked at: that creates it)
    let over_limit = input.kind == InputKind::Chunk
        && txn.inner.open.len() >= txn.inner.config.max_open_streams
        && !txn.stream_exists(&skey)?;
    let admission = txn.stream(&skey)?.admit(input.seq);
    if admission == Admission::Duplicate {
        return duplicate(txn, &skey, &item);
    }
    if let Some(reason) = rejected {
        return lose(txn, &skey, &item, reason, now);
    }
    if over_limit {
        return lose(
            txn,
            &skey,
            &item,
            DeadLetterCode::OpenStreamLimit.as_str(),
            now,
        );
    }
    if admission != Admission::Closed {
        let st = txn.stream(&skey)?;
        if let Some(reason) = st.numbered_unlike(input.kind, input.control.is_some(), input.seq) {
            return lose(txn, &skey, &item, &reason, now);
        }
    }
    match admission {
        Admission::Duplicate => duplicate(txn, &skey, &item),
        Admission::Closed => {
            txn.stream_mut(&skey)?.consumed(input.seq, now);
            record_seen(txn, &skey, &item);
            Ok(dead_letter(
                txn,
                &item,
                &DeadLetterCode::StreamClosed
                    .with("its message already ended (a lost chunk, a gap, or retention)"),
            ))
        }
        Admission::Park => {
            let Seq::Producer(s) = input.seq else {
                return Ok(Applied::Duplicate);
            };
            let pkey = keys::parked(&skey, s);
            if let Some(bytes) = txn.storage.get(Space::Parked, &pkey)? {
                let parked = ParkedInput::decode(&bytes)?;
                return Ok(
                    if fingerprint(parked.header.control.as_ref(), &parked.body)
                        == fingerprint(item.control, item.body)
                    {
                        Applied::Duplicate
                    } else {
                        dead_letter(txn, &item, &conflicting_duplicate())
                    },
                );
            }
            let parked = ParkedInput {
                header: ParkedHeader {
                    provider: input.provider,
                    control: input.control.clone(),
                    origin: input.origin.cloned(),
                },
                body: input.body.to_vec(),
            };
            txn.writes.put(Space::Parked, pkey, parked.encode()?);
            let st = txn.stream_mut(&skey)?;
            st.park(now);
            if st.provider.is_none() {
                st.provider = input.provider;
            }
            Ok(Applied::Parked)
        }
        Admission::Apply => {
            let verdict = apply_item(txn, &skey, item, now)?;
            drain(
                txn,
                &skey,
                input.kind,
                input.conversation_id,
                input.message_id,
                now,
            )?;
            Ok(verdict)
        }
    }
}

/// Dead-letter reason of an input numbered like one already applied or parked, with other
/// bytes (the first one stays).
fn conflicting_duplicate() -> String {
    DeadLetterCode::ConflictingDuplicate
        .with("this Toolstream-Seq was already taken by an input with other bytes")
}

/// A redelivery (same bytes) changes nothing; another input with the same number is a
/// conflicting duplicate and goes to the DLQ.
fn duplicate(txn: &mut Txn<'_>, skey: &[u8], item: &Item<'_>) -> Result<Applied, StoreError> {
    let Seq::Producer(s) = item.seq else {
        return Ok(Applied::Duplicate);
    };
    let first = super::seen::lookup(txn, skey, s)?;
    match first {
        Some(fp) if fp != fingerprint(item.control, item.body) => {
            Ok(dead_letter(txn, item, &conflicting_duplicate()))
        }
        _ => Ok(Applied::Duplicate),
    }
}

/// An input that will not be assembled: its dead letter, its number consumed, and for a
/// chunk the end of its stream (a hole: nothing after it can be trusted).
fn lose(
    txn: &mut Txn<'_>,
    skey: &[u8],
    item: &Item<'_>,
    reason: &str,
    now: u64,
) -> Result<Applied, StoreError> {
    let verdict = dead_letter(txn, item, reason);
    record_seen(txn, skey, item);
    {
        let st = txn.stream_mut(skey)?;
        if st.provider.is_none() {
            st.provider = item.provider;
        }
        // A number ahead of a gap is not consumed: the inputs numbered before it are still to
        // come, and moving the watermark past them took them for duplicates (no trace at all:
        // the chunks of a closed stream must be stream_closed dead letters, and results must
        // be applied).
        let ahead = matches!(item.seq, Seq::Producer(s) if s > st.next);
        if !ahead {
            st.consumed(item.seq, now);
        }
    }
    if item.kind == InputKind::Chunk {
        close_stream(txn, skey, item.conv, item.msg, Reason::LostChunk, now)?;
    }
    Ok(verdict)
}

/// Records the fingerprint of the input a producer number was taken by (applied or
/// dead-lettered), so that other bytes under that number later are a conflicting duplicate.
fn record_seen(txn: &mut Txn<'_>, skey: &[u8], item: &Item<'_>) {
    if let Seq::Producer(s) = item.seq {
        txn.note_seen(skey, s, fingerprint(item.control, item.body));
    }
}

/// A stable fingerprint (FNV-1a, 64 bit) of an input's bytes and control header, stored per
/// producer sequence number (packed in [`Space::SeenSets`], see `store/seen.rs`).
pub(crate) fn fingerprint(control: Option<&Control>, body: &[u8]) -> u64 {
    let tag: &[u8] = match control {
        None => b"c",
        Some(Control::End) => b"e",
        Some(Control::Error(_)) => b"x",
    };
    fnv1a(fnv1a(FNV_OFFSET, tag), body)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64 bit) of `bytes`, continuing from `h`. One plain loop per slice: a chained
/// iterator over tag and body cost about twice the instructions per byte (every input's
/// whole body is hashed), and the values are stored, so they must never change.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Applies parked inputs that are next in line, in order.
pub(crate) fn drain(
    txn: &mut Txn<'_>,
    skey: &[u8],
    kind: InputKind,
    conv: &str,
    msg: &str,
    now: u64,
) -> Result<(), StoreError> {
    loop {
        let st = txn.stream(skey)?;
        if st.parked == 0 {
            break;
        }
        let s = st.next;
        let pkey = keys::parked(skey, s);
        let Some(bytes) = txn.storage.get(Space::Parked, &pkey)? else {
            break;
        };
        txn.stream_mut(skey)?.released(now);
        txn.writes.delete(Space::Parked, pkey);
        let parked = ParkedInput::decode(&bytes)?;
        let item = Item {
            kind,
            conv,
            msg,
            provider: parked.header.provider,
            seq: Seq::Producer(s),
            control: parked.header.control.as_ref(),
            body: &parked.body,
            origin: parked.header.origin.as_ref(),
        };
        let _verdict = apply_item(txn, skey, item, now)?;
    }
    Ok(())
}

/// Applies one input that is next in line and consumes its sequence number.
fn apply_item(
    txn: &mut Txn<'_>,
    skey: &[u8],
    mut item: Item<'_>,
    now: u64,
) -> Result<Applied, StoreError> {
    {
        let st = txn.stream_mut(skey)?;
        if st.provider.is_none() {
            st.provider = item.provider;
        }
        item.provider = item.provider.or(st.provider);
        st.consumed(item.seq, now);
    }
    record_seen(txn, skey, &item);
    match item.kind {
        InputKind::Chunk => apply_chunk(txn, skey, &item, now),
        InputKind::Result => apply_result(txn, &item, now),
    }
}

fn apply_chunk(
    txn: &mut Txn<'_>,
    skey: &[u8],
    item: &Item<'_>,
    now: u64,
) -> Result<Applied, StoreError> {
    // (choice, its message's key, what stepping it caused): one message per choice (`n > 1`);
    // a one-choice chunk's step is kept in `one` (no list to allocate for almost every chunk)
    let mut steps: Vec<(u32, Vec<u8>, StepOutput)> = Vec::new();
    let mut one = None;
    if let Some(control) = item.control {
        // An end on a stream that never named a provider (and has no message) would complete
        // an empty message that no event can show, silently, and dead-letter the real stream
        // after it: it is a `no_provider` input like any chunk of such a stream.
        if item.provider.is_none() && txn.message_mut(item.conv, item.msg)?.is_none() {
            return lose(txn, skey, item, DeadLetterCode::NoProvider.as_str(), now);
        }
        for k in 0..txn.stream(skey)?.choice_count() {
            let msg = choice_message(item.msg, k);
            let mut out = StepOutput::default();
            let mkey = keys::message(item.conv, &msg);
            txn.message_or_new_at(&mkey, item.conv, &msg, item.provider)?;
            txn.hold_text(&mkey)?;
            core::step::control(txn.loaded_message(&mkey)?, control, &mut out);
            steps.push((k, mkey, out));
        }
    } else {
        let Some(provider) = item.provider else {
            return lose(txn, skey, item, DeadLetterCode::NoProvider.as_str(), now);
        };
        let routed = match chunk_model::decode::decode_routed(provider, item.body) {
            Ok(evs) => evs,
            Err(e) => return lose(txn, skey, item, &DeadLetterCode::DecodeError.with(e), now),
        };
        let highest = routed
            .iter()
            .filter_map(|(route, _)| match route {
                Route::Choice(k) => Some(*k),
                Route::All => None,
            })
            .max();
        if let Some(k) = highest {
            if k >= MAX_CHOICES {
                let why = format!(
                    "openai-chat: choices[].index {k}: a request streams at most {MAX_CHOICES} \
                     choices"
                );
                return lose(txn, skey, item, &DeadLetterCode::DecodeError.with(why), now);
            }
            // (only a new highest choice changes the stream: most chunks name a known one)
            if k + 1 > txn.stream(skey)?.choices {
                txn.stream_mut(skey)?.choices = k + 1;
            }
        }
        let choices = txn.stream(skey)?.choice_count();
        if choices == 1 {
            // one choice (all but OpenAI chat `n > 1`): every event is choice 0's, in order
            let events = routed.into_iter().map(|(_, ev)| ev);
            let (mkey, out) = step_choice(txn, item, provider, 0, events)?;
            one = Some((0, mkey, out));
        } else {
            let mut buckets: Vec<Vec<ChunkEvent>> = vec![Vec::new(); choices as usize];
            for (route, ev) in routed {
                match route {
                    Route::Choice(k) => {
                        if let Some(bucket) = buckets.get_mut(k as usize) {
                            bucket.push(ev);
                        }
                    }
                    Route::All => {
                        for bucket in &mut buckets {
                            bucket.push(ev.clone());
                        }
                    }
                }
            }
            for (k, events) in (0u32..).zip(buckets) {
                // (other choices' messages start with their first event)
                if k > 0 && events.is_empty() {
                    continue;
                }
                let (mkey, out) = step_choice(txn, item, provider, k, events)?;
                steps.push((k, mkey, out));
            }
        }
    }
    let mut after_end = false;
    for (k, mkey, out) in one.into_iter().chain(steps) {
        after_end |= out.after_end;
        let msg = choice_message(item.msg, k);
        let target = (item.conv, msg.as_ref(), mkey.as_slice());
        after_step_of(txn, target, (item.msg, skey), out, Some(item), now)?;
    }
    if after_end {
        return Ok(dead_letter(
            txn,
            item,
            &DeadLetterCode::AfterMessageEnd
                .with("a call statement arrived after its message had ended"),
        ));
    }
    Ok(Applied::Accepted { events: 0 })
}

/// Steps choice `k`'s message of chunk `item` through `events`, making the message first (a
/// chunk with no events still makes its message). Returns the message's key with the output.
fn step_choice(
    txn: &mut Txn<'_>,
    item: &Item<'_>,
    provider: Provider,
    k: u32,
    events: impl IntoIterator<Item = ChunkEvent>,
) -> Result<(Vec<u8>, StepOutput), StoreError> {
    let limits = txn.inner.limits;
    let msg = choice_message(item.msg, k);
    let mkey = keys::message(item.conv, &msg);
    let mut out = StepOutput {
        arg_ops: txn.arg_op_list(),
        ..StepOutput::default()
    };
    // Loaded and marked to be written here; the reference serves every event, and is looked
    // up again only after its text had to be read back (most chunks: one event, no lookup).
    let mut m = txn.message_or_new_at(&mkey, item.conv, &msg, Some(provider))?;
    for ev in events {
        if core::step::needs_text(m, &ev, &limits) {
            txn.hold_text(&mkey)?;
            m = txn.loaded_message(&mkey)?;
        }
        core::step(m, ev, &limits, &mut out);
    }
    Ok((mkey, out))
}

fn apply_result(txn: &mut Txn<'_>, item: &Item<'_>, now: u64) -> Result<Applied, StoreError> {
    if item.control.is_some() {
        return Ok(dead_letter(
            txn,
            item,
            DeadLetterCode::ControlOnResults.as_str(),
        ));
    }
    let results = match chunk_model::decode_result(item.body) {
        Ok(r) => r,
        Err(e) => return Ok(dead_letter(txn, item, &DeadLetterCode::DecodeError.with(e))),
    };
    apply_results(txn, item, results, now)
}

/// Most choices (`n`) of one OpenAI chat stream; OpenAI's own limit is 128.
pub const MAX_CHOICES: u32 = 128;

/// Persists what a core step caused to message `msg` (a choice of the chunk stream of
/// `stream_msg`): argument writes, events, argument previews due after a chunk (when
/// enabled, `core::preview`), call registrations (and the results they match),
/// in-stream results (carried by chunk `item`; `None` for a step toolstream caused: a timer,
/// a hole), the producer results that waited for the message to end, then `message.completed`
/// when due, and the stream's open flag (open while any of its choices' messages is).
pub(crate) fn after_step_of(
    txn: &mut Txn<'_>,
    (conv, msg, mkey): (&str, &str, &[u8]),
    (stream_msg, skey): (&str, &[u8]),
    mut out: StepOutput,
    item: Option<&Item<'_>>,
    now: u64,
) -> Result<(), StoreError> {
    if out.text_missing {
        return Err(text_missing());
    }
    // The writes take the appended text; previews, when on, read a copy of it after them.
    let preview_ops =
        (item.is_some() && txn.inner.config.previews.enabled).then(|| out.arg_ops.clone());
    txn.arg_ops(mkey, std::mem::take(&mut out.arg_ops));
    for ev in &out.events {
        txn.emit(ev)?;
    }
    if let Some(ops) = preview_ops {
        previews(txn, conv, msg, &ops, now)?;
    }
    for pos in out.registered {
        register(txn, conv, msg, pos)?;
    }
    stream_results(txn, item, conv, msg, out.results, now)?;
    // (only an ended message has results to release and may complete)
    let mut phase = txn.message_at(mkey)?.map(|m| m.phase);
    let done = match phase {
        Some(core::MessagePhase::Ended) => {
            release_on_end(txn, conv, msg)?;
            match txn.message_at(mkey)? {
                Some(m) => {
                    if m.phase == core::MessagePhase::Ended
                        && m.calls.iter().any(|c| c.needs_text())
                    {
                        return Err(text_missing());
                    }
                    let done = core::complete_if_done(m);
                    phase = Some(m.phase);
                    done
                }
                None => {
                    phase = None;
                    None
                }
            }
        }
        _ => None,
    };
    if let Some(mut ev) = done {
        if ev.provider.is_none() {
            ev.provider = txn.conversation_provider(conv)?;
        }
        // a message that never had a provider assembled nothing: no event to speak of
        if ev.provider.is_some() {
            txn.emit(&ev)?;
        }
        // The retention clock starts in the same commit that completes the message.
        txn.writes.put(
            Space::Done,
            keys::done(now, keys::DoneTag::Message, conv, msg),
            Vec::new(),
        );
        txn.inner.note_completed();
    }
    let choices = txn.stream(skey)?.choice_count();
    let mut open = false;
    for k in 0..choices {
        let phase = match (k, msg == stream_msg) {
            // (this message's phase, read above: nothing since changed it)
            (0, true) => phase,
            _ => txn
                .message_mut(conv, &choice_message(stream_msg, k))?
                .map(|m| m.phase),
        };
        open |= phase.is_some_and(|p| p != core::MessagePhase::Completed);
    }
    // (marked to be written only when that changes it)
    if txn.stream(skey)?.open != open {
        txn.stream_mut(skey)?.open = open;
    }
    Ok(())
}

/// Emits the `tool_call.delta`s due after a chunk's step of message `msg` (published at `now`),
/// after the step's own events: the step's appended text goes into the preview buffers, and
/// a due call that holds none (read from storage) has its text read back once.
fn previews(
    txn: &mut Txn<'_>,
    conv: &str,
    msg: &str,
    ops: &[core::ArgOp],
    now: u64,
) -> Result<(), StoreError> {
    let cfg = txn.inner.config.previews;
    let mkey = keys::message(conv, msg);
    let due = match txn.message_mut(conv, msg)? {
        Some(m) => {
            core::preview::observe(m, ops, &cfg);
            core::preview::due(m, &cfg, now)
        }
        None => return Ok(()),
    };
    for pos in due {
        let unheld = txn
            .message_mut(conv, msg)?
            .is_some_and(|m| core::preview::needs_text(m, pos));
        let text = match unheld {
            true => Some(txn.call_text(&mkey, pos)?),
            false => None,
        };
        let delta = match txn.message_mut(conv, msg)? {
            Some(m) => {
                if let Some(text) = text {
                    core::preview::hold(m, pos, text);
                }
                core::preview::emit(m, pos, &cfg, now)
            }
            None => None,
        };
        if let Some(ev) = delta {
            txn.emit(&ev)?;
        }
    }
    Ok(())
}

/// A step needed argument text the store had not read back (a bug: nothing is committed).
fn text_missing() -> StoreError {
    StoreError::Corrupt {
        space: "args",
        detail: "a call's argument text was needed but not read back before the step".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{fingerprint, fnv1a, FNV_OFFSET};
    use crate::input::Control;

    /// Fingerprints are stored (seen sets, parked inputs compare with them after a restart):
    /// a faster loop must give the values an older build wrote, FNV-1a over the control tag
    /// then the body. Expected values from an independent FNV-1a (the published test vector
    /// for "foobar", and Python's reference loop for the rest).
    #[test]
    fn fingerprint_values_are_stable_fnv1a_of_tag_then_body() {
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a(FNV_OFFSET, b""), FNV_OFFSET);
        assert_eq!(fingerprint(None, b"{\"id\":1}"), 0x10b2_0b33_3780_fb7c);
        assert_eq!(fingerprint(Some(&Control::End), b""), 0xaf63_d84c_8601_e5c0);
        let all: Vec<u8> = (0..=255).collect();
        let error = Control::Error("boom".into());
        assert_eq!(fingerprint(Some(&error), &all), 0x85aa_125a_ca23_d707);
        // the tag tells a control input from a chunk with the same bytes
        assert_ne!(
            fingerprint(None, b""),
            fingerprint(Some(&Control::End), b"")
        );
    }
}
