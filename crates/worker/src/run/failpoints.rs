//! Test failpoints: crashes on purpose, for the crash and poison tests. They exist only in a
//! build with the cargo feature `failpoints` (the crate enables it for its own tests through a
//! dev-dependency on itself, so `cargo test` builds the binary with them and
//! `cargo build --release -p toolstream` leaves them out). Each is off unless its environment
//! variable is set:
//! - `TOOLSTREAM_FAILPOINT_ABORT_AFTER_PUBACKS=N`: the relay aborts the process once N
//!   publishes are confirmed, before their outbox rows are deleted;
//! - `TOOLSTREAM_FAILPOINT_HOLD_AFTER_PAYLOAD_PUTS=N`: the relay stops for good once the N-th
//!   event too large for `max_payload` is stored in the payload bucket, before that event is
//!   published (a test then SIGKILLs the process in that window);
//! - `TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES=N`: the consume loop aborts after the N-th batch
//!   flush, before the batch is acked;
//! - `TOOLSTREAM_FAILPOINT_ABORT_ON_BODY=<text>`: the consume loop aborts while applying any
//!   input whose body contains `<text>` (an input that crashes the worker: poison).
//!
//! A worker built without the feature refuses to start when any such variable is set
//! ([`refuse_unless_compiled_in`]): a crash test run against such a build fails loudly instead
//! of passing without its crash. That check matches the names lower-cased, so a release
//! binary carries no failpoint variable name at all.

/// The start of every failpoint variable's name, lower-cased (see the module docs).
const PREFIX_LOWER: &str = "toolstream_failpoint_";

/// Refuses to start when a failpoint variable is set in a build without failpoints.
pub(crate) fn refuse_unless_compiled_in() -> anyhow::Result<()> {
    check_compiled_in(
        std::env::vars_os().map(|(name, _)| name.to_string_lossy().into_owned()),
        cfg!(feature = "failpoints"),
    )
}

/// [`refuse_unless_compiled_in`] over the given variable names.
fn check_compiled_in(
    names: impl IntoIterator<Item = String>,
    compiled_in: bool,
) -> anyhow::Result<()> {
    if compiled_in {
        return Ok(());
    }
    match names
        .into_iter()
        .find(|n| n.to_ascii_lowercase().starts_with(PREFIX_LOWER))
    {
        Some(name) => anyhow::bail!(
            "{name} is set, but failpoints are not compiled in: this build cannot crash on \
             purpose (build with `--features failpoints`, as the tests do)"
        ),
        None => Ok(()),
    }
}

/// Arms the relay's failpoints (none without the feature).
pub(crate) fn arm_relay<P: sink::publisher::Publisher>(
    relay: sink::relay::Relay<P>,
) -> sink::relay::Relay<P> {
    #[cfg(feature = "failpoints")]
    let relay = relay
        .with_crash_after_confirmed(armed("TOOLSTREAM_FAILPOINT_ABORT_AFTER_PUBACKS"))
        .with_hold_after_payload_puts(armed("TOOLSTREAM_FAILPOINT_HOLD_AFTER_PAYLOAD_PUTS"));
    relay
}

/// `TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES`: the batch flush after which the consume loop
/// aborts, if armed.
#[cfg(feature = "failpoints")]
pub(crate) fn abort_after_flushes() -> Option<u64> {
    armed("TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES")
}

/// Aborts the process when `flushed` and `batches` reached the armed count (between the flush
/// and the acks of a batch).
#[cfg(feature = "failpoints")]
pub(crate) fn abort_between_flush_and_ack(armed_after: Option<u64>, flushed: bool, batches: u64) {
    if let Some(after) = armed_after {
        if flushed && batches >= after {
            tracing::error!("failpoint: aborting between flush and ack");
            std::process::abort();
        }
    }
}

/// `TOOLSTREAM_FAILPOINT_ABORT_ON_BODY`: aborts the process while applying an input whose body
/// contains the armed text.
#[cfg(feature = "failpoints")]
pub(crate) fn abort_on_body(body: &[u8]) {
    static MARKER: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    let marker = MARKER.get_or_init(|| {
        std::env::var("TOOLSTREAM_FAILPOINT_ABORT_ON_BODY")
            .ok()
            .filter(|m| !m.is_empty())
            .map(String::into_bytes)
    });
    if let Some(m) = marker {
        if body.windows(m.len()).any(|w| w == m.as_slice()) {
            tracing::error!("failpoint: aborting while applying a poison input");
            std::process::abort();
        }
    }
}

/// A numeric failpoint from the environment, logged when armed.
#[cfg(feature = "failpoints")]
fn armed(var: &str) -> Option<u64> {
    let n = std::env::var(var).ok()?.parse().ok()?;
    tracing::warn!(
        failpoint = var,
        after = n,
        "failpoint armed: the process will abort"
    );
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_build_without_failpoints_refuses_a_failpoint_variable_naming_it() {
        let err = check_compiled_in(
            names(&["PATH", "TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES"]),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("TOOLSTREAM_FAILPOINT_ABORT_AFTER_FLUSHES")
                && err.contains("not compiled in"),
            "{err}"
        );
        assert!(check_compiled_in(names(&["toolstream_failpoint_x"]), false).is_err());
    }

    #[test]
    fn other_variables_and_builds_with_failpoints_start() {
        check_compiled_in(names(&["PATH", "TOOLSTREAM_NATS_URL"]), false).unwrap();
        check_compiled_in(names(&["TOOLSTREAM_FAILPOINT_ABORT_ON_BODY"]), true).unwrap();
    }

    // The crash tests rely on this: a test build of this crate has failpoints (through the
    // dev-dependency on itself), or it does not compile.
    const _: () = assert!(cfg!(feature = "failpoints"));
}
