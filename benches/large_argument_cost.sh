#!/bin/sh
# Instructions per byte of one large argument (examples/large_argument_cost.rs), counted by
# callgrind inside `Store::apply` and `Store::flush` only: repeatable on a shared machine, and
# blind to what the driver does around them (building the chunks) and to sled's own threads.
# Prints the three cases (with their instructions per chunk) and, per byte of argument text,
# what 1-4 byte fragments cost on top of as many fragments with no text (appending the text
# itself) beside what 4 KiB fragments cost (issue 11 asks for at most 2x).
# Usage, from the repository root: benches/large_argument_cost.sh [KiB] [binary]
# (build the binary first, from the same checkout:
#  cargo build --release -p toolstream-benches --example large_argument_cost;
#  the default path is ${CARGO_TARGET_DIR:-target}/release/examples/large_argument_cost)
set -eu
kib=${1:-256}
bin=${2:-${CARGO_TARGET_DIR:-target}/release/examples/large_argument_cost}
for tool in valgrind callgrind_annotate; do
    command -v "$tool" > /dev/null || { echo "$0: $tool not found (apt-get install valgrind)" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "$0: no binary at $bin (build it first, see the usage above)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -r "$out"' EXIT
for f in 1 0 4096; do
    if ! valgrind --tool=callgrind --callgrind-out-file="$out/$f.cg" \
        --toggle-collect='assembler::store::Store::apply' \
        --toggle-collect='assembler::store::Store::flush' \
        "$bin" --kib "$kib" --fragment "$f" > "$out/$f.stdout" 2> "$out/$f.stderr"; then
        cat "$out/$f.stderr" >&2
        echo "$0: the --fragment $f case failed" >&2
        exit 1
    fi
    ir=$(callgrind_annotate "$out/$f.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    chunks=$(awk '{print $1}' "$out/$f.stdout")
    # nothing counted means the functions above were not found (renamed?): no figure at all
    case "$ir" in '' | 0) echo "$0: callgrind counted nothing in the --fragment $f case" >&2; exit 1 ;; esac
    echo "$ir $chunks" > "$out/$f.ir"
done
read -r tiny tiny_chunks < "$out/1.ir"
read -r empty empty_chunks < "$out/0.ir"
read -r big big_chunks < "$out/4096.ir"
bytes=$((kib * 1024))
printf '%-26s %8s %14s %10s\n' case chunks instructions per-chunk
printf '%-26s %8s %14s %10s\n' \
    "1-4 byte fragments" "$tiny_chunks" "$tiny" "$((tiny / tiny_chunks))" \
    "as many empty fragments" "$empty_chunks" "$empty" "$((empty / empty_chunks))" \
    "4 KiB fragments" "$big_chunks" "$big" "$((big / big_chunks))"
printf 'per byte: 1-4 byte fragments on top of empty ones %s, 4 KiB fragments %s, ratio %s\n' \
    "$(((tiny - empty) / bytes))" "$((big / bytes))" \
    "$(awk -v a="$((tiny - empty))" -v b="$big" 'BEGIN { printf "%.1fx", a / b }')"
