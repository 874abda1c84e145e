//! The one subject-token rule, for every token toolstream builds or checks: a conversation or
//! message id, a part of the subject prefix, a conversation named on the command line.
//!
//! **A token is valid when it is non-empty, holds no `.` (the separator) and none of the five
//! bytes nats-server reads as whitespace in a subject (space, `\t`, `\n`, `\r`, `\f`), and is
//! not a lone `*` or `>` (the wildcards).** That is exactly the literal token nats-server
//! accepts on publish (`server/sublist.go`: `isValidSubject` and `subjectIsLiteral`), so
//! toolstream refuses nothing a producer could publish and builds nothing the server refuses.
//! Everything else is an ordinary character: `:` (which is why the `Nats-Msg-Id` formats
//! escape it), `-`, `_`, non-ASCII text, and `*` or `>` inside a longer token (`a*b` is a
//! literal; only a whole `*`/`>` token is a wildcard). NATS recommends `a-z A-Z 0-9 - _` for
//! portability; toolstream does not require it.
//!
//! Before this module there were five rules with five character sets (the CLI's publish,
//! replay and tail refused `*`/`>` anywhere, replay refused all Unicode whitespace, the
//! prefix check missed `\n`/`\r`/`\f`); they all use [`check_token`] now.

/// Why a string is not a subject token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The empty string.
    #[error("is empty")]
    Empty,
    /// Holds the separator `.`.
    #[error("holds a '.' (the subject separator)")]
    Dot,
    /// Holds a byte nats-server reads as whitespace.
    #[error("holds whitespace ({0:?}), which nats-server refuses in a subject")]
    Whitespace(char),
    /// Is a lone wildcard.
    #[error("is the wildcard {0:?}")]
    Wildcard(char),
}

/// The bytes nats-server refuses anywhere in a subject.
pub const SUBJECT_WHITESPACE: [char; 5] = [' ', '\t', '\n', '\r', '\x0c'];

/// Checks `token` against the rule in the module docs.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if let Some(c) = token.chars().find(|c| SUBJECT_WHITESPACE.contains(c)) {
        return Err(TokenError::Whitespace(c));
    }
    if token.contains('.') {
        return Err(TokenError::Dot);
    }
    match token {
        "*" => Err(TokenError::Wildcard('*')),
        ">" => Err(TokenError::Wildcard('>')),
        _ => Ok(()),
    }
}

/// Whether `token` is a valid subject token ([`check_token`]).
pub fn is_token(token: &str) -> bool {
    check_token(token).is_ok()
}

/// Checks a subject prefix: one or more valid tokens joined by `.` (`toolstream`, `acme.ts`).
pub fn check_prefix(prefix: &str) -> Result<(), TokenError> {
    prefix.split('.').try_for_each(check_token)
}

/// `text` made into a valid token: every `.` and whitespace byte becomes `_`, a lone wildcard
/// becomes `_`, and the empty string becomes `fallback`.
pub fn sanitize_token(text: &str, fallback: &str) -> String {
    let token: String = text
        .chars()
        .map(|c| {
            if c == '.' || SUBJECT_WHITESPACE.contains(&c) {
                '_'
            } else {
                c
            }
        })
        .collect();
    match token.as_str() {
        "" => fallback.to_string(),
        "*" | ">" => "_".to_string(),
        _ => token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_rule_is_nats_servers_literal_token() {
        for ok in [
            "c1", "k11:a", "a*b", "a>", "*a", "ü", "conv-1_x", "%2E", "\u{a0}",
        ] {
            assert_eq!(check_token(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(check_token(""), Err(TokenError::Empty));
        assert_eq!(check_token("a.b"), Err(TokenError::Dot));
        assert_eq!(check_token("*"), Err(TokenError::Wildcard('*')));
        assert_eq!(check_token(">"), Err(TokenError::Wildcard('>')));
        for (bad, c) in [("a b", ' '), ("a\tb", '\t'), ("a\n", '\n'), ("\r", '\r')] {
            assert_eq!(check_token(bad), Err(TokenError::Whitespace(c)), "{bad:?}");
        }
        assert_eq!(check_token("a\x0cb"), Err(TokenError::Whitespace('\x0c')));
    }

    #[test]
    fn prefixes_are_dotted_tokens() {
        assert_eq!(check_prefix("toolstream"), Ok(()));
        assert_eq!(check_prefix("acme.ts"), Ok(()));
        assert_eq!(check_prefix("acme..ts"), Err(TokenError::Empty));
        assert_eq!(check_prefix("acme."), Err(TokenError::Empty));
        assert_eq!(check_prefix("acme.>"), Err(TokenError::Wildcard('>')));
        assert_eq!(check_prefix("a cme"), Err(TokenError::Whitespace(' ')));
    }

    #[test]
    fn file_names_sanitize_to_tokens() {
        assert_eq!(sanitize_token("parallel calls", "m"), "parallel_calls");
        assert_eq!(sanitize_token("a.b*c>d", "m"), "a_b*c>d");
        assert_eq!(sanitize_token("", "message"), "message");
        assert_eq!(sanitize_token(">", "m"), "_");
    }

    proptest! {
        #[test]
        fn sanitized_text_is_always_a_token(text in ".{0,12}") {
            prop_assert!(is_token(&sanitize_token(&text, "m")));
        }

        #[test]
        fn a_valid_token_is_one_token_of_a_subject(token in "[^.]{1,12}") {
            // a valid token never splits or vanishes inside a subject
            if is_token(&token) {
                let subject = format!("p.{token}.x");
                prop_assert_eq!(subject.split('.').nth(1), Some(token.as_str()));
            }
        }
    }
}
