//! The `scale` subresource of deployments, replicasets, statefulsets and replication
//! controllers (`kubectl scale`): an `autoscaling/v1` `Scale` view of the object's replica
//! count.
//!
//! GET returns the view; PUT and PATCH (merge, JSON or strategic-merge, applied to the view)
//! change `spec.replicas` of the object through the ordinary update path — optimistic
//! concurrency on a `resourceVersion` in the body, generation bump, field ownership.

use super::state::{ApiServer, WriteOptions};
use super::update::{parse_precondition, write_object_with_retry, Tracking};
use super::{decode_stored, json_response, storage_error, RequestInfo};
use crate::encoding::body::Body;
use crate::registry::ResourceInfo;
use api::patch::{apply_patch, PatchKindHint, PatchType};
use api::{Object, Reason, Status};
use bytes::Bytes;
use http::{Method, Response};
use serde_json::{json, Map, Value};

/// Whether a resource serves `scale`: the built-in kinds with `spec.replicas` and
/// `spec.selector`, and custom resources whose CRD enables it.
pub fn has_scale(info: &ResourceInfo) -> bool {
    match info.custom {
        Some(custom) => custom.scale.is_some(),
        None => matches!(
            info.kind,
            "Deployment" | "ReplicaSet" | "StatefulSet" | "ReplicationController"
        ),
    }
}

/// Where an object of `info` keeps its replica counts and selector: the CRD's paths for a
/// custom resource, `.spec.replicas`, `.status.replicas` and `.spec.selector` otherwise.
struct Paths<'a> {
    spec: &'a str,
    status: &'a str,
    /// A custom resource's selector, a string in the query syntax at this path.
    selector: Option<&'a str>,
}

fn paths(info: &ResourceInfo) -> Paths<'_> {
    match info.custom.and_then(|c| c.scale.as_ref()) {
        Some(s) => Paths {
            spec: &s.spec_replicas,
            status: &s.status_replicas,
            selector: s.label_selector.as_deref(),
        },
        None => Paths {
            spec: ".spec.replicas",
            status: ".status.replicas",
            selector: None,
        },
    }
}

/// The value at a simple JSON path (`.spec.replicas`).
fn at_path<'v>(obj: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.')
        .filter(|s| !s.is_empty())
        .try_fold(obj, |v, k| v.get(k))
}

/// Sets the value at a simple JSON path, creating the objects on the way.
fn set_path(obj: &mut Value, path: &str, value: Value) {
    let keys: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parents {
        let Some(m) = cur.as_object_mut() else { return };
        let next = m.entry(k.to_string()).or_insert_with(|| json!({}));
        if !next.is_object() {
            *next = json!({});
        }
        cur = next;
    }
    if let Some(m) = cur.as_object_mut() {
        m.insert(last.to_string(), value);
    }
}

/// Handles `GET`, `PUT` and `PATCH` on `.../{name}/scale`.
pub async fn scale(
    srv: &ApiServer,
    req: &RequestInfo,
    method: &Method,
    content_type: &str,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name(method.as_str())?.to_string();
    let info = req.info;
    let current = || async {
        let kv = srv
            .storage()
            .get(req.storage_key(&name).as_bytes())
            .await
            .map_err(|e| storage_error(info, &name, e))?
            .ok_or_else(|| Status::not_found(info.resource, &name).with_group(info.group))?;
        decode_stored(info, &kv)
    };
    let wanted: Value = match *method {
        Method::GET => {
            return Ok(json_response(
                200,
                to_vec(&scale_of(info, &current().await?)),
            ))
        }
        Method::PUT => serde_json::from_slice(&body)
            .map_err(|e| Status::bad_request(format!("invalid Scale: {e}")))?,
        Method::PATCH => {
            let patch_type = PatchType::from_content_type(content_type).ok_or_else(|| {
                Status::unsupported_media_type(
                    content_type,
                    &PatchType::ALL.map(PatchType::content_type),
                )
            })?;
            let view = scale_of(info, &current().await?);
            apply_patch(PatchKindHint::UNKNOWN, &view, &body, patch_type)
                .map_err(|e| e.to_status())?
        }
        _ => return Err(Status::method_not_allowed(method.as_str(), "scale")),
    };
    let replicas = match wanted.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().filter(|r| (0..=i64::from(i32::MAX)).contains(r)).ok_or_else(|| {
            Status::new(
                Reason::Invalid,
                format!("Scale.autoscaling \"{name}\" is invalid: spec.replicas: Invalid value: {v}: must be greater than or equal to 0"),
            )
            .with_details("Scale", &name)
            .with_cause("FieldValueInvalid", "spec.replicas", "must be greater than or equal to 0")
        })?,
    };
    // A resourceVersion in a PUT body is a precondition, as for the object itself.
    let precondition = match (method, wanted.pointer("/metadata/resourceVersion")) {
        (&Method::PUT, Some(Value::String(rv))) => parse_precondition(rv)?,
        _ => None,
    };
    let (obj, rv) = write_object_with_retry(
        srv,
        req,
        &name,
        precondition,
        false,
        wopts,
        Tracking::Update,
        |old| {
            let mut new = Value::Object(old.0.clone());
            set_path(&mut new, paths(info).spec, json!(replicas));
            let mut new = Object(new.as_object().cloned().unwrap_or_default());
            new.remove_meta("resourceVersion");
            Ok(new)
        },
    )
    .await?;
    let mut obj = obj;
    obj.set_meta("resourceVersion", rv.to_string());
    Ok(json_response(200, to_vec(&scale_of(info, &obj))))
}

fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The `Scale` view of an object with a replica count.
fn scale_of(info: &ResourceInfo, obj: &Object) -> Value {
    let mut meta = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj.metadata().and_then(|m| m.get(k)) {
            meta.insert(k.into(), v.clone());
        }
    }
    let whole = Value::Object(obj.0.clone());
    let p = paths(info);
    // An unset count is Kubernetes' default for the built-in kinds, 0 for custom ones.
    let unset = if info.custom.is_some() { 0 } else { 1 };
    let replicas = at_path(&whole, p.spec)
        .and_then(Value::as_i64)
        .unwrap_or(unset);
    let status_replicas = at_path(&whole, p.status)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let custom_selector = p.selector.map(|path| {
        at_path(&whole, path)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    });
    let selector = custom_selector.unwrap_or_else(|| {
        obj.0
            .get("spec")
            .and_then(|s| s.get("selector"))
            .map(|sel| {
                // A replication controller's selector is a plain map of labels.
                if obj.0.get("kind").and_then(Value::as_str) == Some("ReplicationController") {
                    selector_string(&json!({ "matchLabels": sel }))
                } else {
                    selector_string(sel)
                }
            })
            .unwrap_or_default()
    });
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": {"replicas": replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// A `LabelSelector` in the label-selector query syntax (`app=web,tier in (a,b)`),
/// requirements sorted by key as kube-apiserver prints them.
fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_view_and_selector() {
        let deployments = crate::registry::resources::find("apps", "v1", "deployments").unwrap();
        let d = Object::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "labels": {"x": "y"}},
            "spec": {"replicas": 3, "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                     {"key": "canary", "operator": "DoesNotExist"}]
            }},
            "status": {"replicas": 2}
        }))
        .unwrap();
        assert_eq!(
            scale_of(deployments, &d),
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=web,!canary,tier in (a,b)"}
            })
        );
        let rc = Object::from_value(json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "old", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"tier": "a", "app": "web"}}
        }))
        .unwrap();
        let rcs = crate::registry::resources::find("", "v1", "replicationcontrollers").unwrap();
        assert_eq!(scale_of(rcs, &rc)["status"]["selector"], "app=web,tier=a");
    }

    #[test]
    fn paths_are_followed_and_made() {
        let mut v = json!({"spec": {"size": {}}});
        set_path(&mut v, ".spec.size.count", json!(3));
        set_path(&mut v, ".status.count", json!(1));
        assert_eq!(at_path(&v, ".spec.size.count"), Some(&json!(3)));
        assert_eq!(at_path(&v, ".status.count"), Some(&json!(1)));
        assert_eq!(at_path(&v, ".status.missing"), None);
    }
}
