//! Windows over a rendered history that never separate a call from its results.
//!
//! Messages are tagged with the stored message (turn) they come from; a call and its results
//! always share a turn and are contiguous. The window keeps the last `n` messages, then widens
//! backwards to the first message of the turn it starts in. So the kept history can be longer
//! than `n`, never shorter (unless the whole history is), and never begins with a result whose
//! call was dropped.

/// Keeps the last `n` tagged messages (all when `n` is `None`), widened to a turn boundary.
pub fn last<T>(messages: Vec<(usize, T)>, n: Option<usize>) -> Vec<(usize, T)> {
    let Some(n) = n else {
        return messages;
    };
    let mut start = messages.len().saturating_sub(n);
    while start > 0 && start < messages.len() {
        let same_turn = match (messages.get(start - 1), messages.get(start)) {
            (Some((a, _)), Some((b, _))) => a == b,
            _ => false,
        };
        if !same_turn {
            break;
        }
        start -= 1;
    }
    messages.into_iter().skip(start).collect()
}
