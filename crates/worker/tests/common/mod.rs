//! Shared code of the worker's integration tests. Everything lives in the testkit
//! (`toolstream_testkit::harness`, also used by the fault suite and the soak); this module only
//! adds the path of the binary under test, which Cargo gives integration tests alone
//! (`CARGO_BIN_EXE_toolstream`).
#![allow(dead_code)]

use std::path::Path;

pub use toolstream_testkit::harness::*;

/// The `toolstream` binary under test.
pub fn toolstream_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_toolstream"))
}

/// [`toolstream_testkit::harness::Worker`] running the binary under test. Derefs to it
/// (`kill`, `restart`, `terminate`, `log`, `metrics`, ...).
pub struct Worker(toolstream_testkit::harness::Worker);

impl Worker {
    /// Starts `toolstream run` on `url` with a store in `data_dir` and test-friendly timings
    /// (short ack wait, fetch expiry, tick and relay intervals), plus `extra` flags.
    pub fn start(url: &str, data_dir: &Path, extra: &[&str]) -> Worker {
        Worker::start_with_env(url, data_dir, extra, &[])
    }

    /// [`Worker::start`] with extra environment variables for the process.
    pub fn start_with_env(
        url: &str,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        Worker(toolstream_testkit::harness::Worker::start_bin(
            toolstream_bin(),
            url,
            data_dir,
            extra,
            env,
        ))
    }
}

impl std::ops::Deref for Worker {
    type Target = toolstream_testkit::harness::Worker;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
