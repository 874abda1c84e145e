//! Malformed input against the real worker: an undecodable chunk, a subject with a missing
//! token and a non-numeric `Toolstream-Seq` each land on the dead-letter stream once, with the
//! reason and the original subject/sequence in headers, are terminated (never redelivered), and
//! every concurrent stream still completes.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::HeaderMap;
use common::*;
use serde_json::json;

const GOOD: usize = 8;

fn good_calls(i: usize) -> Vec<Call> {
    vec![Call {
        id: format!("call_g{i}"),
        name: "lookup".to_string(),
        args: json!({"q": format!("query {i}"), "limit": i}),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_is_dead_lettered_once_while_other_streams_complete() {
    let mut e2e = E2e::start(toolstream_bin(), &[]).await;
    let (worker, js, producer) = e2e.parts();

    let mut tasks = Vec::new();
    for i in 0..GOOD {
        let producer = producer.clone();
        tasks.push(tokio::spawn(async move {
            let chunks = openai_chat_stream(&good_calls(i));
            for (seq, body) in chunks.iter().enumerate() {
                producer
                    .chunk(
                        &format!("g{i}"),
                        &format!("gm{i}"),
                        "openai-chat",
                        seq as u64,
                        body,
                    )
                    .await;
                tokio::task::yield_now().await;
            }
        }));
    }

    // 1. an undecodable chunk in the middle of an otherwise fine stream
    let bad_calls = vec![Call {
        id: "call_bad".to_string(),
        name: "lookup".to_string(),
        args: json!({"q": "x"}),
    }];
    let mut bad_stream = openai_chat_stream(&bad_calls);
    let broken = br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function""#.to_vec();
    bad_stream.insert(2, broken.clone());
    for (seq, body) in bad_stream.iter().enumerate() {
        producer
            .chunk("cbad", "mbad", "openai-chat", seq as u64, body)
            .await;
    }
    // 2. a subject the worker cannot attribute (no message token)
    let mut h = HeaderMap::new();
    h.insert("Toolstream-Provider", "openai-chat");
    producer
        .publish("toolstream.chunks.lonely", h, "lonely:0", b"{}")
        .await;
    // 3. a sequence header that is not a number
    let mut h = HeaderMap::new();
    h.insert("Toolstream-Provider", "openai-chat");
    h.insert("Toolstream-Seq", "three");
    producer
        .publish("toolstream.chunks.cseq.mseq", h, "mseq:x", b"{}")
        .await;

    for t in tasks {
        t.await.unwrap();
    }

    // the broken chunk, every chunk of its stream after it (the call cannot be whole), the
    // unroutable one and the bad sequence header
    let expected_dead = 1 + (bad_stream.len() - 3) + 2;
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    dlq.until(
        WAIT,
        "every dead letter",
        |all| all.len() >= expected_dead,
        || worker.log(),
    )
    .await;
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "every good stream completed",
            |all| {
                by_message(all)
                    .iter()
                    .filter(|((c, _), evs)| {
                        c.starts_with('g') && evs.iter().any(|e| e["type"] == "message.completed")
                    })
                    .count()
                    == GOOD
            },
            || worker.log(),
        )
        .await;

    // Terminated, not redelivered: the consumer settles with nothing pending.
    wait_settled(js, "toolstream")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
    dlq.poll().await;
    events.poll().await;

    assert_eq!(
        dlq.all.len(),
        expected_dead,
        "each bad input dead-lettered exactly once: {:?}",
        dlq.all.iter().map(|r| &r.subject).collect::<Vec<_>>()
    );
    let find = |subject: &str| {
        dlq.all
            .iter()
            .find(|r| r.subject == subject)
            .unwrap_or_else(|| panic!("no dead letter on {subject}"))
    };

    let undecodable = find("toolstream.dlq.cbad.mbad");
    let of_bad: Vec<String> = dlq
        .all
        .iter()
        .filter(|r| r.subject == "toolstream.dlq.cbad.mbad")
        .map(|r| r.header("Toolstream-Reason").unwrap_or_default())
        .collect();
    assert!(
        of_bad
            .iter()
            .skip(1)
            .all(|r| r.starts_with("stream_closed")),
        "after the hole: {of_bad:?}"
    );
    assert_eq!(undecodable.payload, broken, "the raw chunk is kept");
    let reason = undecodable.header("Toolstream-Reason").unwrap_or_default();
    assert!(
        reason.contains("decode") || reason.contains("json"),
        "reason: {reason}"
    );
    assert_eq!(
        undecodable.header("Toolstream-Subject").as_deref(),
        Some("toolstream.chunks.cbad.mbad")
    );
    assert!(undecodable.header("Toolstream-Stream-Seq").is_some());

    let unroutable = find("toolstream.dlq.unroutable");
    let reason = unroutable.header("Toolstream-Reason").unwrap_or_default();
    assert!(reason.starts_with("unroutable_subject"), "reason: {reason}");
    assert_eq!(
        unroutable.header("Toolstream-Subject").as_deref(),
        Some("toolstream.chunks.lonely")
    );

    let bad_seq = find("toolstream.dlq.cseq.mseq");
    let reason = bad_seq.header("Toolstream-Reason").unwrap_or_default();
    assert!(reason.starts_with("bad_seq"), "reason: {reason}");

    // The call with the hole never completes: it ends abandoned (lost_chunk).
    let grouped = by_message(&events.all);
    let bad: Vec<_> = grouped[&("cbad".to_string(), "mbad".to_string())]
        .iter()
        .map(|e| (e["type"].clone(), e["reason"].clone()))
        .collect();
    assert!(
        bad.iter()
            .any(|(t, r)| t == "tool_call.abandoned" && r == "lost_chunk"),
        "{bad:?}"
    );
    assert!(
        !bad.iter().any(|(t, _)| t == "tool_call.completed"),
        "{bad:?}"
    );
    // The good streams are exactly right.
    for i in 0..GOOD {
        let evs = &grouped[&(format!("g{i}"), format!("gm{i}"))];
        check_message(evs, &good_calls(i)).unwrap_or_else(|e| panic!("g{i}: {e}\n{evs:#?}"));
    }
}

/// An event the server cannot take inline (larger than `max_payload`: here a call with 1.2 MiB
/// of arguments, which the event carries twice, raw and parsed) must not block the outbox: it
/// is published in its small form with `payload_ref` (the whole event in the payload bucket,
/// see e2e_oversize.rs), nothing goes to the DLQ, and the streams behind it complete. It used to
/// be replaced by an `event_too_large` dead letter, and subscribers never saw the call complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_larger_than_max_payload_is_published_by_reference_and_blocks_nothing() {
    let mut e2e = E2e::start(toolstream_bin(), &[]).await; // max_payload 1 MiB
    let (worker, js, producer) = e2e.parts();

    // 1.2 MiB of arguments in 100 KiB fragments (each chunk fits, the events do not)
    let big = Call {
        id: "call_big".to_string(),
        name: "upload".to_string(),
        args: json!({"data": "z".repeat(1_200_000)}),
    };
    let chunks = openai_chat_stream_cut(std::slice::from_ref(&big), |_| 100 * 1024);
    for (seq, body) in chunks.iter().enumerate() {
        producer
            .chunk("cbig", "mbig", "openai-chat", seq as u64, body)
            .await;
    }
    // a normal stream behind it
    producer.openai_stream("g0", "gm0", &good_calls(0)).await;

    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "both streams complete",
            |all| {
                let by = by_message(all);
                ["g0/gm0", "cbig/mbig"].iter().all(|k| {
                    let (c, m) = k.split_once('/').unwrap();
                    by.get(&(c.to_string(), m.to_string()))
                        .is_some_and(|evs| evs.iter().any(|e| e["type"] == "message.completed"))
                })
            },
            || worker.log(),
        )
        .await;
    assert!(worker.terminate());
    let big_events = &by_message(&events.all)[&("cbig".to_string(), "mbig".to_string())];
    let completed = big_events
        .iter()
        .find(|e| e["type"] == "tool_call.completed")
        .expect("the big call completed");
    assert_eq!(completed["tool_call"]["name"], "upload");
    let reference = &completed["payload_ref"];
    assert_eq!(reference["bucket"], "TOOLSTREAM_PAYLOADS");
    assert_eq!(reference["object"], completed["event_id"]);
    assert!(
        reference["size"].as_u64().is_some_and(|n| n > 2_400_000),
        "{reference}"
    );
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    dlq.poll().await;
    assert!(dlq.all.is_empty(), "nothing dead-lettered");
    assert!(
        worker.log().contains("max_payload is below"),
        "the mismatch of max_payload and max_argument_bytes was announced at start"
    );
}
