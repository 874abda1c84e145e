//! The crash-free reference: the workload's inputs through the real assembler ([`Store`] on
//! memory storage), in order, with a logical clock (one millisecond per input, so no gap or
//! idle timeout fires), then one tick past the idle timeout when some producer stopped
//! mid-stream. What it outputs is what the worker must publish and store, whatever crashes.
//!
//! Two things legitimately depend on timing and are compared as sets instead: the
//! `tool_results` of `message.completed` (the results matched *by then*: a subset of the
//! message's final results) and the order of `tool_results` in a snapshot (arrival order).

use super::workload::{MessagePlan, Workload};
use crate::harness::message_key;
use assembler::{Applied, Control, Input, InputKind, OutboxKind, Seq, Store};
use chunk_model::Provider;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What one message must end up as.
#[derive(Debug, Clone)]
pub struct ExpectedMessage {
    /// Where its stream comes from (for failure messages).
    pub source: String,
    /// Its events (those published on its subject, results included), in reference order.
    pub event_ids: Vec<String>,
    /// The query answer, normalized ([`normalize_snapshot`]); `None` when nothing is stored
    /// (the query answers 404).
    pub snapshot: Option<Value>,
}

/// The reference output of a workload.
#[derive(Debug, Clone, Default)]
pub struct Reference {
    /// Every event by `event_id`.
    pub events: BTreeMap<String, Value>,
    /// Every message of the workload by (conversation, message).
    pub messages: BTreeMap<(String, String), ExpectedMessage>,
    /// Dead letters the inputs cause.
    pub dead_letters: usize,
    /// The workload's conversations.
    pub conversations: BTreeSet<String>,
}

/// Logical clock start (any realistic wall-clock value).
const CLOCK_START: u64 = 1_800_000_000_000;

impl Reference {
    /// Applies the workload's inputs (as published, without misbehaviour copies) to a fresh
    /// memory store with `config` (give it the worker's `idle_timeout_ms` when some producer
    /// stops mid-stream).
    pub fn compute(workload: &Workload, config: &assembler::Config) -> Result<Reference, String> {
        let store = Store::open_memory(config.clone()).map_err(|e| format!("store: {e}"))?;
        let mut clock = CLOCK_START;
        for plan in &workload.messages {
            apply_message(&store, plan, &mut clock)?;
        }
        if workload.messages.iter().any(|m| m.stop_after.is_some()) {
            clock += config.idle_timeout_ms + 1;
            store.tick(clock).map_err(|e| format!("tick: {e}"))?;
        }
        store.flush().map_err(|e| format!("flush: {e}"))?;

        let mut reference = Reference::default();
        let mut by_message: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        loop {
            let rows = store
                .outbox_peek(1024)
                .map_err(|e| format!("outbox: {e}"))?;
            if rows.is_empty() {
                break;
            }
            for row in rows {
                match row.kind {
                    OutboxKind::Event => {
                        let event: Value = serde_json::from_slice(&row.payload)
                            .map_err(|e| format!("reference event is not JSON: {e}"))?;
                        let id = event["event_id"].as_str().unwrap_or_default().to_string();
                        by_message
                            .entry(message_key(&event))
                            .or_default()
                            .push(id.clone());
                        if reference.events.insert(id.clone(), event).is_some() {
                            return Err(format!("the reference emitted {id} twice"));
                        }
                    }
                    OutboxKind::DeadLetter => reference.dead_letters += 1,
                }
                store
                    .outbox_remove(row.key)
                    .map_err(|e| format!("outbox: {e}"))?;
            }
        }
        for plan in &workload.messages {
            let key = (plan.conversation.clone(), plan.message.clone());
            let snapshot = store
                .message_snapshot(&plan.conversation, &plan.message)
                .map_err(|e| format!("snapshot: {e}"))?
                .map(|s| serde_json::to_value(&s).map(|v| normalize_snapshot(&v)))
                .transpose()
                .map_err(|e| format!("snapshot JSON: {e}"))?;
            reference.conversations.insert(plan.conversation.clone());
            let previous = reference.messages.insert(
                key.clone(),
                ExpectedMessage {
                    source: plan.source.clone(),
                    event_ids: by_message.remove(&key).unwrap_or_default(),
                    snapshot,
                },
            );
            if previous.is_some() {
                return Err(format!("message {}/{} planned twice", key.0, key.1));
            }
        }
        if let Some(((c, m), _)) = by_message.into_iter().next() {
            return Err(format!(
                "the reference published on {c}/{m}, which is no message of the workload"
            ));
        }
        Ok(reference)
    }

    /// Events the workload must produce.
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Whether `conversation` belongs to this workload.
    pub fn owns(&self, conversation: &str) -> bool {
        self.conversations.contains(conversation)
    }
}

fn apply_message(store: &Store, plan: &MessagePlan, clock: &mut u64) -> Result<(), String> {
    let provider: Provider = plan
        .provider
        .parse()
        .map_err(|e| format!("{}: provider {}: {e:?}", plan.source, plan.provider))?;
    let (conv, msg) = (plan.conversation.as_str(), plan.message.as_str());
    let mut apply = |kind: InputKind, seq: u64, control: Option<Control>, body: &[u8]| {
        *clock += 1;
        let input = Input {
            kind,
            conversation_id: conv,
            message_id: msg,
            provider: (kind == InputKind::Chunk).then_some(provider),
            seq: Seq::Producer(seq),
            control,
            body,
            origin: None,
        };
        match store.apply(&input, *clock) {
            Ok(Applied::Accepted { .. }) | Ok(Applied::DeadLettered { .. }) => Ok(()),
            Ok(other) => Err(format!(
                "{}: reference input {kind:?} {seq} was {other:?}",
                plan.source
            )),
            Err(e) => Err(format!("{}: reference apply: {e}", plan.source)),
        }
    };
    let (before, after) = plan.results_in_order();
    let result_body = |r: &super::ResultPlan| {
        serde_json::json!({"tool_call_id": r.tool_call_id, "output": r.output})
            .to_string()
            .into_bytes()
    };
    for (seq, r) in &before {
        apply(InputKind::Result, *seq, None, &result_body(r))?;
    }
    for (seq, chunk) in plan.published_chunks().iter().enumerate() {
        apply(InputKind::Chunk, seq as u64, None, chunk)?;
    }
    if plan.publishes_end() {
        apply(
            InputKind::Chunk,
            plan.chunks.len() as u64,
            Some(Control::End),
            b"",
        )?;
    }
    for (seq, r) in &after {
        apply(InputKind::Result, *seq, None, &result_body(r))?;
    }
    Ok(())
}

/// A snapshot with its arrival-ordered lists sorted by call id.
pub fn normalize_snapshot(snapshot: &Value) -> Value {
    let mut v = snapshot.clone();
    for field in ["tool_results", "orphaned_results"] {
        if let Some(list) = v.get_mut(field).and_then(Value::as_array_mut) {
            list.sort_by_key(|r| r.to_string());
        }
    }
    v
}

/// An event without the part that depends on timing (`tool_results` of `message.completed`).
pub fn normalize_event(event: &Value) -> Value {
    let mut v = event.clone();
    if v["type"] == "message.completed" {
        if let Some(o) = v.as_object_mut() {
            o.remove("tool_results");
        }
    }
    v
}
