//! What a JetStream message's reply subject says of its delivery, read once per message when
//! it is fetched ([`Delivery::of`]): its stream sequence, when JetStream stored it, and whether
//! it was delivered before.
//!
//! The reply subject is `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
//! seq>.<timestamp>.<pending>`, with `<domain>.<account hash>.` before `<stream>` and
//! optional tokens after `<pending>` on newer servers (NATS ADR-15). async-nats reads it with
//! `Message::info`, which splits it with `str::split` and turns the timestamp into a date the
//! loop turned straight back into milliseconds: 1,590 instructions per call in a worker
//! drain (callgrind). [`read_reply`] accepts exactly what `Message::info` accepts, and reads
//! the same values (pinned by a test against `Message::info`), in one pass over the bytes and
//! without the date: 1,115.

use super::watermark::{nanos_to_us, now_us};
use async_nats::jetstream;

/// What a message's reply subject says of its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Delivery {
    /// Its stream sequence; 0 when the reply subject cannot be read (JetStream numbers a
    /// stream's messages from 1, so 0 means exactly that: unread).
    pub(super) stream_seq: u64,
    /// When JetStream stored it, µs since the epoch (0 before the epoch; now when the reply
    /// subject cannot be read).
    pub(super) published_us: u64,
    /// Delivered before by this consumer (a crash, a lost ack, a nak).
    pub(super) delivered_before: bool,
}

impl Delivery {
    /// When JetStream stored it, ms since the epoch: the store's clock for the input.
    pub(super) fn published_ms(&self) -> u64 {
        self.published_us / 1000
    }

    /// Reads `msg`'s reply subject; a message whose reply subject cannot be read counts as
    /// a first delivery of sequence 0, stored now.
    pub(super) fn of(msg: &jetstream::Message) -> Delivery {
        msg.reply
            .as_ref()
            .and_then(|reply| read_reply(reply.as_str()))
            .unwrap_or_else(|| Delivery {
                stream_seq: 0,
                published_us: now_us(),
                delivered_before: false,
            })
    }
}

/// The first and last nanosecond since the epoch that `Message::info` accepts as a timestamp
/// (the `time` crate's dates: years -9999 to 9999).
const NANOS_RANGE: std::ops::RangeInclusive<i128> =
    -377_705_116_800_000_000_000..=253_402_300_799_999_999_999;

/// Reads a `$JS.ACK.` reply subject (see the module docs); `None` where `Message::info`
/// fails: another prefix, a token count other than 7 or at least 9 after it, a number token
/// that does not parse as its type, a timestamp out of range.
fn read_reply(reply: &str) -> Option<Delivery> {
    let rest = reply.strip_prefix("$JS.ACK.")?;
    // The dots that end the first nine tokens, in one pass over the bytes (a version with
    // `str::split` cost as much as `Message::info`). Nine found: ten tokens or more, where
    // `Message::info` stops counting too.
    let mut dots = [0usize; 9];
    let mut found = 0;
    for (at, byte) in rest.bytes().enumerate() {
        if byte == b'.' {
            if let Some(slot) = dots.get_mut(found) {
                *slot = at;
                found += 1;
            } else {
                break;
            }
        }
    }
    let token = |k: usize| -> Option<&str> {
        let start = match k {
            0 => 0,
            _ => dots.get(k - 1)? + 1,
        };
        let end = match k < found {
            true => *dots.get(k)?,
            false => rest.len(),
        };
        rest.get(start..end)
    };
    // the five numbers: after stream and consumer, and (9 tokens or more) domain and
    // account hash
    let first = match found + 1 {
        7 => 2,
        9.. => 4,
        _ => return None,
    };
    let delivered: i64 = token(first)?.parse().ok()?;
    let stream_seq: u64 = token(first + 1)?.parse().ok()?;
    // (parsed only as `Message::info` parses them: a reply it refuses is refused here too)
    let _consumer_seq: u64 = token(first + 2)?.parse().ok()?;
    let nanos = token(first + 3)?;
    let nanos: i128 = match nanos.parse::<i64>() {
        Ok(n) => i128::from(n),
        Err(_) => nanos.parse().ok()?,
    };
    let _pending: u64 = token(first + 4)?.parse().ok()?;
    if !NANOS_RANGE.contains(&nanos) {
        return None;
    }
    Some(Delivery {
        stream_seq,
        published_us: nanos_to_us(nanos),
        delivered_before: delivered > 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::testing::{jetstream_message, offline_context};
    use crate::consume::watermark::now_ms;

    /// What the loop read with `Message::info` before [`read_reply`].
    fn by_info(msg: &jetstream::Message) -> Option<Delivery> {
        msg.info().ok().map(|info| Delivery {
            stream_seq: info.stream_sequence,
            published_us: nanos_to_us(info.published.unix_timestamp_nanos()),
            delivered_before: info.delivered > 1,
        })
    }

    #[tokio::test]
    async fn reply_subjects_of_both_formats_read_as_message_info_reads_them() {
        let context = offline_context().await;
        let cases = [
            // as nats-server 2.9.10 and 2.15.1 send them
            "$JS.ACK.toolstream_input.toolstream-worker.1.42.41.1764264000123456789.7",
            "$JS.ACK.toolstream_input.toolstream-worker.3.42.45.1764264000123456789.0",
            "$JS.ACK._.ACCHASH.toolstream_input.toolstream-worker.1.42.41.1764264000123456789.7.tok",
            "$JS.ACK.hub.ACCHASH.s.c.2.9.9.1764264000123456789.0",
            "$JS.ACK.hub.ACCHASH.s.c.2.9.9.1764264000123456789.0.tok.more.and.more",
        ];
        for reply in cases {
            let read = read_reply(reply).expect(reply);
            assert_eq!(
                Some(read),
                by_info(&jetstream_message(&context, reply)),
                "{reply}"
            );
            assert_eq!(read.published_ms(), 1_764_264_000_123, "{reply}");
            assert_eq!(read.published_us, 1_764_264_000_123_456, "{reply}");
        }
        assert_eq!(read_reply(cases[0]).map(|d| d.stream_seq), Some(42));
        assert_eq!(read_reply(cases[1]).map(|d| d.delivered_before), Some(true));
        assert_eq!(
            read_reply(cases[0]).map(|d| d.delivered_before),
            Some(false)
        );
    }

    /// Token counts from 0 to 12 after the prefix (and other prefixes), every number token
    /// drawn from values each type accepts or refuses (signs, overflow, empty, the
    /// timestamp's range and one past it): `read_reply` is `Some` exactly where
    /// `Message::info` is `Ok`, with the same values.
    #[tokio::test]
    async fn any_reply_subject_reads_as_message_info_reads_it() {
        let context = offline_context().await;
        let min = NANOS_RANGE.start().to_string();
        let max = NANOS_RANGE.end().to_string();
        let below = (NANOS_RANGE.start() - 1).to_string();
        let above = (NANOS_RANGE.end() + 1).to_string();
        let pool: Vec<&str> = vec![
            "0",
            "1",
            "2",
            "+3",
            "-1",
            "",
            "_",
            "x",
            "18446744073709551615",
            "18446744073709551616",
            "9223372036854775807",
            "9223372036854775808",
            "1764264000123456789",
            "-1764264000123456789",
            &min,
            &max,
            &below,
            &above,
        ];
        let prefixes = ["$JS.ACK.", "$JS.ACK", "$JS.NAK.", ""];
        // a fixed xorshift sequence: the same cases on every run
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % n as u64).unwrap_or(0)
        };
        let (mut read, mut refused) = (0, 0);
        for case in 0..60_000 {
            let count = next(13);
            let prefix = prefixes[if case % 10 == 0 {
                next(prefixes.len())
            } else {
                0
            }];
            let tokens: Vec<&str> = (0..count).map(|_| pool[next(pool.len())]).collect();
            let reply = format!("{prefix}{}", tokens.join("."));
            let ours = read_reply(&reply);
            assert_eq!(
                ours,
                by_info(&jetstream_message(&context, &reply)),
                "{reply}"
            );
            match ours {
                Some(_) => read += 1,
                None => refused += 1,
            }
        }
        // both outcomes were exercised, many times
        assert!(
            read > 200 && refused > 1_000,
            "{read} read, {refused} refused"
        );
        for nanos in [&min, &max, &below, &above] {
            let reply = format!("$JS.ACK.s.c.1.5.5.{nanos}.0");
            assert_eq!(
                read_reply(&reply),
                by_info(&jetstream_message(&context, &reply)),
                "{reply}"
            );
        }
    }

    #[tokio::test]
    async fn a_message_whose_reply_cannot_be_read_is_a_first_delivery_of_sequence_0_now() {
        let context = offline_context().await;
        let before = now_ms();
        let d = Delivery::of(&jetstream_message(&context, "_INBOX.abc"));
        assert_eq!((d.stream_seq, d.delivered_before), (0, false));
        assert!(d.published_ms() >= before && d.published_ms() <= now_ms());
    }
}
