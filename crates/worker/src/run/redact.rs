//! What of an input may be logged. Tool-call arguments and tool results carry users' secrets,
//! and so may anything quoted from them: a dead letter's reason embeds an excerpt of the body
//! (`decode_error: openai-chat: chunk is not valid JSON (...): "<first 120 chars>"`), and
//! serde_json's own messages quote string values (`invalid type: string "…"`). The full reason
//! stays in the dead letter's `Toolstream-Reason` header, in the DLQ stream, which is access
//! controlled like the input; logs only ever get the reason's code.

/// The code of a dead-letter reason: its leading `snake_case` token (`decode_error`,
/// `no_provider`, `stream_closed`, `open_stream_limit`, ...), never anything after it. A reason
/// that does not start with such a token is `other`.
pub fn reason_code(reason: &str) -> &str {
    let end = reason
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(reason.len());
    let code = &reason[..end];
    if code.is_empty() {
        "other"
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_error_reason_is_logged_as_its_code_without_the_quoted_body() {
        let reason = "decode_error: openai-chat: chunk is not valid JSON (EOF while parsing): \
                      \"{\\\"api_key\\\": \\\"sk-SECRET\"";
        assert_eq!(reason_code(reason), "decode_error");
        assert_eq!(reason_code("no_provider"), "no_provider");
        assert_eq!(
            reason_code("stream_closed: the message already ended"),
            "stream_closed"
        );
    }

    #[test]
    fn a_reason_without_a_code_is_other() {
        assert_eq!(reason_code("\"sk-SECRET\""), "other");
        assert_eq!(reason_code(""), "other");
        assert_eq!(reason_code("Secret: x"), "other");
    }
}
