//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}`, `/api/v1` and
//! `/apis/{group}/{version}`.
//!
//! Every document is generated from [`crate::registry::resources::RESOURCES`], so a resource added
//! to that table shows up in discovery (and in OpenAPI, see [`super::openapi`]) without further
//! work. The JSON shapes follow kube-apiserver 1.32, including its quirks:
//!
//! - `/api` (`APIVersions`) and `/api/v1` (`APIResourceList` of the legacy core group) carry no
//!   `apiVersion` field; `/apis`, `/apis/{group}` and `/apis/{group}/{version}` carry
//!   `"apiVersion": "v1"`.
//! - `shortNames` and `categories` are left out when empty.
//! - Subresources (`pods/status`) have an empty `singularName` and no `storageVersionHash`.
//!
//! The functions are pure: they allocate a fresh [`Value`] per call and never fail. Paths that
//! name no served group or version give `None`, which the HTTP layer turns into a 404.

use serde_json::{json, Map, Value};

use super::openapi::fnv1a_64;
#[cfg(test)]
use crate::registry::resources::RESOURCES;
use crate::registry::resources::{group_versions_of, ResourceInfo};

/// The Kubernetes major version listwatch reports.
pub const KUBERNETES_MAJOR: &str = "1";
/// The Kubernetes minor version listwatch reports. `/usr/bin/kubectl` on the target machines picks
/// `kubectl.1.<minor>` from this value, so it must name a kubectl that is installed (1.32).
pub const KUBERNETES_MINOR: &str = "32";
/// The `gitVersion` listwatch reports: the Kubernetes release whose API it serves.
pub const GIT_VERSION: &str = "v1.32.0";

/// The verbs served on a `/status` subresource, in discovery order.
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// `GET /version`: the `version.Info` document.
///
/// `major`/`minor`/`gitVersion` claim Kubernetes 1.32 (see [`KUBERNETES_MINOR`]); the remaining
/// fields describe this build of listwatch rather than a Go build of kube-apiserver.
pub fn version_info() -> Value {
    json!({
        "major": KUBERNETES_MAJOR,
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": concat!("listwatch-", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "none (listwatch is written in Rust)",
        "compiler": "listwatch",
        "platform": platform(),
    })
}

/// `os/arch` in Go's spelling (`linux/amd64`), as kubectl prints it.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!("{}/{}", std::env::consts::OS, arch)
}

/// `GET /api`: the `APIVersions` document of the legacy core group, with an empty
/// `serverAddressByClientCIDRs` list (the field is required, so it is present).
///
/// Use [`api_versions_for`] to advertise the address the client reached the server on.
pub fn api_versions() -> Value {
    api_versions_with(Vec::new())
}

/// `GET /api` advertising `server_address` (`host:port`) for every client (`0.0.0.0/0`), the way
/// kube-apiserver does.
pub fn api_versions_for(server_address: &str) -> Value {
    api_versions_with(vec![json!({
        "clientCIDR": "0.0.0.0/0",
        "serverAddress": server_address,
    })])
}

fn api_versions_with(addresses: Vec<Value>) -> Value {
    let versions: Vec<&str> = crate::registry::resources::group_versions()
        .into_iter()
        .filter(|(g, _)| g.is_empty())
        .map(|(_, v)| v)
        .collect();
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": addresses,
    })
}

/// `GET /apis`: the `APIGroupList` of every named (non-core) group, in table order. Each group
/// lists its versions and a `preferredVersion` (the first version in the table). The list is
/// present (possibly empty) even when no named group is served: clients treat 404 here as fatal.
pub fn api_group_list(all: &[&'static ResourceInfo]) -> Value {
    let groups: Vec<Value> = named_groups(all)
        .into_iter()
        .map(|g| group_body(all, g))
        .collect();
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups,
    })
}

/// `GET /apis/{group}`: the `APIGroup` document of one named group, or `None` when the group is
/// not served (including the core group `""`, which lives under `/api`).
pub fn api_group(all: &[&'static ResourceInfo], group: &str) -> Option<Value> {
    if group.is_empty() || !named_groups(all).contains(&group) {
        return None;
    }
    let mut body = group_body(all, group);
    if let Value::Object(map) = &mut body {
        map.insert("kind".into(), json!("APIGroup"));
        map.insert("apiVersion".into(), json!("v1"));
    }
    Some(body)
}

/// `GET /api/v1` (`group == ""`) and `GET /apis/{group}/{version}`: the `APIResourceList` of one
/// group version, or `None` when that group version is not served.
///
/// Each resource gives `name`, `singularName`, `namespaced`, `kind`, `verbs`, `shortNames` and
/// `categories` (both only when non-empty) and a `storageVersionHash`; a resource with a status
/// subresource is followed by a `{name}/status` entry with verbs `get`, `patch`, `update`.
pub fn api_resource_list(
    all: &[&'static ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let members: Vec<&ResourceInfo> = all
        .iter()
        .copied()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if members.is_empty() {
        return review_resource_list(group, version);
    }
    let mut resources = Vec::with_capacity(members.len() * 2);
    for r in members {
        resources.push(resource_entry(r));
        // Listed in kube-apiserver's (alphabetical) order, before `namespaces/status`.
        if r.group.is_empty() && r.resource == "namespaces" {
            resources.push(json!({"name": "namespaces/finalize", "singularName": "",
                                  "namespaced": false, "kind": "Namespace", "verbs": ["update"]}));
        }
        if r.has_status {
            resources.push(json!({
                "name": format!("{}/status", r.resource),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": STATUS_VERBS,
            }));
        }
        if r.group.is_empty() && r.resource == "pods" {
            resources.extend(pod_create_only_entries());
        }
        if r.group.is_empty() && r.resource == "serviceaccounts" {
            // The TokenRequest API (`kubectl create token`).
            resources.push(json!({
                "name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
        if crate::handlers::scale::has_scale(r) {
            resources.push(json!({
                "name": format!("{}/scale", r.resource),
                "singularName": "",
                "namespaced": r.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": STATUS_VERBS,
            }));
        }
    }
    let mut doc = Map::new();
    doc.insert("kind".into(), json!("APIResourceList"));
    if !group.is_empty() {
        // kube-apiserver strips the apiVersion from the legacy group's documents only.
        doc.insert("apiVersion".into(), json!("v1"));
    }
    doc.insert("groupVersion".into(), json!(group_version(group, version)));
    doc.insert("resources".into(), Value::Array(resources));
    Some(Value::Object(doc))
}

/// Which aggregated discovery version (`v2` or `v2beta1` of `apidiscovery.k8s.io`) an
/// `Accept` header asks for on `/api` or `/apis`: the first such media type listed, or
/// `None` for the legacy documents.
pub fn aggregated_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if params.first() != Some(&"application/json")
            || !has("g=apidiscovery.k8s.io")
            || !has("as=APIGroupDiscoveryList")
        {
            return None;
        }
        if has("v=v2") {
            Some("v2")
        } else if has("v=v2beta1") {
            Some("v2beta1")
        } else {
            None
        }
    })
}

/// The media type of an aggregated discovery document of `version`.
pub fn aggregated_media_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// `GET /api` (`core`) or `GET /apis` asking for aggregated discovery: one
/// `APIGroupDiscoveryList` with every group, version and resource (subresources under their
/// resource) that the per-version documents list, so a client needs one request, not one per
/// group version.
pub fn aggregated(all: &[&'static ResourceInfo], core: bool, version: &str) -> Value {
    let groups: Vec<&str> = if core { vec![""] } else { named_groups(all) };
    let items: Vec<Value> = groups
        .into_iter()
        .map(|g| {
            let body = group_body(all, g);
            let versions: Vec<&str> = if g.is_empty() {
                vec!["v1"]
            } else {
                body["versions"]
                    .as_array()
                    .map(|vs| vs.iter().filter_map(|v| v["version"].as_str()).collect())
                    .unwrap_or_default()
            };
            let versions: Vec<Value> = versions
                .into_iter()
                .map(|v| {
                    let listed = api_resource_list(all, g, v).unwrap_or(Value::Null);
                    json!({
                        "version": v,
                        "resources": aggregated_resources(g, v, &listed),
                        "freshness": "Current",
                    })
                })
                .collect();
            let mut metadata = Map::new();
            if !g.is_empty() {
                metadata.insert("name".into(), json!(g));
            }
            metadata.insert("creationTimestamp".into(), Value::Null);
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// The resources of one legacy `APIResourceList`, in the aggregated shape.
fn aggregated_resources(group: &str, version: &str, listed: &Value) -> Vec<Value> {
    let entries = listed["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let kind_of = |e: &Value| {
        json!({
            "group": e.get("group").and_then(Value::as_str).unwrap_or(group),
            "version": e.get("version").and_then(Value::as_str).unwrap_or(version),
            "kind": e["kind"],
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for e in entries {
        let name = e["name"].as_str().unwrap_or_default();
        match name.split_once('/') {
            None => {
                let mut r = Map::new();
                r.insert("resource".into(), json!(name));
                r.insert("responseKind".into(), kind_of(e));
                let namespaced = e["namespaced"].as_bool().unwrap_or(false);
                r.insert(
                    "scope".into(),
                    json!(if namespaced { "Namespaced" } else { "Cluster" }),
                );
                r.insert("singularResource".into(), e["singularName"].clone());
                r.insert("verbs".into(), e["verbs"].clone());
                for k in ["shortNames", "categories"] {
                    if let Some(v) = e.get(k) {
                        r.insert(k.into(), v.clone());
                    }
                }
                out.push(Value::Object(r));
            }
            Some((parent, sub)) => {
                let sub =
                    json!({"subresource": sub, "responseKind": kind_of(e), "verbs": e["verbs"]});
                if let Some(Value::Object(p)) = out.iter_mut().find(|r| r["resource"] == parent) {
                    if let Value::Array(subs) = p
                        .entry("subresources")
                        .or_insert_with(|| Value::Array(Vec::new()))
                    {
                        subs.push(sub);
                    }
                }
            }
        }
    }
    out
}

/// The create-only resources that go with pods, as kube-apiserver lists them: the legacy
/// `bindings` collection and the `pods/binding` and `pods/eviction` subresources.
fn pod_create_only_entries() -> [Value; 3] {
    [
        json!({"name": "bindings", "singularName": "binding", "namespaced": true,
               "kind": "Binding", "verbs": ["create"]}),
        json!({"name": "pods/binding", "singularName": "", "namespaced": true,
               "kind": "Binding", "verbs": ["create"]}),
        json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
               "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}),
    ]
}

/// A stable stand-in for Kubernetes' storage version hash: eight bytes derived from the
/// group, version and kind, base64-encoded (12 characters, like the real ones). Clients only
/// compare it for equality across discovery calls.
pub fn storage_version_hash(r: &ResourceInfo) -> String {
    let digest = fnv1a_64(format!("{}/{}/{}", r.group, r.version, r.kind).as_bytes());
    base64_std(&digest.to_be_bytes())
}

fn resource_entry(r: &ResourceInfo) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(r.resource));
    m.insert("singularName".into(), json!(r.singular));
    m.insert("namespaced".into(), json!(r.namespaced));
    m.insert("kind".into(), json!(r.kind));
    m.insert("verbs".into(), json!(r.verbs()));
    if !r.short_names.is_empty() {
        m.insert("shortNames".into(), json!(r.short_names));
    }
    if !r.categories.is_empty() {
        m.insert("categories".into(), json!(r.categories));
    }
    m.insert("storageVersionHash".into(), json!(storage_version_hash(r)));
    Value::Object(m)
}

/// The `APIResourceList` of a group version that serves only self-reviews (create-only,
/// cluster-scoped), or `None`.
fn review_resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = crate::handlers::access_review::REVIEWS
        .iter()
        .filter(|(g, v, _, _)| *g == group && *v == version)
        .map(|(_, _, r, kind)| {
            json!({"name": r, "singularName": "", "namespaced": false, "kind": kind, "verbs": ["create"]})
        })
        .collect();
    (!resources.is_empty()).then(|| {
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version(group, version),
            "resources": resources,
        })
    })
}

/// Distinct named groups in table order, then the self-review groups.
fn named_groups(all: &[&'static ResourceInfo]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    let reviews = crate::handlers::access_review::REVIEWS
        .iter()
        .map(|(g, v, _, _)| (*g, *v));
    for (g, _) in group_versions_of(all.iter().copied())
        .into_iter()
        .chain(reviews)
    {
        if !g.is_empty() && !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

/// `name`, `versions` and `preferredVersion` of one named group.
fn group_body(all: &[&'static ResourceInfo], group: &str) -> Value {
    let reviews = crate::handlers::access_review::REVIEWS
        .iter()
        .map(|(g, v, _, _)| (*g, *v));
    let mut seen = Vec::new();
    let versions: Vec<Value> = group_versions_of(all.iter().copied())
        .into_iter()
        .chain(reviews)
        .filter(|(g, v)| {
            *g == group && !seen.contains(v) && {
                seen.push(*v);
                true
            }
        })
        .map(|(g, v)| json!({"groupVersion": group_version(g, v), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": preferred,
    })
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64_std(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[*s as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Vec<&'static ResourceInfo> {
        RESOURCES.iter().collect()
    }

    fn entry<'a>(list: &'a Value, name: &str) -> &'a Value {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no entry {name} in {list}"))
    }

    #[test]
    fn aggregated_discovery_is_asked_for_by_media_type_and_holds_every_resource() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(kubectl), Some("v2"));
        assert_eq!(
            aggregated_version(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            ),
            Some("v2beta1")
        );
        assert_eq!(aggregated_version("application/json, */*"), None);
        let all = builtin();
        let apis = aggregated(&all, false, "v2");
        assert_eq!(apis["kind"], "APIGroupDiscoveryList");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2");
        let apps = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .unwrap();
        let v1 = &apps["versions"][0];
        assert_eq!(v1["version"], "v1");
        let deploy = v1["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(
            deploy["responseKind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["singularResource"], "deployment");
        let subs: Vec<&str> = deploy["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["subresource"].as_str().unwrap())
            .collect();
        assert!(
            subs.contains(&"status") && subs.contains(&"scale"),
            "{subs:?}"
        );
        let core = aggregated(&all, true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        let eviction = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(
            eviction["responseKind"],
            json!({"group": "policy", "version": "v1", "kind": "Eviction"})
        );
        assert!(core["items"][0]["metadata"].get("name").is_none());
    }

    #[test]
    fn version_reports_kubernetes_1_32() {
        let v = version_info();
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "32");
        assert_eq!(v["gitVersion"], "v1.32.0");
        assert_eq!(v["gitTreeState"], "clean");
        assert_eq!(v["compiler"], "listwatch");
        for key in ["gitCommit", "buildDate", "goVersion", "platform"] {
            assert!(v[key].is_string(), "{key} missing");
        }
        assert!(v["platform"].as_str().unwrap().contains('/'));
    }

    #[test]
    fn api_versions_lists_v1_without_api_version_field() {
        let v = api_versions();
        assert_eq!(v["kind"], "APIVersions");
        assert_eq!(v["versions"], json!(["v1"]));
        assert_eq!(v["serverAddressByClientCIDRs"], json!([]));
        assert!(v.get("apiVersion").is_none());

        let v = api_versions_for("10.0.0.1:6443");
        assert_eq!(
            v["serverAddressByClientCIDRs"],
            json!([{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}])
        );
    }

    #[test]
    fn group_list_has_apps_and_coordination_with_preferred_versions() {
        let v = api_group_list(&builtin());
        assert_eq!(v["kind"], "APIGroupList");
        assert_eq!(v["apiVersion"], "v1");
        let groups = v["groups"].as_array().unwrap();
        let names: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            vec![
                "apps",
                "coordination.k8s.io",
                "batch",
                "networking.k8s.io",
                "policy",
                "autoscaling",
                "rbac.authorization.k8s.io",
                "discovery.k8s.io",
                "storage.k8s.io",
                "scheduling.k8s.io",
                "events.k8s.io",
                "apiextensions.k8s.io",
                "admissionregistration.k8s.io",
                "authorization.k8s.io",
                "authentication.k8s.io"
            ]
        );
        let apps = &groups[0];
        assert_eq!(
            apps["versions"],
            json!([{"groupVersion": "apps/v1", "version": "v1"}])
        );
        assert_eq!(
            apps["preferredVersion"],
            json!({"groupVersion": "apps/v1", "version": "v1"})
        );
        assert_eq!(
            groups[1]["preferredVersion"]["groupVersion"],
            "coordination.k8s.io/v1"
        );
        // The core group is never listed under /apis.
        assert!(!names.contains(&""));
    }

    #[test]
    fn single_group_document() {
        let g = api_group(&builtin(), "apps").unwrap();
        assert_eq!(g["kind"], "APIGroup");
        assert_eq!(g["apiVersion"], "v1");
        assert_eq!(g["name"], "apps");
        assert_eq!(g["preferredVersion"]["version"], "v1");
        assert!(api_group(&builtin(), "").is_none());
        assert!(api_group(&builtin(), "storagemigration.k8s.io").is_none());
        assert!(api_group(&builtin(), "admissionregistration.k8s.io").is_some());
    }

    #[test]
    fn core_resource_list_has_pods_and_status() {
        let list = api_resource_list(&builtin(), "", "v1").unwrap();
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "v1");
        assert!(list.get("apiVersion").is_none());

        let pods = entry(&list, "pods");
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["kind"], "Pod");
        assert_eq!(pods["singularName"], "pod");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let verbs = pods["verbs"].as_array().unwrap();
        for verb in [
            "create", "delete", "get", "list", "patch", "update", "watch",
        ] {
            assert!(verbs.contains(&json!(verb)), "pods lacks {verb}");
        }
        assert_eq!(pods["storageVersionHash"].as_str().unwrap().len(), 12);

        let status = entry(&list, "pods/status");
        assert_eq!(status["kind"], "Pod");
        assert_eq!(status["namespaced"], true);
        assert_eq!(status["singularName"], "");
        assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
        assert!(status.get("storageVersionHash").is_none());

        let binding = entry(&list, "pods/binding");
        assert_eq!(
            (&binding["kind"], &binding["verbs"]),
            (&json!("Binding"), &json!(["create"]))
        );
        let eviction = entry(&list, "pods/eviction");
        assert_eq!(
            (&eviction["group"], &eviction["version"], &eviction["kind"]),
            (&json!("policy"), &json!("v1"), &json!("Eviction"))
        );
        assert_eq!(entry(&list, "bindings")["singularName"], "binding");
        assert_eq!(
            entry(&list, "serviceaccounts/token")["kind"],
            "TokenRequest"
        );

        let nodes = entry(&list, "nodes");
        assert_eq!(nodes["namespaced"], false);
        assert!(entry(&list, "nodes/status").is_object());

        // Empty shortNames / categories are omitted; no status entry without the subresource.
        let secrets = entry(&list, "secrets");
        assert!(secrets.get("shortNames").is_none());
        assert!(secrets.get("categories").is_none());
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(!names.contains(&"configmaps/status"));
        // Every table entry of the core group is listed.
        for r in RESOURCES.iter().filter(|r| r.group.is_empty()) {
            assert!(names.contains(&r.resource), "{} missing", r.resource);
        }
    }

    #[test]
    fn named_group_resource_list_carries_api_version() {
        let list = api_resource_list(&builtin(), "apps", "v1").unwrap();
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["groupVersion"], "apps/v1");
        assert_eq!(entry(&list, "deployments")["shortNames"], json!(["deploy"]));
        assert_eq!(entry(&list, "deployments/status")["kind"], "Deployment");
        let events = api_resource_list(&builtin(), "events.k8s.io", "v1").unwrap();
        assert_eq!(entry(&events, "events")["shortNames"], json!(["ev"]));
        assert_eq!(entry(&events, "events")["kind"], "Event");
        let leases = api_resource_list(&builtin(), "coordination.k8s.io", "v1").unwrap();
        assert_eq!(entry(&leases, "leases")["kind"], "Lease");
        assert!(api_resource_list(&builtin(), "apps", "v2").is_none());
        assert!(api_resource_list(&builtin(), "nope", "v1").is_none());
    }

    #[test]
    fn review_groups_list_their_create_only_resources() {
        let v = api_resource_list(&builtin(), "authorization.k8s.io", "v1").unwrap();
        assert_eq!(v["groupVersion"], "authorization.k8s.io/v1");
        let ssar = entry(&v, "selfsubjectaccessreviews");
        assert_eq!(ssar["kind"], "SelfSubjectAccessReview");
        assert_eq!(ssar["verbs"], json!(["create"]));
        let g = api_group(&builtin(), "authentication.k8s.io").unwrap();
        assert_eq!(
            g["preferredVersion"]["groupVersion"],
            "authentication.k8s.io/v1"
        );
        assert!(api_resource_list(&builtin(), "authorization.k8s.io", "v2").is_none());
    }

    #[test]
    fn storage_version_hashes_are_stable_and_distinct() {
        let mut seen = Vec::new();
        for r in RESOURCES {
            let h = storage_version_hash(r);
            assert_eq!(h, storage_version_hash(r));
            assert!(!seen.contains(&h), "duplicate hash {h}");
            seen.push(h);
        }
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64_std(b""), "");
        assert_eq!(base64_std(b"f"), "Zg==");
        assert_eq!(base64_std(b"fo"), "Zm8=");
        assert_eq!(base64_std(b"foo"), "Zm9v");
        assert_eq!(base64_std(b"foob"), "Zm9vYg==");
        assert_eq!(base64_std(b"fooba"), "Zm9vYmE=");
        assert_eq!(base64_std(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_std(&[0xff; 8]), "//////////8=");
    }
}
