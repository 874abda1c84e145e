//! Header names of the wire contract, and the values of `Toolstream-Control`.
//!
//! Inputs (set by producers, read by the worker): [`PROVIDER`], [`SEQ`], [`CONTROL`],
//! [`MSG_ID`]. Dead letters (set by the worker, the store and the relay): [`REASON`],
//! [`SUBJECT`], [`STREAM_SEQ`], and for a cut body [`BODY_TRUNCATED`], [`BODY_SHA256`],
//! [`BODY_REF`]. Events: [`EVENT_TYPE`] and [`MSG_ID`] (= the `event_id`).

/// Input: the provider stream format (canonical name or alias, see [`super::aliases`]).
pub const PROVIDER: &str = "Toolstream-Provider";
/// Input: the 0-based chunk number within the message.
pub const SEQ: &str = "Toolstream-Seq";
/// Input: an explicit end of stream, [`CONTROL_END`] or [`CONTROL_ERROR`].
pub const CONTROL: &str = "Toolstream-Control";
/// `Toolstream-Control` value: the producer has nothing more.
pub const CONTROL_END: &str = "end";
/// `Toolstream-Control` value: the producer's stream broke (the body is the reason).
pub const CONTROL_ERROR: &str = "error";
/// Dead letter: why, `code: detail` (see [`super::DeadLetterCode`]).
pub const REASON: &str = "Toolstream-Reason";
/// Dead letter: the subject the input was published to.
pub const SUBJECT: &str = "Toolstream-Subject";
/// Dead letter: the input's JetStream stream sequence.
pub const STREAM_SEQ: &str = "Toolstream-Stream-Seq";
/// Dead letter with a cut body: the original body size in bytes.
pub const BODY_TRUNCATED: &str = "Toolstream-Body-Truncated";
/// Dead letter with a cut body: lowercase hex SHA-256 of the whole body.
pub const BODY_SHA256: &str = "Toolstream-Body-Sha256";
/// Dead letter with a cut body stored whole: `<bucket>/dlq_<sha256>`.
pub const BODY_REF: &str = "Toolstream-Body-Ref";
/// Event: its `type` (`tool_call.completed`, ...).
pub const EVENT_TYPE: &str = "Toolstream-Event-Type";
/// JetStream's de-duplication header (formats in [`super::msg_id`]).
pub const MSG_ID: &str = "Nats-Msg-Id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_distinct_and_valid_header_names() {
        let all = [
            PROVIDER,
            SEQ,
            CONTROL,
            REASON,
            SUBJECT,
            STREAM_SEQ,
            BODY_TRUNCATED,
            BODY_SHA256,
            BODY_REF,
            EVENT_TYPE,
            MSG_ID,
        ];
        let unique: std::collections::BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len());
        for name in all {
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "{name}"
            );
        }
    }
}
