//! A DaemonSet's ControllerRevisions (Kubernetes' `constructHistory`, `snapshot`,
//! `dedupCurHistories` and `cleanupHistory`), through [`crate::controller_history`].
//!
//! A revision's data is the patch that puts the DaemonSet's template back
//! (`{"spec":{"template":{…,"$patch":"replace"}}}`, what `kubectl rollout undo` applies);
//! the revision matching the current template is the current one. It is named
//! `<ds>-<hash>` after the template's `pod-template-hash`-style hash with the DaemonSet's
//! collision count, labelled `controller-revision-hash: <hash>`, carries the DaemonSet's
//! annotations (so `kubectl rollout history` shows the change cause) and the next revision
//! number. A name taken by other data bumps `status.collisionCount` and the sync is retried.

use super::Shared;
use crate::controller_history::{
    max_revision, revision_data, revision_number, revisions_to_truncate, sort_controller_revisions,
    HistoryLimit, POD_REVISION_LABEL,
};
use crate::controller_ref_manager::{recheck_deletion_timestamp, Owner};
use crate::controller_utils::{compute_hash, new_controller_ref, update_status};
use client::rest::{Api, PostParams};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// The default `revisionHistoryLimit`.
pub const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// The data of `ds`'s revision: the patch that restores its template.
pub fn ds_patch(ds: &DaemonSet) -> Value {
    let mut template = serde_json::to_value(&ds.spec.template).unwrap_or_else(|_| json!({}));
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// Whether `revision` holds `ds`'s current template.
pub fn matches(ds: &DaemonSet, revision: &ControllerRevision) -> bool {
    *revision_data(revision) == ds_patch(ds)
}

/// The revision's `controller-revision-hash` label.
pub fn revision_hash(revision: &ControllerRevision) -> Option<&str> {
    revision
        .metadata
        .labels
        .as_ref()?
        .get(POD_REVISION_LABEL)
        .map(String::as_str)
}

fn rev_api(shared: &Shared, ns: &str) -> Api<ControllerRevision> {
    Api::for_type(shared.client.clone(), ns)
}

impl Shared {
    /// The DaemonSet's current revision (created if none matches its template, renumbered
    /// to the newest if an older one does) and its old revisions.
    pub(super) async fn construct_history(
        &self,
        ds: &Arc<DaemonSet>,
        selector: &api::labels::LabelSelector,
    ) -> Result<(ControllerRevision, Vec<Arc<ControllerRevision>>), String> {
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let owner = Owner {
            meta: &ds.metadata,
            api_version: "apps/v1",
            kind: "DaemonSet",
        };
        let api: Api<DaemonSet> = Api::for_type(self.client.clone(), &ns);
        let name = ds.metadata.name.clone().unwrap_or_default();
        let mut adoption =
            recheck_deletion_timestamp(
                owner,
                async move { api.get(&name).await.map(|d| d.metadata) },
            );
        let histories = self
            .history
            .claim_controller_revisions(owner, selector, &mut adoption)
            .await
            .map_err(|e| e.to_string())?;
        let mut current = Vec::new();
        let mut old = Vec::new();
        for h in histories {
            // Revisions from before the hash label: labelled with their name.
            let h = if revision_hash(&h).is_none() {
                let patch = json!({"metadata": {"labels": {POD_REVISION_LABEL: h.metadata.name}}});
                let hname = h.metadata.name.clone().unwrap_or_default();
                Arc::new(
                    rev_api(self, &ns)
                        .patch(
                            &hname,
                            &client::rest::PatchParams::default(),
                            client::rest::PatchType::Merge,
                            &patch,
                        )
                        .await
                        .map_err(|e| format!("labelling revision {hname}: {e}"))?,
                )
            } else {
                h
            };
            if matches(ds, &h) {
                current.push(h);
            } else {
                old.push(h);
            }
        }
        let next = max_revision(&old) + 1;
        let cur = if current.is_empty() {
            self.snapshot(ds, next).await?
        } else {
            let keep = self.dedup_current(ds, current).await?;
            if revision_number(&keep) < next {
                self.history
                    .update_controller_revision(&keep, next)
                    .await
                    .map_err(|e| format!("renumbering revision: {e}"))?
            } else {
                (*keep).clone()
            }
        };
        Ok((cur, old))
    }

    /// Creates the revision of `ds`'s template as number `revision`; on a name taken by
    /// other data, bumps the collision count and fails (the sync is retried).
    async fn snapshot(&self, ds: &DaemonSet, revision: i64) -> Result<ControllerRevision, String> {
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let ds_name = ds.metadata.name.clone().unwrap_or_default();
        let collision = ds.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&ds.spec.template, collision);
        let name = format!("{ds_name}-{hash}");
        let mut labels = ds
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(POD_REVISION_LABEL.to_string(), hash);
        let owner = new_controller_ref(&ds.metadata, "apps/v1", "DaemonSet")
            .ok_or("the daemon set has no uid")?;
        let rev = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(labels),
                annotations: ds.metadata.annotations.clone(),
                owner_references: Some(vec![owner]),
                ..Default::default()
            },
            data: RawExtension(ds_patch(ds)),
            revision: Some(revision),
        };
        let api = rev_api(self, &ns);
        match api.create(&PostParams::default(), &rev).await {
            Ok(created) => Ok(created),
            Err(e) if e.is_already_exists() => {
                let existing = api
                    .get(&name)
                    .await
                    .map_err(|e| format!("reading revision {name}: {e}"))?;
                if matches(ds, &existing) {
                    return Ok(existing);
                }
                // Someone else's data under our name: move on to the next name.
                let ds_api: Api<DaemonSet> = Api::for_type(self.client.clone(), &ns);
                let mut fresh = ds_api
                    .get(&ds_name)
                    .await
                    .map_err(|e| format!("re-reading the daemon set: {e}"))?;
                let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
                if fresh_count != collision {
                    return Err(format!(
                        "found a stale collision count ({collision:?}, expected {fresh_count:?}); retrying"
                    ));
                }
                let status = fresh.status.get_or_insert_with(Default::default);
                status.collision_count = Some(collision.unwrap_or(0).saturating_add(1));
                update_status(&self.client, &fresh)
                    .await
                    .map_err(|e| format!("updating the collision count: {e}"))?;
                Err(format!(
                    "revision name {name} is taken by other data; retrying"
                ))
            }
            Err(e) => Err(format!("creating revision {name}: {e}")),
        }
    }

    /// Of several revisions of the current template, keeps the newest: pods labelled with
    /// the others' hashes are relabelled, the others deleted.
    async fn dedup_current(
        &self,
        ds: &DaemonSet,
        mut current: Vec<Arc<ControllerRevision>>,
    ) -> Result<Arc<ControllerRevision>, String> {
        sort_controller_revisions(&mut current);
        let Some(keep) = current.pop() else {
            return Err("no current revision".into());
        };
        if current.is_empty() {
            return Ok(keep);
        }
        let keep_hash = revision_hash(&keep).unwrap_or("").to_string();
        let pods = self.claimed_pods_unchecked(ds);
        for dup in &current {
            let dup_hash = revision_hash(dup).unwrap_or("");
            for pod in pods.iter().filter(|p| pod_hash(p) == Some(dup_hash)) {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("");
                let name = pod.metadata.name.as_deref().unwrap_or("");
                let patch = json!({"metadata": {"labels": {POD_REVISION_LABEL: keep_hash}}});
                self.pod_control
                    .patch(ns, name, &patch)
                    .await
                    .map_err(|e| format!("relabelling pod {name}: {e}"))?;
            }
            self.history
                .delete_controller_revision(dup)
                .await
                .map_err(|e| format!("deleting a duplicate revision: {e}"))?;
        }
        Ok(keep)
    }

    /// Deletes old revisions beyond `revisionHistoryLimit`, oldest first, never one whose
    /// hash a pod of the DaemonSet still carries.
    pub(super) async fn cleanup_history(
        &self,
        ds: &DaemonSet,
        pods: &[Arc<Pod>],
        mut old: Vec<Arc<ControllerRevision>>,
    ) -> Result<(), String> {
        let limit = ds
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_HISTORY_LIMIT)
            .max(0);
        let limit = usize::try_from(limit).unwrap_or(0);
        if old.len() <= limit {
            return Ok(());
        }
        let live: HashSet<&str> = pods.iter().filter_map(|p| pod_hash(p)).collect();
        sort_controller_revisions(&mut old);
        let doomed = revisions_to_truncate(&old, HistoryLimit::AllOld(limit), |r| {
            revision_hash(r).is_some_and(|h| live.contains(h))
        });
        for r in doomed {
            self.history
                .delete_controller_revision(&r)
                .await
                .map_err(|e| format!("deleting an old revision: {e}"))?;
        }
        Ok(())
    }
}

/// The pod's `controller-revision-hash` label.
pub fn pod_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(POD_REVISION_LABEL)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_restores_the_template() {
        let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "ds"},
            "spec": {"selector": {}, "template": {"metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}}))
        .unwrap();
        let p = ds_patch(&ds);
        assert_eq!(p["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            p["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox:1"
        );
        let rev = ControllerRevision {
            data: RawExtension(p),
            ..Default::default()
        };
        assert!(matches(&ds, &rev));
        let mut changed = ds.clone();
        changed.spec.template.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
        assert!(!matches(&changed, &rev));
    }
}
