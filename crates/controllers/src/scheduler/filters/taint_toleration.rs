//! `TaintToleration`: a pod may only land on a node whose `NoSchedule` and `NoExecute`
//! taints it all tolerates.
//!
//! A toleration tolerates a taint when its effect is empty or the taint's, its key is empty
//! (with `Exists`: every key) or the taint's, and with operator `Exists` for any value, or
//! `Equal` (the default) for the taint's value exactly.

use k8s_openapi::api::core::v1::Toleration;

use crate::scheduler::node_info::{NodeData, NodeTaint, TaintEffect};
use crate::scheduler::pod_info::PodInfo;

/// Whether `toleration` tolerates a taint `key=value:effect`.
pub fn tolerates(toleration: &Toleration, key: &str, value: &str, effect: TaintEffect) -> bool {
    if let Some(e) = toleration.effect.as_deref().filter(|e| !e.is_empty()) {
        if e != effect.as_str() {
            return false;
        }
    }
    if let Some(k) = toleration.key.as_deref().filter(|k| !k.is_empty()) {
        if k != key {
            return false;
        }
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == value,
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates the taint.
pub fn any_tolerates(
    tolerations: &[Toleration],
    key: &str,
    value: &str,
    effect: TaintEffect,
) -> bool {
    tolerations.iter().any(|t| tolerates(t, key, value, effect))
}

/// The node's first taint the pod does not tolerate, if any.
pub fn first_untolerated<'n>(pod: &PodInfo, node: &'n NodeData) -> Option<&'n NodeTaint> {
    node.taints
        .iter()
        .find(|t| !any_tolerates(&pod.tolerations, &t.key, &t.value, t.effect))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::json;

    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn toleration_matching() {
        use TaintEffect::*;
        let equal = tol(json!({"key": "k", "value": "v", "effect": "NoSchedule"}));
        assert!(tolerates(&equal, "k", "v", NoSchedule));
        assert!(!tolerates(&equal, "k", "w", NoSchedule));
        assert!(!tolerates(&equal, "k", "v", NoExecute));
        assert!(!tolerates(&equal, "j", "v", NoSchedule));
        let exists = tol(json!({"key": "k", "operator": "Exists"}));
        assert!(tolerates(&exists, "k", "anything", NoExecute));
        assert!(!tolerates(&exists, "j", "", NoExecute));
        let everything = tol(json!({"operator": "Exists"}));
        assert!(tolerates(&everything, "any", "x", NoSchedule));
        let empty_value = tol(json!({"key": "k"}));
        assert!(tolerates(&empty_value, "k", "", NoSchedule));
        assert!(!tolerates(&empty_value, "k", "v", NoSchedule));
        let bad_operator = tol(json!({"key": "k", "operator": "Like"}));
        assert!(!tolerates(&bad_operator, "k", "", NoSchedule));
    }

    #[test]
    fn first_untolerated_taint_is_reported() {
        let n = node_info(node(
            "n",
            json!({"spec": {"taints": [
                {"key": "a", "value": "1", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": "b", "value": "2", "effect": "NoExecute"}]}}),
        ));
        let data = n.data.as_ref().unwrap();
        let none = pod_info("p", "0", "0", json!({}));
        assert_eq!(
            &*first_untolerated(&none, data).unwrap().reason,
            "node(s) had untolerated taint {a: 1}"
        );
        let tolerates_a = pod_info(
            "p",
            "0",
            "0",
            json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}),
        );
        assert_eq!(
            &*first_untolerated(&tolerates_a, data).unwrap().reason,
            "node(s) had untolerated taint {b: 2}"
        );
        let both = pod_info(
            "p",
            "0",
            "0",
            json!({"spec": {"tolerations": [
            {"key": "a", "operator": "Exists"}, {"key": "b", "value": "2"}]}}),
        );
        assert!(
            first_untolerated(&both, data).is_none(),
            "PreferNoSchedule never filters"
        );
    }

    #[test]
    fn nodes_that_are_not_ready_take_only_pods_that_tolerate_it() {
        let n = node_info(node(
            "n",
            json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}]}}),
        ));
        let data = n.data.as_ref().unwrap();
        let plain = pod_info("p", "0", "0", json!({}));
        assert_eq!(
            &*first_untolerated(&plain, data).unwrap().reason,
            "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
        let tolerant = pod_info(
            "p",
            "0",
            "0",
            json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]}}),
        );
        assert!(first_untolerated(&tolerant, data).is_none());
    }
}
