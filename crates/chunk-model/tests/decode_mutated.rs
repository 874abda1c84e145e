//! The crash-proof rule, pinned for good (issue 10, item 3): a field the assembler does not
//! need never changes what a decoder says. For every provider, every recorded stream under
//! `tests/recordings/<provider>/` is decoded chunk by chunk, then decoded again many times with
//! random mutations of what the decoder does not need:
//! - extra members (any JSON, nested) in every object outside the values kept verbatim;
//! - every member the decoder does not read given another type (a string for an object, an
//!   array for a number, `null`, ...), or, for a string, an unknown value (an unknown enum
//!   member: a `role`, an `object`, a `stop_sequence`, a text block's `type`, ...);
//! - the `type` of events and blocks the decoder skips replaced by an unknown type.
//!
//! The chunk events must be exactly those of the unmutated chunk (both sides go through the
//! same JSON re-serialization, so values kept verbatim compare byte for byte).
//!
//! The fields a decoder needs (`NEEDED`) and the values it keeps verbatim (`VERBATIM`: argument
//! objects, result content, provider metadata, error objects whose text is reported) are listed
//! per provider from the decoders' own docs; a field listed as needed where it is not only
//! makes the test weaker, never wrong. Runs are deterministic (seeded); a failure names the
//! provider, file, chunk and seed, and shows the mutated chunk.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunk_model::{decode, ChunkEvent, Provider};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Mutated runs per chunk.
const SEEDS: u64 = 100;

/// What one decoder reads: member names it needs anywhere (never mutated, their subtrees
/// still are), member names whose values it keeps verbatim (not touched at all), and which
/// `type` values it acts on (any other `type` value may become an unknown one).
struct Rules {
    dir: &'static str,
    needed: &'static [&'static str],
    verbatim: &'static [&'static str],
    acts_on_type: fn(&str) -> bool,
}

fn no_type(_: &str) -> bool {
    false
}

fn rules(p: Provider) -> Rules {
    match p {
        Provider::OpenaiChat => Rules {
            dir: "openai-chat",
            needed: &[
                "choices",
                "index",
                "delta",
                "tool_calls",
                "id",
                "function",
                "name",
                "arguments",
                "finish_reason",
                "function_call",
                "error",
                "extra_content",
                "model",
            ],
            verbatim: &["arguments", "error", "extra_content", "model"],
            acts_on_type: no_type,
        },
        Provider::Anthropic => Rules {
            dir: "anthropic",
            needed: &[
                "type",
                "index",
                "content_block",
                "delta",
                "id",
                "name",
                "server_name",
                "tool_use_id",
                "content",
                "is_error",
                "partial_json",
                "stop_reason",
                "error",
                "thinking",
                "signature",
                "data",
            ],
            verbatim: &["content", "error"],
            acts_on_type: |t| {
                matches!(
                    t,
                    "content_block_start"
                        | "content_block_delta"
                        | "content_block_stop"
                        | "message_delta"
                        | "message_stop"
                        | "error"
                        | "tool_use"
                        | "server_tool_use"
                        | "mcp_tool_use"
                        | "input_json_delta"
                        | "thinking"
                        | "redacted_thinking"
                        | "thinking_delta"
                        | "signature_delta"
                ) || t.ends_with("_tool_result")
                    || t.ends_with("_error")
            },
        },
        Provider::Gemini => Rules {
            dir: "gemini",
            needed: &[
                "candidates",
                "content",
                "parts",
                "functionCall",
                "id",
                "name",
                "args",
                "partialArgs",
                "willContinue",
                "jsonPath",
                "stringValue",
                "numberValue",
                "boolValue",
                "nullValue",
                "thoughtSignature",
                "finishReason",
                "promptFeedback",
                "blockReason",
                "error",
                "modelVersion",
            ],
            verbatim: &["args", "error", "modelVersion"],
            acts_on_type: no_type,
        },
        Provider::Bedrock => Rules {
            dir: "bedrock",
            needed: &[
                "contentBlockStart",
                "contentBlockIndex",
                "start",
                "toolUse",
                "toolUseId",
                "name",
                "contentBlockDelta",
                "delta",
                "input",
                "contentBlockStop",
                "messageStop",
                "stopReason",
                "internalServerException",
                "modelStreamErrorException",
                "validationException",
                "throttlingException",
                "serviceUnavailableException",
                "reasoningContent",
                "text",
                "signature",
                "redactedContent",
                "type",
                "toolResult",
            ],
            verbatim: &[
                "input",
                "toolResult",
                "internalServerException",
                "modelStreamErrorException",
                "validationException",
                "throttlingException",
                "serviceUnavailableException",
            ],
            acts_on_type: |t| t == "server_tool_use",
        },
        Provider::Ollama => Rules {
            dir: "ollama",
            needed: &[
                "message",
                "tool_calls",
                "id",
                "function",
                "index",
                "name",
                "arguments",
                "done",
                "done_reason",
                "error",
            ],
            verbatim: &["arguments", "error"],
            acts_on_type: no_type,
        },
        Provider::OpenaiResponses => Rules {
            dir: "openai-responses",
            needed: &[
                "type",
                "output_index",
                "item_id",
                "delta",
                "arguments",
                "input",
                "name",
                "item",
                "id",
                "call_id",
                "status",
                "server_label",
                "output",
                "error",
                "response",
                "incomplete_details",
                "reason",
                "message",
                "code",
            ],
            verbatim: &["arguments", "input", "output", "error", "message", "code"],
            acts_on_type: |t| {
                matches!(
                    t,
                    "response.output_item.added"
                        | "response.output_item.done"
                        | "response.function_call_arguments.delta"
                        | "response.function_call_arguments.done"
                        | "response.custom_tool_call_input.delta"
                        | "response.custom_tool_call_input.done"
                        | "response.mcp_call_arguments.delta"
                        | "response.mcp_call_arguments.done"
                        | "response.completed"
                        | "response.incomplete"
                        | "response.failed"
                        | "error"
                        | "function_call"
                        | "custom_tool_call"
                        | "mcp_call"
                        | "mcp_approval_request"
                )
            },
        },
        Provider::AiSdk => Rules {
            dir: "ai-sdk",
            needed: &[
                "type",
                "id",
                "toolCallId",
                "toolName",
                "delta",
                "inputTextDelta",
                "argsTextDelta",
                "input",
                "args",
                "output",
                "result",
                "preliminary",
                "isError",
                "finishReason",
                "unified",
                "raw",
                "error",
                "errorText",
                "providerMetadata",
            ],
            verbatim: &[
                "input",
                "args",
                "output",
                "result",
                "error",
                "errorText",
                "providerMetadata",
            ],
            acts_on_type: |t| {
                matches!(
                    t,
                    "tool-input-start"
                        | "tool-call-streaming-start"
                        | "tool-input-delta"
                        | "tool-call-delta"
                        | "tool-input-end"
                        | "tool-call"
                        | "tool-input-available"
                        | "tool-result"
                        | "tool-output-available"
                        | "tool-error"
                        | "tool-output-error"
                        | "finish"
                        | "error"
                        | "abort"
                        | "tool-approval-request"
                        | "tool-approval-response"
                        | "tool-output-denied"
                        | "tool-input-error"
                )
            },
        },
    }
}

/// splitmix64: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The kind of a JSON value: 0 null, 1 bool, 2 number, 3 string, 4 array, 5 object.
fn kind(v: &Value) -> u64 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

/// A random JSON value of kind `k`, nested at most `depth` more levels.
fn value_of_kind(rng: &mut Rng, k: u64, depth: u32) -> Value {
    let depth = depth.saturating_sub(1);
    match k {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => match rng.below(3) {
            0 => Value::from(rng.below(1_000_000)),
            1 => Value::from(-(rng.below(1000) as i64)),
            _ => serde_json::Number::from_f64(rng.below(1000) as f64 / 7.0)
                .map_or(Value::Null, Value::Number),
        },
        3 => Value::String(
            [
                "",
                " ",
                "x_unknown_value",
                "true",
                "0",
                "{\"a\":1}",
                "é\u{1F600}",
            ][rng.below(7) as usize]
                .to_string(),
        ),
        4 if depth > 0 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth))
                .collect(),
        ),
        5 if depth > 0 => {
            let mut m = Map::new();
            for i in 0..rng.below(3) {
                m.insert(format!("x_tsx_{i}"), random_value(rng, depth));
            }
            Value::Object(m)
        }
        4 => Value::Array(Vec::new()),
        _ => Value::Object(Map::new()),
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    let k = rng.below(6);
    value_of_kind(rng, k, depth)
}

/// A value of another kind than `v`, or for a string sometimes an unknown string value.
fn changed(rng: &mut Rng, v: &Value) -> Value {
    if v.is_string() && rng.chance(40) {
        return Value::String("x_unknown_value".into());
    }
    let mut k = rng.below(6);
    if k == kind(v) {
        k = (k + 1) % 6;
    }
    value_of_kind(rng, k, 3)
}

/// Mutates `v` in place under `rules`.
fn mutate(rng: &mut Rng, rules: &Rules, v: &mut Value) {
    match v {
        Value::Array(items) => {
            for item in items {
                mutate(rng, rules, item);
            }
        }
        Value::Object(members) => {
            let keys: Vec<String> = members.keys().cloned().collect();
            for key in keys {
                let Some(value) = members.get_mut(&key) else {
                    continue;
                };
                if rules.verbatim.contains(&key.as_str()) {
                    continue;
                }
                if key == "type" {
                    if let Some(t) = value.as_str() {
                        if !(rules.acts_on_type)(t) && rng.chance(30) {
                            *value = Value::String(format!("x_unknown_type_{}", rng.below(9)));
                        }
                    }
                    if rules.needed.contains(&"type") {
                        continue;
                    }
                }
                if rules.needed.contains(&key.as_str()) {
                    mutate(rng, rules, value);
                } else if rng.chance(35) {
                    *value = changed(rng, value);
                } else {
                    mutate(rng, rules, value);
                }
            }
            for i in 0..rng.below(3) {
                let extra = random_value(rng, 3);
                members.insert(format!("x_tsx_extra_{i}"), extra);
            }
        }
        _ => {}
    }
}

fn recordings(dir: &str) -> Vec<(String, Vec<Vec<u8>>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/recordings")
        .join(dir);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let frames = chunk_model::framing::split(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, frames.into_iter().map(|f| f.data.to_vec()).collect()));
    }
    out.sort();
    assert!(!out.is_empty(), "no recordings in {}", root.display());
    out
}

/// Decodes every recorded chunk of `provider` mutated `SEEDS` times; returns how many
/// mutated chunks were decoded.
fn check(provider: Provider) -> usize {
    let rules = rules(provider);
    let mut decoded = 0;
    for (file, chunks) in recordings(rules.dir) {
        for (c, chunk) in chunks.iter().enumerate() {
            let Ok(parsed) = serde_json::from_slice::<Value>(chunk) else {
                continue; // `[DONE]`, blank keep-alives
            };
            let baseline_bytes = serde_json::to_vec(&parsed).unwrap();
            let baseline: Vec<ChunkEvent> = decode(provider, &baseline_bytes)
                .unwrap_or_else(|e| panic!("{provider} {file} chunk {c}: {e}"));
            for seed in 0..SEEDS {
                let mut rng = Rng(seed ^ ((c as u64) << 20) ^ (file.len() as u64) << 40);
                let mut mutated = parsed.clone();
                mutate(&mut rng, &rules, &mut mutated);
                let bytes = serde_json::to_vec(&mutated).unwrap();
                let got = decode(provider, &bytes);
                assert!(
                    got.as_ref() == Ok(&baseline),
                    "{provider} {file} chunk {c} seed {seed}: a field the decoder does not \
                     need changed what it says\nmutated: {}\ngot: {got:?}\nwant: {baseline:?}",
                    String::from_utf8_lossy(&bytes)
                );
                decoded += 1;
            }
        }
    }
    decoded
}

#[test]
fn openai_chat_ignores_what_it_does_not_need() {
    assert!(check(Provider::OpenaiChat) > 1_000);
}

#[test]
fn openai_responses_ignores_what_it_does_not_need() {
    assert!(check(Provider::OpenaiResponses) > 1_000);
}

#[test]
fn anthropic_ignores_what_it_does_not_need() {
    assert!(check(Provider::Anthropic) > 1_000);
}

#[test]
fn gemini_ignores_what_it_does_not_need() {
    assert!(check(Provider::Gemini) > 500);
}

#[test]
fn bedrock_ignores_what_it_does_not_need() {
    assert!(check(Provider::Bedrock) > 500);
}

#[test]
fn ollama_ignores_what_it_does_not_need() {
    assert!(check(Provider::Ollama) > 500);
}

#[test]
fn ai_sdk_ignores_what_it_does_not_need() {
    assert!(check(Provider::AiSdk) > 1_000);
}

#[test]
fn the_mutations_do_change_the_chunks() {
    // (the test above would pass on mutations that change nothing)
    let rules = rules(Provider::Anthropic);
    let chunk: Value = serde_json::from_str(
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12}}"#,
    )
    .unwrap();
    let mut changed_any = 0;
    for seed in 0..SEEDS {
        let mut m = chunk.clone();
        mutate(&mut Rng(seed), &rules, &mut m);
        assert_eq!(
            m["delta"]["stop_reason"], "tool_use",
            "a needed field changed"
        );
        if m != chunk {
            changed_any += 1;
        }
        let usage_changed = m["usage"] != chunk["usage"];
        let extra = m
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("x_tsx"));
        changed_any += usize::from(usage_changed || extra);
    }
    assert!(changed_any > SEEDS as usize, "{changed_any}");
}
