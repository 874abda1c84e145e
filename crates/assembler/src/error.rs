//! Storage errors: the only errors of the store. Malformed input is not an error (it is
//! dead-lettered); these mean the store itself failed and the caller should retry or nak.

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an I/O or internal error.
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
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
