//! `?format=`: the wire an event stream speaks. `toolstream` (the default) sends the events as
//! published; `ai-sdk` and `ag-ui` translate one message's events (they need `?message=`) into
//! the parts those client libraries read:
//!
//! | event | `ai-sdk` (UI message stream v1) | `ag-ui` |
//! | --- | --- | --- |
//! | stream opens | `start` {messageId}, `start-step` | `RUN_STARTED` {threadId = conv, runId = msg} |
//! | `tool_call.started` | `tool-input-start` | `TOOL_CALL_START` {parentMessageId = msg} |
//! | `tool_call.delta` (previews) | `tool-input-delta` {inputTextDelta = arguments_delta} | `TOOL_CALL_ARGS` {delta = arguments_delta} |
//! | `tool_call.completed` | (`tool-input-delta` {the rest}), `tool-input-available` {input = arguments} | `TOOL_CALL_ARGS` {delta = the rest of raw_arguments}, `TOOL_CALL_END` |
//! | `tool_call.invalid` / `abandoned` | (`tool-input-delta` {the rest}), `tool-input-error` {input = raw_arguments, errorText} | `TOOL_CALL_ARGS` {the rest}, `TOOL_CALL_END` (if started), `CUSTOM` `toolstream.tool_call.<status>` |
//! | `tool_result.completed` | `tool-output-available` / `tool-output-error` (is_error) | `TOOL_CALL_RESULT` {role tool} (+ `CUSTOM` `toolstream.tool_result.error`) |
//! | the message is done | `finish-step`, `finish`, `[DONE]` | `RUN_FINISHED` |
//!
//! Argument text: a call started on this stream gets its `tool_call.delta`s (when the worker
//! emits them, `assembler.previews`) as text parts, in order (a delta whose offset is not where
//! the text sent so far ends is skipped); at its end "the rest" is `raw_arguments` past what the
//! deltas sent (AG-UI: all of it when none did; AI SDK: only after a delta), so the text parts
//! of a call concatenate to its final `raw_arguments`. If the final text does not extend what
//! the deltas sent (a provider restating the input differently), AI SDK's `input` is the truth
//! anyway and AG-UI gets a `CUSTOM` `toolstream.tool_call.arguments` {toolCallId,
//! rawArguments}. A call started before a resumed stream gets no text parts (neither reader
//! takes text for a call it has not seen start).
//!
//! "Done" = `message.completed` was seen and every call it lists as completed has a result;
//! then the stream closes. Every SSE frame group of one event ends with `id: <sequence>`, so
//! `Last-Event-ID` resumes these formats exactly like `toolstream`. An event that becomes no
//! part (`message.completed`, `tool_result.orphaned`) still sends its `id:` (an SSE event with
//! an id and no data moves the client's last event id without dispatching anything).

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};

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
    /// Calls whose `tool_call.started` was translated (AG-UI ends only what it started; text
    /// parts go only to calls started here), with the argument text sent for them.
    started: HashMap<String, Sent>,
    message_completed: bool,
}

/// The argument text sent for one call: its length, an FNV-1a hash of it (to tell whether the
/// final text extends it without keeping it), and how many delta parts carried it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    bytes: usize,
    hash: u64,
    deltas: usize,
}

impl Sent {
    const EMPTY: Sent = Sent {
        bytes: 0,
        hash: FNV_OFFSET,
        deltas: 0,
    };

    fn push(&mut self, text: &str) {
        self.bytes += text.len();
        self.hash = fnv(self.hash, text.as_bytes());
        self.deltas += 1;
    }

    /// The part of `raw` not sent yet, if `raw` starts with what was sent.
    fn rest<'a>(&self, raw: &'a str) -> Option<&'a str> {
        let (head, rest) = (raw.get(..self.bytes)?, raw.get(self.bytes..)?);
        (fnv(FNV_OFFSET, head.as_bytes()) == self.hash).then_some(rest)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Translator {
    pub(crate) fn new(format: Format, conversation: &str, message: &str) -> Translator {
        Translator {
            format,
            conversation: conversation.to_string(),
            message: message.to_string(),
            completed_calls: Vec::new(),
            results: HashSet::new(),
            started: HashMap::new(),
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
                    self.started.entry(call_id.clone()).or_insert(Sent::EMPTY);
                    let mut part = json!({"type": "tool-input-start", "toolCallId": call_id, "toolName": name});
                    if provider_executed {
                        part["providerExecuted"] = json!(true);
                    }
                    vec![part]
                }
                "tool_call.delta" => self
                    .delta(&call_id, event)
                    .map(|text| json!({"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": text}))
                    .into_iter()
                    .collect(),
                "tool_call.completed" => {
                    let mut parts = self.ai_sdk_rest(&call_id, raw);
                    let mut part = json!({
                        "type": "tool-input-available",
                        "toolCallId": call_id,
                        "toolName": name,
                        "input": call["arguments"],
                    });
                    if provider_executed {
                        part["providerExecuted"] = json!(true);
                    }
                    parts.push(part);
                    parts
                }
                "tool_call.invalid" | "tool_call.abandoned" => {
                    let mut parts = self.ai_sdk_rest(&call_id, raw);
                    parts.push(json!({
                        "type": "tool-input-error",
                        "toolCallId": call_id,
                        "toolName": name,
                        "input": raw,
                        "errorText": error_text(ty, event),
                    }));
                    parts
                }
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
                    self.started.entry(call_id.clone()).or_insert(Sent::EMPTY);
                    vec![json!({
                        "type": "TOOL_CALL_START",
                        "toolCallId": call_id,
                        "toolCallName": name,
                        "parentMessageId": self.message,
                    })]
                }
                "tool_call.delta" => self
                    .delta(&call_id, event)
                    .map(|text| json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": text}))
                    .into_iter()
                    .collect(),
                "tool_call.completed" | "tool_call.invalid" | "tool_call.abandoned" => {
                    let mut parts = Vec::new();
                    if let Some(sent) = self.started.get(&call_id) {
                        match sent.rest(raw) {
                            Some("") => {}
                            Some(rest) => parts.push(
                                json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": rest}),
                            ),
                            None => parts.push(json!({
                                "type": "CUSTOM",
                                "name": "toolstream.tool_call.arguments",
                                "value": {"toolCallId": call_id, "rawArguments": raw},
                            })),
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

    /// The text of a `tool_call.delta` for a call started on this stream, if it continues
    /// exactly where the text sent so far ends (recorded as sent).
    fn delta(&mut self, call_id: &str, event: &Value) -> Option<String> {
        let sent = self.started.get_mut(call_id)?;
        let text = event["arguments_delta"]
            .as_str()
            .filter(|t| !t.is_empty())?;
        if event["arguments_offset"].as_u64() != Some(sent.bytes as u64) {
            return None;
        }
        sent.push(text);
        Some(text.to_string())
    }

    /// AI SDK: the rest of a call's final text as one more `tool-input-delta`, when deltas
    /// were sent for it and the final text extends them.
    fn ai_sdk_rest(&self, call_id: &str, raw: &str) -> Vec<Value> {
        match self.started.get(call_id) {
            Some(sent) if sent.deltas > 0 => match sent.rest(raw) {
                Some(rest) if !rest.is_empty() => vec![json!({
                    "type": "tool-input-delta",
                    "toolCallId": call_id,
                    "inputTextDelta": rest,
                })],
                _ => vec![],
            },
            _ => vec![],
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

    fn delta_event(id: &str, offset: usize, text: &str) -> Value {
        json!({"type": "tool_call.delta", "tool_call": {"id": id, "name": "f", "arguments": null,
               "raw_arguments": "", "index": 0}, "arguments_delta": text, "arguments_offset": offset})
    }

    /// The text parts of a call (`inputTextDelta` / `delta`) in order, and the part types.
    fn text_of(parts: &[Value]) -> (String, Vec<String>) {
        let text = parts
            .iter()
            .filter_map(|p| p["inputTextDelta"].as_str().or_else(|| p["delta"].as_str()))
            .collect();
        let types = parts
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect();
        (text, types)
    }

    #[test]
    fn deltas_become_text_parts_that_concatenate_to_the_final_arguments() {
        let raw = "{\"city\":\"Paris\"}";
        for format in [Format::AiSdk, Format::AgUi] {
            let mut t = Translator::new(format, "c", "m");
            let mut parts = t.translate(&call_event("tool_call.started", "a", Value::Null, ""));
            parts.extend(t.translate(&delta_event("a", 0, "{\"city\":")));
            parts.extend(t.translate(&delta_event("a", 8, "\"Par")));
            // a delta that does not continue the text sent (here: one seen again) is skipped
            parts.extend(t.translate(&delta_event("a", 8, "\"Par")));
            parts.extend(t.translate(&call_event(
                "tool_call.completed",
                "a",
                json!({"city": "Paris"}),
                raw,
            )));
            let (text, types) = text_of(&parts);
            assert_eq!(text, raw, "{format:?}");
            let want: &[&str] = match format {
                Format::AiSdk => &[
                    "tool-input-start",
                    "tool-input-delta",
                    "tool-input-delta",
                    "tool-input-delta",
                    "tool-input-available",
                ],
                _ => &[
                    "TOOL_CALL_START",
                    "TOOL_CALL_ARGS",
                    "TOOL_CALL_ARGS",
                    "TOOL_CALL_ARGS",
                    "TOOL_CALL_END",
                ],
            };
            assert_eq!(types, want, "{format:?}");
        }
    }

    #[test]
    fn no_text_parts_for_a_call_not_started_on_this_stream_and_no_rest_without_deltas() {
        for format in [Format::AiSdk, Format::AgUi] {
            let mut t = Translator::new(format, "c", "m");
            assert!(
                t.translate(&delta_event("a", 0, "{")).is_empty(),
                "resumed after its start"
            );
        }
        // previews off: AI SDK's parts are as before, AG-UI sends the text at the end
        let mut t = Translator::new(Format::AiSdk, "c", "m");
        t.translate(&call_event("tool_call.started", "a", Value::Null, ""));
        let parts = t.translate(&call_event("tool_call.completed", "a", json!({}), "{}"));
        assert_eq!(text_of(&parts).1, ["tool-input-available"]);
        let mut t = Translator::new(Format::AgUi, "c", "m");
        t.translate(&call_event("tool_call.started", "a", Value::Null, ""));
        let parts = t.translate(&call_event("tool_call.completed", "a", json!({}), "{}"));
        assert_eq!(
            text_of(&parts),
            (
                "{}".to_string(),
                vec!["TOOL_CALL_ARGS".to_string(), "TOOL_CALL_END".to_string()]
            )
        );
    }

    /// What `format` sends for the completion of call `a` started, previewed as `{"city": `, then
    /// completed as `{"city":"Paris"}` (a final text that does not extend the delta).
    fn completed_after_a_diverging_delta(format: Format) -> Vec<Value> {
        let mut t = Translator::new(format, "c", "m");
        t.translate(&call_event("tool_call.started", "a", Value::Null, ""));
        t.translate(&delta_event("a", 0, "{\"city\": "));
        t.translate(&call_event(
            "tool_call.completed",
            "a",
            json!({"city": "Paris"}),
            "{\"city\":\"Paris\"}",
        ))
    }

    #[test]
    fn a_final_text_that_does_not_extend_the_deltas_is_said_apart_in_ag_ui() {
        let parts = completed_after_a_diverging_delta(Format::AgUi);
        assert_eq!(text_of(&parts).1, ["CUSTOM", "TOOL_CALL_END"]);
        assert_eq!(parts[0]["name"], "toolstream.tool_call.arguments");
        assert_eq!(parts[0]["value"]["rawArguments"], "{\"city\":\"Paris\"}");
        let parts = completed_after_a_diverging_delta(Format::AiSdk);
        assert_eq!(
            text_of(&parts).1,
            ["tool-input-available"],
            "input is the truth"
        );
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
