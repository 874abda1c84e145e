//! Encoder stub: replaced by the real encoders.
