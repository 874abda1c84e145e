//! The fuzz smoke run CI does on stable: every target replays the seeds made from
//! `tests/recordings/` (the inputs `cargo fuzz` starts from) and its crash regressions
//! (`fuzz/regressions/<target>/`, one file per finding of `cargo fuzz`, kept after the fix).
//! Deterministic and fast; a target that panics fails the test naming the input.

use fuzz_targets::{assembler_checked, seeds, TARGETS};
use std::path::Path;

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn replay(target: &str, run: fn(&[u8]), name: &str, data: &[u8]) {
    let data = data.to_vec();
    let outcome = std::panic::catch_unwind(move || run(&data));
    assert!(outcome.is_ok(), "fuzz target {target} fails on {name}");
}

#[test]
fn every_target_replays_the_seeds_made_from_the_recordings() {
    let all = seeds::all(&seeds::recordings_dir()).unwrap();
    for (target, run) in TARGETS {
        let mine: Vec<_> = all.iter().filter(|s| s.target == target).collect();
        assert!(!mine.is_empty(), "no seed for {target}");
        for s in mine {
            replay(target, run, &s.name, &s.data);
        }
    }
    // every provider's recordings are in the decode seeds
    for p in fuzz_targets::PROVIDERS {
        assert!(
            all.iter()
                .any(|s| s.target == "decode" && s.name.starts_with(p.as_str())),
            "no decode seed for {p}"
        );
    }
}

#[test]
fn every_target_replays_its_crash_regressions() {
    let root = seeds::fuzz_dir().join("regressions");
    assert!(root.is_dir(), "{} is missing", root.display());
    let mut replayed = 0;
    for (target, run) in TARGETS {
        for file in files(&root.join(target)) {
            let data = std::fs::read(&file).unwrap();
            replay(target, run, &file.display().to_string(), &data);
            replayed += 1;
        }
    }
    println!("{replayed} regression files replayed");
}

#[test]
fn the_assembler_target_compares_completed_arguments_with_what_was_sent() {
    // The invariant is not vacuous: the seed scripts complete calls and compare them.
    let all = seeds::hand_written();
    let script = |name: &str| {
        all.iter()
            .find(|s| s.target == "assembler" && s.name == name)
            .map(|s| s.data.clone())
            .unwrap()
    };
    let two = assembler_checked(&script("two-calls-completed"));
    assert_eq!(two.completed_compared, 2, "{two:?}");
    let reordered = assembler_checked(&script("reordered-and-duplicated"));
    assert_eq!(reordered.completed_compared, 1, "{reordered:?}");
    let lost = assembler_checked(&script("lost-chunk-gap"));
    assert_eq!(
        lost.completed_compared, 0,
        "a message that lost a chunk is not compared"
    );
    assert!(lost.events > 0);
}
