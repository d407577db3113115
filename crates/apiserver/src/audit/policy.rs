//! The audit policy (`audit.k8s.io/v1` `Policy`, kube-apiserver's `--audit-policy-file`):
//! ordered rules, the first that matches a request decides its level; no match is `None`.

use crate::auth::attributes::Attributes;
use crate::auth::user_info::UserInfo;
use serde::Deserialize;

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
pub enum Level {
    /// Nothing.
    #[default]
    None,
    /// Who, what, when and the answer's code.
    Metadata,
    /// Metadata and the request's body.
    Request,
    /// Request and the response's body.
    RequestResponse,
}

/// The stages of a request an event may be written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before it runs.
    RequestReceived,
    /// A long-running request (a watch) has sent its response headers.
    ResponseStarted,
    /// The response is complete.
    ResponseComplete,
    /// The request failed unexpectedly.
    Panic,
}

impl Stage {
    /// The name written in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// A parsed audit policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
}

/// What the policy says of one request: its level and the stages not to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The level.
    pub level: Level,
    /// Stages left out (the policy's and the rule's).
    pub omit_stages: Vec<Stage>,
}

impl Policy {
    /// Parses a policy file (YAML or JSON).
    ///
    /// # Errors
    /// Not an `audit.k8s.io/v1` `Policy`, or a rule that does not parse.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let doc: PolicyDoc =
            serde_yaml_ng::from_str(text).map_err(|e| format!("audit policy: {e}"))?;
        if doc.api_version != "audit.k8s.io/v1" || doc.kind != "Policy" {
            return Err(format!(
                "audit policy: expected audit.k8s.io/v1 Policy, got {} {}",
                doc.api_version, doc.kind
            ));
        }
        for r in &doc.rules {
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                return Err(
                    "audit policy: a rule may not name both nonResourceURLs and resources or namespaces"
                        .into(),
                );
            }
        }
        Ok(Policy {
            rules: doc.rules,
            omit_stages: doc.omit_stages,
        })
    }

    /// The level and omitted stages for `user` asking `attrs`.
    pub fn decide(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        for r in &self.rules {
            if r.matches(user, attrs) {
                let mut omit = self.omit_stages.clone();
                omit.extend(r.omit_stages.iter().copied());
                return Decision {
                    level: r.level,
                    omit_stages: omit,
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: Vec::new(),
        }
    }
}

impl Rule {
    fn matches(&self, user: &UserInfo, a: &Attributes) -> bool {
        if !self.users.is_empty() && !self.users.iter().any(|u| u == &user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !self.user_groups.iter().any(|g| user.in_group(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.iter().any(|v| v == &a.verb) {
            return false;
        }
        if !a.resource_request {
            if !self.resources.is_empty() || !self.namespaces.is_empty() {
                return false;
            }
            return self.non_resource_urls.is_empty()
                || self
                    .non_resource_urls
                    .iter()
                    .any(|u| match u.strip_suffix('*') {
                        Some(prefix) => a.path.starts_with(prefix),
                        None => *u == a.path,
                    });
        }
        if !self.non_resource_urls.is_empty() {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == &a.namespace) {
            return false;
        }
        self.resources.is_empty() || self.resources.iter().any(|gr| gr.matches(a))
    }
}

impl GroupResources {
    fn matches(&self, a: &Attributes) -> bool {
        if self.group != a.api_group {
            return false;
        }
        if !self.resource_names.is_empty() && !self.resource_names.iter().any(|n| n == &a.name) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        // `*` is everything; `pods` the pods; `pods/log` that subresource; `*/scale` every
        // scale subresource; `pods/*` the pods and all their subresources.
        self.resources.iter().any(|r| {
            if r == "*" {
                return true;
            }
            if r.strip_suffix("/*") == Some(a.resource.as_str()) {
                return true;
            }
            if a.subresource.is_empty() {
                return *r == a.resource;
            }
            match r.split_once('/') {
                Some((res, sub)) => (res == a.resource || res == "*") && sub == a.subresource,
                None => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods/*"]
    namespaces: ["kube-system"]
  - level: Request
    userGroups: ["developers"]
    omitStages: ["ResponseStarted"]
  - level: Metadata
"#;

    fn level(user: &UserInfo, a: Attributes) -> Level {
        Policy::parse(POLICY).unwrap().decide(user, &a).level
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let alice = UserInfo::authenticated("alice", vec!["developers".into()]);
        let proxy = UserInfo::authenticated("system:kube-proxy", vec![]);
        let bob = UserInfo::authenticated("bob", vec![]);
        let get =
            |res: &str, sub: &str, ns: &str| Attributes::resource("get", "", res, sub, ns, "x");
        assert_eq!(
            level(
                &proxy,
                Attributes::resource("watch", "", "pods", "", "a", "")
            ),
            Level::None
        );
        assert_eq!(level(&proxy, get("pods", "", "a")), Level::Metadata);
        assert_eq!(
            level(&bob, Attributes::non_resource("get", "/healthz/etcd")),
            Level::None
        );
        assert_eq!(
            level(&bob, Attributes::non_resource("get", "/metrics")),
            Level::Metadata
        );
        assert_eq!(level(&alice, get("secrets", "", "a")), Level::Metadata);
        assert_eq!(
            level(&alice, get("pods", "status", "kube-system")),
            Level::RequestResponse
        );
        assert_eq!(
            level(&alice, get("pods", "", "kube-system")),
            Level::RequestResponse
        );
        assert_eq!(level(&alice, get("pods", "", "default")), Level::Request);
        assert_eq!(
            level(&bob, get("pods", "status", "default")),
            Level::Metadata
        );
        let d = Policy::parse(POLICY)
            .unwrap()
            .decide(&alice, &get("deployments", "", "a"));
        assert_eq!(
            d.omit_stages,
            [Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert_eq!(
            Policy::default().decide(&bob, &get("pods", "", "a")).level,
            Level::None
        );
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(Policy::parse("apiVersion: v1\nkind: Policy\n").is_err());
        assert!(Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n"
        )
        .is_err());
        assert!(Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]\n").is_err());
        assert!(Policy::parse("[").is_err());
    }
}
