//! Every `Nats-Msg-Id` format. JetStream drops a message whose id it already holds within the
//! stream's duplicate window, so each id is deterministic (a resend maps to the same id) and
//! unambiguous (two different messages never share one).
//!
//! | message | id | built by |
//! | --- | --- | --- |
//! | input chunk, `Toolstream-Seq: N` | `chunks.<conv>.<msg>.<N>` | [`msg_id`] |
//! | input explicit end, `Toolstream-Seq: N` | `chunks.<conv>.<msg>.end.<N>` | [`msg_id`] |
//! | input results message | `results.<conv>.<msg>.<item>[.<item>…]` | [`msg_id`] |
//! | event | its `event_id` (`ev_` + 32 hex) | [`crate::event_id`] |
//! | the store's dead letter | `dlq:<k>:<len>:<conv>:<len>:<msg>:<p\|t><N>:<fp>` | [`store_dead_letter`] |
//! | the worker's dead letter (unreadable input) | `dlq:in:<stream seq>` | [`input_dead_letter`] |
//! | replacement of a row too large to publish | `too_large:<row id>` | [`too_large`] |
//!
//! **Inputs.** A result item is `<call>` (a whole result), `<call>:d<K>` (the `K`-th streamed
//! `delta` piece of that call) or `<call>:done` (the end of a streamed result), where
//! `<call>` is the `tool_call_id`. Every variable field (`<conv>`, `<msg>`, `<call>`) is
//! escaped: each byte outside printable ASCII (`!` to `~`) and each of `%`, `.`, `:` is written
//! as `%XX` (two upper-case hex digits). Escaping is injective and the escaped fields contain
//! neither `.` nor `:`, so an id splits back into exactly one (kind, conversation, message,
//! part) ([`parse`]): conversation `k11:a` with message `b` is `chunks.k11%3Aa.b.0`,
//! conversation `k11` with message `a:b` is `chunks.k11.a%3Ab.0`. (The first version's
//! `<conv>:<msg>:<seq>` gave both `k11:a:b:0`.) The id is also a valid header value whatever
//! bytes a tool call id holds.
//!
//! **Store dead letters.** `<k>` is the input kind (`c` chunk, `r` result), conversation and
//! message are length-prefixed (so `:` inside them cannot shift a field), `p<N>`/`t<N>` is
//! the producer (`Toolstream-Seq`) or transport (stream sequence) number, and `<fp>` the
//! input's 16-hex fingerprint, so other bytes at one number get another id.

use super::subjects::InputKind;

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
        Input::Chunk(_) | Input::End(_) => InputKind::Chunk,
        Input::Results(_) => InputKind::Result,
    };
    let mut id = format!("{}.{}.{}", kind.token(), escape(conv), escape(msg));
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

/// An input id read back by [`parse`]: the unescaped fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedInputId {
    /// The conversation.
    pub conversation_id: String,
    /// The message.
    pub message_id: String,
    /// What the input is.
    pub part: ParsedPart,
}

/// The input part of a [`ParsedInputId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedPart {
    /// [`Input::Chunk`].
    Chunk(u64),
    /// [`Input::End`].
    End(u64),
    /// [`Input::Results`], with owned call ids.
    Results(Vec<ParsedItem>),
}

/// A [`ResultItem`] with an owned call id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedItem {
    /// [`ResultItem::Whole`].
    Whole(String),
    /// [`ResultItem::Delta`].
    Delta(String, u64),
    /// [`ResultItem::Done`].
    Done(String),
}

/// Reads an input id back ([`msg_id`] is its inverse); `None` when `id` is not one.
pub fn parse(id: &str) -> Option<ParsedInputId> {
    let mut fields = id.split('.');
    let kind = fields.next()?;
    let conversation_id = unescape(fields.next()?)?;
    let message_id = unescape(fields.next()?)?;
    let rest: Vec<&str> = fields.collect();
    let part = match (kind, rest.as_slice()) {
        ("chunks", [n]) => ParsedPart::Chunk(number(n)?),
        ("chunks", ["end", n]) => ParsedPart::End(number(n)?),
        ("results", items) if !items.is_empty() => ParsedPart::Results(
            items
                .iter()
                .map(|item| parse_item(item))
                .collect::<Option<Vec<_>>>()?,
        ),
        _ => return None,
    };
    Some(ParsedInputId {
        conversation_id,
        message_id,
        part,
    })
}

fn parse_item(item: &str) -> Option<ParsedItem> {
    match item.split_once(':') {
        None => Some(ParsedItem::Whole(unescape(item)?)),
        Some((call, "done")) => Some(ParsedItem::Done(unescape(call)?)),
        Some((call, piece)) => {
            let k = number(piece.strip_prefix('d')?)?;
            Some(ParsedItem::Delta(unescape(call)?, k))
        }
    }
}

/// A decimal number as [`msg_id`] writes it (no sign, no leading zeros but `0` itself).
fn number(text: &str) -> Option<u64> {
    let ok = text.bytes().all(|b| b.is_ascii_digit())
        && !text.is_empty()
        && (text == "0" || !text.starts_with('0'));
    ok.then(|| text.parse().ok()).flatten()
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

/// The inverse of [`escape`]; `None` for text [`escape`] cannot have written.
pub fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            if hex.bytes().any(|h| h.is_ascii_lowercase()) {
                return None;
            }
            let v = u8::from_str_radix(hex, 16).ok()?;
            if (b'!'..=b'~').contains(&v) && !matches!(v, b'%' | b'.' | b':') {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            if !(b'!'..=b'~').contains(&b) || matches!(b, b'.' | b':') {
                return None;
            }
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// How a dead-lettered input was numbered: its producer `Toolstream-Seq` or its transport
/// (JetStream stream) sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbered {
    /// `Toolstream-Seq: N`.
    Producer(u64),
    /// Stream sequence `N` (no `Toolstream-Seq`).
    Transport(u64),
}

/// The id of a dead letter the store writes for an input (see the module docs).
pub fn store_dead_letter(
    kind: InputKind,
    conv: &str,
    msg: &str,
    seq: Numbered,
    fingerprint: u64,
) -> String {
    let (numbering, n) = match seq {
        Numbered::Producer(s) => ('p', s),
        Numbered::Transport(s) => ('t', s),
    };
    let k = match kind {
        InputKind::Chunk => 'c',
        InputKind::Result => 'r',
    };
    format!(
        "dlq:{k}:{}:{conv}:{}:{msg}:{numbering}{n}:{fingerprint:016x}",
        conv.len(),
        msg.len()
    )
}

/// The id of a dead letter the worker writes for an input it could not read or route
/// (bad headers, unroutable subject, poison, store error): its stream sequence.
pub fn input_dead_letter(stream_seq: u64) -> String {
    format!("dlq:in:{stream_seq}")
}

/// The id of the small dead letter that replaces a row too large to publish.
pub fn too_large(row_id: &str) -> String {
    format!("too_large:{row_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    #[test]
    fn ids_parse_back_to_their_fields() {
        let id = msg_id("k11:a", "b", Input::End(7));
        let parsed = parse(&id).unwrap();
        assert_eq!(
            (
                parsed.conversation_id.as_str(),
                parsed.message_id.as_str(),
                parsed.part
            ),
            ("k11:a", "b", ParsedPart::End(7))
        );
        for bad in [
            "chunks.c.m",
            "chunks.c.m.x",
            "chunks.c.m.07",
            "results.c.m",
            "results.c.m.a:x1",
            "events.c.m.1",
            "chunks.c%3a.m.1",
            "chunks.c%41.m.1",
            "chunks.c%4.m.1",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn other_ids_keep_their_formats() {
        assert_eq!(
            store_dead_letter(InputKind::Chunk, "c:1", "m", Numbered::Producer(3), 0xab),
            "dlq:c:3:c:1:1:m:p3:00000000000000ab"
        );
        assert_eq!(
            store_dead_letter(InputKind::Result, "c", "m", Numbered::Transport(9), 1),
            "dlq:r:1:c:1:m:t9:0000000000000001"
        );
        assert_eq!(input_dead_letter(42), "dlq:in:42");
        assert_eq!(too_large("ev_1"), "too_large:ev_1");
    }

    fn item_strategy() -> impl Strategy<Value = (u8, String, u64)> {
        (0u8..3, ".{0,6}", 0u64..1000)
    }

    proptest! {
        #[test]
        fn every_input_id_round_trips(
            conv in ".{0,8}",
            msg in ".{0,8}",
            choice in 0u8..3,
            seq in any::<u64>(),
            items in proptest::collection::vec(item_strategy(), 1..4),
        ) {
            let owned: Vec<ResultItem<'_>> = items
                .iter()
                .map(|(k, call, n)| match k {
                    0 => ResultItem::Whole(call),
                    1 => ResultItem::Delta(call, *n),
                    _ => ResultItem::Done(call),
                })
                .collect();
            let (input, want) = match choice {
                0 => (Input::Chunk(seq), ParsedPart::Chunk(seq)),
                1 => (Input::End(seq), ParsedPart::End(seq)),
                _ => (
                    Input::Results(&owned),
                    ParsedPart::Results(
                        owned
                            .iter()
                            .map(|i| match i {
                                ResultItem::Whole(c) => ParsedItem::Whole(c.to_string()),
                                ResultItem::Delta(c, n) => ParsedItem::Delta(c.to_string(), *n),
                                ResultItem::Done(c) => ParsedItem::Done(c.to_string()),
                            })
                            .collect(),
                    ),
                ),
            };
            let id = msg_id(&conv, &msg, input);
            prop_assert!(id.bytes().all(|b| (b'!'..=b'~').contains(&b)));
            let parsed = parse(&id).unwrap();
            prop_assert_eq!(parsed.conversation_id, conv);
            prop_assert_eq!(parsed.message_id, msg);
            prop_assert_eq!(parsed.part, want);
        }

        #[test]
        fn escape_is_injective(a in ".{0,8}", b in ".{0,8}") {
            prop_assert_eq!(escape(&a) == escape(&b), a == b);
            prop_assert_eq!(unescape(&escape(&a)), Some(a));
        }
    }
}
