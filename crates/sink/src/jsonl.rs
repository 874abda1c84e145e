//! JSONL sink (being built).
