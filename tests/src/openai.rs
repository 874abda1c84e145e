//! OpenAI Chat Completions chunks, built one at a time: the one set of builders the tests,
//! benches and the throughput harness use (a chunk is the JSON of one SSE `data:` line, as a
//! producer forwards it).
//!
//! Every chunk has the same envelope (`id`, `object`, `model`) and one choice at index 0.

use serde_json::{json, Value};

/// The literal last line of a stream.
pub const DONE: &[u8] = b"[DONE]";

/// One chunk whose only choice carries `delta` and `finish_reason` (`None`: still streaming).
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Vec<u8> {
    json!({"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
    .to_string()
    .into_bytes()
}

/// The first chunk of a reply: `role: assistant`, no content.
pub fn role_chunk() -> Vec<u8> {
    chunk(json!({"role": "assistant", "content": null}), None)
}

/// The `tool_calls` entry of a delta for call `index`: `id` (with `type: function`) and
/// `name` when given (a call's first chunk), and `args`, the next piece of argument text.
pub fn tool_call(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["type"] = "function".into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    call
}

/// A chunk carrying one [`tool_call`] delta.
pub fn tool_call_chunk(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Vec<u8> {
    chunk(
        json!({"tool_calls": [tool_call(index, id, name, args)]}),
        None,
    )
}

/// The start of call `index`: its id and name, no argument text yet.
pub fn call_start(index: u32, id: &str, name: &str) -> Vec<u8> {
    tool_call_chunk(index, Some(id), Some(name), "")
}

/// A piece of argument text for call `index`.
pub fn args_chunk(index: u32, text: &str) -> Vec<u8> {
    tool_call_chunk(index, None, None, text)
}

/// The authoritative end: an empty delta with `finish_reason` (`tool_calls`, `stop`, `length`…).
pub fn finish_chunk(reason: &str) -> Vec<u8> {
    chunk(json!({}), Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn chunks_have_the_wire_shape() {
        let start = parse(&call_start(1, "call_a", "search"));
        assert_eq!(start["object"], "chat.completion.chunk");
        let call = &start["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 1);
        assert_eq!(call["id"], "call_a");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "search");
        assert_eq!(call["function"]["arguments"], "");
        assert_eq!(start["choices"][0]["finish_reason"], Value::Null);

        let piece = parse(&args_chunk(0, "{\"q\""));
        let call = &piece["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{\"q\"");
        assert!(call.get("id").is_none() && call["function"].get("name").is_none());

        let fin = parse(&finish_chunk("tool_calls"));
        assert_eq!(fin["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(fin["choices"][0]["delta"], json!({}));
        assert_eq!(
            parse(&role_chunk())["choices"][0]["delta"]["role"],
            "assistant"
        );
    }

    #[test]
    fn the_chunks_decode_as_openai_chat() {
        use chunk_model::{decode, Provider};
        for quiet in [role_chunk(), DONE.to_vec()] {
            decode(Provider::OpenaiChat, &quiet).unwrap();
        }
        for said in [
            call_start(0, "call_a", "f"),
            args_chunk(0, "{}"),
            finish_chunk("tool_calls"),
        ] {
            let events = decode(Provider::OpenaiChat, &said).unwrap();
            assert!(!events.is_empty(), "{}", String::from_utf8_lossy(&said));
        }
    }
}
