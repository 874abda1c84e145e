//! History policy stub: replaced by the real implementation.
