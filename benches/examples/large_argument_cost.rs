//! In-process driver for the cost of one large argument, for instruction counts and profiles
//! (the `large_arguments` bench measures the same cases in wall time).
//!
//! It applies one OpenAI chat message whose single call carries `--kib` KiB of argument text
//! through a real sled [`Store`] in a temporary directory, then its finish chunk, flushing
//! every `--batch` inputs as the worker does, and drains the outbox. `--fragment` picks the
//! fragment sizes: `1` cycles 1–4 bytes, `4096` is 4 KiB fragments, and `0` sends as many
//! fragments as the 1–4 byte case with no text in them (they decode to no event: the
//! per-chunk cost alone). A count of the process includes building the chunks;
//! `--skip-apply 1` builds them and stops, so its count is subtracted:
//!
//! ```text
//! cargo build --release -p toolstream-benches --example large_argument_cost
//! for f in 1 0 4096; do for skip in 0 1; do
//!   perf stat -x, -e instructions:u target/release/examples/large_argument_cost \
//!     --kib 256 --fragment $f --skip-apply $skip
//! done; done
//! ```
//!
//! Per byte of argument text: ((1–4 byte case − its build) − (empty case − its build)) /
//! bytes, beside (4 KiB case − its build) / bytes. The 4 KiB case still holds the store's
//! open and the final drain; its difference between two sizes (`--kib 256` and `--kib 1024`)
//! leaves them out.
//!
//! Where `perf stat` has no hardware counters (it prints `<not supported>`, as on some
//! virtual machines), `benches/large_argument_cost.sh [KiB]` counts with callgrind inside
//! `Store::apply` and `Store::flush` only: no build to subtract, no store open, and none of
//! sled's own threads (whose spinning callgrind would count). Its figures are not the
//! `perf stat` ones (at 9a6ea16 a little higher) and are compared only with each other.

use assembler::{Config, Input, InputKind, Seq, Store};
use chunk_model::Provider;
use std::time::Instant;
use toolstream_benches::arg;
use toolstream_testkit::openai;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bytes = arg("--kib", 1024) * 1024;
    let fragment = arg("--fragment", 1);
    let batch = arg("--batch", 256).max(1);
    let skip = arg("--skip-apply", 0) == 1;
    let body = "abcdefghijklmnopqrstuvwxyz0123456789".repeat(bytes / 36 + 1);
    let text = format!("{{\"content\":\"{}\"}}", &body[..bytes.saturating_sub(14)]);
    let mut bodies = vec![openai::tool_call_chunk(
        0,
        Some("call_big"),
        Some("write_file"),
        "",
    )];
    let sizes: &[usize] = if fragment <= 1 {
        &[1, 2, 3, 4]
    } else {
        &[fragment]
    };
    let (mut at, mut k) = (0, 0);
    while at < text.len() {
        let n = sizes[k % sizes.len()].min(text.len() - at);
        // the empty case: as many fragments as 1–4 bytes make, none with text
        let piece = if fragment == 0 { "" } else { &text[at..at + n] };
        bodies.push(openai::args_chunk(0, piece));
        at += n;
        k += 1;
    }
    bodies.push(openai::finish_chunk("tool_calls"));
    if skip {
        println!("built {} chunks", bodies.len());
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), Config::default())?;
    let start = Instant::now();
    for (seq, body) in bodies.iter().enumerate() {
        let input = Input {
            kind: InputKind::Chunk,
            conversation_id: "conv_big",
            message_id: "big",
            provider: Some(Provider::OpenaiChat),
            seq: Seq::Producer(seq as u64),
            control: None,
            body,
            origin: None,
        };
        let _applied = store.apply(&input, 0)?;
        if (seq + 1) % batch == 0 {
            store.flush()?;
        }
    }
    store.flush()?;
    let mut rows = 0;
    loop {
        let peeked = store.outbox_peek(64)?;
        if peeked.is_empty() {
            break;
        }
        for r in peeked {
            rows += 1;
            store.outbox_remove(r.key)?;
        }
    }
    let spent = start.elapsed();
    println!(
        "{} chunks, {} bytes of text, {} outbox rows: {:.1} ms",
        bodies.len(),
        if fragment == 0 { 0 } else { text.len() },
        rows,
        spent.as_secs_f64() * 1e3
    );
    Ok(())
}
