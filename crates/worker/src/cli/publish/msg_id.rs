//! The `Nats-Msg-Id` of every input message `toolstream publish` sends: one function,
//! [`msg_id`], so the format is defined once. Self-contained (no crate imports) so that the
//! integration tests can include this file and check ids against the same builder.
//!
//! Format (`.` separates fields; no field can contain one):
//!
//! | input | id |
//! | --- | --- |
//! | chunk `Toolstream-Seq: N` | `chunks.<conv>.<msg>.<N>` |
//! | explicit end, `Toolstream-Seq: N` | `chunks.<conv>.<msg>.end.<N>` |
//! | results message | `results.<conv>.<msg>.<item>[.<item>…]`, one item per result it holds |
//!
//! A result item is `<call>` (a whole result), `<call>:d<K>` (the `K`-th streamed `delta` piece
//! of that call) or `<call>:done` (the end of a streamed result), where `<call>` is the
//! `tool_call_id`.
//!
//! Every variable field (`<conv>`, `<msg>`, `<call>`) is escaped: each byte outside printable
//! ASCII (`!` to `~`) and each of `%`, `.`, `:` is written as `%XX` (two upper-case hex
//! digits). Escaping is injective and the escaped fields contain neither `.` nor `:`, so an id
//! splits back into exactly one (kind, conversation, message, part): conversation `k11:a` with
//! message `b` is `chunks.k11%3Aa.b.0`, conversation `k11` with message `a:b` is
//! `chunks.k11.a%3Ab.0`. (The previous `<conv>:<msg>:<seq>` gave both `k11:a:b:0`.) The id is
//! also a valid header value whatever bytes a tool call id holds.

/// One result of a results message, as its id names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultItem<'a> {
    /// A whole result for the call.
    Whole(&'a str),
    /// Streamed piece number `.1` of the call's result.
    Delta(&'a str, u64),
    /// The end of the call's streamed result.
    Done(&'a str),
}

/// What an input message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    /// Chunk number `seq` of the message's stream.
    Chunk(u64),
    /// The explicit end (`Toolstream-Control: end`), sent as number `seq`.
    End(u64),
    /// A results message holding these results, in order.
    Results(&'a [ResultItem<'a>]),
}

/// The `Nats-Msg-Id` of `input` published for conversation `conv`, message `msg`.
pub fn msg_id(conv: &str, msg: &str, input: Input<'_>) -> String {
    let kind = match input {
        Input::Chunk(_) | Input::End(_) => "chunks",
        Input::Results(_) => "results",
    };
    let mut id = format!("{kind}.{}.{}", escape(conv), escape(msg));
    match input {
        Input::Chunk(seq) => id.push_str(&format!(".{seq}")),
        Input::End(seq) => id.push_str(&format!(".end.{seq}")),
        Input::Results(items) => {
            for item in items {
                id.push('.');
                match item {
                    ResultItem::Whole(call) => id.push_str(&escape(call)),
                    ResultItem::Delta(call, k) => id.push_str(&format!("{}:d{k}", escape(call))),
                    ResultItem::Done(call) => id.push_str(&format!("{}:done", escape(call))),
                }
            }
        }
    }
    id
}

/// `text` with every byte outside `!`..=`~` and every `%`, `.`, `:` written as `%XX`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (b'!'..=b'~').contains(&b) && !matches!(b, b'%' | b'.' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colon_conversations_and_messages_do_not_collide() {
        let a = msg_id("k11:a", "b", Input::Chunk(0));
        let b = msg_id("k11", "a:b", Input::Chunk(0));
        assert_ne!(a, b);
        assert_eq!(a, "chunks.k11%3Aa.b.0");
        assert_eq!(b, "chunks.k11.a%3Ab.0");
    }

    #[test]
    fn chunks_ends_and_results_have_distinct_ids() {
        let ids = [
            msg_id("c", "m", Input::Chunk(3)),
            msg_id("c", "m", Input::End(3)),
            msg_id("c", "m", Input::Results(&[ResultItem::Whole("3")])),
            msg_id("c", "m", Input::Results(&[ResultItem::Delta("3", 0)])),
            msg_id("c", "m", Input::Results(&[ResultItem::Done("3")])),
        ];
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{ids:?}");
        assert_eq!(ids[1], "chunks.c.m.end.3");
        assert_eq!(ids[3], "results.c.m.3:d0");
    }

    #[test]
    fn call_ids_with_separators_cannot_fake_two_results() {
        // one call "a.b" vs two calls "a" and "b"; a call named like a delta item
        let one = msg_id("c", "m", Input::Results(&[ResultItem::Whole("a.b")]));
        let two = msg_id(
            "c",
            "m",
            Input::Results(&[ResultItem::Whole("a"), ResultItem::Whole("b")]),
        );
        assert_ne!(one, two);
        let fake = msg_id("c", "m", Input::Results(&[ResultItem::Whole("x:d0")]));
        let delta = msg_id("c", "m", Input::Results(&[ResultItem::Delta("x", 0)]));
        assert_ne!(fake, delta);
        let escaped = msg_id("c", "m", Input::Results(&[ResultItem::Whole("%3A")]));
        assert_eq!(escaped, "results.c.m.%253A");
    }

    #[test]
    fn ids_are_printable_ascii_header_values() {
        let id = msg_id("c", "m", Input::Results(&[ResultItem::Whole("ü \r\n")]));
        assert_eq!(id, "results.c.m.%C3%BC%20%0D%0A");
        assert!(id.bytes().all(|b| (b'!'..=b'~').contains(&b)));
    }
}
