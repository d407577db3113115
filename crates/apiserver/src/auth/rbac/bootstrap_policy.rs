//! The default RBAC policy (`bootstrap_policy.yaml`): the roles and bindings kube-apiserver
//! creates at start (cluster-admin, admin/edit/view by aggregation, system:discovery,
//! system:basic-user, the control plane's and nodes' roles, …). The server creates every
//! object that is missing at each start; one a user changed is left as it is.

use serde_json::Value;

const POLICY: &str = include_str!("bootstrap_policy.yaml");

/// The policy's objects as `(resource, namespace, name, object)`, in file order.
///
/// # Errors
/// The embedded file does not parse (a build defect, caught by this module's tests).
pub fn objects() -> Result<Vec<(&'static str, String, String, Value)>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(POLICY) {
        let v: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("bootstrap policy: {e}"))?;
        if v.is_null() {
            continue;
        }
        let resource = match v.get("kind").and_then(Value::as_str) {
            Some("ClusterRole") => "clusterroles",
            Some("ClusterRoleBinding") => "clusterrolebindings",
            Some("Role") => "roles",
            Some("RoleBinding") => "rolebindings",
            other => return Err(format!("bootstrap policy: unexpected kind {other:?}")),
        };
        let meta = |k: &str| {
            v.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (ns, name) = (meta("namespace"), meta("name"));
        out.push((resource, ns, name, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::rbac::policy_rule::PolicyRule;

    #[test]
    fn the_policy_parses_and_has_the_roles_kubernetes_has() {
        let objs = objects().unwrap();
        let find = |res: &str, name: &str| {
            objs.iter()
                .find(|(r, _, n, _)| *r == res && n == name)
                .map(|o| &o.3)
                .unwrap_or_else(|| panic!("{res} {name} missing"))
        };
        for role in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:discovery",
            "system:basic-user",
            "system:public-info-viewer",
            "system:kube-scheduler",
            "system:kube-controller-manager",
            "system:node",
        ] {
            find("clusterroles", role);
        }
        let admin = find("clusterroles", "cluster-admin");
        assert_eq!(PolicyRule::list_from_json(admin).len(), 2);
        let binding = find("clusterrolebindings", "cluster-admin");
        assert_eq!(binding["subjects"][0]["name"], "system:masters");
        assert!(find("clusterroles", "view")["aggregationRule"].is_object());
        for (_, _, name, v) in &objs {
            assert!(!name.is_empty());
            assert_eq!(
                v.pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate"),
                Some(&Value::from("true")),
                "{name}"
            );
        }
    }
}
