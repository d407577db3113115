//! The server's discovery documents as the controllers that act on every resource read
//! them (the garbage collector, the namespace controller): the `APIResourceList` of the
//! core group and of each group's preferred version, as client-go's
//! `ServerPreferredResources` fetches them.

use crate::controller_utils::error_message;
use client::rest::Client;
use http::Method;
use serde_json::Value;
use std::collections::BTreeMap;

/// The resource lists discovery read, and the group versions it could not read.
#[derive(Debug, Clone, Default)]
pub struct PreferredResourceLists {
    /// `/api/v1`'s list first, then each group's preferred version in the server's order.
    pub lists: Vec<Value>,
    /// Group versions whose list could not be read, with why (an API error by its Status
    /// message).
    pub failed: BTreeMap<String, String>,
}

/// Reads `/api/v1`, `/apis`, then each group's preferred version. A group version that
/// cannot be read is recorded in [`PreferredResourceLists::failed`]; the others are kept.
///
/// # Errors
/// The core list (`/api/v1`) or the group list (`/apis`) cannot be read.
pub async fn preferred_resource_lists(
    client: &Client,
) -> Result<PreferredResourceLists, client::rest::Error> {
    let mut found = PreferredResourceLists::default();
    let (_, core) = client.request_bytes(Method::GET, "/api/v1", None).await?;
    found
        .lists
        .push(serde_json::from_slice::<Value>(&core).unwrap_or_default());
    let (_, groups) = client.request_bytes(Method::GET, "/apis", None).await?;
    let groups: Value = serde_json::from_slice(&groups).unwrap_or_default();
    for g in groups["groups"].as_array().into_iter().flatten() {
        let Some(gv) = g["preferredVersion"]["groupVersion"].as_str() else {
            continue;
        };
        match client
            .request_bytes(Method::GET, &format!("/apis/{gv}"), None)
            .await
        {
            Ok((_, body)) => found
                .lists
                .push(serde_json::from_slice(&body).unwrap_or_default()),
            Err(e) => {
                found.failed.insert(gv.to_string(), error_message(&e));
            }
        }
    }
    Ok(found)
}

/// `(group, version)` of a `groupVersion` string, as apimachinery parses one: empty, `v`
/// (the core group) or `g/v`.
///
/// # Errors
/// More than one `/`.
pub fn parse_group_version(gv: &str) -> Result<(String, String), String> {
    let mut parts = gv.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(v), None, None) => Ok((String::new(), v.to_string())),
        (Some(g), Some(v), None) => Ok((g.to_string(), v.to_string())),
        _ => Err(format!("unexpected GroupVersion string: {gv}")),
    }
}

/// One entry of an `APIResourceList`'s `resources`, as the controllers filter them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceEntry<'a> {
    /// The resource's name (`pods`, or `pods/status` for a subresource).
    pub plural: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// The verbs it supports.
    pub verbs: Vec<&'a str>,
}

/// The entries of one `APIResourceList` that have a name and a kind, in document order.
pub fn resource_entries(list: &Value) -> impl Iterator<Item = ResourceEntry<'_>> {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(ResourceEntry {
                plural: r["name"].as_str()?,
                kind: r["kind"].as_str()?,
                namespaced: r["namespaced"].as_bool().unwrap_or(false),
                verbs: r["verbs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect(),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn group_versions_and_entries_parse_as_apimachinery_does() {
        assert_eq!(parse_group_version("v1"), Ok((String::new(), "v1".into())));
        assert_eq!(
            parse_group_version("apps/v1"),
            Ok(("apps".into(), "v1".into()))
        );
        assert!(parse_group_version("a/b/c").is_err());
        let list = json!({"groupVersion": "v1", "resources": [
            {"name": "pods", "namespaced": true, "kind": "Pod", "verbs": ["list", "delete"]},
            {"name": "nameless", "verbs": []},
            {"name": "nodes", "kind": "Node"}]});
        let got: Vec<_> = resource_entries(&list).collect();
        assert_eq!(
            got,
            [
                ResourceEntry {
                    plural: "pods",
                    kind: "Pod",
                    namespaced: true,
                    verbs: vec!["list", "delete"]
                },
                ResourceEntry {
                    plural: "nodes",
                    kind: "Node",
                    namespaced: false,
                    verbs: vec![]
                }
            ]
        );
    }
}
