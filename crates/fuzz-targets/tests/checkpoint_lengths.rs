//! A damaged checkpoint must cost what its file holds, not what its length fields claim.
//!
//! `Store::import_checkpoint` (crates/assembler/src/store/checkpoint.rs, `read_field`)
//! allocated each key and value at the length its 4-byte prefix stated before reading it, so a
//! file of 30 bytes whose first record claimed a 4 GiB key made it allocate 4 GiB. Where that
//! allocation cannot be had (a small node, `vm.overcommit_memory = 2`) the process aborted
//! ("memory allocation of 4294967295 bytes failed"): not an error, not even a panic. The
//! fuzzer's 4096 MB malloc limit sits one byte above the largest length a u32 can claim, so
//! `cargo fuzz run checkpoint` with the default limits did not report it; with
//! `-malloc_limit_mb=512` it did (`out-of-memory (malloc(4294967295))` on the input
//! `fuzz/regressions/checkpoint/length-prefix-allocates-4-gib`, which the replay test runs
//! too; keep `-malloc_limit_mb=512` on checkpoint runs so a regression is reported).
//!
//! This test counts the largest allocation the import makes (a counting global allocator,
//! this test binary only). The import now bounds every length by what is left of the file
//! (its size is known: `metadata().len()`): `cargo test -p toolstream-fuzz-targets --test
//! checkpoint_lengths`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only the size is noted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A checkpoint whose first record (keyspace 0) claims a key of `u32::MAX` bytes and holds 8.
fn claims_4_gib() -> Vec<u8> {
    let mut file = b"TSCKPT1\n".to_vec();
    file.push(0);
    file.extend(u32::MAX.to_le_bytes());
    file.extend(b"whatever");
    file
}

#[test]
fn a_damaged_length_prefix_costs_no_more_than_the_file_holds() {
    let dir = std::env::temp_dir().join(format!("toolstream-ckpt-len-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("checkpoint");
    std::fs::write(&file, claims_4_gib()).unwrap();
    let before = LARGEST.swap(0, Ordering::Relaxed);
    let imported = assembler::Store::import_checkpoint(
        &file,
        &dir.join("store"),
        fuzz_targets::checkpoint_target::config(),
    );
    let largest = LARGEST.load(Ordering::Relaxed);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(imported.is_err(), "a cut record is refused");
    assert!(
        largest < 256 * 1024 * 1024,
        "importing a {}-byte checkpoint allocated {largest} bytes at once (before: {before})",
        claims_4_gib().len()
    );
}

#[test]
fn the_regression_file_is_this_input() {
    // the fuzz regression replays the same bytes through the target (raw mode, byte 0)
    let path = fuzz_targets::seeds::fuzz_dir()
        .join("regressions/checkpoint/length-prefix-allocates-4-gib");
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data[0] % 2, 0, "raw mode");
    assert_eq!(&data[1..], &claims_4_gib()[..]);
}
