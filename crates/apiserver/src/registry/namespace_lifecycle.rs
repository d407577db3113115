//! The namespace lifecycle, as kube-apiserver's namespace registry and its
//! `NamespaceLifecycle` admission plugin decide it.
//!
//! - A new namespace always carries the `kubernetes` finalizer in `spec.finalizers`: the
//!   namespace controller's token, removed (through the `finalize` subresource) once the
//!   namespace's content is gone.
//! - The first delete only marks the namespace: `metadata.deletionTimestamp`,
//!   `status.phase: Terminating`, and the garbage collector's finalizers in
//!   `metadata.finalizers` as the delete's `orphanDependents` / `propagationPolicy` ask.
//!   While `spec.finalizers` is not empty, later deletes change nothing; once it is, a
//!   delete (or any write) removes the namespace when `metadata.finalizers` is empty too.
//! - An ordinary update cannot change `spec.finalizers`; only `finalize` can.
//! - Nothing new may be created in a Terminating namespace (403, with a cause of type
//!   `NamespaceTerminating`), and `default`, `kube-system` and `kube-public` cannot be
//!   deleted.

use super::resources::ResourceInfo;
use api::object::{Object, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use api::{Reason, Status};
use serde_json::{json, Value};

/// The finalizer new namespaces get in `spec.finalizers`: the namespace controller's.
pub const KUBERNETES_FINALIZER: &str = "kubernetes";

/// The namespaces the lifecycle admission refuses to delete.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// Whether `info` is core/v1 Namespaces.
pub fn is_namespaces(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.kind == "Namespace"
}

/// The `Forbidden` Status kube-apiserver's admission gives for `name` of `info`'s resource:
/// `{resource}[.{group}] "{name}" is forbidden: {why}` with the resource as `details.kind`.
pub fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> Status {
    let resource = if info.group.is_empty() {
        info.resource.to_string()
    } else {
        format!("{}.{}", info.resource, info.group)
    };
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {why}")
    } else {
        format!("{resource} {name:?} is forbidden: {why}")
    };
    let mut s = Status::new(Reason::Forbidden, message).with_group(info.group);
    s.details_kind = Some(info.resource.to_string());
    s.details_name = (!name.is_empty()).then(|| name.to_string());
    s
}

/// 403 when namespace `name` may never be deleted.
///
/// # Errors
/// The Forbidden Status for `default`, `kube-system` and `kube-public`.
pub fn check_deletable(info: &ResourceInfo, name: &str) -> Result<(), Status> {
    if IMMORTAL_NAMESPACES.contains(&name) {
        return Err(forbidden(info, name, "this namespace may not be deleted"));
    }
    Ok(())
}

/// The 403 for creating object `name` of `info`'s resource in namespace `ns` while `ns` is
/// Terminating, with its `NamespaceTerminating` cause on `metadata.namespace`.
pub fn terminating(info: &ResourceInfo, name: &str, ns: &str) -> Status {
    forbidden(
        info,
        name,
        &format!("unable to create new content in namespace {ns} because it is being terminated"),
    )
    .with_cause(
        "NamespaceTerminating",
        "metadata.namespace",
        &format!("namespace {ns} is being terminated"),
    )
}

/// The namespace's `spec.finalizers` (names that are not strings are skipped).
pub fn spec_finalizers(ns: &Object) -> Vec<String> {
    ns.0.get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `spec.finalizers` of `ns`; an empty list is left out, as Kubernetes serializes it.
pub fn set_spec_finalizers(ns: &mut Object, finalizers: Vec<String>) {
    if !ns.0.get("spec").is_some_and(Value::is_object) {
        ns.0.insert("spec".into(), json!({}));
    }
    let Some(spec) = ns.0.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if finalizers.is_empty() {
        spec.remove("finalizers");
    } else {
        spec.insert("finalizers".into(), json!(finalizers));
    }
}

/// Adds the `kubernetes` finalizer to a namespace being created, after any it asked for.
pub fn prepare_for_create(ns: &mut Object) {
    let mut finalizers = spec_finalizers(ns);
    if !finalizers.iter().any(|f| f == KUBERNETES_FINALIZER) {
        finalizers.push(KUBERNETES_FINALIZER.into());
    }
    set_spec_finalizers(ns, finalizers);
}

/// What a delete does to a namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum DeletePlan {
    /// The first delete: store this marked state (Terminating) and keep the namespace.
    Mark(Object),
    /// Its finalizers are still at work: nothing changes.
    Keep,
    /// `spec.finalizers` is empty: delete it as any object (its `metadata.finalizers` may
    /// still hold it).
    Generic,
}

/// The delete of namespace `ns` at Unix time `now`, with the delete's `orphan_dependents`
/// and `propagation` policy.
pub fn plan_delete(
    ns: &Object,
    orphan_dependents: Option<bool>,
    propagation: Option<&str>,
    now: i64,
) -> DeletePlan {
    let marked = ns
        .metadata()
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null());
    if marked {
        return if spec_finalizers(ns).is_empty() {
            DeletePlan::Generic
        } else {
            DeletePlan::Keep
        };
    }
    let mut out = ns.clone();
    out.set_meta("deletionTimestamp", api::time::format_rfc3339(now));
    let status = out.0.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    status["phase"] = json!("Terminating");
    let current = ns.meta().finalizers;
    let has = |f: &str| current.iter().any(|c| c == f);
    // Unlike other kinds, orphanDependents=false asks for foreground deletion here.
    let orphan = match (orphan_dependents, propagation) {
        (Some(o), _) => o,
        (None, Some(p)) => p == "Orphan",
        (None, None) => has(ORPHAN_FINALIZER),
    };
    let foreground = match (orphan_dependents, propagation) {
        (Some(o), _) => !o,
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
    if wanted != current {
        out.set_meta("finalizers", json!(wanted));
    }
    DeletePlan::Mark(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;

    const NOW: i64 = 1_700_000_000;

    fn ns(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn new_namespaces_always_get_the_kubernetes_finalizer() {
        let mut bare = ns(json!({"metadata": {"name": "a"}}));
        prepare_for_create(&mut bare);
        assert_eq!(spec_finalizers(&bare), ["kubernetes"]);
        let mut other = ns(json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["x.io/y"]}}));
        prepare_for_create(&mut other);
        assert_eq!(spec_finalizers(&other), ["x.io/y", "kubernetes"]);
        let mut empty = ns(json!({"metadata": {"name": "a"}, "spec": {"finalizers": []}}));
        prepare_for_create(&mut empty);
        assert_eq!(spec_finalizers(&empty), ["kubernetes"]);
    }

    #[test]
    fn the_first_delete_marks_the_namespace_terminating() {
        let live = ns(
            json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]},
                             "status": {"phase": "Active"}}),
        );
        let DeletePlan::Mark(m) = plan_delete(&live, None, None, NOW) else {
            panic!("not marked");
        };
        assert_eq!(m.0["status"]["phase"], "Terminating");
        assert_eq!(
            m.metadata().unwrap()["deletionTimestamp"],
            api::time::format_rfc3339(NOW)
        );
        assert_eq!(spec_finalizers(&m), ["kubernetes"]);
        assert!(m.meta().finalizers.is_empty());
        // No grace period: namespaces are not deleted gracefully.
        assert!(m
            .metadata()
            .unwrap()
            .get("deletionGracePeriodSeconds")
            .is_none());
        // Then: kept while spec.finalizers holds it, deleted as any object after.
        assert_eq!(plan_delete(&m, None, None, NOW + 1), DeletePlan::Keep);
        let mut finalized = m.clone();
        set_spec_finalizers(&mut finalized, vec![]);
        assert_eq!(
            plan_delete(&finalized, None, None, NOW + 1),
            DeletePlan::Generic
        );
    }

    #[test]
    fn propagation_sets_the_namespace_gc_finalizers() {
        let live = ns(json!({"metadata": {"name": "a", "finalizers": ["x.io/y"]}}));
        let finalizers = |o: Option<bool>, p: Option<&str>| match plan_delete(&live, o, p, NOW) {
            DeletePlan::Mark(m) => m.meta().finalizers,
            other => panic!("{other:?}"),
        };
        assert_eq!(finalizers(None, None), ["x.io/y"]);
        assert_eq!(finalizers(None, Some("Orphan")), ["x.io/y", "orphan"]);
        assert_eq!(
            finalizers(None, Some("Foreground")),
            ["x.io/y", "foregroundDeletion"]
        );
        assert_eq!(finalizers(None, Some("Background")), ["x.io/y"]);
        assert_eq!(finalizers(Some(true), None), ["x.io/y", "orphan"]);
        // orphanDependents=false means foreground for namespaces.
        assert_eq!(
            finalizers(Some(false), None),
            ["x.io/y", "foregroundDeletion"]
        );
        // Without options, a finalizer already there stays.
        let held = ns(json!({"metadata": {"name": "a", "finalizers": ["orphan"]}}));
        let DeletePlan::Mark(m) = plan_delete(&held, None, None, NOW) else {
            panic!("not marked");
        };
        assert_eq!(m.meta().finalizers, ["orphan"]);
        let DeletePlan::Mark(m) = plan_delete(&held, None, Some("Background"), NOW) else {
            panic!("not marked");
        };
        assert!(m.meta().finalizers.is_empty());
    }

    #[test]
    fn immortal_namespaces_and_terminating_creates_are_forbidden() {
        let namespaces = find("", "v1", "namespaces").unwrap();
        for name in ["default", "kube-system", "kube-public"] {
            let s = check_deletable(namespaces, name).unwrap_err();
            assert_eq!(s.code(), 403);
            assert_eq!(
                s.message,
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
            );
        }
        assert!(check_deletable(namespaces, "kube-node-lease").is_ok());
        let deployments = find("apps", "v1", "deployments").unwrap();
        let s = terminating(deployments, "web", "ns");
        assert_eq!(s.code(), 403);
        assert_eq!(
            s.message,
            "deployments.apps \"web\" is forbidden: unable to create new content in namespace ns because it is being terminated"
        );
        assert_eq!(s.causes[0].reason, "NamespaceTerminating");
        assert_eq!(s.causes[0].field, "metadata.namespace");
        assert_eq!(s.causes[0].message, "namespace ns is being terminated");
        let v = s.to_value();
        assert_eq!(v["details"]["kind"], "deployments");
        assert_eq!(v["details"]["group"], "apps");
    }
}
