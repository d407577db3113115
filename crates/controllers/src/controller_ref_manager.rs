//! The controller-reference manager: which objects a controller owns, as
//! kube-controller-manager's `ControllerRefManager` decides it, and the index that finds
//! the candidates without scanning a namespace.
//!
//! A controller *claims* the objects it should manage: those whose controller reference
//! points at it and that its selector still matches; an orphan (no controller reference)
//! that the selector matches is **adopted** (a patch adds the controller reference, with the
//! orphan's uid as precondition); an object it controls that no longer matches is
//! **released** (a patch deletes the reference). Objects controlled by someone else are
//! never touched. A controller being deleted adopts and releases nothing. Before the first
//! adoption, the controller re-reads itself from the server (not the cache) and adopts
//! nothing if it is gone or being deleted, so a deleted controller cannot grab orphans its
//! garbage collector just released.
//!
//! Candidates come from the [`CONTROLLER_UID_INDEX`]: every object is indexed under its
//! controller's uid, and orphans under their namespace ([`orphan_index_value`]), so that
//! the candidates of one controller are its own objects and the orphans of its namespace.

use crate::controller_utils::controller_of;
use client::cache::{IndexError, IndexFunc, Indexer, Indexers, InformerError, SharedIndexInformer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The name of the index of objects by their controller's uid (orphans: by namespace).
pub const CONTROLLER_UID_INDEX: &str = "controllerUID";

/// Uids never contain `/`, so orphans' index values cannot collide with them.
const ORPHAN_PREFIX: &str = "_orphan/";

/// The [`CONTROLLER_UID_INDEX`] value of the orphans of `namespace`.
pub fn orphan_index_value(namespace: &str) -> String {
    format!("{ORPHAN_PREFIX}{namespace}")
}

/// The index function of [`CONTROLLER_UID_INDEX`].
pub fn controller_uid_index_func<K>() -> IndexFunc<K>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    Arc::new(|obj: &K| {
        let meta = obj.metadata();
        match controller_of(meta) {
            Some(r) => vec![r.uid.clone()],
            None => vec![orphan_index_value(meta.namespace.as_deref().unwrap_or(""))],
        }
    })
}

/// Adds [`CONTROLLER_UID_INDEX`] to `informer` unless it has it (controllers sharing an
/// informer share the index).
///
/// # Errors
/// [`InformerError::AlreadyStarted`] when the informer was started without the index:
/// indexes must be added before the informer factory starts.
pub fn ensure_controller_uid_index<K>(
    informer: &SharedIndexInformer<K>,
) -> Result<(), InformerError>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + client::object::KubeObject,
{
    if informer
        .indexer()
        .indexer_names()
        .iter()
        .any(|n| n == CONTROLLER_UID_INDEX)
    {
        return Ok(());
    }
    let mut indexers: Indexers<K> = Indexers::new();
    indexers.insert(
        CONTROLLER_UID_INDEX.to_string(),
        controller_uid_index_func::<K>(),
    );
    match informer.add_indexers(indexers) {
        // Added by another controller in the meantime.
        Err(InformerError::Index(IndexError::Conflict(_))) => Ok(()),
        other => other,
    }
}

/// The objects controlled by `owner_uid`, followed by the orphans of `namespace`.
pub fn owned_and_orphans<K>(indexer: &Indexer<K>, owner_uid: &str, namespace: &str) -> Vec<Arc<K>>
where
    K: client::object::KubeObject,
{
    let mut out = indexer
        .by_index(CONTROLLER_UID_INDEX, owner_uid)
        .unwrap_or_default();
    out.extend(
        indexer
            .by_index(CONTROLLER_UID_INDEX, &orphan_index_value(namespace))
            .unwrap_or_default(),
    );
    out
}

/// The controller on whose behalf objects are claimed.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The controller's metadata (uid, name, namespace, deletion timestamp).
    pub meta: &'a ObjectMeta,
    /// Its `apiVersion`, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// Its kind, e.g. `ReplicaSet`.
    pub kind: &'a str,
}

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why some claims failed; the controller should try again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct ClaimError(pub Vec<String>);

/// A deferred check whether adoption is allowed.
type CheckFn<'a> = Box<dyn FnOnce() -> BoxFuture<'a, Result<(), String>> + Send + 'a>;

/// Decides, once per claim round and only when an adoption is due, whether the owner may
/// adopt: it re-reads the owner from the server.
pub struct AdoptionCheck<'a> {
    check: Option<CheckFn<'a>>,
    outcome: Option<Result<(), String>>,
}

impl<'a> AdoptionCheck<'a> {
    /// A check that runs `check` the first time it is needed.
    pub fn new(check: impl FnOnce() -> BoxFuture<'a, Result<(), String>> + Send + 'a) -> Self {
        AdoptionCheck {
            check: Some(Box::new(check)),
            outcome: None,
        }
    }

    async fn allowed(&mut self) -> Result<(), String> {
        if let Some(check) = self.check.take() {
            self.outcome = Some(check().await);
        }
        self.outcome.clone().unwrap_or(Ok(()))
    }
}

/// The usual adoption check: re-read the owner with `get` (a fresh, uncached read); it must
/// still have the same uid and no deletion timestamp.
pub fn recheck_deletion_timestamp<'a, F>(owner: Owner<'a>, get: F) -> AdoptionCheck<'a>
where
    F: Future<Output = Result<ObjectMeta, client::rest::Error>> + Send + 'a,
{
    let kind = owner.kind.to_string();
    let ns = owner.meta.namespace.clone().unwrap_or_default();
    let name = owner.meta.name.clone().unwrap_or_default();
    let uid = owner.meta.uid.clone().unwrap_or_default();
    AdoptionCheck::new(move || {
        Box::pin(async move {
            let fresh = get
                .await
                .map_err(|e| format!("cannot re-read {kind} {ns}/{name} before adopting: {e}"))?;
            let fresh_uid = fresh.uid.unwrap_or_default();
            if fresh_uid != uid {
                return Err(format!(
                    "original {kind} {ns}/{name} is gone: got uid {fresh_uid}, wanted {uid}"
                ));
            }
            if let Some(t) = fresh.deletion_timestamp {
                return Err(format!(
                    "{kind} {ns}/{name} has just been deleted at {}",
                    t.0
                ));
            }
            Ok(())
        })
    })
}

/// The strategic merge patch that makes `owner` the controller of the object `uid`.
pub fn adopt_patch(owner: Owner<'_>, uid: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "ownerReferences": [{
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.meta.name.as_deref().unwrap_or(""),
                "uid": owner.meta.uid.as_deref().unwrap_or(""),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
            "uid": uid,
        }
    })
}

/// The strategic merge patch that removes `owner_uid`'s reference from the object `uid`.
pub fn release_patch(owner_uid: &str, uid: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "uid": uid,
        }
    })
}

/// Claims `objects` for `owner` (see the [module docs](self)): returns the objects it
/// controls and that `matches` accepts, adopting and releasing through `patch`
/// (namespace, name, strategic merge patch).
///
/// # Errors
/// [`ClaimError`] when an adoption or release failed (other than for an object that is
/// gone, or one a release finds already changed); the claims that succeeded are lost with
/// it, as the controller is expected to retry the whole sync.
pub async fn claim<K, P, PF>(
    objects: Vec<Arc<K>>,
    owner: Owner<'_>,
    matches: impl Fn(&K) -> bool,
    adoption: &mut AdoptionCheck<'_>,
    patch: P,
) -> Result<Vec<Arc<K>>, ClaimError>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta>,
    P: Fn(String, String, serde_json::Value) -> PF,
    PF: Future<Output = Result<(), client::rest::Error>>,
{
    let owner_uid = owner.meta.uid.as_deref().unwrap_or("");
    let owner_ns = owner.meta.namespace.as_deref().unwrap_or("");
    let owner_deleting = owner.meta.deletion_timestamp.is_some();
    let mut claimed = Vec::with_capacity(objects.len());
    let mut errors = Vec::new();
    for obj in objects {
        let meta = obj.metadata();
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_default();
        if let Some(r) = controller_of(meta) {
            if r.uid != owner_uid {
                continue;
            }
            if matches(&obj) {
                claimed.push(obj);
                continue;
            }
            if owner_deleting {
                continue;
            }
            match patch(ns.clone(), name.clone(), release_patch(owner_uid, &uid)).await {
                Ok(()) => {}
                // Gone, or no longer ours / replaced by another object of that name.
                Err(e) if e.is_not_found() || e.is_invalid() => {}
                Err(e) => errors.push(format!("releasing {ns}/{name}: {e}")),
            }
            continue;
        }
        if owner_deleting || !matches(&obj) || meta.deletion_timestamp.is_some() {
            continue;
        }
        if !owner_ns.is_empty() && owner_ns != ns {
            continue;
        }
        if let Err(e) = adoption.allowed().await {
            errors.push(format!("cannot adopt {ns}/{name}: {e}"));
            continue;
        }
        match patch(ns.clone(), name.clone(), adopt_patch(owner, &uid)).await {
            Ok(()) => claimed.push(obj),
            Err(e) if e.is_not_found() => {}
            Err(e) => errors.push(format!("adopting {ns}/{name}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(claimed)
    } else {
        Err(ClaimError(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use parking_lot::Mutex;

    fn pod(name: &str, app: &str, controller: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some([("app".to_string(), app.to_string())].into()),
                owner_references: controller.map(|c| {
                    vec![OwnerReference {
                        uid: c.into(),
                        controller: Some(true),
                        name: c.into(),
                        kind: "ReplicaSet".into(),
                        api_version: "apps/v1".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn owner_meta(deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("rs".into()),
            namespace: Some("ns".into()),
            uid: Some("rs-uid".into()),
            deletion_timestamp: deleting
                .then(|| Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap())),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn claims_adopts_and_releases() {
        let meta = owner_meta(false);
        let owner = Owner {
            meta: &meta,
            api_version: "apps/v1",
            kind: "ReplicaSet",
        };
        let patches = Mutex::new(Vec::new());
        let checks = Mutex::new(0);
        let mut adoption = AdoptionCheck::new(|| {
            *checks.lock() += 1;
            Box::pin(async { Ok(()) })
        });
        let objects = vec![
            pod("mine", "web", Some("rs-uid")),
            pod("mine-but-relabelled", "db", Some("rs-uid")),
            pod("orphan", "web", None),
            pod("orphan2", "web", None),
            pod("foreign-orphan", "db", None),
            pod("someone-elses", "web", Some("other-uid")),
        ];
        let claimed = claim(
            objects,
            owner,
            |p: &Pod| p.metadata.labels.as_ref().unwrap()["app"] == "web",
            &mut adoption,
            |_ns, name, body| {
                patches.lock().push((name, body));
                async { Ok(()) }
            },
        )
        .await
        .unwrap();
        let names: Vec<_> = claimed
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["mine", "orphan", "orphan2"]);
        let patches = patches.into_inner();
        assert_eq!(patches.len(), 3);
        assert_eq!(patches[0].0, "mine-but-relabelled");
        assert_eq!(
            patches[0].1["metadata"]["ownerReferences"][0]["$patch"],
            "delete"
        );
        assert_eq!(patches[0].1["metadata"]["uid"], "uid-mine-but-relabelled");
        assert_eq!(patches[1].0, "orphan");
        let r = &patches[1].1["metadata"]["ownerReferences"][0];
        assert_eq!(r["uid"], "rs-uid");
        assert_eq!(r["controller"], true);
        assert_eq!(r["blockOwnerDeletion"], true);
        assert_eq!(patches[1].1["metadata"]["uid"], "uid-orphan");
        assert_eq!(*checks.lock(), 1, "the owner is re-read once per round");
    }

    #[tokio::test]
    async fn a_deleted_owner_adopts_nothing() {
        let meta = owner_meta(false);
        let owner = Owner {
            meta: &meta,
            api_version: "apps/v1",
            kind: "ReplicaSet",
        };
        let mut adoption =
            AdoptionCheck::new(|| Box::pin(async { Err("rs has just been deleted".to_string()) }));
        let err = claim(
            vec![
                pod("orphan", "web", None),
                pod("mine", "web", Some("rs-uid")),
            ],
            owner,
            |_: &Pod| true,
            &mut adoption,
            |_, _, _| async { Ok(()) },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("has just been deleted"), "{err}");

        // An owner being deleted keeps what it has and neither adopts nor releases.
        let deleting = owner_meta(true);
        let owner = Owner {
            meta: &deleting,
            api_version: "apps/v1",
            kind: "ReplicaSet",
        };
        let mut adoption = AdoptionCheck::new(|| Box::pin(async { Ok(()) }));
        let claimed = claim(
            vec![
                pod("orphan", "web", None),
                pod("mine", "web", Some("rs-uid")),
                pod("mine-relabelled", "db", Some("rs-uid")),
            ],
            owner,
            |p: &Pod| p.metadata.labels.as_ref().unwrap()["app"] == "web",
            &mut adoption,
            |_, _, _| async { panic!("no patch expected") },
        )
        .await
        .unwrap();
        assert_eq!(claimed.len(), 1);
    }

    #[test]
    fn index_values() {
        let f = controller_uid_index_func::<Pod>();
        assert_eq!(f(&pod("a", "web", Some("u1"))), ["u1"]);
        assert_eq!(f(&pod("b", "web", None)), ["_orphan/ns"]);
    }
}
