//! `NodeResourcesFit`: the pod's requests must fit in what the node's allocatable leaves
//! after the requests of the pods already counted there (assumed ones included), for CPU,
//! memory and ephemeral storage, and the node must have room for one more pod.
//!
//! As kube-scheduler does, a resource the pod does not request is not checked (a node
//! already over-committed still takes pods that request none of it), and the pod count is
//! always checked.

use crate::scheduler::node_info::{NodeData, NodeInfo};
use crate::scheduler::pod_info::PodInfo;

/// The resources a node is short of for a pod (empty: it fits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FitFailures {
    /// No room for another pod: `Too many pods`.
    pub too_many_pods: bool,
    /// `Insufficient cpu`.
    pub cpu: bool,
    /// `Insufficient memory`.
    pub memory: bool,
    /// `Insufficient ephemeral-storage`.
    pub ephemeral_storage: bool,
}

impl FitFailures {
    /// Whether the pod fits.
    pub fn is_empty(&self) -> bool {
        !(self.too_many_pods || self.cpu || self.memory || self.ephemeral_storage)
    }

    /// Calls `f` with kube-scheduler's reason for each shortage.
    pub fn for_each_reason(&self, mut f: impl FnMut(&str)) {
        if self.too_many_pods {
            f("Too many pods");
        }
        if self.cpu {
            f("Insufficient cpu");
        }
        if self.memory {
            f("Insufficient memory");
        }
        if self.ephemeral_storage {
            f("Insufficient ephemeral-storage");
        }
    }
}

/// What `node` is short of for `pod`.
pub fn check(pod: &PodInfo, node: &NodeInfo, data: &NodeData) -> FitFailures {
    let want = &pod.requests;
    let used = &node.requested;
    let free = &data.allocatable;
    let short = |want: i64, free: i64, used: i64| want > 0 && want > free.saturating_sub(used);
    FitFailures {
        too_many_pods: node.pod_count + 1 > data.allowed_pods,
        cpu: short(want.milli_cpu, free.milli_cpu, used.milli_cpu),
        memory: short(want.memory, free.memory, used.memory),
        ephemeral_storage: short(
            want.ephemeral_storage,
            free.ephemeral_storage,
            used.ephemeral_storage,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::json;

    #[test]
    fn requests_against_what_is_left() {
        let mut n = node_info(node("n", json!({"status": {"allocatable": {"pods": "3"}}})));
        n.add_pod(&pod_info("a", "3", "6Gi", json!({})));
        let data = n.data.clone().unwrap();
        let fits = |cpu: &str, mem: &str, n: &NodeInfo| {
            check(&pod_info("p", cpu, mem, json!({})), n, &data)
        };
        assert!(fits("1", "2Gi", &n).is_empty(), "exactly what is left fits");
        assert_eq!(
            fits("1100m", "1Gi", &n),
            FitFailures {
                cpu: true,
                ..Default::default()
            }
        );
        assert_eq!(
            fits("2", "3Gi", &n),
            FitFailures {
                cpu: true,
                memory: true,
                ..Default::default()
            }
        );
        let storage = pod_info(
            "s",
            "0",
            "0",
            json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"ephemeral-storage": "101Gi"}}}]}}),
        );
        assert!(check(&storage, &n, &data).ephemeral_storage);
        // Full of pods: a pod requesting nothing is still refused.
        n.add_pod(&pod_info("b", "0", "0", json!({})));
        n.add_pod(&pod_info("c", "0", "0", json!({})));
        let f = fits("0", "0", &n);
        assert!(f.too_many_pods && !f.cpu && !f.memory);
        let mut reasons = Vec::new();
        FitFailures {
            too_many_pods: true,
            cpu: true,
            memory: true,
            ephemeral_storage: true,
        }
        .for_each_reason(|r| reasons.push(r.to_string()));
        assert_eq!(
            reasons,
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient ephemeral-storage"
            ]
        );
    }

    #[test]
    fn unrequested_resources_are_not_checked_on_an_overcommitted_node() {
        let mut n = node_info(node("n", json!({})));
        n.add_pod(&pod_info("big", "10", "1Gi", json!({})));
        let data = n.data.clone().unwrap();
        assert!(check(&pod_info("p", "0", "1Gi", json!({})), &n, &data).is_empty());
        assert!(check(&pod_info("p", "1m", "1Gi", json!({})), &n, &data).cpu);
    }
}
