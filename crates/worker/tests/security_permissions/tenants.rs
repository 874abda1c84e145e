//! Producers and UIs kept to their own conversation and subjects: a producer cannot publish
//! another conversation's input, forge events or call the JetStream API; only the worker reads
//! its inbox; `toolstream publish` works as a tenant producer.

use super::*;

#[tokio::test]
async fn a_producer_cannot_touch_another_conversation_forge_events_or_call_the_jetstream_api() {
    let d = deploy(|p| p).await;
    let mut w = d.worker(&[]);
    w.wait_ready();
    let b = d.conv_b.clone();
    let k = d.partition;
    let (client, refusals) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let chunk = openai_chat_stream(&[call("call_x", "forged")]);
    let forged_event = json!({"schema_version": 1, "type": "tool_call.completed",
        "conversation_id": b, "message_id": "m1"})
    .to_string();

    // Publishes: another conversation's input (directly and behind the mapping), events and
    // dead letters (even of its own conversation), and JetStream API calls that would delete,
    // purge or read what is not its own.
    // (subject, the subject the server refuses: it checks permissions after the mapping,
    // body)
    let denied_publishes: Vec<(String, String, Vec<u8>)> = vec![
        (
            format!("toolstream.chunks.{b}.m1"),
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            chunk[1].clone(),
        ),
        (
            format!("toolstream.results.{b}.m1"),
            format!("toolstream.p.{k}.results.{b}.m1"),
            br#"{"tool_call_id":"call_x","output":"x"}"#.to_vec(),
        ),
        (
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            format!("toolstream.p.{k}.chunks.{b}.m1"),
            chunk[1].clone(),
        ),
        (
            format!("toolstream.events.{b}.m1"),
            format!("toolstream.events.{b}.m1"),
            forged_event.clone().into_bytes(),
        ),
        (
            format!("toolstream.events.{CONV_A}.m1"),
            format!("toolstream.events.{CONV_A}.m1"),
            forged_event.clone().into_bytes(),
        ),
        (
            format!("toolstream.dlq.{CONV_A}.m1"),
            format!("toolstream.dlq.{CONV_A}.m1"),
            b"x".to_vec(),
        ),
        (
            format!("toolstream.query.history.{b}"),
            format!("toolstream.p.{k}.query.history.{b}"),
            b"{}".to_vec(),
        ),
    ];
    let api = [
        "$JS.API.STREAM.DELETE.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.PURGE.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
        "$JS.API.STREAM.PURGE.OBJ_TOOLSTREAM_PAYLOADS".to_string(),
        format!("$JS.API.CONSUMER.DELETE.TOOLSTREAM_IN.toolstream-p{k}-chunks"),
        "$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN".to_string(),
        "$JS.API.STREAM.MSG.GET.TOOLSTREAM_EVENTS".to_string(),
        "$O.TOOLSTREAM_PAYLOADS.M.forged".to_string(),
    ];
    let denied_publishes = denied_publishes.into_iter().chain(
        api.into_iter()
            .map(|s| (s.clone(), s, br#"{"seq":1}"#.to_vec())),
    );
    for (subject, refused, body) in denied_publishes {
        client.publish(subject.clone(), body.into()).await.unwrap();
        client.flush().await.unwrap();
        refusals
            .expect(&format!("publish to {subject}"), &refused)
            .await;
    }
    // The server logs refusals too (what the worker test checks for its own user).
    assert!(
        d.server_violations()
            .iter()
            .any(|l| l.contains("producer-acme")),
        "refusals are in the server log: {:#?}",
        d.server_violations()
    );
    // Subscriptions: other conversations' events and input, and the worker's inbox.
    for subject in [
        "toolstream.events.>".to_string(),
        format!("toolstream.events.{b}.>"),
        "toolstream.p.*.chunks.>".to_string(),
        format!("{WORKER_INBOX}.>"),
        "_INBOX.>".to_string(),
    ] {
        let _sub = client.subscribe(subject.clone()).await.unwrap();
        client.flush().await.unwrap();
        refusals.expect("subscribe", &subject).await;
    }

    // Its own conversation works, and its events are all that appears.
    let producer = Producer::new(jetstream::new(client.clone()));
    producer
        .openai_stream(CONV_A, "m1", &[call("call_a1", "x")])
        .await;
    let js = d.admin_js();
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the producer's own message.completed",
            |all| all.iter().any(|r| r.json()["type"] == "message.completed"),
            || w.log(),
        )
        .await;
    // Give a refused input time to have been processed, were it stored.
    tokio::time::sleep(Duration::from_secs(2)).await;
    events.poll().await;
    for e in &events.all {
        let v = e.json();
        assert_eq!(v["conversation_id"], CONV_A, "{v}");
        assert!(
            !v.to_string().contains("forged"),
            "a forged event got in: {v}"
        );
    }
    let mut input = StreamLog::new(&js, "TOOLSTREAM_IN");
    input.poll().await;
    assert!(!input.all.is_empty());
    assert!(
        input.all.iter().all(|r| r.subject.contains(CONV_A)),
        "{:?}",
        input.all.iter().map(|r| &r.subject).collect::<Vec<_>>()
    );
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    dlq.poll().await;
    assert!(dlq.all.is_empty(), "{:?}", dlq.all);
    // Nothing was deleted.
    let mut stream = js.get_stream("TOOLSTREAM_IN").await.expect("input stream");
    stream
        .consumer_info(format!("toolstream-p{k}-chunks"))
        .await
        .expect("the worker's consumer");
    for name in ["TOOLSTREAM_EVENTS", "TOOLSTREAM_DLQ"] {
        js.get_stream(name).await.expect(name);
    }

    // A result on its own conversation naming the other conversation's call id does not reach
    // that call: results are matched within their conversation.
    Producer::new(js.clone())
        .openai_stream(&b, "m1", &[call("call_b1", "b")])
        .await;
    let b_completed = |all: &[Read]| {
        all.iter().any(|r| {
            let v = r.json();
            v["conversation_id"] == b.as_str() && v["type"] == "message.completed"
        })
    };
    events
        .until(WAIT, "the other conversation's events", b_completed, || {
            w.log()
        })
        .await;
    producer
        .result(CONV_A, "m1", 0, "call_b1", "stolen-result")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    events.poll().await;
    for v in events.all.iter().map(Read::json) {
        if v["conversation_id"] == b.as_str() {
            assert!(
                !v["type"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("tool_result")
                    && !v.to_string().contains("stolen"),
                "another conversation's result reached {b}: {v}"
            );
        }
    }
    let snapshot = d
        .admin
        .request(format!("toolstream.query.message.{b}.m1"), "".into())
        .await
        .expect("answered");
    let snapshot = String::from_utf8_lossy(&snapshot.payload);
    assert!(snapshot.contains("call_b1"), "{snapshot}");
    assert!(!snapshot.contains("stolen"), "{snapshot}");
    assert!(stream.info().await.unwrap().state.messages as usize >= input.all.len());
    assert!(w.terminate());
}

#[tokio::test]
async fn only_the_worker_reads_its_inbox_and_a_ui_publishes_nothing_but_queries() {
    let d = deploy(|p| p).await;
    let (ui, refusals) = login(
        &d.server.url(),
        "toolstream-ui",
        UI_PW,
        "_INBOX_toolstream-ui",
    )
    .await;
    for subject in [
        format!("{WORKER_INBOX}.>"),
        "_INBOX.>".to_string(),
        "_INBOX_producer-acme.>".to_string(),
        "toolstream.chunks.>".to_string(),
        "toolstream.p.*.chunks.>".to_string(),
        "toolstream.dlq.>".to_string(),
    ] {
        let _sub = ui.subscribe(subject.clone()).await.unwrap();
        ui.flush().await.unwrap();
        refusals.expect("ui subscribe", &subject).await;
    }
    let k = d.partition;
    for (subject, refused) in [
        (
            format!("toolstream.chunks.{CONV_A}.m1"),
            format!("toolstream.p.{k}.chunks.{CONV_A}.m1"),
        ),
        (
            format!("toolstream.events.{CONV_A}.m1"),
            format!("toolstream.events.{CONV_A}.m1"),
        ),
        (
            "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
            "$JS.API.STREAM.DELETE.TOOLSTREAM_EVENTS".to_string(),
        ),
    ] {
        ui.publish(subject.clone(), "{}".into()).await.unwrap();
        ui.flush().await.unwrap();
        refusals.expect("ui publish", &refused).await;
    }
    // What the UI may do is not refused.
    let before = refusals.all().len();
    let _events = ui.subscribe("toolstream.events.>").await.unwrap();
    ui.publish(format!("toolstream.query.history.{CONV_A}"), "{}".into())
        .await
        .unwrap();
    ui.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(refusals.all().len(), before, "{:?}", refusals.all());
    // The producer cannot read the worker's inbox either.
    let (producer, refusals) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let _sub = producer
        .subscribe(format!("{WORKER_INBOX}.>"))
        .await
        .unwrap();
    producer.flush().await.unwrap();
    refusals
        .expect("producer subscribe", &format!("{WORKER_INBOX}.>"))
        .await;
}

/// `toolstream publish` as the tenant's producer user.
fn publish_as_producer(d: &Deployed, conv: &str) -> std::process::Output {
    let recording = toolstream_testkit::recordings_dir().join("openai-chat/parallel_calls.sse");
    let mut cmd = std::process::Command::new(toolstream_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLSTREAM_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(["publish", "--nats-url", &d.server.url()])
        .args([
            "--user",
            "producer-acme",
            "--inbox-prefix",
            "_INBOX_producer-acme",
        ])
        .args(["--conversation", conv, "--message", "m1"])
        .arg(&recording)
        .env("TOOLSTREAM_PASSWORD", PRODUCER_PW)
        .output()
        .expect("run toolstream publish")
}

#[tokio::test]
async fn the_publish_command_works_as_a_tenant_producer_and_is_refused_another_conversation() {
    let d = deploy(|p| p).await;
    let mut w = d.worker(&[]);
    w.wait_ready();
    let own = publish_as_producer(&d, CONV_A);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let js = d.admin_js();
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the published recording's message.completed",
            |all| all.iter().any(|r| r.json()["type"] == "message.completed"),
            || w.log(),
        )
        .await;

    let other = publish_as_producer(&d, &d.conv_b);
    assert!(
        !other.status.success(),
        "publishing another conversation must fail: {}",
        String::from_utf8_lossy(&other.stdout)
    );
    let mut input = StreamLog::new(&js, "TOOLSTREAM_IN");
    input.poll().await;
    assert!(
        input.all.iter().all(|r| r.subject.contains(CONV_A)),
        "{:?}",
        input.all.iter().map(|r| &r.subject).collect::<Vec<_>>()
    );
    assert!(d
        .server_violations()
        .iter()
        .any(|l| l.contains(&format!("chunks.{}.m1", d.conv_b))));
    assert!(w.terminate());
}
