//! kube-apiserver's `DefaultTolerationSeconds` admission plugin (on by default): every pod
//! written through the pods resource (create and update, not its subresources) that does not
//! already tolerate the `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable`
//! `NoExecute` taints gets a toleration for each, for 300 seconds, so that the node lifecycle
//! controller evicts its pods five minutes after their node fails.
//!
//! A toleration counts when its key is that taint's (or empty, meaning every key) and its
//! effect is `NoExecute` (or empty, meaning every effect); its operator and seconds do not
//! matter. Pod templates are not touched: the plugin sees pods only.

use serde_json::{json, Map, Value};

/// The taint a node gets while it is not ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint a node gets while the control plane cannot reach it.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The seconds the added tolerations allow (the plugin's default for both).
pub const DEFAULT_SECONDS: i64 = 300;

/// Adds the missing default tolerations to a pod's `spec` (in place).
pub fn apply(spec: &mut Map<String, Value>) {
    let tolerates = |spec: &Map<String, Value>, taint: &str| {
        spec.get("tolerations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| {
                let field = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
                (field("key") == taint || field("key").is_empty())
                    && (field("effect") == "NoExecute" || field("effect").is_empty())
            })
    };
    let missing: Vec<&str> = [NOT_READY, UNREACHABLE]
        .into_iter()
        .filter(|taint| !tolerates(spec, taint))
        .collect();
    if missing.is_empty() {
        return;
    }
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    if list.is_null() {
        *list = json!([]);
    }
    // A value of the wrong type is left for validation to refuse.
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for taint in missing {
        list.push(json!({
            "key": taint,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_SECONDS,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn keys(s: &Map<String, Value>) -> Vec<(String, Option<i64>)> {
        s["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap_or("").to_string(),
                    t.get("tolerationSeconds").and_then(Value::as_i64),
                )
            })
            .collect()
    }

    #[test]
    fn both_are_added_to_a_pod_without_them() {
        let mut s = spec(json!({"containers": []}));
        apply(&mut s);
        assert_eq!(
            s["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        // Applying again changes nothing.
        let before = s.clone();
        apply(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn a_pod_that_tolerates_a_taint_keeps_its_own_toleration() {
        let mut s = spec(json!({"tolerations": [
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        ]}));
        apply(&mut s);
        assert_eq!(
            keys(&s),
            [
                (UNREACHABLE.to_string(), Some(5)),
                ("gpu".to_string(), None),
                (NOT_READY.to_string(), Some(300))
            ]
        );
        // An empty key or effect tolerates everything.
        for t in [
            json!({"operator": "Exists"}),
            json!({"operator": "Exists", "effect": "NoExecute"}),
            json!({"key": NOT_READY, "operator": "Exists"}),
        ] {
            let mut s = spec(json!({"tolerations": [t.clone()]}));
            apply(&mut s);
            let n = s["tolerations"].as_array().unwrap().len();
            let expected = if t.get("key").is_some() { 2 } else { 1 };
            assert_eq!(n, expected, "{t}");
        }
        // A NoSchedule toleration of the same key does not count.
        let mut s = spec(
            json!({"tolerations": [{"key": NOT_READY, "effect": "NoSchedule", "operator": "Exists"}]}),
        );
        apply(&mut s);
        assert_eq!(s["tolerations"].as_array().unwrap().len(), 3);
    }
}
