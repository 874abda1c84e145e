//! Synthetic but realistic openai-chat tool-call streams: the role chunk, one start chunk per
//! parallel call (id, name, `""` arguments), small argument fragments interleaved per call as
//! the API sends them, the `finish_reason: "tool_calls"` chunk and `[DONE]`.

use toolstream_testkit::openai;

/// One generated message stream.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The chunk bodies, in order, exactly as SSE `data:` payloads.
    pub chunks: Vec<Vec<u8>>,
    /// Index of the chunk that ends every call (the `finish_reason` chunk).
    pub finish_index: usize,
    /// The calls' ids, by index.
    pub call_ids: Vec<String>,
}

/// Builds a stream of exactly `total_chunks` chunks with `calls` parallel calls. Needs at least
/// `calls + 4` chunks (role, starts, one fragment per call, finish, `[DONE]`); smaller requests
/// are raised to that.
pub fn openai_chat(conv: usize, msg: usize, calls: usize, total_chunks: usize) -> Stream {
    let calls = calls.max(1);
    let total = total_chunks.max(calls * 2 + 3);
    let fragments = total - calls - 3;
    let mut chunks = Vec::with_capacity(total);
    chunks.push(openai::role_chunk());
    let call_ids: Vec<String> = (0..calls)
        .map(|i| format!("call_{conv}x{msg}x{i}"))
        .collect();
    for (i, call_id) in (0u32..).zip(&call_ids) {
        chunks.push(openai::call_start(i, call_id, "search_documents"));
    }
    // Fragments per call, as even as possible, interleaved round-robin.
    let per_call: Vec<usize> = (0..calls)
        .map(|i| fragments / calls + usize::from(i < fragments % calls))
        .collect();
    let pieces: Vec<Vec<String>> = per_call
        .iter()
        .enumerate()
        .map(|(i, n)| split_arguments(&arguments(conv, i, *n), *n))
        .collect();
    let longest = per_call.iter().copied().max().unwrap_or(0);
    for round in 0..longest {
        for (i, call_pieces) in (0u32..).zip(&pieces) {
            if let Some(piece) = call_pieces.get(round) {
                chunks.push(openai::args_chunk(i, piece));
            }
        }
    }
    let finish_index = chunks.len();
    chunks.push(openai::finish_chunk("tool_calls"));
    chunks.push(openai::DONE.to_vec());
    let bodies = chunks;
    Stream {
        chunks: bodies,
        finish_index,
        call_ids,
    }
}

/// A JSON arguments object long enough to be cut into `fragments` pieces of ~8 characters.
fn arguments(conv: usize, call: usize, fragments: usize) -> String {
    let head = format!("{{\"query\":\"conversation {conv} call {call}\",\"filter\":\"");
    let tail = "\",\"limit\":10}";
    let want = (fragments * 8)
        .saturating_sub(head.len() + tail.len())
        .max(1);
    let filler: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(want)
        .collect();
    format!("{head}{filler}{tail}")
}

/// Cuts ASCII `text` into `n` non-empty pieces of near-equal length.
fn split_arguments(text: &str, n: usize) -> Vec<String> {
    let n = n.max(1).min(text.len().max(1));
    let len = text.len();
    (0..n)
        .map(|i| text[i * len / n..(i + 1) * len / n].to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_have_exactly_the_requested_chunks_and_valid_arguments() {
        let s = openai_chat(3, 0, 2, 100);
        assert_eq!(s.chunks.len(), 100);
        assert_eq!(s.chunks.last().map(Vec::as_slice), Some(&b"[DONE]"[..]));
        assert_eq!(s.finish_index, 98);
        // Reassemble call 0's arguments and check they are JSON.
        let mut args = vec![String::new(); 2];
        for c in &s.chunks[..s.finish_index] {
            let v: serde_json::Value = serde_json::from_slice(c).unwrap();
            if let Some(tc) = v["choices"][0]["delta"]["tool_calls"][0].as_object() {
                let i = tc["index"].as_u64().unwrap() as usize;
                args[i].push_str(tc["function"]["arguments"].as_str().unwrap());
            }
        }
        for a in args {
            let parsed: serde_json::Value = serde_json::from_str(&a).unwrap();
            assert_eq!(parsed["limit"], 10);
        }
    }

    #[test]
    fn tiny_requests_are_raised_to_a_complete_stream() {
        let s = openai_chat(0, 0, 3, 1);
        assert_eq!(s.chunks.len(), 3 * 2 + 3);
        assert_eq!(s.call_ids.len(), 3);
    }
}
