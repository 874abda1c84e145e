//! The relay with a fake publisher and outbox, under paused tokio time: what a round deletes,
//! how the loop retries, wakes and drains. The same relay against a real server:
//! `crates/sink/tests/jetstream.rs`.

use super::*;
use crate::backoff::Backoff;
use crate::testing::{event_row, Answer, FakeOutbox, FakePublisher, Log, Step};
use chunk_model::wire::headers;
use chunk_model::{Event, EventType, ToolResult};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep, Instant};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn sent(id: &str) -> Step {
    Step::Sent(id.to_string())
}
fn acked(id: &str) -> Step {
    Step::Acked(id.to_string())
}

/// A relay task over `outbox`, its stop sender and wake; running once spawned.
struct Running {
    stop: watch::Sender<bool>,
    wake: Arc<Notify>,
    handle: tokio::task::JoinHandle<Drained>,
}

fn start(
    publisher: FakePublisher,
    outbox: &Arc<FakeOutbox>,
    interval: Duration,
    drain_timeout: Duration,
) -> Running {
    let (stop, stop_rx) = watch::channel(false);
    let wake = Arc::new(Notify::new());
    let task = RelayTask::new(
        Relay::new(publisher, "ts", 100),
        Arc::clone(outbox),
        Arc::clone(&wake),
    )
    .interval(interval)
    .drain_timeout(drain_timeout);
    Running {
        stop,
        wake,
        handle: tokio::spawn(task.run(stop_rx)),
    }
}

impl Running {
    async fn stop(self) -> Drained {
        self.stop.send_replace(true);
        self.handle.await.unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn a_round_deletes_exactly_the_rows_whose_pubacks_arrived() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    for key in 1..=3 {
        outbox.add(event_row(key, b"{}"));
    }
    let publisher =
        FakePublisher::new(&log, [Answer::Ack(MS), Answer::NoAck(S), Answer::Duplicate]);
    let relay = Relay::new(publisher.clone(), "ts", 100);

    let round = relay.round(&outbox).await;

    assert_eq!((round.events, round.duplicates), (2, 1));
    assert!(matches!(round.error, Some(RelayError::Ack { ref msg_id, .. }) if msg_id == "ev2"));
    assert_eq!(outbox.keys(), [2], "the unconfirmed row stays");
    // timed from the peek through its slowest PubAck (the one that never came, given up on
    // after a second)
    assert!(round.took >= S, "{:?}", round.took);
    assert_eq!(round.peeked, 3);
    // pipelined: all three sent before any PubAck; deletes only after every PubAck is in
    let steps = log.steps();
    assert_eq!(steps[..3], [sent("ev1"), sent("ev2"), sent("ev3")]);
    let last_ack = steps
        .iter()
        .rposition(|s| matches!(s, Step::Acked(_) | Step::AckFailed(_)))
        .unwrap();
    assert_eq!(steps[last_ack + 1..], [Step::Removed(1), Step::Removed(3)]);
    // each row as stored: subject, Nats-Msg-Id, headers, body
    let first = publisher.sent.lock().unwrap()[0].clone();
    assert_eq!(first.subject, "ts.events.c.m1");
    assert_eq!(first.msg_id, "ev1");
    assert_eq!(first.headers, event_row(1, b"").headers);
    assert_eq!(&first.payload[..], b"{}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_publish_is_retried_and_its_row_deleted_only_after_the_ack() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    outbox.add(event_row(1, b"{}"));
    // the first PubAck never comes (timeout after 10 s), the second takes 3 s
    let publisher = FakePublisher::new(&log, [Answer::NoAck(10 * S), Answer::Ack(3 * S)]);
    let t0 = Instant::now();
    let relay = start(publisher, &outbox, 3600 * S, S);

    sleep(12 * S).await;
    assert_eq!(outbox.keys(), [1], "no PubAck yet: the row stays");
    sleep(2 * S).await;
    assert!(outbox.keys().is_empty(), "acked at 13.05 s: deleted");
    assert_eq!(
        log.steps(),
        [
            sent("ev1"),
            Step::AckFailed("ev1".into()),
            sent("ev1"),
            acked("ev1"),
            Step::Removed(1)
        ]
    );
    // the retry came one backoff step (50 ms) after the failed round
    let sends = log.times(|s| *s == sent("ev1"));
    assert_eq!(sends[1] - t0, 10 * S + 50 * MS);
    assert_eq!(relay.stop().await, Drained::Empty);
}

#[tokio::test(start_paused = true)]
async fn failed_rounds_back_off_doubling_up_to_the_cap_and_reset_after_a_success() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    outbox.add(event_row(1, b"{}"));
    let publisher = FakePublisher::new(&log, []);
    publisher.always(Answer::SendFails);
    let relay = start(publisher.clone(), &outbox, 3600 * S, S);

    sleep(20 * S).await;
    let failed = log.times(|s| matches!(s, Step::SendFailed(_)));
    let gaps: Vec<u128> = failed
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    assert_eq!(
        gaps[..9],
        [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000],
        "{gaps:?}"
    );
    assert_eq!(BACKOFF, Backoff::new(50 * MS, 5 * S));

    // a success resets it: the next failures wait 50 ms, 100 ms again
    publisher.always(Answer::Ack(Duration::ZERO));
    sleep(5 * S).await;
    assert!(outbox.keys().is_empty());
    publisher.always(Answer::SendFails);
    outbox.add(event_row(2, b"{}"));
    relay.wake.notify_one();
    sleep(S).await;
    let failed = log.times(|s| *s == Step::SendFailed("ev2".into()));
    let gaps: Vec<u128> = failed
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    assert_eq!(gaps[..3], [50, 100, 200], "{gaps:?}");
    assert_eq!(relay.stop().await, Drained::Incomplete);
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_runs_a_round_at_once_and_the_interval_runs_one_without() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    let publisher = FakePublisher::new(&log, []);
    let t0 = Instant::now();
    let relay = start(publisher, &outbox, 60 * S, S);

    sleep(S).await;
    outbox.add(event_row(1, b"{}"));
    relay.wake.notify_one();
    sleep(10 * MS).await;
    assert!(outbox.keys().is_empty(), "woken: published at once");

    outbox.add(event_row(2, b"{}"));
    sleep(30 * S).await;
    assert_eq!(outbox.keys(), [2], "not woken: waits for the interval");
    sleep(31 * S).await;
    assert!(outbox.keys().is_empty());
    let at = |id: &str| log.times(|s| *s == sent(id))[0] - t0;
    assert_eq!(at("ev1"), S);
    assert_eq!(at("ev2"), 61 * S, "one interval after the woken round");
    assert_eq!(relay.stop().await, Drained::Empty);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_the_rows_left() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    let relay = start(FakePublisher::new(&log, []), &outbox, 3600 * S, 10 * S);
    sleep(S).await;
    // rows made durable by the last batch, the relay not woken for them
    for key in 1..=3 {
        outbox.add(event_row(key, b"{}"));
    }
    let t_stop = Instant::now();
    assert_eq!(relay.stop().await, Drained::Empty);
    assert!(outbox.keys().is_empty());
    assert_eq!(t_stop.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_up_at_its_deadline_keeping_the_rows() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    outbox.add(event_row(1, b"{}"));
    let publisher = FakePublisher::new(&log, []);
    publisher.always(Answer::NoAck(3600 * S));
    let relay = start(publisher, &outbox, 3600 * S, 2 * S);
    sleep(S).await;

    let t_stop = Instant::now();
    assert_eq!(relay.stop().await, Drained::Incomplete);
    assert_eq!(t_stop.elapsed(), 2 * S, "the drain ends at its deadline");
    assert_eq!(outbox.keys(), [1], "never acked: kept for the next start");
    // the round in flight at the stop was cut short; the drain sent the row again
    assert_eq!(log.steps(), [sent("ev1"), sent("ev1")]);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_stop_sender_stops_the_loop() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    let relay = start(FakePublisher::new(&log, []), &outbox, 3600 * S, S);
    drop(relay.stop);
    assert_eq!(relay.handle.await.unwrap(), Drained::Empty);
}

/// An event whose result output is `size` bytes.
fn big_event(size: usize) -> Event {
    let mut event = Event::new(
        EventType::ToolResultCompleted,
        "ev_big".into(),
        "c",
        "m1",
        None,
    );
    event.tool_result = Some(ToolResult {
        tool_call_id: "call_1".into(),
        output: "x".repeat(size),
        is_error: false,
    });
    event
}

#[tokio::test(start_paused = true)]
async fn an_event_over_max_payload_is_stored_whole_and_published_by_reference() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    let json = serde_json::to_vec(&big_event(10_000)).unwrap();
    let mut row = event_row(1, &json);
    row.msg_id = "ev_big".into();
    outbox.add(row);
    let publisher = FakePublisher::new(&log, []).with_max_payload(4096);

    let round = Relay::new(publisher.clone(), "ts", 100)
        .round(&outbox)
        .await;

    assert!(round.error.is_none(), "{:?}", round.error);
    assert_eq!((round.events, round.offloaded), (1, 1));
    assert!(outbox.keys().is_empty());
    assert_eq!(publisher.objects.lock().unwrap()["ev_big"], json);
    let sent = publisher.sent.lock().unwrap()[0].clone();
    assert_eq!(
        (sent.subject.as_str(), sent.msg_id.as_str()),
        ("ts.events.c.m1", "ev_big")
    );
    let small: Event = serde_json::from_slice(&sent.payload).unwrap();
    let reference = small.payload_ref.expect("payload_ref");
    assert_eq!(
        (reference.object.as_str(), reference.size),
        ("ev_big", json.len() as u64)
    );
    assert_eq!(small.tool_result.map(|r| r.output), Some(String::new()));
}

#[tokio::test(start_paused = true)]
async fn rows_over_max_payload_never_block_the_outbox() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    // not an event: replaced by a small event_too_large dead letter
    outbox.add(event_row(1, &vec![b'x'; 10_000]));
    // a dead letter: published with its body cut, the whole body stored
    let mut dead = event_row(2, &vec![b'y'; 10_000]);
    dead.kind = OutboxKind::DeadLetter;
    dead.msg_id = "dlq:c:m2:1".into();
    dead.headers = vec![(headers::REASON.into(), "decode".into())];
    outbox.add(dead);
    outbox.add(event_row(3, b"{}"));
    let publisher = FakePublisher::new(&log, []).with_max_payload(4096);

    let round = Relay::new(publisher.clone(), "ts", 100)
        .round(&outbox)
        .await;

    assert!(round.error.is_none(), "{:?}", round.error);
    assert_eq!(
        (round.too_large, round.dead_letters, round.cut, round.events),
        (1, 1, 1, 1)
    );
    assert!(outbox.keys().is_empty());
    let sent = publisher.sent.lock().unwrap().clone();
    let header = |i: usize, name: &str| {
        sent[i]
            .headers
            .iter()
            .rfind(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        (sent[0].subject.as_str(), sent[0].msg_id.as_str()),
        ("ts.dlq.c.m1", "too_large:ev1")
    );
    assert!(header(0, headers::REASON)
        .unwrap()
        .starts_with("event_too_large"));
    assert_eq!(
        (sent[1].subject.as_str(), sent[1].msg_id.as_str()),
        ("ts.dlq.c.m2", "dlq:c:m2:1")
    );
    assert_eq!(header(1, headers::REASON).as_deref(), Some("decode"));
    assert_eq!(header(1, headers::BODY_TRUNCATED).as_deref(), Some("10000"));
    assert!(sent[1].payload.len() < 4096);
    let stored = header(1, headers::BODY_REF).unwrap();
    let object = stored.strip_prefix("FAKE/").unwrap();
    assert_eq!(
        publisher.objects.lock().unwrap()[object],
        vec![b'y'; 10_000]
    );
    assert_eq!(sent[2].msg_id, "ev3");
}

#[cfg(feature = "failpoints")]
#[tokio::test(start_paused = true)]
async fn the_payload_hold_stops_the_relay_after_storing_before_publishing() {
    let log = Log::default();
    let outbox = FakeOutbox::new(&log);
    let mut row = event_row(1, &serde_json::to_vec(&big_event(10_000)).unwrap());
    row.msg_id = "ev_big".into();
    outbox.add(row);
    let publisher = FakePublisher::new(&log, []).with_max_payload(4096);
    let relay = Relay::new(publisher.clone(), "ts", 100).with_hold_after_payload_puts(Some(1));

    let held = tokio::time::timeout(3600 * S, relay.round(&outbox)).await;

    assert!(held.is_err(), "the round never ends");
    assert!(publisher.objects.lock().unwrap().contains_key("ev_big"));
    assert!(publisher.sent.lock().unwrap().is_empty());
    assert_eq!(outbox.keys(), [1]);
}
