#!/bin/bash
# What the worker costs when input is sparse, two builds side by side in one run: `throughput`
# (benches/throughput) paces 200 conversations at a chunk interval, and each worker build runs
# under GNU time, which reports its CPU seconds and context switches. When input is sparse,
# batches are a few inputs each and the cost of a batch (its flush, its hand-offs between
# threads, its relay round) outweighs the inputs' own; this shows it per batch.
#
# Usage, from the repository root:
#   benches/sparse_cost.sh ROUNDS INTERVAL_MS MESSAGES LABEL=WORKER_BINARY...
# e.g. (about 5 k chunks/s; `7 10` is about 26 k/s):
#   benches/sparse_cost.sh 3 30 3 before=/tmp/before/target/release/toolstream after=target/release/toolstream
# (build first: cargo build --release -p toolstream -p toolstream-throughput)
# Builds run in turn, round after round, so a noisy machine moves them alike. Per run: the
# rate, the worker's batches, latency from a call-ending chunk to its tool_call.completed
# (p50, p99, p99.9, max in ms), worker CPU seconds (user + system) and voluntary and
# involuntary context switches per batch.
set -euo pipefail
usage() {
    sed -n '8,12p' "$0" >&2
    exit 2
}
[ $# -ge 4 ] || usage
rounds=$1 interval=$2 messages=$3
shift 3
for n in "$rounds" "$interval" "$messages"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "$0: '$n' is not a positive number" >&2; usage; }
done
time_bin=/usr/bin/time
[ -x "$time_bin" ] || { echo "$0: GNU time not found at $time_bin (apt-get install time)" >&2; exit 1; }
command -v pkill > /dev/null || { echo "$0: pkill not found (apt-get install procps)" >&2; exit 1; }
throughput=${CARGO_TARGET_DIR:-target}/release/throughput
[ -x "$throughput" ] || { echo "$0: no $throughput (cargo build --release -p toolstream-throughput)" >&2; exit 1; }
for build in "$@"; do
    label=${build%%=*}
    [[ $build == *=* && $label =~ ^[A-Za-z0-9_.-]+$ ]] ||
        { echo "$0: '$build' is not LABEL=WORKER_BINARY (a label of letters, digits, . _ -)" >&2; exit 2; }
    [ -x "${build#*=}" ] || { echo "$0: no worker binary at ${build#*=}" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -r "$out"' EXIT
# `throughput` starts the worker through this script and stops it with SIGTERM: the script
# passes that on to the worker, so GNU time sees it exit and writes its report.
cat > "$out/worker.sh" <<'EOF'
#!/bin/bash
timed=
trap '[ -n "$timed" ] && pkill -TERM -P "$timed"' TERM INT
"$SPARSE_TIME" -v -o "$SPARSE_REPORT" "$SPARSE_WORKER" "$@" &
timed=$!
wait $timed || true
wait $timed
EOF
chmod +x "$out/worker.sh"
printf '%-6s %-10s %8s %8s %7s %7s %7s %7s %8s %9s %9s\n' round build 'chunks/s' batches p50 p99 p99.9 max 'CPU s' 'vcs/batch' 'ics/batch'
for round in $(seq 1 "$rounds"); do
    for build in "$@"; do
        label=${build%%=*}
        report="$out/$label.$round.time"
        if ! run=$(SPARSE_TIME=$time_bin SPARSE_REPORT=$report SPARSE_WORKER=${build#*=} \
            "$throughput" --conversations 200 --messages "$messages" \
            --chunk-interval-ms "$interval" --worker-bin "$out/worker.sh" 2>&1); then
            echo "$run" >&2
            echo "$0: the run of $label failed" >&2
            exit 1
        fi
        rate=$(awk '/^  throughput / {print $3}' <<< "$run")
        batches=$(awk '/toolstream_batches_total/ {print $2}' <<< "$run")
        latency=$(awk '$1 == "tool_call.completed" && $2 ~ /^[0-9]+$/ {print $3, $5, $6, $7}' <<< "$run")
        [ -n "$latency" ] && [ -n "$rate" ] && [ "${batches:-0}" != 0 ] ||
            { echo "$run" >&2; echo "$0: no rate, latency row or batch count in the output of $label's run" >&2; exit 1; }
        read -r p50 p99 p999 max <<< "$latency"
        [ -s "$report" ] || { echo "$0: no GNU time report for $label (the worker did not exit?)" >&2; exit 1; }
        awk -v round="$round" -v label="$label" -v rate="$rate" -v batches="$batches" \
            -v p50="$p50" -v p99="$p99" -v p999="$p999" -v max="$max" -F': ' '
            /User time/ {u = $2} /System time/ {s = $2}
            /Voluntary context/ {v = $2} /Involuntary context/ {i = $2}
            END {printf "%-6s %-10s %8s %8s %7s %7s %7s %7s %8.2f %9.2f %9.2f\n",
                round, label, rate, batches, p50, p99, p999, max, u + s, v / batches, i / batches}' "$report"
    done
done
