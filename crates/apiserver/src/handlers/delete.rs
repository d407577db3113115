//! DELETE: preconditions, finalizers, graceful deletion of pods, and the first step of a
//! namespace's deletion (it turns Terminating; the namespace controller removes its content
//! and then its `kubernetes` finalizer — see [`crate::registry::namespace_lifecycle`]).
//!
//! Pods are deleted gracefully, as kube-apiserver's pod strategy has it: a pod bound to a
//! node and not finished is only marked — `deletionTimestamp` (now plus the grace period)
//! and `deletionGracePeriodSeconds` (the request's `gracePeriodSeconds`, else the pod's
//! `terminationGracePeriodSeconds`, 30 by default) — and stays, Terminating, until its node
//! agent deletes it with a grace period of 0. A later delete may only shorten the grace
//! period. An unbound or finished pod, or a delete at grace 0, goes at once. (Where
//! kube-apiserver first stores the pod with a zero grace period and then deletes it, the pod
//! is deleted in one write here: watchers see DELETED without a MODIFIED before it.)

use super::state::{ApiServer, WriteOptions};
use super::{decode_stored, object_response, storage_error, RequestInfo};
use crate::encoding::body::Body;
use crate::registry::apiextensions::CLEANUP_FINALIZER;
use crate::registry::namespace_lifecycle::{self, DeletePlan as NamespacePlan};
use crate::registry::ResourceInfo;
use api::object::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use api::{Object, Reason, Status};
use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

/// Handles `DELETE .../{name}`. Answers 200 with the object (its last state, or the state
/// marked for deletion when finalizers or a grace period keep it).
pub async fn delete(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    query: &str,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("DELETE")?.to_string();
    let opts = DeleteOptions::parse(&body, query)?;
    let dry_run = wopts.dry_run || opts.dry_run;
    if crate::admission::validating_admission_policy::has_bindings(srv) {
        let key = req.storage_key(&name);
        if let Some(kv) = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, &name, e))?
        {
            let old = decode_stored(req.info, &kv)?;
            crate::admission::check_policies(
                srv,
                req,
                crate::admission::validating_admission_policy::Operation::Delete,
                None,
                Some(&old),
                wopts,
            )
            .await?;
        }
    }
    let (mut obj, rv) = delete_object(srv, req, &name, &opts, dry_run).await?;
    Ok(object_response(req.info, 200, &mut obj, rv))
}

/// What a delete does to the object it found.
#[derive(Debug)]
enum Plan {
    /// Nothing: its deletion is already under way as asked.
    Keep,
    /// Store it marked for deletion (this state), and keep it.
    Mark(Object),
    /// Remove it now.
    Delete,
}

/// Deletes object `name` of `req`'s resource as `opts` say (or, with `dry_run`, says what
/// would happen): the object as it is left (marked, or its last state when removed) and its
/// resourceVersion. Lost races are retried unless a resourceVersion precondition was given.
///
/// # Errors
/// 404 if there is no such object, 409 for a failed precondition, storage failures.
pub async fn delete_object(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    opts: &DeleteOptions,
    dry_run: bool,
) -> Result<(Object, u64), Status> {
    let is_namespace = namespace_lifecycle::is_namespaces(req.info);
    if is_namespace {
        namespace_lifecycle::check_deletable(req.info, name)?;
    }
    let key = req.storage_key(name);
    for _ in 0..16 {
        let cur = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, name, e))?
            .ok_or_else(|| Status::not_found(req.info.resource, name).with_group(req.info.group))?;
        let obj = decode_stored(req.info, &cur)?;
        if let Some(uid) = &opts.pre_uid {
            if uid != obj.uid() {
                return Err(Status::conflict(
                    req.info.resource,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        obj.uid()
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.pre_rv {
            if *rv != cur.mod_revision.to_string() {
                return Err(Status::conflict(req.info.resource, name, &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", cur.mod_revision
                )));
            }
        }
        let retry = opts.pre_rv.is_none();
        let now = api::time::unix_now();
        let ns_plan = is_namespace.then(|| {
            namespace_lifecycle::plan_delete(
                &obj,
                opts.orphan_dependents,
                opts.propagation.as_deref(),
                now,
            )
        });
        let (obj, planned) = match ns_plan {
            Some(NamespacePlan::Mark(marked)) => (obj, Plan::Mark(marked)),
            Some(NamespacePlan::Keep) => (obj, Plan::Keep),
            Some(NamespacePlan::Generic) | None => {
                // The garbage collector's finalizers first: they may hold the object.
                let (obj, finalizers_changed) = match gc_finalizers(req.info, &obj, opts) {
                    Some(finalizers) => {
                        let mut changed = obj;
                        changed.set_meta("finalizers", json!(finalizers));
                        (changed, true)
                    }
                    None => (obj, false),
                };
                let planned = match plan(req.info, &obj, opts.grace_period, now) {
                    // Already being deleted, but with other dependents' handling asked for.
                    Plan::Keep if finalizers_changed => Plan::Mark(obj.clone()),
                    p => p,
                };
                (obj, planned)
            }
        };
        match planned {
            Plan::Keep => return Ok((obj, cur.mod_revision)),
            Plan::Mark(marked) if dry_run => return Ok((marked, cur.mod_revision)),
            Plan::Delete if dry_run => return Ok((obj, cur.mod_revision)),
            Plan::Mark(mut marked) => {
                let value = super::encode_for_storage(&mut marked)?;
                match srv
                    .storage()
                    .update(key.clone().into_bytes().into(), value, cur.mod_revision)
                    .await
                {
                    Ok(kv) => return Ok((marked, kv.mod_revision)),
                    Err(storage::StorageError::Conflict { .. }) if retry => continue,
                    Err(e) => return Err(storage_error(req.info, name, e)),
                }
            }
            Plan::Delete => {
                match srv
                    .storage()
                    .delete(key.clone().into_bytes().into(), Some(cur.mod_revision))
                    .await
                {
                    Ok(_) => {
                        if req.info.kind == "Service" {
                            let ns = req.namespace.as_deref().unwrap_or_default();
                            let held = Value::Object(obj.0.clone());
                            super::service_allocation::release(srv.storage().as_ref(), ns, &held)
                                .await;
                        }
                        return Ok((obj, cur.mod_revision));
                    }
                    Err(storage::StorageError::Conflict { .. }) if retry => continue,
                    Err(e) => return Err(storage_error(req.info, name, e)),
                }
            }
        }
    }
    Err(Status::conflict(
        req.info.resource,
        name,
        "too many concurrent writers; please retry",
    ))
}

/// Whether a kind orphans its dependents when a delete says nothing: only core/v1
/// ReplicationControllers, kept so by Kubernetes for compatibility.
fn orphans_by_default(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.kind == "ReplicationController"
}

/// The finalizers `obj` should carry once deleted with `opts`, as kube-apiserver's store
/// decides them for the garbage collector: an explicit `orphanDependents` or
/// `propagationPolicy` wins, then a garbage-collection finalizer the object already has,
/// then the kind's default. `None` when they stay as they are.
fn gc_finalizers(info: &ResourceInfo, obj: &Object, opts: &DeleteOptions) -> Option<Vec<String>> {
    let current = obj.meta().finalizers;
    let has = |f: &str| current.iter().any(|c| c == f);
    let orphan = match (opts.orphan_dependents, opts.propagation.as_deref()) {
        (Some(o), _) => o,
        (None, Some(p)) => p == "Orphan",
        (None, None) if has(ORPHAN_FINALIZER) => true,
        (None, None) if has(FOREGROUND_FINALIZER) => false,
        (None, None) => orphans_by_default(info),
    };
    let foreground = match (opts.orphan_dependents, opts.propagation.as_deref()) {
        (Some(_), _) => false,
        (None, Some(p)) => p == "Foreground",
        (None, None) => has(FOREGROUND_FINALIZER),
    };
    let mut wanted: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        wanted.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        wanted.push(FOREGROUND_FINALIZER.into());
    }
    // A CRD goes only once its objects are gone: the CRD controller deletes them, then
    // removes this finalizer.
    let crd = info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions";
    let marked = obj
        .metadata()
        .is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()));
    if crd && !marked && !wanted.iter().any(|f| f == CLEANUP_FINALIZER) {
        wanted.push(CLEANUP_FINALIZER.into());
    }
    (wanted != current).then_some(wanted)
}

/// What a delete asking for grace period `asked` does to `obj` at Unix time `now`.
fn plan(info: &ResourceInfo, obj: &Object, asked: Option<u64>, now: i64) -> Plan {
    let meta = obj.metadata();
    let marked_at = meta
        .and_then(|m| m.get("deletionTimestamp"))
        .filter(|t| !t.is_null());
    let held = !obj.meta().finalizers.is_empty();
    if !(info.group.is_empty() && info.kind == "Pod") {
        return match (marked_at, held) {
            (_, false) => Plan::Delete,
            (Some(_), true) => Plan::Keep,
            (None, true) => Plan::Mark(mark(obj, now, 0, true)),
        };
    }
    let Some(at) = marked_at else {
        let grace = pod_grace_period(obj, asked);
        if grace == 0 && !held {
            return Plan::Delete;
        }
        return Plan::Mark(mark(obj, now, grace, true));
    };
    // Already marked: a grace period may only be shortened.
    let current = meta
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let Some(asked) = asked.filter(|&a| current > 0 && i64::try_from(a).is_ok_and(|a| a < current))
    else {
        return if current <= 0 && !held {
            Plan::Delete
        } else {
            Plan::Keep
        };
    };
    let mut period = i64::try_from(asked).unwrap_or(0);
    let at = at
        .as_str()
        .and_then(api::time::parse_rfc3339)
        .unwrap_or(now);
    let mut deadline = at - current + period;
    if deadline < now {
        deadline = now;
        if period != 0 {
            // The grace period is over already: the shortest that is still graceful.
            period = 1;
        }
    }
    if period == 0 && !held {
        return Plan::Delete;
    }
    let mut marked = obj.clone();
    marked.set_meta("deletionTimestamp", api::time::format_rfc3339(deadline));
    marked.set_meta("deletionGracePeriodSeconds", period);
    Plan::Mark(marked)
}

/// `obj` marked for deletion `grace` seconds after `now`; with `bump`, its generation (if it
/// has one) goes up by one, as Kubernetes does when an object starts being deleted.
fn mark(obj: &Object, now: i64, grace: u64, bump: bool) -> Object {
    let mut marked = obj.clone();
    let at = now.saturating_add(i64::try_from(grace).unwrap_or(i64::MAX));
    marked.set_meta("deletionTimestamp", api::time::format_rfc3339(at));
    marked.set_meta("deletionGracePeriodSeconds", grace);
    let generation = obj.generation();
    if bump && generation > 0 {
        marked.set_meta("generation", generation.saturating_add(1));
    }
    marked
}

/// The options of a delete, as kube-apiserver reads them: from the body (a DeleteOptions)
/// when there is one, else from the query.
#[derive(Debug, Default, PartialEq)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`; a negative one is 1 (as kube-apiserver treats it).
    pub grace_period: Option<u64>,
    /// `preconditions.uid`.
    pub pre_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub pre_rv: Option<String>,
    /// `dryRun: ["All"]` in the body.
    pub dry_run: bool,
    /// `propagationPolicy`: `Foreground`, `Background` or `Orphan`.
    pub propagation: Option<String>,
    /// `orphanDependents` (deprecated in favour of `propagationPolicy`).
    pub orphan_dependents: Option<bool>,
}

impl DeleteOptions {
    /// Reads `body`, or `query` if the body is empty; then checks them as
    /// kube-apiserver's `ValidateDeleteOptions` does.
    ///
    /// # Errors
    /// 400 for a body that is no DeleteOptions or a value of the wrong type; 422 for a
    /// `propagationPolicy` other than Foreground, Background and Orphan, one given together
    /// with `orphanDependents`, or a `dryRun` other than `All`.
    pub fn parse(body: &[u8], query: &str) -> Result<DeleteOptions, Status> {
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
                    "orphanDependents" if orphan.is_none() => {
                        // As apimachinery reads query booleans: false only when said so.
                        orphan = Some(!matches!(v.trim(), "false" | "0"))
                    }
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
        opts.propagation = policy;
        opts.orphan_dependents = orphan;
        Ok(opts)
    }
}

/// The grace period a pod is marked for deletion with, as kube-apiserver's pod strategy
/// gives it: the one asked for, else the pod's `terminationGracePeriodSeconds` (negative:
/// 1; absent: 30, its default); none (0) for a pod not scheduled to a node or already
/// finished.
fn pod_grace_period(pod: &Object, asked: Option<u64>) -> u64 {
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
            .map_or(30, |t| u64::try_from(t).unwrap_or(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;

    const NOW: i64 = 1_700_000_000;

    fn with_finalizers(f: &[&str]) -> Object {
        Object::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "r", "finalizers": f}}))
        .unwrap()
    }

    fn opts(policy: Option<&str>, orphan: Option<bool>) -> DeleteOptions {
        DeleteOptions {
            propagation: policy.map(str::to_string),
            orphan_dependents: orphan,
            ..Default::default()
        }
    }

    #[test]
    fn propagation_sets_the_garbage_collector_finalizers() {
        let rs = find("apps", "v1", "replicasets").unwrap();
        let rc = find("", "v1", "replicationcontrollers").unwrap();
        let none = with_finalizers(&[]);
        assert_eq!(gc_finalizers(rs, &none, &opts(None, None)), None);
        assert_eq!(
            gc_finalizers(rs, &none, &opts(Some("Background"), None)),
            None
        );
        assert_eq!(
            gc_finalizers(rs, &none, &opts(Some("Orphan"), None)),
            Some(vec!["orphan".to_string()])
        );
        assert_eq!(
            gc_finalizers(rs, &none, &opts(Some("Foreground"), None)),
            Some(vec!["foregroundDeletion".to_string()])
        );
        assert_eq!(
            gc_finalizers(rs, &none, &opts(None, Some(true))),
            Some(vec!["orphan".to_string()])
        );
        assert_eq!(gc_finalizers(rs, &none, &opts(None, Some(false))), None);
        // ReplicationControllers orphan unless told otherwise.
        assert_eq!(
            gc_finalizers(rc, &none, &opts(None, None)),
            Some(vec!["orphan".to_string()])
        );
        assert_eq!(
            gc_finalizers(rc, &none, &opts(Some("Background"), None)),
            None
        );
        // An explicit policy replaces the other one; other finalizers stay, first.
        let held = with_finalizers(&["x/y", "orphan"]);
        assert_eq!(
            gc_finalizers(rs, &held, &opts(Some("Foreground"), None)),
            Some(vec!["x/y".to_string(), "foregroundDeletion".to_string()])
        );
        assert_eq!(
            gc_finalizers(rs, &held, &opts(Some("Background"), None)),
            Some(vec!["x/y".to_string()])
        );
        // Without one, what the object has stands.
        assert_eq!(gc_finalizers(rs, &held, &opts(None, None)), None);
    }

    fn pod(v: Value) -> Object {
        let mut o = Object::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Running"}}))
        .unwrap();
        if let Value::Object(extra) = v {
            for (k, v) in extra {
                match (o.0.get_mut(&k), v) {
                    (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
                    (_, v) => {
                        o.0.insert(k, v);
                    }
                }
            }
        }
        o
    }

    fn marked(p: &Plan) -> (i64, i64) {
        match p {
            Plan::Mark(o) => (
                o.field_str("metadata.deletionTimestamp")
                    .and_then(|t| api::time::parse_rfc3339(&t))
                    .unwrap()
                    - NOW,
                o.metadata().unwrap()["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap(),
            ),
            other => panic!("not marked: {other:?}"),
        }
    }

    #[test]
    fn pods_are_deleted_gracefully_as_kube_apiserver_does() {
        let pods = find("", "v1", "pods").unwrap();
        // Default 30 s (also when the spec lacks it), the pod's own, or the request's.
        assert_eq!(marked(&plan(pods, &pod(json!({})), None, NOW)), (30, 30));
        let own = pod(json!({"spec": {"terminationGracePeriodSeconds": 7}}));
        assert_eq!(marked(&plan(pods, &own, None, NOW)), (7, 7));
        assert_eq!(marked(&plan(pods, &own, Some(3), NOW)), (3, 3));
        let negative = pod(json!({"spec": {"terminationGracePeriodSeconds": -4}}));
        assert_eq!(marked(&plan(pods, &negative, None, NOW)), (1, 1));
        // At once: unbound, finished, or asked for 0.
        for p in [
            pod(json!({"spec": {"nodeName": ""}})),
            pod(json!({"status": {"phase": "Succeeded"}})),
            pod(json!({"status": {"phase": "Failed"}})),
        ] {
            assert!(
                matches!(plan(pods, &p, Some(30), NOW), Plan::Delete),
                "{p:?}"
            );
        }
        assert!(matches!(
            plan(pods, &pod(json!({})), Some(0), NOW),
            Plan::Delete
        ));
        // Held by a finalizer, even at 0 it is only marked.
        let held = pod(json!({"metadata": {"finalizers": ["x/y"], "generation": 3}}));
        let Plan::Mark(m) = plan(pods, &held, Some(0), NOW) else {
            panic!()
        };
        assert_eq!(m.generation(), 4, "starting to delete bumps the generation");
        assert_eq!(m.metadata().unwrap()["deletionGracePeriodSeconds"], 0);
    }

    #[test]
    fn a_marked_pod_may_only_have_its_grace_period_shortened() {
        let pods = find("", "v1", "pods").unwrap();
        let at = api::time::format_rfc3339(NOW + 20);
        // Marked 10 s ago with 30 s: 20 s left.
        let terminating =
            pod(json!({"metadata": {"deletionTimestamp": at, "deletionGracePeriodSeconds": 30}}));
        assert!(matches!(plan(pods, &terminating, None, NOW), Plan::Keep));
        assert!(matches!(
            plan(pods, &terminating, Some(30), NOW),
            Plan::Keep
        ));
        assert!(matches!(
            plan(pods, &terminating, Some(60), NOW),
            Plan::Keep
        ));
        // 15 s from when it was marked: 5 s from now.
        assert_eq!(marked(&plan(pods, &terminating, Some(15), NOW)), (5, 15));
        // 5 s from when it was marked is over already: now, at the shortest graceful period.
        assert_eq!(marked(&plan(pods, &terminating, Some(5), NOW)), (0, 1));
        assert!(matches!(
            plan(pods, &terminating, Some(0), NOW),
            Plan::Delete
        ));
        let mut held = terminating.clone();
        held.set_meta("finalizers", json!(["x/y"]));
        assert_eq!(marked(&plan(pods, &held, Some(0), NOW)), (0, 0));
    }

    #[test]
    fn other_kinds_wait_for_finalizers_only() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = Object::from_value(json!({"metadata": {"name": "c"}})).unwrap();
        assert!(matches!(plan(cms, &cm, Some(30), NOW), Plan::Delete));
        let mut held = cm.clone();
        held.set_meta("finalizers", json!(["x/y"]));
        assert_eq!(marked(&plan(cms, &held, Some(30), NOW)), (0, 0));
        held.set_meta("deletionTimestamp", api::time::format_rfc3339(NOW));
        assert!(matches!(plan(cms, &held, None, NOW), Plan::Keep));
    }

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
