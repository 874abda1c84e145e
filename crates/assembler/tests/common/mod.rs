//! Helpers shared by the store tests: OpenAI-chat-shaped chunk bodies, inputs, and reading
//! events back from the outbox; and [`Msg`], one message fed chunk events on the pure core.
#![allow(dead_code)]

use assembler::{Input, InputKind, OutboxKind, Seq, Store};
use chunk_model::{Event, Provider};

/// An OpenAI chat chunk carrying one tool-call delta.
pub fn oa_delta(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Vec<u8> {
    let mut call =
        serde_json::json!({"index": index, "type": "function", "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    serde_json::to_vec(&serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]
    }))
    .unwrap()
}

/// An OpenAI chat chunk with a finish reason.
pub fn oa_finish(reason: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]
    }))
    .unwrap()
}

/// A chunk input with a producer sequence number.
pub fn chunk<'a>(conv: &'a str, msg: &'a str, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        kind: InputKind::Chunk,
        conversation_id: conv,
        message_id: msg,
        provider: Some(Provider::OpenaiChat),
        seq: Seq::Producer(seq),
        control: None,
        body,
        origin: None,
    }
}

/// A result input with a producer sequence number.
pub fn result<'a>(conv: &'a str, msg: &'a str, seq: u64, body: &'a [u8]) -> Input<'a> {
    Input {
        kind: InputKind::Result,
        conversation_id: conv,
        message_id: msg,
        provider: None,
        seq: Seq::Producer(seq),
        control: None,
        body,
        origin: None,
    }
}

/// Flushes, then the first `limit` outbox rows (the relay only sees flushed rows).
pub fn durable_rows(store: &Store, limit: usize) -> Vec<assembler::OutboxEntry> {
    store.flush().unwrap();
    store.outbox_peek(limit).unwrap()
}

/// Every event row in the outbox, oldest first (flushes; rows are left in place).
pub fn events(store: &Store) -> Vec<Event> {
    durable_rows(store, usize::MAX)
        .into_iter()
        .filter(|e| e.kind == OutboxKind::Event)
        .map(|e| serde_json::from_slice(&e.payload).unwrap())
        .collect()
}

/// The event types in the outbox, as wire names.
pub fn types(store: &Store) -> Vec<&'static str> {
    events(store)
        .iter()
        .map(|e| e.event_type.as_str())
        .collect()
}

/// A standard two-call OpenAI stream: (seq, body) pairs.
pub fn two_call_stream() -> Vec<Vec<u8>> {
    vec![
        oa_delta(0, Some("call_a"), Some("get_weather"), ""),
        oa_delta(0, None, None, "{\"city\":"),
        oa_delta(0, None, None, "\"Paris\"}"),
        oa_delta(1, Some("call_b"), Some("get_time"), "{}"),
        oa_finish("tool_calls"),
        b"[DONE]".to_vec(),
    ]
}

/// Opens the sled store at `path`, retrying while a just-dropped handle still holds the file
/// lock (sled releases it when its background I/O threads let go of the database).
pub fn reopen(path: &std::path::Path, config: assembler::Config) -> Store {
    let mut last = None;
    for _ in 0..200 {
        match Store::open(path, config.clone()) {
            Ok(s) => return s,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot reopen {}: {last:?}", path.display());
}

/// Opens the directory with sled alone (as an earlier release would), retrying like
/// [`reopen`] while a just-dropped store still holds the file lock.
pub fn open_raw_sled(path: &std::path::Path) -> sled::Db {
    let mut last = None;
    for _ in 0..200 {
        match sled::Config::new().path(path).open() {
            Ok(db) => return db,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("cannot open {} with sled: {last:?}", path.display());
}

/// (reason, payload) of every dead-letter row in the outbox, in row order.
pub fn dead_letters(store: &Store) -> Vec<(String, Vec<u8>)> {
    durable_rows(store, 1_000)
        .into_iter()
        .filter(|r| r.kind == OutboxKind::DeadLetter)
        .map(|r| {
            let reason = r
                .headers
                .iter()
                .find(|(h, _)| h == "Toolstream-Reason")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            (reason, r.payload)
        })
        .collect()
}

/// The reasons of every dead-letter row in the outbox, in row order.
pub fn dead_reasons(store: &Store) -> Vec<String> {
    dead_letters(store)
        .into_iter()
        .map(|(reason, _)| reason)
        .collect()
}

/// Whether `applied` is a dead letter whose reason starts with `prefix`.
pub fn is_dead(applied: &assembler::Applied, prefix: &str) -> bool {
    matches!(applied, assembler::Applied::DeadLettered { reason } if reason.starts_with(prefix))
}

/// One message on the pure core: chunk events are stepped in (with the completion check after
/// each) and every event produced is kept.
pub struct Msg {
    pub state: assembler::core::MessageState,
    pub limits: assembler::core::Limits,
    pub events: Vec<Event>,
}

impl Msg {
    /// An OpenAI chat message with the default limits.
    pub fn new() -> Msg {
        Msg::with(Provider::OpenaiChat, assembler::core::Limits::default())
    }

    /// An OpenAI chat message with `limits`.
    pub fn with_limits(limits: assembler::core::Limits) -> Msg {
        Msg::with(Provider::OpenaiChat, limits)
    }

    /// A message of `provider` with the default limits.
    pub fn with_provider(provider: Provider) -> Msg {
        Msg::with(provider, assembler::core::Limits::default())
    }

    fn with(provider: Provider, limits: assembler::core::Limits) -> Msg {
        Msg {
            state: assembler::core::MessageState::new("conv", "msg", Some(provider), 0),
            limits,
            events: Vec::new(),
        }
    }

    /// Steps `ev` in; the events it produced (also kept in `events`).
    pub fn feed(&mut self, ev: chunk_model::ChunkEvent) -> Vec<Event> {
        let mut out = assembler::core::StepOutput::default();
        assembler::core::step(&mut self.state, ev, &self.limits, &mut out);
        let mut evs = out.events;
        evs.extend(assembler::core::complete_if_done(&mut self.state));
        self.events.extend(evs.iter().cloned());
        evs
    }

    /// Every event's type and call index, in order.
    pub fn types(&self) -> Vec<(chunk_model::EventType, Option<u32>)> {
        self.events
            .iter()
            .map(|e| (e.event_type, e.tool_call.as_ref().map(|c| c.index)))
            .collect()
    }

    /// The calls' terminal events (completed, invalid, abandoned), in order.
    pub fn terminal(&self) -> Vec<&Event> {
        self.events.iter().filter(|e| is_terminal(e)).collect()
    }

    /// The `message.completed` event (panics if there is none).
    pub fn completed(&self) -> &Event {
        self.events
            .iter()
            .find(|e| e.event_type == chunk_model::EventType::MessageCompleted)
            .expect("message.completed")
    }
}

/// A call's terminal event: completed, invalid or abandoned.
pub fn is_terminal(e: &Event) -> bool {
    use chunk_model::EventType;
    matches!(
        e.event_type,
        EventType::ToolCallCompleted | EventType::ToolCallInvalid | EventType::ToolCallAbandoned
    )
}

/// `tests/recordings/`: a folder per provider, a recorded stream per file.
pub fn recordings_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings")
}

/// Every recorded stream under `tests/recordings/<provider>/`: (provider, path), sorted.
pub fn recordings() -> Vec<(Provider, std::path::PathBuf)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(recordings_root()).unwrap() {
        let dir = dir.unwrap().path();
        let Some(provider) = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Provider::parse)
        else {
            continue;
        };
        for f in std::fs::read_dir(&dir).unwrap() {
            out.push((provider, f.unwrap().path()));
        }
    }
    out.sort();
    out
}

/// The chunk bodies of a recorded stream under `tests/recordings/`, as its framing splits them.
pub fn recording(rel: &str) -> Vec<Vec<u8>> {
    let path = recordings_root().join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    chunk_model::framing::split(&bytes)
        .expect("frames")
        .into_iter()
        .map(|f| f.data.to_vec())
        .collect()
}
