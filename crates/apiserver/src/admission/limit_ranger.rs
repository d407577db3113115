//! The LimitRanger admission plugin: a namespace's LimitRanges default and bound what its
//! pods' containers and claims ask for.
//!
//! On a pod's create, each `Container` item's `default` (limits) and `defaultRequest`
//! (requests) fill in what a container (or init container) leaves out, and the pod is
//! annotated with what was set (`kubernetes.io/limit-ranger`). Then every item is enforced:
//! `min` (requests and limits at least it; a missing request is an error), `max` (limits and
//! requests at most it; a missing limit is an error) and `maxLimitRequestRatio`, per
//! container for `Container` items, on the pod's totals for `Pod` items, and on a claim's
//! storage request for `PersistentVolumeClaim` items. Every violation is reported in one
//! 403, as kube-apiserver does.
//!
//! The LimitRanges come from the watch cache: one created a moment before a pod may not
//! apply to it yet (kube-apiserver reads its informer the same way).

use super::cached_in_namespace;
use crate::handlers::state::ApiServer;
use crate::registry::namespace_lifecycle::forbidden;
use crate::registry::ResourceInfo;
use api::quota::{amount, ResourceList};
use api::{Object, Status};
use serde_json::{Map, Value};

/// The annotation naming what the plugin set.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The items of every LimitRange in `ns`, from the cache (read once per request, so that
/// defaulting and validation see the same LimitRanges).
pub fn items(srv: &ApiServer, ns: &str) -> Vec<Value> {
    cached_in_namespace(srv, "limitranges", ns)
        .into_iter()
        .filter_map(|r| r.pointer("/spec/limits").and_then(Value::as_array).cloned())
        .flatten()
        .collect()
}

fn map_of(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

/// Fills in the default requests and limits of the `Container` items of `items` (a
/// namespace's, see [`items`]) on pod `obj`.
pub fn default_pod(items: &[Value], obj: &mut Object) {
    if items.is_empty() {
        return;
    }
    let set = apply_defaults(items, &mut obj.0);
    if !set.is_empty() {
        let annotations = obj
            .0
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .map(|m| {
                m.entry("annotations")
                    .or_insert_with(|| Value::Object(Map::new()))
            });
        if let Some(Value::Object(a)) = annotations {
            a.insert(
                ANNOTATION.into(),
                Value::String(format!("LimitRanger plugin set: {}", set.join("; "))),
            );
        }
    }
}

/// Applies the `Container` items' defaults to pod `pod`; says what it set, per container.
fn apply_defaults(items: &[Value], pod: &mut Map<String, Value>) -> Vec<String> {
    let mut limits = Map::new();
    let mut requests = Map::new();
    for item in items {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        // The first item that names a resource decides its default.
        for (k, v) in map_of(item.get("default")).into_iter().flatten() {
            limits.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in map_of(item.get("defaultRequest")).into_iter().flatten() {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let mut set = Vec::new();
    if limits.is_empty() && requests.is_empty() {
        return set;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return set;
    };
    for (list, what) in [
        ("initContainers", "init container"),
        ("containers", "container"),
    ] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            let cname = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let Some(resources) = c
                .entry("resources")
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
            else {
                continue;
            };
            for (field, defaults, noun) in [
                ("requests", &requests, "request"),
                ("limits", &limits, "limit"),
            ] {
                let Some(have) = resources
                    .entry(field)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                else {
                    continue;
                };
                let mut names: Vec<&str> = Vec::new();
                for (k, v) in defaults {
                    if !have.contains_key(k) {
                        have.insert(k.clone(), v.clone());
                        names.push(k);
                    }
                }
                if !names.is_empty() {
                    names.sort_unstable();
                    set.push(format!("{} {noun} for {what} {cname}", names.join(", ")));
                }
                if have.is_empty() {
                    resources.remove(field);
                }
            }
        }
    }
    set
}

/// Enforces the LimitRange `items` (a namespace's, see [`items`]) on pod or claim `obj`.
///
/// # Errors
/// 403 listing every minimum, maximum and ratio `obj` breaks.
pub fn validate_create(items: &[Value], info: &ResourceInfo, obj: &Object) -> Result<(), Status> {
    if items.is_empty() {
        return Ok(());
    }
    let obj_json = Value::Object(obj.0.clone());
    let errors = violations(items, info.resource, &obj_json);
    match errors.len() {
        0 => Ok(()),
        1 => Err(forbidden(info, obj.name(), &errors[0])),
        _ => Err(forbidden(
            info,
            obj.name(),
            &format!("[{}]", errors.join(", ")),
        )),
    }
}

/// What `obj` (a pod or a claim, by `resource`) breaks of `items`.
fn violations(items: &[Value], resource: &str, obj: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    for item in items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        match (resource, kind) {
            ("pods", "Container") => {
                for list in ["initContainers", "containers"] {
                    let containers = obj
                        .pointer(&format!("/spec/{list}"))
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    for c in containers {
                        let read = |f: &str| c.pointer(&format!("/resources/{f}"));
                        check(item, kind, read("requests"), read("limits"), &mut errors);
                    }
                }
            }
            ("pods", "Pod") => {
                let (requests, limits) = api::quota::pod_compute(obj);
                let as_json = |l: &ResourceList| api::quota::format_list(l);
                let (r, l) = (as_json(&requests), as_json(&limits));
                check(item, kind, Some(&r), Some(&l), &mut errors);
            }
            ("persistentvolumeclaims", "PersistentVolumeClaim") => {
                let requests = obj.pointer("/spec/resources/requests");
                check_claim(item, requests, &mut errors);
            }
            _ => {}
        }
    }
    errors
}

/// `text`'s amount for resource `k` (0 when it does not parse).
fn amt(k: &str, v: &Value) -> i64 {
    v.as_str().and_then(|t| amount(k, t)).unwrap_or(0)
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The min, max and ratio checks of one item against requests and limits.
fn check(
    item: &Value,
    kind: &str,
    requests: Option<&Value>,
    limits: Option<&Value>,
    errors: &mut Vec<String>,
) {
    let get = |m: Option<&Value>, k: &str| m.and_then(|m| m.get(k)).cloned();
    for (k, min) in map_of(item.get("min")).into_iter().flatten() {
        let floor = amt(k, min);
        match get(requests, k) {
            None => errors.push(format!(
                "minimum {k} usage per {kind} is {}.  No request is specified",
                text(min)
            )),
            Some(r) if amt(k, &r) < floor => errors.push(format!(
                "minimum {k} usage per {kind} is {}, but request is {}",
                text(min),
                text(&r)
            )),
            Some(_) => {}
        }
        if let Some(l) = get(limits, k).filter(|l| amt(k, l) < floor) {
            errors.push(format!(
                "minimum {k} usage per {kind} is {}, but limit is {}",
                text(min),
                text(&l)
            ));
        }
    }
    for (k, max) in map_of(item.get("max")).into_iter().flatten() {
        let ceiling = amt(k, max);
        match get(limits, k) {
            None => errors.push(format!(
                "maximum {k} usage per {kind} is {}.  No limit is specified",
                text(max)
            )),
            Some(l) if amt(k, &l) > ceiling => errors.push(format!(
                "maximum {k} usage per {kind} is {}, but limit is {}",
                text(max),
                text(&l)
            )),
            Some(_) => {}
        }
        if let Some(r) = get(requests, k).filter(|r| amt(k, r) > ceiling) {
            errors.push(format!(
                "maximum {k} usage per {kind} is {}, but request is {}",
                text(max),
                text(&r)
            ));
        }
    }
    for (k, ratio) in map_of(item.get("maxLimitRequestRatio"))
        .into_iter()
        .flatten()
    {
        let allowed = ratio
            .as_str()
            .and_then(api::quantity::milli_value)
            .unwrap_or(0) as f64
            / 1000.0;
        let request = get(requests, k).map(|r| amt(k, &r)).unwrap_or(0);
        let Some(limit) = get(limits, k).map(|l| amt(k, &l)) else {
            errors.push(format!(
                "{k} max limit to request ratio per {kind} is {}, but no limit is specified",
                text(ratio)
            ));
            continue;
        };
        if request == 0 {
            errors.push(format!(
                "{k} max limit to request ratio per {kind} is {}, but no request is specified or request is 0",
                text(ratio)
            ));
            continue;
        }
        let actual = limit as f64 / request as f64;
        if actual > allowed {
            errors.push(format!(
                "{k} max limit to request ratio per {kind} is {}, but provided ratio is {actual:.6}",
                text(ratio)
            ));
        }
    }
}

/// A `PersistentVolumeClaim` item's bounds on a claim's requests.
fn check_claim(item: &Value, requests: Option<&Value>, errors: &mut Vec<String>) {
    let kind = "PersistentVolumeClaim";
    let get = |k: &str| requests.and_then(|m| m.get(k)).cloned();
    for (bound, name) in [("min", "minimum"), ("max", "maximum")] {
        for (k, limit) in map_of(item.get(bound)).into_iter().flatten() {
            match get(k) {
                None => errors.push(format!(
                    "{name} {k} usage per {kind} is {}.  No request is specified",
                    text(limit)
                )),
                Some(r) => {
                    let (have, edge) = (amt(k, &r), amt(k, limit));
                    if (bound == "min" && have < edge) || (bound == "max" && have > edge) {
                        errors.push(format!(
                            "{name} {k} usage per {kind} is {}, but request is {}",
                            text(limit),
                            text(&r)
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_what_containers_leave_out_and_say_so() {
        let items = vec![json!({"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}})];
        let mut pod = json!({"spec": {"containers": [
            {"name": "web", "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}},
            {"name": "bare"}
        ]}});
        let set = apply_defaults(&items, pod.as_object_mut().unwrap());
        assert_eq!(
            set,
            vec![
                "cpu request for container web",
                "cpu limit for container web",
                "cpu, memory request for container bare",
                "cpu, memory limit for container bare"
            ]
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "1Gi"
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["requests"]["cpu"],
            "100m"
        );
    }

    #[test]
    fn every_broken_bound_is_reported() {
        let items = vec![
            json!({"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"}, "maxLimitRequestRatio": {"cpu": "2"}}),
            json!({"type": "Pod", "max": {"cpu": "1"}}),
        ];
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "2", "memory": "2Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "300m", "memory": "1Gi"}}}
        ]}});
        let errors = violations(&items, "pods", &pod);
        assert_eq!(
            errors,
            vec![
                "minimum cpu usage per Container is 100m, but request is 50m",
                "maximum memory usage per Container is 1Gi, but limit is 2Gi",
                "cpu max limit to request ratio per Container is 2, but provided ratio is 40.000000",
                "maximum cpu usage per Pod is 1, but limit is 2300m",
            ]
        );
        let fine = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "300m", "memory": "1Gi"}}}
        ]}});
        assert!(violations(&items, "pods", &fine).is_empty());
        let missing = json!({"spec": {"containers": [{"name": "a"}]}});
        let errors = violations(&items[..1], "pods", &missing);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].ends_with("No request is specified"));
    }

    #[test]
    fn claims_are_bounded_by_their_storage_request() {
        let items = vec![
            json!({"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}),
        ];
        let claim = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(violations(&items, "persistentvolumeclaims", &claim("5Gi")).is_empty());
        assert_eq!(
            violations(&items, "persistentvolumeclaims", &claim("20Gi")),
            vec!["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"]
        );
        assert_eq!(
            violations(&items, "persistentvolumeclaims", &claim("1Mi")).len(),
            1
        );
    }
}
