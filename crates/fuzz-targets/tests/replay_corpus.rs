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

fn hand_written(target: &str, name: &str) -> Vec<u8> {
    seeds::hand_written()
        .into_iter()
        .find(|s| s.target == target && s.name == name)
        .map(|s| s.data)
        .unwrap_or_else(|| panic!("no {target} seed {name}"))
}

#[test]
fn inputs_without_a_header_run_with_previews_off_as_before() {
    use fuzz_targets::assembler_target::{encode, ops, Setup};
    // every committed assembler input (seeds without a header, regressions) starts below the
    // header byte, so it decodes to the same ops as before the header existed
    let plain = hand_written("assembler", "two-calls-completed");
    let (setup, rest) = Setup::read(&plain);
    assert_eq!(setup, Setup::default());
    assert_eq!(rest, &plain[..]);
    assert_eq!(encode(&ops(rest)), plain);
    let root = seeds::fuzz_dir().join("regressions/assembler");
    for file in files(&root) {
        let data = std::fs::read(&file).unwrap();
        assert_eq!(Setup::read(&data).0, Setup::default(), "{}", file.display());
    }
    // a header reads back as the setup it was written from
    let with = hand_written("assembler", "two-calls-completed-previews-throttled");
    let (setup, rest) = Setup::read(&with);
    assert!(setup.previews.is_some() && setup.message_cache_entries == Some(1));
    assert_eq!(setup.header(), with[..5].to_vec());
    assert_eq!(rest, &plain[..]);
    let off = assembler_checked(&plain);
    assert_eq!(off.deltas, 0, "previews are off without a header");
}

#[test]
fn the_assembler_target_checks_deltas_when_previews_are_on() {
    // a delta per chunk: the calls' deltas are checked against their final arguments and
    // their partial parses
    let every = assembler_checked(&hand_written("assembler", "two-calls-completed-previews"));
    assert!(every.deltas >= 3, "{every:?}");
    assert!(every.partials >= 3, "{every:?}");
    assert_eq!(every.delta_prefixes_compared, 2, "{every:?}");
    assert_eq!(every.completed_compared, 2, "{every:?}");
    // throttled, texts read back from storage (a cache of one message)
    let throttled = assembler_checked(&hand_written(
        "assembler",
        "reordered-and-duplicated-previews-throttled",
    ));
    assert!(throttled.deltas >= 1, "{throttled:?}");
    assert_eq!(throttled.delta_prefixes_compared, 1, "{throttled:?}");
    assert!(throttled.deltas < every.deltas + 10);
}

#[test]
fn the_previews_target_compares_whole_texts_with_their_parse() {
    let all = seeds::all(&seeds::recordings_dir()).unwrap();
    let previews: Vec<_> = all.iter().filter(|s| s.target == "previews").collect();
    assert!(
        previews.iter().any(|s| s.name.starts_with("openai-chat")),
        "argument texts from the recordings"
    );
    // (a custom tool's free text is no JSON: it has no value, the rest do)
    let mut compared = 0;
    let mut with_values = 0;
    for s in &previews {
        let checked = fuzz_targets::previews_checked(&s.data);
        with_values += usize::from(checked.values > 0);
        compared += usize::from(checked.whole_compared);
    }
    assert!(
        with_values + 2 >= previews.len(),
        "{with_values} of {}",
        previews.len()
    );
    assert!(
        compared >= previews.len() / 2,
        "{compared} of {}",
        previews.len()
    );
    // a text that never starts JSON has no value and is not compared
    let none = fuzz_targets::previews_checked(b"x{\"a\":1}");
    assert_eq!(none, fuzz_targets::PreviewsChecked::default());
}

#[test]
fn the_checkpoint_target_imports_an_undamaged_export_equal_and_refuses_damage() {
    let untouched = fuzz_targets::checkpoint_checked(&hand_written(
        "checkpoint",
        "two-calls-completed-untouched",
    ));
    assert!(untouched.imported);
    assert_eq!(untouched.snapshots_compared, 1, "{untouched:?}");
    let raw =
        fuzz_targets::checkpoint_checked(&hand_written("checkpoint", "two-calls-completed-export"));
    assert!(raw.imported, "a raw export imports");
    // a cut file is refused (its record count does not match)
    let cut =
        fuzz_targets::checkpoint_checked(&hand_written("checkpoint", "two-calls-completed-cut"));
    assert!(!cut.imported, "{cut:?}");
    let empty = fuzz_targets::checkpoint_checked(&hand_written("checkpoint", "empty"));
    assert!(!empty.imported);
    let magic = fuzz_targets::checkpoint_checked(&hand_written("checkpoint", "magic-only"));
    assert!(magic.imported, "a checkpoint of no pairs is an empty store");
}
