//! The filters: whether a pod may run on a node, one file per kube-scheduler filter plugin,
//! run in kube-scheduler's order — `NodeUnschedulable`, `TaintToleration` (which also
//! keeps pods off nodes that are not ready, see [`NodeData::taints`]), `NodeAffinity`,
//! `NodePorts`, `NodeResourcesFit` — stopping at the first that rejects the node, whose
//! reasons then count in the [`FitError`](super::fit_error::FitError) message.

pub mod node_affinity;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod taint_toleration;

use std::sync::Arc;

use super::node_info::{NodeData, NodeInfo};
use super::pod_info::PodInfo;

pub use node_resources_fit::FitFailures;

/// A filter plugin, as a bit of a [`PluginSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Plugin {
    /// `spec.unschedulable`.
    NodeUnschedulable = 1,
    /// Taints (and readiness) against tolerations.
    TaintToleration = 2,
    /// `nodeSelector` and required node affinity.
    NodeAffinity = 4,
    /// Host ports.
    NodePorts = 8,
    /// Requests against allocatable, and the pod count.
    NodeResourcesFit = 16,
}

/// A set of filter plugins: those that rejected a pod somewhere, or those an event may
/// change the verdict of. The scheduling queue retries an unschedulable pod on an event
/// whose set meets the pod's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginSet(u8);

impl PluginSet {
    /// No plugin.
    pub const EMPTY: PluginSet = PluginSet(0);
    /// Every plugin.
    pub const ALL: PluginSet = PluginSet(31);

    /// Adds `plugin`.
    pub fn insert(&mut self, plugin: Plugin) {
        self.0 |= plugin as u8;
    }

    /// `self` with `plugin`.
    #[must_use]
    pub fn with(mut self, plugin: Plugin) -> PluginSet {
        self.insert(plugin);
        self
    }

    /// Whether `plugin` is in the set.
    pub fn contains(self, plugin: Plugin) -> bool {
        self.0 & plugin as u8 != 0
    }

    /// Whether the two sets share a plugin.
    pub fn intersects(self, other: PluginSet) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// kube-scheduler's reason for a node with `spec.unschedulable`.
pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// kube-scheduler's reason for a node that fails the node selector or required affinity.
pub const REASON_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
/// kube-scheduler's reason for a node where a requested host port is taken.
pub const REASON_NODE_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";

/// Why a node was rejected: the first filter that failed, with what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection<'a> {
    /// The node is marked unschedulable and the pod does not tolerate that.
    Unschedulable,
    /// The node has a taint the pod does not tolerate (its reason text).
    Taint(&'a Arc<str>),
    /// The node's labels or name fail the pod's node selector or required affinity.
    NodeAffinity,
    /// A host port the pod asks for is taken.
    NodePorts,
    /// The pod's requests do not fit (one reason per short resource).
    Fit(FitFailures),
}

impl Rejection<'_> {
    /// The plugin that rejected.
    pub fn plugin(&self) -> Plugin {
        match self {
            Rejection::Unschedulable => Plugin::NodeUnschedulable,
            Rejection::Taint(_) => Plugin::TaintToleration,
            Rejection::NodeAffinity => Plugin::NodeAffinity,
            Rejection::NodePorts => Plugin::NodePorts,
            Rejection::Fit(_) => Plugin::NodeResourcesFit,
        }
    }

    /// Calls `f` with each reason text (several for a node short of several resources).
    pub fn for_each_reason(&self, mut f: impl FnMut(&str)) {
        match self {
            Rejection::Unschedulable => f(REASON_UNSCHEDULABLE),
            Rejection::Taint(reason) => f(reason),
            Rejection::NodeAffinity => f(REASON_NODE_AFFINITY),
            Rejection::NodePorts => f(REASON_NODE_PORTS),
            Rejection::Fit(failures) => failures.for_each_reason(f),
        }
    }
}

/// Runs every filter in order on `node` (whose `Node` data is `data`); the first rejection
/// wins.
pub fn run<'n>(pod: &PodInfo, node: &'n NodeInfo, data: &'n NodeData) -> Result<(), Rejection<'n>> {
    if !node_unschedulable::fits(pod, data) {
        return Err(Rejection::Unschedulable);
    }
    if let Some(taint) = taint_toleration::first_untolerated(pod, data) {
        return Err(Rejection::Taint(&taint.reason));
    }
    if !node_affinity::fits(pod, data) {
        return Err(Rejection::NodeAffinity);
    }
    if !node_ports::fits(pod, node) {
        return Err(Rejection::NodePorts);
    }
    let failures = node_resources_fit::check(pod, node, data);
    if !failures.is_empty() {
        return Err(Rejection::Fit(failures));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Builders shared by the filter, score and algorithm tests.
    use super::super::node_info::{NodeData, NodeInfo};
    use super::super::pod_info::PodInfo;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// A ready node with 4 CPUs, 8 GiB, 100 GiB of ephemeral storage and room for 110 pods,
    /// with `extra` merged into its JSON (objects merge, anything else replaces).
    pub fn node(name: &str, extra: Value) -> Arc<Node> {
        let mut v = json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi",
                                "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]},
        });
        merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).expect("a node"))
    }

    /// A pod `ns/name` with one container requesting `cpu` and `memory`, with `extra` merged
    /// into its JSON.
    pub fn pod(name: &str, cpu: &str, memory: &str, extra: Value) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        });
        merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).expect("a pod"))
    }

    /// `pod(..)` as a `PodInfo`.
    pub fn pod_info(name: &str, cpu: &str, memory: &str, extra: Value) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(pod(name, cpu, memory, extra)))
    }

    /// A node slot holding `node` and no pods.
    pub fn node_info(node: Arc<Node>) -> NodeInfo {
        let data = NodeData::new(node);
        let mut info = NodeInfo::new(data.name().into());
        info.data = Some(data);
        info
    }

    /// Merges `extra` into `v`: objects key by key, anything else replaces.
    pub fn merge(v: &mut Value, extra: Value) {
        match (v, extra) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, x) in b {
                    merge(a.entry(k).or_insert(Value::Null), x);
                }
            }
            (slot, x) => *slot = x,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use serde_json::json;

    fn first_rejection(pod: &PodInfo, info: &NodeInfo) -> Option<(Plugin, Vec<String>)> {
        let data = info.data.as_ref().unwrap();
        run(pod, info, data).err().map(|r| {
            let mut reasons = Vec::new();
            r.for_each_reason(|s| reasons.push(s.to_string()));
            (r.plugin(), reasons)
        })
    }

    #[test]
    fn first_failing_filter_wins_in_kube_scheduler_order() {
        // Unschedulable, tainted, unlabelled and too small: only the first counts.
        let n = node_info(node(
            "n",
            json!({"spec": {"unschedulable": true,
                "taints": [{"key": "t", "effect": "NoSchedule"}]}}),
        ));
        let p = pod_info(
            "p",
            "8",
            "1Gi",
            json!({"spec": {"nodeSelector": {"a": "b"}}}),
        );
        let (plugin, reasons) = first_rejection(&p, &n).unwrap();
        assert_eq!(plugin, Plugin::NodeUnschedulable);
        assert_eq!(reasons, [REASON_UNSCHEDULABLE]);

        let n = node_info(node(
            "n",
            json!({"spec": {"taints": [{"key": "t", "effect": "NoSchedule"}]}}),
        ));
        let (plugin, reasons) = first_rejection(&p, &n).unwrap();
        assert_eq!(plugin, Plugin::TaintToleration);
        assert_eq!(reasons, ["node(s) had untolerated taint {t: }"]);

        let n = node_info(node("n", json!({})));
        let (plugin, _) = first_rejection(&p, &n).unwrap();
        assert_eq!(plugin, Plugin::NodeAffinity);

        let p = pod_info("p", "8", "16Gi", json!({}));
        let (plugin, reasons) = first_rejection(&p, &n).unwrap();
        assert_eq!(plugin, Plugin::NodeResourcesFit);
        assert_eq!(reasons, ["Insufficient cpu", "Insufficient memory"]);

        let p = pod_info("p", "1", "1Gi", json!({}));
        assert_eq!(first_rejection(&p, &n), None);
    }

    #[test]
    fn plugin_sets() {
        let s = PluginSet::EMPTY.with(Plugin::NodePorts);
        assert!(s.contains(Plugin::NodePorts) && !s.contains(Plugin::NodeAffinity));
        assert!(s.intersects(PluginSet::ALL));
        assert!(!s.intersects(PluginSet::EMPTY.with(Plugin::NodeAffinity)));
        assert!(PluginSet::EMPTY.is_empty() && !s.is_empty());
        for p in [
            Plugin::NodeUnschedulable,
            Plugin::TaintToleration,
            Plugin::NodeAffinity,
            Plugin::NodePorts,
            Plugin::NodeResourcesFit,
        ] {
            assert!(PluginSet::ALL.contains(p));
        }
    }
}
