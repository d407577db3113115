//! `POST .../pods/{name}/eviction`: a `policy/v1` (or `v1beta1`) Eviction deletes a pod
//! unless that would break its PodDisruptionBudget, as kube-apiserver's `EvictionREST` does.
//!
//! - A pod that is finished, still `Pending`, or already being deleted is deleted at once:
//!   it disrupts nothing.
//! - Otherwise the budgets of the pod's namespace whose selector matches it are consulted.
//!   None: the pod is deleted. More than one: 500, the eviction API does not support that.
//!   One: its status must say it is current (`observedGeneration` ≥ `generation`, else 429
//!   "still being processed") and allow a disruption (`disruptionsAllowed` > 0, else 429
//!   naming the healthy pods it needs). The budget's `disruptionsAllowed` is then decreased
//!   and the pod recorded in its `disruptedPods`, and the pod deleted. An unready pod is
//!   deleted without using up the budget if the budget says `AlwaysAllow` for unhealthy pods,
//!   or (the default, `IfHealthyBudget`) when the budget has its healthy pods.
//! - Before the delete the pod gets a `DisruptionTarget` condition
//!   (`EvictionByEvictionAPI`). The delete is an ordinary one, with the Eviction's
//!   `deleteOptions`: a bound, running pod is deleted gracefully (Terminating).
//!
//! Answers 201 with a `Success` Status, or the Status of the refusal (429 with a
//! `DisruptionBudget` cause; nothing is written then).

use super::delete::{delete_object, DeleteOptions};
use super::state::{ApiServer, WriteOptions};
use super::update::{write_object_with_retry, Tracking};
use super::{created_status, decode_stored, decode_typed, storage_error, RequestInfo};
use crate::encoding::body::Body;
use crate::registry::resources;
use api::labels::LabelSelector;
use api::{Object, Reason, Status};
use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

/// More recorded disruptions than this and the budget's controller is behind: refuse.
const MAX_DISRUPTED_PODS: usize = 2000;

/// Handles an Eviction `body` posted for `req`'s pod.
pub async fn evict(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let eviction = decode_typed::<k8s_openapi::api::policy::v1::Eviction>(
        &body,
        &["policy/v1", "policy/v1beta1"],
        "Eviction",
    )?;
    let meta = eviction.get("metadata").cloned().unwrap_or(Value::Null);
    let meta_str = |k: &str| {
        meta.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = req.require_name("POST")?.to_string();
    if meta_str("name") != name {
        return Err(Status::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let ns = req.namespace.clone().unwrap_or_default();
    let body_ns = meta_str("namespace");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let options = match eviction.get("deleteOptions").filter(|o| !o.is_null()) {
        Some(o) => DeleteOptions::parse(&serde_json::to_vec(o).unwrap_or_default(), "")?,
        None => DeleteOptions::default(),
    };
    let dry_run = wopts.dry_run || options.dry_run;
    let pods_key = req.storage_key(&name);
    for _ in 0..16 {
        let kv = srv
            .storage()
            .get(pods_key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, &name, e))?
            .ok_or_else(|| Status::not_found(req.info.resource, &name))?;
        let pod = decode_stored(req.info, &kv)?;
        let pod_rv = kv.mod_revision.to_string();
        let phase = pod.field_str("status.phase").unwrap_or_default();
        let deleting = pod
            .metadata()
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null());
        let finished = matches!(&*phase, "Succeeded" | "Failed");
        if finished || phase == "Pending" || deleting {
            let mut opts = clone_options(&options);
            // A pending pod might become ready meanwhile: delete the one looked at.
            if !finished && !deleting && opts.pre_rv.is_none() {
                opts.pre_rv = Some(pod_rv.clone());
            }
            match disrupt_and_delete(srv, req, &name, opts, dry_run).await {
                Err(s) if s.reason == Reason::Conflict && options.pre_rv.is_none() => continue,
                other => return other.map(|()| created_status()),
            }
        }
        let budgets = budgets_of(srv, &ns, &pod).await?;
        let budget = match budgets.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            _ => {
                return Err(Status::new(
                    Reason::InternalError,
                    "This pod has more than one PodDisruptionBudget, which the eviction \
                     subresource does not support.",
                ))
            }
        };
        let mut opts = clone_options(&options);
        let mut spared_by = None;
        if let Some(pdb) = budget {
            let unhealthy = !pod_ready(&pod);
            let spare = unhealthy && {
                let status_int = |k: &str| {
                    pdb.get("status")
                        .and_then(|s| s.get(k))
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                };
                let policy = pdb
                    .get("spec")
                    .and_then(|s| s.get("unhealthyPodEvictionPolicy"))
                    .and_then(Value::as_str)
                    .unwrap_or("IfHealthyBudget");
                policy == "AlwaysAllow"
                    || (status_int("currentHealthy") >= status_int("desiredHealthy")
                        && status_int("desiredHealthy") > 0)
            };
            if spare {
                // It does not count towards the budget; delete it as it was looked at.
                if opts.pre_rv.is_none() {
                    opts.pre_rv = Some(pod_rv.clone());
                    spared_by = Some(pdb.name().to_string());
                }
            } else {
                take_from_budget(srv, &ns, &name, &pdb, dry_run).await?;
            }
        }
        return match disrupt_and_delete(srv, req, &name, opts, dry_run).await {
            // The unready pod changed meanwhile (it may be ready now): let the client retry.
            Err(s) if s.reason == Reason::Conflict && spared_by.is_some() => {
                Err(budget_busy(spared_by.as_deref().unwrap_or_default()))
            }
            other => other.map(|()| created_status()),
        };
    }
    Err(Status::conflict(
        "pods",
        &name,
        "too many concurrent writers; please retry",
    ))
}

fn clone_options(o: &DeleteOptions) -> DeleteOptions {
    DeleteOptions {
        grace_period: o.grace_period,
        pre_uid: o.pre_uid.clone(),
        pre_rv: o.pre_rv.clone(),
        dry_run: o.dry_run,
        propagation: o.propagation.clone(),
        orphan_dependents: o.orphan_dependents,
    }
}

/// Whether the pod's `Ready` condition is `True` (Kubernetes' notion of a healthy pod here).
fn pod_ready(pod: &Object) -> bool {
    pod.get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True")))
}

/// The PodDisruptionBudgets of namespace `ns` whose selector matches `pod`'s labels (a
/// budget without a selector, or with one that does not parse, matches nothing).
async fn budgets_of(srv: &ApiServer, ns: &str, pod: &Object) -> Result<Vec<Object>, Status> {
    let Some(info) = resources::find("policy", "v1", "poddisruptionbudgets") else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}{ns}/", info.key_prefix());
    let listed = srv
        .storage()
        .range(storage::RangeRequest::prefix(prefix.into_bytes()))
        .await
        .map_err(|e| storage_error(info, "", e))?;
    let empty = serde_json::Map::new();
    let labels = pod.labels().unwrap_or(&empty);
    let mut out = Vec::new();
    for kv in &listed.kvs {
        let pdb = decode_stored(info, kv)?;
        let selector = pdb
            .get("spec")
            .and_then(|s| s.get("selector"))
            .unwrap_or(&Value::Null);
        if let Ok(Some(sel)) = LabelSelector::from_object(selector) {
            if sel.matches(labels) {
                out.push(pdb);
            }
        }
    }
    Ok(out)
}

/// The 429 of a budget whose status is not current (or whose pod changed under us).
fn budget_busy(pdb: &str) -> Status {
    let mut s = Status::new(
        Reason::TooManyRequests,
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    .with_cause(
        "DisruptionBudget",
        "",
        &format!("The disruption budget {pdb} is still being processed by the server."),
    );
    s.retry_after = Some(10);
    s
}

/// Checks that budget `pdb` allows one more disruption and records it (unless `dry_run`):
/// `disruptionsAllowed` down by one, the pod in `disruptedPods`, through the budget's status
/// with its resourceVersion as precondition.
async fn take_from_budget(
    srv: &ApiServer,
    ns: &str,
    pod: &str,
    pdb: &Object,
    dry_run: bool,
) -> Result<(), Status> {
    let Some(info) = resources::find("policy", "v1", "poddisruptionbudgets") else {
        return Ok(());
    };
    let pdb_req = RequestInfo {
        info,
        namespace: Some(ns.to_string()),
        name: Some(pdb.name().to_string()),
        subresource: Some("status".into()),
        legacy_watch: false,
    };
    let mut current = pdb.clone();
    for _ in 0..20 {
        let checked = check_budget(&current, pod, &api::time::now_rfc3339())?;
        if dry_run {
            return Ok(());
        }
        let precondition = current.resource_version().parse().ok();
        let wrote = write_object_with_retry(
            srv,
            &pdb_req,
            current.name(),
            precondition,
            true,
            &WriteOptions::default(),
            Tracking::ByMutation,
            |_| Ok(checked.clone()),
        )
        .await;
        match wrote {
            Ok(_) => return Ok(()),
            Err(s) if s.reason == Reason::Conflict => {
                let key = pdb_req.storage_key(current.name());
                let kv = srv
                    .storage()
                    .get(key.as_bytes())
                    .await
                    .map_err(|e| storage_error(info, current.name(), e))?
                    .ok_or_else(|| Status::not_found(info.resource, current.name()))?;
                current = decode_stored(info, &kv)?;
            }
            Err(s) => return Err(s),
        }
    }
    Err(Status::new(
        Reason::Timeout,
        format!(
            "couldn't update PodDisruptionBudget {:?} due to conflicts",
            pdb.name()
        ),
    ))
}

/// Budget `pdb` with one disruption (of `pod`, at `now`) taken, or the refusal.
fn check_budget(pdb: &Object, pod: &str, now: &str) -> Result<Object, Status> {
    let status = pdb.get("status").cloned().unwrap_or_else(|| json!({}));
    let int = |k: &str| status.get(k).and_then(Value::as_i64).unwrap_or(0);
    let name = pdb.name();
    if int("observedGeneration") < pdb.generation() {
        return Err(budget_busy(name));
    }
    let allowed = int("disruptionsAllowed");
    let forbidden = |why: &str| {
        Status::new(
            Reason::Forbidden,
            format!("poddisruptionbudget.policy {name:?} is forbidden: {why}"),
        )
        .with_details("poddisruptionbudget", name)
        .with_group("policy")
    };
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = status
        .get("disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, serde_json::Map::len);
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(Status::new(
            Reason::TooManyRequests,
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
        .with_cause(
            "DisruptionBudget",
            "",
            &format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int("desiredHealthy"),
                int("currentHealthy")
            ),
        ));
    }
    let mut out = pdb.clone();
    out.remove_meta("resourceVersion");
    let st = out.0.entry("status").or_insert_with(|| json!({}));
    if !st.is_object() {
        *st = json!({});
    }
    if let Some(st) = st.as_object_mut() {
        st.insert("disruptionsAllowed".into(), json!(allowed - 1));
        let pods = st.entry("disruptedPods").or_insert_with(|| json!({}));
        if !pods.is_object() {
            *pods = json!({});
        }
        if let Some(pods) = pods.as_object_mut() {
            pods.insert(pod.to_string(), json!(now));
        }
        if allowed - 1 == 0 {
            set_budget_condition(st, now);
        }
    }
    Ok(out)
}

/// The budget's `DisruptionAllowed` condition, now `False` (`InsufficientPods`), as
/// Kubernetes sets it when the last allowed disruption is taken.
fn set_budget_condition(status: &mut serde_json::Map<String, Value>, now: &str) {
    let observed = status
        .get("observedGeneration")
        .cloned()
        .unwrap_or(json!(0));
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    let new = |since: &Value| {
        json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
               "message": "", "observedGeneration": observed, "lastTransitionTime": since})
    };
    match list
        .iter_mut()
        .find(|c| c.get("type") == Some(&json!("DisruptionAllowed")))
    {
        Some(c) => {
            let since = if c.get("status") == Some(&json!("False")) {
                c.get("lastTransitionTime").cloned().unwrap_or(json!(now))
            } else {
                json!(now)
            };
            *c = new(&since);
        }
        None => list.push(new(&json!(now))),
    }
}

/// Marks the pod as a disruption target (not for a dry run) and deletes it with `opts`.
async fn disrupt_and_delete(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    mut opts: DeleteOptions,
    dry_run: bool,
) -> Result<(), Status> {
    if !dry_run {
        let written = mark_disruption_target(srv, req, name, &opts).await?;
        if opts.pre_rv.is_some() {
            // The condition is ours: the precondition holds for the version it made.
            opts.pre_rv = Some(written.to_string());
        }
    }
    delete_object(srv, req, name, &opts, dry_run)
        .await
        .map(drop)
}

/// Adds the `DisruptionTarget` condition to the pod's status, checking `opts`'
/// preconditions against the pod as it is (lost races are retried). Its new
/// resourceVersion.
async fn mark_disruption_target(
    srv: &ApiServer,
    req: &RequestInfo,
    name: &str,
    opts: &DeleteOptions,
) -> Result<u64, Status> {
    let key = req.storage_key(name);
    for _ in 0..16 {
        let kv = srv
            .storage()
            .get(key.as_bytes())
            .await
            .map_err(|e| storage_error(req.info, name, e))?
            .ok_or_else(|| Status::not_found(req.info.resource, name))?;
        let mut pod = decode_stored(req.info, &kv)?;
        if let Some(uid) = opts.pre_uid.as_ref().filter(|u| *u != pod.uid()) {
            return Err(Status::conflict(
                "Pod",
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). \
                     The object might have been deleted and then recreated",
                    pod.uid()
                ),
            ));
        }
        let rv = kv.mod_revision.to_string();
        if let Some(want) = opts.pre_rv.as_ref().filter(|want| **want != rv) {
            return Err(Status::conflict(
                "Pod",
                name,
                &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the \
                     ResourceVersion in record ({rv}). The object might have been modified"
                ),
            ));
        }
        pod.remove_meta("resourceVersion");
        super::pod_condition::set(
            &mut pod,
            "DisruptionTarget",
            "True",
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
            &api::time::now_rfc3339(),
        );
        let value = super::encode_for_storage(&mut pod)?;
        match srv
            .storage()
            .update(key.clone().into_bytes().into(), value, kv.mod_revision)
            .await
        {
            Ok(written) => return Ok(written.mod_revision),
            Err(storage::StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(storage_error(req.info, name, e)),
        }
    }
    Err(Status::conflict(
        "pods",
        name,
        "too many concurrent writers; please retry",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(status: Value) -> Object {
        Object::from_value(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "generation": 2, "resourceVersion": "5"},
            "spec": {"minAvailable": 1}, "status": status}),
        )
        .unwrap()
    }

    #[test]
    fn budgets_allow_refuse_and_record() {
        let stale = check_budget(
            &pdb(json!({"observedGeneration": 1, "disruptionsAllowed": 3})),
            "p",
            "t",
        )
        .unwrap_err();
        assert_eq!((stale.code(), stale.retry_after), (429, Some(10)));
        assert_eq!(
            stale.causes[0].message,
            "The disruption budget b is still being processed by the server."
        );
        let spent = check_budget(
            &pdb(json!({"observedGeneration": 2, "disruptionsAllowed": 0,
                        "desiredHealthy": 2, "currentHealthy": 2})),
            "p",
            "t",
        )
        .unwrap_err();
        assert_eq!((spent.code(), spent.retry_after), (429, None));
        assert_eq!(spent.causes[0].reason, "DisruptionBudget");
        assert_eq!(
            spent.causes[0].message,
            "The disruption budget b needs 2 healthy pods and has 2 currently"
        );
        let negative = check_budget(
            &pdb(json!({"observedGeneration": 2, "disruptionsAllowed": -1})),
            "p",
            "t",
        )
        .unwrap_err();
        assert_eq!(negative.code(), 403);
        let taken = check_budget(
            &pdb(json!({"observedGeneration": 2, "disruptionsAllowed": 1})),
            "p",
            "2024-01-01T00:00:00Z",
        )
        .unwrap();
        let st = &taken.0["status"];
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(st["disruptedPods"], json!({"p": "2024-01-01T00:00:00Z"}));
        assert_eq!(st["conditions"][0]["reason"], "InsufficientPods");
        assert_eq!(st["conditions"][0]["status"], "False");
    }
}
