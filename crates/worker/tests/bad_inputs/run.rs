//! The test: one worker, every case of the corpus beside the valid workload, one deadline,
//! then every outcome checked against what the case wrote down.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_has_its_written_outcome_beside_valid_streams_of_every_provider() {
    let started = Instant::now();
    let cases = load_corpus();
    assert!(cases.len() >= 80, "the corpus has {} cases", cases.len());
    let mut ids = BTreeSet::new();
    let mut convs = BTreeSet::new();
    for c in &cases {
        assert!(ids.insert(c.id.clone()), "case id {} twice", c.id);
        assert!(
            convs.insert(c.conv()),
            "conversation {:?} used by two cases",
            c.conv()
        );
        assert!(
            !c.conv().starts_with("wl-"),
            "{}: wl- is the workload's",
            c.id
        );
        assert!(!c.what.is_empty(), "{}: say what it is", c.id);
    }
    let planned: Vec<Vec<Planned>> = cases.iter().map(Case::plan).collect();
    let classes: BTreeSet<&str> = cases.iter().map(|c| c.class.as_str()).collect();
    for want in [
        "providers",
        "headers",
        "subjects",
        "sizes",
        "encodings",
        "results",
        "control",
    ] {
        assert!(classes.contains(want), "no case of class {want}");
    }

    let max_arg = MAX_ARGUMENT_BYTES.to_string();
    let gap = GAP_TIMEOUT_MS.to_string();
    let orphan = ORPHAN_GRACE_MS.to_string();
    let flags = [
        "--max-argument-bytes",
        max_arg.as_str(),
        "--gap-timeout-ms",
        gap.as_str(),
        "--orphan-grace-ms",
        orphan.as_str(),
        "--ack-wait",
        "30s",
    ];
    let mut e2e = E2e::start(toolstream_bin(), &flags).await;
    let E2e {
        worker,
        js,
        client: nats,
        ..
    } = &mut e2e;

    // the valid streams: every recording of every provider and generated ones, concurrently
    let seed = toolstream_testkit::fault::seed();
    let mut spec = WorkloadSpec::small("wl", seed, 12);
    spec.recordings = true;
    spec.spread = Duration::from_secs(3);
    let workload = Workload::build(&spec).expect("workload");
    let config = assembler::Config {
        max_argument_bytes: MAX_ARGUMENT_BYTES,
        gap_timeout_ms: GAP_TIMEOUT_MS,
        orphan_grace_ms: ORPHAN_GRACE_MS,
        ..assembler::Config::default()
    };
    let reference = Reference::compute(&workload, &config).expect("reference");
    let producer = Producer::new(js.clone());
    let valid = {
        let workload = workload.clone();
        tokio::spawn(async move {
            workload
                .publish(&producer, &Misbehaviour::default())
                .await
                .expect("workload published")
        })
    };

    // the corpus, case after case
    let mut seq_of: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (ci, inputs) in planned.iter().enumerate() {
        for (k, p) in inputs.iter().enumerate() {
            let seq = publish(js, p).await;
            seq_of.insert(seq, (ci, k));
        }
    }
    let published = valid.await.unwrap();
    eprintln!(
        "published {} corpus inputs ({} cases) and {} workload inputs (seed {seed}) in {:?}",
        seq_of.len(),
        cases.len(),
        published.inputs,
        started.elapsed()
    );

    // wait for every outcome under one deadline
    let deadline = started + DEADLINE;
    let expected_dead: usize = planned
        .iter()
        .flatten()
        .filter(|p| p.dead_letter.is_some())
        .count();
    let expected_events: BTreeMap<String, usize> =
        cases.iter().map(|c| (c.conv(), c.events.len())).collect();
    let mut events = StreamLog::new(js, "TOOLSTREAM_EVENTS");
    let mut dlq = StreamLog::new(js, "TOOLSTREAM_DLQ");
    loop {
        events.poll().await;
        dlq.poll().await;
        let corpus_dead = dlq
            .all
            .iter()
            .filter(|r| {
                r.header("Toolstream-Stream-Seq")
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|s| seq_of.contains_key(&s))
            })
            .count();
        let mut per_conv: BTreeMap<String, usize> = BTreeMap::new();
        for e in &events.all {
            if let Ok(v) = serde_json::from_slice::<Value>(&e.payload) {
                if let Some(c) = v["conversation_id"].as_str() {
                    *per_conv.entry(c.to_string()).or_default() += 1;
                }
            }
        }
        let events_done = expected_events
            .iter()
            .all(|(c, n)| per_conv.get(c).copied().unwrap_or(0) >= *n);
        if (corpus_dead >= expected_dead && events_done) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut checker = Checker::new(nats.clone(), PREFIX);
    let left = deadline.saturating_duration_since(Instant::now());
    let complete = checker
        .wait(
            &reference,
            &WaitPlan {
                limit: left.max(Duration::from_secs(5)),
                quiet: Duration::from_secs(10),
                ..WaitPlan::default()
            },
        )
        .await;
    // settled: nothing pending, nothing left in the outbox; then a last look for stragglers
    let stream = js.get_stream("TOOLSTREAM_IN").await.unwrap();
    let settle_by = Instant::now().max(deadline) + Duration::from_secs(5);
    loop {
        let info = stream.consumer_info("toolstream").await.unwrap();
        if !worker.is_running() {
            break;
        }
        let outbox = metric(&worker.metrics(), "toolstream_outbox_depth").unwrap_or(1);
        if info.num_pending == 0 && info.num_ack_pending == 0 && outbox == 0 {
            break;
        }
        if Instant::now() > settle_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    events.poll().await;
    dlq.poll().await;
    let mut report = checker.check(&reference).await;
    report.complete = complete;
    let running = worker.is_running();
    // (a worker that stopped has no /metrics to read: the verdict below names the stop)
    let metrics = if running {
        worker.metrics()
    } else {
        String::new()
    };
    let elapsed = started.elapsed();

    // ---- compare
    let mut failures: Vec<String> = Vec::new();
    // dead letters by the input they name
    let mut dead_of: BTreeMap<(usize, usize), Vec<&Read>> = BTreeMap::new();
    for r in &dlq.all {
        let seq = r
            .header("Toolstream-Stream-Seq")
            .and_then(|s| s.parse::<u64>().ok());
        match seq.and_then(|s| seq_of.get(&s)) {
            Some(at) => dead_of.entry(*at).or_default().push(r),
            None => {
                let workload_conv = r
                    .subject
                    .strip_prefix("toolstream.dlq.")
                    .is_some_and(|rest| rest.starts_with("wl-"));
                if !workload_conv {
                    failures.push(format!(
                        "a dead letter on {} (reason {:?}, stream seq {:?}) names no input of the run",
                        r.subject,
                        r.header("Toolstream-Reason"),
                        seq
                    ));
                }
            }
        }
    }
    let mut by_conv: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in &events.all {
        let v = e.json();
        let conv = v["conversation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        by_conv.entry(conv).or_default().push(v);
    }
    let mut case_failed = vec![false; cases.len()];
    for (ci, case) in cases.iter().enumerate() {
        let mut fail = |what: String| {
            case_failed[ci] = true;
            failures.push(format!(
                "[{}] {} ({}): {what}",
                case.class, case.id, case.what
            ));
        };
        for (k, p) in planned[ci].iter().enumerate() {
            let got = dead_of.get(&(ci, k)).cloned().unwrap_or_default();
            let reasons: Vec<String> = got
                .iter()
                .map(|r| r.header("Toolstream-Reason").unwrap_or_default())
                .collect();
            match &p.dead_letter {
                Some(prefix) => {
                    if got.len() != 1 {
                        fail(format!(
                            "input {} expected one dead letter `{prefix}…`, actual {} dead letter(s) {:?}",
                            p.label,
                            got.len(),
                            reasons.iter().map(|r| short(r)).collect::<Vec<_>>()
                        ));
                    } else {
                        if !reasons[0].starts_with(prefix.as_str()) {
                            fail(format!(
                                "input {} expected dead letter `{prefix}…`, actual `{}`",
                                p.label,
                                short(&reasons[0])
                            ));
                        }
                        if got[0].subject != p.dlq_subject {
                            fail(format!(
                                "input {} dead letter expected on {}, actual on {}",
                                p.label, p.dlq_subject, got[0].subject
                            ));
                        }
                        let original = got[0].header("Toolstream-Subject");
                        if original.as_deref() != Some(p.subject.as_str()) {
                            fail(format!(
                                "input {} dead letter names subject {original:?}, not {:?}",
                                p.label, p.subject
                            ));
                        }
                        // the body is kept (a body too large for the DLQ is cut and referenced)
                        let cut = got[0].header("Toolstream-Body-Truncated").is_some();
                        if !cut && got[0].payload != p.body {
                            fail(format!(
                                "input {} dead letter body differs from the input ({} vs {} bytes)",
                                p.label,
                                got[0].payload.len(),
                                p.body.len()
                            ));
                        }
                    }
                }
                None => {
                    if !got.is_empty() {
                        fail(format!(
                            "input {} expected {}, actual dead letter(s) {:?}",
                            p.label,
                            if p.duplicate { "duplicate" } else { "applied" },
                            reasons.iter().map(|r| short(r)).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
        // events, per message in order
        let conv = case.conv();
        let actual = by_conv.get(&conv).cloned().unwrap_or_default();
        let mut want_by: BTreeMap<String, Vec<&ExpectedEvent>> = BTreeMap::new();
        for e in &case.events {
            want_by
                .entry(e.msg.clone().unwrap_or_else(|| case.msg()))
                .or_default()
                .push(e);
        }
        let mut got_by: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for e in &actual {
            got_by
                .entry(e["message_id"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(e);
        }
        // per message: call and message events in order, and tool_result events in order
        // (where a result lands among its message's call events is not part of the contract)
        let mut keys: BTreeSet<(String, bool)> = BTreeSet::new();
        for (m, evs) in &want_by {
            for e in evs {
                keys.insert((m.clone(), e.ty.starts_with("tool_result.")));
            }
        }
        for (m, evs) in &got_by {
            for e in evs {
                let is_result = e["type"].as_str().unwrap_or("").starts_with("tool_result.");
                keys.insert((m.clone(), is_result));
            }
        }
        for (m, results) in &keys {
            let want: Vec<&ExpectedEvent> = want_by
                .get(m)
                .into_iter()
                .flatten()
                .copied()
                .filter(|e| e.ty.starts_with("tool_result.") == *results)
                .collect();
            let got: Vec<&Value> = got_by
                .get(m)
                .into_iter()
                .flatten()
                .copied()
                .filter(|e| {
                    e["type"].as_str().unwrap_or("").starts_with("tool_result.") == *results
                })
                .collect();
            let mismatch = want.len() != got.len()
                || want
                    .iter()
                    .zip(&got)
                    .any(|(w, g)| event_matches(w, g).is_err());
            if mismatch {
                let detail: Vec<String> = want
                    .iter()
                    .zip(&got)
                    .filter_map(|(w, g)| event_matches(w, g).err())
                    .take(2)
                    .collect();
                fail(format!(
                    "message {m}: expected events {:?}, actual {:?}{}",
                    want.iter().map(|w| describe_want(w)).collect::<Vec<_>>(),
                    got.iter().map(|g| describe(g)).collect::<Vec<_>>(),
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" — {}", detail.join("; "))
                    }
                ));
            }
        }
    }
    let want_duplicates = planned.iter().flatten().filter(|p| p.duplicate).count() as u64;
    let duplicates = metric(&metrics, "toolstream_duplicates_total");
    if duplicates != Some(want_duplicates) {
        failures.push(format!(
            "duplicates: expected {want_duplicates} (the inputs marked duplicate), actual {duplicates:?}"
        ));
    }

    // ---- summary table: per class, how the cases end (as written, ✗ where the run differed)
    let mut table: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut per_class: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (ci, case) in cases.iter().enumerate() {
        let refs: Vec<&Planned> = planned[ci].iter().collect();
        let kind = outcome_kind(case, &refs);
        let cell = table.entry((case.class.clone(), kind)).or_default();
        cell.0 += 1;
        let row = per_class.entry(case.class.clone()).or_default();
        row.0 += 1;
        row.1 += refs.len();
        if case_failed[ci] {
            cell.1 += 1;
            row.2 += 1;
        }
    }
    eprintln!("\n| class | cases | inputs | differing |\n| --- | --- | --- | --- |");
    for (class, (n, inputs, bad)) in &per_class {
        eprintln!("| {class} | {n} | {inputs} | {bad} |");
    }
    eprintln!("\n| class | outcome (as the contract says) | cases | differing |\n| --- | --- | --- | --- |");
    for ((class, kind), (n, bad)) in &table {
        eprintln!("| {class} | {kind} | {n} | {bad} |");
    }
    eprintln!(
        "\ncorpus: {} cases, {} inputs, {} dead letters expected; workload: {report}run time {elapsed:?}",
        cases.len(),
        seq_of.len(),
        expected_dead
    );

    // ---- verdict
    assert_eq!(worker.starts(), 1, "the worker was started more than once");
    assert_eq!(
        worker.ready_count(),
        1,
        "the worker became ready more than once (it restarted):\n{}",
        tail(&worker.log(), 40)
    );
    assert!(
        running,
        "the worker process stopped during the run:\n{}",
        tail(&worker.log(), 60)
    );
    assert!(
        failures.is_empty(),
        "{} problem(s) in {} case(s):\n{}\n--- worker log (tail) ---\n{}",
        failures.len(),
        case_failed.iter().filter(|f| **f).count(),
        failures.join("\n"),
        tail(&worker.log(), 30)
    );
    assert!(report.ok(), "valid streams beside the corpus: {report}");
    assert!(
        worker.terminate(),
        "clean exit:\n{}",
        tail(&worker.log(), 40)
    );
}
