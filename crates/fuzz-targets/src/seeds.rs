//! Seed inputs for every target, made from the recorded provider streams in
//! `tests/recordings/<provider>/` (one seed per chunk for `decode`, whole recordings for
//! `framing`, Vertex pieces for `partial_args`, each call's argument text for `previews`)
//! and from a few hand-written inputs (tool results, generator scripts, with and without
//! previews; checkpoints exported from the stores those scripts build, whole and damaged). `cargo run -p toolstream-fuzz-targets --example make_seeds`
//! writes them to `fuzz/seeds/<target>/` (not committed: they are made from the recordings,
//! so they never go stale).

use crate::assembler_target::{build_store, encode, encode_with, Op, Setup};
use crate::checkpoint_target::{structured_input, Damage};
use crate::{piece_line, provider_byte};
use assembler::Previews;
use chunk_model::framing;
use chunk_model::{ChunkEvent, Provider};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One seed: its target, a file name, the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// The target (corpus directory) it is for.
    pub target: &'static str,
    /// A file name, unique within the target.
    pub name: String,
    /// The input.
    pub data: Vec<u8>,
}

/// `tests/recordings/` of this repository.
pub fn recordings_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings")
}

/// `fuzz/` of this repository.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every seed, made from `recordings` (the `tests/recordings/` directory).
pub fn all(recordings: &Path) -> std::io::Result<Vec<Seed>> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(recordings)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let Some(provider) = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Provider::parse)
        else {
            continue; // expected/
        };
        let mut files: Vec<_> = std::fs::read_dir(&dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in files {
            let bytes = std::fs::read(&file)?;
            let stem = format!(
                "{}-{}",
                provider.as_str(),
                file.file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("recording")
            );
            out.push(Seed {
                target: "framing",
                name: stem.clone(),
                data: bytes.clone(),
            });
            let Ok(frames) = framing::split(&bytes) else {
                continue;
            };
            let mut pieces = Vec::new();
            // each call's argument text, by its reference (as a JSON text), in order
            let mut texts: BTreeMap<String, String> = BTreeMap::new();
            for (n, frame) in frames.iter().enumerate() {
                let mut data = vec![provider_byte(provider)];
                data.extend_from_slice(&frame.data);
                out.push(Seed {
                    target: "decode",
                    name: format!("{stem}-{n:03}"),
                    data,
                });
                if let Ok(events) = chunk_model::decode(provider, &frame.data) {
                    for ev in events {
                        if let ChunkEvent::CallFragment(f) = ev {
                            if let Some(text) = &f.arguments {
                                let at = serde_json::to_string(&f.at).unwrap_or_default();
                                texts.entry(at).or_default().push_str(text);
                            }
                            pieces.extend(f.path_values);
                        }
                    }
                }
            }
            for (n, text) in texts.values().filter(|t| !t.is_empty()).enumerate() {
                out.push(Seed {
                    target: "previews",
                    name: format!("{stem}-call{n}"),
                    data: text.clone().into_bytes(),
                });
            }
            if !pieces.is_empty() {
                let lines: Vec<Vec<u8>> = pieces.iter().map(piece_line).collect();
                out.push(Seed {
                    target: "partial_args",
                    name: stem.clone(),
                    data: lines.join(&b'\n'),
                });
            }
        }
    }
    out.extend(hand_written());
    Ok(out)
}

fn seed(target: &'static str, name: &str, data: impl Into<Vec<u8>>) -> Seed {
    Seed {
        target,
        name: name.to_string(),
        data: data.into(),
    }
}

/// Seeds that are not in any recording.
pub fn hand_written() -> Vec<Seed> {
    let mut out = vec![
        seed(
            "partial_args",
            "nested",
            b"\x00$.order.items[0].sku=A-1\n\x02$.order.items[0].qty=2\n\x01$['a b']=he\n\x00$['a b']=llo\n\x04$.gift=true\n\x06$.note="
                .to_vec(),
        ),
        seed("result", "toolstream", br#"{"tool_call_id":"call_1","output":"72F","is_error":false}"#.to_vec()),
        seed("result", "delta", br#"[{"tool_call_id":"c","delta":"a"},{"tool_call_id":"c","done":"true"}]"#.to_vec()),
        seed("result", "openai", br#"{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}"#.to_vec()),
        seed("result", "anthropic", br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","is_error":true}]}"#.to_vec()),
        seed("result", "ai-sdk", br#"{"type":"tool-result","toolCallId":"c1","output":{"type":"error-json","value":{"e":1}}}"#.to_vec()),
    ];
    let start = |msg, index, plan, text: &[u8], take| Op::Start {
        msg,
        index,
        plan,
        text: text.to_vec(),
        take,
    };
    let scripts: Vec<(&str, Vec<Op>)> = vec![
        (
            "two-calls-completed",
            vec![
                start(0, 0, 0, b"Paris", 3),
                Op::Fragment {
                    msg: 0,
                    index: 0,
                    take: 5,
                },
                Op::Fragment {
                    msg: 0,
                    index: 0,
                    take: 200,
                },
                start(0, 1, 2, b"", 200),
                Op::Finish { msg: 0, how: 0 },
                Op::Result {
                    msg: 0,
                    index: 0,
                    kind: 0,
                    text: b"sunny".to_vec(),
                },
            ],
        ),
        (
            "reordered-and-duplicated",
            vec![
                start(1, 0, 0, b"abcdefghij", 2),
                Op::Swapped {
                    msg: 1,
                    index: 0,
                    take: 4,
                },
                Op::Duplicate { msg: 1 },
                Op::Fragment {
                    msg: 1,
                    index: 0,
                    take: 200,
                },
                Op::Finish { msg: 1, how: 4 },
            ],
        ),
        (
            "lost-chunk-gap",
            vec![
                start(2, 0, 0, b"x", 2),
                Op::Lose { msg: 2 },
                Op::Fragment {
                    msg: 2,
                    index: 0,
                    take: 200,
                },
                Op::Tick { ms: 255 },
                Op::Finish { msg: 2, how: 0 },
            ],
        ),
        (
            "limits-results-controls",
            vec![
                start(0, 0, 1, &[b'a'; 60], 60),
                start(0, 1, 3, &[b'['; 40], 200),
                start(0, 2, 0, b"q", 1),
                start(0, 3, 0, b"q", 1),
                Op::Result {
                    msg: 0,
                    index: 1,
                    kind: 1,
                    text: b"part".to_vec(),
                },
                Op::Result {
                    msg: 0,
                    index: 1,
                    kind: 2,
                    text: Vec::new(),
                },
                Op::Control {
                    msg: 0,
                    error: true,
                },
                Op::Raw {
                    msg: 1,
                    body: b"{\"choices\":[".to_vec(),
                },
                Op::Tick { ms: 200 },
            ],
        ),
    ];
    // previews on: a delta per chunk with a full partial parse; then throttled, with a
    // small partial bound, a message cache of one (texts read back from storage) and a clock
    // that moves between chunks
    let every_chunk = Setup {
        previews: Some(Previews {
            enabled: true,
            min_bytes: 1,
            min_interval_ms: 0,
            partial_max_bytes: 16 * 1024,
        }),
        message_cache_entries: None,
        chunk_step_ms: 0,
    };
    let throttled = Setup {
        previews: Some(Previews {
            enabled: true,
            min_bytes: 4,
            min_interval_ms: 20,
            partial_max_bytes: 8,
        }),
        message_cache_entries: Some(1),
        chunk_step_ms: 7,
    };
    for (name, ops) in &scripts {
        out.push(seed("assembler", name, encode(ops)));
        out.push(seed(
            "assembler",
            &format!("{name}-previews"),
            encode_with(&every_chunk, ops),
        ));
        out.push(seed(
            "assembler",
            &format!("{name}-previews-throttled"),
            encode_with(&throttled, ops),
        ));
    }
    out.extend(checkpoints(&scripts, &every_chunk));
    out.extend(previews_texts());
    out.extend(histories());
    out
}

/// `checkpoint` seeds: the export of each script's store as a raw file (mode 0), and the
/// structured inputs that export it untouched, with a bit flipped in a record, cut short, and
/// with a byte inserted.
fn checkpoints(scripts: &[(&str, Vec<Op>)], previews: &Setup) -> Vec<Seed> {
    let mut out = Vec::new();
    for (name, ops) in scripts {
        let script = encode_with(previews, ops);
        let (store, _) = build_store(&script);
        let file = std::env::temp_dir().join(format!(
            "toolstream-fuzz-seed-{}-{name}",
            std::process::id()
        ));
        if store.export_checkpoint(&file).is_ok() {
            if let Ok(bytes) = std::fs::read(&file) {
                let mut data = vec![0];
                data.extend(bytes);
                out.push(seed("checkpoint", &format!("{name}-export"), data));
            }
        }
        let _ = std::fs::remove_file(&file);
        for (suffix, damages) in [
            ("untouched", vec![]),
            ("flipped", vec![Damage::Flip { at: 40, value: 3 }]),
            ("cut", vec![Damage::Cut { at: 100 }]),
            ("inserted", vec![Damage::Insert { at: 9, value: 7 }]),
        ] {
            out.push(seed(
                "checkpoint",
                &format!("{name}-{suffix}"),
                structured_input(&damages, &script),
            ));
        }
    }
    out.push(seed("checkpoint", "empty", vec![0]));
    out.push(seed(
        "checkpoint",
        "magic-only",
        b"\0TSCKPT1\nEND\n\0\0\0\0\0\0\0\0".to_vec(),
    ));
    out
}

/// `previews` seeds that no recording holds: escapes cut anywhere, surrogate pairs, number
/// tails, literals, nesting.
fn previews_texts() -> Vec<Seed> {
    [
        (
            "escapes",
            r#"{"path":"C:\\tmp\\a\"b\"","u":"\u00e9\ud83d\ude00\n"}"#,
        ),
        (
            "numbers",
            r#"{"a":-12.5e+3,"b":[0,1E-2,-0.0],"c":1234567890123456789012}"#,
        ),
        ("literals", r#"[true,false,null,{"t":true}]"#),
        ("nested", r#"{"a":[{"b":[{"c":[[[]]]}]}],"d":{}}"#),
        ("string", r#""just a string with \"quotes\"""#),
        ("spaces", " {\n \"a\" : [ 1 , 2 ] ,\t\"b\" : \"x\" }\n"),
        ("unicode", "{\"ключ\":\"значение 😀\",\"k\":\"\\u2028\"}"),
    ]
    .into_iter()
    .map(|(name, text)| seed("previews", name, text.as_bytes().to_vec()))
    .collect()
}

/// One conversation (two calls, one result, one orphaned result) rendered in every history
/// format, as `history` seeds.
fn histories() -> Vec<Seed> {
    use chunk_model::encode::HistoryFormat;
    use chunk_model::history::{render, HistoryOptions};
    use chunk_model::{
        CallOutcome, CallStatus, MessageSnapshot, MessageStatus, ToolCall, ToolResult,
    };
    let call = |id: &str, index, arguments: serde_json::Value| CallOutcome {
        status: CallStatus::Completed,
        reason: None,
        tool_call: ToolCall {
            id: id.to_string(),
            name: "get_weather".to_string(),
            raw_arguments: arguments.to_string(),
            arguments,
            index,
            kind: Default::default(),
            provider_metadata: serde_json::Map::new(),
        },
    };
    let snapshot = MessageSnapshot {
        conversation_id: "c1".to_string(),
        message_id: "m1".to_string(),
        provider: Some(Provider::OpenaiChat),
        status: MessageStatus::Completed,
        finish_reason: Some("tool_calls".to_string()),
        calls: vec![
            call(
                "call_a",
                0,
                serde_json::json!({"city": "Paris", "days": [1, 2]}),
            ),
            call("call_b", 1, serde_json::json!({})),
        ],
        tool_results: vec![ToolResult {
            tool_call_id: "call_a".to_string(),
            output: "sunny".to_string(),
            is_error: false,
        }],
        orphaned_results: vec![ToolResult {
            tool_call_id: "call_zz".to_string(),
            output: "late".to_string(),
            is_error: true,
        }],
        provider_metadata: serde_json::Map::new(),
    };
    let mut out = Vec::new();
    for (i, format) in HistoryFormat::ALL.iter().enumerate() {
        let Ok(rendered) = render(
            std::slice::from_ref(&snapshot),
            *format,
            &HistoryOptions::default(),
        ) else {
            continue;
        };
        let Ok(json) = serde_json::to_vec(&rendered.messages) else {
            continue;
        };
        let mut data = vec![u8::try_from(i).unwrap_or(0)];
        data.extend(json);
        out.push(seed("history", format.as_str(), data));
    }
    out
}
