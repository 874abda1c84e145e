#!/usr/bin/env bash
# toolstream quickstart: one command from a fresh checkout to completed tool-call events.
#
#   scripts/quickstart.sh
#
# 1. finds nats-server, installing it from the system packages when missing (apt-get);
# 2. reuses a nats-server with JetStream already answering on 127.0.0.1:4222, or starts one
#    (temporary store directory; on a free port if 4222 is taken by a server without JetStream);
# 3. builds toolstream and starts `toolstream run` with its defaults (its own temporary data
#    directory, /metrics and /healthz on a free local port);
# 4. publishes a recorded OpenAI stream with three parallel tool calls via `toolstream publish`;
# 5. prints the events as they arrive via `toolstream tail --count N` (N = what `toolstream
#    replay` says the recording produces) and the worker's counters from /metrics;
# 6. stops what it started.
#
# Every step fails loudly with what went wrong. Settings (environment):
#   QUICKSTART_NATS_PORT   port to reuse or start nats-server on (default 4222)
#   QUICKSTART_RECORDING   the recorded stream (default tests/recordings/openai-chat/parallel_calls.sse)
#   QUICKSTART_PROFILE     cargo profile, debug or release (default debug: builds faster)
#   QUICKSTART_TIMEOUT     seconds to wait for the events (default 60)
#   QUICKSTART_BIN         use this toolstream binary instead of building one
#
# On a reused server this creates (or reuses) the default streams TOOLSTREAM_IN,
# TOOLSTREAM_EVENTS, TOOLSTREAM_DLQ and the durable consumer `toolstream`, and uses a fresh
# conversation id, so it never touches anything else.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

NATS_PORT="${QUICKSTART_NATS_PORT:-4222}"
RECORDING="${QUICKSTART_RECORDING:-tests/recordings/openai-chat/parallel_calls.sse}"
PROFILE="${QUICKSTART_PROFILE:-debug}"
TIMEOUT="${QUICKSTART_TIMEOUT:-60}"

step() { printf '\n==> %s\n' "$*" >&2; }
info() { printf '    %s\n' "$*" >&2; }
die() {
  printf '\nquickstart FAILED: %s\n' "$*" >&2
  exit 1
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/toolstream-quickstart.XXXXXX")" || die "cannot create a temporary directory"
NATS_PID=""
WORKER_PID=""

cleanup() {
  local status=$?
  if [ -n "$WORKER_PID" ] && kill -0 "$WORKER_PID" 2>/dev/null; then
    step "stopping toolstream run (pid $WORKER_PID): SIGTERM, graceful drain"
    kill -TERM "$WORKER_PID" 2>/dev/null || true
    wait "$WORKER_PID" 2>/dev/null || true
  fi
  if [ -n "$NATS_PID" ] && kill -0 "$NATS_PID" 2>/dev/null; then
    step "stopping the nats-server this script started (pid $NATS_PID)"
    kill -TERM "$NATS_PID" 2>/dev/null || true
    wait "$NATS_PID" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -f "$WORK/worker.log" ]; then
    printf '\n--- last lines of the worker log ---\n' >&2
    tail -n 30 "$WORK/worker.log" >&2 || true
  fi
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers -------------------------------------------------------------------------------

# The INFO line a NATS server sends on connect, or nothing.
nats_info() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0
    IFS= read -r -t 2 line <&3 || true
    printf '%s' "${line:-}"
  ) 2>/dev/null
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
  local p
  for p in $(seq "$1" $(($1 + 200))); do
    if ! port_in_use "$p"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# HTTP GET on 127.0.0.1 without curl: prints the whole response.
http_get() {
  (
    exec 4<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&4
    cat <&4
  ) 2>/dev/null
}

find_nats_server() {
  if [ -n "${NATS_SERVER_BIN:-}" ] && [ -x "$NATS_SERVER_BIN" ]; then
    echo "$NATS_SERVER_BIN"
  elif command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  elif [ -x /usr/sbin/nats-server ]; then
    echo /usr/sbin/nats-server
  else
    return 1
  fi
}

# --- 1. nats-server ------------------------------------------------------------------------

step "nats-server"
if ! NATS_BIN="$(find_nats_server)"; then
  info "not found: installing it from the system packages"
  command -v apt-get >/dev/null 2>&1 ||
    die "nats-server is missing and apt-get is not available: install nats-server 2.9+ and re-run"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "installing nats-server needs root (no sudo available)"
    SUDO="sudo"
  fi
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nats-server >"$WORK/apt.log" 2>&1; then
    info "package not known yet: apt-get update"
    $SUDO apt-get update -qq >>"$WORK/apt.log" 2>&1 || die "apt-get update failed (see above)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nats-server >>"$WORK/apt.log" 2>&1 ||
      { cat "$WORK/apt.log" >&2; die "apt-get install nats-server failed"; }
  fi
  NATS_BIN="$(find_nats_server)" || die "nats-server still not found after installing it"
fi
info "$NATS_BIN ($("$NATS_BIN" --version 2>&1 | head -n1))"

# --- 2. a server with JetStream --------------------------------------------------------------

INFO_LINE="$(nats_info "$NATS_PORT")"
if [[ "$INFO_LINE" == INFO* ]] && [[ "$INFO_LINE" == *'"jetstream":true'* ]]; then
  PORT="$NATS_PORT"
  info "reusing the nats-server with JetStream on 127.0.0.1:$PORT"
else
  if [ -n "$INFO_LINE" ] || port_in_use "$NATS_PORT"; then
    BASE=$((NATS_PORT + 10000))
    [ "$BASE" -gt 65000 ] && BASE=14222
    PORT="$(free_port "$BASE")" || die "no free port for nats-server"
    info "127.0.0.1:$NATS_PORT is taken by something without JetStream: starting our own on $PORT"
  else
    PORT="$NATS_PORT"
    info "starting nats-server with JetStream on 127.0.0.1:$PORT (store: $WORK/jetstream)"
  fi
  "$NATS_BIN" -a 127.0.0.1 -p "$PORT" -js -sd "$WORK/jetstream" -l "$WORK/nats.log" &
  NATS_PID=$!
  for _ in $(seq 1 100); do
    kill -0 "$NATS_PID" 2>/dev/null || { cat "$WORK/nats.log" >&2 || true; die "nats-server exited at start"; }
    [[ "$(nats_info "$PORT")" == *'"jetstream":true'* ]] && break
    sleep 0.1
  done
  [[ "$(nats_info "$PORT")" == *'"jetstream":true'* ]] || die "nats-server did not answer on 127.0.0.1:$PORT within 10s"
fi
NATS_URL="nats://127.0.0.1:$PORT"

# --- 3. build and start the worker ------------------------------------------------------------

if [ -n "${QUICKSTART_BIN:-}" ]; then
  BIN="$QUICKSTART_BIN"
  [ -x "$BIN" ] || die "QUICKSTART_BIN=$BIN is not an executable"
  step "using the toolstream binary $BIN"
else
  step "building toolstream ($PROFILE)"
  command -v cargo >/dev/null 2>&1 || die "cargo is missing: install a Rust toolchain (https://rustup.rs) and re-run"
  BUILD_FLAGS=(-p toolstream --bin toolstream)
  [ "$PROFILE" = release ] && BUILD_FLAGS+=(--release)
  cargo build -q "${BUILD_FLAGS[@]}" || die "cargo build failed"
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE/toolstream"
  [ -x "$BIN" ] || die "built binary not found at $BIN"
fi

[ -f "$RECORDING" ] || die "recording $RECORDING not found"
EXPECTED="$("$BIN" replay "$RECORDING" | wc -l | tr -d ' ')" || die "toolstream replay $RECORDING failed"
[ "$EXPECTED" -gt 0 ] || die "toolstream replay says $RECORDING produces no events"

METRICS_PORT="$(free_port 9090)" || die "no free port for /metrics"
step "starting toolstream run (nats $NATS_URL, data $WORK/data, /metrics on 127.0.0.1:$METRICS_PORT)"
"$BIN" run --nats-url "$NATS_URL" --data-dir "$WORK/data" \
  --metrics-listen "127.0.0.1:$METRICS_PORT" >"$WORK/worker.log" 2>&1 &
WORKER_PID=$!
READY=""
for _ in $(seq 1 300); do
  kill -0 "$WORKER_PID" 2>/dev/null || die "toolstream run exited at start"
  if http_get "$METRICS_PORT" /healthz 2>/dev/null | head -n1 | grep -q ' 200 '; then
    READY=yes
    break
  fi
  sleep 0.1
done
[ -n "$READY" ] || die "toolstream run was not healthy (/healthz) within 30s"
info "healthy: $(http_get "$METRICS_PORT" /healthz | tail -n1)"

# --- 4. publish a recorded stream --------------------------------------------------------------

CONV="quickstart-$(date +%s)-$$"
MSG="msg-1"
step "publishing $RECORDING as conversation $CONV, message $MSG"
"$BIN" publish --nats-url "$NATS_URL" --conversation "$CONV" --message "$MSG" "$RECORDING" ||
  die "toolstream publish failed"

# --- 5. the events -----------------------------------------------------------------------------

step "events on toolstream.events.$CONV.> (expecting $EXPECTED)"
"$BIN" tail --nats-url "$NATS_URL" --conversation "$CONV" --from-start \
  --count "$EXPECTED" --timeout "${TIMEOUT}s" ||
  die "did not receive the $EXPECTED expected events within ${TIMEOUT}s"

step "worker counters (/metrics)"
http_get "$METRICS_PORT" /metrics | grep -E '^toolstream_(chunks_in_total|events_out_total|dead_letters_total|open_streams|outbox_depth) ' >&2 ||
  die "/metrics did not answer"

step "done: $EXPECTED events for $CONV"
