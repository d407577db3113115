//! DELETE: preconditions, finalizers, and the namespace lifecycle (Terminating, then its
//! contents are removed, then the namespace itself).

use super::{decode_stored, object_response, storage_error, RequestInfo};
use crate::server::body::Body;
use crate::server::{ApiServer, WriteOptions};
use api::Reason;
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
    query: &str,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("DELETE")?.to_string();
    let opts = DeleteOptions::parse(&body, query)?;
    let pre_uid = opts.pre_uid;
    let pre_rv = opts.pre_rv;
    let dry_run = wopts.dry_run || opts.dry_run;
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
            // Pods are deleted gracefully: marked with the grace period they are given.
            let grace = match req.info.kind {
                "Pod" => pod_grace_period(&obj, opts.grace_period),
                _ => 0,
            };
            let at = api::time::unix_now().saturating_add(i64::try_from(grace).unwrap_or(0));
            obj.set_meta("deletionTimestamp", api::time::format_rfc3339(at));
            obj.set_meta("deletionGracePeriodSeconds", grace);
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

/// The options of a delete, as kube-apiserver reads them: from the body (a DeleteOptions)
/// when there is one, else from the query.
#[derive(Debug, Default, PartialEq)]
struct DeleteOptions {
    /// `gracePeriodSeconds`; a negative one is 1 (as kube-apiserver treats it).
    grace_period: Option<u64>,
    /// `preconditions.uid`.
    pre_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pre_rv: Option<String>,
    /// `dryRun: ["All"]` in the body.
    dry_run: bool,
}

impl DeleteOptions {
    /// Reads `body`, or `query` if the body is empty; then checks them as
    /// kube-apiserver's `ValidateDeleteOptions` does.
    ///
    /// # Errors
    /// 400 for a body that is no DeleteOptions or a value of the wrong type; 422 for a
    /// `propagationPolicy` other than Foreground, Background and Orphan, one given together
    /// with `orphanDependents`, or a `dryRun` other than `All`.
    fn parse(body: &[u8], query: &str) -> Result<DeleteOptions, Status> {
        let mut opts = DeleteOptions::default();
        let (grace, policy, orphan, dry_run) = if body.iter().all(u8::is_ascii_whitespace) {
            let mut grace = None;
            let mut policy = None;
            let mut orphan = None;
            for (k, v) in form_urlencoded::parse(query.as_bytes()) {
                match &*k {
                    "gracePeriodSeconds" if grace.is_none() => {
                        grace = Some(v.trim().parse::<i64>().map_err(|_| {
                            Status::bad_request(format!(
                                "invalid value for gracePeriodSeconds: {v:?}: must be an integer"
                            ))
                        })?);
                    }
                    "propagationPolicy" if policy.is_none() => policy = Some(v.into_owned()),
                    "orphanDependents" if orphan.is_none() => orphan = Some(()),
                    _ => {}
                }
            }
            // dryRun in the query is checked with the other write options.
            (grace, policy, orphan, Vec::new())
        } else {
            let v: Value = serde_json::from_slice(body).map_err(|e| {
                Status::bad_request(format!("the DeleteOptions body could not be decoded: {e}"))
            })?;
            let Some(o) = v.as_object() else {
                return Err(Status::bad_request(
                    "the DeleteOptions body must be a JSON object",
                ));
            };
            let wrong = |field: &str, want: &str| {
                Status::bad_request(format!(
                    "the DeleteOptions body could not be decoded: {field} must be {want}"
                ))
            };
            let present = |k: &str| o.get(k).filter(|v| !v.is_null());
            let grace = match present("gracePeriodSeconds") {
                None => None,
                Some(g) => Some(
                    g.as_i64()
                        .ok_or_else(|| wrong("gracePeriodSeconds", "an integer"))?,
                ),
            };
            let policy = match present("propagationPolicy") {
                None => None,
                Some(p) => Some(
                    p.as_str()
                        .ok_or_else(|| wrong("propagationPolicy", "a string"))?
                        .to_string(),
                ),
            };
            let orphan = match present("orphanDependents") {
                None => None,
                Some(b) => Some(
                    b.as_bool()
                        .map(|_| ())
                        .ok_or_else(|| wrong("orphanDependents", "a boolean"))?,
                ),
            };
            let dry_run = match present("dryRun") {
                None => Vec::new(),
                Some(d) => d
                    .as_array()
                    .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_string)).collect())
                    .ok_or_else(|| wrong("dryRun", "a list of strings"))?,
            };
            let precondition = |k: &str| {
                o.get("preconditions")
                    .and_then(|p| p.get(k))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            opts.pre_uid = precondition("uid");
            opts.pre_rv = precondition("resourceVersion");
            (grace, policy, orphan, dry_run)
        };
        let mut errs = Vec::new();
        if let Some(p) = &policy {
            if orphan.is_some() {
                errs.push((
                    "FieldValueInvalid",
                    format!(
                        "propagationPolicy: Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
                    ),
                ));
            }
            if !matches!(p.as_str(), "Foreground" | "Background" | "Orphan") {
                errs.push((
                    "FieldValueNotSupported",
                    format!(
                        "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                    ),
                ));
            }
        }
        if dry_run.iter().any(|d| d != "All") {
            errs.push((
                "FieldValueNotSupported",
                format!("dryRun: Unsupported value: {dry_run:?}: supported values: \"All\""),
            ));
        }
        if !errs.is_empty() {
            let message = errs
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let mut s = Status::new(
                Reason::Invalid,
                format!("DeleteOptions.meta.k8s.io \"\" is invalid: [{message}]"),
            )
            .with_details("DeleteOptions", "")
            .with_group("meta.k8s.io");
            if errs.len() == 1 {
                s.message = format!("DeleteOptions.meta.k8s.io \"\" is invalid: {message}");
            }
            for (reason, m) in &errs {
                let field = m.split(':').next().unwrap_or("");
                let detail = m[field.len()..].trim_start_matches(':').trim();
                s = s.with_cause(reason, field, detail);
            }
            return Err(s);
        }
        // Negative values are treated as 1 s on the delete path, as kube-apiserver does.
        opts.grace_period = grace.map(|g| u64::try_from(g).unwrap_or(1));
        opts.dry_run = !dry_run.is_empty();
        Ok(opts)
    }
}

/// The grace period a pod is marked for deletion with, as kube-apiserver's pod strategy
/// gives it: the one asked for, else the pod's `terminationGracePeriodSeconds` (negative:
/// 1); none (0) for a pod not scheduled to a node or already finished.
fn pod_grace_period(pod: &api::Object, asked: Option<u64>) -> u64 {
    let scheduled = pod
        .field_str("spec.nodeName")
        .is_some_and(|n| !n.is_empty());
    let phase = pod.field_str("status.phase");
    let finished = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
    if !scheduled || finished {
        return 0;
    }
    asked.unwrap_or_else(|| {
        pod.0
            .get("spec")
            .and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .map_or(0, |t| u64::try_from(t).unwrap_or(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_options_from_the_body_or_else_the_query() {
        let grace = |body: &str, query: &str| {
            DeleteOptions::parse(body.as_bytes(), query).map(|o| o.grace_period)
        };
        assert_eq!(grace("", "gracePeriodSeconds=30"), Ok(Some(30)));
        assert_eq!(grace("", "gracePeriodSeconds=-5"), Ok(Some(1)));
        assert_eq!(grace("", "gracePeriodSeconds=0"), Ok(Some(0)));
        assert_eq!(grace(r#"{"gracePeriodSeconds": -5}"#, ""), Ok(Some(1)));
        assert_eq!(grace(r#"{"gracePeriodSeconds": null}"#, ""), Ok(None));
        // With a body, the query is not read.
        assert_eq!(
            grace(r#"{"kind": "DeleteOptions"}"#, "gracePeriodSeconds=7"),
            Ok(None)
        );
        for (body, query) in [
            ("", "gracePeriodSeconds=abc"),
            ("", "gracePeriodSeconds=1.5"),
            (r#"{"gracePeriodSeconds": "5"}"#, ""),
            (r#"{"gracePeriodSeconds": 1.5}"#, ""),
            (r#"{"orphanDependents": "yes"}"#, ""),
            ("[]", ""),
        ] {
            assert_eq!(
                grace(body, query).map_err(|s| s.code()),
                Err(400),
                "{body} {query}"
            );
        }
        for (body, query) in [
            ("", "propagationPolicy=Sideways"),
            ("", "propagationPolicy=Orphan&orphanDependents=false"),
            (
                r#"{"propagationPolicy": "Background", "orphanDependents": true}"#,
                "",
            ),
            (r#"{"dryRun": ["Some"]}"#, ""),
        ] {
            let s = DeleteOptions::parse(body.as_bytes(), query).unwrap_err();
            assert_eq!(s.code(), 422, "{body} {query}: {}", s.message);
            assert!(
                s.message
                    .starts_with("DeleteOptions.meta.k8s.io \"\" is invalid: "),
                "{}",
                s.message
            );
        }
        assert!(
            DeleteOptions::parse(br#"{"dryRun": ["All"]}"#, "")
                .unwrap()
                .dry_run
        );
    }
}
