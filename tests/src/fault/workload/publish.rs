//! Publishing one message of a workload: its chunks spread over its pacing, its explicit end,
//! its results, and the copies [`super::Misbehaviour`] asks for.

use super::*;
use chunk_model::wire::{headers, InputKind, Subjects};

/// One input as published.
pub(super) struct Out {
    pub(super) subject: String,
    pub(super) headers: HeaderMap,
    pub(super) msg_id: String,
    pub(super) body: Vec<u8>,
}

pub(super) async fn publish_message(
    producer: &Producer,
    plan: &MessagePlan,
    misbehaviour: &Misbehaviour,
    mut rng: Rng,
    start: Instant,
) -> Result<Published, String> {
    let (conv, msg) = (&plan.conversation, &plan.message);
    let chunk_subject = Subjects::new(&producer.prefix).input(InputKind::Chunk, conv, msg);
    let result_subject = Subjects::new(&producer.prefix).input(InputKind::Result, conv, msg);
    let result_out = |seq: u64, r: &ResultPlan| {
        let mut h = HeaderMap::new();
        h.insert(headers::SEQ, seq.to_string().as_str());
        Out {
            subject: result_subject.clone(),
            headers: h,
            msg_id: format!("{conv}:{msg}:r{seq}"),
            body: json!({"tool_call_id": r.tool_call_id, "output": r.output})
                .to_string()
                .into_bytes(),
        }
    };
    let (before, after) = plan.results_in_order();
    let before: Vec<Out> = before.iter().map(|(s, r)| result_out(*s, r)).collect();
    let after: Vec<Out> = after.iter().map(|(s, r)| result_out(*s, r)).collect();
    let mut chunks: Vec<Out> = plan
        .published_chunks()
        .iter()
        .enumerate()
        .map(|(seq, body)| {
            let mut h = HeaderMap::new();
            h.insert(headers::PROVIDER, plan.provider.as_str());
            h.insert(headers::SEQ, seq.to_string().as_str());
            Out {
                subject: chunk_subject.clone(),
                headers: h,
                msg_id: format!("{conv}:{msg}:{seq}"),
                body: body.clone(),
            }
        })
        .collect();
    if misbehaviour.reorder_window > 1 {
        for window in chunks.chunks_mut(misbehaviour.reorder_window) {
            rng.shuffle(window);
        }
    }
    if plan.publishes_end() {
        let seq = plan.chunks.len();
        let mut h = HeaderMap::new();
        h.insert(headers::PROVIDER, plan.provider.as_str());
        h.insert(headers::SEQ, seq.to_string().as_str());
        h.insert(headers::CONTROL, headers::CONTROL_END);
        chunks.push(Out {
            subject: chunk_subject.clone(),
            headers: h,
            msg_id: format!("{conv}:{msg}:{seq}"),
            body: Vec::new(),
        });
    }

    let mut published = Published::default();
    tokio::time::sleep_until((start + plan.delay).into()).await;
    let send = |out: &Out, id: String| {
        let producer = producer.clone();
        let (subject, headers, body) = (out.subject.clone(), out.headers.clone(), out.body.clone());
        async move {
            producer
                .try_publish(&subject, headers, &id, &body)
                .await
                .map_err(|e| format!("{conv}/{msg}: {e}"))
        }
    };
    let mut dup = 0usize;
    for out in &before {
        send(out, out.msg_id.clone()).await?;
        published.inputs += 1;
    }
    let began = Instant::now();
    let n = chunks.len().max(1) as u32;
    for (i, out) in chunks.iter().enumerate() {
        // even pacing against a schedule, so slow publishes do not stretch the message
        let due = began + plan.spread * (i as u32) / n;
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        send(out, out.msg_id.clone()).await?;
        published.inputs += 1;
        if misbehaviour.duplicate_share > 0.0 && rng.chance(misbehaviour.duplicate_share) {
            dup += 1;
            send(out, format!("{}:dup{dup}", out.msg_id)).await?;
            published.inputs += 1;
            published.copies += 1;
        }
    }
    for out in &after {
        send(out, out.msg_id.clone()).await?;
        published.inputs += 1;
    }
    for round in 0..misbehaviour.repeat {
        for out in before.iter().chain(&chunks).chain(&after) {
            send(out, format!("{}:rep{round}", out.msg_id)).await?;
            published.inputs += 1;
            published.copies += 1;
        }
    }
    Ok(published)
}
