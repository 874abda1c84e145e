//! Id mapping properties: mapped ids satisfy the target's rules, distinct stored ids stay
//! distinct, the mapping is deterministic, and valid ids pass unchanged.

use chunk_model::encode::{HistoryFormat, IdMap, IdRule};
use proptest::prelude::*;
use std::collections::HashSet;

fn satisfies(format: HistoryFormat, id: &str) -> bool {
    let word = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match format {
        HistoryFormat::OpenaiChat | HistoryFormat::OpenaiResponses => {
            (1..=40).contains(&id.chars().count())
        }
        HistoryFormat::Anthropic => word,
        HistoryFormat::Mistral => id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()),
        HistoryFormat::Bedrock => word && id.len() <= 64,
        HistoryFormat::Gemini | HistoryFormat::Ollama => !id.is_empty(),
    }
}

/// Ids as providers and clients produce them, plus hostile ones.
fn id_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "call_[a-zA-Z0-9]{24}",
        "toolu_[a-zA-Z0-9]{24}",
        "[a-zA-Z0-9]{9}",
        "call_[0-9]",
        "[a-zA-Z0-9_-]{30,80}",
        "\\PC{1,60}",
        Just(String::new()),
        Just("a b".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mapped_ids_satisfy_rules_and_stay_distinct(
        keys in proptest::collection::vec((0usize..4, id_strategy()), 1..40)
    ) {
        for format in HistoryFormat::ALL {
            let rule = IdRule::for_format(format);
            let map = IdMap::build(rule, keys.iter().map(|(t, id)| (*t, id.as_str())));
            let again = IdMap::build(rule, keys.iter().map(|(t, id)| (*t, id.as_str())));
            let distinct: HashSet<(usize, &str)> = keys.iter().map(|(t, id)| (*t, id.as_str())).collect();
            let mut mapped = HashSet::new();
            for (t, id) in &distinct {
                let m = map.get(*t, id);
                prop_assert!(satisfies(format, m), "{format}: {id:?} -> {m:?}");
                prop_assert_eq!(m, again.get(*t, id), "deterministic");
                prop_assert!(mapped.insert(m.to_string()), "{}: collision on {:?}", format, m);
            }
        }
    }

    #[test]
    fn valid_ids_pass_unchanged(ids in proptest::collection::hash_set("[a-zA-Z0-9]{9}", 1..20)) {
        // 9 alphanumerics are valid for every rule: nothing may be rewritten
        for format in HistoryFormat::ALL {
            let map = IdMap::build(IdRule::for_format(format), ids.iter().map(|id| (0, id.as_str())));
            for id in &ids {
                prop_assert_eq!(map.get(0, id), id.as_str());
            }
        }
    }
}

#[test]
fn a_hash_never_displaces_a_valid_id_that_comes_later() {
    // "x y" (invalid for Anthropic) is listed first; the valid ids after it keep their value.
    let keys = [(0, "x y"), (0, "call_1"), (1, "call_2")];
    let map = IdMap::build(IdRule::Anthropic, keys);
    assert_eq!(map.get(0, "call_1"), "call_1");
    assert_eq!(map.get(1, "call_2"), "call_2");
    assert!(map.get(0, "x y").starts_with("toolu_"));
}

#[test]
fn openai_ids_longer_than_40_chars_are_hashed() {
    let long = "call_".to_string() + &"a".repeat(60);
    let map = IdMap::build(IdRule::MaxLen40, [(0, long.as_str())]);
    let m = map.get(0, &long);
    assert!(m.len() <= 40 && m.starts_with("call_"), "{m}");
}
