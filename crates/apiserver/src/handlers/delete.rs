//! DELETE: preconditions, finalizers, and the namespace lifecycle (Terminating, then its
//! contents are removed, then the namespace itself).

use super::{decode_stored, object_response, storage_error, RequestInfo};
use crate::server::body::Body;
use crate::server::{ApiServer, WriteOptions};
use api::Status;
use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

/// Handles `DELETE .../{name}`. Answers 200 with the object (its last state, or the state
/// marked for deletion when finalizers hold it).
pub async fn delete(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("DELETE")?.to_string();
    let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            Status::bad_request(format!("the DeleteOptions body could not be decoded: {e}"))
        })?
    };
    if !opts.is_object() {
        return Err(Status::bad_request(
            "the DeleteOptions body must be a JSON object",
        ));
    }
    let pre_uid = opts
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let pre_rv = opts
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let dry_run = wopts.dry_run
        || opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    let key = req.storage_key(&name);
    for _ in 0..16 {
        let cur = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, &name, e))?
            .ok_or_else(|| {
                Status::not_found(req.info.resource, &name).with_group(req.info.group)
            })?;
        let mut obj = decode_stored(req.info, &cur)?;
        if let Some(uid) = &pre_uid {
            if uid != obj.uid() {
                return Err(Status::conflict(
                    req.info.resource,
                    &name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        obj.uid()
                    ),
                ));
            }
        }
        if let Some(rv) = &pre_rv {
            if *rv != cur.mod_revision.to_string() {
                return Err(Status::conflict(req.info.resource, &name, &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", cur.mod_revision
                )));
            }
        }
        if dry_run {
            return Ok(object_response(200, &mut obj, cur.mod_revision));
        }
        let is_namespace = req.info.kind == "Namespace";
        let has_finalizers = !obj.meta().finalizers.is_empty();
        if has_finalizers || is_namespace {
            // Mark for deletion; finalizers (or the namespace lifecycle) finish the job.
            if obj
                .metadata()
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some()
            {
                return Ok(object_response(200, &mut obj, cur.mod_revision));
            }
            obj.set_meta("deletionTimestamp", api::time::now_rfc3339());
            obj.set_meta("deletionGracePeriodSeconds", 0);
            if is_namespace {
                obj.0
                    .insert("status".into(), json!({"phase": "Terminating"}));
            }
            let value = super::encode_for_storage(&mut obj)?;
            match srv
                .storage()
                .update(key.clone().into_bytes().into(), value, cur.mod_revision)
                .await
            {
                Ok(kv) => {
                    if is_namespace {
                        srv.finish_namespace_deletion(name.clone());
                    }
                    return Ok(object_response(200, &mut obj, kv.mod_revision));
                }
                Err(storage::StorageError::Conflict { .. }) if pre_rv.is_none() => continue,
                Err(e) => return Err(storage_error(req.info, &name, e)),
            }
        }
        match srv
            .storage()
            .delete(key.clone().into_bytes().into(), Some(cur.mod_revision))
            .await
        {
            Ok(_) => {
                if req.info.kind == "Service" {
                    let ns = req.namespace.as_deref().unwrap_or_default();
                    let held = Value::Object(obj.0.clone());
                    super::service_allocation::release(srv.storage().as_ref(), ns, &held).await;
                }
                return Ok(object_response(200, &mut obj, cur.mod_revision));
            }
            Err(storage::StorageError::Conflict { .. }) if pre_rv.is_none() => continue,
            Err(e) => return Err(storage_error(req.info, &name, e)),
        }
    }
    Err(Status::conflict(
        req.info.resource,
        &name,
        "too many concurrent writers; please retry",
    ))
}
