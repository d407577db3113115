//! PATCH: merge, JSON and strategic-merge patches applied to the current object, then the
//! same compare-and-swap path as update; server-side apply (`application/apply-patch+yaml`)
//! is in [`super::apply`].

use super::state::{ApiServer, WriteOptions};
use super::update::{parse_precondition, write_with_retry, Tracking};
use super::RequestInfo;
use crate::encoding::body::Body;
use api::patch::{apply_patch_to, PatchType};
use api::{Object, Status};
use bytes::Bytes;
use http::Response;

/// The media type of a server-side apply request.
pub const APPLY_PATCH_CONTENT_TYPE: &str = "application/apply-patch+yaml";

/// Handles `PATCH .../{name}` and `PATCH .../{name}/status`.
pub async fn patch(
    srv: &ApiServer,
    req: &RequestInfo,
    content_type: &str,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("PATCH")?.to_string();
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(APPLY_PATCH_CONTENT_TYPE) {
        return super::apply::apply(srv, req, &name, body, wopts).await;
    }
    let patch_type = PatchType::from_content_type(content_type)
        // Custom objects have no patch strategies to merge by, as in Kubernetes.
        .filter(|t| !(req.info.custom.is_some() && *t == PatchType::StrategicMerge))
        .ok_or_else(|| {
            let [json, merge, strategic] = PatchType::ALL.map(PatchType::content_type);
            let accepted: Vec<&str> = if req.info.custom.is_some() {
                vec![json, merge, APPLY_PATCH_CONTENT_TYPE]
            } else {
                vec![json, merge, strategic, APPLY_PATCH_CONTENT_TYPE]
            };
            Status::unsupported_media_type(content_type, &accepted)
        })?;
    if wopts.force.is_some() {
        return Err(Status::new(
            api::Reason::Invalid,
            "force: Forbidden: may not be specified for non-apply patch",
        )
        .with_cause(
            "FieldValueForbidden",
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    let status_only = req.subresource.as_deref() == Some("status");
    let info = req.info;
    // A resourceVersion inside the patch is a precondition, as in kube-apiserver.
    let precondition = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("metadata")?
                .get("resourceVersion")?
                .as_str()
                .map(str::to_string)
        });
    let precondition = match precondition {
        Some(rv) => parse_precondition(&rv)?,
        None => None,
    };
    let hint = api::patch::PatchKindHint::new(info.group, info.kind);
    let tracking = Tracking::Update;
    write_with_retry(
        srv,
        req,
        &name,
        precondition,
        status_only,
        wopts,
        tracking,
        |old| {
            let patched = apply_patch_to(hint, old.clone().into_value(), &body, patch_type)
                .map_err(|e| match e.reason() {
                    api::Reason::Invalid => {
                        Status::invalid(info.kind, &name, "patch", &e.to_string())
                    }
                    _ => e.to_status(),
                })?;
            let mut obj = Object::from_value(patched)
                .ok_or_else(|| Status::bad_request("the patched object is not a JSON object"))?;
            wopts.check_fields(info, &mut obj)?;
            if obj.name() != name {
                return Err(Status::bad_request(
                    "metadata.name cannot be changed by a patch",
                ));
            }
            check_identity(req, old, &obj)?;
            obj.remove_meta("resourceVersion");
            Ok(obj)
        },
    )
    .await
}

/// What kube-apiserver refuses of a patched object's identity: a namespace other than the
/// URL's (400; a cluster-scoped object's namespace is dropped, and a removed one is the
/// URL's), and a uid other than the object's (422, the field is immutable; a removed one is
/// the object's).
fn check_identity(req: &RequestInfo, old: &Object, patched: &Object) -> Result<(), Status> {
    let ns = patched.namespace();
    if req.info.namespaced && !ns.is_empty() && ns != req.namespace.as_deref().unwrap_or("") {
        return Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let uid = patched.uid();
    if !uid.is_empty() && uid != old.uid() {
        return Err(Status::invalid(
            req.info.kind,
            patched.name(),
            "metadata.uid",
            &format!("Invalid value: {uid:?}: field is immutable"),
        ));
    }
    Ok(())
}
