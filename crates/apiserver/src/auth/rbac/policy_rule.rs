//! One RBAC rule (`rbac.authorization.k8s.io/v1` `PolicyRule`): what it allows, and whether a
//! set of rules covers another rule (the escalation check).

use crate::auth::attributes::Attributes;
use serde_json::Value;

/// A rule as stored in a Role or ClusterRole. `*` in any list means "every".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRule {
    /// The verbs allowed.
    pub verbs: Vec<String>,
    /// The API groups (`""` is the core group).
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource`, or `*/subresource`.
    pub resources: Vec<String>,
    /// Object names; empty means every object.
    pub resource_names: Vec<String>,
    /// Non-resource paths; a trailing `*` matches every path with that prefix.
    pub non_resource_urls: Vec<String>,
}

/// The strings of `v[key]` when it is an array (other items skipped); empty otherwise.
pub fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn has(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == "*" || x == item)
}

impl PolicyRule {
    /// Reads a rule from its JSON; missing lists are empty (and match nothing).
    pub fn from_json(v: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// The rules of a role's JSON (`rules`).
    pub fn list_from_json(role: &Value) -> Vec<PolicyRule> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(PolicyRule::from_json).collect())
            .unwrap_or_default()
    }

    /// The rule as JSON, lists left out when empty.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("verbs".into(), self.verbs.clone().into());
        for (k, v) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !v.is_empty() || (k == "apiGroups" && !self.resources.is_empty()) {
                m.insert(k.into(), v.clone().into());
            }
        }
        Value::Object(m)
    }

    /// True if this rule allows the request `a`.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self
                .non_resource_urls
                .iter()
                .any(|u| url_matches(u, &a.path));
        }
        has(&self.api_groups, &a.api_group)
            && self.resource_matches(&a.resource, &a.subresource)
            && (self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == &a.name))
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            if r == "*" {
                return true;
            }
            if subresource.is_empty() {
                return r == resource;
            }
            r.split_once('/')
                .is_some_and(|(res, sub)| sub == subresource && (res == "*" || res == resource))
        })
    }

    /// True if `rules` together allow everything this rule allows: each of its smallest
    /// parts (one verb, group, resource, name; or one verb and URL) is allowed by one of them.
    pub fn covered_by(&self, rules: &[PolicyRule]) -> bool {
        let one = |v: &String| vec![v.clone()];
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                if !rules.iter().any(|r| {
                    has(&r.verbs, verb) && r.non_resource_urls.iter().any(|u| url_covers(u, url))
                }) {
                    return false;
                }
            }
            for group in &self.api_groups {
                for resource in &self.resources {
                    let names = if self.resource_names.is_empty() {
                        vec![None]
                    } else {
                        self.resource_names.iter().map(Some).collect()
                    };
                    for name in names {
                        let part = PolicyRule {
                            verbs: one(verb),
                            api_groups: one(group),
                            resources: one(resource),
                            resource_names: name.map(one).unwrap_or_default(),
                            non_resource_urls: vec![],
                        };
                        if !rules.iter().any(|r| r.covers_part(&part)) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// True if this rule covers `part`, a rule of one verb, group, resource and name at most.
    fn covers_part(&self, part: &PolicyRule) -> bool {
        let (verb, group, resource) = (&part.verbs[0], &part.api_groups[0], &part.resources[0]);
        if !has(&self.verbs, verb) || !has(&self.api_groups, group) {
            return false;
        }
        // A wildcard asked for is covered only by the same wildcard.
        if verb == "*" && !self.verbs.iter().any(|v| v == "*") {
            return false;
        }
        if group == "*" && !self.api_groups.iter().any(|g| g == "*") {
            return false;
        }
        let resource_ok = self.resources.iter().any(|r| {
            r == "*"
                || r == resource
                || match (r.split_once('/'), resource.split_once('/')) {
                    (Some(("*", sub)), Some((_, want))) => sub == want,
                    _ => false,
                }
        });
        resource_ok
            && (self.resource_names.is_empty()
                || part
                    .resource_names
                    .first()
                    .is_some_and(|n| self.resource_names.contains(n)))
    }
}

fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

/// True if URL pattern `owner` allows everything pattern `wanted` allows.
fn url_covers(owner: &str, wanted: &str) -> bool {
    match (owner.strip_suffix('*'), wanted.strip_suffix('*')) {
        (Some(o), Some(w)) => w.starts_with(o),
        (Some(o), None) => wanted.starts_with(o),
        (None, _) => owner == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v)
    }

    #[test]
    fn matches_as_rbac_does() {
        let r = rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}),
        );
        let get = |res: &str, sub: &str| Attributes::resource("get", "", res, sub, "ns", "p");
        assert!(r.allows(&get("pods", "")));
        assert!(r.allows(&get("pods", "log")));
        assert!(!r.allows(&get("pods", "status")));
        assert!(!r.allows(&Attributes::resource("get", "apps", "pods", "", "ns", "p")));
        assert!(!r.allows(&Attributes::resource("delete", "", "pods", "", "ns", "p")));
        let sub = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/scale"]}));
        assert!(sub.allows(&Attributes::resource(
            "update",
            "apps",
            "deployments",
            "scale",
            "",
            "d"
        )));
        assert!(!sub.allows(&Attributes::resource(
            "update",
            "apps",
            "deployments",
            "",
            "",
            "d"
        )));
        let named = rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
        );
        assert!(named.allows(&Attributes::resource(
            "get",
            "",
            "configmaps",
            "",
            "ns",
            "a"
        )));
        assert!(!named.allows(&Attributes::resource(
            "get",
            "",
            "configmaps",
            "",
            "ns",
            "b"
        )));
        assert!(!named.allows(&Attributes::resource("get", "", "configmaps", "", "ns", "")));
        let urls = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}));
        assert!(urls.allows(&Attributes::non_resource("get", "/healthz")));
        assert!(urls.allows(&Attributes::non_resource("get", "/api/v1")));
        assert!(!urls.allows(&Attributes::non_resource("get", "/healthz/etcd")));
        assert!(!urls.allows(&Attributes::non_resource("post", "/healthz")));
        // A rule without resources allows no resource request, and vice versa.
        assert!(!urls.allows(&get("pods", "")));
        assert!(!r.allows(&Attributes::non_resource("get", "/healthz")));
    }

    #[test]
    fn coverage_breaks_rules_into_parts() {
        let owner = vec![
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "configmaps"]}),
            ),
            rule(
                json!({"verbs": ["create"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/*"]})),
        ];
        let ok =
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "configmaps"]}));
        assert!(ok.covered_by(&owner));
        let more =
            rule(json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(!more.covered_by(&owner));
        let star = rule(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(!star.covered_by(&owner));
        let named = rule(
            json!({"verbs": ["create"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]}),
        );
        assert!(named.covered_by(&owner));
        let unnamed =
            rule(json!({"verbs": ["create"], "apiGroups": [""], "resources": ["secrets"]}));
        assert!(!unnamed.covered_by(&owner));
        assert!(
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/a", "/logs/b*"]}))
                .covered_by(&owner)
        );
        assert!(!rule(json!({"verbs": ["get"], "nonResourceURLs": ["/*"]})).covered_by(&owner));
        let admin = vec![rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(star.covered_by(&admin));
        assert!(more.covered_by(&admin));
    }
}
