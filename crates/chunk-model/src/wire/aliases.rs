//! The one provider alias table: every name `Toolstream-Provider` (and a history `target`)
//! accepts for a provider's wire format. [`crate::Provider::parse`] reads it for stream
//! formats; [`crate::encode::HistoryFormat`]'s parser reads its own canonical names first and
//! then this table, so a vendor name means the same format in both places.
//!
//! The one intended difference: `mistral` as a *history target* is
//! [`crate::encode::HistoryFormat::Mistral`] (OpenAI chat with Mistral's 9-character id
//! rule), while a Mistral *stream* is [`Provider::OpenaiChat`]; both answer the same stream
//! format ([`crate::encode::HistoryFormat::provider`]).
//!
//! Names are matched ASCII-case-insensitively, after trimming whitespace.

use crate::provider::Provider;

/// `(name, format)`: canonical names first, then vendor aliases.
pub const PROVIDER_NAMES: &[(&str, Provider)] = &[
    ("openai-chat", Provider::OpenaiChat),
    ("openai-responses", Provider::OpenaiResponses),
    ("anthropic", Provider::Anthropic),
    ("gemini", Provider::Gemini),
    ("bedrock", Provider::Bedrock),
    ("ollama", Provider::Ollama),
    ("ai-sdk", Provider::AiSdk),
    // every OpenAI-compatible host speaks Chat Completions
    ("openai", Provider::OpenaiChat),
    ("azure", Provider::OpenaiChat),
    ("azure-openai", Provider::OpenaiChat),
    ("mistral", Provider::OpenaiChat),
    ("groq", Provider::OpenaiChat),
    ("deepseek", Provider::OpenaiChat),
    ("xai", Provider::OpenaiChat),
    ("grok", Provider::OpenaiChat),
    ("openrouter", Provider::OpenaiChat),
    ("litellm", Provider::OpenaiChat),
    ("vllm", Provider::OpenaiChat),
    ("ollama-v1", Provider::OpenaiChat),
    ("together", Provider::OpenaiChat),
    ("fireworks", Provider::OpenaiChat),
    ("responses", Provider::OpenaiResponses),
    ("claude", Provider::Anthropic),
    ("vertex", Provider::Gemini),
    ("google", Provider::Gemini),
    ("aws-bedrock", Provider::Bedrock),
    ("aisdk", Provider::AiSdk),
    ("vercel-ai", Provider::AiSdk),
];

/// The format `name` means (canonical or alias, any case), if any.
pub fn lookup(name: &str) -> Option<Provider> {
    let name = name.trim();
    PROVIDER_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_its_canonical_name_first() {
        for (i, p) in Provider::ALL.into_iter().enumerate() {
            assert_eq!(PROVIDER_NAMES[i], (p.as_str(), p));
        }
        let mut names: Vec<&str> = PROVIDER_NAMES.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PROVIDER_NAMES.len(), "a name listed twice");
        for (n, _) in PROVIDER_NAMES {
            assert_eq!(*n, n.to_ascii_lowercase(), "{n}");
        }
    }

    #[test]
    fn history_targets_and_stream_formats_agree_on_every_name() {
        use crate::encode::HistoryFormat;
        for (name, provider) in PROVIDER_NAMES {
            let history = name.parse::<HistoryFormat>();
            match HistoryFormat::for_provider(*provider) {
                Some(_) => {
                    let history = history.unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(history.provider(), *provider, "{name}");
                    let json: HistoryFormat = serde_json::from_str(&format!("\"{name}\"")).unwrap();
                    assert_eq!(json, history, "{name}");
                }
                None => assert!(history.is_err(), "{name}"),
            }
        }
        // the one difference: Mistral's history has its own id rule
        assert_eq!("mistral".parse(), Ok(HistoryFormat::Mistral));
        assert_eq!(Provider::parse("mistral"), Some(Provider::OpenaiChat));
        for f in HistoryFormat::ALL {
            assert_eq!(f.as_str().parse(), Ok(f));
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{f}\""));
        }
    }

    #[test]
    fn lookups_ignore_case_and_surrounding_space() {
        assert_eq!(lookup(" Groq "), Some(Provider::OpenaiChat));
        assert_eq!(lookup("VERTEX"), Some(Provider::Gemini));
        assert_eq!(lookup("nope"), None);
    }
}
