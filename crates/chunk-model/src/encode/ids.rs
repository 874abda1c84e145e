//! Tool-call id rules per target format, and the deterministic, collision-free mapping of
//! stored ids onto them.
//!
//! Rule: an id the target accepts is sent unchanged (first occurrence wins); any other id —
//! invalid for the target, or a repeat of an id already taken by an earlier turn — is replaced
//! by a hash of (turn, id, counter), the counter rising until the candidate is unused. Valid
//! ids are reserved before any hash is chosen, so a hash never displaces a real id. The key is
//! (turn, id): a result maps through the same key as its call, so call and result always get
//! the same id, and the same wire id reused by two turns still gets two ids.

use super::HistoryFormat;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// The id constraint of a target format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRule {
    /// OpenAI chat / Responses: 1 to 40 characters, no control characters.
    MaxLen40,
    /// Anthropic: `^[a-zA-Z0-9_-]+$`.
    Anthropic,
    /// Mistral: exactly 9 characters `[a-zA-Z0-9]`.
    Mistral9,
    /// Bedrock: `^[a-zA-Z0-9_-]+$`, at most 64 characters.
    Bedrock64,
    /// Gemini / Ollama: ids optional or absent; any non-empty string.
    Free,
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn word_chars(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl IdRule {
    /// The rule of a target format.
    pub fn for_format(format: HistoryFormat) -> IdRule {
        match format {
            HistoryFormat::OpenaiChat | HistoryFormat::OpenaiResponses => IdRule::MaxLen40,
            HistoryFormat::Anthropic => IdRule::Anthropic,
            HistoryFormat::Mistral => IdRule::Mistral9,
            HistoryFormat::Bedrock => IdRule::Bedrock64,
            HistoryFormat::Gemini | HistoryFormat::Ollama => IdRule::Free,
        }
    }

    /// Whether the target accepts `id` as it is. Never a blank id (empty or whitespace only):
    /// every parser of ours reads one as no id at all (`parse_history` then makes up a
    /// synthetic one), so sending it would not read back as the same history; a provider
    /// that takes it has nothing to match a result by either.
    pub fn accepts(self, id: &str) -> bool {
        if id.trim().is_empty() {
            return false;
        }
        match self {
            IdRule::MaxLen40 => {
                let n = id.chars().count();
                (1..=40).contains(&n) && !id.chars().any(char::is_control)
            }
            IdRule::Anthropic => word_chars(id),
            IdRule::Mistral9 => id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()),
            IdRule::Bedrock64 => id.len() <= 64 && word_chars(id),
            IdRule::Free => !id.is_empty(),
        }
    }

    /// The `counter`-th hashed candidate for (turn, id); always accepted by the rule.
    fn hashed(self, turn: usize, id: &str, counter: u32) -> String {
        let mut h = Sha256::new();
        h.update((turn as u64).to_be_bytes());
        h.update((id.len() as u64).to_be_bytes());
        h.update(id.as_bytes());
        h.update(counter.to_be_bytes());
        let digest = h.finalize();
        match self {
            IdRule::Mistral9 => digest
                .iter()
                .take(9)
                .map(|b| char::from(BASE62[usize::from(*b) % BASE62.len()]))
                .collect(),
            IdRule::MaxLen40 | IdRule::Free => hex_prefixed("call_", &digest),
            IdRule::Anthropic => hex_prefixed("toolu_", &digest),
            IdRule::Bedrock64 => hex_prefixed("tooluse_", &digest),
        }
    }
}

/// `prefix` + 32 hex digits (16 bytes) of the digest.
fn hex_prefixed(prefix: &str, digest: &[u8]) -> String {
    let mut out = String::with_capacity(prefix.len() + 32);
    out.push_str(prefix);
    for b in digest.iter().take(16) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

/// The id mapping for one rendered history.
#[derive(Debug, Clone, Default)]
pub struct IdMap {
    map: HashMap<(usize, String), String>,
}

impl IdMap {
    /// Builds the mapping for every (turn, id) key of a history, in history order.
    pub fn build<'a>(rule: IdRule, keys: impl IntoIterator<Item = (usize, &'a str)>) -> IdMap {
        let keys: Vec<(usize, &str)> = keys.into_iter().collect();
        let mut used: HashSet<String> = HashSet::new();
        let mut map: HashMap<(usize, String), String> = HashMap::new();
        for &(turn, id) in &keys {
            let key = (turn, id.to_string());
            if !map.contains_key(&key) && rule.accepts(id) && used.insert(id.to_string()) {
                map.insert(key, id.to_string());
            }
        }
        for &(turn, id) in &keys {
            let key = (turn, id.to_string());
            if map.contains_key(&key) {
                continue;
            }
            let mut counter = 0u32;
            loop {
                let candidate = rule.hashed(turn, id, counter);
                if used.insert(candidate.clone()) {
                    map.insert(key, candidate);
                    break;
                }
                counter = counter.wrapping_add(1);
            }
        }
        IdMap { map }
    }

    /// The mapped id of (turn, id); the id itself if the key was never registered.
    pub fn get<'a>(&'a self, turn: usize, id: &'a str) -> &'a str {
        self.map
            .get(&(turn, id.to_string()))
            .map(String::as_str)
            .unwrap_or(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: [IdRule; 5] = [
        IdRule::MaxLen40,
        IdRule::Anthropic,
        IdRule::Mistral9,
        IdRule::Bedrock64,
        IdRule::Free,
    ];

    #[test]
    fn a_blank_id_is_replaced_for_every_rule_and_its_result_gets_the_same_id() {
        for rule in RULES {
            for blank in [" ", "\t", "  \n"] {
                assert!(!rule.accepts(blank), "{rule:?} accepts {blank:?}");
                let map = IdMap::build(rule, [(0, blank), (0, blank)]);
                let id = map.get(0, blank);
                assert!(
                    !id.trim().is_empty() && rule.accepts(id),
                    "{rule:?}: {id:?}"
                );
            }
        }
    }

    #[test]
    fn hashed_candidates_satisfy_their_rule() {
        for rule in RULES {
            for c in 0..20 {
                let id = rule.hashed(3, "call 1/ü", c);
                assert!(rule.accepts(&id), "{rule:?} rejects its own hash {id}");
            }
        }
    }
}
