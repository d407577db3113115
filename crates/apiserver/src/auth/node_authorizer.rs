//! The Node authorizer with kube-apiserver's NodeRestriction folded in: a node agent,
//! authenticated as `system:node:NAME` in `system:nodes`, may do what the `system:node`
//! ClusterRole allows, but may write only its own Node (and its status), its own Lease in
//! `kube-node-lease`, and pods bound to it. It reads no Secret or ConfigMap (kube-apiserver
//! allows those a node's pods use; listwatch's node agent needs none).

use super::attributes::Attributes;
use super::rbac::snapshot::{RoleRef, Snapshot};
use crate::cacher::Cacher;
use std::sync::Arc;

/// What the Node authorizer says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// Not a node's request: the next authorizer decides.
    NoOpinion,
    /// Allowed.
    Allow,
    /// Refused, with the reason.
    Deny(String),
}

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Decides a request of node `node`, using the `system:node` ClusterRole of `snap` and the
/// pods cache to tell which pods are bound to it.
///
/// Reads the role allows are allowed, except Secrets and ConfigMaps (left to RBAC: listwatch
/// keeps no graph of which of them a node's pods use). Writes are allowed only to the
/// node's own objects: its Node (creating one is checked by name at admission), its Lease
/// in `kube-node-lease`, its CSINode, the status, deletion and eviction of pods bound to
/// it, events and certificate signing requests; anything else the role would allow (pod
/// creation, other pods, ServiceAccount tokens) is refused, as NodeRestriction does.
pub fn authorize(node: &str, attrs: &Attributes, snap: &Snapshot, pods: &Cacher) -> NodeDecision {
    let Some(rules) = snap.role_rules(&RoleRef::Cluster("system:node".into()), "") else {
        return NodeDecision::NoOpinion;
    };
    if !rules.iter().any(|r| r.allows(attrs)) {
        return NodeDecision::NoOpinion;
    }
    if !attrs.resource_request {
        return NodeDecision::Allow;
    }
    if !WRITES.contains(&attrs.verb.as_str()) {
        if attrs.api_group.is_empty() && matches!(attrs.resource.as_str(), "secrets" | "configmaps")
        {
            return NodeDecision::NoOpinion;
        }
        return NodeDecision::Allow;
    }
    let deny = |what: &str| NodeDecision::Deny(format!("node \"{node}\" {what}"));
    let own_or_create = |name: &str| {
        if name == node || (attrs.verb == "create" && name.is_empty()) {
            NodeDecision::Allow
        } else {
            deny("may only change its own object")
        }
    };
    let bound_pod = || {
        let key = format!("{}/{}", attrs.namespace, attrs.name);
        let bound = pods
            .get_cached(&key)
            .is_some_and(|p| p.field(pods.info(), "spec.nodeName") == Some(node));
        if bound {
            NodeDecision::Allow
        } else {
            deny("may only change pods bound to it")
        }
    };
    match (
        attrs.api_group.as_str(),
        attrs.resource.as_str(),
        attrs.subresource.as_str(),
    ) {
        ("", "nodes", _) | ("storage.k8s.io", "csinodes", _) => own_or_create(&attrs.name),
        ("coordination.k8s.io", "leases", _) if attrs.namespace == "kube-node-lease" => {
            own_or_create(&attrs.name)
        }
        ("", "pods", "") if attrs.verb == "delete" => bound_pod(),
        ("", "pods", "status") if matches!(attrs.verb.as_str(), "update" | "patch") => bound_pod(),
        ("", "pods", "eviction") if attrs.verb == "create" => bound_pod(),
        ("", "events", _) | ("events.k8s.io", "events", _) => NodeDecision::Allow,
        ("certificates.k8s.io", "certificatesigningrequests", "") => NodeDecision::Allow,
        _ => deny(&format!(
            "may not {} {}{}{} (NodeRestriction)",
            attrs.verb,
            attrs.resource,
            if attrs.subresource.is_empty() {
                ""
            } else {
                "/"
            },
            attrs.subresource
        )),
    }
}

/// Shared handle to the pods cache the authorizer reads.
pub type PodsCache = Arc<Cacher>;
