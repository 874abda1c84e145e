//! The CLI around replay: error paths (one line on stderr, non-zero exit), `--timeline`, and
//! two recordings with the same file name.

use super::*;

/// An error is one clear line on stderr, nothing on stdout, and a non-zero exit.
fn assert_one_line_error(out: &Output, what: &str, mentions: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !out.status.success(),
        "{what}: exit status {} (expected failure)",
        out.status
    );
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one stderr line, got {stderr:?}"
    );
    assert!(
        lines[0].contains(mentions),
        "{what}: stderr {:?} does not mention {mentions:?}",
        lines[0]
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: printed on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn replay_of_an_unreadable_file_is_one_stderr_line_and_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no_such_recording.sse");
    let out = replay(&missing, &[]);
    assert_one_line_error(&out, "missing file", "no_such_recording.sse");
}

#[test]
fn replay_with_an_unknown_provider_is_one_stderr_line_and_a_failure() {
    let file = recordings_dir().join("openai-chat/parallel_calls.sse");
    let out = replay(&file, &["--provider", "not-a-provider"]);
    assert_one_line_error(&out, "unknown --provider", "not-a-provider");
}

#[test]
fn replay_of_an_undetectable_format_is_one_stderr_line_and_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "these are meeting notes,\nnot a provider stream\n").expect("write");
    let out = replay(&file, &[]);
    assert_one_line_error(&out, "undetectable format", "notes.txt");

    // A stream of well-formed JSON that no provider sends is just as undetectable.
    let json = dir.path().join("unknown.ndjson");
    std::fs::write(&json, "{\"hello\":1}\n{\"hello\":2}\n").expect("write");
    let out = replay(&json, &[]);
    assert_one_line_error(&out, "JSON of no provider", "unknown.ndjson");
}

#[test]
fn timeline_prints_a_line_per_chunk_and_the_end_of_the_recording() {
    let file = recordings_dir().join("openai-chat/parallel_calls.sse");
    let text = std::fs::read_to_string(&file).expect("read recording");
    // Every SSE `data:` line is one chunk (including the literal [DONE]).
    let chunks = text.lines().filter(|l| l.starts_with("data:")).count();
    assert!(chunks > 20, "recording has {chunks} chunks");

    let out = replay(&file, &["--timeline"]);
    assert!(
        out.status.success(),
        "timeline failed: {}",
        stderr_text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Chunk lines start with the chunk number in brackets: `[   0] ...`.
    let numbered: Vec<u64> = stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (num, _) = rest.split_once(']')?;
            num.trim().parse().ok()
        })
        .collect();
    let per_chunk: Vec<u64> = (0..chunks as u64).collect();
    let with_end: Vec<u64> = (0..=chunks as u64).collect();
    assert!(
        numbered == per_chunk || numbered == with_end,
        "expected one numbered line per chunk (0..{chunks}, optionally one for the end), got \
         {numbered:?}:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .all(|l| serde_json::from_str::<Map<String, Value>>(l).is_err()),
        "--timeline is for people, not JSON lines:\n{stdout}"
    );
    // The three parallel calls are visible to the person reading it.
    for id in ["call_qZx8Kd2VbN", "call_Lm3pKd2VbN", "call_Tr7wKd2VbN"] {
        assert!(
            stdout.contains(id),
            "timeline does not show {id}:\n{stdout}"
        );
    }
}

/// `toolstream replay a/parallel_calls.sse b/parallel_calls.ndjson`: both files become message
/// `parallel_calls` of conversation `replay`, so the second one's chunks look like duplicates of
/// the first one's. A user must see both replays, or one clear error — never a silent half.
#[test]
fn replay_of_two_files_with_the_same_name_does_not_silently_drop_one() {
    let anthropic = recordings_dir().join("anthropic/parallel_calls.sse");
    let bedrock = recordings_dir().join("bedrock/parallel_calls.ndjson");
    let out = toolstream()
        .arg("replay")
        .arg(&anthropic)
        .arg(&bedrock)
        .output()
        .expect("run toolstream replay");
    if !out.status.success() {
        assert_one_line_error(&out, "two files, one message id", "parallel_calls");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for id in [
        "toolu_01A09q90qw90lq917835lq9a",
        "tooluse_Hq3vPz8sT0K2mWc6Xn4Ryw",
    ] {
        assert!(
            stdout.contains(id),
            "the replay of both files does not show call {id} (exit 0, stderr {:?}):\n{stdout}",
            stderr_text(&out)
        );
    }
}
