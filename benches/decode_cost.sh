#!/bin/sh
# Instructions per chunk that `chunk_model::decode::decode_routed` costs, per set of chunks of
# examples/decode_cost.rs, counted by callgrind (repeatable, unlike wall time on a shared
# machine). Usage: benches/decode_cost.sh [path/to/decode_cost binary]
# (build it first: cargo build --release -p toolstream-benches --example decode_cost)
set -eu
bin=${1:-target/release/examples/decode_cost}
out=$(mktemp -d)
sets="harness_openai_chat"
for p in openai-chat openai-responses anthropic gemini bedrock ollama ai-sdk; do
    sets="$sets typical_$p recorded_$p"
done
printf '%-28s %10s %14s %10s\n' set chunks instructions per-chunk
for set in $sets; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$set.cg" \
        --toggle-collect='chunk_model::decode::decode_routed' \
        "$bin" --only "$set" > "$out/$set.counts" 2>/dev/null
    chunks=$(awk '{print $2}' "$out/$set.counts")
    ir=$(callgrind_annotate "$out/$set.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-28s %10s %14s %10s\n' "$set" "$chunks" "$ir" "$((ir / chunks))"
done
rm -r "$out"
