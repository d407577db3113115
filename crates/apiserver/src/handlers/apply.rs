//! Server-side apply: `PATCH` with `application/apply-patch+yaml`.
//!
//! The body is the applier's configuration (YAML or JSON). If the object exists, the
//! configuration is merged into it under field ownership (see [`api::managed_fields`]) on
//! the same compare-and-swap path as every update; conflicts with other managers are a 409
//! unless `force=true`. If it does not exist, the configuration is created (201).

use super::state::{ApiServer, WriteOptions};
use super::update::{parse_precondition, write_with_retry, Tracking};
use super::{encode_for_storage, object_response, storage_error, RequestInfo};
use crate::encoding::body::Body;
use crate::encoding::bounded_yaml;
use crate::registry::resources::ResourceInfo;
use crate::registry::strategy;
use api::managed_fields::apply::{conflicts_message, Conflict};
use api::managed_fields::Writer;
use api::{Object, Reason, Status};
use bytes::Bytes;
use http::Response;
use serde_json::Value;

/// Handles a server-side apply of `body` to the object `name`.
pub async fn apply(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let info = req.info;
    let manager = wopts.field_manager.clone().ok_or_else(|| {
        Status::new(
            Reason::Invalid,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
        .with_cause(
            "FieldValueRequired",
            "fieldManager",
            "Required value: is required for apply patch",
        )
    })?;
    let mut config = parse_config(body).await?;
    check_config(req, name, &mut config)?;
    wopts.check_fields(info, &mut config)?;
    if let Some(schema) = info.custom.and_then(|c| c.schema.as_deref()) {
        // Elements of a map-list are told apart by their keys, defaults included.
        schema.default_list_keys(&mut config.0);
    }
    let precondition = parse_precondition(config.resource_version())?;
    config.remove_meta("resourceVersion");
    let force = wopts.force.unwrap_or(false);
    let status_only = req.subresource.as_deref() == Some("status");
    let api_version = info.api_version();
    fn writer<'a>(
        info: &'static ResourceInfo,
        manager: &'a str,
        api_version: &'a str,
        status_only: bool,
        now: &'a str,
    ) -> Writer<'a> {
        Writer {
            manager,
            api_version,
            kind: api::patch::PatchKindHint::new(info.group, info.kind),
            lists: crate::registry::apiextensions::list_strategies(info),
            status_only,
            has_status: info.has_status,
            now,
        }
    }
    // Update the live object; if there is none, create it (and if a create wins the race,
    // update that one).
    for _ in 0..2 {
        let updated = write_with_retry(
            srv,
            req,
            name,
            precondition,
            status_only,
            wopts,
            Tracking::ByMutation,
            |old| {
                let now = api::time::now_rfc3339();
                let out = api::managed_fields::apply::apply(
                    Some(&old.0),
                    &config.0,
                    &writer(info, &manager, &api_version, status_only, &now),
                    force,
                )
                .map_err(|c| conflict_status(info, name, &c))?;
                let mut obj = Object(out);
                obj.remove_meta("resourceVersion");
                Ok(obj)
            },
        )
        .await;
        match updated {
            Err(s) if s.reason == Reason::NotFound && !status_only && precondition.is_none() => {}
            other => return other,
        }
        let now = api::time::now_rfc3339();
        let out = api::managed_fields::apply::apply(
            None,
            &config.0,
            &writer(info, &manager, &api_version, status_only, &now),
            force,
        )
        .map_err(|c| conflict_status(info, name, &c))?;
        let mut obj = Object(out);
        let ns = req.namespace.clone().unwrap_or_default();
        strategy::prepare_for_create(info, &mut obj, &ns)?;
        crate::admission::mutate_create(srv, info, &ns, &mut obj).await?;
        strategy::validate(info, &obj, None)?;
        strategy::validate_create(info, &obj)?;
        srv.admit_write(info, &ns, &obj, wopts).await?;
        if info.namespaced {
            srv.ensure_namespace_accepts_writes(info, obj.name(), &ns)
                .await?;
        }
        crate::admission::validate_create(srv, req, &ns, &obj, wopts).await?;
        if wopts.dry_run {
            return Ok(object_response(req.info, 201, &mut obj, 0));
        }
        let service = info.kind == "Service";
        if service {
            super::service_allocation::allocate(srv.storage().as_ref(), &ns, &mut obj.0).await?;
        }
        let key = req.storage_key(name);
        let created = srv
            .storage()
            .create(key.into_bytes().into(), encode_for_storage(&mut obj)?)
            .await;
        if service && created.is_err() {
            // Nothing was stored: give back what was reserved for it.
            let held = Value::Object(obj.0.clone());
            super::service_allocation::release(srv.storage().as_ref(), &ns, &held).await;
        }
        match created {
            Ok(kv) => return Ok(object_response(req.info, 201, &mut obj, kv.mod_revision)),
            Err(storage::StorageError::AlreadyExists) => continue,
            Err(e) => return Err(storage_error(info, name, e)),
        }
    }
    Err(Status::conflict(
        info.resource,
        name,
        "the object was created and deleted concurrently; please retry",
    ))
}

/// The configuration: a JSON or YAML document holding one object.
async fn parse_config(body: Bytes) -> Result<Object, Status> {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(json_err) => bounded_yaml::from_bytes(body).await.map_err(|yaml_err| {
            Status::bad_request(format!(
                "the apply configuration is neither JSON ({json_err}) nor YAML ({yaml_err})"
            ))
        })?,
    };
    Object::from_value(value)
        .ok_or_else(|| Status::bad_request("the apply configuration must be an object"))
}

/// What kube-apiserver requires of an apply configuration: the endpoint's apiVersion and
/// kind, metadata as an object without managedFields, and the URL's name and namespace.
fn check_config(req: &RequestInfo, name: &str, config: &mut Object) -> Result<(), Status> {
    let info = req.info;
    let api_version = info.api_version();
    if config.api_version() != api_version || config.kind() != info.kind {
        return Err(Status::bad_request(format!(
            "the apply configuration must have apiVersion {api_version:?} and kind {:?}, got {:?} and {:?}",
            info.kind,
            config.api_version(),
            config.kind()
        )));
    }
    if !config.0.get("metadata").is_none_or(Value::is_object) {
        return Err(Status::bad_request("metadata must be an object"));
    }
    if config
        .metadata()
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|v| !v.is_null())
    {
        return Err(Status::bad_request(
            "metadata.managedFields must be nil in an apply configuration",
        ));
    }
    if config.name().is_empty() {
        config.set_meta("name", name);
    } else if config.name() != name {
        return Err(Status::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            config.name()
        )));
    }
    if info.namespaced {
        let ns = req.namespace.as_deref().unwrap_or("");
        if !config.namespace().is_empty() && config.namespace() != ns {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    Ok(())
}

/// 409 with one `FieldManagerConflict` cause per field, as kube-apiserver answers.
fn conflict_status(info: &ResourceInfo, name: &str, conflicts: &[Conflict]) -> Status {
    let mut s = Status::new(Reason::Conflict, conflicts_message(conflicts))
        .with_details(info.resource, name)
        .with_group(info.group);
    for c in conflicts {
        s = s.with_cause("FieldManagerConflict", &c.field, &c.message());
    }
    s
}
