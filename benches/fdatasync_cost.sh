#!/bin/sh
# What the disk under the store costs per flush, alone: COUNT writes of BYTES bytes to a file
# in DIR, each followed by fdatasync (as a flush appends to its log, then syncs it), and the
# percentiles of the fdatasync times in ms, with the system CPU time per flush (its write and
# fdatasync) in µs. Compare with the worker's toolstream_batch_flush_seconds: a flush much
# slower than its fdatasync waits for CPU, not for the disk.
# Two ways to write, alternating, twice each:
# - append: the file grows with every write, as the flush log's segments do now, so every
#   fdatasync also writes the file's new size;
# - prefilled: the same writes over a file first filled with zeros to its final size and
#   synced, so no fdatasync changes the file's size (what a flush log with preallocated
#   segments would pay).
# The gap between the two depends on the filesystem and its journal. The system CPU time is
# what the kernel's clock ticks sampled: compare runs of a few thousand flushes, not single ones.
# Usage, from the repository root: benches/fdatasync_cost.sh [COUNT] [BYTES] [DIR]
# (defaults 2000, 2048 and target/: the disk the tests' stores use)
set -eu
[ $# -le 3 ] || { echo "usage: $0 [COUNT] [BYTES] [DIR]" >&2; exit 2; }
count=${1:-2000}
bytes=${2:-2048}
dir=${3:-${CARGO_TARGET_DIR:-target}}
for n in "$count" "$bytes"; do
    case "$n" in '' | *[!0-9]* | 0*) echo "$0: '$n' is not a positive number" >&2; exit 2 ;; esac
done
[ -d "$dir" ] || { echo "$0: no directory $dir" >&2; exit 1; }
command -v python3 > /dev/null || { echo "$0: python3 not found (apt-get install python3)" >&2; exit 1; }
exec python3 - "$count" "$bytes" "$dir" <<'PY'
import os, resource, sys, tempfile, time
count, size, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def run(mode):
    fd, path = tempfile.mkstemp(prefix="fdatasync_cost.", dir=where)
    try:
        if mode == "prefilled":
            zeros = b"\0" * (1 << 20)
            left = count * size
            while left > 0:
                left -= os.write(fd, zeros[: min(left, len(zeros))])
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        block, took = b"x" * size, []
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for _ in range(count):
            os.write(fd, block)
            t = time.perf_counter()
            os.fdatasync(fd)
            took.append((time.perf_counter() - t) * 1000)
        system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    at = lambda p: took[min(len(took) - 1, int(p * len(took)))]
    print("%-9s  fdatasync ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f   system CPU per write and sync %.1f us"
          % (mode, at(0.5), at(0.9), at(0.99), at(0.999), took[-1], system / count * 1e6))

print("fdatasync after a %d-byte write, %d times, in %s" % (size, count, where))
for _ in range(2):
    for mode in ("append", "prefilled"):
        run(mode)
PY
