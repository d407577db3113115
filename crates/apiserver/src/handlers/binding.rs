//! `POST .../pods/{name}/binding` (and the older `POST .../namespaces/{ns}/bindings`, which
//! names the pod in the body): a scheduler assigns a pod to a node with a core `v1` Binding,
//! as kube-apiserver's `BindingREST` does it.
//!
//! The pod gets `spec.nodeName` = the binding's `target.name`, the binding's annotations,
//! and a `PodScheduled` condition with status `True` (replacing any earlier one, whose
//! transition time is kept if it was `True` already). The write goes straight to storage:
//! neither the update rules of pods (which forbid changing `spec.nodeName`) nor field
//! ownership apply. Answers 201 with a `Success` Status.
//!
//! Refused: a body that is no Binding (400), a name other than the URL's (400), another
//! namespace (400), a target that is not a node or has no name (422), a missing pod (404),
//! and — as 409 Conflicts on `pods/binding` — a pod already bound, being deleted, or still
//! held by scheduling gates; `metadata.uid` and `metadata.resourceVersion` of the binding
//! are preconditions on the pod (409 when they do not hold).

use super::state::{ApiServer, WriteOptions};
use super::{created_status, decode_stored, decode_typed, storage_error, RequestInfo};
use crate::encoding::body::Body;
use api::status::FieldError;
use api::{Object, Status};
use bytes::Bytes;
use http::Response;
use serde_json::{json, Map, Value};

/// Handles a Binding `body` posted for `req`'s pod (named in the URL, or for the legacy
/// `bindings` collection in the body).
pub async fn bind(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let binding = decode_typed::<k8s_openapi::api::core::v1::Binding>(&body, &["v1"], "Binding")?;
    let meta = binding
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta_str = |k: &str| {
        meta.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = meta_str("name");
    match req.name.as_deref() {
        Some(url_name) if url_name != name => {
            return Err(Status::bad_request(
                "name in URL does not match name in Binding object",
            ))
        }
        None if name.is_empty() => {
            return Err(Status::bad_request("name parameter required."));
        }
        _ => {}
    }
    let ns = req.namespace.as_deref().unwrap_or("");
    let body_ns = meta_str("namespace");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let target = binding.get("target").cloned().unwrap_or(Value::Null);
    let target_str = |k: &str| target.get(k).and_then(Value::as_str).unwrap_or("");
    let node = target_str("name").to_string();
    let mut errs = Vec::new();
    let target_kind = target_str("kind");
    if !target_kind.is_empty() && target_kind != "Node" {
        errs.push(FieldError::not_supported(
            "target.kind",
            target_kind,
            &["Node", "<empty>"],
        ));
    }
    if node.is_empty() {
        errs.push(FieldError::required("target.name", ""));
    }
    if !errs.is_empty() {
        return Err(Status::invalid_fields("Binding", "", &name, &errs));
    }
    let annotations = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let (pre_uid, pre_rv) = (meta_str("uid"), meta_str("resourceVersion"));
    let key = req.storage_key(&name);
    for _ in 0..16 {
        let cur = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, &name, e))?
            .ok_or_else(|| Status::not_found(req.info.resource, &name))?;
        let pod = decode_stored(req.info, &cur)?;
        if !pre_uid.is_empty() && pre_uid != pod.uid() {
            return Err(Status::conflict(
                "pods",
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {pre_uid}, UID in object meta: {}",
                    pod.uid()
                ),
            ));
        }
        if !pre_rv.is_empty() && pre_rv != cur.mod_revision.to_string() {
            return Err(Status::conflict(
                "pods",
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {pre_rv}, \
                     ResourceVersion in object meta: {}",
                    cur.mod_revision
                ),
            ));
        }
        let mut bound = assign(&pod, &node, &annotations, &api::time::now_rfc3339())
            .map_err(|why| Status::conflict("pods/binding", &name, &why))?;
        if wopts.dry_run {
            return Ok(created_status());
        }
        let value = super::encode_for_storage(&mut bound)?;
        match srv
            .storage()
            .update(key.clone().into_bytes().into(), value, cur.mod_revision)
            .await
        {
            Ok(_) => return Ok(created_status()),
            Err(storage::StorageError::Conflict { .. }) if pre_rv.is_empty() => continue,
            Err(e) => return Err(storage_error(req.info, &name, e)),
        }
    }
    Err(Status::conflict(
        "pods/binding",
        &name,
        "too many concurrent writers; please retry",
    ))
}

/// `pod` bound to `node` at time `now`: the node name, `annotations` merged in, and the
/// `PodScheduled` condition. The reason when it cannot be bound.
fn assign(
    pod: &Object,
    node: &str,
    annotations: &Map<String, Value>,
    now: &str,
) -> Result<Object, String> {
    let name = pod.name();
    if pod
        .metadata()
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
    {
        return Err(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        ));
    }
    let current = pod.field_str("spec.nodeName").unwrap_or_default();
    if !current.is_empty() {
        return Err(format!(
            "pod {name} is already assigned to node {current:?}"
        ));
    }
    let gated = pod
        .get("spec")
        .and_then(|s| s.get("schedulingGates"))
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    if gated {
        return Err(format!("pod {name} has non-empty .spec.schedulingGates"));
    }
    let mut out = pod.clone();
    out.remove_meta("resourceVersion");
    match out.0.get_mut("spec").and_then(Value::as_object_mut) {
        Some(spec) => {
            spec.insert("nodeName".into(), json!(node));
        }
        None => {
            out.0.insert("spec".into(), json!({ "nodeName": node }));
        }
    }
    if !annotations.is_empty() {
        let meta = out.metadata_mut();
        let existing = meta.entry("annotations").or_insert_with(|| json!({}));
        if !existing.is_object() {
            *existing = json!({});
        }
        if let Some(m) = existing.as_object_mut() {
            m.extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    super::pod_condition::set(&mut out, "PodScheduled", "True", "", "", now);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn assign_sets_node_annotations_and_condition() {
        let p = pod(json!({"metadata": {"name": "p", "annotations": {"a": "1"}},
            "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}));
        let mut extra = Map::new();
        extra.insert("b".into(), json!("2"));
        let out = assign(&p, "n1", &extra, "2024-02-02T00:00:00Z").unwrap();
        assert_eq!(out.0["spec"]["nodeName"], "n1");
        assert_eq!(
            out.0["metadata"]["annotations"],
            json!({"a": "1", "b": "2"})
        );
        assert_eq!(
            out.0["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": "2024-02-02T00:00:00Z"}])
        );
        // Bound already, being deleted, gated: refused with kube-apiserver's words.
        assert_eq!(
            assign(&out, "n2", &Map::new(), "t").unwrap_err(),
            "pod p is already assigned to node \"n1\""
        );
        let mut deleting = p.clone();
        deleting.set_meta("deletionTimestamp", "2024-01-01T00:00:00Z");
        assert_eq!(
            assign(&deleting, "n1", &Map::new(), "t").unwrap_err(),
            "pod p is being deleted, cannot be assigned to a host"
        );
        let gated = pod(json!({"metadata": {"name": "p"},
            "spec": {"schedulingGates": [{"name": "wait"}]}}));
        assert_eq!(
            assign(&gated, "n1", &Map::new(), "t").unwrap_err(),
            "pod p has non-empty .spec.schedulingGates"
        );
    }
}
