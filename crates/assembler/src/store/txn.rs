//! One unit of work: reads state through the cache, collects every write, and commits them
//! atomically at the end. If anything fails before or during the commit, the caller marks
//! the cache stale (it is rebuilt from storage, which the failed unit did not change).

use super::compact;
use super::inner::{Inner, EVENT_BUF_KEEP};
use super::records::write_to;
use crate::core::{ArgOp, MessagePhase, MessageState, StreamState};
use crate::error::StoreError;
use crate::hash::FastMap;
use crate::keys::{self, ResultTag};
use crate::outbox::{encode_row, OutboxEntry, OutboxKind};
use crate::storage::{Space, Storage, Write, WriteSet};
use chunk_model::{Event, Provider};

/// Header naming the event type on event rows.
pub const HEADER_EVENT_TYPE: &str = chunk_model::wire::headers::EVENT_TYPE;

/// A unit of work in progress.
pub(crate) struct Txn<'a> {
    /// Cache and counters (mutated in place; stale if the unit fails).
    pub inner: &'a mut Inner,
    /// Where state is read from and committed to.
    pub storage: &'a dyn Storage,
    /// Collected writes.
    pub writes: WriteSet,
    /// Streams read or changed by this unit, each with its state (taken out of the cache for
    /// the unit, put back by the commit while it stays live), how the timer indexes held it
    /// when the unit first touched it, and whether it changed.
    touched_streams: Vec<Touched>,
    /// The entry of `touched_streams` looked at last: the stream most looks are for.
    last_touched: usize,
    /// Messages changed by this unit.
    dirty_messages: Keys,
    /// Outbox rows written.
    pub rows: usize,
    /// Events written.
    pub events: usize,
    /// Whether the order counter moved.
    order_moved: bool,
    /// Results-keyspace writes of this unit, readable before the commit (`None`: deleted).
    results_overlay: FastMap<Vec<u8>, Option<Vec<u8>>>,
    /// Fingerprints of the producer numbers taken by this unit (see [`super::seen`]).
    seen: super::seen::Staged,
    /// An empty list with room for a step's argument writes ([`Txn::arg_op_list`]).
    arg_ops: Vec<ArgOp>,
    /// Set by a commit that stored everything and put the cache right.
    committed: bool,
}

impl Drop for Txn<'_> {
    /// A unit that ends without a whole commit (an error on the way, or a commit that failed)
    /// may have changed the cache in place, and holds streams taken out of it: the cache is
    /// marked stale, to be rebuilt from storage, which the unit did not change. (The store
    /// marks it too on every error it returns; this holds for any unit, whoever drops it.)
    fn drop(&mut self) {
        if !self.committed {
            self.inner.stale = true;
        }
    }
}

impl<'a> Txn<'a> {
    /// Starts a unit of work.
    pub fn new(inner: &'a mut Inner, storage: &'a dyn Storage) -> Txn<'a> {
        // (the lists an earlier unit emptied, with their room: no allocation to start)
        let Lists {
            touched_streams,
            dirty_messages,
            seen,
            arg_ops,
        } = std::mem::take(&mut inner.unit_lists);
        Txn {
            inner,
            storage,
            // (a chunk writes its stream, message, seen group and argument piece, sometimes
            // an outbox row and its counter: room for them at once instead of growing twice)
            writes: WriteSet {
                writes: Vec::with_capacity(8),
            },
            touched_streams,
            last_touched: 0,
            dirty_messages,
            rows: 0,
            events: 0,
            order_moved: false,
            results_overlay: FastMap::default(),
            seen,
            arg_ops,
            committed: false,
        }
    }

    /// Notes the fingerprint of the input that took producer number `seq` of stream `skey`.
    pub fn note_seen(&mut self, skey: &[u8], seq: u64, fp: u64) {
        super::seen::stage(&mut self.seen, skey, seq, fp);
    }

    /// The fingerprints noted by this unit so far.
    pub fn staged_seen(&self) -> &super::seen::Staged {
        &self.seen
    }

    /// Whether the stream exists (in this unit, in the cache or in storage).
    pub fn stream_exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.touched_streams.iter().any(|t| t.key == key)
            || self.inner.streams.contains_key(key)
            || self.storage.get(Space::Streams, key)?.is_some())
    }

    /// The stream's state if the cache holds it (every live stream's is: `Inner::streams`),
    /// or this unit does; no storage read.
    pub fn cached_stream(&self, key: &[u8]) -> Option<&StreamState> {
        match self.touched_streams.iter().find(|t| t.key == key) {
            Some(t) => Some(&t.state),
            None => self.inner.streams.get(key),
        }
    }

    /// The stream's state for reading (default when unknown).
    pub fn stream(&mut self, key: &[u8]) -> Result<&mut StreamState, StoreError> {
        Ok(&mut self.entry(key)?.state)
    }

    /// The stream's state for changing: marked to be written.
    pub fn stream_mut(&mut self, key: &[u8]) -> Result<&mut StreamState, StoreError> {
        let t = self.entry(key)?;
        t.dirty = true;
        Ok(&mut t.state)
    }

    /// The unit's entry for stream `key` ([`Txn::touch`]).
    fn entry(&mut self, key: &[u8]) -> Result<&mut Touched, StoreError> {
        let at = self.touch(key)?;
        self.touched_streams
            .get_mut(at)
            .ok_or_else(|| StoreError::Corrupt {
                space: "streams",
                detail: "a stream entry of the unit vanished".into(),
            })
    }

    /// The position of the unit's entry for stream `key`, made on its first touch: the state
    /// is taken out of the cache (read from storage, or the default, when the cache does not
    /// hold it), so that every later look is a search of the unit's few entries, not a hash
    /// of the key (a typical input looks at its stream 13 times: ~2.4 k instructions, most of
    /// them hashing, before this).
    fn touch(&mut self, key: &[u8]) -> Result<usize, StoreError> {
        if self
            .touched_streams
            .get(self.last_touched)
            .is_some_and(|t| t.key == key)
        {
            return Ok(self.last_touched);
        }
        let at = match self.touched_streams.iter().position(|t| t.key == key) {
            Some(at) => at,
            None => {
                // a stream the indexes hold is live, and live streams are cached (`Inner`):
                // its cached flags are its index entries
                // (the cache's own key comes out with the state, and goes back with it)
                let (key, state, was) = match self.inner.streams.remove_entry(key) {
                    Some((key, st)) => {
                        let was = Indexed::of(&st);
                        (key, st, was)
                    }
                    None => {
                        let st = match self.storage.get(Space::Streams, key)? {
                            Some(v) => compact::decode_stream(&v)?,
                            None => StreamState::default(),
                        };
                        (key.to_vec(), st, Indexed::default())
                    }
                };
                self.touched_streams.push(Touched {
                    key,
                    was,
                    dirty: false,
                    state,
                });
                self.touched_streams.len() - 1
            }
        };
        self.last_touched = at;
        Ok(at)
    }

    /// Loads a message into the cache, without its argument text (see [`Txn::hold_text`]).
    fn load_message(&mut self, mkey: &[u8]) -> Result<bool, StoreError> {
        // (a message the unit noted is in the cache until the commit: no hash to tell)
        if self.dirty_messages.contains(mkey) || self.inner.messages.contains_key(mkey) {
            return Ok(true);
        }
        let Some(v) = self.storage.get(Space::Messages, mkey)? else {
            return Ok(false);
        };
        let mut m = compact::decode_message(&v)?;
        if m.calls.iter().any(|c| c.pieces > 0 && c.args_len == 0) {
            // written before records counted their text (`args_len`): count it once
            load_args(self.storage, mkey, &mut m)?;
        }
        self.inner.messages.insert(mkey.to_vec(), m);
        self.inner.message_order.push_back(mkey.to_vec());
        Ok(true)
    }

    /// Reads the stored argument text and structured pieces of the message's calls that are
    /// not held in memory back into them, seeing this unit's own staged writes. Needed before
    /// a step that may judge a call or build an event (see [`crate::core::step::needs_text`]);
    /// the commit lets go of them again.
    pub fn hold_text(&mut self, mkey: &[u8]) -> Result<(), StoreError> {
        let Some(m) = self.inner.messages.get(mkey) else {
            return Ok(());
        };
        let wanted: Vec<(usize, bool, bool)> = m
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.needs_text())
            .map(|(pos, c)| (pos, !c.text_held(), !c.all_paths_held()))
            .collect();
        for (pos, text, paths) in wanted {
            let text = match text {
                true => Some(text_of(
                    &self.staged_scan(Space::Args, &keys::args_prefix(mkey, pos as u32))?,
                )),
                false => None,
            };
            let paths = match paths {
                true => Some(paths_of(&self.staged_scan(
                    Space::Args,
                    &keys::args_prefix(mkey, pos as u32 | keys::PATH_PIECES),
                )?)?),
                false => None,
            };
            let Some(call) = self
                .inner
                .messages
                .get_mut(mkey)
                .and_then(|m| m.calls.get_mut(pos))
            else {
                continue;
            };
            if let Some(text) = text {
                call.hold_text(text);
            }
            if let Some(paths) = paths {
                call.hold_paths(paths);
            }
        }
        Ok(())
    }

    /// The whole argument text of the call at `pos` of a cached message as this unit sees it:
    /// the text held in memory, else its stored pieces (with this unit's staged writes).
    pub fn call_text(&self, mkey: &[u8], pos: usize) -> Result<String, StoreError> {
        if let Some(call) = self.inner.messages.get(mkey).and_then(|m| m.calls.get(pos)) {
            if call.text_held() {
                return Ok(call.args.clone());
            }
        }
        Ok(text_of(&self.staged_scan(
            Space::Args,
            &keys::args_prefix(mkey, pos as u32),
        )?))
    }

    /// Every (key, value) under `prefix` in `space` as this unit sees it: storage overlaid
    /// with the writes staged so far, in key order.
    fn staged_scan(
        &self,
        space: Space,
        prefix: &[u8],
    ) -> Result<Vec<crate::storage::Pair>, StoreError> {
        let mut all: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = self
            .storage
            .scan_prefix(space, prefix)?
            .into_iter()
            .collect();
        for w in &self.writes.writes {
            match w {
                Write::Put(s, k, v) if *s == space && k.starts_with(prefix) => {
                    all.insert(k.clone(), v.clone());
                }
                Write::Delete(s, k) if *s == space && k.starts_with(prefix) => {
                    all.remove(k);
                }
                _ => {}
            }
        }
        Ok(all.into_iter().collect())
    }

    /// The message, if it exists; marked to be written.
    pub fn message_mut(
        &mut self,
        conv: &str,
        msg: &str,
    ) -> Result<Option<&mut MessageState>, StoreError> {
        self.message_at(&keys::message(conv, msg))
    }

    /// [`Txn::message_mut`] by the message's key (`keys::message`).
    pub fn message_at(&mut self, mkey: &[u8]) -> Result<Option<&mut MessageState>, StoreError> {
        if !self.load_message(mkey)? {
            return Ok(None);
        }
        self.dirty_messages.note(mkey);
        Ok(self.inner.messages.get_mut(mkey))
    }

    /// The message, created (open, no calls) when unknown; marked to be written. A known
    /// provider is recorded on it and on its conversation.
    pub fn message_or_new(
        &mut self,
        conv: &str,
        msg: &str,
        provider: Option<Provider>,
    ) -> Result<&mut MessageState, StoreError> {
        self.message_or_new_at(&keys::message(conv, msg), conv, msg, provider)
    }

    /// [`Txn::message_or_new`] with the message's key (`keys::message(conv, msg)`) at hand.
    pub fn message_or_new_at(
        &mut self,
        mkey: &[u8],
        conv: &str,
        msg: &str,
        provider: Option<Provider>,
    ) -> Result<&mut MessageState, StoreError> {
        if !self.load_message(mkey)? {
            let order = self.inner.order_next;
            self.inner.order_next += 1;
            self.order_moved = true;
            self.inner
                .messages
                .insert(mkey.to_vec(), MessageState::new(conv, msg, None, order));
            self.inner.message_order.push_back(mkey.to_vec());
        }
        self.dirty_messages.note(mkey);
        let vanished = || StoreError::Corrupt {
            space: "messages",
            detail: "cache entry vanished".into(),
        };
        let m = self.inner.messages.get_mut(mkey).ok_or_else(vanished)?;
        if let Some(p) = provider.filter(|_| m.provider.is_none()) {
            m.provider = Some(p);
            put_result(
                (&mut self.results_overlay, &mut self.writes),
                keys::result(ResultTag::ConversationProvider, conv, ""),
                p.as_str().as_bytes().to_vec(),
            );
        }
        Ok(m)
    }

    /// A message this unit loaded and marked to be written ([`Txn::message_or_new`],
    /// [`Txn::message_mut`]), by key: a lookup, without building its key again.
    pub fn loaded_message(&mut self, mkey: &[u8]) -> Result<&mut MessageState, StoreError> {
        match self.dirty_messages.contains(mkey) {
            true => self.inner.messages.get_mut(mkey),
            false => None,
        }
        .ok_or_else(|| StoreError::Corrupt {
            space: "messages",
            detail: "a message used before this unit loaded it".into(),
        })
    }

    /// The provider a conversation's messages named, if any.
    pub fn conversation_provider(&self, conv: &str) -> Result<Option<Provider>, StoreError> {
        let key = keys::result(ResultTag::ConversationProvider, conv, "");
        Ok(self
            .results_get(&key)?
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|s| Provider::parse(&s)))
    }

    /// Reads the results keyspace, seeing this unit's own writes.
    pub fn results_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.results_overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.storage.get(Space::Results, key),
        }
    }

    /// Every (key, value) under `prefix` in the results keyspace, seeing this unit's own
    /// writes, in key order.
    pub fn results_scan(&self, prefix: &[u8]) -> Result<Vec<crate::storage::Pair>, StoreError> {
        let mut all: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = self
            .storage
            .scan_prefix(Space::Results, prefix)?
            .into_iter()
            .collect();
        for (k, v) in &self.results_overlay {
            if k.starts_with(prefix) {
                match v {
                    Some(v) => all.insert(k.clone(), v.clone()),
                    None => all.remove(k),
                };
            }
        }
        Ok(all.into_iter().collect())
    }

    /// Writes to the results keyspace.
    pub fn results_put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        put_result((&mut self.results_overlay, &mut self.writes), key, value);
    }

    /// Deletes from the results keyspace.
    pub fn results_delete(&mut self, key: Vec<u8>) {
        self.results_overlay.insert(key.clone(), None);
        self.writes.delete(Space::Results, key);
    }

    /// An empty list for a step's argument writes, with the room of one that
    /// [`Txn::arg_ops`] emptied before (a step writes a piece or two: no allocation each).
    pub fn arg_op_list(&mut self) -> Vec<ArgOp> {
        std::mem::take(&mut self.arg_ops)
    }

    /// Persists argument writes of a message's calls, taking their text; the emptied list is
    /// kept for [`Txn::arg_op_list`].
    pub fn arg_ops(&mut self, mkey: &[u8], mut ops: Vec<ArgOp>) {
        for op in ops.drain(..) {
            match op {
                ArgOp::Append { call, piece, text } => self.writes.put(
                    Space::Args,
                    keys::args_piece(mkey, call, piece),
                    text.into_bytes(),
                ),
                ArgOp::AppendPath { call, piece, json } => self.writes.put(
                    Space::Args,
                    keys::args_piece(mkey, call | keys::PATH_PIECES, piece),
                    json.into_bytes(),
                ),
                ArgOp::Replace {
                    call,
                    old_pieces,
                    text,
                } => {
                    for p in 0..old_pieces {
                        self.writes
                            .delete(Space::Args, keys::args_piece(mkey, call, p));
                    }
                    self.writes.put(
                        Space::Args,
                        keys::args_piece(mkey, call, 0),
                        text.into_bytes(),
                    );
                }
            }
        }
        // (a step given a new list, as a second choice's is, does not replace a roomier one)
        if ops.capacity() <= LISTS_KEEP && ops.capacity() > self.arg_ops.capacity() {
            self.arg_ops = ops;
        }
    }

    /// Writes an event to the outbox.
    pub fn emit(&mut self, ev: &Event) -> Result<(), StoreError> {
        // serialized into the store's buffer, then copied once into its row
        let mut json = std::mem::take(&mut self.inner.event_buf);
        json.clear();
        let row = write_to("outbox", &mut json, ev).map(|()| {
            encode_row(
                OutboxKind::Event,
                [&ev.conversation_id, &ev.message_id, &ev.event_id],
                [(HEADER_EVENT_TYPE, ev.event_type.as_str())].into_iter(),
                &json,
            )
        });
        if json.capacity() <= EVENT_BUF_KEEP {
            self.inner.event_buf = json;
        }
        self.push_encoded(row?);
        self.events += 1;
        Ok(())
    }

    /// Writes any outbox row (the key is assigned here).
    pub fn push_row(&mut self, entry: OutboxEntry) {
        self.push_encoded(entry.encode());
    }

    /// Writes an outbox row in its stored form ([`OutboxEntry::encode`]) under the next key.
    fn push_encoded(&mut self, row: Vec<u8>) {
        let key = self.inner.outbox_next;
        self.inner.outbox_next += 1;
        self.writes.put(Space::Outbox, keys::outbox(key), row);
        self.rows += 1;
    }

    /// Serializes every changed stream and message and the counters, commits atomically,
    /// and trims the cache to what stays live. Returns (events, outbox rows).
    pub fn commit(mut self) -> Result<(usize, usize), StoreError> {
        for t in self.touched_streams.iter().filter(|t| t.dirty) {
            self.writes.put(
                Space::Streams,
                t.key.clone(),
                compact::encode_stream(&t.state),
            );
            let (live, was_live) = (Indexed::of(&t.state).live(), t.was.live());
            if live && !was_live {
                self.writes.put(Space::Live, t.key.clone(), Vec::new());
            } else if was_live && !live {
                self.writes.delete(Space::Live, t.key.clone());
            }
        }
        for key in self.dirty_messages.iter() {
            if let Some(m) = self.inner.messages.get(key) {
                self.writes
                    .put(Space::Messages, key.clone(), compact::encode_message(m)?);
            }
        }
        if self.rows > 0 {
            self.writes.put(
                Space::Meta,
                keys::META_OUTBOX_NEXT.to_vec(),
                self.inner.outbox_next.to_be_bytes().to_vec(),
            );
        }
        if self.order_moved {
            self.writes.put(
                Space::Meta,
                keys::META_ORDER_NEXT.to_vec(),
                self.inner.order_next.to_be_bytes().to_vec(),
            );
        }
        let cap = self.inner.config.message_cache_entries;
        super::seen::write_staged(
            self.storage,
            &mut self.inner.seen,
            cap,
            &mut self.seen,
            &mut self.writes,
        )?;
        self.compact_completed_args()?;
        let writes = std::mem::take(&mut self.writes);
        self.storage.commit(writes)?;
        // Put the streams that stay live back in the cache, and update the timer indexes.
        for Touched {
            key, was, state, ..
        } in self.touched_streams.drain(..)
        {
            let (open, parked) = (state.open, state.parked);
            // (most inputs leave their stream as the indexes hold it)
            if Indexed::of(&state) != was {
                self.inner.index_stream(&key, open, parked);
            }
            if !open && parked == 0 {
                self.inner.seen.remove(key.as_slice());
            } else {
                self.inner.streams.insert(key, state);
            }
        }
        for key in self.dirty_messages.iter() {
            let done = self.inner.messages.get(key).is_some_and(|m| {
                m.phase == MessagePhase::Completed || (m.calls.is_empty() && m.provider.is_none())
            });
            if done {
                self.inner.messages.remove(key);
            } else if let Some(m) = self.inner.messages.get_mut(key) {
                // The text is stored: memory does not grow with what producers send.
                for call in &mut m.calls {
                    if call.args_len > 0 || call.path_pieces > 0 {
                        call.release_text();
                    }
                }
            }
        }
        // Bound the message cache: every state in it is stored (written above or by an
        // earlier commit), so the oldest loaded can go and be read back when needed.
        let cap = self.inner.config.message_cache_entries;
        let mut kept = Vec::new();
        while self.inner.message_order.len() > cap {
            let Some(key) = self.inner.message_order.pop_front() else {
                break;
            };
            if self.dirty_messages.contains(&key) && self.inner.messages.contains_key(&key) {
                kept.push(key);
            } else {
                self.inner.messages.remove(&key);
            }
        }
        self.inner.message_order.extend(kept);
        // the lists go back empty, their room kept for the next unit (up to `LISTS_KEEP`)
        self.inner.unit_lists = Lists {
            touched_streams: room_kept(&mut self.touched_streams),
            dirty_messages: Keys(room_kept(&mut self.dirty_messages.0)),
            seen: room_kept(&mut self.seen),
            arg_ops: std::mem::take(&mut self.arg_ops),
        };
        self.committed = true;
        Ok((self.events, self.rows))
    }
}

impl Txn<'_> {
    /// Rewrites the argument pieces of the calls of each message this unit completed as ONE
    /// value per call (and per call's structured pieces) under the first piece's key: readers
    /// concatenate a call's pieces in key order, so the text is the same, and a completed
    /// message keeps two keys per call until retention instead of one per fragment flushed
    /// (every stored key costs sled memory for as long as it exists). Nothing is appended to
    /// a completed message's calls afterwards.
    fn compact_completed_args(&mut self) -> Result<(), StoreError> {
        // Only the piece numbers that ever had more than one piece can have several keys
        // (a key per piece at most): the others are not read back.
        let completed: Vec<(Vec<u8>, Vec<u32>)> = self
            .dirty_messages
            .iter()
            .filter_map(|key| {
                let m = self.inner.messages.get(key)?;
                if m.phase != MessagePhase::Completed {
                    return None;
                }
                let calls = (0u32..).zip(&m.calls).flat_map(|(pos, c)| {
                    [
                        (c.pieces > 1).then_some(pos),
                        (c.path_pieces > 1).then_some(pos | keys::PATH_PIECES),
                    ]
                });
                let reasoning = (0u32..)
                    .zip(&m.reasoning)
                    .map(|(k, b)| (b.pieces > 1).then_some(k | crate::core::REASONING_PIECES));
                let numbers = calls.chain(reasoning).flatten().collect();
                Some((key.clone(), numbers))
            })
            .collect();
        for (mkey, numbers) in completed {
            for call in numbers {
                let pieces = self.staged_scan(Space::Args, &keys::args_prefix(&mkey, call))?;
                let mut pieces = pieces.into_iter();
                let Some((first, mut joined)) = pieces.next() else {
                    continue;
                };
                let mut rest = Vec::new();
                for (k, v) in pieces {
                    joined.extend_from_slice(&v);
                    rest.push(k);
                }
                if rest.is_empty() {
                    continue;
                }
                for k in rest {
                    self.writes.delete(Space::Args, k);
                }
                self.writes.put(Space::Args, first, joined);
            }
        }
        Ok(())
    }
}

/// [`Txn::results_put`] on the unit's overlay and writes alone, so that a message borrowed
/// from the cache can stay borrowed.
fn put_result(
    (overlay, writes): (&mut FastMap<Vec<u8>, Option<Vec<u8>>>, &mut WriteSet),
    key: Vec<u8>,
    value: Vec<u8>,
) {
    overlay.insert(key.clone(), Some(value.clone()));
    writes.put(Space::Results, key, value);
}

/// A call's text from its stored pieces (in key order).
fn text_of(pieces: &[crate::storage::Pair]) -> String {
    let mut text = Vec::new();
    for (_, v) in pieces {
        text.extend_from_slice(v);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// A call's structured pieces from their stored form. Pieces may have been merged by the
/// storage: the bytes are consecutive JSON values.
fn paths_of(pieces: &[crate::storage::Pair]) -> Result<Vec<chunk_model::PathValue>, StoreError> {
    let mut bytes = Vec::new();
    for (_, v) in pieces {
        bytes.extend_from_slice(v);
    }
    serde_json::Deserializer::from_slice(&bytes)
        .into_iter::<chunk_model::PathValue>()
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::Corrupt {
            space: "args",
            detail: e.to_string(),
        })
}

/// Reads a message's argument pieces (text and structured) back into the calls that do not
/// hold them, and its reasoning blocks' text, in piece order (outside a unit of work: storage
/// has every commit).
pub fn load_args(
    storage: &dyn Storage,
    mkey: &[u8],
    m: &mut MessageState,
) -> Result<(), StoreError> {
    for (k, block) in m.reasoning.iter_mut().enumerate() {
        if block.pieces > 0 && block.text.is_empty() {
            let prefix = keys::args_prefix(mkey, k as u32 | crate::core::REASONING_PIECES);
            block.text = text_of(&storage.scan_prefix(Space::Args, &prefix)?);
        }
    }
    for (pos, call) in m.calls.iter_mut().enumerate() {
        if !call.text_held() || (call.pieces > 0 && call.args_len == 0) {
            let prefix = keys::args_prefix(mkey, pos as u32);
            call.hold_text(text_of(&storage.scan_prefix(Space::Args, &prefix)?));
        }
        if !call.all_paths_held() {
            let prefix = keys::args_prefix(mkey, pos as u32 | keys::PATH_PIECES);
            call.hold_paths(paths_of(&storage.scan_prefix(Space::Args, &prefix)?)?);
        }
    }
    Ok(())
}

/// The lists a unit of work fills, kept empty in [`Inner::unit_lists`] between units so that
/// each unit does not allocate them again (every input is a unit). A unit that fails drops
/// its lists; the next one starts from empty ones.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    touched_streams: Vec<Touched>,
    dirty_messages: Keys,
    seen: super::seen::Staged,
    arg_ops: Vec<ArgOp>,
}

/// Most entries a unit's list keeps room for between units ([`Lists`]), and a step's
/// argument-write list between steps ([`Txn::arg_op_list`]): a unit touches one stream and
/// a message or a few; the room a rare large unit took (a tick that closed many streams) is
/// given back.
const LISTS_KEEP: usize = 64;

/// `list` taken out for the next unit, emptied, with its room when that is at most
/// [`LISTS_KEEP`] entries.
fn room_kept<T>(list: &mut Vec<T>) -> Vec<T> {
    let mut list = std::mem::take(list);
    list.clear();
    match list.capacity() <= LISTS_KEEP {
        true => list,
        false => Vec::new(),
    }
}

/// A stream a unit of work read or changed.
#[derive(Debug)]
struct Touched {
    key: Vec<u8>,
    /// How the timer indexes held it when the unit first touched it.
    was: Indexed,
    /// Changed by the unit: written at commit.
    dirty: bool,
    /// Its state, out of the cache (`Inner::streams`) until the commit puts it back; lost
    /// with a unit that ends without its commit, whose drop marks the cache stale (the store
    /// rebuilds it from storage before the next unit).
    state: StreamState,
}

/// How the timer indexes hold a stream (`Inner::open`, `Inner::gapped`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Indexed {
    open: bool,
    gapped: bool,
}

impl Indexed {
    fn of(st: &StreamState) -> Indexed {
        Indexed {
            open: st.open,
            gapped: st.parked > 0,
        }
    }

    /// Open or gapped: the stream's key is in the `Live` keyspace.
    fn live(self) -> bool {
        self.open || self.gapped
    }
}

/// The keys a unit of work noted, each once, in the order noted: a unit touches one stream
/// and one message or a few (a chunk's choices, a result's calls), so a search of a short list
/// beats hashing every key at every lookup.
#[derive(Debug, Default)]
struct Keys(Vec<Vec<u8>>);

impl Keys {
    fn contains(&self, key: &[u8]) -> bool {
        self.0.iter().any(|k| k.as_slice() == key)
    }

    /// Notes `key` (once).
    fn note(&mut self, key: &[u8]) {
        if !self.contains(key) {
            self.0.push(key.to_vec());
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;
    use crate::Config;

    /// A unit that reads a message back from storage and writes it again (what a later input
    /// of a message does, or a result for one of its calls) does not parse its completed
    /// calls' arguments: they go back to storage as the bytes read, and stay unparsed in the
    /// cache (`Arguments`, parsed when asked for).
    #[test]
    fn a_message_read_back_and_written_again_leaves_its_arguments_unparsed() {
        use chunk_model::CallStatus;
        let storage = MemoryStorage::new();
        let mut inner = Inner::load(&storage, Config::default()).unwrap();
        let mkey = keys::message("c", "m");
        let mut m = MessageState::new("c", "m", Some(Provider::OpenaiChat), 1);
        let mut call = crate::core::CallState::new();
        call.status = CallStatus::Completed;
        call.arguments = serde_json::json!({"path": "/a", "n": [1, 2]}).into();
        m.calls.push(call);
        let row = compact::encode_message(&m).unwrap();
        storage
            .commit(WriteSet {
                writes: vec![Write::Put(Space::Messages, mkey.clone(), row.clone())],
            })
            .unwrap();

        let mut txn = Txn::new(&mut inner, &storage);
        let read = txn.message_at(&mkey).unwrap().expect("stored");
        read.finish_reason = Some("tool_calls".into());
        txn.commit().unwrap();

        let cached = &inner.messages.get(&mkey).expect("cached").calls[0].arguments;
        assert!(!cached.is_parsed(), "read, written back, not parsed");
        let stored = storage.get(Space::Messages, &mkey).unwrap().unwrap();
        let args = serde_json::to_vec(&serde_json::json!({"path": "/a", "n": [1, 2]})).unwrap();
        let holds = |v: &[u8], what: &[u8]| v.windows(what.len()).any(|w| w == what);
        assert!(
            holds(&row, &args) && holds(&stored, &args),
            "the same bytes"
        );
        assert_ne!(stored, row, "the message was written again");
        assert_eq!(
            *cached.value(),
            serde_json::json!({"path": "/a", "n": [1, 2]})
        );
    }

    /// The lists a unit fills go back to the store empty, with their room, for the next unit
    /// (`Lists`): a unit that follows one that touched a stream and a message, noted a number
    /// and wrote a piece writes only what it touches itself, and the state of the streams
    /// the earlier unit put back stays the cache's.
    #[test]
    fn the_next_unit_starts_from_empty_lists_and_writes_only_its_own() {
        let storage = MemoryStorage::new();
        let mut inner = Inner::load(&storage, Config::default()).unwrap();
        let (a, b) = (b"stream-a".as_slice(), b"stream-b".as_slice());
        let mkey = keys::message("c", "m");
        let mut txn = Txn::new(&mut inner, &storage);
        txn.stream_mut(a).unwrap().open = true;
        // (with a provider: a message with none and no calls leaves the cache at commit)
        txn.message_or_new_at(&mkey, "c", "m", Some(Provider::OpenaiChat))
            .unwrap();
        txn.note_seen(a, 0, 42);
        let mut ops = txn.arg_op_list();
        ops.push(ArgOp::Append {
            call: 0,
            piece: 0,
            text: "{".into(),
        });
        txn.arg_ops(&mkey, ops);
        txn.commit().unwrap();
        let lists = &inner.unit_lists;
        assert!(lists.touched_streams.is_empty() && lists.touched_streams.capacity() > 0);
        assert!(lists.dirty_messages.0.is_empty() && lists.dirty_messages.0.capacity() > 0);
        assert!(lists.seen.is_empty() && lists.seen.capacity() > 0);
        assert!(lists.arg_ops.is_empty() && lists.arg_ops.capacity() > 0);
        assert!(
            inner.streams.contains_key(a),
            "a live stream goes back to the cache"
        );

        // (changed in the cache only: a unit that wrote the message again would store it)
        let before = storage.get(Space::Messages, &mkey).unwrap();
        inner.messages.get_mut(&mkey).expect("cached").finish_reason = Some("changed".into());
        let mut txn = Txn::new(&mut inner, &storage);
        assert!(txn.arg_op_list().is_empty());
        assert!(txn.staged_seen().is_empty());
        txn.stream_mut(b).unwrap().next = 1;
        assert_eq!(
            txn.cached_stream(a).map(|s| s.open),
            Some(true),
            "the cache still holds a, not the unit"
        );
        assert!(txn.touched_streams.len() == 1 && txn.touched_streams[0].key == b);
        txn.commit().unwrap();
        assert_eq!(
            storage.get(Space::Messages, &mkey).unwrap(),
            before,
            "the earlier unit's message is not written again"
        );
        assert!(inner.streams.contains_key(a) && !inner.streams.contains_key(b));
    }

    /// A unit that looks at two streams in turn gets each one's own state (the last one
    /// looked at is found first, by its key), and its commit stores both and puts the live one
    /// back in the cache.
    #[test]
    fn a_unit_looking_at_two_streams_in_turn_keeps_each_ones_state() {
        let storage = MemoryStorage::new();
        let mut inner = Inner::load(&storage, Config::default()).unwrap();
        let (a, b) = (b"stream-a".as_slice(), b"stream-b".as_slice());
        let mut txn = Txn::new(&mut inner, &storage);
        txn.stream_mut(a).unwrap().next = 7;
        txn.stream_mut(a).unwrap().open = true;
        assert_eq!(txn.stream(b).unwrap().next, 0, "b is not a");
        txn.stream_mut(b).unwrap().next = 3;
        assert_eq!(txn.stream(a).unwrap().next, 7);
        assert_eq!(txn.stream(b).unwrap().next, 3);
        assert!(
            txn.stream_exists(b).unwrap(),
            "a stream made by the unit exists"
        );
        assert_eq!(txn.cached_stream(a).map(|s| s.next), Some(7));
        txn.commit().unwrap();
        let stored = |key: &[u8]| {
            compact::decode_stream(&storage.get(Space::Streams, key).unwrap().unwrap())
                .unwrap()
                .next
        };
        assert_eq!((stored(a), stored(b)), (7, 3));
        assert_eq!(
            inner.streams.get(a).map(|s| s.next),
            Some(7),
            "live: cached"
        );
        assert!(
            !inner.streams.contains_key(b),
            "neither open nor parked: not cached"
        );
        assert!(inner.open.contains(a));
        assert!(!inner.stale, "a committed unit leaves the cache as it is");
    }

    /// A unit dropped without its commit (an error on the way) took its stream out of the
    /// cache and may have changed the rest in place: the cache is marked stale, so the store
    /// rebuilds it from storage before the next unit.
    #[test]
    fn a_unit_dropped_without_its_commit_marks_the_cache_stale() {
        let storage = MemoryStorage::new();
        let mut inner = Inner::load(&storage, Config::default()).unwrap();
        let mut txn = Txn::new(&mut inner, &storage);
        txn.stream_mut(b"stream-a").unwrap().open = true;
        drop(txn);
        assert!(inner.stale);
        assert!(storage.get(Space::Streams, b"stream-a").unwrap().is_none());
    }
}
