//! The scores: how much a feasible node is preferred, each score from 0 to
//! [`MAX_NODE_SCORE`], summed with kube-scheduler's default weights.
//!
//! - **Least allocated** (`NodeResourcesFit`'s default strategy, weight 1): the share of
//!   CPU and memory left free once the pod is added, averaged. It counts requests with the
//!   scoring defaults (100 millicores, 200 MiB for a container that requests nothing), so
//!   request-less pods spread too.
//! - **Balanced allocation** (`NodeResourcesBalancedAllocation`, weight 1): prefers nodes
//!   whose CPU and memory would be used in equal shares: `100 × (1 − |cpu − memory| / 2)`
//!   over the fractions requested (actual requests, capped at 1).
//! - **Spreading** (weight 2, the weight of kube-scheduler's default pod topology
//!   spreading): pods with the same controlling owner are kept apart: a node holding
//!   `count` of the owner's pods scores `100 × (max − count) / max`, `max` being the highest
//!   count over the feasible nodes (all score 100 when the owner has no pod on them).
//!   The counts come from the cache's per-owner tallies, never from walking pods.

use super::node_info::{NodeData, NodeInfo};
use super::pod_info::PodInfo;

/// The best score one scoring function gives.
pub const MAX_NODE_SCORE: i64 = 100;

/// Weight of [`least_allocated`].
pub const LEAST_ALLOCATED_WEIGHT: i64 = 1;
/// Weight of [`balanced_allocation`].
pub const BALANCED_ALLOCATION_WEIGHT: i64 = 1;
/// Weight of [`spreading`].
pub const SPREADING_WEIGHT: i64 = 2;

/// `(capacity − requested) × 100 / capacity`, 0 when nothing is free or nothing exists.
fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// The least-allocated score of putting `pod` on `node` (integer arithmetic, resources
/// with no allocatable left out of the average, as in kube-scheduler).
pub fn least_allocated(pod: &PodInfo, node: &NodeInfo, data: &NodeData) -> i64 {
    let mut score = 0;
    let mut weights = 0;
    let pairs = [
        (
            node.non_zero_requested.milli_cpu + pod.non_zero_requests.milli_cpu,
            data.allocatable.milli_cpu,
        ),
        (
            node.non_zero_requested.memory + pod.non_zero_requests.memory,
            data.allocatable.memory,
        ),
    ];
    for (requested, capacity) in pairs {
        if capacity == 0 {
            continue;
        }
        score += least_requested(requested, capacity);
        weights += 1;
    }
    if weights == 0 {
        0
    } else {
        score / weights
    }
}

/// The balanced-allocation score of putting `pod` on `node`.
pub fn balanced_allocation(pod: &PodInfo, node: &NodeInfo, data: &NodeData) -> i64 {
    let fraction = |requested: i64, capacity: i64| {
        (capacity != 0).then(|| (requested as f64 / capacity as f64).min(1.0))
    };
    let cpu = fraction(
        node.requested.milli_cpu + pod.requests.milli_cpu,
        data.allocatable.milli_cpu,
    );
    let memory = fraction(
        node.requested.memory + pod.requests.memory,
        data.allocatable.memory,
    );
    let std_dev = match (cpu, memory) {
        (Some(c), Some(m)) => ((c - m) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std_dev) * MAX_NODE_SCORE as f64) as i64
}

/// The spreading score of a node holding `count` of the owner's pods when the most any
/// feasible node holds is `max`.
pub fn spreading(count: u32, max: u32) -> i64 {
    if max == 0 {
        return MAX_NODE_SCORE;
    }
    (MAX_NODE_SCORE as f64 * f64::from(max - count.min(max)) / f64::from(max)) as i64
}

/// The weighted sum of the two resource scores (spreading is added once the maximum
/// count over the feasible nodes is known).
pub fn resource_scores(pod: &PodInfo, node: &NodeInfo, data: &NodeData) -> i64 {
    least_allocated(pod, node, data) * LEAST_ALLOCATED_WEIGHT
        + balanced_allocation(pod, node, data) * BALANCED_ALLOCATION_WEIGHT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::json;

    #[test]
    fn least_allocated_prefers_free_nodes() {
        // 4 CPUs, 8 GiB. A pod of 1 CPU and 2 GiB on an empty node leaves 75% of both.
        let empty = node_info(node("n", json!({})));
        let data = empty.data.as_ref().unwrap();
        let p = pod_info("p", "1", "2Gi", json!({}));
        assert_eq!(least_allocated(&p, &empty, data), 75);
        let mut busy = empty.clone();
        busy.add_pod(&pod_info("a", "2", "2Gi", json!({})));
        // cpu: (4000-3000)*100/4000 = 25; memory: (8-4)/8 = 50; mean 37.
        assert_eq!(least_allocated(&p, &busy, data), 37);
        // A pod requesting nothing counts as 100m and 200 MiB.
        let zero = pod_info("z", "0", "0", json!({}));
        let expected_mem = ((8i64 << 30) - (200 << 20)) * 100 / (8 << 30);
        assert_eq!(
            least_allocated(&zero, &empty, data),
            (97 + expected_mem) / 2
        );
        // Over capacity scores 0 for that resource: (0 + 87) / 2.
        let huge = pod_info("h", "8", "1Gi", json!({}));
        assert_eq!(least_allocated(&huge, &empty, data), 43);
    }

    #[test]
    fn balanced_allocation_prefers_even_use() {
        let empty = node_info(node("n", json!({})));
        let data = empty.data.as_ref().unwrap();
        // 1 CPU of 4 (25%) and 2 GiB of 8 (25%): perfectly balanced.
        assert_eq!(
            balanced_allocation(&pod_info("p", "1", "2Gi", json!({})), &empty, data),
            100
        );
        // 50% CPU, 0% memory: std dev 0.25 → 75.
        assert_eq!(
            balanced_allocation(&pod_info("p", "2", "0", json!({})), &empty, data),
            75
        );
        // Fractions are capped at 1: 200% CPU and 0% memory → 50.
        assert_eq!(
            balanced_allocation(&pod_info("p", "8", "0", json!({})), &empty, data),
            50
        );
        // A node without allocatable memory only has one fraction: nothing to balance.
        let no_mem = node_info(node(
            "m",
            json!({"status": {"allocatable": {"memory": "0"}}}),
        ));
        let d = no_mem.data.as_ref().unwrap();
        assert_eq!(
            balanced_allocation(&pod_info("p", "2", "0", json!({})), &no_mem, d),
            100
        );
    }

    #[test]
    fn spreading_normalises_by_the_busiest_node() {
        assert_eq!(spreading(0, 0), 100);
        assert_eq!(spreading(0, 4), 100);
        assert_eq!(spreading(1, 4), 75);
        assert_eq!(spreading(4, 4), 0);
        assert_eq!(spreading(1, 3), 66);
    }
}
