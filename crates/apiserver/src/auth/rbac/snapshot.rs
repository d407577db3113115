//! An index of every Role, ClusterRole, RoleBinding and ClusterRoleBinding, built from the
//! watch caches, that answers "which rules apply to this user here" without parsing JSON.
//! Aggregated ClusterRoles (`aggregationRule`) get the rules of the roles their selectors
//! pick, as the aggregation controller would store them.

use super::policy_rule::PolicyRule;
use crate::auth::user_info::UserInfo;
use api::labels::LabelSelector;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A role a binding refers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RoleRef {
    /// A ClusterRole, by name.
    Cluster(String),
    /// A Role of the binding's namespace, by name.
    Namespaced(String),
}

/// Who a binding's subject is, in the terms a user is looked up by.
enum SubjectKey {
    User(String),
    Group(String),
}

/// A bound role and the binding's name.
type Bound = (RoleRef, Arc<str>);

/// Bindings of one scope (the cluster, or a namespace), indexed by subject: users
/// (ServiceAccounts by their user names) and groups.
#[derive(Debug, Default)]
struct Scope {
    users: HashMap<String, Vec<Bound>>,
    groups: HashMap<String, Vec<Bound>>,
}

impl Scope {
    fn add(&mut self, binding: Arc<str>, namespace: &str, v: &Value) {
        let Some(role) = role_ref(v) else { return };
        let Some(subjects) = v.get("subjects").and_then(Value::as_array) else {
            return;
        };
        for s in subjects {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                continue;
            }
            let key = match s.get("kind").and_then(Value::as_str) {
                Some("User") => SubjectKey::User(name.into()),
                Some("Group") => SubjectKey::Group(name.into()),
                Some("ServiceAccount") => {
                    let ns = match s.get("namespace").and_then(Value::as_str) {
                        Some(ns) if !ns.is_empty() => ns,
                        _ => namespace,
                    };
                    if ns.is_empty() {
                        continue;
                    }
                    SubjectKey::User(format!("system:serviceaccount:{ns}:{name}"))
                }
                _ => continue,
            };
            let (map, name) = match key {
                SubjectKey::User(n) => (&mut self.users, n),
                SubjectKey::Group(n) => (&mut self.groups, n),
            };
            map.entry(name)
                .or_default()
                .push((role.clone(), binding.clone()));
        }
    }

    /// The roles bound to `user` here (to the user, then to each of its groups), with the
    /// binding's name.
    fn roles_of<'a, 'u>(
        &'a self,
        user: &'u UserInfo,
    ) -> impl Iterator<Item = &'a Bound> + use<'a, 'u> {
        self.users
            .get(user.name.as_str())
            .into_iter()
            .chain(
                user.groups
                    .iter()
                    .filter_map(|g| self.groups.get(g.as_str())),
            )
            .flatten()
    }
}

fn role_ref(v: &Value) -> Option<RoleRef> {
    let r = v.get("roleRef")?;
    let name = r.get("name").and_then(Value::as_str)?.to_string();
    match r.get("kind").and_then(Value::as_str)? {
        "ClusterRole" => Some(RoleRef::Cluster(name)),
        "Role" => Some(RoleRef::Namespaced(name)),
        _ => None,
    }
}

/// The RBAC state at one moment. Immutable; rebuilt when any RBAC object changes.
#[derive(Debug, Default)]
pub struct Snapshot {
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    roles: HashMap<(String, String), Arc<[PolicyRule]>>,
    cluster: Scope,
    namespaces: HashMap<String, Scope>,
    /// The rules each aggregated ClusterRole should store (aggregated, sorted by name).
    aggregated: BTreeMap<String, Vec<PolicyRule>>,
}

/// A stored RBAC object: its namespace, name, labels and JSON.
pub struct Stored<'a> {
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    /// The name.
    pub name: &'a str,
    /// The labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The object.
    pub json: Value,
}

impl Snapshot {
    /// Builds the index from every ClusterRole, Role, ClusterRoleBinding and RoleBinding.
    pub fn build(
        cluster_roles: Vec<Stored<'_>>,
        roles: Vec<Stored<'_>>,
        cluster_bindings: Vec<Stored<'_>>,
        bindings: Vec<Stored<'_>>,
    ) -> Snapshot {
        let mut s = Snapshot::default();
        for r in &cluster_roles {
            s.cluster_roles
                .insert(r.name.into(), PolicyRule::list_from_json(&r.json).into());
        }
        // Aggregation: the union of the rules of every role a selector picks, in name order
        // (cluster_roles arrive in key order), each rule once. An aggregated role may pick
        // another (admin picks edit, which picks view): repeated until nothing changes.
        let mut aggregating: Vec<(&str, Vec<LabelSelector>)> = Vec::new();
        for r in &cluster_roles {
            let Some(selectors) = r
                .json
                .pointer("/aggregationRule/clusterRoleSelectors")
                .and_then(Value::as_array)
            else {
                continue;
            };
            let selectors = selectors
                .iter()
                .filter_map(|sel| LabelSelector::from_object(sel).ok().flatten())
                .collect();
            aggregating.push((r.name, selectors));
        }
        for _ in 0..=aggregating.len().min(8) {
            let mut changed = false;
            for (name, selectors) in &aggregating {
                let mut rules: Vec<PolicyRule> = Vec::new();
                for other in &cluster_roles {
                    if other.name == *name || !selectors.iter().any(|sel| sel.matches(other.labels))
                    {
                        continue;
                    }
                    for rule in s
                        .cluster_roles
                        .get(other.name)
                        .into_iter()
                        .flat_map(|r| r.iter())
                    {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
                if s.cluster_roles.get(*name).is_none_or(|cur| **cur != *rules) {
                    changed = true;
                    s.cluster_roles.insert((*name).into(), rules.clone().into());
                }
                s.aggregated.insert((*name).into(), rules);
            }
            if !changed {
                break;
            }
        }
        for r in roles {
            s.roles.insert(
                (r.namespace.into(), r.name.into()),
                PolicyRule::list_from_json(&r.json).into(),
            );
        }
        for b in cluster_bindings {
            s.cluster.add(b.name.into(), "", &b.json);
        }
        for b in bindings {
            s.namespaces.entry(b.namespace.into()).or_default().add(
                b.name.into(),
                b.namespace,
                &b.json,
            );
        }
        s
    }

    fn rules_of(&self, role: &RoleRef, namespace: &str) -> Option<&Arc<[PolicyRule]>> {
        match role {
            RoleRef::Cluster(n) => self.cluster_roles.get(n),
            RoleRef::Namespaced(n) => self.roles.get(&(namespace.to_string(), n.clone())),
        }
    }

    /// Visits every rule that applies to `user` in `namespace` (cluster-wide bindings, then
    /// the namespace's, when `namespace` is not empty) until `visit` returns true; returns
    /// the binding and role that `visit` accepted. A binding to a missing role grants nothing.
    pub fn find_rule(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&PolicyRule) -> bool,
    ) -> Option<(&str, &RoleRef, bool)> {
        for (role, binding) in self.cluster.roles_of(user) {
            if let Some(rules) = self.rules_of(role, "") {
                if rules.iter().any(&mut visit) {
                    return Some((binding, role, true));
                }
            }
        }
        if namespace.is_empty() {
            return None;
        }
        let scope = self.namespaces.get(namespace)?;
        for (role, binding) in scope.roles_of(user) {
            if let Some(rules) = self.rules_of(role, namespace) {
                if rules.iter().any(&mut visit) {
                    return Some((binding, role, false));
                }
            }
        }
        None
    }

    /// Every rule that applies to `user` in `namespace` (with the cluster-wide ones).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        self.find_rule(user, namespace, |r| {
            out.push(r.clone());
            false
        });
        out
    }

    /// The rules of ClusterRole `name` (after aggregation), or of Role `namespace/name`,
    /// shared with the snapshot (the node authorizer asks on every node request).
    pub fn role_rules(&self, role: &RoleRef, namespace: &str) -> Option<Arc<[PolicyRule]>> {
        self.rules_of(role, namespace).cloned()
    }

    /// The rules each aggregated ClusterRole should hold.
    pub fn aggregated(&self) -> &BTreeMap<String, Vec<PolicyRule>> {
        &self.aggregated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::attributes::Attributes;
    use serde_json::json;

    fn stored<'a>(
        ns: &'a str,
        name: &'a str,
        labels: &'a BTreeMap<String, String>,
        json: Value,
    ) -> Stored<'a> {
        Stored {
            namespace: ns,
            name,
            labels,
            json,
        }
    }

    #[test]
    fn bindings_grant_their_roles_rules_to_their_subjects() {
        let none = BTreeMap::new();
        let agg: BTreeMap<String, String> = [("agg".to_string(), "true".to_string())].into();
        let s = Snapshot::build(
            vec![
                stored(
                    "",
                    "reader",
                    &agg,
                    json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}),
                ),
                stored(
                    "",
                    "combined",
                    &none,
                    json!({"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}, "rules": []}),
                ),
            ],
            vec![stored(
                "team",
                "cm",
                &none,
                json!({"rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]}]}),
            )],
            vec![stored(
                "",
                "b1",
                &none,
                json!({"roleRef": {"kind": "ClusterRole", "name": "combined"}, "subjects": [{"kind": "Group", "name": "readers"}]}),
            )],
            vec![
                stored(
                    "team",
                    "b2",
                    &none,
                    json!({"roleRef": {"kind": "Role", "name": "cm"}, "subjects": [{"kind": "ServiceAccount", "name": "bot"}, {"kind": "User", "name": "alice"}]}),
                ),
                stored(
                    "team",
                    "b3",
                    &none,
                    json!({"roleRef": {"kind": "Role", "name": "missing"}, "subjects": [{"kind": "User", "name": "bob"}]}),
                ),
            ],
        );
        let allowed =
            |u: &UserInfo, a: Attributes| s.find_rule(u, &a.namespace, |r| r.allows(&a)).is_some();
        let reader = UserInfo::authenticated("carol", vec!["readers".into()]);
        assert!(allowed(
            &reader,
            Attributes::resource("get", "", "pods", "", "x", "p")
        ));
        assert!(!allowed(
            &reader,
            Attributes::resource("list", "", "pods", "", "x", "")
        ));
        let bot = UserInfo::service_account("team", "bot", "");
        assert!(allowed(
            &bot,
            Attributes::resource("list", "", "configmaps", "", "team", "")
        ));
        assert!(!allowed(
            &bot,
            Attributes::resource("list", "", "configmaps", "", "other", "")
        ));
        assert!(!allowed(
            &bot,
            Attributes::resource("list", "", "configmaps", "", "", "")
        ));
        let bob = UserInfo::authenticated("bob", vec![]);
        assert!(s.rules_for(&bob, "team").is_empty());
        assert_eq!(s.aggregated()["combined"].len(), 1);
    }
}
