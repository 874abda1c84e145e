//! Storage errors: the only errors of the store. Malformed input is not an error (it is
//! dead-lettered); these mean the store itself failed and the caller should retry or nak.
//!
//! The type names no storage engine: a backend maps its own errors to
//! [`StoreError::Backend`] (the sled backend does in [`crate::storage::sled_backend`]), so the
//! [`crate::storage::Storage`] seam carries no backend type.

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The storage backend reported an I/O or internal error.
    #[error("{backend}: {detail}")]
    Backend {
        /// Which backend (`sled`, `memory`).
        backend: &'static str,
        /// What kind of failure.
        kind: BackendErrorKind,
        /// The backend's own description.
        detail: String,
    },
    /// A stored record could not be read back (corruption or an incompatible version).
    #[error("corrupt record in `{space}`: {detail}")]
    Corrupt {
        /// Which keyspace.
        space: &'static str,
        /// What failed.
        detail: String,
    },
    /// A record could not be serialized (should not happen with the types stored).
    #[error("cannot encode record for `{space}`: {detail}")]
    Encode {
        /// Which keyspace.
        space: &'static str,
        /// What failed.
        detail: String,
    },
}

/// The kind of a [`StoreError::Backend`] failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendErrorKind {
    /// The operating system refused a read, write or sync.
    Io,
    /// The backend found its own files corrupt.
    Corruption,
    /// The backend was asked for something it does not support.
    Unsupported,
    /// The backend failed internally (a bug in it).
    Internal,
}
