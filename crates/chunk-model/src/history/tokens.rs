//! Token estimate of the rendered payload.
//!
//! With the default `tokenizer` feature: OpenAI's `o200k_base` BPE (tiktoken-rs, its ranks are
//! embedded in the crate, so it works offline), loaded once per process. Other providers'
//! tokenizers are not public; o200k is a close, documented proxy. Without the feature (or if
//! the BPE fails to load): `ceil(chars / 4)`, the usual rule of thumb for English and JSON.

/// The name reported when counting with the chars/4 estimate.
pub const ESTIMATE_NAME: &str = "chars/4";

/// Counts the tokens of `payload`; returns the count and the name of the method used.
pub fn count(payload: &str) -> (usize, &'static str) {
    #[cfg(feature = "tokenizer")]
    if let Some(bpe) = bpe() {
        return (bpe.encode_ordinary(payload).len(), "o200k_base");
    }
    (estimate(payload), ESTIMATE_NAME)
}

/// `ceil(chars / 4)`.
pub fn estimate(payload: &str) -> usize {
    payload.chars().count().div_ceil(4)
}

#[cfg(feature = "tokenizer")]
fn bpe() -> Option<&'static tiktoken_rs::CoreBPE> {
    use std::sync::OnceLock;
    static BPE: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}
