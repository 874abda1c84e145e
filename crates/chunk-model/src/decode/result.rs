//! Tool-result decoder stub: replaced by the real decoder.

use crate::call::ResultInput;
use crate::error::{excerpt, DecodeError};

/// Decodes one message from `toolstream.results.<conv>.<msg>`.
pub fn decode_result(body: &[u8]) -> Result<Vec<ResultInput>, DecodeError> {
    Err(DecodeError::BadResult { problem: "not written yet".into(), excerpt: excerpt(body) })
}
