//! What a fuzz corpus exercised, by the targets' own counts:
//! `cargo run -p toolstream-fuzz-targets --example corpus_stats -- <target> <dir>`
//! (`assembler`, `previews` or `checkpoint`; `dir` e.g. `fuzz/corpus/assembler`).

use fuzz_targets::assembler_target::Setup;
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(target), Some(dir)) = (args.next(), args.next()) else {
        eprintln!("usage: corpus_stats <assembler|previews|checkpoint> <dir>");
        std::process::exit(2);
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut totals = [0usize; 6];
    for f in &files {
        // (a running fuzzer replaces files as it reduces them)
        let Ok(data) = std::fs::read(f) else {
            continue;
        };
        match target.as_str() {
            "assembler" => {
                let c = fuzz_targets::assembler_checked(&data);
                let on = Setup::read(&data).0.previews.is_some();
                for (t, v) in totals.iter_mut().zip([
                    usize::from(on),
                    c.events,
                    c.completed_compared,
                    c.deltas,
                    c.partials,
                    c.delta_prefixes_compared,
                ]) {
                    *t += v;
                }
            }
            "previews" => {
                let c = fuzz_targets::previews_checked(&data);
                totals[0] += c.values;
                totals[1] += usize::from(c.whole_compared);
            }
            "checkpoint" => {
                let c = fuzz_targets::checkpoint_checked(&data);
                totals[0] += usize::from(data.first().is_some_and(|b| b % 2 == 1));
                totals[1] += usize::from(c.imported);
                totals[2] += c.snapshots_compared;
            }
            other => {
                eprintln!("unknown target {other}");
                std::process::exit(2);
            }
        }
    }
    let names: &[&str] = match target.as_str() {
        "assembler" => &[
            "with previews",
            "events",
            "completed compared",
            "deltas",
            "partials compared",
            "delta prefixes compared",
        ],
        "previews" => &["prefix values", "whole texts compared"],
        _ => &["structured", "imported", "snapshots compared"],
    };
    println!("{} inputs", files.len());
    for (name, total) in names.iter().zip(totals) {
        println!("{name}: {total}");
    }
    Ok(())
}
