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
pub fn authorize(node: &str, attrs: &Attributes, snap: &Snapshot, pods: &Cacher) -> NodeDecision {
    let Some(rules) = snap.role_rules(&RoleRef::Cluster("system:node".into()), "") else {
        return NodeDecision::NoOpinion;
    };
    if !rules.iter().any(|r| r.allows(attrs)) {
        return NodeDecision::NoOpinion;
    }
    if !attrs.resource_request || !WRITES.contains(&attrs.verb.as_str()) {
        if attrs.api_group.is_empty() && matches!(attrs.resource.as_str(), "secrets" | "configmaps")
        {
            return NodeDecision::Deny(format!(
                "node \"{node}\" may not read {} it has no pod for",
                attrs.resource
            ));
        }
        return NodeDecision::Allow;
    }
    let own =
        |what: &str| NodeDecision::Deny(format!("node \"{node}\" may only change its own {what}"));
    match (attrs.api_group.as_str(), attrs.resource.as_str()) {
        ("", "nodes") if attrs.name != node => own("Node"),
        ("coordination.k8s.io", "leases")
            if attrs.namespace != "kube-node-lease" || attrs.name != node =>
        {
            own("Lease")
        }
        ("", "pods") if attrs.verb != "create" => {
            let key = format!("{}/{}", attrs.namespace, attrs.name);
            let bound = pods
                .get_cached(&key)
                .is_some_and(|p| p.field(pods.info(), "spec.nodeName") == Some(node));
            if bound {
                NodeDecision::Allow
            } else {
                own("pods (those bound to it)")
            }
        }
        _ => NodeDecision::Allow,
    }
}

/// Shared handle to the pods cache the authorizer reads.
pub type PodsCache = Arc<Cacher>;
