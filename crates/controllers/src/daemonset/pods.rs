//! A DaemonSet's pods as its controller reads them: grouped by the node they are for, the
//! order among pods on one node, and whether a pod is of the current revision.

use super::eligibility::target_node_name;
use crate::controller_history::POD_REVISION_LABEL;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The annotation in which the API server keeps a DaemonSet's template generation
/// (Kubernetes' deprecated `spec.templateGeneration`).
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// The label with which pods carry the template generation they were made from.
pub const POD_TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// Pods by the name of the node they are for, in node-name order.
pub type NodesToPods = BTreeMap<String, Vec<Arc<Pod>>>;

/// Groups `pods` by [`target_node_name`]; pods for no node are left out (with a log).
pub fn nodes_to_pods(pods: &[Arc<Pod>]) -> NodesToPods {
    let mut out = NodesToPods::new();
    for pod in pods {
        match target_node_name(pod) {
            Some(node) => out.entry(node).or_default().push(Arc::clone(pod)),
            None => tracing::warn!(
                pod = pod.metadata.name.as_deref().unwrap_or(""),
                "daemon pod has no node name and no node-name affinity"
            ),
        }
    }
    out
}

/// The DaemonSet's template generation, if the server recorded one.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()?
        .get(TEMPLATE_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// Whether `pod` was made from the current template: its revision label is `hash`, or its
/// template-generation label is `generation`.
pub fn is_pod_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let label = |k: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(k));
    let hash_matches = !hash.is_empty() && label(POD_REVISION_LABEL).is_some_and(|v| v == hash);
    let generation_matches = generation
        .is_some_and(|g| label(POD_TEMPLATE_GENERATION_LABEL).is_some_and(|v| *v == g.to_string()));
    hash_matches || generation_matches
}

/// Kubernetes' order of daemon pods on a node: bound ones first, then older first, then by
/// name.
pub fn cmp_by_creation_and_phase(a: &Pod, b: &Pod) -> Ordering {
    let bound = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    bound(b)
        .cmp(&bound(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The one current and the one old pod not being deleted on a node; `None` when there are
/// two of either (the manage step cleans such a node up first).
#[allow(clippy::type_complexity)]
pub fn find_updated_pods_on_node(
    pods: &[Arc<Pod>],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<Arc<Pod>>, Option<Arc<Pod>>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = if is_pod_updated(pod, hash, generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(Arc::clone(pod));
    }
    Some((new, old))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A pod for `node` (bound when `bound`), with revision label `hash`, created at `t`.
    pub fn pod(name: &str, node: &str, bound: bool, hash: &str, t: i64) -> Arc<Pod> {
        let spec = if bound {
            json!({"nodeName": node, "containers": []})
        } else {
            json!({"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In",
                        "values": [node]}]}]}}}})
        };
        let ts = k8s_openapi::jiff::Timestamp::from_second(t)
            .unwrap()
            .to_string();
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
                "uid": format!("uid-{name}"), "creationTimestamp": ts,
                "labels": {"app": "a", "controller-revision-hash": hash}},
                "spec": spec}))
            .unwrap(),
        )
    }

    #[test]
    fn grouping_order_and_revisions() {
        let pods = vec![
            pod("b", "n1", false, "h1", 5),
            pod("a", "n1", true, "h0", 9),
            pod("c", "n2", true, "h1", 1),
        ];
        let by_node = nodes_to_pods(&pods);
        assert_eq!(by_node.keys().collect::<Vec<_>>(), ["n1", "n2"]);
        let mut n1 = by_node["n1"].clone();
        n1.sort_by(|a, b| cmp_by_creation_and_phase(a, b));
        // The bound pod first, though it is newer.
        assert_eq!(n1[0].metadata.name.as_deref(), Some("a"));
        let (new, old) = find_updated_pods_on_node(&n1, "h1", None).unwrap();
        assert_eq!(new.unwrap().metadata.name.as_deref(), Some("b"));
        assert_eq!(old.unwrap().metadata.name.as_deref(), Some("a"));
        let two_new = vec![pod("x", "n1", true, "h1", 1), pod("y", "n1", true, "h1", 2)];
        assert!(find_updated_pods_on_node(&two_new, "h1", None).is_none());
        assert!(!is_pod_updated(&pods[0], "", None));
        let mut labelled = (*pods[1]).clone();
        labelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(POD_TEMPLATE_GENERATION_LABEL.into(), "3".into());
        assert!(is_pod_updated(&labelled, "h9", Some(3)));
        assert!(!is_pod_updated(&labelled, "h9", Some(4)));
    }
}
