//! Rebuilds argument JSON from structured pieces (Vertex `partialArgs`). Stub: being built.

use crate::chunk::PathValue;
use serde_json::Value;

/// Builds the arguments object from path/value pieces in arrival order; consecutive string
/// pieces at the same path concatenate. Errors describe the first unusable path.
pub fn build(pieces: &[PathValue]) -> Result<Value, String> {
    if pieces.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    Err("partial argument rebuilding not written yet".to_string())
}
