//! UPDATE (PUT on an item, its status, or a namespace's `finalize`): optimistic concurrency
//! on the resourceVersion.

use super::state::{ApiServer, WriteOptions};
use super::{
    decode_stored, encode_for_storage_with_slot, object_response, storage_error,
    stored_object_response, RequestInfo, RvSlot,
};
use crate::encoding::body::Body;
use crate::registry::{namespace_lifecycle, strategy};
use api::{Object, Status};
use bytes::Bytes;
use http::Response;

/// Parses a `metadata.resourceVersion` precondition ("" = none).
pub fn parse_precondition(rv: &str) -> Result<Option<u64>, Status> {
    if rv.is_empty() {
        return Ok(None);
    }
    rv.parse::<u64>().map(Some).map_err(|_| {
        Status::bad_request(format!(
            "metadata.resourceVersion: Invalid value: {rv:?}: must be a decimal number"
        ))
    })
}

/// Handles `PUT .../{name}`, `PUT .../{name}/status` and `PUT namespaces/{name}/finalize`
/// (which, of the spec, changes only `spec.finalizers`).
pub async fn update(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("PUT")?.to_string();
    let mut new = super::decode_body(body).await?;
    wopts.check_fields(req.info, &mut new)?;
    if new.name().is_empty() {
        new.set_meta("name", name.clone());
    } else if new.name() != name {
        return Err(Status::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            new.name()
        )));
    }
    if req.info.namespaced {
        let ns = req.namespace.as_deref().unwrap_or("");
        if !new.namespace().is_empty() && new.namespace() != ns {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let precondition = parse_precondition(new.resource_version())?;
    let status_only = req.subresource.as_deref() == Some("status");
    write_with_retry(
        srv,
        req,
        &name,
        precondition,
        status_only,
        wopts,
        Tracking::Update,
        move |_old| Ok(new.clone()),
    )
    .await
}

/// Whether [`write_with_retry`] records the write in `metadata.managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracking {
    /// An ordinary write: record it as an `Update` by the request's manager.
    Update,
    /// The mutation maintains `managedFields` itself (server-side apply).
    ByMutation,
}

/// Read-modify-write loop shared by update and patch: reads the current object, builds the
/// new one with `mutate`, applies the strategy, records field ownership as `tracking` says,
/// validates, and compare-and-swaps it in. Without a precondition, a lost race is retried on
/// the fresh object.
#[allow(clippy::too_many_arguments)]
pub async fn write_with_retry(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    precondition: Option<u64>,
    status_only: bool,
    wopts: &WriteOptions,
    tracking: Tracking,
    mutate: impl FnMut(&Object) -> Result<Object, Status>,
) -> Result<Response<Body>, Status> {
    let mut written = write_with_retry_stored(
        srv,
        req,
        name,
        precondition,
        status_only,
        wopts,
        tracking,
        mutate,
    )
    .await?;
    Ok(match &written.stored {
        Some((stored, slot)) => {
            stored_object_response(req.info, 200, &mut written.obj, stored, *slot, written.rv)
        }
        None => object_response(req.info, 200, &mut written.obj, written.rv),
    })
}

/// What [`write_with_retry_stored`] wrote.
struct Written {
    /// The object as stored (or as it would have been, for a dry run).
    obj: Object,
    /// Its resourceVersion.
    rv: u64,
    /// Its JSON as stored and where its resourceVersion goes there, when it was written
    /// (not after a dry run, nor for an object the write deleted or left as it was).
    stored: Option<(Bytes, Option<RvSlot>)>,
}

/// [`write_with_retry`], answering with the object as stored (or as it would have been, for
/// a dry run) and its resourceVersion instead of a response.
#[allow(clippy::too_many_arguments)]
pub async fn write_object_with_retry(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    precondition: Option<u64>,
    status_only: bool,
    wopts: &WriteOptions,
    tracking: Tracking,
    mutate: impl FnMut(&Object) -> Result<Object, Status>,
) -> Result<(Object, u64), Status> {
    write_with_retry_stored(
        srv,
        req,
        name,
        precondition,
        status_only,
        wopts,
        tracking,
        mutate,
    )
    .await
    .map(|w| (w.obj, w.rv))
}

/// [`write_object_with_retry`], with the object's stored JSON.
#[allow(clippy::too_many_arguments)]
async fn write_with_retry_stored(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    precondition: Option<u64>,
    status_only: bool,
    wopts: &WriteOptions,
    tracking: Tracking,
    mut mutate: impl FnMut(&Object) -> Result<Object, Status>,
) -> Result<Written, Status> {
    let done = |obj, rv, stored| Ok(Written { obj, rv, stored });
    let key = req.storage_key(name);
    for _ in 0..16 {
        let (cur, stale) = srv
            .storage()
            .get_for_update(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, name, e))?
            .ok_or_else(|| Status::not_found(req.info.resource, name).with_group(req.info.group))?;
        if let Some(p) = precondition {
            if p != cur.mod_revision {
                return Err(storage_error(
                    req.info,
                    name,
                    storage::StorageError::Conflict {
                        current: Box::new(cur),
                    },
                ));
            }
        }
        let old = decode_stored(req.info, &cur)?;
        let candidate = mutate(&old)?;
        let finalize = req.subresource.as_deref() == Some("finalize");
        let asked_finalizers = finalize.then(|| namespace_lifecycle::spec_finalizers(&candidate));
        let mut out = strategy::prepare_for_update(req.info, &old, candidate, status_only)?;
        if let Some(finalizers) = asked_finalizers {
            // The `finalize` subresource: what it says of spec.finalizers is what is stored.
            namespace_lifecycle::set_spec_finalizers(&mut out, finalizers);
        }
        let service = req.info.kind == "Service" && !status_only;
        if service {
            super::service_allocation::carry_over(name, &old.0, &mut out.0)?;
        }
        if tracking == Tracking::Update {
            wopts.track_update(req.info, status_only, Some(&old), &mut out)?;
        }
        strategy::validate(req.info, &out, Some(&old))?;
        strategy::validate_update(req.info, &old, &out, status_only)?;
        srv.admit_write(
            req.info,
            req.namespace.as_deref().unwrap_or(""),
            &out,
            wopts,
        )
        .await?;
        crate::admission::check_policies(
            srv,
            req,
            crate::admission::validating_admission_policy::Operation::Update,
            Some(&out),
            Some(&old),
            wopts,
        )
        .await?;
        // `old` is not read again in this round: compare against it as stored.
        let mut old_plain = old;
        old_plain.remove_meta("resourceVersion");
        api::managed_fields::keep_times_if_unchanged(&old_plain.0, &mut out.0);
        if out == old_plain && !stale {
            // Nothing changed: no write, no new resourceVersion (as kube-apiserver does).
            // A stale value (e.g. encrypted with a key that is no longer the first) is
            // rewritten all the same: that is how re-encryption migrates objects.
            return done(out, cur.mod_revision, None);
        }
        // Kubernetes deletes during an update only an object whose deletion waits for
        // nothing but finalizers: a pod still in its grace period stays until its node
        // agent deletes it, a namespace until its spec.finalizers are gone too.
        let namespace_held = namespace_lifecycle::is_namespaces(req.info)
            && !namespace_lifecycle::spec_finalizers(&out).is_empty();
        let finalized = !namespace_held
            && out
                .metadata()
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some()
            && out.meta().finalizers.is_empty()
            && out
                .metadata()
                .and_then(|m| m.get("deletionGracePeriodSeconds"))
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
                == 0;
        if wopts.dry_run {
            return done(out, cur.mod_revision, None);
        }
        if service && !finalized {
            // A type that now needs node ports (or a cluster IP) gets them; what the service
            // already holds is re-reserved as its own.
            let ns = req.namespace.as_deref().unwrap_or_default();
            super::service_allocation::allocate(srv.storage().as_ref(), ns, &mut out.0).await?;
        }
        if finalized {
            // The last finalizer is gone from an object being deleted: delete it now.
            match srv
                .storage()
                .delete(key.clone().into_bytes().into(), Some(cur.mod_revision))
                .await
            {
                Ok(_) => return done(out, cur.mod_revision, None),
                Err(storage::StorageError::Conflict { .. }) if precondition.is_none() => continue,
                Err(e) => return Err(storage_error(req.info, name, e)),
            }
        }
        let (value, slot) = encode_for_storage_with_slot(&mut out)?;
        match srv
            .storage()
            .update(
                key.clone().into_bytes().into(),
                value.clone(),
                cur.mod_revision,
            )
            .await
        {
            Ok(kv) => return done(out, kv.mod_revision, Some((value, slot))),
            Err(storage::StorageError::Conflict { .. }) if precondition.is_none() => continue,
            Err(e) => return Err(storage_error(req.info, name, e)),
        }
    }
    Err(Status::conflict(
        req.info.resource,
        name,
        "too many concurrent writers; please retry",
    ))
}
