//! CREATE (POST on a collection): strategy, validation, then a create-if-absent in storage.

use super::state::{ApiServer, WriteOptions};
use super::{
    encode_for_storage_with_slot, object_response, storage_error, stored_object_response,
    RequestInfo,
};
use crate::encoding::body::Body;
use crate::registry::strategy;
use api::Status;
use bytes::Bytes;
use http::Response;

/// Handles `POST` on a collection URL. Answers 201 with the stored object.
pub async fn create(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    if req.name.is_some() {
        return Err(Status::method_not_allowed("POST", req.info.resource));
    }
    let ns = req.namespace.clone().unwrap_or_default();
    if req.info.namespaced && ns.is_empty() {
        return Err(Status::method_not_allowed("POST", req.info.resource));
    }
    let mut obj = super::decode_body(body).await?;
    wopts.check_fields(req.info, &mut obj)?;
    strategy::prepare_for_create(req.info, &mut obj, &ns)?;
    wopts.track_update(req.info, false, None, &mut obj)?;
    // After field tracking, as kube-apiserver orders them: what admission adds (a pod's
    // token volume, LimitRange defaults) is owned by no manager.
    crate::admission::mutate_create(srv, req.info, &ns, &mut obj).await?;
    strategy::validate(req.info, &obj, None)?;
    strategy::validate_create(req.info, &obj)?;
    srv.admit_write(req.info, &ns, &obj, wopts).await?;
    if req.info.namespaced {
        srv.ensure_namespace_accepts_writes(req.info, obj.name(), &ns)
            .await?;
    }
    crate::admission::validate_create(srv, req, &ns, &obj, wopts).await?;
    let name = obj.name().to_string();
    let key = req.storage_key(&name);
    if wopts.dry_run {
        // Everything a real create would check, short of writing: a name in use is 409.
        let existing = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, &name, e))?;
        if existing.is_some() {
            return Err(Status::already_exists(req.info.resource, &name).with_group(req.info.group));
        }
        return Ok(object_response(req.info, 201, &mut obj, 0));
    }
    let service = req.info.kind == "Service";
    if service {
        super::service_allocation::allocate(srv.storage().as_ref(), &ns, &mut obj.0).await?;
    }
    let (mut value, mut slot) = (Bytes::new(), None);
    let stored = match encode_for_storage_with_slot(&mut obj) {
        Ok((v, s)) => {
            (value, slot) = (v.clone(), s);
            srv.storage()
                .create(key.into_bytes().into(), v)
                .await
                .map_err(|e| storage_error(req.info, &name, e))
        }
        Err(too_large) => Err(too_large),
    };
    let kv = match stored {
        Ok(kv) => kv,
        Err(e) => {
            if service {
                // Nothing was stored: give back what was reserved for it.
                let held = serde_json::Value::Object(obj.0.clone());
                super::service_allocation::release(srv.storage().as_ref(), &ns, &held).await;
            }
            return Err(e);
        }
    };
    Ok(stored_object_response(
        req.info,
        201,
        &mut obj,
        &value,
        slot,
        kv.mod_revision,
    ))
}
