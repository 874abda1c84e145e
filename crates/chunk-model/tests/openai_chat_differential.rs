//! Differential test of the OpenAI chat decoder: it reads chunks with the crate's own JSON
//! reader (`src/decode/reader/`) instead of serde, and must say exactly what the serde decoder
//! it replaced said (`serde_openai_chat/`, kept here as the oracle) for every input, valid or
//! not: the same events in the same order, the same error variant, field and message (a
//! dead-letter reason is user-visible).
//!
//! Inputs: every recorded chunk of every provider (the other providers' chunks are OpenAI
//! chat chunks of the wrong shape), the bench's typical chunks and hand-picked edge cases,
//! each then mutated many times, deterministically (seeded):
//! - structurally: any value (needed fields included) replaced by another of any type,
//!   including tricky numbers (`-0`, `1e400`, `18446744073709551616`, ...) and strings
//!   (escapes, surrogates, control characters, invalid UTF-8); members duplicated, dropped,
//!   reordered or added; keys written with escapes; structs written as arrays (fields by
//!   position, as serde reads them); whitespace between every token;
//! - then, sometimes, byte by byte: cut short, a byte dropped, inserted or replaced, a span
//!   doubled.
//!
//! `DIFF_CASES` (default 150) sets the mutations per seed chunk; a failure names the seed and
//! shows the input. Locally: `DIFF_CASES=20000 cargo test --release -p chunk-model --test
//! openai_chat_differential`.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serde_openai_chat;

use chunk_model::chunk::ChunkEvent;
use chunk_model::decode::{decode_routed, Route};
use chunk_model::error::DecodeError;
use chunk_model::Provider;
use serde_json::Value;
use std::path::PathBuf;

type Routed = Result<Vec<(Route, ChunkEvent)>, DecodeError>;

/// What the serde decoder said, through `decode_routed`'s own wrapping.
fn oracle(chunk: &[u8]) -> Routed {
    let trimmed = chunk.trim_ascii();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    if trimmed == b"[DONE]" {
        return Ok(vec![(Route::All, ChunkEvent::StreamEnd)]);
    }
    serde_openai_chat::decode_by_choice(trimmed)
}

static COUNTS: std::sync::Mutex<[u64; 5]> = std::sync::Mutex::new([0; 5]);

fn check(chunk: &[u8], what: &str) {
    let want = oracle(chunk);
    {
        let mut c = COUNTS.lock().unwrap();
        let i = match &want {
            Ok(v) if v.is_empty() => 0,
            Ok(_) => 1,
            Err(DecodeError::NotJson { .. }) => 2,
            Err(DecodeError::BadField { .. }) => 3,
            Err(_) => 4,
        };
        c[i] += 1;
    }
    let got = decode_routed(Provider::OpenaiChat, chunk);
    assert!(
        got == want,
        "{what}: the decoder and the serde oracle differ\ninput: {:?}\ngot:  {got:?}\nwant: {want:?}",
        String::from_utf8_lossy(chunk)
    );
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

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// `percent` percent of the time at `rate` 10, proportionally less or more at others.
    fn often(&mut self, percent: u64, rate: u64) -> bool {
        self.next() % 1000 < percent * rate
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A JSON document that keeps member order and duplicates, and raw text for scalars (so a
/// number or string can be anything, well-formed or not).
#[derive(Debug, Clone)]
enum J {
    /// Raw text of a scalar: `null`, `true`, `1e400`, `"a\u00e9"`, or bytes that are not
    /// JSON at all.
    Raw(Vec<u8>),
    Arr(Vec<J>),
    /// Members: raw key text (inside the quotes, escapes allowed) and value.
    Obj(Vec<(Vec<u8>, J)>),
}

fn from_value(v: &Value) -> J {
    match v {
        Value::Array(items) => J::Arr(items.iter().map(from_value).collect()),
        Value::Object(m) => J::Obj(
            m.iter()
                .map(|(k, v)| {
                    let key = serde_json::to_string(k).unwrap();
                    (key.as_bytes()[1..key.len() - 1].to_vec(), from_value(v))
                })
                .collect(),
        ),
        other => J::Raw(serde_json::to_vec(other).unwrap()),
    }
}

/// Whitespace serde_json skips, and form feed, which it does not.
const WS: &[&[u8]] = &[b" ", b"\n", b"\t", b"\r", b"  \n  ", b"\x0c"];

fn write(j: &J, rng: &mut Rng, ws: u64, out: &mut Vec<u8>) {
    let space = |rng: &mut Rng, out: &mut Vec<u8>| {
        if ws > 0 && rng.chance(ws) {
            let w = rng.pick(WS);
            // (a form feed is rare: it is a syntax error wherever it lands)
            if w != b"\x0c" || rng.chance(10) {
                out.extend_from_slice(w);
            }
        }
    };
    match j {
        J::Raw(raw) => out.extend_from_slice(raw),
        J::Arr(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                space(rng, out);
                if i > 0 {
                    out.push(b',');
                    space(rng, out);
                }
                write(item, rng, ws, out);
            }
            space(rng, out);
            out.push(b']');
        }
        J::Obj(members) => {
            out.push(b'{');
            for (i, (k, v)) in members.iter().enumerate() {
                space(rng, out);
                if i > 0 {
                    out.push(b',');
                    space(rng, out);
                }
                out.push(b'"');
                out.extend_from_slice(k);
                out.push(b'"');
                space(rng, out);
                out.push(b':');
                space(rng, out);
                write(v, rng, ws, out);
            }
            space(rng, out);
            out.push(b'}');
        }
    }
}

/// Scalars worth trying anywhere: numbers at every edge serde_json has, strings with every
/// kind of escape, valid surrogate pairs and non-ASCII text.
const SCALARS: &[&[u8]] = &[
    b"null",
    b"true",
    b"false",
    b"0",
    b"1",
    b"2",
    b"7",
    b"-1",
    b"-0",
    b"0.0",
    b"-0.0",
    b"1.5",
    b"2.0",
    b"1e2",
    b"1E+2",
    b"3.0e0",
    b"1e-2",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"0e99999999999999",
    b"1e99999999999999",
    b"1e-99999999999999",
    b"4294967295",
    b"4294967296",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"123456789012345678901234567890.5e-3",
    b"0.000000000000000000000000000001",
    b"\"\"",
    b"\"  \"",
    b"\"x\"",
    b"\"0\"",
    b"\" 3 \"",
    b"\"-1\"",
    b"\"4294967296\"",
    b"\"true\"",
    b"\"stop\"",
    b"\"tool_calls\"",
    b"\"length\"",
    b"\"content_filter\"",
    b"\"error\"",
    b"\"get_weather\"",
    b"\"call_1\"",
    b"\"{\\\"a\\\":1}\"",
    b"\"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t\"",
    b"\"\\u0041\\u00e9\\u4e2d\"",
    b"\"\\ud83d\\ude00\"",
    b"\"caf\xc3\xa9 \xf0\x9f\xa6\x80\"",
    b"\"\\ud800\"",
    b"\"\\udc00\"",
    b"\"\\ud800\\u0041\"",
    b"\"\\ud800x\"",
    b"\"\\ud800\\ud800\"",
];

/// Scalars that are not well-formed JSON (or not allowed in a string).
const MALFORMED: &[&[u8]] = &[
    b"\"\\x\"",
    b"\"\\u12G4\"",
    b"\"\\u12\"",
    b"\"a\x01b\"",
    b"\"a\x1f\"",
    b"\"bad \xff utf8\"",
    b"\"\xc3\"",
    b"\"unterminated",
    b"nul",
    b"tru",
    b"fals",
    b"nulll",
    b"01",
    b"1.",
    b".5",
    b"-",
    b"-a",
    b"1e",
    b"1e+",
    b"+1",
    b"NaN",
    b"'x'",
    b"",
];

/// Keys the decoder reads, and a few it does not.
const KEYS: &[&str] = &[
    "choices",
    "error",
    "model",
    "index",
    "delta",
    "finish_reason",
    "tool_calls",
    "function_call",
    "id",
    "function",
    "extra_content",
    "name",
    "arguments",
    "google",
    "thought_signature",
    "unified",
    "raw",
    "message",
    "code",
    "type",
    "role",
    "content",
    "usage",
    "x_unknown",
];

fn scalar(rng: &mut Rng) -> J {
    if rng.chance(8) {
        return J::Raw(rng.pick(MALFORMED).to_vec());
    }
    J::Raw(rng.pick(SCALARS).to_vec())
}

fn key(rng: &mut Rng) -> Vec<u8> {
    rng.pick(KEYS).as_bytes().to_vec()
}

fn random(rng: &mut Rng, depth: u32) -> J {
    match rng.below(if depth == 0 { 1 } else { 4 }) {
        0 | 1 => scalar(rng),
        2 => J::Arr((0..rng.below(3)).map(|_| random(rng, depth - 1)).collect()),
        _ => J::Obj(
            (0..rng.below(3))
                .map(|_| (key(rng), random(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// A key written with an escape (`"ch\u006fices"`), or with bytes that are not allowed.
fn escaped_key(rng: &mut Rng, k: &[u8]) -> Vec<u8> {
    if k.is_empty() {
        return b"\\u0000".to_vec();
    }
    let at = rng.below(k.len());
    let mut out = k[..at].to_vec();
    match rng.below(5) {
        0 => out.extend_from_slice(b"\\ud800"),
        1 => out.push(0xff),
        2 => out.push(0x01),
        _ => out.extend_from_slice(format!("\\u{:04x}", k[at]).as_bytes()),
    }
    out.extend_from_slice(&k[at + 1..]);
    out
}

/// The field order of the struct an object most likely is (to write it as an array).
fn positional(members: &[(Vec<u8>, J)]) -> &'static [&'static str] {
    let has = |k: &str| members.iter().any(|(m, _)| m == k.as_bytes());
    if has("delta") || has("finish_reason") {
        &["index", "delta", "finish_reason"]
    } else if has("tool_calls") || has("function_call") {
        &["tool_calls", "function_call"]
    } else if has("function") || has("extra_content") || has("id") {
        &["index", "id", "function", "extra_content"]
    } else if has("name") || has("arguments") {
        &["name", "arguments"]
    } else {
        &["choices", "error", "model"]
    }
}

fn mutate(rng: &mut Rng, j: &mut J, top: bool, rate: u64) {
    match j {
        J::Raw(_) => {
            if rng.often(15, rate) {
                *j = if rng.chance(80) {
                    scalar(rng)
                } else {
                    random(rng, 2)
                };
            }
        }
        J::Arr(items) => {
            if rng.often(4, rate) {
                *j = random(rng, 2);
                return;
            }
            if !items.is_empty() && rng.often(10, rate) {
                let i = rng.below(items.len());
                let copy = items[i].clone();
                items.insert(i, copy);
            }
            if !items.is_empty() && rng.often(5, rate) {
                let i = rng.below(items.len());
                items.remove(i);
            }
            for item in items.iter_mut() {
                mutate(rng, item, false, rate);
            }
        }
        J::Obj(members) => {
            if !top && rng.often(4, rate) {
                *j = random(rng, 2);
                return;
            }
            if !top && rng.often(6, rate) {
                // the struct written as an array, fields by position
                let order = positional(members);
                let mut items: Vec<J> = order
                    .iter()
                    .map(|f| {
                        members
                            .iter()
                            .find(|(k, _)| k == f.as_bytes())
                            .map_or_else(|| J::Raw(b"null".to_vec()), |(_, v)| v.clone())
                    })
                    .collect();
                if rng.chance(30) {
                    items.truncate(rng.below(items.len() + 1));
                }
                if rng.chance(20) {
                    items.push(scalar(rng));
                }
                *j = J::Arr(items);
                mutate(rng, j, false, rate);
                return;
            }
            if !members.is_empty() && rng.often(8, rate) {
                // a member twice (same key, this or another value)
                let i = rng.below(members.len());
                let (k, v) = members[i].clone();
                let v = if rng.chance(50) { v } else { scalar(rng) };
                let at = rng.below(members.len() + 1);
                members.insert(at, (k, v));
            }
            if !members.is_empty() && rng.often(6, rate) {
                let i = rng.below(members.len());
                members.remove(i);
            }
            if rng.often(10, rate) {
                members.push((key(rng), random(rng, 2)));
            }
            if members.len() > 1 && rng.often(10, rate) {
                let (a, b) = (rng.below(members.len()), rng.below(members.len()));
                members.swap(a, b);
            }
            if !members.is_empty() && rng.often(4, rate) {
                let i = rng.below(members.len());
                members[i].0 = escaped_key(rng, &members[i].0);
            }
            for (_, v) in members.iter_mut() {
                mutate(rng, v, false, rate);
            }
        }
    }
}

/// Bytes worth inserting anywhere.
const BYTES: &[u8] = b"\"\\{}[],: \n\t0123456789-+.eEnultrfasu\x00\x1f\x7f\x80\xc3\xff";

fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..=rng.below(2) {
        if bytes.is_empty() {
            return;
        }
        let at = rng.below(bytes.len());
        match rng.below(5) {
            0 => bytes.truncate(at),
            1 => {
                bytes.remove(at);
            }
            2 => bytes.insert(at, *rng.pick(BYTES)),
            3 => bytes[at] = *rng.pick(BYTES),
            _ => {
                let end = (at + 1 + rng.below(12)).min(bytes.len());
                let span = bytes[at..end].to_vec();
                bytes.splice(at..at, span);
            }
        }
    }
}

fn recorded_chunks() -> Vec<(String, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings");
    let mut out = Vec::new();
    for provider in Provider::ALL {
        let dir = root.join(provider.as_str());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            let frames = chunk_model::framing::split(&bytes).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            for (i, f) in frames.into_iter().enumerate() {
                out.push((format!("{provider}/{name}#{i}"), f.data));
            }
        }
    }
    out
}

/// Chunks the recordings do not have.
const EXTRA: &[&str] = &[
    r#"{"id":"chatcmpl-AZ3kq7Yx9VbNqZx8Kd2","object":"chat.completion.chunk","created":1732198400,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f7d56a8a2c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ocation\": \"San"}}]},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k3Xb9"}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"ipsum do"},"index":1}]},"finish_reason":null,"index":0}],"id":"chatcmpl-t","model":"gpt-4o","object":"chat.completion.chunk"}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""},"extra_content":{"google":{"thought_signature":"sig=="}}}]}}],"model":"gemini-2.5-flash"}"#,
    r#"{"model":"gemini-2.5-pro","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"g","arguments":{"a":[1,2.5,-3,true,null,"x\"y"],"b":{}}},"extra_content":{"google":{"thought_signature":"s1","thought_signature":"s2"},"google":{"thought_signature":"s3"}}}]},"finish_reason":{"unified":"tool-calls","raw":"tool_calls"}},{"index":"2","delta":{"function_call":{"name":"legacy","arguments":"{}"}},"finish_reason":"stop"}]}"#,
    r#"{"choices":[[0,{"tool_calls":[[1,"call_p",["pos","{\"k\":1}"]]]},"length"]],"error":{"code":502,"message":"Provider disconnected"}}"#,
    r#"{"error":"plain string error","choices":[]}"#,
    r#"{"error":{"message":"  ","type":"x"},"choices":null,"model":null}"#,
    r#"{"choices":[{"index":-1,"delta":{"tool_calls":[{"index":"  ","id":"  ","function":{"name":"  ","arguments":""}}]}}]}"#,
    r#"{"choices":[{"index":4294967296,"delta":{"tool_calls":[{"index":3.0,"function":{"arguments":12.5e1}}]}}]}"#,
    "{\n  \"choices\" : [ {\n    \"index\" : 0 ,\n    \"delta\" : { \"tool_calls\" : [ { \"index\" : 0 , \"function\" : { \"arguments\" : \"x\" } } ] }\n  } ]\n}",
    r#"{}"#,
    r#"[]"#,
    r#"[1,2]"#,
    r#""string""#,
    r#"42"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"a"}}]}}]} trailing"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"a"}}]}}],}"#,
    "[DONE]",
    "  \n ",
];

#[test]
fn the_reader_decodes_exactly_as_the_serde_decoder_did() {
    let cases: u64 = std::env::var("DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let mut seeds = recorded_chunks();
    for (i, extra) in EXTRA.iter().enumerate() {
        seeds.push((format!("extra#{i}"), extra.as_bytes().to_vec()));
    }
    let mut checked = 0u64;
    for (s, (name, chunk)) in seeds.iter().enumerate() {
        check(chunk, name);
        checked += 1;
        let parsed = serde_json::from_slice::<Value>(chunk).ok();
        // (the other providers' chunks are OpenAI chat chunks of the wrong shape: fewer)
        let ours = name.starts_with("openai-chat/") || name.starts_with("extra#");
        for case in 0..if ours { cases } else { cases / 5 } {
            let seed = (s as u64) << 32 | case;
            let mut rng = Rng(seed);
            let mut bytes = match &parsed {
                Some(v) => {
                    let mut j = from_value(v);
                    let rate = *rng.pick(&[1, 3, 10, 20]);
                    mutate(&mut rng, &mut j, true, rate);
                    let ws = if rng.chance(20) {
                        1 + rng.below(30) as u64
                    } else {
                        0
                    };
                    let mut out = Vec::new();
                    write(&j, &mut rng, ws, &mut out);
                    out
                }
                None => chunk.clone(),
            };
            if parsed.is_none() || rng.chance(25) {
                mutate_bytes(&mut rng, &mut bytes);
            }
            check(&bytes, &format!("{name} seed {seed}"));
            checked += 1;
        }
    }
    let counts = *COUNTS.lock().unwrap();
    eprintln!("COUNTS empty/events/notjson/badfield/other {counts:?}");
    assert!(checked > 10_000, "{checked}");
    // the mutations reach each outcome the two decoders must agree on (not only the error
    // paths they share, `not_an_object` say)
    assert!(
        counts[1] > 0 && counts[2] > 0 && counts[3] > 0,
        "events / not JSON / bad field: {counts:?}"
    );
}

#[test]
fn every_truncation_and_every_single_byte_change_of_a_chunk_agrees() {
    for chunk in [EXTRA[0], EXTRA[3], EXTRA[4]] {
        let bytes = chunk.as_bytes();
        for end in 0..=bytes.len() {
            check(&bytes[..end], &format!("cut at {end}"));
        }
        for at in 0..bytes.len() {
            for &b in BYTES {
                let mut changed = bytes.to_vec();
                changed[at] = b;
                check(&changed, &format!("byte {at} = {b:#x}"));
                let mut inserted = bytes.to_vec();
                inserted.insert(at, b);
                check(&inserted, &format!("insert {b:#x} at {at}"));
            }
        }
    }
}

#[test]
fn deep_chunks_agree() {
    for depth in [120, 126, 127, 128, 129, 500] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let deep = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            for chunk in [
                format!(r#"{{"choices":{deep}}}"#),
                format!(r#"{{"usage":{deep}}}"#),
                format!(
                    r#"{{"choices":[{{"delta":{{"tool_calls":[{{"function":{{"arguments":{deep}}}}}]}}}}]}}"#
                ),
                format!(r#"{{"x":{deep},"choices":5}}"#),
                format!(r#"{{"x":tru {deep}}}"#),
                format!(r#"{{"x":"{}"}}"#, "[".repeat(depth)),
            ] {
                check(chunk.as_bytes(), &format!("depth {depth}"));
            }
        }
    }
}
