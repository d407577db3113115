//! `NodeAffinity`: the node's labels must satisfy the pod's `nodeSelector` (every pair) and
//! its required node affinity (any one term, each term all of its requirements; field
//! requirements are on `metadata.name`).

use crate::scheduler::node_info::NodeData;
use crate::scheduler::pod_info::{PodInfo, SelectorTerm};

fn term_matches(term: &SelectorTerm, node: &NodeData) -> bool {
    term.labels.iter().all(|r| r.matches(node.label(&r.key)))
        && term.fields.iter().all(|r| r.matches(Some(node.name())))
}

/// Whether `node` satisfies `pod`'s node selector and required node affinity.
pub fn fits(pod: &PodInfo, node: &NodeData) -> bool {
    if !pod
        .node_selector
        .iter()
        .all(|(k, v)| node.label(k) == Some(v.as_str()))
    {
        return false;
    }
    match &pod.required_affinity {
        None => true,
        Some(terms) => terms.iter().any(|t| term_matches(t, node)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::{json, Value};

    fn affinity(terms: Value) -> Value {
        json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}})
    }

    fn fits_node(pod_extra: Value, labels: Value) -> bool {
        let n = node_info(node("node-1", json!({"metadata": {"labels": labels}})));
        let p = pod_info("p", "0", "0", pod_extra);
        fits(&p, n.data.as_ref().unwrap())
    }

    #[test]
    fn node_selector_needs_every_pair() {
        let sel = json!({"spec": {"nodeSelector": {"disk": "ssd", "zone": "a"}}});
        assert!(fits_node(
            sel.clone(),
            json!({"disk": "ssd", "zone": "a", "x": "y"})
        ));
        assert!(!fits_node(sel.clone(), json!({"disk": "ssd"})));
        assert!(!fits_node(sel, json!({"disk": "hdd", "zone": "a"})));
    }

    #[test]
    fn required_affinity_terms_are_ored_and_requirements_anded() {
        let terms = affinity(json!([
            {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "gpu", "operator": "DoesNotExist"}]},
            {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["16"]}]},
        ]));
        assert!(fits_node(terms.clone(), json!({"zone": "b"})));
        assert!(!fits_node(terms.clone(), json!({"zone": "b", "gpu": "1"})));
        assert!(fits_node(
            terms.clone(),
            json!({"zone": "c", "cores": "32"})
        ));
        assert!(!fits_node(
            terms.clone(),
            json!({"zone": "c", "cores": "8"})
        ));
        assert!(!fits_node(terms, json!({})));
        let lt_notin_exists = affinity(json!([{"matchExpressions": [
            {"key": "cores", "operator": "Lt", "values": ["16"]},
            {"key": "zone", "operator": "NotIn", "values": ["a"]},
            {"key": "ssd", "operator": "Exists"}]}]));
        assert!(fits_node(
            lt_notin_exists.clone(),
            json!({"cores": "8", "ssd": ""})
        ));
        assert!(fits_node(
            lt_notin_exists.clone(),
            json!({"cores": "8", "zone": "b", "ssd": "1"})
        ));
        assert!(!fits_node(
            lt_notin_exists.clone(),
            json!({"cores": "8", "zone": "a", "ssd": "1"})
        ));
        assert!(!fits_node(lt_notin_exists, json!({"cores": "8"})));
    }

    #[test]
    fn match_fields_name_the_node_and_bad_terms_match_nothing() {
        let by_name = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]));
        assert!(fits_node(by_name, json!({})));
        let other = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}]}]));
        assert!(!fits_node(other, json!({})));
        let bad_field = affinity(json!([{"matchFields": [
            {"key": "spec.x", "operator": "In", "values": ["node-1"]}]}]));
        assert!(!fits_node(bad_field, json!({})));
        // An empty term, and no terms at all, match no node.
        assert!(!fits_node(affinity(json!([{}])), json!({})));
        assert!(!fits_node(affinity(json!([])), json!({})));
        // A malformed term is skipped, a good one still matches.
        let mixed = affinity(json!([
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]));
        assert!(fits_node(mixed, json!({"a": "1"})));
    }
}
