//! The CRD controller: what kube-apiserver's apiextensions naming, establishing and
//! finalizing controllers do, in one loop inside the server.
//!
//! It follows the CRD watch cache. On every change it reads every CRD (re-parsing only those
//! whose resourceVersion moved), decides their names ([`naming::decide`]), publishes the served
//! set of custom resources and starts or stops their cachers, and only then writes each CRD's
//! status (`acceptedNames`, `NamesAccepted`, `Established`, `Terminating`, `storedVersions`):
//! so a client that sees `Established` can use the resource at once. A CRD being deleted
//! keeps being served (reads and deletes; creates are refused) while its objects are
//! deleted through the ordinary delete path (their own finalizers are honoured); then its
//! `customresourcecleanup` finalizer is removed and it goes.
//!
//! Every server over one store runs it: the decisions depend only on the stored CRDs, and a
//! status write lost to another server's is simply not redone when the next pass finds the
//! status already right.

use super::delete::delete_object;
use super::delete::DeleteOptions;
use super::state::ApiServer;
use super::RequestInfo;
use crate::cacher::Cacher;
use crate::registry::apiextensions::crd::{Crd, Names};
use crate::registry::apiextensions::{intern, naming, Served, CLEANUP_FINALIZER};
use crate::registry::ResourceInfo;
use api::Status;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How soon a pass with unfinished work (a lost status write, objects still being deleted)
/// is retried when nothing else changes.
const RETRY: Duration = Duration::from_secs(1);

/// The CRD resource.
fn crd_info() -> Result<&'static ResourceInfo, Status> {
    crate::registry::resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| Status::internal("the CRD resource is not in the table"))
}

/// Runs one pass now (so CRDs established before a restart are served once the server is
/// ready), then follows the CRD cache until the server is dropped.
pub async fn start(srv: &Arc<ApiServer>) -> Result<(), Status> {
    let info = crd_info()?;
    let crds = srv.cacher(info)?;
    let mut changes = crds.changes();
    let mut parsed = Parsed::default();
    let mut pending = reconcile(srv, &crds, &mut parsed).await;
    let weak = Arc::downgrade(srv);
    drop(crds);
    tokio::spawn(async move {
        loop {
            if pending {
                let _ = tokio::time::timeout(RETRY, changes.changed()).await;
            } else if changes.changed().await.is_err() {
                return;
            }
            let Some(srv) = weak.upgrade() else { return };
            let Ok(crds) = srv.cacher(info) else { return };
            pending = reconcile(&srv, &crds, &mut parsed).await;
        }
    });
    Ok(())
}

/// CRDs read so far, by name.
#[derive(Default)]
struct Parsed(HashMap<String, Entry>);

/// One CRD as read at a resourceVersion, and what it was last served as, so that a pass
/// re-reads and re-interns only the CRDs that changed.
struct Entry {
    rv: u64,
    crd: Arc<Crd>,
    /// The accepted names and deletion state the infos were interned for, and the infos.
    served: Option<(Names, bool, Vec<&'static ResourceInfo>)>,
}

/// One pass; whether anything is left to retry.
async fn reconcile(srv: &Arc<ApiServer>, cacher: &Cacher, parsed: &mut Parsed) -> bool {
    let objects = cacher.objects();
    let mut crds: Vec<(u64, Arc<Crd>)> = Vec::with_capacity(objects.len());
    let mut seen = HashMap::with_capacity(objects.len());
    for o in &objects {
        let entry = match parsed.0.remove(&o.name) {
            Some(e) if e.rv == o.resource_version => e,
            _ => match serde_json::from_slice::<Value>(&o.json)
                .map_err(|e| e.to_string())
                .and_then(|v| Crd::from_value(&v))
            {
                Ok(c) => Entry {
                    rv: o.resource_version,
                    crd: Arc::new(c),
                    served: None,
                },
                Err(e) => {
                    tracing::warn!(crd = o.name, "not serving the CRD: {e}");
                    continue;
                }
            },
        };
        crds.push((o.resource_version, entry.crd.clone()));
        seen.insert(o.name.clone(), entry);
    }
    parsed.0 = seen;
    crds.sort_by(|(_, a), (_, b)| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let list: Vec<&Crd> = crds.iter().map(|(_, c)| &**c).collect();
    let decisions = naming::decide(&list);

    let mut served = Vec::new();
    let mut statuses = Vec::new();
    // The revision each served info's CRD was read at: objects written later carry the
    // defaults of its schema.
    for ((rv, crd), decision) in crds.iter().zip(&decisions) {
        let established = decision.names_accepted || crd.condition_true("Established");
        if let (true, Some(names)) = (established, &decision.accepted) {
            let Some(entry) = parsed.0.get_mut(&crd.name) else {
                continue;
            };
            let fresh = |e: &Entry| {
                e.served
                    .as_ref()
                    .is_some_and(|(n, d, _)| n == names && *d == crd.deleting)
            };
            if !fresh(entry) {
                let infos = crd
                    .versions
                    .iter()
                    .filter(|v| v.served)
                    .map(|v| intern(crd, names, v, crd.deleting))
                    .collect();
                entry.served = Some((names.clone(), crd.deleting, infos));
            }
            if let Some((_, _, infos)) = &entry.served {
                served.extend(infos.iter().map(|i| (*i, *rv)));
            }
        }
        statuses.push((*rv, crd.clone(), desired_status(crd, decision, established)));
    }
    publish(srv, served);

    let mut pending = false;
    for (rv, crd, status) in statuses {
        if crd.object.get("status") != Some(&status) {
            pending |= !write_status(srv, &crd, rv, status).await;
            continue;
        }
        if crd.deleting && has_cleanup_finalizer(&crd) {
            pending |= !finalize(srv, &crd, rv).await;
        }
    }
    pending
}

/// Publishes `infos` as the served set and makes the cachers match it; each comes with the
/// revision its CRD was read at (a new cacher treats objects written later as defaulted).
fn publish(srv: &ApiServer, served: Vec<(&'static ResourceInfo, u64)>) {
    let mut cachers = srv.custom_cachers.write();
    let mut next = HashMap::with_capacity(served.len());
    let mut infos = Vec::with_capacity(served.len());
    for (info, crd_rv) in served {
        infos.push(info);
        let key = (info.group, info.version, info.resource);
        let cacher = match cachers.remove(&key) {
            // A CRD being deleted keeps its cacher, so that watchers see its objects go.
            Some(c) if serves_alike(c.info(), info) => c,
            _ => {
                let c = Cacher::start(
                    info,
                    srv.storage.clone(),
                    srv.cacher_options.clone(),
                    &srv.metrics,
                );
                c.set_defaulted_after(crd_rv);
                c
            }
        };
        next.insert(key, cacher);
    }
    *cachers = next;
    srv.custom.publish(Served::new(infos));
}

/// Whether a cacher built for `a` serves `b` the same: they differ at most in whether the
/// CRD is being deleted, which only the create path consults (through the request's info).
fn serves_alike(a: &ResourceInfo, b: &ResourceInfo) -> bool {
    let core = |i: &ResourceInfo| {
        (
            i.group,
            i.version,
            i.resource,
            i.kind,
            i.namespaced,
            i.has_status,
            i.fields.iter().map(|f| f.label).collect::<Vec<_>>(),
        )
    };
    let custom = |i: &ResourceInfo| {
        i.custom.map(|c| {
            (
                c.schema.clone(),
                c.status_subresource,
                c.scale.clone(),
                c.printer_columns.clone(),
                c.storage_version.clone(),
            )
        })
    };
    std::ptr::eq(a, b) || (core(a) == core(b) && custom(a) == custom(b))
}

/// The status `crd` should have.
fn desired_status(crd: &Crd, d: &naming::Decision, established: bool) -> Value {
    let current = crd
        .object
        .get("status")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut status = current.as_object().cloned().unwrap_or_default();
    let old_conditions: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conditions = Vec::new();
    let mut condition = |type_: &str, ok: bool, reason: &str, message: &str| {
        let status_word = if ok { "True" } else { "False" };
        let old = old_conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_));
        let since = old
            .filter(|c| c.get("status").and_then(Value::as_str) == Some(status_word))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(api::time::now_rfc3339()));
        conditions.push(json!({
            "type": type_,
            "status": status_word,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }));
    };
    condition("NamesAccepted", d.names_accepted, d.reason, &d.message);
    if established {
        condition(
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
        );
    } else {
        condition(
            "Established",
            false,
            "NotAccepted",
            "not all names are accepted",
        );
    }
    if crd.deleting {
        condition(
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
    }
    status.insert("conditions".into(), Value::Array(conditions));
    match &d.accepted {
        Some(n) => status.insert("acceptedNames".into(), n.to_value()),
        None => status.insert("acceptedNames".into(), json!({"plural": "", "kind": ""})),
    };
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = crd.storage_version() {
        if !stored.iter().any(|s| s == v) {
            stored.push(json!(v));
        }
    }
    status.insert("storedVersions".into(), Value::Array(stored));
    Value::Object(status)
}

fn has_cleanup_finalizer(crd: &Crd) -> bool {
    crd.object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == CLEANUP_FINALIZER))
}

fn crd_key(crd: &Crd) -> Result<String, Status> {
    Ok(format!("{}{}", crd_info()?.key_prefix(), crd.name))
}

/// Writes `status` into `crd` (read at `rv`); whether it was written.
async fn write_status(srv: &ApiServer, crd: &Crd, rv: u64, status: Value) -> bool {
    let Ok(key) = crd_key(crd) else { return false };
    let mut obj = crd.object.as_object().cloned().unwrap_or_default();
    obj.insert("status".into(), status);
    put(srv, &key, obj, rv).await
}

/// Stores `obj` at `key` if it is still at `rv`; whether it was stored.
async fn put(srv: &ApiServer, key: &str, obj: Map<String, Value>, rv: u64) -> bool {
    let mut obj = api::Object(obj);
    let Ok(value) = super::encode_for_storage(&mut obj) else {
        return false;
    };
    match srv
        .storage
        .update(key.as_bytes().to_vec().into(), value, rv)
        .await
    {
        Ok(_) => true,
        Err(storage::StorageError::Conflict { .. }) => false,
        Err(e) => {
            tracing::warn!(key, "CRD status write failed: {e}");
            false
        }
    }
}

/// Deletes the objects of the CRD being deleted, then its cleanup finalizer; whether it is
/// done (the finalizer is gone).
async fn finalize(srv: &Arc<ApiServer>, crd: &Crd, rv: u64) -> bool {
    let Some(storage_version) = crd.storage_version() else {
        return false;
    };
    let Some(version) = crd.versions.iter().find(|v| v.name == storage_version) else {
        return false;
    };
    let names = crd.accepted_names().unwrap_or_else(|| crd.names.clone());
    let info = intern(crd, &names, version, true);
    let prefix = info.key_prefix();
    let listed = srv
        .storage
        .range(storage::RangeRequest::prefix(prefix.clone().into_bytes()))
        .await;
    let kvs = match listed {
        Ok(r) => r.kvs,
        Err(e) => {
            tracing::warn!(crd = crd.name, "listing custom objects to delete: {e}");
            return false;
        }
    };
    let mut left = 0;
    for kv in kvs {
        let key = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
        let (namespace, name) = match key.split_once('/') {
            Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
            None => (None, key.clone()),
        };
        let req = RequestInfo {
            info,
            namespace,
            name: Some(name.clone()),
            subresource: None,
            legacy_watch: false,
        };
        match delete_object(srv, &req, &name, &DeleteOptions::default(), false).await {
            Ok((obj, _)) if obj.meta().finalizers.is_empty() => {}
            Ok(_) => left += 1,
            Err(e) if e.code() == 404 => {}
            Err(e) => {
                tracing::warn!(
                    crd = crd.name,
                    object = key,
                    "deleting a custom object: {e}"
                );
                left += 1;
            }
        }
    }
    if left > 0 {
        return false;
    }
    let Ok(key) = crd_key(crd) else { return false };
    let mut obj = crd.object.as_object().cloned().unwrap_or_default();
    let finalizers: Vec<Value> = crd
        .object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter(|x| *x != CLEANUP_FINALIZER)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if finalizers.is_empty() {
        return match srv
            .storage
            .delete(key.clone().into_bytes().into(), Some(rv))
            .await
        {
            Ok(_) | Err(storage::StorageError::NotFound) => true,
            Err(_) => false,
        };
    }
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    put(srv, &key, obj, rv).await
}
