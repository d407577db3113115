//! RBAC's guard against privilege escalation: a user may write a Role or ClusterRole only
//! with rules they hold themselves (or with the `escalate` verb on it), and a binding only
//! to a role whose rules they hold (or with the `bind` verb on that role), as
//! kube-apiserver's RBAC registry checks. Members of `system:masters` hold every rule.

use super::policy_rule::PolicyRule;
use super::snapshot::RoleRef;
use super::Rbac;
use crate::auth::attributes::Attributes;
use crate::auth::user_info::UserInfo;
use api::{Reason, Status};
use serde_json::Value;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Checks a write of RBAC object `obj` (of `resource`, in `namespace`) by `user`.
///
/// # Errors
/// 403 naming the rules the user does not hold, or the role they may not bind.
pub fn check_write(
    rbac: &Rbac,
    user: &UserInfo,
    resource: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), Status> {
    if user.is_master() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match resource {
        "roles" | "clusterroles" => {
            let escalate = Attributes::resource("escalate", GROUP, resource, "", namespace, name);
            if rbac.authorize(user, &escalate).allowed {
                return Ok(());
            }
            // An aggregation rule can pull in any role's rules: only a user who holds every
            // permission may set one, as kube-apiserver requires.
            if obj.get("aggregationRule").is_some_and(|a| !a.is_null()) {
                let full = [
                    PolicyRule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..PolicyRule::default()
                    },
                    PolicyRule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..PolicyRule::default()
                    },
                ];
                let held = rbac.rules_for(user, namespace);
                if !full.iter().all(|r| r.covered_by(&held)) {
                    return Err(forbidden(
                        resource,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
            }
            ensure_held(
                rbac,
                user,
                namespace,
                &PolicyRule::list_from_json(obj),
                resource,
                name,
            )
        }
        "rolebindings" | "clusterrolebindings" => {
            let Some((kind, role)) = obj.get("roleRef").and_then(|r| {
                Some((
                    r.get("kind").and_then(Value::as_str)?,
                    r.get("name").and_then(Value::as_str)?,
                ))
            }) else {
                // Validation refuses a binding without a complete roleRef.
                return Ok(());
            };
            let (role_ref, role_resource) = match kind {
                "ClusterRole" => (RoleRef::Cluster(role.into()), "clusterroles"),
                _ => (RoleRef::Namespaced(role.into()), "roles"),
            };
            let bind = Attributes::resource("bind", GROUP, role_resource, "", namespace, role);
            if rbac.authorize(user, &bind).allowed {
                return Ok(());
            }
            let rules = rbac
                .snapshot()
                .role_rules(&role_ref, namespace)
                .ok_or_else(|| {
                    forbidden(
                        resource,
                        name,
                        format!(
                            "user \"{}\" may not bind {kind} \"{role}\", which does not exist, without the bind verb on it",
                            user.name
                        ),
                    )
                })?;
            ensure_held(rbac, user, namespace, &rules, resource, name)
        }
        _ => Ok(()),
    }
}

fn ensure_held(
    rbac: &Rbac,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
    resource: &str,
    name: &str,
) -> Result<(), Status> {
    let held = rbac.rules_for(user, namespace);
    let missing: Vec<String> = rules
        .iter()
        .filter(|r| !r.covered_by(&held))
        .map(|r| r.to_json().to_string())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(forbidden(
        resource,
        name,
        format!(
            "user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            user.groups,
            missing.join("\n")
        ),
    ))
}

fn forbidden(resource: &str, name: &str, why: String) -> Status {
    Status::new(
        Reason::Forbidden,
        format!("{resource}.{GROUP} \"{name}\" is forbidden: {why}"),
    )
    .with_details(resource, name)
    .with_group(GROUP)
}
