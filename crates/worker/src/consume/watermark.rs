//! The settled watermark: the publish time (JetStream's message timestamp, ms since the epoch)
//! before which every input this worker consumes is settled — applied and acked, or
//! dead-lettered. The store's timers (sequence gaps, idle streams, orphan results, retention)
//! run on this clock instead of the wall clock, and every input is timed by when it was
//! published, not when this worker got to it.
//!
//! Why: a crash leaves the chunks the dead process had fetched but not acked pending on the
//! server until `ack_wait` runs out, while later chunks of the same stream arrive at once and
//! are parked behind the hole. On the wall clock `gap_timeout` could fire first and end the
//! stream `gap` although its missing chunk was only waiting to be redelivered; a backlog (a
//! burst, a restart after an outage) could likewise expire streams whose chunks were queued.
//! On this clock a stream's timer can only run out once everything published before its
//! deadline has been read, so no crash, backlog or timer setting can end a stream whose input
//! exists.
//!
//! How, per consumer and per round (every `tick_interval`, in its own task so a slow server
//! never stalls the consume loop): consumer info gives the ack floor (every delivery up to it
//! is settled), the pending count and the ack-pending count.
//! - nothing pending and nothing unacknowledged → caught up: settled up to the wall-clock time
//!   the question was asked, less [`COMMIT_MARGIN_MS`] (what is published later is later; on
//!   a clustered stream a message is stamped before its replicas commit it and only then
//!   counted as pending, and two clocks are never exactly equal: the margin covers both).
//! - otherwise → settled up to the timestamp of the first message on the consumer's filter
//!   after the ack floor (the oldest input that may still be outstanding; timestamps grow
//!   with stream sequence).
//!
//! The worker's watermark is the minimum over its consumers; it never moves back (what was
//! settled stays settled) and is unknown (0: no timer fires) until the first round succeeds.
//! When the server cannot be asked it simply does not advance. Assumption, stated in the
//! README: the worker's clock and the server's agree to within the timers' precision.

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock microseconds since the Unix epoch (an input's age, `Delivery::published_us`).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Wall-clock milliseconds since the Unix epoch (the assembler's clock; it survives restarts).
pub fn now_ms() -> u64 {
    now_us() / 1000
}

/// Taken off a caught-up reading: the longest a message may be stamped before the consumer
/// counts it (a clustered stream's commit), plus clock skew between worker and server.
pub const COMMIT_MARGIN_MS: u64 = 2_000;

/// How far one consumer has settled, as read from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Nothing pending or unacknowledged when asked at this wall-clock time (ms).
    CaughtUp {
        /// When the question was sent.
        asked_at_ms: u64,
    },
    /// Settled up to (not including) the message published at this time (ms): the oldest
    /// message after the ack floor.
    Before {
        /// Publish time of the oldest message that may be outstanding.
        oldest_outstanding_ms: u64,
    },
}

impl Settled {
    /// The watermark this reading allows.
    #[must_use]
    pub fn bound_ms(self) -> u64 {
        match self {
            Settled::CaughtUp { asked_at_ms } => asked_at_ms.saturating_sub(COMMIT_MARGIN_MS),
            Settled::Before {
                oldest_outstanding_ms,
            } => oldest_outstanding_ms,
        }
    }
}

/// The combined watermark of every consumer of this worker, shared between the task that
/// measures it and the consume loop that runs timers on it.
#[derive(Debug, Default)]
pub struct Watermark {
    ms: AtomicU64,
}

impl Watermark {
    /// The current watermark (ms since the epoch; 0 while unknown).
    pub fn get(&self) -> u64 {
        self.ms.load(Ordering::Acquire)
    }

    /// Advances to the minimum of one round's readings (never back). A round with a missing
    /// reading (`None`) changes nothing: an unknown consumer could hold anything.
    pub fn advance(&self, readings: &[Option<Settled>]) -> u64 {
        let round = readings
            .iter()
            .try_fold(u64::MAX, |low, r| r.map(|s| low.min(s.bound_ms())));
        match round {
            Some(ms) if ms != u64::MAX => self.ms.fetch_max(ms, Ordering::AcqRel).max(ms),
            _ => self.get(),
        }
    }
}

/// Reads one consumer's progress; `None` when the server could not be asked.
pub async fn read<I>(consumer: &PullConsumer, stream: &Stream<I>) -> Option<Settled> {
    let asked_at_ms = now_ms();
    let info = match consumer.get_info().await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "consumer info for the settled watermark");
            return None;
        }
    };
    if info.num_pending == 0 && info.num_ack_pending == 0 {
        return Some(Settled::CaughtUp { asked_at_ms });
    }
    let filter = if info.config.filter_subject.is_empty() {
        ">".to_string()
    } else {
        info.config.filter_subject.clone()
    };
    let after_floor = info.ack_floor.stream_sequence.saturating_add(1);
    match stream
        .get_first_raw_message_by_subject(&filter, after_floor)
        .await
    {
        Ok(message) => Some(Settled::Before {
            oldest_outstanding_ms: nanos_to_ms(message.time.unix_timestamp_nanos()),
        }),
        // Nothing after the ack floor exists any more (settled, or removed from the stream
        // since the info): nothing published before the question is outstanding.
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {
            Some(Settled::CaughtUp { asked_at_ms })
        }
        Err(e) => {
            tracing::debug!(error = %e, "oldest outstanding message for the settled watermark");
            None
        }
    }
}

/// A JetStream timestamp (ns since the epoch) in ms (0 before the epoch).
pub fn nanos_to_ms(nanos: i128) -> u64 {
    nanos_to_us(nanos) / 1000
}

/// A JetStream timestamp (ns since the epoch) in µs; 0 before the epoch.
pub fn nanos_to_us(nanos: i128) -> u64 {
    u64::try_from(nanos / 1000).unwrap_or(0)
}

/// Where one round asks how far one consumer has settled: the server ([`ConsumerOnServer`]),
/// or a fake in tests. `None` when it cannot tell.
pub trait SettledSource: Send + Sync {
    /// One reading.
    fn settled(&self) -> impl Future<Output = Option<Settled>> + Send;
}

/// A consumer of the input stream, read through consumer info and the stream ([`read`]).
pub struct ConsumerOnServer {
    consumer: PullConsumer,
    stream: Stream<()>,
}

impl SettledSource for ConsumerOnServer {
    fn settled(&self) -> impl Future<Output = Option<Settled>> + Send {
        read(&self.consumer, &self.stream)
    }
}

/// Measures the watermark of `consumers` every `interval` until `shutdown`.
pub async fn run(
    watermark: Arc<Watermark>,
    consumers: Vec<PullConsumer>,
    stream: Stream<()>,
    interval: Duration,
    shutdown: crate::run::shutdown::Shutdown,
) {
    let sources = consumers
        .into_iter()
        .map(|consumer| ConsumerOnServer {
            consumer,
            stream: stream.clone(),
        })
        .collect();
    run_with(watermark, sources, interval, shutdown).await;
}

/// The longest one reading may take: a server that does not answer must not hold the loop
/// past the next round.
pub fn read_timeout(interval: Duration) -> Duration {
    interval.max(Duration::from_secs(2))
}

/// [`run`] over any [`SettledSource`]s: one round at once, then one every `interval` (a late
/// round delays the next, none are bunched up), each reading bounded by [`read_timeout`].
pub async fn run_with<S: SettledSource>(
    watermark: Arc<Watermark>,
    sources: Vec<S>,
    interval: Duration,
    mut shutdown: crate::run::shutdown::Shutdown,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tick.tick() => {}
        }
        let mut readings = Vec::with_capacity(sources.len());
        for source in &sources {
            // a server that does not answer must not hold the loop past the next round
            let reading = tokio::time::timeout(read_timeout(interval), source.settled())
                .await
                .ok()
                .flatten();
            readings.push(reading);
        }
        watermark.advance(&readings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_oldest_consumer_and_never_moves_back() {
        let w = Watermark::default();
        assert_eq!(w.get(), 0, "unknown until the first round");
        let caught_up = Some(Settled::CaughtUp { asked_at_ms: 5_000 });
        let behind = Some(Settled::Before {
            oldest_outstanding_ms: 1_200,
        });
        assert_eq!(w.advance(&[caught_up, behind]), 1_200);
        assert_eq!(
            w.advance(&[caught_up]),
            5_000 - COMMIT_MARGIN_MS,
            "a message stamped just before the question may not be counted yet"
        );
        assert_eq!(
            w.advance(&[Some(Settled::Before {
                oldest_outstanding_ms: 3_000
            })]),
            5_000 - COMMIT_MARGIN_MS,
            "what was settled stays settled"
        );
    }

    #[test]
    fn a_consumer_that_cannot_be_read_holds_the_watermark() {
        let w = Watermark::default();
        assert_eq!(
            w.advance(&[Some(Settled::CaughtUp { asked_at_ms: 9_000 }), None]),
            0
        );
        assert_eq!(w.advance(&[]), 0, "no consumers, no reading");
    }

    /// A consumer whose `n`-th reading (from 0) is `answer(n)`; `None` from `answer` means it
    /// never answers (a server that does not respond).
    struct Fake {
        answer: fn(usize) -> Option<Option<Settled>>,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl Fake {
        fn new(answer: fn(usize) -> Option<Option<Settled>>) -> Arc<Fake> {
            Arc::new(Fake {
                answer,
                asked: Default::default(),
            })
        }

        fn asked(&self) -> usize {
            self.asked.load(Ordering::SeqCst)
        }
    }

    impl SettledSource for Arc<Fake> {
        fn settled(&self) -> impl Future<Output = Option<Settled>> + Send {
            let n = self.asked.fetch_add(1, Ordering::SeqCst);
            let answer = (self.answer)(n);
            async move {
                match answer {
                    Some(reading) => reading,
                    None => std::future::pending().await,
                }
            }
        }
    }

    fn caught_up_at(ms: u64) -> Option<Option<Settled>> {
        Some(Some(Settled::CaughtUp { asked_at_ms: ms }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_runs_at_once_then_every_interval_until_shutdown() {
        let watermark = Arc::new(Watermark::default());
        let consumer = Fake::new(|n| caught_up_at(10_000 + 1_000 * n as u64));
        let (trigger, stop) = crate::run::shutdown::channel();
        let task = tokio::spawn(run_with(
            Arc::clone(&watermark),
            vec![Arc::clone(&consumer)],
            Duration::from_secs(1),
            stop,
        ));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(consumer.asked(), 1, "the first round runs at once");
        assert_eq!(watermark.get(), 10_000 - COMMIT_MARGIN_MS);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(consumer.asked(), 2, "then one round per interval");
        assert_eq!(watermark.get(), 11_000 - COMMIT_MARGIN_MS);
        trigger.trigger();
        tokio::time::timeout(Duration::from_millis(1), task)
            .await
            .expect("the task ends on shutdown, between rounds")
            .expect("no panic");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_consumer_holds_the_watermark_and_the_loop_only_for_the_read_timeout() {
        let interval = Duration::from_millis(500);
        assert_eq!(read_timeout(interval), Duration::from_secs(2));
        let watermark = Arc::new(Watermark::default());
        let answering = Fake::new(|_| caught_up_at(10_000));
        let silent = Fake::new(|_| None);
        let (_trigger, stop) = crate::run::shutdown::channel();
        let _task = tokio::spawn(run_with(
            Arc::clone(&watermark),
            vec![Arc::clone(&answering), Arc::clone(&silent)],
            interval,
            stop,
        ));
        tokio::time::sleep(Duration::from_millis(5_000)).await;
        // rounds at 0 s, 2 s and 4 s: each waits 2 s for the silent one, the next follows at
        // once (late rounds are not bunched up to catch up)
        assert_eq!((answering.asked(), silent.asked()), (3, 3));
        assert_eq!(
            watermark.get(),
            0,
            "a consumer that cannot be read could hold anything"
        );
    }
}
