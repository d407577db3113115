//! API resource descriptors: which URL a kind of object lives under.
//!
//! An [`ApiResource`] names a resource the way the API server's URLs do: its group (empty for
//! the core group), version, plural (the URL segment, e.g. `pods`), kind, and whether its
//! objects live in namespaces. Constants cover the resources listwatch serves; others are
//! built with [`ApiResource::new`] or derived from a typed `k8s-openapi` object with
//! [`ApiResource::of`].

use std::any::TypeId;
use std::borrow::Cow;
use std::fmt::Write as _;

/// Where one kind of object lives on the API server.
///
/// Paths: the core group (`group == ""`) lives under `/api/{version}`, named groups under
/// `/apis/{group}/{version}`; namespaced resources add `namespaces/{ns}/` before the plural
/// when a namespace is given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiResource {
    /// The API group; empty for the core group.
    pub group: Cow<'static, str>,
    /// The version within the group, e.g. `v1`.
    pub version: Cow<'static, str>,
    /// The plural resource name used in URLs, e.g. `pods`.
    pub plural: Cow<'static, str>,
    /// The object kind, e.g. `Pod`.
    pub kind: Cow<'static, str>,
    /// Whether objects of this resource live in a namespace.
    pub namespaced: bool,
}

impl ApiResource {
    /// A descriptor from its parts (see the field docs).
    pub fn new(
        group: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
        plural: impl Into<Cow<'static, str>>,
        kind: impl Into<Cow<'static, str>>,
        namespaced: bool,
    ) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
        }
    }

    /// The descriptor of a typed `k8s-openapi` object, e.g. `ApiResource::of::<Pod>()`.
    /// A resource is namespaced when its `k8s_openapi::Resource::Scope` is
    /// `NamespaceResourceScope`.
    pub fn of<K>() -> ApiResource
    where
        K: k8s_openapi::Resource,
        K::Scope: 'static,
    {
        ApiResource {
            group: Cow::Borrowed(K::GROUP),
            version: Cow::Borrowed(K::VERSION),
            plural: Cow::Borrowed(K::URL_PATH_SEGMENT),
            kind: Cow::Borrowed(K::KIND),
            namespaced: TypeId::of::<K::Scope>()
                == TypeId::of::<k8s_openapi::NamespaceResourceScope>(),
        }
    }

    /// The `apiVersion` of objects of this resource: `v1` for the core group, else
    /// `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The collection path: `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods`,
    /// `/apis/apps/v1/namespaces/{ns}/deployments`. The namespace is ignored for
    /// cluster-scoped resources, and `None` (or an empty string) on a namespaced resource
    /// means all namespaces. The namespace is percent-encoded as a path segment.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let mut p = String::with_capacity(64);
        if self.group.is_empty() {
            let _ = write!(p, "/api/{}", self.version);
        } else {
            let _ = write!(p, "/apis/{}/{}", self.group, self.version);
        }
        if self.namespaced {
            if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
                p.push_str("/namespaces/");
                push_segment(&mut p, ns);
            }
        }
        p.push('/');
        p.push_str(&self.plural);
        p
    }

    /// The path of one object: the collection path followed by `/{name}` (percent-encoded).
    pub fn item_path(&self, namespace: Option<&str>, name: &str) -> String {
        let mut p = self.collection_path(namespace);
        p.push('/');
        push_segment(&mut p, name);
        p
    }
}

/// Appends `s` as one URL path segment: everything outside the unreserved set is
/// percent-encoded, so a name can never add segments or a query.
fn push_segment(out: &mut String, s: &str) {
    if s == "." || s == ".." {
        // Dot segments would be collapsed by URL normalization; encode them.
        out.push_str(&"%2E".repeat(s.len()));
        return;
    }
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':' | b'@') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

const fn core(plural: &'static str, kind: &'static str, namespaced: bool) -> ApiResource {
    ApiResource {
        group: Cow::Borrowed(""),
        version: Cow::Borrowed("v1"),
        plural: Cow::Borrowed(plural),
        kind: Cow::Borrowed(kind),
        namespaced,
    }
}

const fn grouped(
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ApiResource {
    ApiResource {
        group: Cow::Borrowed(group),
        version: Cow::Borrowed("v1"),
        plural: Cow::Borrowed(plural),
        kind: Cow::Borrowed(kind),
        namespaced,
    }
}

/// `v1` pods (namespaced).
pub const PODS: ApiResource = core("pods", "Pod", true);
/// `v1` nodes (cluster-scoped).
pub const NODES: ApiResource = core("nodes", "Node", false);
/// `v1` namespaces (cluster-scoped).
pub const NAMESPACES: ApiResource = core("namespaces", "Namespace", false);
/// `v1` configmaps (namespaced).
pub const CONFIGMAPS: ApiResource = core("configmaps", "ConfigMap", true);
/// `v1` secrets (namespaced).
pub const SECRETS: ApiResource = core("secrets", "Secret", true);
/// `v1` services (namespaced).
pub const SERVICES: ApiResource = core("services", "Service", true);
/// `v1` events of the core group (namespaced).
pub const EVENTS: ApiResource = core("events", "Event", true);
/// `apps/v1` replicasets (namespaced).
pub const REPLICASETS: ApiResource = grouped("apps", "replicasets", "ReplicaSet", true);
/// `apps/v1` deployments (namespaced).
pub const DEPLOYMENTS: ApiResource = grouped("apps", "deployments", "Deployment", true);
/// `coordination.k8s.io/v1` leases (namespaced).
pub const LEASES: ApiResource = grouped("coordination.k8s.io", "leases", "Lease", true);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn core_and_grouped_paths() {
        assert_eq!(PODS.collection_path(None), "/api/v1/pods");
        assert_eq!(PODS.collection_path(Some("")), "/api/v1/pods");
        assert_eq!(
            PODS.collection_path(Some("default")),
            "/api/v1/namespaces/default/pods"
        );
        assert_eq!(
            PODS.item_path(Some("default"), "web-1"),
            "/api/v1/namespaces/default/pods/web-1"
        );
        assert_eq!(NODES.collection_path(Some("default")), "/api/v1/nodes");
        assert_eq!(
            DEPLOYMENTS.item_path(Some("kube-system"), "dns"),
            "/apis/apps/v1/namespaces/kube-system/deployments/dns"
        );
        assert_eq!(
            LEASES.collection_path(None),
            "/apis/coordination.k8s.io/v1/leases"
        );
        assert_eq!(PODS.api_version(), "v1");
        assert_eq!(REPLICASETS.api_version(), "apps/v1");
    }

    #[test]
    fn names_cannot_escape_their_segment() {
        assert_eq!(
            PODS.item_path(Some("a/b"), "x?y=1/../z"),
            "/api/v1/namespaces/a%2Fb/pods/x%3Fy%3D1%2F..%2Fz"
        );
        assert_eq!(
            PODS.item_path(Some("."), ".."),
            "/api/v1/namespaces/%2E/pods/%2E%2E"
        );
    }

    #[test]
    fn derived_from_typed_objects() {
        assert_eq!(ApiResource::of::<Pod>(), PODS);
        assert_eq!(ApiResource::of::<Node>(), NODES);
        assert_eq!(ApiResource::of::<Deployment>(), DEPLOYMENTS);
    }
}
