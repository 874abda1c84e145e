//! Generated provider streams: [`Call`]s cut into argument fragments as OpenAI Chat
//! Completions chunks ([`openai_chat_stream`], built from [`crate::openai`]) or Anthropic
//! Messages events ([`anthropic_stream`]).

use crate::openai;
use serde_json::Value;

/// A tool call a generated stream carries.
#[derive(Debug, Clone)]
pub struct Call {
    /// Wire id.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments (serialized compactly and cut into small fragments).
    pub args: Value,
}

/// Cuts `text` into pieces of at most `n` chars.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    pieces_by(text, |_| n)
}

/// Cuts `text` into pieces of `len(i)` chars for the `i`-th piece (at least 1; the last one
/// may be shorter).
pub fn pieces_by(text: &str, mut len: impl FnMut(usize) -> usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let n = len(out.len()).max(1);
        let end = (at + n).min(chars.len());
        out.push(chars[at..end].iter().collect());
        at = end;
    }
    out
}

/// An OpenAI Chat Completions stream with parallel `calls`, arguments in 5-char fragments,
/// ending with `finish_reason: tool_calls` and `[DONE]`.
pub fn openai_chat_stream(calls: &[Call]) -> Vec<Vec<u8>> {
    openai_chat_stream_cut(calls, |_| 5)
}

/// [`openai_chat_stream`] with argument fragments of `frag(i)` chars (`i` counts fragments).
pub fn openai_chat_stream_cut(calls: &[Call], frag: impl FnMut(usize) -> usize) -> Vec<Vec<u8>> {
    let mut frag = frag;
    let mut out = vec![openai::role_chunk()];
    for (i, c) in (0u32..).zip(calls) {
        out.push(openai::call_start(i, &c.id, &c.name));
        for p in pieces_by(&c.args.to_string(), &mut frag) {
            out.push(openai::args_chunk(i, &p));
        }
    }
    out.push(openai::finish_chunk("tool_calls"));
    out.push(openai::DONE.to_vec());
    out
}

/// An Anthropic Messages stream with `calls` as tool_use blocks (after one text block),
/// `input_json_delta` fragments of 5 chars, ending with `stop_reason: tool_use`.
pub fn anthropic_stream(calls: &[Call]) -> Vec<Vec<u8>> {
    anthropic_stream_cut(calls, |_| 5)
}

/// [`anthropic_stream`] with argument fragments of `frag(i)` chars (`i` counts fragments).
pub fn anthropic_stream_cut(calls: &[Call], frag: impl FnMut(usize) -> usize) -> Vec<Vec<u8>> {
    let mut frag = frag;
    let mut out = Vec::new();
    out.push(
        serde_json::json!({"type":"message_start","message":{"id":"msg_t","type":"message",
        "role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,
        "usage":{"input_tokens":10,"output_tokens":1}}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_start","index":0,
        "content_block":{"type":"text","text":""}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_delta","index":0,
        "delta":{"type":"text_delta","text":"Let me check."}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"content_block_stop","index":0})
            .to_string()
            .into_bytes(),
    );
    for (i, c) in calls.iter().enumerate() {
        let block = i + 1;
        out.push(
            serde_json::json!({"type":"content_block_start","index":block,
            "content_block":{"type":"tool_use","id":c.id,"name":c.name,"input":{}}})
            .to_string()
            .into_bytes(),
        );
        for p in pieces_by(&c.args.to_string(), &mut frag) {
            out.push(
                serde_json::json!({"type":"content_block_delta","index":block,
                "delta":{"type":"input_json_delta","partial_json":p}})
                .to_string()
                .into_bytes(),
            );
        }
        out.push(
            serde_json::json!({"type":"content_block_stop","index":block})
                .to_string()
                .into_bytes(),
        );
    }
    out.push(
        serde_json::json!({"type":"message_delta","delta":{"stop_reason":"tool_use",
        "stop_sequence":null},"usage":{"output_tokens":42}})
        .to_string()
        .into_bytes(),
    );
    out.push(
        serde_json::json!({"type":"message_stop"})
            .to_string()
            .into_bytes(),
    );
    out
}
