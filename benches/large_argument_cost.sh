#!/bin/sh
# Instructions per byte of one large argument (examples/large_argument_cost.rs), counted by
# callgrind inside `Store::apply` and `Store::flush` only: repeatable on a shared machine, and
# blind to what the driver does around them (building the chunks) and to sled's own threads.
# Prints the three cases and, per byte of argument text, what 1-4 byte fragments cost on top
# of as many fragments with no text (appending the text itself) beside what 4 KiB fragments
# cost (issue 11 asks for at most 2x).
# Usage: benches/large_argument_cost.sh [KiB] [path/to/large_argument_cost binary]
# (build it first: cargo build --release -p toolstream-benches --example large_argument_cost)
set -eu
kib=${1:-256}
bin=${2:-target/release/examples/large_argument_cost}
out=$(mktemp -d)
for f in 1 0 4096; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$f.cg" \
        --toggle-collect='assembler::store::Store::apply' \
        --toggle-collect='assembler::store::Store::flush' \
        "$bin" --kib "$kib" --fragment "$f" > /dev/null 2>&1
    callgrind_annotate "$out/$f.cg" 2>/dev/null |
        awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' > "$out/$f.ir"
done
tiny=$(cat "$out/1.ir")
empty=$(cat "$out/0.ir")
big=$(cat "$out/4096.ir")
bytes=$((kib * 1024))
printf '%-34s %14s\n' case instructions
printf '%-34s %14s\n' "1-4 byte fragments" "$tiny" "as many empty fragments" "$empty" \
    "4 KiB fragments" "$big"
printf 'per byte: 1-4 byte fragments on top of empty ones %s, 4 KiB fragments %s, ratio %s\n' \
    "$(((tiny - empty) / bytes))" "$((big / bytes))" \
    "$(awk -v a="$((tiny - empty))" -v b="$big" 'BEGIN { printf "%.1fx", a / b }')"
rm -r "$out"
