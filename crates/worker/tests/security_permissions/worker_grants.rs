//! The worker's own runs with exactly its documented permissions: partitioned behind the
//! deploy mapping, unpartitioned on a plain server, and (to show the suite can see a missing
//! grant) without `$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN`.

use super::*;

#[tokio::test]
async fn the_worker_needs_nothing_beyond_its_documented_permissions() {
    let d = deploy(|p| p).await;
    let w = d.worker(&[]);
    w.wait_ready();

    let (producer, producer_refusals, ui, ui_refusals) = tenant_clients(&d.server.url()).await;
    let mut ui_events = ui
        .subscribe(format!("toolstream.events.{CONV_A}.>"))
        .await
        .unwrap();
    ui.flush().await.unwrap();

    // A stream, its result, and a chunk that must be dead-lettered.
    publish_a_stream_its_result_and_a_bad_chunk(&producer).await;

    // The UI sees the events live, through its own permissions.
    let mut types = Vec::new();
    let deadline = Instant::now() + WAIT;
    use futures::StreamExt;
    while !(types.iter().any(|t: &String| t == "message.completed")
        && types.iter().any(|t| t.starts_with("tool_result.")))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = tokio::time::timeout(left, ui_events.next())
            .await
            .unwrap_or_else(|_| panic!("events: {types:?}\n{}", tail(&w.log(), 40)))
            .expect("subscription open");
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        types.push(v["type"].as_str().unwrap_or_default().to_string());
    }
    assert!(
        types.contains(&"tool_call.completed".to_string()),
        "{types:?}"
    );

    // The dead letter was published.
    let mut dlq = StreamLog::new(&d.admin_js(), "TOOLSTREAM_DLQ");
    let dlq_subject = format!("toolstream.dlq.{CONV_A}.m2");
    dlq.until(
        WAIT,
        "the dead letter",
        |all| all.iter().any(|r| r.subject == dlq_subject),
        || w.log(),
    )
    .await;

    // Queries (mapped to the worker's partition) and service discovery are answered.
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m1"), "".into())
        .await
        .expect("message query answered");
    let snapshot: Value = serde_json::from_slice(&answer.payload).expect("snapshot JSON");
    assert!(snapshot.to_string().contains("call_a1"), "{snapshot}");
    let history = ui
        .request(format!("toolstream.query.history.{CONV_A}"), "{}".into())
        .await
        .expect("history query answered");
    assert!(
        String::from_utf8_lossy(&history.payload).contains("call_a1"),
        "{:?}",
        history
    );
    let ping = d
        .admin
        .request("$SRV.PING.toolstream", "".into())
        .await
        .expect("service discovery answered");
    assert!(String::from_utf8_lossy(&ping.payload).contains("toolstream"));

    // An event larger than max_payload goes through the payload bucket (its object written
    // and checked, the small form published), and so does the message query's answer.
    let big = Call {
        id: "call_big".into(),
        name: "lookup".into(),
        args: json!({"blob": "z".repeat(MAX_PAYLOAD * 3 / 4)}),
    };
    for (seq, body) in openai_chat_stream_cut(&[big], |_| 16 * 1024)
        .iter()
        .enumerate()
    {
        producer
            .chunk(CONV_A, "m4", "openai-chat", seq as u64, body)
            .await;
    }
    loop {
        let m = tokio::time::timeout(WAIT, ui_events.next())
            .await
            .unwrap_or_else(|_| panic!("no offloaded event\n{}", tail(&w.log(), 40)))
            .expect("subscription open");
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        if v["message_id"] == "m4" && !v["payload_ref"].is_null() {
            break;
        }
    }
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m4"), "".into())
        .await
        .expect("large message query answered");
    assert!(
        String::from_utf8_lossy(&answer.payload).contains("payload_ref"),
        "answered by reference: {:?}",
        answer
    );

    // The backlog after a restart (the lookup path, the watermark's STREAM.MSG.GET).
    let mut events = StreamLog::new(&d.admin_js(), "TOOLSTREAM_EVENTS");
    let log =
        run_a_backlog_after_a_restart(w, |extra| d.worker(extra), &producer, &mut events).await;
    assert_nothing_refused(
        &log,
        &d.server_violations(),
        &producer_refusals,
        &ui_refusals,
    );
}

/// The same permissions fit a plain server without the partition mapping, where one worker
/// reads the whole input through one unfiltered consumer.
#[tokio::test]
async fn an_unpartitioned_worker_needs_nothing_beyond_the_same_permissions() {
    let conf = format!("max_payload: {MAX_PAYLOAD}\n\n{}", users_conf(|p| p));
    let server = NatsServer::start_with_config(&conf).expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let start = |extra: &[&str]| {
        let mut args = vec![
            "--user",
            "toolstream-worker",
            "--inbox-prefix",
            WORKER_INBOX,
        ];
        args.extend_from_slice(extra);
        Worker::start_with_env(
            &server.url(),
            &dir.path().join("data"),
            &args,
            &[("TOOLSTREAM_PASSWORD", WORKER_PW)],
        )
    };
    let w = start(&[]);
    w.wait_ready();
    let (admin, _) = login(&server.url(), "admin", ADMIN_PW, "_INBOX_admin").await;
    let js = jetstream::new(admin);
    let (producer, producer_refusals, ui, ui_refusals) = tenant_clients(&server.url()).await;

    publish_a_stream_its_result_and_a_bad_chunk(&producer).await;
    let mut events = StreamLog::new(&js, "TOOLSTREAM_EVENTS");
    events
        .until(
            WAIT,
            "the call's result event",
            |all| {
                all.iter().any(|r| {
                    r.json()["type"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("tool_result.")
                })
            },
            || w.log(),
        )
        .await;
    let mut dlq = StreamLog::new(&js, "TOOLSTREAM_DLQ");
    dlq.until(WAIT, "the dead letter", |all| !all.is_empty(), || w.log())
        .await;
    let answer = ui
        .request(format!("toolstream.query.message.{CONV_A}.m1"), "".into())
        .await
        .expect("message query answered");
    assert!(String::from_utf8_lossy(&answer.payload).contains("call_a1"));

    let log = run_a_backlog_after_a_restart(w, start, &producer, &mut events).await;
    assert_nothing_refused(
        &log,
        &server_violations(&server),
        &producer_refusals,
        &ui_refusals,
    );
}

/// Proves the backlog runs above exercise the watermark's read: the same backlog without
/// `$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN` is refused, and the worker's log says so.
#[tokio::test]
async fn without_the_stream_msg_get_grant_the_backlog_run_is_refused() {
    let grant = "\"$JS.API.STREAM.MSG.GET.TOOLSTREAM_IN\"";
    let d = deploy(|p| {
        assert!(p.contains(grant), "the deploy file grants {grant}");
        p.replace(grant, "")
    })
    .await;
    let (producer_client, _) = login(
        &d.server.url(),
        "producer-acme",
        PRODUCER_PW,
        "_INBOX_producer-acme",
    )
    .await;
    let producer = Producer::new(jetstream::new(producer_client));
    let mut w = d.worker(&[]);
    w.wait_ready();
    assert!(w.terminate());
    let backlog: Vec<Call> = (0..40).map(|i| call(&format!("call_b{i}"), "y")).collect();
    producer.openai_stream(CONV_A, "m3", &backlog).await;
    let w = d.worker(&["--batch-size", "1"]);
    let refused = &w;
    eventually_async(WAIT, || async move {
        !worker_refusals(&refused.log()).is_empty()
    })
    .await
    .unwrap_or_else(|| panic!("no refusal logged:\n{}", tail(&w.log(), 40)));
    assert!(
        worker_refusals(&w.log())
            .iter()
            .any(|l| l.contains("STREAM.MSG.GET.TOOLSTREAM_IN")),
        "{:#?}",
        worker_refusals(&w.log())
    );
}
