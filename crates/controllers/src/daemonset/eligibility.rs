//! Which nodes a DaemonSet's pod belongs on, as kube-controller-manager 1.32 decides it, and
//! the pod it creates for one node.
//!
//! The pod a DaemonSet would create for a node is its template with Kubernetes' default
//! DaemonSet tolerations added ([`add_daemon_tolerations`]). A node **should run** it when
//! the template's `nodeName` (if any) is the node, the node satisfies the template's
//! `nodeSelector` and required node affinity, and the pod tolerates every `NoSchedule` and
//! `NoExecute` taint in the node's spec. A pod already there **may continue running** on
//! a node that it fails only for a `NoSchedule` taint.
//!
//! The pod is pinned to its node by a required node affinity on the node's name
//! (`matchFields metadata.name In [node]`, [`replace_node_name_affinity`]) and bound by the
//! scheduler, not by setting `nodeName`.

use crate::scheduler::filters::node_affinity;
use crate::scheduler::filters::taint_toleration::tolerates;
use crate::scheduler::node_info::{
    NodeData, TaintEffect, TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_UNSCHEDULABLE,
};
use crate::scheduler::pod_info::PodInfo;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Toleration,
};
use std::sync::Arc;

/// The taint a node under disk pressure carries.
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// The taint a node under memory pressure carries.
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// The taint a node short of process ids carries.
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
/// The taint a node whose network is not configured carries.
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// The field a node-name affinity selects on.
const NODE_NAME_FIELD: &str = "metadata.name";

fn exists(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some(effect.to_string()),
        ..Default::default()
    }
}

/// Whether two tolerations are the same rule (key, operator, value, effect), whatever
/// their `tolerationSeconds`.
fn same_rule(a: &Toleration, b: &Toleration) -> bool {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    s(&a.key) == s(&b.key)
        && s(&a.operator) == s(&b.operator)
        && s(&a.value) == s(&b.value)
        && s(&a.effect) == s(&b.effect)
}

/// Adds Kubernetes' DaemonSet tolerations to `spec`: `not-ready` and `unreachable`
/// (`NoExecute`, for ever), `disk-pressure`, `memory-pressure`, `pid-pressure` and
/// `unschedulable` (`NoSchedule`), and `network-unavailable` (`NoSchedule`) for pods on
/// the host network. A toleration of the same rule already there is replaced.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        exists(TAINT_NOT_READY, "NoExecute"),
        exists(TAINT_UNREACHABLE, "NoExecute"),
        exists(TAINT_DISK_PRESSURE, "NoSchedule"),
        exists(TAINT_MEMORY_PRESSURE, "NoSchedule"),
        exists(TAINT_PID_PRESSURE, "NoSchedule"),
        exists(TAINT_UNSCHEDULABLE, "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(exists(TAINT_NETWORK_UNAVAILABLE, "NoSchedule"));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for t in wanted {
        match tolerations.iter_mut().find(|have| same_rule(have, &t)) {
            Some(have) => *have = t,
            None => tolerations.push(t),
        }
    }
}

/// The node-name requirement that pins a pod to `node`.
fn node_name_requirement(node: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: NODE_NAME_FIELD.to_string(),
        operator: "In".to_string(),
        values: Some(vec![node.to_string()]),
    }
}

/// `affinity` with its required node affinity pinned to `node`: every required term keeps
/// its label requirements and gets `metadata.name In [node]` as its only field
/// requirement (one such term when there were none). Preferred terms and pod affinities
/// are kept.
pub fn replace_node_name_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields = Some(vec![node_name_requirement(node)]);
    }
    affinity
}

/// The node a daemon pod is for: its `nodeName` once bound, else the single name of the
/// `metadata.name In [...]` field requirement of its required node affinity.
pub fn target_node_name(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|term| {
        term.match_fields.iter().flatten().find_map(|r| {
            match (r.key.as_str(), r.operator.as_str(), r.values.as_deref()) {
                (NODE_NAME_FIELD, "In", Some([one])) => Some(one.clone()),
                _ => None,
            }
        })
    })
}

/// Whether a node should run a DaemonSet's pod, and whether a pod already there may stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// A daemon pod should run on the node.
    pub should_run: bool,
    /// A daemon pod already on the node may keep running.
    pub may_continue: bool,
}

/// What one DaemonSet's pods require of a node, read once from its template (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct DaemonPodShape {
    info: PodInfo,
    node_name: Option<String>,
}

impl DaemonPodShape {
    /// Reads `ds`'s template.
    pub fn new(ds: &DaemonSet) -> DaemonPodShape {
        let template = &ds.spec.template;
        let mut spec = template.spec.clone().unwrap_or_default();
        let node_name = spec.node_name.take().filter(|n| !n.is_empty());
        add_daemon_tolerations(&mut spec);
        let pod = Pod {
            metadata: template.metadata.clone().unwrap_or_default(),
            spec: Some(spec),
            status: None,
        };
        DaemonPodShape {
            info: PodInfo::new(Arc::new(pod)),
            node_name,
        }
    }

    /// Where `node` stands for this DaemonSet (Kubernetes' `NodeShouldRunDaemonPod`).
    pub fn placement(&self, node: &Arc<Node>) -> Placement {
        const NOWHERE: Placement = Placement {
            should_run: false,
            may_continue: false,
        };
        let name = node.metadata.name.as_deref().unwrap_or("");
        if self.node_name.as_deref().is_some_and(|n| n != name) {
            return NOWHERE;
        }
        if !node_affinity::fits(&self.info, &NodeData::new(Arc::clone(node))) {
            return NOWHERE;
        }
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        let untolerated =
            |effect: TaintEffect| {
                taints.into_iter().flatten().any(|t| {
                    t.effect == effect.as_str()
                        && !self.info.tolerations.iter().any(|tol| {
                            tolerates(tol, &t.key, t.value.as_deref().unwrap_or(""), effect)
                        })
                })
            };
        let blocks_execution = untolerated(TaintEffect::NoExecute);
        let blocks_scheduling = untolerated(TaintEffect::NoSchedule);
        Placement {
            should_run: !blocks_execution && !blocks_scheduling,
            may_continue: !blocks_execution,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "ds", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": spec}}}))
        .unwrap()
    }

    fn node(name: &str, extra: serde_json::Value) -> Arc<Node> {
        let mut v = json!({"metadata": {"name": name}});
        if let (Some(m), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    const RUN: Placement = Placement {
        should_run: true,
        may_continue: true,
    };
    const STAY: Placement = Placement {
        should_run: false,
        may_continue: true,
    };
    const NO: Placement = Placement {
        should_run: false,
        may_continue: false,
    };

    #[test]
    fn default_tolerations_are_added_once() {
        let mut spec: PodSpec = serde_json::from_value(json!({"containers": [],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 30},
                {"key": "custom", "operator": "Exists"}]}))
        .unwrap();
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        let t = spec.tolerations.clone().unwrap();
        assert_eq!(t.len(), 7, "{t:?}");
        // The not-ready rule is replaced: no more tolerationSeconds.
        assert_eq!(t[0].key.as_deref(), Some(TAINT_NOT_READY));
        assert_eq!(t[0].toleration_seconds, None);
        assert!(!t
            .iter()
            .any(|t| t.key.as_deref() == Some(TAINT_NETWORK_UNAVAILABLE)));
        spec.host_network = Some(true);
        add_daemon_tolerations(&mut spec);
        assert!(spec
            .tolerations
            .unwrap()
            .iter()
            .any(|t| t.key.as_deref() == Some(TAINT_NETWORK_UNAVAILABLE)
                && t.effect.as_deref() == Some("NoSchedule")));
    }

    #[test]
    fn node_selector_affinity_and_node_name() {
        let shape = DaemonPodShape::new(&ds(json!({"containers": [],
            "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}})));
        let ssd_a = node(
            "n1",
            json!({"metadata": {"name": "n1",
            "labels": {"disk": "ssd", "zone": "a"}}}),
        );
        let ssd_c = node(
            "n2",
            json!({"metadata": {"name": "n2",
            "labels": {"disk": "ssd", "zone": "c"}}}),
        );
        let hdd_a = node(
            "n3",
            json!({"metadata": {"name": "n3",
            "labels": {"disk": "hdd", "zone": "a"}}}),
        );
        assert_eq!(shape.placement(&ssd_a), RUN);
        assert_eq!(shape.placement(&ssd_c), NO);
        assert_eq!(shape.placement(&hdd_a), NO);
        let pinned = DaemonPodShape::new(&ds(json!({"containers": [], "nodeName": "n1"})));
        assert_eq!(pinned.placement(&node("n1", json!({}))), RUN);
        assert_eq!(pinned.placement(&node("n2", json!({}))), NO);
    }

    #[test]
    fn taints_against_tolerations() {
        let shape = DaemonPodShape::new(&ds(json!({"containers": []})));
        let taint = |key: &str, effect: &str| {
            node(
                "n",
                json!({"spec": {"taints": [{"key": key, "value": "x", "effect": effect}]}}),
            )
        };
        assert_eq!(shape.placement(&node("n", json!({}))), RUN);
        // Tolerated by the DaemonSet defaults.
        assert_eq!(shape.placement(&taint(TAINT_UNREACHABLE, "NoExecute")), RUN);
        assert_eq!(
            shape.placement(&taint(TAINT_UNSCHEDULABLE, "NoSchedule")),
            RUN
        );
        assert_eq!(
            shape.placement(&taint(TAINT_DISK_PRESSURE, "NoSchedule")),
            RUN
        );
        // Not tolerated: a NoSchedule taint keeps a pod already there.
        assert_eq!(shape.placement(&taint("dedicated", "NoSchedule")), STAY);
        assert_eq!(shape.placement(&taint("dedicated", "NoExecute")), NO);
        assert_eq!(
            shape.placement(&taint("dedicated", "PreferNoSchedule")),
            RUN
        );
        // Not-ready NoSchedule (a node that has not become ready) is not a default.
        assert_eq!(shape.placement(&taint(TAINT_NOT_READY, "NoSchedule")), STAY);
        assert_eq!(
            shape.placement(&taint(TAINT_NETWORK_UNAVAILABLE, "NoSchedule")),
            STAY
        );
        let host = DaemonPodShape::new(&ds(json!({"containers": [], "hostNetwork": true})));
        assert_eq!(
            host.placement(&taint(TAINT_NETWORK_UNAVAILABLE, "NoSchedule")),
            RUN
        );
        let tolerant = DaemonPodShape::new(&ds(json!({"containers": [],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "x"}]})));
        assert_eq!(tolerant.placement(&taint("dedicated", "NoExecute")), RUN);
    }

    #[test]
    fn node_name_affinity_replaces_fields_and_is_read_back() {
        let a = replace_node_name_affinity(None, "n1");
        let terms = &a
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert_eq!(
            serde_json::to_value(&terms[0]).unwrap(),
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
        );
        let existing: Affinity = serde_json::from_value(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                 "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["old"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "k", "operator": "Exists"}]}}]}}))
        .unwrap();
        let a = replace_node_name_affinity(Some(existing), "n2");
        let v = serde_json::to_value(&a).unwrap();
        let terms = &v["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchFields"][0]["values"], json!(["n2"]));
        assert_eq!(terms[1]["matchFields"][0]["values"], json!(["n2"]));
        assert_eq!(terms[1]["matchExpressions"][0]["values"], json!(["b"]));
        assert_eq!(
            v["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
            1
        );

        let mut pod = Pod {
            spec: Some(PodSpec {
                affinity: Some(a),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(target_node_name(&pod).as_deref(), Some("n2"));
        pod.spec.as_mut().unwrap().node_name = Some("bound".into());
        assert_eq!(target_node_name(&pod).as_deref(), Some("bound"));
        assert_eq!(target_node_name(&Pod::default()), None);
    }
}
