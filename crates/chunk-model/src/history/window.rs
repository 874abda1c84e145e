//! Windows over a rendered history that never separate a call from its results.
//!
//! Each message is tagged with the span of stored messages (turns) it renders: one turn, or,
//! after [`crate::encode::merge_roles_tagged`] joined consecutive same-role messages, every turn
//! it holds (a turn's results and the next turn's orphaned-result text become one user message
//! for Anthropic, Gemini and Bedrock). A call and its results always share a turn. The window
//! keeps the last `n` messages, then widens backwards while the message before the first kept
//! one shares a turn with it. So the kept history can be longer than `n`, never shorter
//! (unless the whole history is), and never begins with a result whose call was dropped, even
//! when the message it begins with holds several turns.

use std::ops::RangeInclusive;

/// Keeps the last `n` tagged messages (all when `n` is `None`), widened so that no turn is
/// split. Tags are the turns each message covers, in non-decreasing order.
pub fn last<T>(
    messages: Vec<(RangeInclusive<usize>, T)>,
    n: Option<usize>,
) -> Vec<(RangeInclusive<usize>, T)> {
    let Some(n) = n else {
        return messages;
    };
    let mut start = messages.len().saturating_sub(n);
    while start > 0 && start < messages.len() {
        let shares_turn = match (messages.get(start - 1), messages.get(start)) {
            (Some((before, _)), Some((first, _))) => before.end() >= first.start(),
            _ => false,
        };
        if !shares_turn {
            break;
        }
        start -= 1;
    }
    messages.into_iter().skip(start).collect()
}

#[cfg(test)]
mod tests {
    use super::last;

    #[test]
    fn a_merged_message_widens_the_window_to_every_turn_it_holds() {
        // calls of turn 0 | results of 0 merged with orphan text of 1 | calls of 2
        let tagged = vec![
            (0..=0, "calls0"),
            (0..=1, "results0+orphan1"),
            (2..=2, "calls2"),
        ];
        let kept: Vec<_> = last(tagged.clone(), Some(2))
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(kept, ["calls0", "results0+orphan1", "calls2"]);
        let kept: Vec<_> = last(tagged, Some(1)).into_iter().map(|(_, m)| m).collect();
        assert_eq!(kept, ["calls2"]);
    }
}
