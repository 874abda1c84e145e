//! [`FinishReason`]: a finish/stop reason in any shape a provider has shipped, and
//! [`finish_of_any_word`], the vocabulary shared by every provider's words.

use super::{Loose, LooseVisitor};
use crate::chunk::Finish;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// A finish/stop reason in any shape a provider has shipped.
#[derive(Debug, Clone, PartialEq)]
pub enum FinishReason<'a> {
    /// The usual string (`"tool_calls"`, `"end_turn"`, `"STOP"`, `"tool-calls"`).
    Word(Cow<'a, str>),
    /// An object: the AI SDK v6 `LanguageModelV3FinishReason` `{"unified", "raw"}` (either
    /// may be missing; other members are ignored).
    Pair {
        /// The AI SDK's provider-independent word (`tool-calls`, `length`, ...).
        unified: Option<Cow<'a, str>>,
        /// The provider's own word (`tool_calls`, `max_tokens`, ...).
        raw: Option<Cow<'a, str>>,
    },
    /// Any other JSON (number, boolean, array): no readable reason.
    Unreadable,
}

impl<'a> FinishReason<'a> {
    /// The normalized meaning and the reason word, or `None` when there is none (blank,
    /// unreadable). A string is normalized by `own`, the decoder's vocabulary; an object's
    /// `unified` word (else its `raw` word) by [`finish_of_any_word`].
    pub fn read(self, own: fn(&str) -> Finish) -> Option<(Finish, String)> {
        fn non_blank(s: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
            s.filter(|t| !t.trim().is_empty())
        }
        match self {
            FinishReason::Word(w) if !w.trim().is_empty() => Some((own(&w), w.into_owned())),
            FinishReason::Word(_) | FinishReason::Unreadable => None,
            FinishReason::Pair { unified, raw } => non_blank(unified)
                .or_else(|| non_blank(raw))
                .map(|w| (finish_of_any_word(&w), w.into_owned())),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for FinishReason<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FinishVisitor)
    }
}

struct FinishVisitor;

impl<'de> Visitor<'de> for FinishVisitor {
    type Value = FinishReason<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a finish reason")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(FinishReason::Word(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(FinishReason::Word(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(FinishReason::Word(Cow::Owned(v)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut unified = None;
        let mut raw = None;
        while let Some(key) = map.next_key::<Loose<'de>>()? {
            match key.into_text().as_deref() {
                Some("unified") => unified = map.next_value::<Option<Loose<'de>>>()?,
                Some("raw") => raw = map.next_value::<Option<Loose<'de>>>()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(FinishReason::Pair {
            unified: unified.and_then(Loose::into_text),
            raw: raw.and_then(Loose::into_text),
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        LooseVisitor
            .visit_seq(seq)
            .map(|_| FinishReason::Unreadable)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(FinishReason::Unreadable)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(FinishReason::Unreadable)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(FinishReason::Unreadable)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(FinishReason::Unreadable)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(FinishReason::Unreadable)
    }
}

/// Normalizes a finish word of any provider's vocabulary (used for the AI SDK v6 object,
/// whose `unified` word is the AI SDK's and whose `raw` word is the underlying provider's).
#[must_use]
pub fn finish_of_any_word(word: &str) -> Finish {
    match word {
        "length"
        | "max_tokens"
        | "MAX_TOKENS"
        | "max_output_tokens"
        | "incomplete"
        | "model_context_window_exceeded" => Finish::Truncated,
        "content-filter"
        | "content_filter"
        | "content_filtered"
        | "refusal"
        | "guardrail_intervened"
        | "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY" => Finish::Filtered,
        "error" | "MALFORMED_FUNCTION_CALL" => Finish::Error,
        _ => Finish::Complete,
    }
}
