//! Measures history rendering: a 50-turn conversation (3 parallel calls per turn, 2,000-char
//! results) rendered into every format with the default policy. Prints messages, tokens, and
//! the mean time per render (tokenizer included). Run:
//! `cargo run --release -p chunk-model --example history_render`

use chunk_model::encode::HistoryFormat;
use chunk_model::history::{render, HistoryOptions};
use chunk_model::{
    CallOutcome, CallStatus, MessageSnapshot, MessageStatus, Provider, ToolCall, ToolResult,
};
use serde_json::{json, Map};
use std::time::Instant;

fn conversation() -> Vec<MessageSnapshot> {
    (0..50)
        .map(|t| {
            let calls: Vec<CallOutcome> = (0..3u32)
                .map(|i| {
                    let args =
                        json!({"city": format!("City {t}-{i}"), "days": i, "units": "metric"});
                    CallOutcome {
                        status: CallStatus::Completed,
                        reason: None,
                        tool_call: ToolCall {
                            id: format!("call_{t}_{i}_abcdefghijklmnopqrstuvwx"),
                            name: "get_weather".to_string(),
                            raw_arguments: args.to_string(),
                            arguments: args,
                            index: i,
                            kind: Default::default(),
                            provider_metadata: Map::new(),
                        },
                    }
                })
                .collect();
            let tool_results = calls
                .iter()
                .map(|c| ToolResult {
                    tool_call_id: c.tool_call.id.clone(),
                    output: "sunny, 18°C, light wind from the west. ".repeat(50),
                    is_error: false,
                })
                .collect();
            MessageSnapshot {
                conversation_id: "bench".to_string(),
                message_id: format!("m{t}"),
                provider: Some(Provider::OpenaiChat),
                status: MessageStatus::Completed,
                finish_reason: Some("tool_calls".to_string()),
                calls,
                tool_results,
                orphaned_results: Vec::new(),
                provider_metadata: serde_json::Map::new(),
            }
        })
        .collect()
}

fn main() {
    let snaps = conversation();
    let opts = HistoryOptions::default();
    // the first render loads the BPE once per process; report it separately
    let t0 = Instant::now();
    let first = render(&snaps, HistoryFormat::OpenaiChat, &opts);
    println!("first render (loads tokenizer): {:?}", t0.elapsed());
    if let Err(e) = first {
        eprintln!("render failed: {e}");
        return;
    }
    let rounds = 50u32;
    for format in HistoryFormat::ALL {
        let t = Instant::now();
        let mut last = None;
        for _ in 0..rounds {
            last = render(&snaps, format, &opts).ok();
        }
        let per = t.elapsed() / rounds;
        if let Some(h) = last {
            let bytes = serde_json::to_string(&h.messages)
                .map(|s| s.len())
                .unwrap_or(0);
            println!(
                "{format:17} messages={:4} bytes={bytes:7} tokens={:6} ({}) truncated={} render={per:?}",
                h.messages.len(),
                h.token_estimate,
                h.tokenizer,
                h.truncated_results,
            );
        }
    }
}
