//! Who is in the quorum, whether it is one, and who leads it.

use std::collections::BTreeSet;

use meshd_domain::{NodeId, Quorum};

/// The members of `configured` that are in `fresh` form a quorum when they are
/// a strict majority of `configured`; the leader (the one that pushes alerts)
/// is then the lowest id among them. A partitioned minority gets no leader, so
/// it never pages anyone.
pub fn evaluate(configured: &BTreeSet<NodeId>, fresh: &BTreeSet<NodeId>) -> Quorum {
    let members: Vec<NodeId> = configured.intersection(fresh).cloned().collect();
    let has_quorum = !configured.is_empty() && members.len() * 2 > configured.len();
    Quorum {
        configured: configured.iter().cloned().collect(),
        leader: if has_quorum {
            members.first().cloned()
        } else {
            None
        },
        members,
        has_quorum,
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;

    fn ids(list: &[&str]) -> BTreeSet<NodeId> {
        list.iter().copied().map(id).collect()
    }

    #[test]
    fn single_node_is_its_own_quorum_and_leader() {
        let q = evaluate(&ids(&["solo"]), &ids(&["solo"]));
        assert!(q.has_quorum);
        assert_eq!(q.leader.map(|l| l.to_string()), Some("solo".into()));
    }

    #[test]
    fn strict_majority_is_required() {
        let all = ids(&["a", "b", "c", "d"]);
        assert!(
            !evaluate(&all, &ids(&["a", "b"])).has_quorum,
            "2 of 4 is a tie"
        );
        assert!(evaluate(&all, &ids(&["b", "c", "d"])).has_quorum);
        assert!(!evaluate(&ids(&["a", "b"]), &ids(&["b"])).has_quorum);
    }

    #[test]
    fn leader_is_lowest_fresh_member() {
        let q = evaluate(&ids(&["a", "b", "c"]), &ids(&["c", "b"]));
        assert_eq!(q.leader.map(|l| l.to_string()), Some("b".into()));
    }

    #[test]
    fn minority_has_no_leader_and_strangers_do_not_count() {
        let q = evaluate(&ids(&["a", "b", "c"]), &ids(&["c", "x", "y"]));
        assert!(!q.has_quorum);
        assert_eq!(q.leader, None);
        assert_eq!(q.members, ids(&["c"]).into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn empty_configuration_has_no_quorum() {
        assert!(!evaluate(&BTreeSet::new(), &BTreeSet::new()).has_quorum);
    }
}
