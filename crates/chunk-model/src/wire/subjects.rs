//! Every subject toolstream uses, built from the prefix, and the parsers of input and query
//! subjects. No other code formats a subject by hand.
//!
//! Producers publish `<prefix>.chunks.<conv>.<msg>` and `<prefix>.results.<conv>.<msg>`. With
//! `partitions > 1` the server maps those (`deploy/nats-server.conf`) to
//! `<prefix>.p.<k>.chunks.<conv>.<msg>` / `<prefix>.p.<k>.results.<conv>.<msg>`, where
//! `k = partition(N, conv)`; the input stream then holds `<prefix>.p.*.chunks.>` and
//! `<prefix>.p.*.results.>` — exactly the input, nothing else of the `p.<k>` namespace (queries
//! are mapped to `<prefix>.p.<k>.query.…` and must not land in a stream).
//!
//! nats-server 2.9 gives a consumer one filter subject, inside the stream's subjects, so
//! partition `k` is consumed through two durable consumers, `…p.<k>.chunks.>` and
//! `…p.<k>.results.>`, merged by the consume loop. (Order matters only within one
//! (kind, conversation, message) stream, which one consumer always carries.)
//!
//! Events go to `<prefix>.events.<conv>.<msg>`, dead letters to `<prefix>.dlq.<conv>.<msg>`
//! (or `<prefix>.dlq.unroutable`), queries are answered on `<prefix>.query.message.<conv>.<msg>`
//! and `<prefix>.query.history.<conv>`. Builders take ids as they are; ids that reach them
//! came from a parsed subject or were checked with [`super::check_token`].

use serde::{Deserialize, Serialize};

/// Which input subject a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// `<prefix>.chunks.<conv>.<msg>`: one raw provider chunk.
    Chunk,
    /// `<prefix>.results.<conv>.<msg>`: one tool-result message.
    Result,
}

impl InputKind {
    /// The subject token: `chunks` or `results`.
    pub fn token(self) -> &'static str {
        match self {
            InputKind::Chunk => "chunks",
            InputKind::Result => "results",
        }
    }
}

/// Subjects derived from one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

/// A parsed input subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSubject<'a> {
    /// Chunk or result.
    pub kind: InputKind,
    /// The `<conv>` token.
    pub conversation_id: &'a str,
    /// The `<msg>` token.
    pub message_id: &'a str,
    /// The `<k>` token of a partitioned subject.
    pub partition: Option<u32>,
}

/// Why a subject cannot be attributed to a message (input) or a conversation (query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unroutable(pub String);

impl std::fmt::Display for Unroutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unroutable {}

impl Subjects {
    /// Subjects under `prefix` (already checked with [`super::check_prefix`]).
    pub fn new(prefix: &str) -> Subjects {
        Subjects {
            prefix: prefix.to_string(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>.chunks.<conv>.<msg>` or `<prefix>.results.<conv>.<msg>`: where a producer
    /// publishes.
    pub fn input(&self, kind: InputKind, conv: &str, msg: &str) -> String {
        format!("{}.{}.{conv}.{msg}", self.prefix, kind.token())
    }

    /// `<prefix>.events.<conv>.<msg>`: where a message's events are published.
    pub fn events(&self, conv: &str, msg: &str) -> String {
        format!("{}.events.{conv}.{msg}", self.prefix)
    }

    /// The events of one conversation (`<prefix>.events.<conv>.>`), or of every conversation
    /// (`<prefix>.events.*.>`): what a UI subscribes to.
    pub fn events_filter(&self, conv: Option<&str>) -> String {
        format!("{}.events.{}.>", self.prefix, conv.unwrap_or("*"))
    }

    /// `<prefix>.dlq.<conv>.<msg>`: where a message's dead letters go.
    pub fn dlq(&self, conv: &str, msg: &str) -> String {
        format!("{}.dlq.{conv}.{msg}", self.prefix)
    }

    /// Where input that cannot be attributed to a message goes.
    pub fn dlq_unroutable(&self) -> String {
        format!("{}.dlq.unroutable", self.prefix)
    }

    /// Subjects of the input stream.
    pub fn input_stream_subjects(&self, partitions: u32) -> Vec<String> {
        let p = &self.prefix;
        if partitions > 1 {
            vec![format!("{p}.p.*.chunks.>"), format!("{p}.p.*.results.>")]
        } else {
            vec![format!("{p}.chunks.>"), format!("{p}.results.>")]
        }
    }

    /// The consumers partition `k` reads through, as (name suffix, filter subject): one
    /// consumer of the whole stream when unpartitioned, else one for its chunks and one for
    /// its results.
    pub fn consumer_filters(&self, partitions: u32, partition: u32) -> Vec<(String, String)> {
        let p = &self.prefix;
        if partitions > 1 {
            vec![
                (
                    format!("-p{partition}-chunks"),
                    format!("{p}.p.{partition}.chunks.>"),
                ),
                (
                    format!("-p{partition}-results"),
                    format!("{p}.p.{partition}.results.>"),
                ),
            ]
        } else {
            vec![(String::new(), String::new())]
        }
    }

    /// Subjects of the events stream.
    pub fn events_stream_subjects(&self) -> Vec<String> {
        vec![format!("{}.events.>", self.prefix)]
    }

    /// Subjects of the dead-letter stream.
    pub fn dlq_stream_subjects(&self) -> Vec<String> {
        vec![format!("{}.dlq.>", self.prefix)]
    }

    /// The partition the server's mapping `{{partition(N,<conv wildcard>)}}` puts a
    /// conversation on (deploy/nats-server.conf): FNV-1a (32 bit) of the conversation token,
    /// modulo `partitions`. Pinned against a real nats-server by the worker's
    /// `partition_of_agrees_with_the_servers_mapping` test.
    pub fn partition_of(partitions: u32, conversation: &str) -> u32 {
        if partitions <= 1 {
            return 0;
        }
        let mut hash: u32 = 0x811c_9dc5;
        for byte in conversation.bytes() {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
        hash % partitions
    }

    /// The prefix queries of partition `k` arrive under: `<prefix>.p.<k>` when partitioned
    /// (the server maps queries there), else the prefix itself.
    pub fn query_prefix(&self, partitions: u32, partition: u32) -> String {
        if partitions > 1 {
            format!("{}.p.{partition}", self.prefix)
        } else {
            self.prefix.clone()
        }
    }

    /// `<prefix>.query.message.<conv>.<msg>`: the stored state of one message.
    pub fn query_message(&self, conv: &str, msg: &str) -> String {
        format!("{}.query.message.{conv}.{msg}", self.prefix)
    }

    /// `<prefix>.query.history.<conv>`: a conversation's provider-valid history.
    pub fn query_history(&self, conv: &str) -> String {
        format!("{}.query.history.{conv}", self.prefix)
    }

    /// The endpoint subject of message queries: `<prefix>.query.message.*.*`.
    pub fn query_message_endpoint(&self) -> String {
        self.query_message("*", "*")
    }

    /// The endpoint subject of history queries: `<prefix>.query.history.*`.
    pub fn query_history_endpoint(&self) -> String {
        self.query_history("*")
    }

    /// `<prefix>.query.message.<conv>.<msg>` → (conv, msg).
    pub fn parse_query_message<'a>(
        &self,
        subject: &'a str,
    ) -> Result<(&'a str, &'a str), Unroutable> {
        let rest = self.after_prefix(subject, "query.message.")?;
        match rest.split('.').collect::<Vec<_>>().as_slice() {
            [conv, msg] if !conv.is_empty() && !msg.is_empty() => Ok((conv, msg)),
            _ => Err(Unroutable(format!(
                "expected <prefix>.query.message.<conversation>.<message>, got {subject:?}"
            ))),
        }
    }

    /// `<prefix>.query.history.<conv>` → conv.
    pub fn parse_query_history<'a>(&self, subject: &'a str) -> Result<&'a str, Unroutable> {
        let conv = self.after_prefix(subject, "query.history.")?;
        if conv.is_empty() || conv.contains('.') {
            return Err(Unroutable(format!(
                "expected <prefix>.query.history.<conversation>, got {subject:?}"
            )));
        }
        Ok(conv)
    }

    /// Parses `<prefix>.(chunks|results).<conv>.<msg>` or
    /// `<prefix>.p.<k>.(chunks|results).<conv>.<msg>`.
    pub fn parse_input<'a>(&self, subject: &'a str) -> Result<InputSubject<'a>, Unroutable> {
        let rest = self.after_prefix(subject, "")?;
        // At most five tokens are read (`p.<k>.<kind>.<conv>.<msg>`), into an array: every
        // input's subject is parsed, and a `Vec` of them was an allocation per input.
        let mut held = [""; 5];
        let mut count = 0;
        let mut split = rest.split('.');
        // (`zip` asks `held` first, so no token is taken from `split` past the array)
        for (slot, token) in held.iter_mut().zip(split.by_ref()) {
            *slot = token;
            count += 1;
        }
        count += split.count();
        let read = held.get(..count.min(held.len())).unwrap_or_default();
        let (partition, tokens) = match read {
            ["p", k, tail @ ..] => {
                let k = k
                    .parse::<u32>()
                    .map_err(|_| Unroutable(format!("partition token {k:?} is not a number")))?;
                (Some(k), tail)
            }
            all => (None, all),
        };
        // the tokens after the partition, with those past the array
        let after_partition = count - (read.len() - tokens.len());
        match tokens {
            [kind, conv, msg] if after_partition == 3 => {
                let kind = match *kind {
                    "chunks" => InputKind::Chunk,
                    "results" => InputKind::Result,
                    other => {
                        return Err(Unroutable(format!(
                            "unknown input kind {other:?} (expected chunks or results)"
                        )))
                    }
                };
                if conv.is_empty() || msg.is_empty() {
                    return Err(Unroutable(
                        "empty conversation or message token".to_string(),
                    ));
                }
                Ok(InputSubject {
                    kind,
                    conversation_id: conv,
                    message_id: msg,
                    partition,
                })
            }
            _ => Err(Unroutable(format!(
                "expected <kind>.<conversation>.<message> after the prefix, found \
                 {after_partition} token(s)"
            ))),
        }
    }

    /// What follows `<prefix>.<then>` in `subject`.
    fn after_prefix<'a>(&self, subject: &'a str, then: &str) -> Result<&'a str, Unroutable> {
        subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_prefix(then))
            .ok_or_else(|| {
                Unroutable(format!(
                    "subject does not start with `{}.{then}`",
                    self.prefix
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The parser as it was before it read tokens into an array (a `Vec` of every token).
    fn parse_input_with_a_vec<'a>(
        s: &Subjects,
        subject: &'a str,
    ) -> Result<InputSubject<'a>, Unroutable> {
        let rest = s.after_prefix(subject, "")?;
        let tokens: Vec<&'a str> = rest.split('.').collect();
        let (partition, tokens) = match tokens.as_slice() {
            ["p", k, tail @ ..] => {
                let k = k
                    .parse::<u32>()
                    .map_err(|_| Unroutable(format!("partition token {k:?} is not a number")))?;
                (Some(k), tail)
            }
            all => (None, all),
        };
        match tokens {
            [kind, conv, msg] => {
                let kind = match *kind {
                    "chunks" => InputKind::Chunk,
                    "results" => InputKind::Result,
                    other => {
                        return Err(Unroutable(format!(
                            "unknown input kind {other:?} (expected chunks or results)"
                        )))
                    }
                };
                if conv.is_empty() || msg.is_empty() {
                    return Err(Unroutable(
                        "empty conversation or message token".to_string(),
                    ));
                }
                Ok(InputSubject {
                    kind,
                    conversation_id: conv,
                    message_id: msg,
                    partition,
                })
            }
            other => Err(Unroutable(format!(
                "expected <kind>.<conversation>.<message> after the prefix, found {} token(s)",
                other.len()
            ))),
        }
    }

    /// Every subject of up to 7 tokens after the prefix, from tokens that make partitions,
    /// kinds, ids and empty tokens: the same ids, partition and error text as the `Vec`
    /// parser, also past the five tokens the array holds.
    #[test]
    fn input_subjects_parse_as_the_vec_parser_did_up_to_seven_tokens() {
        let s = Subjects::new("toolstream");
        let pool = ["p", "3", "x", "chunks", "results", "c", ""];
        let mut checked = 0;
        for len in 0..=7u32 {
            for n in 0..pool.len().pow(len) {
                let mut tokens = Vec::new();
                let mut rest = n;
                for _ in 0..len {
                    tokens.push(pool[rest % pool.len()]);
                    rest /= pool.len();
                }
                let subject = match tokens.is_empty() {
                    true => "toolstream".to_string(),
                    false => format!("toolstream.{}", tokens.join(".")),
                };
                assert_eq!(
                    s.parse_input(&subject),
                    parse_input_with_a_vec(&s, &subject),
                    "{subject}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, (0..=7).map(|l| 7usize.pow(l)).sum::<usize>());
    }

    #[test]
    fn plain_and_partitioned_subjects_parse_to_the_same_ids() {
        let s = Subjects::new("toolstream");
        let a = s.parse_input("toolstream.chunks.c1.m1").unwrap();
        assert_eq!(
            (a.kind, a.conversation_id, a.message_id, a.partition),
            (InputKind::Chunk, "c1", "m1", None)
        );
        let b = s.parse_input("toolstream.p.3.results.c1.m1").unwrap();
        assert_eq!(
            (b.kind, b.conversation_id, b.message_id, b.partition),
            (InputKind::Result, "c1", "m1", Some(3))
        );
    }

    #[test]
    fn a_dotted_prefix_is_stripped_whole() {
        let s = Subjects::new("acme.ts");
        let a = s.parse_input("acme.ts.chunks.c.m").unwrap();
        assert_eq!((a.conversation_id, a.message_id), ("c", "m"));
        assert!(s.parse_input("acme.tsx.chunks.c.m").is_err());
    }

    #[test]
    fn wrong_token_counts_are_unroutable() {
        let s = Subjects::new("toolstream");
        for bad in [
            "toolstream.chunks.c1",
            "toolstream.chunks.c1.m1.extra",
            "toolstream.p.x.chunks.c.m",
            "toolstream.other.c.m",
            "elsewhere.chunks.c.m",
            "toolstream.chunks..m",
        ] {
            assert!(s.parse_input(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn builders_name_every_subject_of_the_contract() {
        let s = Subjects::new("toolstream");
        assert_eq!(s.input(InputKind::Chunk, "c", "m"), "toolstream.chunks.c.m");
        assert_eq!(
            s.input(InputKind::Result, "c", "m"),
            "toolstream.results.c.m"
        );
        assert_eq!(s.events("c", "m"), "toolstream.events.c.m");
        assert_eq!(s.events_filter(None), "toolstream.events.*.>");
        assert_eq!(s.events_filter(Some("c1")), "toolstream.events.c1.>");
        assert_eq!(s.dlq("c", "m"), "toolstream.dlq.c.m");
        assert_eq!(s.dlq_unroutable(), "toolstream.dlq.unroutable");
        assert_eq!(s.events_stream_subjects(), vec!["toolstream.events.>"]);
        assert_eq!(s.dlq_stream_subjects(), vec!["toolstream.dlq.>"]);
        assert_eq!(s.query_message_endpoint(), "toolstream.query.message.*.*");
        assert_eq!(s.query_history_endpoint(), "toolstream.query.history.*");
        assert_eq!(s.query_prefix(1, 0), "toolstream");
        assert_eq!(s.query_prefix(4, 3), "toolstream.p.3");
    }

    #[test]
    fn query_subjects_parse_back() {
        let s = Subjects::new("toolstream");
        assert_eq!(
            s.parse_query_message("toolstream.query.message.c1.m1"),
            Ok(("c1", "m1"))
        );
        let p = Subjects::new("toolstream.p.2");
        assert_eq!(
            p.parse_query_message("toolstream.p.2.query.message.c.m"),
            Ok(("c", "m"))
        );
        assert_eq!(
            s.parse_query_history("toolstream.query.history.c9"),
            Ok("c9")
        );
        for bad in [
            "toolstream.query.message.c1",
            "toolstream.query.message.c1.m1.x",
            "toolstream.query.history.c1",
        ] {
            assert!(s.parse_query_message(bad).is_err(), "{bad}");
        }
        for bad in [
            "toolstream.query.history.",
            "toolstream.query.history.a.b",
            "toolstream.query.message.c1",
        ] {
            assert!(s.parse_query_history(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn partitioned_consumers_filter_one_partition_each() {
        let s = Subjects::new("toolstream");
        assert_eq!(
            s.consumer_filters(1, 0),
            vec![(String::new(), String::new())]
        );
        let filters: Vec<String> = s.consumer_filters(4, 2).into_iter().map(|f| f.1).collect();
        assert_eq!(
            filters,
            vec!["toolstream.p.2.chunks.>", "toolstream.p.2.results.>"]
        );
        assert_eq!(
            s.input_stream_subjects(4),
            vec!["toolstream.p.*.chunks.>", "toolstream.p.*.results.>"]
        );
        assert_eq!(
            s.input_stream_subjects(1),
            vec!["toolstream.chunks.>", "toolstream.results.>"]
        );
    }

    #[test]
    fn the_partitioned_input_stream_does_not_swallow_partitioned_queries() {
        // deploy/nats-server.conf maps queries to <prefix>.p.<k>.query...; a stream holding
        // that subject would answer requests with PubAcks.
        let s = Subjects::new("toolstream");
        for subject in s.input_stream_subjects(4) {
            let pattern: Vec<&str> = subject.split('.').collect();
            assert_ne!(pattern.get(3), Some(&">"), "{subject} covers p.<k>.query");
            assert!(pattern.get(3) != Some(&"*"), "{subject} covers p.<k>.query");
        }
    }

    proptest! {
        #[test]
        fn built_input_subjects_parse_back(
            prefix in "[a-z]{1,5}(\\.[a-z]{1,5}){0,2}",
            conv in "[^. \t\r\n\u{c}]{1,10}",
            msg in "[^. \t\r\n\u{c}]{1,10}",
            chunk in any::<bool>(),
        ) {
            let s = Subjects::new(&prefix);
            let kind = if chunk { InputKind::Chunk } else { InputKind::Result };
            let subject = s.input(kind, &conv, &msg);
            let parsed = s.parse_input(&subject).unwrap();
            prop_assert_eq!(
                (parsed.kind, parsed.conversation_id, parsed.message_id, parsed.partition),
                (kind, conv.as_str(), msg.as_str(), None)
            );
            let query = s.query_message(&conv, &msg);
            prop_assert_eq!(
                s.parse_query_message(&query).unwrap(),
                (conv.as_str(), msg.as_str())
            );
            let history = s.query_history(&conv);
            prop_assert_eq!(s.parse_query_history(&history).unwrap(), conv.as_str());
        }
    }
}
