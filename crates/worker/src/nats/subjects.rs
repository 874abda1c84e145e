//! Every subject the worker uses, built from the prefix, and the parser of input subjects.
//!
//! Producers publish `<prefix>.chunks.<conv>.<msg>` and `<prefix>.results.<conv>.<msg>`. With
//! `partitions > 1` the server maps those (deploy/nats-server.conf) to
//! `<prefix>.p.<k>.chunks.<conv>.<msg>` / `<prefix>.p.<k>.results.<conv>.<msg>`, where
//! `k = partition(N, conv)`; the input stream then holds `<prefix>.p.*.chunks.>` and
//! `<prefix>.p.*.results.>` — exactly the input, nothing else of the `p.<k>` namespace (queries
//! are mapped to `<prefix>.p.<k>.query.…` and must not land in a stream).
//!
//! nats-server 2.9 gives a consumer one filter subject, inside the stream's subjects, so
//! partition `k` is consumed through two durable consumers, `…p.<k>.chunks.>` and
//! `…p.<k>.results.>`, merged by the consume loop. (Order matters only within one
//! (kind, conversation, message) stream, which one consumer always carries.)

use assembler::InputKind;

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

/// Why an input subject cannot be attributed to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unroutable(pub String);

impl std::fmt::Display for Unroutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Subjects {
    /// Subjects under `prefix` (already validated: non-empty tokens, no wildcards).
    pub fn new(prefix: &str) -> Subjects {
        Subjects {
            prefix: prefix.to_string(),
        }
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

    /// Where input that cannot be attributed to a message goes.
    pub fn dlq_unroutable(&self) -> String {
        format!("{}.dlq.unroutable", self.prefix)
    }

    /// Parses `<prefix>.(chunks|results).<conv>.<msg>` or
    /// `<prefix>.p.<k>.(chunks|results).<conv>.<msg>`.
    pub fn parse_input<'a>(&self, subject: &'a str) -> Result<InputSubject<'a>, Unroutable> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .ok_or_else(|| Unroutable(format!("subject does not start with `{}.`", self.prefix)))?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert!(s.parse_input(bad).is_err(), "{bad}");
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
}
