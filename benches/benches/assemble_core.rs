//! Criterion bench: the pure assembly core (no decoding, no storage), in chunk events per
//! second on one core. Target: ≥ 1,000,000 events/s.
//!
//! The stream is a typical parallel-call message: two calls, each a start fragment, 118
//! argument fragments of 1–6 bytes, then a finish (239 events). Each iteration steps a fresh message
//! through every event and emits its events (started, completed, message.completed);
//! building the input events is excluded. Run:
//! `cargo bench -p toolstream-benches --bench assemble_core`.

use assembler::core::{self, Limits, MessageState, StepOutput};
use chunk_model::{CallFragment, CallRef, ChunkEvent, Finish, Provider};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};

fn stream() -> Vec<ChunkEvent> {
    let mut out = Vec::new();
    for call in 0..2u32 {
        out.push(ChunkEvent::CallFragment(CallFragment {
            at: CallRef {
                index: Some(call),
                wire_id: Some(format!("call_{call}abcdefghijklmnop")),
                item_id: None,
            },
            name: Some("get_weather".into()),
            arguments: Some(String::new()),
            ..CallFragment::default()
        }));
        out.push(ChunkEvent::args_at(call, "{\"items\":["));
        for i in 0..58 {
            out.push(ChunkEvent::args_at(call, format!("{i},{}", i * 7)));
            out.push(ChunkEvent::args_at(call, ","));
        }
        out.push(ChunkEvent::args_at(call, "0]}"));
    }
    out.push(ChunkEvent::MessageEnd {
        finish: Finish::Complete,
        reason: "tool_calls".into(),
    });
    out
}

fn bench(c: &mut Criterion) {
    let events = stream();
    let limits = Limits::default();
    let mut group = c.benchmark_group("assemble_core");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("two_calls_239_events", |b| {
        b.iter_batched(
            || events.clone(),
            |evs| {
                let mut msg = MessageState::new("conv_1", "msg_1", Some(Provider::OpenaiChat), 0);
                let mut out = StepOutput::default();
                for ev in evs {
                    core::step(&mut msg, ev, &limits, &mut out);
                }
                let done = core::complete_if_done(&mut msg);
                black_box((out, done))
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
