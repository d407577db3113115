//! Who made a request: the user an authenticator found, as kube-apiserver's `user.Info`.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Members of this group may do everything, unchecked (kube-apiserver's superuser group).
pub const GROUP_MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub const GROUP_AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const GROUP_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of a request that carries no credentials.
pub const USER_ANONYMOUS: &str = "system:anonymous";
/// Every ServiceAccount is in this group.
pub const GROUP_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// The prefix of a ServiceAccount's user name: `system:serviceaccount:NAMESPACE:NAME`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Every node is in this group; a node's user is `system:node:NAME`.
pub const GROUP_NODES: &str = "system:nodes";
/// The prefix of a node's user name.
pub const NODE_PREFIX: &str = "system:node:";

/// An authenticated identity. Immutable once built; shared as an `Arc` by the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name (`alice`, `system:serviceaccount:default:builder`).
    pub name: String,
    /// A unique id, when the authenticator knows one (a ServiceAccount's uid).
    pub uid: String,
    /// The groups, `system:authenticated` included for every authenticated user.
    pub groups: Vec<String>,
    /// Further attributes (a bound token's pod name, …), as `SelfSubjectReview` shows them.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with `groups` and `system:authenticated` (added once, last, as Kubernetes does).
    pub fn authenticated(name: impl Into<String>, groups: Vec<String>) -> UserInfo {
        let mut u = UserInfo {
            name: name.into(),
            groups,
            ..UserInfo::default()
        };
        u.add_group(GROUP_AUTHENTICATED);
        u
    }

    /// The anonymous user of a request without credentials.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: USER_ANONYMOUS.into(),
            groups: vec![GROUP_UNAUTHENTICATED.into()],
            ..UserInfo::default()
        }
    }

    /// The user of requests from a listener that does not authenticate (the loopback port)
    /// and of the server's own calls: kube-apiserver's old insecure-port user, in
    /// `system:masters`.
    pub fn unsecured() -> Arc<UserInfo> {
        static USER: std::sync::LazyLock<Arc<UserInfo>> = std::sync::LazyLock::new(|| {
            Arc::new(UserInfo::authenticated(
                "system:unsecured",
                vec![GROUP_MASTERS.into()],
            ))
        });
        USER.clone()
    }

    /// The ServiceAccount `namespace/name`, with its groups.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> UserInfo {
        let mut u = UserInfo::authenticated(
            format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"),
            vec![
                GROUP_SERVICE_ACCOUNTS.into(),
                format!("{GROUP_SERVICE_ACCOUNTS}:{namespace}"),
            ],
        );
        u.uid = uid.into();
        u
    }

    /// Adds `group` unless the user is in it already.
    pub fn add_group(&mut self, group: &str) {
        if !self.groups.iter().any(|g| g == group) {
            self.groups.push(group.into());
        }
    }

    /// True if the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// True for members of `system:masters`, whom nothing is refused.
    pub fn is_master(&self) -> bool {
        self.in_group(GROUP_MASTERS)
    }

    /// `(namespace, name)` if this user is a ServiceAccount.
    pub fn service_account_name(&self) -> Option<(&str, &str)> {
        let rest = self.name.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
        let (ns, name) = rest.split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
    }

    /// The node's name if this user is a node (`system:node:NAME` in `system:nodes`).
    pub fn node_name(&self) -> Option<&str> {
        let name = self.name.strip_prefix(NODE_PREFIX)?;
        (!name.is_empty() && self.in_group(GROUP_NODES)).then_some(name)
    }

    /// The `userInfo` of reviews and audit events.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = self.uid.clone().into();
        }
        if !self.extra.is_empty() {
            v["extra"] = serde_json::json!(self.extra);
        }
        v
    }
}

/// The request extension an authenticating listener attaches: the user the request runs as.
/// A request without it came from a listener that does not authenticate (the loopback port,
/// or the server's own calls) and runs as [`UserInfo::unsecured`].
#[derive(Debug, Clone)]
pub struct Authenticated(pub Arc<UserInfo>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_names_and_groups() {
        let u = UserInfo::service_account("ns1", "builder", "u-1");
        assert_eq!(u.name, "system:serviceaccount:ns1:builder");
        assert_eq!(u.service_account_name(), Some(("ns1", "builder")));
        assert_eq!(
            u.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns1",
                "system:authenticated"
            ]
        );
        let odd = UserInfo::authenticated("system:serviceaccount:a:b:c", vec![]);
        assert_eq!(odd.service_account_name(), None);
        assert!(!UserInfo::anonymous().in_group(GROUP_AUTHENTICATED));
    }

    #[test]
    fn node_identity_needs_the_nodes_group() {
        let n = UserInfo::authenticated("system:node:n1", vec![GROUP_NODES.into()]);
        assert_eq!(n.node_name(), Some("n1"));
        let fake = UserInfo::authenticated("system:node:n1", vec![]);
        assert_eq!(fake.node_name(), None);
    }
}
