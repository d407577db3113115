//! Which resources a namespace's content is made of: every namespaced resource, in its
//! group's preferred version, that can be deleted — what client-go's
//! `ServerPreferredNamespacedResources` filtered by the `delete` verb gives the namespace
//! controller — with whether each can also be listed and deleted as a collection.
//!
//! Discovery is partial when some group versions cannot be read: the others are still used,
//! and the failures are reported (as client-go's `ErrGroupDiscoveryFailed`).

pub use crate::discovery::parse_group_version;
use crate::discovery::{preferred_resource_lists, resource_entries};
use client::rest::resource::ApiResource;
use client::rest::Client;
use serde_json::Value;
use std::collections::BTreeMap;

/// A namespaced resource whose objects the controller deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletable {
    /// Where it is served.
    pub resource: ApiResource,
    /// Whether it has the `list` verb (else what remains cannot be counted).
    pub list: bool,
    /// Whether it has the `deletecollection` verb (else objects are deleted one by one).
    pub delete_collection: bool,
}

impl Deletable {
    /// `{resource}.{group}`, as the namespace's conditions name it (`pods.` for the core
    /// group).
    pub fn label(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }

    /// `{group}/{version}, Resource={resource}`, as client-go prints a
    /// GroupVersionResource.
    pub fn gvr(&self) -> String {
        format!(
            "{}/{}, Resource={}",
            self.resource.group, self.resource.version, self.resource.plural
        )
    }
}

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// The deletable namespaced resources.
    pub resources: Vec<Deletable>,
    /// Group versions whose resource list could not be read, with why.
    pub failed: BTreeMap<String, String>,
    /// A group version that could not be parsed (then `resources` is empty, as client-go's
    /// `GroupVersionResources` gives nothing for such a list).
    pub parse_error: Option<String>,
}

impl Discovered {
    /// The message of the partial failure, as client-go words `ErrGroupDiscoveryFailed`.
    pub fn failure_message(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let groups: Vec<String> = self
            .failed
            .iter()
            .map(|(gv, e)| format!("{gv}: {e}"))
            .collect();
        Some(format!(
            "unable to retrieve the complete list of server APIs: {}",
            groups.join(", ")
        ))
    }
}

/// The deletable namespaced resources of one `APIResourceList` document.
///
/// # Errors
/// Its `groupVersion` cannot be parsed.
pub fn deletable_resources(list: &Value) -> Result<Vec<Deletable>, String> {
    let gv = list["groupVersion"].as_str().unwrap_or("");
    let (group, version) = parse_group_version(gv)?;
    Ok(resource_entries(list)
        .filter(|r| !r.plural.contains('/') && r.namespaced && r.verbs.contains(&"delete"))
        .map(|r| Deletable {
            resource: ApiResource::new(
                group.clone(),
                version.clone(),
                r.plural.to_string(),
                r.kind.to_string(),
                true,
            ),
            list: r.verbs.contains(&"list"),
            delete_collection: r.verbs.contains(&"deletecollection"),
        })
        .collect())
}

/// Reads the server's discovery documents ([`preferred_resource_lists`]) and keeps the
/// deletable namespaced resources.
///
/// # Errors
/// The group list itself (`/apis`) or the core list (`/api/v1`) cannot be read; a named
/// group version that cannot be read is recorded in [`Discovered::failed`] instead.
pub async fn discover(client: &Client) -> Result<Discovered, client::rest::Error> {
    let read = preferred_resource_lists(client).await?;
    let mut found = Discovered {
        failed: read.failed,
        ..Discovered::default()
    };
    for list in &read.lists {
        match deletable_resources(list) {
            Ok(rs) => found.resources.extend(rs),
            Err(e) => {
                found.resources.clear();
                found.parse_error = Some(e);
                break;
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn namespaced_deletable_resources_with_their_verbs() {
        let list = json!({"groupVersion": "v1", "resources": [
            {"name": "pods", "namespaced": true, "kind": "Pod",
             "verbs": ["create", "delete", "deletecollection", "get", "list", "watch"]},
            {"name": "pods/status", "namespaced": true, "kind": "Pod", "verbs": ["get", "patch", "update"]},
            {"name": "pods/eviction", "namespaced": true, "kind": "Eviction", "verbs": ["create"]},
            {"name": "bindings", "namespaced": true, "kind": "Binding", "verbs": ["create"]},
            {"name": "nodes", "namespaced": false, "kind": "Node", "verbs": ["delete", "list"]},
            {"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": ["delete", "list"]},
            {"name": "tokens", "namespaced": true, "kind": "Token", "verbs": ["delete"]}
        ]});
        let rs = deletable_resources(&list).unwrap();
        let names: Vec<(&str, bool, bool)> = rs
            .iter()
            .map(|d| (d.resource.plural.as_ref(), d.list, d.delete_collection))
            .collect();
        assert_eq!(
            names,
            [
                ("pods", true, true),
                ("configmaps", true, false),
                ("tokens", false, false)
            ]
        );
        assert_eq!(rs[0].label(), "pods.");
        assert_eq!(rs[0].gvr(), "/v1, Resource=pods");
        let apps = json!({"groupVersion": "apps/v1", "resources": [
            {"name": "deployments", "namespaced": true, "kind": "Deployment", "verbs": ["delete", "list"]}]});
        let rs = deletable_resources(&apps).unwrap();
        assert_eq!(rs[0].label(), "deployments.apps");
        assert_eq!(rs[0].gvr(), "apps/v1, Resource=deployments");
        assert_eq!(rs[0].resource.group, "apps");
    }

    #[test]
    fn group_versions_parse_as_apimachinery_parses_them() {
        assert_eq!(parse_group_version("v1"), Ok(("".into(), "v1".into())));
        assert_eq!(
            parse_group_version("apps/v1"),
            Ok(("apps".into(), "v1".into()))
        );
        assert_eq!(
            parse_group_version("a/b/c"),
            Err("unexpected GroupVersion string: a/b/c".into())
        );
        let bad = json!({"groupVersion": "a/b/c", "resources": []});
        assert!(deletable_resources(&bad).is_err());
    }

    #[test]
    fn partial_failures_are_worded_as_client_go_does() {
        let mut d = Discovered::default();
        assert_eq!(d.failure_message(), None);
        d.failed
            .insert("metrics.k8s.io/v1beta1".into(), "boom".into());
        d.failed.insert("custom.io/v1".into(), "gone".into());
        assert_eq!(
            d.failure_message().unwrap(),
            "unable to retrieve the complete list of server APIs: custom.io/v1: gone, metrics.k8s.io/v1beta1: boom"
        );
    }
}
