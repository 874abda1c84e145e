//! Who should own how many partitions: a pure function of the live members, computed by every
//! worker alike, so no coordinator is needed.
//!
//! With `N` partitions and `W` members sorted by id, member `i` gets `N / W`, plus one for the
//! first `N % W`. Member `i` prefers partitions `k` with `k % W == i` (so a fresh cluster ends
//! up with a stable, deterministic layout and few create races), then any free one; over quota
//! it hands off the ones it prefers least (not its own residue class, highest first).

use std::collections::BTreeSet;

/// What one worker should do now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// This worker's quota.
    pub quota: u32,
    /// Partitions to hand off (graceful stop, then release), `held - quota` of them.
    pub hand_off: Vec<u32>,
    /// How many more partitions to acquire.
    pub want: u32,
    /// Free partitions to try, best first (more than `want`: a create can lose a race).
    pub candidates: Vec<u32>,
}

/// Member `index` of `members`' share of `partitions`.
pub(crate) fn quota(partitions: u32, members: usize, index: usize) -> u32 {
    if members == 0 {
        return 0;
    }
    let w = u32::try_from(members).unwrap_or(u32::MAX);
    let i = u32::try_from(index).unwrap_or(u32::MAX);
    partitions / w + u32::from(i < partitions % w)
}

/// The plan for `me` among `members` (sorted, deduplicated, containing `me`), holding `kept`
/// (leases not already being handed off), with `free` partitions nobody holds.
pub(crate) fn plan(
    partitions: u32,
    members: &[String],
    me: &str,
    kept: &BTreeSet<u32>,
    free: &BTreeSet<u32>,
) -> Plan {
    let Some(index) = members.iter().position(|m| m == me) else {
        return Plan::default();
    };
    let w = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let i = u32::try_from(index).unwrap_or(u32::MAX);
    let preferred = |k: u32| k % w == i;
    let q = quota(partitions, members.len(), index);
    let held = u32::try_from(kept.len()).unwrap_or(u32::MAX);
    let mut plan = Plan {
        quota: q,
        ..Plan::default()
    };
    if held > q {
        let mut order: Vec<u32> = kept.iter().copied().collect();
        order.sort_by_key(|&k| (preferred(k), std::cmp::Reverse(k)));
        order.truncate(usize::try_from(held - q).unwrap_or(usize::MAX));
        plan.hand_off = order;
    } else if held < q {
        plan.want = q - held;
        let mut order: Vec<u32> = free
            .iter()
            .copied()
            .filter(|k| *k < partitions && !kept.contains(k))
            .collect();
        order.sort_by_key(|&k| (!preferred(k), k));
        plan.candidates = order;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn set(ks: &[u32]) -> BTreeSet<u32> {
        ks.iter().copied().collect()
    }

    #[test]
    fn quotas_add_up_to_the_partition_count_and_differ_by_at_most_one() {
        for n in 0..20u32 {
            for w in 1..8usize {
                let qs: Vec<u32> = (0..w).map(|i| quota(n, w, i)).collect();
                assert_eq!(qs.iter().sum::<u32>(), n, "n={n} w={w}: {qs:?}");
                let (lo, hi) = (qs.iter().min(), qs.iter().max());
                assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{qs:?}");
            }
        }
        assert_eq!(quota(4, 0, 0), 0);
    }

    #[test]
    fn a_lone_worker_wants_everything_its_own_class_first() {
        let p = plan(4, &ids(&["a"]), "a", &set(&[]), &set(&[0, 1, 2, 3]));
        assert_eq!(p.quota, 4);
        assert_eq!(p.want, 4);
        assert_eq!(p.candidates, vec![0, 1, 2, 3]);
        assert!(p.hand_off.is_empty());
    }

    #[test]
    fn a_join_makes_the_full_worker_hand_off_the_other_class_and_the_newcomer_take_it() {
        let members = ids(&["a", "b"]);
        let a = plan(4, &members, "a", &set(&[0, 1, 2, 3]), &set(&[]));
        assert_eq!(a.quota, 2);
        assert_eq!(
            a.hand_off,
            vec![3, 1],
            "not its class (k % 2 == 0), highest first"
        );
        let b = plan(4, &members, "b", &set(&[]), &set(&[1, 3]));
        assert_eq!((b.quota, b.want), (2, 2));
        assert_eq!(b.candidates, vec![1, 3]);
    }

    #[test]
    fn a_worker_at_quota_does_nothing_and_one_not_a_member_does_nothing() {
        let members = ids(&["a", "b", "c"]);
        let p = plan(5, &members, "b", &set(&[1, 4]), &set(&[0]));
        assert_eq!(
            p,
            Plan {
                quota: 2,
                ..Plan::default()
            }
        );
        assert_eq!(
            plan(5, &members, "zz", &set(&[1]), &set(&[0])),
            Plan::default()
        );
    }

    #[test]
    fn candidates_skip_held_and_out_of_range_partitions() {
        let p = plan(3, &ids(&["a", "b"]), "b", &set(&[2]), &set(&[0, 1, 2, 7]));
        assert_eq!(p.want, 0, "b's quota of 3 over 2 is 1 and it holds 1");
        let p = plan(3, &ids(&["a"]), "a", &set(&[2]), &set(&[0, 1, 2, 7]));
        assert_eq!(p.candidates, vec![0, 1]);
        assert_eq!(p.want, 2);
    }
}
