//! kube-apiserver's `TaintNodesByCondition` admission plugin (on by default): a Node is
//! created with the `node.kubernetes.io/not-ready:NoSchedule` taint, so that no pod is
//! scheduled onto it before the node lifecycle controller has seen it Ready and removed the
//! taint. Only creates of the main resource are touched; updates and `/status` are not.

use super::default_tolerations::NOT_READY;
use serde_json::{json, Map, Value};

/// The effect of the taint this plugin adds.
const NO_SCHEDULE: &str = "NoSchedule";

/// Adds the not-ready `NoSchedule` taint to a new node's `spec` unless a taint with that key
/// and effect is already there (whatever its value). A `taints` of the wrong type is left
/// for validation to refuse.
pub fn apply(node: &mut Map<String, Value>) {
    let spec = node.entry("spec").or_insert_with(|| json!({}));
    if spec.is_null() {
        *spec = json!({});
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if taints.is_null() {
        *taints = json!([]);
    }
    let Some(taints) = taints.as_array_mut() else {
        return;
    };
    let present = taints.iter().any(|t| {
        t.get("key") == Some(&json!(NOT_READY)) && t.get("effect") == Some(&json!(NO_SCHEDULE))
    });
    if !present {
        taints.push(json!({"key": NOT_READY, "effect": NO_SCHEDULE}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_new_node_gets_the_not_ready_taint_once() {
        let mut n = node(json!({"metadata": {"name": "a"}}));
        apply(&mut n);
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": NOT_READY, "effect": "NoSchedule"}])
        );
        apply(&mut n);
        assert_eq!(n["spec"]["taints"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn other_taints_are_kept_and_a_matching_one_is_not_doubled() {
        let mut n = node(json!({"spec": {"taints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}));
        apply(&mut n);
        assert_eq!(n["spec"]["taints"].as_array().map(Vec::len), Some(2));
        let mut m = node(json!({"spec": {"taints": [
            {"key": NOT_READY, "value": "x", "effect": "NoSchedule"}]}}));
        apply(&mut m);
        assert_eq!(m["spec"]["taints"][0]["value"], "x");
        assert_eq!(m["spec"]["taints"].as_array().map(Vec::len), Some(1));
        // NoExecute with the same key is another taint.
        let mut e = node(json!({"spec": {"taints": [{"key": NOT_READY, "effect": "NoExecute"}]}}));
        apply(&mut e);
        assert_eq!(e["spec"]["taints"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn a_malformed_spec_is_left_for_validation() {
        let mut n = node(json!({"spec": {"taints": "nope"}}));
        apply(&mut n);
        assert_eq!(n["spec"]["taints"], "nope");
        let mut s = node(json!({"spec": 7}));
        apply(&mut s);
        assert_eq!(s["spec"], 7);
    }
}
