//! The steps every kind of Deployment sync shares, after kube-controller-manager's
//! `sync.go`: finding or creating the new ReplicaSet and keeping revisions, scaling
//! (proportionally during a rollout), cleaning up old ReplicaSets, and the status.

use super::util::*;
use super::Shared;
use crate::controller_utils::{
    cmp_by_creation, cmp_by_size_newer, cmp_by_size_older, compute_hash, is_namespace_terminating,
    new_controller_ref, nonzero, rs_replicas,
};
use client::rest::{Api, DeleteParams, PostParams};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// A Deployment's ReplicaSets, by index into the list the sync works on: the new one (if
/// it exists) and the old ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Split {
    pub new: Option<usize>,
    pub old: Vec<usize>,
}

impl Split {
    /// The old ReplicaSets and the new one.
    pub fn all(&self) -> Vec<usize> {
        self.old.iter().copied().chain(self.new).collect()
    }
}

/// References to the ReplicaSets at `idx`.
pub(super) fn refs<'a>(rss: &'a [ReplicaSet], idx: &[usize]) -> Vec<&'a ReplicaSet> {
    idx.iter().map(|&i| &rss[i]).collect()
}

/// The indices among `idx` of ReplicaSets with replicas.
pub(super) fn active(rss: &[ReplicaSet], idx: &[usize]) -> Vec<usize> {
    idx.iter()
        .copied()
        .filter(|&i| rs_replicas(&rss[i]) > 0)
        .collect()
}

/// The only active ReplicaSet, or the newest if none is active (new first, then the
/// newest old one); `None` when several are active.
pub(super) fn find_active_or_latest(rss: &[ReplicaSet], split: &Split) -> Option<usize> {
    if split.new.is_none() && split.old.is_empty() {
        return None;
    }
    let mut old = split.old.clone();
    old.sort_by(|&a, &b| cmp_by_creation(&rss[b], &rss[a]));
    let all: Vec<usize> = old.iter().copied().chain(split.new).collect();
    let live = active(rss, &all);
    match live.len() {
        0 => split.new.or_else(|| old.first().copied()),
        1 => Some(live[0]),
        _ => None,
    }
}

/// The sizes proportional scaling gives the active ReplicaSets `idx` when the Deployment's
/// total (`replicas + maxSurge`) changed: each gets its share of the difference, the
/// rounding leftovers go to the largest (when growing, newer first; when shrinking, older
/// first). Returns every active ReplicaSet with its new size.
pub(super) fn proportional_sizes(
    d: &Deployment,
    rss: &[ReplicaSet],
    idx: &[usize],
) -> Vec<(usize, i32)> {
    let mut all = active(rss, idx);
    let total = replica_count(&refs(rss, &all));
    let allowed = if replicas(d) > 0 {
        replicas(d).saturating_add(max_surge(d))
    } else {
        0
    };
    let to_add = allowed.saturating_sub(total);
    match to_add {
        n if n > 0 => all.sort_by(|&a, &b| cmp_by_size_newer(&rss[a], &rss[b])),
        n if n < 0 => all.sort_by(|&a, &b| cmp_by_size_older(&rss[a], &rss[b])),
        _ => {}
    }
    let mut added = 0;
    let mut sizes: Vec<(usize, i32)> = all
        .iter()
        .map(|&i| {
            let size = rs_replicas(&rss[i]);
            if to_add == 0 {
                return (i, size);
            }
            let share = get_proportion(&rss[i], d, to_add, added);
            added += share;
            (i, size.saturating_add(share))
        })
        .collect();
    if to_add != 0 {
        if let Some(first) = sizes.first_mut() {
            first.1 = first.1.saturating_add(to_add - added).max(0);
        }
    }
    sizes
}

/// The Deployment's status computed from its ReplicaSets `all` (the new one `new`), with
/// the `Available` condition brought up to date at `now`.
pub(super) fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let available = available_replica_count(all);
    let total = replica_count(all);
    let unavailable = total.saturating_sub(available).max(0);
    let current = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: nonzero(actual_replica_count(all)),
        updated_replicas: nonzero(new.map_or(0, |rs| actual_replica_count(&[rs]))),
        ready_replicas: nonzero(ready_replica_count(all)),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero(unavailable),
        collision_count: current.collision_count,
        conditions: current.conditions.clone(),
        terminating_replicas: None,
    };
    let cond = if available >= replicas(d) - max_unavailable(d) {
        new_condition(
            AVAILABLE,
            "True",
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        new_condition(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set_condition(&mut status, cond);
    status
}

/// Whether two statuses say the same, zeros written or left out alike.
pub(super) fn status_eq(a: Option<&DeploymentStatus>, b: &DeploymentStatus) -> bool {
    let default = DeploymentStatus::default();
    let a = a.unwrap_or(&default);
    let n = |v: Option<i32>| v.unwrap_or(0);
    let conds = |s: &DeploymentStatus| -> Vec<DeploymentCondition> {
        s.conditions.clone().unwrap_or_default()
    };
    a.observed_generation.unwrap_or(0) == b.observed_generation.unwrap_or(0)
        && n(a.replicas) == n(b.replicas)
        && n(a.updated_replicas) == n(b.updated_replicas)
        && n(a.ready_replicas) == n(b.ready_replicas)
        && n(a.available_replicas) == n(b.available_replicas)
        && n(a.unavailable_replicas) == n(b.unavailable_replicas)
        && a.collision_count == b.collision_count
        && conds(a) == conds(b)
}

/// Sets the Deployment's revision annotation; true if it changed.
pub(super) fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if annotations.get(REVISION_ANNOTATION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION_ANNOTATION.to_string(), revision.to_string());
    true
}

impl Shared {
    /// Finds the new ReplicaSet (creating it when `create`), brings its revision and
    /// annotations up to date, and splits `rss` into new and old.
    pub(super) async fn get_all_replica_sets_and_sync_revision(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Result<Split, String> {
        let existing = find_new_replica_set(d, rss);
        let old: Vec<usize> = (0..rss.len()).filter(|&i| Some(i) != existing).collect();
        let new = self
            .get_new_replica_set(d, rss, existing, &old, create)
            .await?;
        Ok(Split { new, old })
    }

    async fn get_new_replica_set(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
        existing: Option<usize>,
        old: &[usize],
        create: bool,
    ) -> Result<Option<usize>, String> {
        let new_revision = max_revision(&refs(rss, old)).saturating_add(1).to_string();
        let now = self.wall.now();
        if let Some(i) = existing {
            let mut copy = rss[i].clone();
            let annotations_updated = set_new_replica_set_annotations(
                d,
                &mut copy,
                &new_revision,
                true,
                MAX_REV_HISTORY_LENGTH_IN_CHARS,
            );
            let min_ready_changed =
                copy.spec.min_ready_seconds.unwrap_or(0) != d.spec.min_ready_seconds.unwrap_or(0);
            if annotations_updated || min_ready_changed {
                copy.spec.min_ready_seconds = d.spec.min_ready_seconds;
                rss[i] = self.update_replica_set(&copy).await?;
                return Ok(Some(i));
            }
            let revision = copy
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let mut needs_update = set_deployment_revision(d, &revision);
            let no_progress_condition = d
                .status
                .as_ref()
                .is_none_or(|s| get_condition(s, PROGRESSING).is_none());
            if has_progress_deadline(d) && no_progress_condition {
                let name = copy.metadata.name.clone().unwrap_or_default();
                set_condition(
                    d.status.get_or_insert_with(Default::default),
                    new_condition(
                        PROGRESSING,
                        "True",
                        FOUND_NEW_RS_REASON,
                        format!("Found new replica set {name:?}"),
                        now,
                    ),
                );
                needs_update = true;
            }
            if needs_update {
                self.write_status(d).await?;
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }

        // The new ReplicaSet does not exist yet: create it.
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let mut template = d.spec.template.clone();
        let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&template, collision_count);
        let template_meta = template.metadata.get_or_insert_with(Default::default);
        template_meta
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH_LABEL.to_string(), hash.clone());
        let labels = template_meta.labels.clone();
        let mut selector = d.spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH_LABEL.to_string(), hash.clone());
        let name = format!("{}-{hash}", d.metadata.name.as_deref().unwrap_or(""));
        let owner = new_controller_ref(&d.metadata, "apps/v1", "Deployment")
            .ok_or("the deployment has no uid")?;
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                owner_references: Some(vec![owner]),
                labels,
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: d.spec.min_ready_seconds,
                selector,
                template: Some(template),
            },
            status: None,
        };
        let count = {
            let mut all = refs(rss, old);
            all.push(&new_rs);
            new_rs_new_replicas(d, &all, &new_rs)?
        };
        new_rs.spec.replicas = Some(count);
        set_new_replica_set_annotations(
            d,
            &mut new_rs,
            &new_revision,
            false,
            MAX_REV_HISTORY_LENGTH_IN_CHARS,
        );
        let api: Api<ReplicaSet> = Api::for_type(self.client.clone(), &ns);
        let (created, already_existed) = match api.create(&PostParams::default(), &new_rs).await {
            Ok(created) => (created, false),
            Err(e) if e.is_already_exists() => {
                // A slow cache, or a hash collision with a ReplicaSet of another template.
                let found = self
                    .rs_lister
                    .get(Some(&ns), &name)
                    .ok_or_else(|| format!("replica set {name:?} exists but is not cached yet"))?;
                let ours = crate::controller_utils::controller_of(&found.metadata)
                    .is_some_and(|r| Some(r.uid.as_str()) == d.metadata.uid.as_deref());
                let same = found
                    .spec
                    .template
                    .as_ref()
                    .is_some_and(|t| equal_ignore_hash(&d.spec.template, t));
                if !(ours && same) {
                    let status = d.status.get_or_insert_with(Default::default);
                    let before = status.collision_count.unwrap_or(0);
                    status.collision_count = Some(before.saturating_add(1));
                    self.write_status(d).await?;
                    tracing::info!(
                        deployment = d.metadata.name.as_deref().unwrap_or(""),
                        collision_count = before.saturating_add(1),
                        "hash collision: bumped the collision count"
                    );
                    return Err(format!("replica set {name:?} exists with another template"));
                }
                ((*found).clone(), true)
            }
            Err(e) if is_namespace_terminating(&e) => return Err(e.to_string()),
            Err(e) => {
                let msg = format!(
                    "Failed to create new replica set {name:?}: {}",
                    crate::controller_utils::error_message(&e)
                );
                if has_progress_deadline(d) {
                    set_condition(
                        d.status.get_or_insert_with(Default::default),
                        new_condition(
                            PROGRESSING,
                            "False",
                            FAILED_RS_CREATE_REASON,
                            msg.clone(),
                            now,
                        ),
                    );
                    // The failure to report matters more than this write's.
                    let _ = self.write_status(d).await;
                }
                self.warn(d, FAILED_RS_CREATE_REASON, msg.clone());
                return Err(msg);
            }
        };
        if !already_existed && count > 0 {
            self.normal(
                d,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {count}"),
            );
        }
        let mut needs_update = set_deployment_revision(d, &new_revision);
        if !already_existed && has_progress_deadline(d) {
            set_condition(
                d.status.get_or_insert_with(Default::default),
                new_condition(
                    PROGRESSING,
                    "True",
                    NEW_REPLICA_SET_REASON,
                    format!("Created new replica set {name:?}"),
                    now,
                ),
            );
            needs_update = true;
        }
        if needs_update {
            self.write_status(d).await?;
        }
        let index = match rss
            .iter()
            .position(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
        {
            Some(i) => {
                rss[i] = created;
                i
            }
            None => {
                rss.push(created);
                rss.len() - 1
            }
        };
        Ok(Some(index))
    }

    /// Sets ReplicaSet `i` to `size` replicas and the Deployment's replicas annotations
    /// (when either differs). True if its size changed.
    pub(super) async fn scale_replica_set(
        &self,
        d: &Deployment,
        rss: &mut [ReplicaSet],
        i: usize,
        size: i32,
    ) -> Result<bool, String> {
        let current = rs_replicas(&rss[i]);
        let (desired, max) = (replicas(d), replicas(d).saturating_add(max_surge(d)));
        let size_changed = current != size;
        if !size_changed && !replicas_annotations_need_update(&rss[i], desired, max) {
            return Ok(false);
        }
        let mut copy = rss[i].clone();
        copy.spec.replicas = Some(size);
        set_replicas_annotations(&mut copy, desired, max);
        rss[i] = self.update_replica_set(&copy).await?;
        if size_changed {
            let verb = if current < size { "up" } else { "down" };
            let name = rss[i].metadata.name.clone().unwrap_or_default();
            self.normal(
                d,
                "ScalingReplicaSet",
                format!("Scaled {verb} replica set {name} from {current} to {size}"),
            );
        }
        Ok(size_changed)
    }

    /// [`Shared::scale_replica_set`] unless the size is already right.
    pub(super) async fn scale_replica_set_and_record_event(
        &self,
        d: &Deployment,
        rss: &mut [ReplicaSet],
        i: usize,
        size: i32,
    ) -> Result<bool, String> {
        if rs_replicas(&rss[i]) == size {
            return Ok(false);
        }
        self.scale_replica_set(d, rss, i, size).await
    }

    /// Scales for a change of `spec.replicas` (or of a paused Deployment): the only active
    /// ReplicaSet takes all; a saturated new one leaves the old ones at zero; otherwise all
    /// active ones are scaled proportionally (RollingUpdate).
    pub(super) async fn scale(
        &self,
        d: &Deployment,
        rss: &mut [ReplicaSet],
        split: &Split,
    ) -> Result<(), String> {
        if let Some(i) = find_active_or_latest(rss, split) {
            if rs_replicas(&rss[i]) != replicas(d) {
                self.scale_replica_set_and_record_event(d, rss, i, replicas(d))
                    .await?;
            }
            return Ok(());
        }
        if let Some(n) = split.new {
            if is_saturated(d, &rss[n]) {
                for i in active(rss, &split.old) {
                    self.scale_replica_set_and_record_event(d, rss, i, 0)
                        .await?;
                }
                return Ok(());
            }
        }
        if is_rolling_update(d) {
            for (i, size) in proportional_sizes(d, rss, &split.all()) {
                self.scale_replica_set(d, rss, i, size).await?;
            }
        }
        Ok(())
    }

    /// Deletes the oldest old ReplicaSets beyond `revisionHistoryLimit` that have scaled to
    /// zero (and whose controller saw that).
    pub(super) async fn cleanup_deployment(
        &self,
        d: &Deployment,
        rss: &[ReplicaSet],
        old: &[usize],
    ) -> Result<(), String> {
        if !has_revision_history_limit(d) {
            return Ok(());
        }
        let limit = d.spec.revision_history_limit.unwrap_or(0).max(0) as usize;
        let mut cleanable: Vec<usize> = old
            .iter()
            .copied()
            .filter(|&i| rss[i].metadata.deletion_timestamp.is_none())
            .collect();
        if cleanable.len() <= limit {
            return Ok(());
        }
        let diff = cleanable.len() - limit;
        cleanable.sort_by(|&a, &b| {
            let ra = revision(&rss[a]).unwrap_or(0);
            let rb = revision(&rss[b]).unwrap_or(0);
            ra.cmp(&rb).then_with(|| cmp_by_creation(&rss[a], &rss[b]))
        });
        for &i in &cleanable[..diff] {
            let rs = &rss[i];
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0)
            {
                continue;
            }
            let name = rs.metadata.name.clone().unwrap_or_default();
            let api: Api<ReplicaSet> = Api::for_type(
                self.client.clone(),
                rs.metadata.namespace.as_deref().unwrap_or(""),
            );
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(format!("deleting old replica set {name}: {e}")),
            }
        }
        Ok(())
    }

    /// Writes the status computed from the ReplicaSets, if it changed.
    pub(super) async fn sync_deployment_status(
        &self,
        d: &mut Deployment,
        rss: &[ReplicaSet],
        split: &Split,
    ) -> Result<(), String> {
        let all = refs(rss, &split.all());
        let status = calculate_status(d, &all, split.new.map(|i| &rss[i]), self.wall.now());
        if status_eq(d.status.as_ref(), &status) {
            return Ok(());
        }
        d.status = Some(status);
        self.write_status(d).await
    }

    /// Whether `spec.replicas` changed since the active ReplicaSets were last scaled.
    pub(super) async fn is_scaling_event(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<bool, String> {
        let split = self
            .get_all_replica_sets_and_sync_revision(d, rss, false)
            .await?;
        let want = replicas(d);
        Ok(active(rss, &split.all())
            .into_iter()
            .filter_map(|i| desired_replicas_annotation(&rss[i]))
            .any(|desired| desired != want))
    }

    /// A scaling event, or a paused Deployment: scale, clean up (when paused), status.
    pub(super) async fn sync(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<(), String> {
        let split = self
            .get_all_replica_sets_and_sync_revision(d, rss, false)
            .await?;
        self.scale(d, rss, &split).await?;
        if d.spec.paused == Some(true) && super::rollback::rollback_to(d).is_none() {
            self.cleanup_deployment(d, rss, &split.old).await?;
        }
        self.sync_deployment_status(d, rss, &split).await
    }

    /// A Deployment being deleted: only its status.
    pub(super) async fn sync_status_only(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<(), String> {
        let split = self
            .get_all_replica_sets_and_sync_revision(d, rss, false)
            .await?;
        self.sync_deployment_status(d, rss, &split).await
    }

    /// Marks a paused Deployment `Progressing=Unknown` (`DeploymentPaused`), and a resumed
    /// one `DeploymentResumed`, so that the pause does not count against the progress
    /// deadline.
    pub(super) async fn check_paused_conditions(&self, d: &mut Deployment) -> Result<(), String> {
        if !has_progress_deadline(d) {
            return Ok(());
        }
        let status = d.status.clone().unwrap_or_default();
        let cond = get_condition(&status, PROGRESSING);
        if cond.is_some_and(|c| c.reason.as_deref() == Some(TIMED_OUT_REASON)) {
            return Ok(());
        }
        let paused_cond = cond.is_some_and(|c| c.reason.as_deref() == Some(PAUSED_DEPLOY_REASON));
        let paused = d.spec.paused == Some(true);
        let now = self.wall.now();
        let update = if paused && !paused_cond {
            new_condition(
                PROGRESSING,
                "Unknown",
                PAUSED_DEPLOY_REASON,
                "Deployment is paused".into(),
                now,
            )
        } else if !paused && paused_cond {
            new_condition(
                PROGRESSING,
                "Unknown",
                RESUMED_DEPLOY_REASON,
                "Deployment is resumed".into(),
                now,
            )
        } else {
            return Ok(());
        };
        set_condition(d.status.get_or_insert_with(Default::default), update);
        self.write_status(d).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn dep(replicas: i32, surge: i32, unavailable: i32) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                generation: Some(4),
                ..Default::default()
            },
            spec: DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(IntOrString::Int(surge)),
                        max_unavailable: Some(IntOrString::Int(unavailable)),
                    }),
                }),
                ..Default::default()
            },
            status: None,
        }
    }

    fn rs(name: &str, replicas: i32, available: i32, created: i64, max: Option<i32>) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                annotations: max.map(|m| {
                    BTreeMap::from([(MAX_REPLICAS_ANNOTATION.to_string(), m.to_string())])
                }),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            },
            status: Some(ReplicaSetStatus {
                replicas,
                ready_replicas: Some(available),
                available_replicas: Some(available),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn active_or_latest() {
        let rss = vec![
            rs("a", 0, 0, 1, None),
            rs("b", 0, 0, 2, None),
            rs("c", 3, 3, 3, None),
        ];
        let split = Split {
            new: Some(2),
            old: vec![0, 1],
        };
        assert_eq!(find_active_or_latest(&rss, &split), Some(2));
        let idle = vec![rs("a", 0, 0, 1, None), rs("b", 0, 0, 2, None)];
        // None active: the new one, else the newest old one.
        assert_eq!(
            find_active_or_latest(
                &idle,
                &Split {
                    new: None,
                    old: vec![0, 1]
                }
            ),
            Some(1)
        );
        assert_eq!(
            find_active_or_latest(
                &idle,
                &Split {
                    new: Some(0),
                    old: vec![1]
                }
            ),
            Some(0)
        );
        let two = vec![rs("a", 2, 2, 1, None), rs("b", 1, 1, 2, None)];
        assert_eq!(
            find_active_or_latest(
                &two,
                &Split {
                    new: Some(1),
                    old: vec![0]
                }
            ),
            None
        );
        assert_eq!(find_active_or_latest(&two, &Split::default()), None);
    }

    #[test]
    fn proportional_scaling_during_a_rollout() {
        // Mid-rollout at 10 + 3: old 8, new 5. Scaled to 20: 10 more, 6 and 4.
        let rss = vec![rs("old", 8, 8, 1, Some(13)), rs("new", 5, 0, 2, Some(13))];
        let d = dep(20, 3, 2);
        let mut sizes = proportional_sizes(&d, &rss, &[0, 1]);
        sizes.sort();
        assert_eq!(sizes, [(0, 14), (1, 9)]);
        // Scaled to 5 (+3 = 8): 5 fewer, taken 3 and 2.
        let d = dep(5, 3, 2);
        let mut sizes = proportional_sizes(&d, &rss, &[0, 1]);
        sizes.sort();
        assert_eq!(sizes, [(0, 5), (1, 3)]);
        // Scaled to 0: everything goes.
        let d = dep(0, 3, 2);
        assert!(proportional_sizes(&d, &rss, &[0, 1])
            .iter()
            .all(|(_, s)| *s == 0));
        // Rounding leftovers go to the largest: three equal ReplicaSets, one more replica
        // (old-to-new tie order: when growing, the newest first).
        let even = vec![
            rs("x", 2, 2, 1, Some(6)),
            rs("y", 2, 2, 2, Some(6)),
            rs("z", 2, 2, 3, Some(6)),
        ];
        let d = dep(7, 0, 1);
        let mut sizes = proportional_sizes(&d, &even, &[0, 1, 2]);
        sizes.sort();
        // 2 * 7 / 6 = 2.33 → 2 each: the one leftover goes to the newest (z).
        assert_eq!(sizes, [(0, 2), (1, 2), (2, 3)]);
        // When shrinking, the oldest loses the leftover.
        let d = dep(5, 0, 1);
        let mut sizes = proportional_sizes(&d, &even, &[0, 1, 2]);
        sizes.sort();
        // 2 * 5 / 6 = 1.67 → 2 each: the one leftover comes off the oldest (x).
        assert_eq!(sizes, [(0, 1), (1, 2), (2, 2)]);
        // The sum always lands on replicas + surge.
        for want in 0..30 {
            let d = dep(want, 2, 1);
            let total: i32 = proportional_sizes(&d, &rss, &[0, 1])
                .iter()
                .map(|(_, s)| s)
                .sum();
            let expect = if want == 0 { 0 } else { want + 2 };
            assert_eq!(total, expect, "scaled to {want}");
        }
    }

    #[test]
    fn extreme_sizes_saturate_instead_of_overflowing() {
        let max = i32::MAX;
        let d = dep(max, max, max);
        let rss = vec![
            rs("old", max, max, 1, Some(max)),
            rs("new", max, 0, 2, Some(1)),
        ];
        let sizes = proportional_sizes(&d, &rss, &[0, 1]);
        assert!(sizes.iter().all(|(_, s)| *s >= 0));
        let all = refs(&rss, &[0, 1]);
        let s = calculate_status(&d, &all, Some(&rss[1]), Timestamp::from_second(1).unwrap());
        assert!(s.unavailable_replicas.unwrap_or(0) >= 0);
        assert!(new_rs_new_replicas(&d, &all, &rss[1]).is_ok());
        let mut garbage = rss[0].clone();
        garbage.metadata.annotations = Some(BTreeMap::from([(
            REVISION_ANNOTATION.to_string(),
            i64::MAX.to_string(),
        )]));
        assert_eq!(max_revision(&[&garbage]).saturating_add(1), i64::MAX);
        let mut fresh = rs("fresh", 0, 0, 3, None);
        assert!(set_new_replica_set_annotations(
            &d, &mut fresh, "1", false, 10
        ));
        assert!(!deployment_progressing(
            &Deployment {
                status: Some(DeploymentStatus {
                    replicas: Some(i32::MIN),
                    updated_replicas: Some(i32::MAX),
                    ..Default::default()
                }),
                ..d.clone()
            },
            &DeploymentStatus {
                replicas: Some(i32::MIN),
                updated_replicas: Some(i32::MAX),
                ..Default::default()
            }
        ));
    }

    #[test]
    fn status_from_replica_sets() {
        let rss = vec![rs("old", 2, 2, 1, None), rs("new", 3, 1, 2, None)];
        let d = dep(4, 1, 1);
        let all = refs(&rss, &[0, 1]);
        let now = Timestamp::from_second(100).unwrap();
        let s = calculate_status(&d, &all, Some(&rss[1]), now);
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(
            (s.replicas, s.updated_replicas, s.available_replicas),
            (Some(5), Some(3), Some(3))
        );
        assert_eq!(s.unavailable_replicas, Some(2));
        let c = get_condition(&s, AVAILABLE).unwrap();
        assert_eq!(
            (c.status.as_deref(), c.reason.as_deref()),
            (Some("True"), Some(MINIMUM_REPLICAS_AVAILABLE))
        );
        // 3 available < 4 - 0: not available with maxUnavailable 0 (surge 1).
        let strict = dep(4, 1, 0);
        let s2 = calculate_status(&strict, &all, Some(&rss[1]), now);
        assert_eq!(
            get_condition(&s2, AVAILABLE).unwrap().status.as_deref(),
            Some("False")
        );
        // Computing it again on the written status changes nothing.
        let mut written = d.clone();
        written.status = Some(s.clone());
        let again = calculate_status(
            &written,
            &all,
            Some(&rss[1]),
            Timestamp::from_second(200).unwrap(),
        );
        assert!(status_eq(written.status.as_ref(), &again));
        // Zeros left out by one server and written by another are the same.
        let mut explicit = s.clone();
        explicit.ready_replicas = explicit.ready_replicas.or(Some(0));
        let none = DeploymentStatus {
            conditions: s.conditions.clone(),
            ..Default::default()
        };
        let zeros = DeploymentStatus {
            replicas: Some(0),
            ready_replicas: Some(0),
            conditions: s.conditions.clone(),
            ..Default::default()
        };
        assert!(status_eq(Some(&none), &zeros));
        assert!(!status_eq(Some(&none), &explicit));
    }
}
