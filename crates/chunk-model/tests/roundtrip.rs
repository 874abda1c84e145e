//! Round trip: stored → wire → canonical → wire → canonical is lossless for every history
//! format, over arbitrary JSON arguments (unicode, escapes, deep nesting) and hostile ids.
//!
//! What each format keeps is checked against the original; what is lossy by nature is named
//! in the format's module doc and skipped here:
//! - `is_error`: kept by Anthropic, Gemini, Bedrock; OpenAI chat, Mistral, Responses and
//!   Ollama have no error flag on a result.
//! - ids: compared after mapping (a valid, unique id is unchanged). Gemini drops synthetic ids
//!   (never sent upstream) and Ollama has no ids: parsed calls get fresh synthetic ids.
//! - blank results: Bedrock sends `[empty result]` (it rejects blank text blocks).
//! - metadata: only Gemini `thoughtSignature` travels, and a fitting Responses `item_id` when
//!   `send_item_ids` is on (off by default, see `HistoryOptions::send_item_ids`).

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod history_fixtures;

use chunk_model::encode::{parse_history, HistoryFormat, IdRule};
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{CallOutcome, MessageSnapshot, ToolResult};
use history_fixtures::{call, snapshot};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[\"\\\\/\n\r\t\u{0}-\u{1f}\u{7f}\u{2028}\u{2029}\u{feff}é😀\u{10ffff}a-z ]{0,12}",
        "\\PC{0,30}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        // dyadic rationals: exactly representable, so text ↔ f64 is exact
        (any::<i32>(), 0u32..20).prop_map(|(m, e)| json!(f64::from(m) / f64::from(1u32 << e))),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn arguments() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(text(), json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        "call_[a-zA-Z0-9]{24}",
        "toolu_[a-zA-Z0-9]{20}",
        "[a-zA-Z0-9]{9}",
        "call_[0-3]",
        "\\PC{1,50}",
    ]
}

#[derive(Debug, Clone)]
struct CallSpec {
    id: String,
    name: String,
    args: Value,
    result: Option<(String, bool)>,
    signature: Option<String>,
    synthetic: bool,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (
        id(),
        "[a-zA-Z_][a-zA-Z0-9_]{0,20}",
        arguments(),
        proptest::option::weighted(0.85, (text(), any::<bool>())),
        proptest::option::of("[A-Za-z0-9+/]{8,40}={0,2}"),
        any::<bool>(),
    )
        .prop_map(|(id, name, args, result, signature, synthetic)| CallSpec {
            id,
            name,
            args,
            result,
            signature,
            synthetic,
        })
}

fn history() -> impl Strategy<Value = Vec<MessageSnapshot>> {
    proptest::collection::vec(proptest::collection::vec(call_spec(), 1..4), 1..4).prop_map(
        |turns| {
            turns
                .into_iter()
                .enumerate()
                .map(|(t, specs)| {
                    // ids are unique within a stored message (the assembler guarantees it)
                    let mut seen = std::collections::HashSet::new();
                    let specs: Vec<CallSpec> = specs
                        .into_iter()
                        .filter(|s| seen.insert(s.id.clone()))
                        .collect();
                    let calls: Vec<CallOutcome> = specs
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let mut c = call(&s.id, &s.name, i as u32, s.args.clone());
                            let meta = &mut c.tool_call.provider_metadata;
                            if let Some(sig) = &s.signature {
                                meta.insert("thoughtSignature".into(), json!(sig));
                            }
                            if s.synthetic {
                                meta.insert("synthetic_id".into(), json!(true));
                            }
                            c
                        })
                        .collect();
                    // results arrive in reverse order: rendering must put them back in call order
                    let results: Vec<ToolResult> = specs
                        .iter()
                        .rev()
                        .filter_map(|s| {
                            s.result.as_ref().map(|(out, err)| ToolResult {
                                tool_call_id: s.id.clone(),
                                output: out.clone(),
                                is_error: *err,
                            })
                        })
                        .collect();
                    snapshot(&format!("m{t}"), calls, results)
                })
                .collect()
        },
    )
}

fn big() -> HistoryOptions {
    HistoryOptions {
        max_result_chars: 10_000,
        ..HistoryOptions::default()
    }
}

fn keeps_error_flag(f: HistoryFormat) -> bool {
    matches!(
        f,
        HistoryFormat::Anthropic | HistoryFormat::Gemini | HistoryFormat::Bedrock
    )
}

/// The output each original call should come back with (its result or the placeholder;
/// Bedrock sends a blank result as `[empty result]`).
fn expected_output(format: HistoryFormat, snap: &MessageSnapshot, call_id: &str) -> (String, bool) {
    let (out, err) = snap
        .tool_results
        .iter()
        .find(|r| r.tool_call_id == call_id)
        .map(|r| (r.output.clone(), r.is_error))
        .unwrap_or_else(|| ("[No result recorded]".to_string(), false));
    if format == HistoryFormat::Bedrock && out.trim().is_empty() {
        return ("[empty result]".to_string(), err);
    }
    (out, err)
}

fn check_format(format: HistoryFormat, original: &[MessageSnapshot]) -> Result<(), TestCaseError> {
    let wire0 = render(original, format, &big()).unwrap().messages;
    let c1 = parse_history(format, &wire0).unwrap();
    let wire1 = render(&c1, format, &big()).unwrap().messages;
    let c2 = parse_history(format, &wire1).unwrap();
    prop_assert_eq!(
        &wire0,
        &wire1,
        "{}: wire changed on the second pass",
        format
    );
    prop_assert_eq!(&c1, &c2, "{}: canonical changed on the second pass", format);

    // against the original
    prop_assert_eq!(c1.len(), original.len(), "{}: turns", format);
    let rule = IdRule::for_format(format);
    let mut id_count: HashMap<&str, usize> = HashMap::new();
    for s in original {
        for c in &s.calls {
            *id_count.entry(c.tool_call.id.as_str()).or_default() += 1;
        }
    }
    for (orig, back) in original.iter().zip(&c1) {
        prop_assert_eq!(orig.calls.len(), back.calls.len(), "{}: calls", format);
        prop_assert!(
            back.orphaned_results.is_empty(),
            "{}: {:?}",
            format,
            back.orphaned_results
        );
        prop_assert_eq!(
            back.tool_results.len(),
            back.calls.len(),
            "{}: one result per call",
            format
        );
        for (k, (o, b)) in orig.calls.iter().zip(&back.calls).enumerate() {
            let (o, b) = (&o.tool_call, &b.tool_call);
            prop_assert_eq!(&o.name, &b.name);
            prop_assert_eq!(&o.arguments, &b.arguments, "{}: arguments", format);
            let id_travels = match format {
                HistoryFormat::Ollama => false,
                HistoryFormat::Gemini => o.provider_metadata.get("synthetic_id").is_none(),
                _ => true,
            };
            if id_travels && rule.accepts(&o.id) && id_count.get(o.id.as_str()) == Some(&1) {
                prop_assert_eq!(&o.id, &b.id, "{}: a valid unique id is kept", format);
            }
            if format == HistoryFormat::Gemini {
                prop_assert_eq!(
                    o.provider_metadata.get("thoughtSignature"),
                    b.provider_metadata.get("thoughtSignature")
                );
            }
            let r = &back.tool_results[k];
            prop_assert_eq!(
                &r.tool_call_id,
                &b.id,
                "{}: result {} answers call {}",
                format,
                k,
                k
            );
            let (out, err) = expected_output(format, orig, &o.id);
            prop_assert_eq!(&r.output, &out, "{}: output", format);
            if keeps_error_flag(format) {
                prop_assert_eq!(r.is_error, err, "{}: is_error", format);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn wire_canonical_wire_is_lossless_for_every_format(snaps in history()) {
        for format in HistoryFormat::ALL {
            check_format(format, &snaps)?;
        }
    }
}

#[test]
fn deeply_nested_arguments_survive_every_format() {
    // MAX_ARGUMENT_DEPTH (64) levels, the deepest arguments a call can complete with (the
    // leaf object, 62 levels, the top object); deeper ones end `invalid` (`argument_depth`).
    let mut v = json!({"leaf": "ü\"\\\n\u{0}😀"});
    for i in 0..(chunk_model::depth::MAX_ARGUMENT_DEPTH - 2) {
        v = if i % 2 == 0 {
            json!([v])
        } else {
            json!({"k": v})
        };
    }
    let args = json!({"deep": v});
    let snaps = vec![snapshot(
        "m0",
        vec![call("call_deep", "deep", 0, args)],
        vec![],
    )];
    for format in HistoryFormat::ALL {
        check_format(format, &snaps).unwrap();
    }
}
