//! Which requests a policy's `matchConstraints` (or a binding's `matchResources`) select:
//! `resourceRules` minus `excludeResourceRules` (API groups, versions, resources with
//! subresources, operations, scope), `namespaceSelector` on the namespace's labels and
//! `objectSelector` on the object's (or, for a delete, the old object's) labels.

use super::Request;
use api::labels::LabelSelector;
use serde_json::{Map, Value};

/// Whether `m` (a `MatchResources`) selects `req`, whose namespace is `namespace` (for a
/// namespaced object). An absent `m` selects everything.
pub fn matches(
    m: Option<&Value>,
    req: &Request<'_>,
    namespace: Option<&Map<String, Value>>,
) -> bool {
    let Some(m) = m.and_then(Value::as_object) else {
        return true;
    };
    let rules = |key: &str| -> Vec<&Value> {
        m.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    };
    let included = rules("resourceRules");
    // A policy's constraints must name resources; a binding that names none takes the
    // policy's.
    if m.contains_key("resourceRules") && !included.iter().any(|r| rule_matches(r, req)) {
        return false;
    }
    if rules("excludeResourceRules")
        .iter()
        .any(|r| rule_matches(r, req))
    {
        return false;
    }
    if !selects(m.get("objectSelector"), object_labels(req)) {
        return false;
    }
    // The namespace selector decides for namespaced objects and for namespaces themselves;
    // other cluster-scoped objects pass it.
    let ns_labels = if req.info.group.is_empty() && req.info.resource == "namespaces" {
        object_labels(req)
    } else if req.info.namespaced {
        namespace
            .and_then(|n| n.get("metadata"))
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
    } else {
        return true;
    };
    selects(m.get("namespaceSelector"), ns_labels)
}

/// The labels of the object (the old one for a delete).
fn object_labels<'a>(req: &'a Request<'_>) -> Option<&'a Map<String, Value>> {
    req.object
        .or(req.old_object)
        .and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

/// Whether a label selector (absent: everything) selects `labels`.
fn selects(selector: Option<&Value>, labels: Option<&Map<String, Value>>) -> bool {
    let Some(sel) = selector.filter(|s| !s.is_null()) else {
        return true;
    };
    match LabelSelector::from_object(sel) {
        Ok(Some(sel)) => {
            let empty = Map::new();
            sel.matches(labels.unwrap_or(&empty))
        }
        Ok(None) => true,
        Err(_) => false,
    }
}

fn listed(rule: &Value, key: &str, want: &str) -> bool {
    rule.get(key).and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .any(|v| v == "*" || v == want)
    })
}

/// Whether one `NamedRuleWithOperations` selects `req`.
fn rule_matches(rule: &Value, req: &Request<'_>) -> bool {
    if !listed(rule, "apiGroups", req.info.group)
        || !listed(rule, "apiVersions", req.info.version)
        || !listed(rule, "operations", req.operation.name())
    {
        return false;
    }
    let names: Vec<&str> = rule
        .get("resourceNames")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !names.is_empty() && !names.contains(&req.name) {
        return false;
    }
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let scoped = match scope {
        "Cluster" => !req.info.namespaced,
        "Namespaced" => req.info.namespaced,
        _ => true,
    };
    if !scoped {
        return false;
    }
    let resources: Vec<&str> = rule
        .get("resources")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    resources
        .iter()
        .any(|r| resource_matches(r, req.info.resource, req.subresource))
}

/// `pods` selects pods, `pods/status` their status, `pods/*` every subresource of pods,
/// `*` every resource (not subresources), `*/*` everything, `*/status` every status.
fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    let (p_res, p_sub) = match pattern.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (pattern, None),
    };
    let res_ok = p_res == "*" || p_res == resource;
    let sub_ok = match (p_sub, subresource) {
        (None, "") => true,
        (None, _) => false,
        (Some("*"), _) => true,
        (Some(s), sub) => s == sub,
    };
    res_ok && sub_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_and_subresources() {
        assert!(resource_matches("pods", "pods", ""));
        assert!(!resource_matches("pods", "pods", "status"));
        assert!(resource_matches("pods/status", "pods", "status"));
        assert!(resource_matches("pods/*", "pods", "status"));
        assert!(resource_matches("*", "deployments", ""));
        assert!(!resource_matches("*", "deployments", "scale"));
        assert!(resource_matches("*/scale", "deployments", "scale"));
        assert!(resource_matches("*/*", "deployments", ""));
        assert!(!resource_matches("services", "pods", ""));
    }
}
