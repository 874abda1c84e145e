//! Decoder stub: replaced by the real decoder.

use crate::chunk::ChunkEvent;
use crate::error::DecodeError;
use crate::provider::Provider;

/// Decodes one chunk (already trimmed, never `[DONE]`).
pub fn decode(chunk: &[u8]) -> Result<Vec<ChunkEvent>, DecodeError> {
    Err(DecodeError::bad_field(Provider::OpenaiChat, "", "decoder not written yet", chunk))
}
