//! `NodeInfo`: one node as the scheduler sees it — what the `Node` object says (allocatable
//! resources, taints, labels, whether it takes new pods), read once per change, and the
//! running totals of the pods on it (requests, pod count, host ports), kept up to date
//! pod by pod so that a decision never walks a node's pods.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::pod_info::{HostPort, PodInfo, Resources};
use api::quantity;

/// Effects a taint has on scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaintEffect {
    /// New pods that do not tolerate it are not scheduled here.
    NoSchedule,
    /// As `NoSchedule`, and running pods that do not tolerate it are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A taint that keeps pods away (`NoSchedule` or `NoExecute`; `PreferNoSchedule` only
/// matters to scoring, which we do not do for taints), with its rejection reason ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    /// The taint key.
    pub key: String,
    /// The taint value (`""` when unset).
    pub value: String,
    /// Its effect.
    pub effect: TaintEffect,
    /// kube-scheduler's reason for a pod that does not tolerate it:
    /// `node(s) had untolerated taint {key: value}`.
    pub reason: Arc<str>,
}

impl NodeTaint {
    fn new(key: &str, value: &str, effect: TaintEffect) -> NodeTaint {
        NodeTaint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
            reason: format!("node(s) had untolerated taint {{{key}: {value}}}").into(),
        }
    }
}

/// The taint the node lifecycle controller puts on a node whose Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint the node lifecycle controller puts on a node whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint that goes with `spec.unschedulable` (a pod tolerating it may still land).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// What the scheduler reads from a `Node` object.
#[derive(Debug, Clone)]
pub struct NodeData {
    /// The object itself (labels are read from it).
    pub node: Arc<Node>,
    /// `status.allocatable` cpu, memory and ephemeral-storage.
    pub allocatable: Resources,
    /// `status.allocatable.pods` (0 when absent: such a node takes no pod, as in Kubernetes).
    pub allowed_pods: i64,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// The `NoSchedule`/`NoExecute` taints, in the node's order, followed by the taint the
    /// node lifecycle controller would add for a Ready condition that is False
    /// (`not-ready`) or Unknown (`unreachable`) if the node does not carry it yet: so a node
    /// that is not ready takes only pods that tolerate that, whether or not the controller
    /// has run.
    pub taints: Vec<NodeTaint>,
}

impl NodeData {
    /// Reads `node`.
    pub fn new(node: Arc<Node>) -> NodeData {
        let status = node.status.as_ref();
        let allocatable_list = status.and_then(|s| s.allocatable.as_ref());
        let allocatable = Resources::from_list(allocatable_list);
        let allowed_pods = allocatable_list
            .and_then(|l| l.get("pods"))
            .and_then(|q| quantity::value(&q.0))
            .unwrap_or(0)
            .max(0);
        let spec = node.spec.as_ref();
        let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let mut taints: Vec<NodeTaint> = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let effect = match t.effect.as_str() {
                    "NoSchedule" => TaintEffect::NoSchedule,
                    "NoExecute" => TaintEffect::NoExecute,
                    _ => return None,
                };
                Some(NodeTaint::new(
                    &t.key,
                    t.value.as_deref().unwrap_or(""),
                    effect,
                ))
            })
            .collect();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.as_str());
        let implied = match ready {
            Some("False") => Some(TAINT_NOT_READY),
            Some("True") | None => None,
            Some(_) => Some(TAINT_UNREACHABLE),
        };
        if let Some(key) = implied {
            if !taints
                .iter()
                .any(|t| t.key == key && t.effect == TaintEffect::NoSchedule)
            {
                taints.push(NodeTaint::new(key, "", TaintEffect::NoSchedule));
            }
        }
        NodeData {
            node,
            allocatable,
            allowed_pods,
            unschedulable,
            taints,
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or("")
    }

    /// The value of label `key`, if the node has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    }
}

/// One node slot of the cache: the node's data (absent while only pods bound to it are
/// known — the pod watch can be ahead of the node watch — or after the node was deleted
/// while pods remain), and the totals over the pods counted on it, assumed ones included.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node name.
    pub name: Arc<str>,
    /// The `Node` object's data.
    pub data: Option<NodeData>,
    /// Sum of the pods' requests.
    pub requested: Resources,
    /// Sum of the pods' requests with the scoring defaults.
    pub non_zero_requested: Resources,
    /// Number of pods.
    pub pod_count: i64,
    /// Host ports in use, each with the number of pods using it.
    pub used_ports: Vec<(HostPort, u32)>,
}

impl NodeInfo {
    /// An empty slot for `name`.
    pub fn new(name: Arc<str>) -> NodeInfo {
        NodeInfo {
            name,
            data: None,
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            pod_count: 0,
            used_ports: Vec::new(),
        }
    }

    /// Counts `pod` on this node.
    pub fn add_pod(&mut self, pod: &PodInfo) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.pod_count += 1;
        for hp in &pod.host_ports {
            match self.used_ports.iter_mut().find(|(p, _)| p == hp) {
                Some((_, n)) => *n += 1,
                None => self.used_ports.push((hp.clone(), 1)),
            }
        }
    }

    /// Stops counting `pod` (which must have been added).
    pub fn remove_pod(&mut self, pod: &PodInfo) {
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        self.pod_count -= 1;
        for hp in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|(p, _)| p == hp) {
                self.used_ports[i].1 -= 1;
                if self.used_ports[i].1 == 0 {
                    self.used_ports.swap_remove(i);
                }
            }
        }
    }

    /// Whether the slot holds nothing any more (no node, no pod), so it can be reused.
    pub fn is_empty(&self) -> bool {
        self.data.is_none() && self.pod_count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn reads_allocatable_taints_and_readiness() {
        let d = NodeData::new(node(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "a", "value": "1", "effect": "NoSchedule"},
                {"key": "b", "effect": "PreferNoSchedule"},
                {"key": "c", "effect": "NoExecute"}]},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "False"}]},
        })));
        assert_eq!(d.name(), "n1");
        assert_eq!(d.label("zone"), Some("a"));
        assert_eq!(d.allocatable.milli_cpu, 4000);
        assert_eq!(d.allocatable.memory, 8 << 30);
        assert_eq!(d.allowed_pods, 110);
        assert!(d.unschedulable);
        let keys: Vec<&str> = d.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["a", "c", TAINT_NOT_READY]);
        assert_eq!(&*d.taints[0].reason, "node(s) had untolerated taint {a: 1}");
        assert_eq!(
            &*d.taints[2].reason,
            "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
    }

    #[test]
    fn readiness_implies_at_most_one_taint() {
        let unknown = NodeData::new(node(json!({"metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})));
        assert_eq!(unknown.taints.len(), 1);
        assert_eq!(unknown.taints[0].key, TAINT_UNREACHABLE);
        let already = NodeData::new(node(json!({"metadata": {"name": "n"},
            "spec": {"taints": [{"key": TAINT_NOT_READY, "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}})));
        assert_eq!(already.taints.len(), 1);
        let bare = NodeData::new(node(json!({"metadata": {"name": "n"}})));
        assert!(bare.taints.is_empty());
        assert_eq!(bare.allowed_pods, 0);
    }

    #[test]
    fn pod_totals_follow_adds_and_removes() {
        let pod = |ports: serde_json::Value| {
            PodInfo::new(Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "n"},
                    "spec": {"containers": [{"name": "c", "ports": ports,
                        "resources": {"requests": {"cpu": "250m"}}}]}}))
                .unwrap(),
            ))
        };
        let a = pod(json!([{"containerPort": 80, "hostPort": 80}]));
        let b = pod(json!([{"containerPort": 80, "hostPort": 80}]));
        let mut info = NodeInfo::new("n".into());
        info.add_pod(&a);
        info.add_pod(&b);
        assert_eq!(info.pod_count, 2);
        assert_eq!(info.requested.milli_cpu, 500);
        assert_eq!(info.used_ports.len(), 1);
        assert_eq!(info.used_ports[0].1, 2);
        info.remove_pod(&a);
        assert_eq!(info.used_ports[0].1, 1, "b still holds the port");
        info.remove_pod(&b);
        assert!(info.used_ports.is_empty());
        assert!(info.is_empty());
        assert_eq!(info.requested, Resources::default());
    }
}
