//! What an object counts against a `ResourceQuota`: the usage the quota admission adds on a
//! create and the ResourceQuota controller sums over a namespace. No I/O: both ends pass the
//! objects as JSON.
//!
//! Resource names are Kubernetes' quota names: object counts (`pods`, `services`,
//! `configmaps`, `secrets`, `persistentvolumeclaims`, `replicationcontrollers`,
//! `resourcequotas`, `services.loadbalancers`, `services.nodeports`, and `count/R` or
//! `count/R.GROUP` for any resource), a pod's compute resources (`requests.cpu` or `cpu`,
//! `limits.cpu`, the same for `memory` and `ephemeral-storage`, `requests.X` and `limits.X`
//! for any other resource a container asks for) and a claim's storage (`requests.storage`,
//! and `CLASS.storageclass.storage.k8s.io/requests.storage` and
//! `…/persistentvolumeclaims` per storage class).
//!
//! Amounts are integers: CPU (every name ending in `cpu`) in millicores, everything else in
//! whole units, as [`crate::quantity`] reads them.

use crate::quantity;
use serde_json::Value;
use std::collections::BTreeMap;

/// Amounts by quota resource name. A name absent is zero.
pub type ResourceList = BTreeMap<String, i64>;

/// Whether amounts of `resource` are kept in thousandths (CPU).
pub fn is_milli(resource: &str) -> bool {
    resource.ends_with("cpu")
}

/// The amount `text` gives `resource`, in the unit [`is_milli`] decides; `None` if it does
/// not parse.
pub fn amount(resource: &str, text: &str) -> Option<i64> {
    if is_milli(resource) {
        quantity::milli_value(text)
    } else {
        quantity::value(text)
    }
}

/// A `{name: quantity}` map (`spec.hard`, `status.used`) read as amounts; entries that do
/// not parse are left out.
pub fn parse_list(map: Option<&Value>) -> ResourceList {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), amount(k, v.as_str()?)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// `list` as a JSON `{name: quantity}` map.
pub fn format_list(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| (k.clone(), Value::String(quantity::format(*v, is_milli(k)))))
            .collect(),
    )
}

/// The object-count name of a resource: `count/pods`, `count/deployments.apps`.
pub fn count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The core resources a quota also counts under their bare name (`pods: "10"`).
const LEGACY_COUNTS: &[&str] = &[
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// Container resources a pod's requests also count under their bare name (`cpu`).
const STANDARD_COMPUTE: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// What `obj` (of `resource` in `group`) counts against a quota. A pod that has finished
/// (phase `Succeeded` or `Failed`) counts nothing.
pub fn usage(group: &str, resource: &str, obj: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    if group.is_empty() && resource == "pods" && !pod_counts(obj) {
        return out;
    }
    out.insert(count_name(group, resource), 1);
    if !group.is_empty() {
        return out;
    }
    if LEGACY_COUNTS.contains(&resource) {
        out.insert(resource.to_string(), 1);
    }
    match resource {
        "pods" => {
            let (requests, limits) = pod_compute(obj);
            for (name, v) in requests {
                if STANDARD_COMPUTE.contains(&name.as_str()) {
                    out.insert(name.clone(), v);
                }
                out.insert(format!("requests.{name}"), v);
            }
            for (name, v) in limits {
                out.insert(format!("limits.{name}"), v);
            }
        }
        "services" => {
            let spec = obj.get("spec");
            let kind = spec
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            let ports = spec
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len) as i64;
            let node_ports = match kind {
                "NodePort" => ports,
                "LoadBalancer" => {
                    let allocate = spec
                        .and_then(|s| s.get("allocateLoadBalancerNodePorts"))
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    if allocate {
                        ports
                    } else {
                        0
                    }
                }
                _ => 0,
            };
            out.insert("services.nodeports".into(), node_ports);
            out.insert(
                "services.loadbalancers".into(),
                i64::from(kind == "LoadBalancer"),
            );
        }
        "persistentvolumeclaims" => {
            let spec = obj.get("spec");
            let storage = spec
                .and_then(|s| s.pointer("/resources/requests/storage"))
                .and_then(Value::as_str)
                .and_then(quantity::value)
                .unwrap_or(0);
            out.insert("requests.storage".into(), storage);
            if let Some(class) = spec
                .and_then(|s| s.get("storageClassName"))
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
            {
                out.insert(
                    format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                    storage,
                );
                out.insert(
                    format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"),
                    1,
                );
            }
        }
        _ => {}
    }
    out
}

/// Whether a pod still holds what it asked for: not once it has succeeded or failed.
pub fn pod_counts(pod: &Value) -> bool {
    !matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// A pod's effective requests and limits by resource name (`cpu`, `memory`, …): the sum
/// over its containers and sidecars (init containers that keep running), or an init
/// container's own figure plus the sidecars started before it if that is larger, plus the
/// pod's overhead (on limits, only those the pod sets).
pub fn pod_compute(pod: &Value) -> (ResourceList, ResourceList) {
    let spec = pod.get("spec");
    let list = |key: &str| {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let mut out = (ResourceList::new(), ResourceList::new());
    for (field, total) in [("requests", &mut out.0), ("limits", &mut out.1)] {
        let of = |c: &Value| parse_list(c.pointer(&format!("/resources/{field}")));
        for c in list("containers") {
            add(total, &of(c));
        }
        let mut sidecars = ResourceList::new();
        let mut init_peak = ResourceList::new();
        for c in list("initContainers") {
            let own = of(c);
            if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
                add(&mut sidecars, &own);
                add(total, &own);
                continue;
            }
            let mut during = sidecars.clone();
            add(&mut during, &own);
            for (k, v) in during {
                let peak = init_peak.entry(k).or_insert(0);
                *peak = (*peak).max(v);
            }
        }
        for (k, v) in init_peak {
            let t = total.entry(k).or_insert(0);
            *t = (*t).max(v);
        }
        let mut overhead = parse_list(spec.and_then(|s| s.get("overhead")));
        if field == "limits" {
            // Overhead raises only the limits a pod has: no limit stays no limit.
            overhead.retain(|k, _| total.contains_key(k));
        }
        add(total, &overhead);
    }
    out
}

/// `into += from`, per name, saturating.
pub fn add(into: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

/// Whether a quota with these `spec.scopes` and `spec.scopeSelector` applies to `obj`.
/// Scopes select pods only: a quota with any scope does not apply to other kinds.
pub fn scopes_match(quota_spec: Option<&Value>, group: &str, resource: &str, obj: &Value) -> bool {
    let scopes: Vec<&str> = quota_spec
        .and_then(|s| s.get("scopes"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let selector: &[Value] = quota_spec
        .and_then(|s| s.pointer("/scopeSelector/matchExpressions"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    if !(group.is_empty() && resource == "pods") {
        return false;
    }
    let plain = scopes.iter().all(|s| pod_in_scope(obj, s, "Exists", &[]));
    plain
        && selector.iter().all(|e| {
            let scope = e.get("scopeName").and_then(Value::as_str).unwrap_or("");
            let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            pod_in_scope(obj, scope, op, &values)
        })
}

fn pod_in_scope(pod: &Value, scope: &str, op: &str, values: &[&str]) -> bool {
    let spec = pod.get("spec");
    let holds = match scope {
        "Terminating" => has_deadline(spec),
        "NotTerminating" => !has_deadline(spec),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = spec
                .and_then(|s| s.get("priorityClassName"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return match op {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            };
        }
        "CrossNamespacePodAffinity" => false,
        _ => return false,
    };
    match op {
        "Exists" => holds,
        "DoesNotExist" => !holds,
        _ => false,
    }
}

/// A pod spec with an `activeDeadlineSeconds`.
fn has_deadline(spec: Option<&Value>) -> bool {
    spec.and_then(|s| s.get("activeDeadlineSeconds"))
        .is_some_and(|v| !v.is_null())
}

/// A pod none of whose containers requests or limits CPU or memory.
pub fn is_best_effort(pod: &Value) -> bool {
    let spec = pod.get("spec");
    ["containers", "initContainers"].iter().all(|key| {
        spec.and_then(|s| s.get(*key))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .all(|c| {
                ["requests", "limits"].iter().all(|field| {
                    let m = c.pointer(&format!("/resources/{field}"));
                    !["cpu", "memory"]
                        .iter()
                        .any(|r| m.and_then(|m| m.get(*r)).is_some())
                })
            })
    })
}

/// The compute resources a quota's `hard` names that a pod's containers must state, as
/// `"limits.cpu for: web,sidecar"` strings (empty when nothing is missing). A quota on
/// `requests.cpu` (or `cpu`) needs every container to request CPU, so that usage can be
/// counted.
pub fn missing_compute(hard: &ResourceList, pod: &Value) -> Vec<String> {
    let spec = pod.get("spec");
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|key| {
            spec.and_then(|s| s.get(*key))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .collect();
    let mut out = Vec::new();
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        for (field, names) in [
            ("limits", vec![format!("limits.{resource}")]),
            (
                "requests",
                vec![format!("requests.{resource}"), resource.to_string()],
            ),
        ] {
            if !names.iter().any(|n| hard.contains_key(n)) {
                continue;
            }
            let lacking: Vec<&str> = containers
                .iter()
                .filter(|c| {
                    c.pointer(&format!("/resources/{field}/{resource}"))
                        .is_none()
                })
                .map(|c| c.get("name").and_then(Value::as_str).unwrap_or(""))
                .collect();
            if !lacking.is_empty() {
                out.push(format!("{}.{resource} for: {}", field, lacking.join(",")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_counts_itself_and_its_effective_requests_and_limits() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m", "nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"memory": "32Mi"}}}
            ],
            "overhead": {"cpu": "10m", "memory": "1Mi"}
        }});
        let u = usage("", "pods", &pod);
        assert_eq!(u["pods"], 1);
        assert_eq!(u["count/pods"], 1);
        // max(100m + 200m, 500m) + 10m of overhead.
        assert_eq!(u["requests.cpu"], 510);
        assert_eq!(u["cpu"], 510);
        assert_eq!(u["requests.memory"], 97 << 20);
        assert!(!u.contains_key("limits.memory"));
        // The overhead counts against limits too.
        assert_eq!(u["limits.cpu"], 1010);
        assert_eq!(u["requests.nvidia.com/gpu"], 1);
        assert!(!u.contains_key("nvidia.com/gpu"));
        let done = json!({"spec": pod["spec"], "status": {"phase": "Succeeded"}});
        assert!(usage("", "pods", &done).is_empty());
    }

    #[test]
    fn services_claims_and_other_kinds() {
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}});
        let u = usage("", "services", &svc);
        assert_eq!(
            (
                u["services"],
                u["services.nodeports"],
                u["services.loadbalancers"]
            ),
            (1, 2, 0)
        );
        let claim = json!({"spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}});
        let u = usage("", "persistentvolumeclaims", &claim);
        assert_eq!(u["requests.storage"], 1 << 30);
        assert_eq!(
            u["fast.storageclass.storage.k8s.io/persistentvolumeclaims"],
            1
        );
        let u = usage("apps", "deployments", &json!({}));
        assert_eq!(u.len(), 1);
        assert_eq!(u["count/deployments.apps"], 1);
    }

    #[test]
    fn scopes_select_pods_by_deadline_qos_and_priority_class() {
        let best_effort = json!({"spec": {"containers": [{"name": "a"}]}});
        let burstable = json!({"spec": {"priorityClassName": "high", "activeDeadlineSeconds": 5,
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        let scoped = |scopes: Value| json!({"scopes": scopes});
        assert!(scopes_match(
            Some(&scoped(json!(["BestEffort"]))),
            "",
            "pods",
            &best_effort
        ));
        assert!(!scopes_match(
            Some(&scoped(json!(["BestEffort"]))),
            "",
            "pods",
            &burstable
        ));
        assert!(scopes_match(
            Some(&scoped(json!(["Terminating", "NotBestEffort"]))),
            "",
            "pods",
            &burstable
        ));
        assert!(!scopes_match(
            Some(&scoped(json!(["BestEffort"]))),
            "",
            "services",
            &json!({})
        ));
        assert!(scopes_match(None, "", "services", &json!({})));
        let by_class = json!({"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}});
        assert!(scopes_match(Some(&by_class), "", "pods", &burstable));
        assert!(!scopes_match(Some(&by_class), "", "pods", &best_effort));
    }

    #[test]
    fn a_quota_on_compute_names_the_containers_that_do_not_state_it() {
        let hard = parse_list(Some(
            &json!({"limits.cpu": "2", "requests.memory": "1Gi", "pods": "3"}),
        ));
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Mi"}}},
            {"name": "b"}
        ]}});
        assert_eq!(
            missing_compute(&hard, &pod),
            vec![
                "limits.cpu for: b".to_string(),
                "requests.memory for: b".to_string()
            ]
        );
        assert!(missing_compute(&parse_list(Some(&json!({"pods": "1"}))), &pod).is_empty());
    }

    #[test]
    fn lists_read_and_write_quantities() {
        let list = parse_list(Some(
            &json!({"requests.cpu": "1500m", "memory": "1Gi", "pods": "4", "bad": "x"}),
        ));
        assert_eq!(list.len(), 3);
        assert_eq!(
            format_list(&list),
            json!({"requests.cpu": "1500m", "memory": "1Gi", "pods": "4"})
        );
    }
}
