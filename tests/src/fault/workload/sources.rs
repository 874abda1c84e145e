//! Where a workload's messages come from: the recorded streams of `tests/recordings/` as
//! plans (with the calls their expectation completes), and generated arguments and results.

use super::*;

/// Recorded streams in one provider directory, sorted.
pub(super) fn recordings_of(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| ["sse", "ndjson", "json"].contains(&x))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// A recording as a message plan (conversation, delay and spread set by the caller).
pub(super) fn recording_plan(
    root: &Path,
    provider: &str,
    path: &Path,
) -> Result<MessagePlan, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let frames = chunk_model::framing::split(&bytes)
        .map_err(|e| format!("frame {}: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().replace(['.', ' ', '*', '>'], "_"))
        .unwrap_or_else(|| "recording".to_string());
    let source = path
        .strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string());
    Ok(MessagePlan {
        conversation: String::new(),
        message: stem,
        provider: provider.to_string(),
        source: format!("recording {source}"),
        chunks: frames.into_iter().map(|f| f.data).collect(),
        end: true,
        stop_after: None,
        results: Vec::new(),
        delay: Duration::ZERO,
        spread: Duration::ZERO,
    })
}

/// Wire ids of the calls the hand-written expectation of a recording says complete, with
/// whether the recording answers the call itself (a tool the provider ran: MCP, server tools,
/// AI SDK `tool-result` parts, Bedrock `toolResult` blocks).
pub(super) fn completed_wire_ids(
    root: &Path,
    provider: &str,
    path: &Path,
) -> Result<Vec<(String, bool)>, String> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let exp = root
        .join("expected")
        .join(provider)
        .join(format!("{stem}.json"));
    let text = std::fs::read_to_string(&exp).map_err(|e| format!("read {}: {e}", exp.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", exp.display()))?;
    let answered: Vec<&str> = v["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| r["tool_call_id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let mut ids: Vec<(String, bool)> = v["calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .filter(|c| c["status"] == "completed")
                .filter_map(|c| c["id"].as_str())
                .map(|id| (id.to_string(), answered.contains(&id)))
                .collect()
        })
        .unwrap_or_default();
    ids.dedup();
    Ok(ids)
}

pub(super) fn results_for(rng: &mut Rng, spec: &WorkloadSpec, calls: &[Call]) -> Vec<ResultPlan> {
    let mut results = Vec::new();
    for c in calls {
        if rng.chance(spec.result_share) {
            results.push(ResultPlan {
                tool_call_id: c.id.clone(),
                output: output(rng),
                before_call: rng.chance(spec.before_share),
            });
        }
    }
    results
}

pub(super) fn output(rng: &mut Rng) -> String {
    let words = if rng.chance(0.1) {
        rng.range(300, 800)
    } else {
        rng.range(1, 30)
    };
    (0..words)
        .map(|_| WORDS[rng.range(0, WORDS.len() as u64 - 1) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// JSON arguments of about `size` bytes: a few typed fields and a text of words.
pub(super) fn arguments(rng: &mut Rng, size: usize) -> Value {
    let mut text = String::new();
    while text.len() < size {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.range(0, WORDS.len() as u64 - 1) as usize]);
    }
    json!({
        "query": text,
        "limit": rng.range(1, 100),
        "exact": rng.chance(0.5),
        "ratio": (rng.range(0, 1000) as f64) / 8.0,
        "filters": {"tags": [WORDS[rng.range(0, 3) as usize], "x"], "none": null},
    })
}

/// About `size` bytes of JSON: rows of short strings (few characters to escape, so the
/// events carrying it twice, parsed and raw, stay under the server's 1 MiB max payload).
pub(super) fn big_arguments(rng: &mut Rng, size: usize) -> Value {
    let mut rows = Vec::new();
    let mut len = 0usize;
    while len < size {
        let n = rng.range(20, 80) as usize;
        let row: String = (0..n)
            .map(|_| (b'a' + rng.range(0, 25) as u8) as char)
            .collect();
        len += n + 3;
        rows.push(Value::String(row));
    }
    json!({"title": "big document", "rows": rows})
}
