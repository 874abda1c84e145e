//! `?format=`: the wire an event stream speaks. `toolstream` (the default) sends the events as
//! published; `ai-sdk` and `ag-ui` translate one message's events (they need `?message=`) into
//! the parts those client libraries read:
//!
//! | event | `ai-sdk` (UI message stream v1) | `ag-ui` |
//! | --- | --- | --- |
//! | stream opens | `start` {messageId}, `start-step` | `RUN_STARTED` {threadId = conv, runId = msg} |
//! | `tool_call.started` | `tool-input-start` | `TOOL_CALL_START` {parentMessageId = msg} |
//! | `tool_call.completed` | `tool-input-available` {input = arguments} | `TOOL_CALL_ARGS` {delta = raw_arguments}, `TOOL_CALL_END` |
//! | `tool_call.invalid` / `abandoned` | `tool-input-error` {input = raw_arguments, errorText} | `TOOL_CALL_ARGS`, `TOOL_CALL_END` (if started), `CUSTOM` `toolstream.tool_call.<status>` |
//! | `tool_result.completed` | `tool-output-available` / `tool-output-error` (is_error) | `TOOL_CALL_RESULT` {role tool} (+ `CUSTOM` `toolstream.tool_result.error`) |
//! | the message is done | `finish-step`, `finish`, `[DONE]` | `RUN_FINISHED` |
//!
//! "Done" = `message.completed` was seen and every call it lists as completed has a result;
//! then the stream closes. Every SSE frame group of one event ends with `id: <sequence>`, so
//! `Last-Event-ID` resumes these formats exactly like `toolstream`. An event that becomes no
//! part (`message.completed`, `tool_result.orphaned`) still sends its `id:` (an SSE event with
//! an id and no data moves the client's last event id without dispatching anything).

use serde_json::{json, Value};
use std::collections::HashSet;

/// The wire of an event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The events as published, `event:` = type.
    Toolstream,
    /// The AI SDK UI message stream (`x-vercel-ai-ui-message-stream: v1`).
    AiSdk,
    /// AG-UI events.
    AgUi,
}

impl Format {
    /// `?format=` value → format.
    pub(crate) fn parse(s: &str) -> Option<Format> {
        match s {
            "toolstream" => Some(Format::Toolstream),
            "ai-sdk" => Some(Format::AiSdk),
            "ag-ui" => Some(Format::AgUi),
            _ => None,
        }
    }
}

/// Turns one message's events into parts, and knows when the message is done.
#[derive(Debug)]
pub(crate) struct Translator {
    format: Format,
    conversation: String,
    message: String,
    /// Calls `message.completed` listed as completed.
    completed_calls: Vec<String>,
    /// Calls with a result seen (in `message.completed` or as `tool_result.completed`).
    results: HashSet<String>,
    /// Calls whose `tool_call.started` was translated (AG-UI ends only what it started).
    started: HashSet<String>,
    message_completed: bool,
}

impl Translator {
    pub(crate) fn new(format: Format, conversation: &str, message: &str) -> Translator {
        Translator {
            format,
            conversation: conversation.to_string(),
            message: message.to_string(),
            completed_calls: Vec::new(),
            results: HashSet::new(),
            started: HashSet::new(),
            message_completed: false,
        }
    }

    /// The parts that open the stream.
    pub(crate) fn opening(&self) -> Vec<Value> {
        match self.format {
            Format::Toolstream => vec![],
            Format::AiSdk => vec![
                json!({"type": "start", "messageId": self.message}),
                json!({"type": "start-step"}),
            ],
            Format::AgUi => vec![json!({
                "type": "RUN_STARTED",
                "threadId": self.conversation,
                "runId": self.message,
            })],
        }
    }

    /// The parts of one event (the whole event: an offloaded one is fetched first).
    pub(crate) fn translate(&mut self, event: &Value) -> Vec<Value> {
        let ty = event["type"].as_str().unwrap_or_default();
        let call = &event["tool_call"];
        let call_id = call["id"].as_str().unwrap_or_default().to_string();
        let name = call["name"].as_str().unwrap_or_default();
        let raw = call["raw_arguments"].as_str().unwrap_or_default();
        let provider_executed = matches!(call["kind"].as_str(), Some("server_tool" | "mcp"));
        match ty {
            "message.completed" => {
                self.message_completed = true;
                for c in event["calls"].as_array().into_iter().flatten() {
                    if c["status"] == "completed" {
                        if let Some(id) = c["tool_call"]["id"].as_str() {
                            self.completed_calls.push(id.to_string());
                        }
                    }
                }
                for r in event["tool_results"].as_array().into_iter().flatten() {
                    if let Some(id) = r["tool_call_id"].as_str() {
                        self.results.insert(id.to_string());
                    }
                }
                return vec![];
            }
            "tool_result.completed" => {
                if let Some(id) = event["tool_result"]["tool_call_id"].as_str() {
                    self.results.insert(id.to_string());
                }
            }
            _ => {}
        }
        match self.format {
            Format::Toolstream => vec![],
            Format::AiSdk => match ty {
                "tool_call.started" => {
                    let mut part = json!({"type": "tool-input-start", "toolCallId": call_id, "toolName": name});
                    if provider_executed {
                        part["providerExecuted"] = json!(true);
                    }
                    vec![part]
                }
                "tool_call.completed" => {
                    let mut part = json!({
                        "type": "tool-input-available",
                        "toolCallId": call_id,
                        "toolName": name,
                        "input": call["arguments"],
                    });
                    if provider_executed {
                        part["providerExecuted"] = json!(true);
                    }
                    vec![part]
                }
                "tool_call.invalid" | "tool_call.abandoned" => vec![json!({
                    "type": "tool-input-error",
                    "toolCallId": call_id,
                    "toolName": name,
                    "input": raw,
                    "errorText": error_text(ty, event),
                })],
                "tool_result.completed" => {
                    let result = &event["tool_result"];
                    let id = result["tool_call_id"].as_str().unwrap_or_default();
                    let output = result["output"].as_str().unwrap_or_default();
                    if result["is_error"] == true {
                        vec![
                            json!({"type": "tool-output-error", "toolCallId": id, "errorText": output}),
                        ]
                    } else {
                        vec![
                            json!({"type": "tool-output-available", "toolCallId": id, "output": output}),
                        ]
                    }
                }
                _ => vec![],
            },
            Format::AgUi => match ty {
                "tool_call.started" => {
                    self.started.insert(call_id.clone());
                    vec![json!({
                        "type": "TOOL_CALL_START",
                        "toolCallId": call_id,
                        "toolCallName": name,
                        "parentMessageId": self.message,
                    })]
                }
                "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned" => {
                    let mut parts = Vec::new();
                    if self.started.contains(&call_id) {
                        if !raw.is_empty() {
                            parts.push(
                                json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": raw}),
                            );
                        }
                        parts.push(json!({"type": "TOOL_CALL_END", "toolCallId": call_id}));
                    }
                    if ty != "tool_call.completed" {
                        parts.push(json!({
                            "type": "CUSTOM",
                            "name": format!("toolstream.{ty}"),
                            "value": {
                                "toolCallId": call_id,
                                "toolCallName": name,
                                "reason": event["reason"],
                                "rawArguments": raw,
                            },
                        }));
                    }
                    parts
                }
                "tool_result.completed" => {
                    let result = &event["tool_result"];
                    let id = result["tool_call_id"].as_str().unwrap_or_default();
                    let mut parts = vec![json!({
                        "type": "TOOL_CALL_RESULT",
                        "messageId": format!("{}:result:{id}", self.message),
                        "toolCallId": id,
                        "content": result["output"].as_str().unwrap_or_default(),
                        "role": "tool",
                    })];
                    if result["is_error"] == true {
                        parts.push(json!({
                            "type": "CUSTOM",
                            "name": "toolstream.tool_result.error",
                            "value": {"toolCallId": id},
                        }));
                    }
                    parts
                }
                _ => vec![],
            },
        }
    }

    /// Whether the message is done: completed, and every completed call has its result.
    pub(crate) fn done(&self) -> bool {
        self.format != Format::Toolstream
            && self.message_completed
            && self
                .completed_calls
                .iter()
                .all(|c| self.results.contains(c))
    }

    /// The parts that close a done stream (`ai-sdk` then sends `[DONE]`).
    pub(crate) fn closing(&self) -> Vec<Value> {
        match self.format {
            Format::Toolstream => vec![],
            Format::AiSdk => vec![json!({"type": "finish-step"}), json!({"type": "finish"})],
            Format::AgUi => vec![json!({
                "type": "RUN_FINISHED",
                "threadId": self.conversation,
                "runId": self.message,
            })],
        }
    }

    /// An error part for a stream that ends early.
    pub(crate) fn error(&self, code: &str, message: &str) -> Value {
        match self.format {
            Format::AgUi => json!({"type": "RUN_ERROR", "message": message, "code": code}),
            _ => json!({"type": "error", "errorText": format!("{code}: {message}")}),
        }
    }
}

/// `tool_call.invalid (invalid_json)`.
fn error_text(ty: &str, event: &Value) -> String {
    match event["reason"].as_str() {
        Some(reason) => format!("{ty} ({reason})"),
        None => ty.to_string(),
    }
}

/// One event's frame group: every part as a `data:` frame, the last one carrying `id:` (an
/// event with no part sends its `id:` alone).
pub(crate) fn frames(seq: u64, parts: &[Value]) -> String {
    let mut out = String::new();
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter().enumerate() {
        if i == last {
            out.push_str(&format!("id: {seq}\n"));
        }
        out.push_str(&format!("data: {part}\n\n"));
    }
    if parts.is_empty() {
        out.push_str(&format!("id: {seq}\n\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_event(ty: &str, id: &str, args: Value, raw: &str) -> Value {
        json!({"type": ty, "tool_call": {"id": id, "name": "f", "arguments": args, "raw_arguments": raw, "index": 0}})
    }

    #[test]
    fn done_waits_for_the_results_of_completed_calls() {
        let mut t = Translator::new(Format::AiSdk, "c", "m");
        t.translate(&call_event("tool_call.started", "a", Value::Null, ""));
        t.translate(&call_event(
            "tool_call.completed",
            "a",
            json!({"x": 1}),
            "{\"x\":1}",
        ));
        t.translate(&json!({"type": "message.completed", "calls": [
            {"status": "completed", "tool_call": {"id": "a"}},
            {"status": "invalid", "tool_call": {"id": "b"}}
        ], "tool_results": []}));
        assert!(!t.done(), "call a has no result yet");
        let parts = t.translate(&json!({"type": "tool_result.completed", "tool_result": {"tool_call_id": "a", "output": "ok", "is_error": false}}));
        assert_eq!(
            parts,
            vec![json!({"type": "tool-output-available", "toolCallId": "a", "output": "ok"})]
        );
        assert!(t.done());
    }

    #[test]
    fn ag_ui_ends_only_calls_it_started() {
        let mut t = Translator::new(Format::AgUi, "c", "m");
        let parts = t.translate(&call_event("tool_call.completed", "a", json!({}), "{}"));
        assert!(
            parts.is_empty(),
            "resumed after its start: no END without START"
        );
        t.translate(&call_event("tool_call.started", "b", Value::Null, ""));
        let parts = t.translate(&call_event("tool_call.invalid", "b", Value::Null, "{x"));
        let types: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["TOOL_CALL_ARGS", "TOOL_CALL_END", "CUSTOM"]);
    }

    #[test]
    fn the_id_goes_on_the_last_frame_of_an_event() {
        assert_eq!(
            frames(7, &[json!({"a": 1}), json!({"b": 2})]),
            "data: {\"a\":1}\n\nid: 7\ndata: {\"b\":2}\n\n"
        );
        assert_eq!(frames(8, &[]), "id: 8\n\n");
    }
}
