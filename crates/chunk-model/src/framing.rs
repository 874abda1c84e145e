//! Framing stub: replaced by the real SSE/NDJSON reader.
