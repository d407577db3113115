//! `NodeUnschedulable`: a node with `spec.unschedulable` (cordoned) takes only pods that
//! tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use crate::scheduler::node_info::{NodeData, TaintEffect, TAINT_UNSCHEDULABLE};
use crate::scheduler::pod_info::PodInfo;

use super::taint_toleration::any_tolerates;

/// Whether `pod` may go to `node` as far as `spec.unschedulable` is concerned.
pub fn fits(pod: &PodInfo, node: &NodeData) -> bool {
    !node.unschedulable
        || any_tolerates(
            &pod.tolerations,
            TAINT_UNSCHEDULABLE,
            "",
            TaintEffect::NoSchedule,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::json;

    #[test]
    fn cordoned_nodes_take_only_tolerating_pods() {
        let cordoned = node_info(node("n", json!({"spec": {"unschedulable": true}})));
        let open = node_info(node("m", json!({})));
        let plain = pod_info("p", "0", "0", json!({}));
        let tolerant = pod_info(
            "q",
            "0",
            "0",
            json!({"spec": {"tolerations": [
            {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert!(!fits(&plain, cordoned.data.as_ref().unwrap()));
        assert!(fits(&tolerant, cordoned.data.as_ref().unwrap()));
        assert!(fits(&plain, open.data.as_ref().unwrap()));
    }
}
