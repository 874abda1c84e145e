//! Subject, headers and body of one delivered message into an assembler input ([`OwnedInput`]),
//! or the reason it must go straight to the dead-letter subject ([`Rejected`]). Pure: no I/O.

use assembler::{Control, Input, InputKind, Origin, Seq};
use async_nats::HeaderMap;
use bytes::Bytes;
use chunk_model::wire::Subjects;
use chunk_model::wire::{headers, DeadLetterCode};
use chunk_model::Provider;
use std::ops::Range;

/// One input message, owned, ready to be lent to [`Store::apply`] as an [`Input`].
///
/// The conversation and message ids are ranges of the subject it keeps (in its origin, read
/// only), so an input costs one copy of its subject, not three, and lending it copies
/// nothing.
#[derive(Debug, Clone)]
pub struct OwnedInput {
    /// Chunk or result.
    pub kind: InputKind,
    /// Where the `<conv>` token lies in `origin.subject`.
    conversation: Range<usize>,
    /// Where the `<msg>` token lies in `origin.subject`.
    message: Range<usize>,
    /// Parsed `Toolstream-Provider`.
    pub provider: Option<Provider>,
    /// Producer or transport sequence.
    pub seq: Seq,
    /// Parsed `Toolstream-Control`.
    pub control: Option<Control>,
    /// The raw body.
    pub body: Bytes,
    /// Subject and stream sequence (private: the id ranges are ranges of this subject).
    origin: Origin,
    /// When JetStream stored it (ms since the epoch): the input's time for the store's timers.
    pub published_ms: u64,
    /// Why its headers cannot be read (`unknown_provider`, `bad_seq`, `bad_control`), if
    /// so: the store dead-letters it ([`Store::reject`]) and ends its stream, since a chunk
    /// that is not assembled leaves a hole in its call.
    pub rejected: Option<String>,
}

impl OwnedInput {
    /// The `<conv>` token of its subject.
    pub fn conversation_id(&self) -> &str {
        self.origin
            .subject
            .get(self.conversation.clone())
            .unwrap_or_default()
    }

    /// The `<msg>` token of its subject.
    pub fn message_id(&self) -> &str {
        self.origin
            .subject
            .get(self.message.clone())
            .unwrap_or_default()
    }

    /// Its subject and stream sequence.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Borrowed view for the store.
    pub fn as_input(&self) -> Input<'_> {
        Input {
            kind: self.kind,
            conversation_id: self.conversation_id(),
            message_id: self.message_id(),
            provider: self.provider,
            seq: self.seq,
            control: self.control.clone(),
            body: &self.body,
            origin: Some(&self.origin),
        }
    }
}

/// Where the last two tokens of `subject`, `conversation` and `message` (an input subject
/// ends `.<conv>.<msg>`), lie in it.
fn id_ranges(subject: &str, conversation: &str, message: &str) -> (Range<usize>, Range<usize>) {
    let message_start = subject.len().saturating_sub(message.len());
    let conversation_end = message_start.saturating_sub(1);
    let conversation_start = conversation_end.saturating_sub(conversation.len());
    (
        conversation_start..conversation_end,
        message_start..subject.len(),
    )
}

/// A message that must go straight to the dead-letter subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The DLQ subject (`<prefix>.dlq.<conv>.<msg>` or `<prefix>.dlq.unroutable`).
    pub dlq_subject: String,
    /// Why.
    pub reason: String,
}

/// Looks a header up by name, ignoring ASCII case (producers are not always careful): the
/// header named exactly `name` if there is one, else one named like it in another case. One
/// pass over the message's few headers, nothing allocated (`HeaderMap::get` builds and
/// validates a header name and hashes it, and the search by case made a `String` of every
/// name: together ~5% of the worker's CPU under a backlog).
fn header<'h>(headers: Option<&'h HeaderMap>, name: &str) -> Option<&'h str> {
    let mut other_case = None;
    for (k, values) in headers?.iter() {
        let k: &str = k.as_ref();
        if k == name {
            return values.first().map(|v| v.as_str());
        }
        if other_case.is_none() && k.eq_ignore_ascii_case(name) {
            other_case = values.first().map(|v| v.as_str());
        }
    }
    other_case
}

/// Turns subject, headers and body into an input (marked `rejected` when its headers cannot
/// be read), or, when the subject names no conversation and message, says why it must go to
/// the unroutable dead-letter subject.
pub fn parse_message(
    subjects: &Subjects,
    subject: &str,
    headers: Option<&HeaderMap>,
    body: &Bytes,
    stream_seq: u64,
    published_ms: u64,
) -> Result<OwnedInput, Rejected> {
    let parsed = subjects.parse_input(subject).map_err(|e| Rejected {
        dlq_subject: subjects.dlq_unroutable(),
        reason: DeadLetterCode::UnroutableSubject.with(e),
    })?;
    let mut rejected = None;
    let provider = match header(headers, headers::PROVIDER).map(str::trim) {
        None | Some("") => None,
        Some(name) => {
            let known = Provider::parse(name);
            if known.is_none() {
                rejected = Some(DeadLetterCode::UnknownProvider.with(format_args!("{name:?}")));
            }
            known
        }
    };
    let seq = match header(headers, headers::SEQ).map(str::trim) {
        None | Some("") => Seq::Transport(stream_seq),
        Some(text) => match text.parse::<u64>() {
            Ok(n) => Seq::Producer(n),
            Err(_) => {
                rejected.get_or_insert_with(|| {
                    DeadLetterCode::BadSeq.with(format_args!(
                        "{} {text:?} is not a non-negative integer",
                        headers::SEQ
                    ))
                });
                Seq::Transport(stream_seq)
            }
        },
    };
    let control = match header(headers, headers::CONTROL).map(str::trim) {
        None | Some("") => None,
        Some(c) if c.eq_ignore_ascii_case(headers::CONTROL_END) => Some(Control::End),
        Some(c) if c.eq_ignore_ascii_case(headers::CONTROL_ERROR) => {
            let reason = String::from_utf8_lossy(body).trim().to_string();
            Some(Control::Error(if reason.is_empty() {
                "producer_error".to_string()
            } else {
                reason
            }))
        }
        Some(other) => {
            rejected.get_or_insert_with(|| {
                DeadLetterCode::BadControl.with(format_args!(
                    "{} {other:?} (expected {} or {})",
                    headers::CONTROL,
                    headers::CONTROL_END,
                    headers::CONTROL_ERROR
                ))
            });
            None
        }
    };
    let (conversation, message) = id_ranges(subject, parsed.conversation_id, parsed.message_id);
    Ok(OwnedInput {
        kind: parsed.kind,
        conversation,
        message,
        provider,
        seq,
        control,
        body: body.clone(),
        origin: Origin {
            subject: subject.to_string(),
            stream_seq,
        },
        published_ms,
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::testing::subjects;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    #[test]
    fn headers_become_provider_seq_and_control() {
        let h = headers(&[("Toolstream-Provider", "groq"), ("Toolstream-Seq", "7")]);
        let body = Bytes::from_static(b"{}");
        let i =
            parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 42, 0).unwrap();
        assert_eq!(i.provider, Some(Provider::OpenaiChat));
        assert_eq!(i.seq, Seq::Producer(7));
        assert_eq!(i.control, None);
        assert_eq!(i.origin().stream_seq, 42);
        assert_eq!((i.conversation_id(), i.message_id()), ("c", "m"));
        assert_eq!(i.origin().subject, "toolstream.chunks.c.m");
    }

    #[test]
    fn the_ids_of_a_partitioned_subject_are_its_last_two_tokens_and_lend_as_they_read() {
        let body = Bytes::from_static(b"{}");
        let subject = "toolstream.p.3.results.conv-7.msg.x";
        assert!(parse_message(&subjects(), subject, None, &body, 5, 0).is_err());
        let subject = "toolstream.p.3.results.conv-7.msg-9";
        let i = parse_message(&subjects(), subject, None, &body, 5, 0).unwrap();
        assert_eq!((i.conversation_id(), i.message_id()), ("conv-7", "msg-9"));
        let lent = i.as_input();
        assert_eq!((lent.conversation_id, lent.message_id), ("conv-7", "msg-9"));
        assert_eq!(lent.origin, Some(i.origin()));
        assert_eq!(
            (i.origin().subject.as_str(), i.origin().stream_seq),
            (subject, 5)
        );
        // ids of every length, plain and partitioned, multi-byte ones too: as the subject
        // parser reads them
        for subject in [
            "toolstream.chunks.c.m",
            "toolstream.chunks.a-long-conversation-id.m",
            "toolstream.results.c.a-long-message-id",
            "toolstream.p.12.chunks.conversación.メッセージ",
            "toolstream.p.0.results.ü.x",
        ] {
            let parsed = subjects().parse_input(subject).unwrap();
            let i = parse_message(&subjects(), subject, None, &body, 1, 0).unwrap();
            assert_eq!(
                (i.conversation_id(), i.message_id()),
                (parsed.conversation_id, parsed.message_id),
                "{subject}"
            );
        }
    }

    #[test]
    fn without_a_producer_seq_the_stream_sequence_orders() {
        let body = Bytes::from_static(b"{}");
        let i = parse_message(&subjects(), "toolstream.results.c.m", None, &body, 9, 0).unwrap();
        assert_eq!(i.seq, Seq::Transport(9));
        assert_eq!(i.kind, InputKind::Result);
    }

    #[test]
    fn control_error_carries_the_body_as_reason() {
        let h = headers(&[("toolstream-control", "error")]);
        let body = Bytes::from_static(b"upstream reset\n");
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        assert_eq!(i.control, Some(Control::Error("upstream reset".into())));
    }

    #[test]
    fn a_subject_with_a_missing_token_goes_to_the_unroutable_dlq() {
        let body = Bytes::new();
        let r =
            parse_message(&subjects(), "toolstream.chunks.only", None, &body, 1, 0).unwrap_err();
        assert_eq!(r.dlq_subject, "toolstream.dlq.unroutable");
        assert!(r.reason.starts_with("unroutable_subject"), "{}", r.reason);
    }

    #[test]
    fn a_header_the_worker_cannot_read_marks_the_input_rejected_for_the_store() {
        let h = headers(&[("Toolstream-Seq", "three")]);
        let body = Bytes::new();
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        let reason = i.rejected.expect("rejected");
        assert!(reason.starts_with("bad_seq"), "{reason}");
        assert_eq!(i.seq, Seq::Transport(1));
        let h = headers(&[("Toolstream-Provider", "nope")]);
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        let reason = i.rejected.expect("rejected");
        assert!(reason.starts_with("unknown_provider"), "{reason}");
        let h = headers(&[("Toolstream-Control", "stop")]);
        let i = parse_message(&subjects(), "toolstream.chunks.c.m", Some(&h), &body, 1, 0).unwrap();
        assert!(i.rejected.expect("rejected").starts_with("bad_control"));
    }
}
