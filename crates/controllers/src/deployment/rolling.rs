//! The `RollingUpdate` strategy, after kube-controller-manager's `rolling.go`: each sync
//! either grows the new ReplicaSet (as far as `replicas + maxSurge` allows over all
//! ReplicaSets) or shrinks old ones (first their unavailable pods, then as far as keeping
//! `replicas - maxUnavailable` available allows).
//!
//! The decisions are pure functions of the ReplicaSets ([`new_replica_set_target`],
//! [`max_scaled_down`], [`cleanup_unhealthy_plan`], [`scale_down_old_plan`]); the sync
//! applies them through the API. A simulation in the tests drives whole rollouts through
//! them and checks both bounds at every step.

use super::sync::{active, refs, Split};
use super::util::*;
use super::Shared;
use crate::controller_utils::{cmp_by_creation, rs_replicas};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

/// The available pods of a ReplicaSet that it keeps: its reported available pods, but
/// never more than its `spec.replicas`. Right after a scale-down the status still counts
/// the pods being removed; Kubernetes takes the reported number as it is, and may then
/// remove more old pods than `maxUnavailable` allows (a scaling event in the middle of a
/// rollout ends with no old pod left). Capping it keeps the bound.
fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
        .min(rs_replicas(rs))
        .max(0)
}

/// The size the new ReplicaSet `new` should have next, or `None` when it has it.
///
/// # Errors
/// As [`new_rs_new_replicas`].
pub(super) fn new_replica_set_target(
    d: &Deployment,
    rss: &[ReplicaSet],
    all: &[usize],
    new: usize,
) -> Result<Option<i32>, String> {
    let want = replicas(d);
    let size = rs_replicas(&rss[new]);
    if size == want {
        return Ok(None);
    }
    if size > want {
        return Ok(Some(want));
    }
    new_rs_new_replicas(d, &refs(rss, all), &rss[new]).map(Some)
}

/// How many old pods may go: all pods, less the minimum available, less the new
/// ReplicaSet's unavailable pods (so that a new ReplicaSet that cannot become available
/// does not drain the old ones).
pub(super) fn max_scaled_down(
    d: &Deployment,
    rss: &[ReplicaSet],
    all: &[usize],
    new: usize,
) -> i32 {
    let all_pods = replica_count(&refs(rss, all));
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = rs_replicas(&rss[new]) - available(&rss[new]);
    all_pods - min_available - new_unavailable
}

/// The old ReplicaSets `old` sorted oldest first.
pub(super) fn oldest_first(rss: &[ReplicaSet], old: &[usize]) -> Vec<usize> {
    let mut v = old.to_vec();
    v.sort_by(|&a, &b| cmp_by_creation(&rss[a], &rss[b]));
    v
}

/// New sizes for old ReplicaSets (`old`, oldest first) that shed their unavailable pods,
/// at most `max_cleanup` pods in all: these can go without lowering availability.
pub(super) fn cleanup_unhealthy_plan(
    rss: &[ReplicaSet],
    old: &[usize],
    max_cleanup: i32,
) -> Vec<(usize, i32)> {
    let mut plan = Vec::new();
    let mut total = 0;
    for &i in old {
        if total >= max_cleanup {
            break;
        }
        let size = rs_replicas(&rss[i]);
        let unhealthy = size - available(&rss[i]);
        if size == 0 || unhealthy <= 0 {
            continue;
        }
        let count = (max_cleanup - total).min(unhealthy);
        plan.push((i, size - count));
        total += count;
    }
    plan
}

/// New sizes for old ReplicaSets (`old`, oldest first) shrinking by as many pods as are
/// available beyond `replicas - max_unavailable`.
pub(super) fn scale_down_old_plan(
    d: &Deployment,
    rss: &[ReplicaSet],
    all: &[usize],
    old: &[usize],
    max_unavailable: i32,
) -> Vec<(usize, i32)> {
    let min_available = replicas(d) - max_unavailable;
    let available_pods: i64 = all.iter().map(|&i| i64::from(available(&rss[i]))).sum();
    if available_pods <= i64::from(min_available) {
        return Vec::new();
    }
    let to_scale = i32::try_from(available_pods - i64::from(min_available)).unwrap_or(i32::MAX);
    let mut plan = Vec::new();
    let mut total = 0;
    for &i in old {
        if total >= to_scale {
            break;
        }
        let size = rs_replicas(&rss[i]);
        if size == 0 {
            continue;
        }
        let count = size.min(to_scale - total);
        plan.push((i, size - count));
        total += count;
    }
    plan
}

impl Shared {
    /// One step of a rolling update (see the module docs), then the rollout status.
    pub(super) async fn rollout_rolling(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<(), String> {
        let split = self
            .get_all_replica_sets_and_sync_revision(d, rss, true)
            .await?;
        let Some(new) = split.new else {
            return Err("no new replica set".into());
        };
        let all = split.all();
        if let Some(target) = new_replica_set_target(d, rss, &all, new)? {
            if self.scale_replica_set(d, rss, new, target).await? {
                return self.sync_rollout_status(d, rss, &split).await;
            }
        }
        if self.reconcile_old_replica_sets(d, rss, &split, new).await? {
            return self.sync_rollout_status(d, rss, &split).await;
        }
        let current = d.status.clone().unwrap_or_default();
        if deployment_complete(d, &current) {
            self.cleanup_deployment(d, rss, &split.old).await?;
        }
        self.sync_rollout_status(d, rss, &split).await
    }

    /// Shrinks old ReplicaSets as far as availability allows; true if any shrank.
    async fn reconcile_old_replica_sets(
        &self,
        d: &Deployment,
        rss: &mut [ReplicaSet],
        split: &Split,
        new: usize,
    ) -> Result<bool, String> {
        let old = active(rss, &split.old);
        if replica_count(&refs(rss, &old)) == 0 {
            return Ok(false);
        }
        let all = split.all();
        let room = max_scaled_down(d, rss, &all, new);
        if room <= 0 {
            return Ok(false);
        }
        let old = oldest_first(rss, &old);
        let mut scaled = 0;
        for (i, size) in cleanup_unhealthy_plan(rss, &old, room) {
            let before = rs_replicas(&rss[i]);
            self.scale_replica_set(d, rss, i, size).await?;
            scaled += before - size;
        }
        for (i, size) in scale_down_old_plan(d, rss, &all, &old, max_unavailable(d)) {
            let before = rs_replicas(&rss[i]);
            self.scale_replica_set(d, rss, i, size).await?;
            scaled += before - size;
        }
        Ok(scaled > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller_utils::rs_replicas;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetSpec, ReplicaSetStatus,
        RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use k8s_openapi::jiff::Timestamp;

    fn dep(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn rs(name: &str, size: i32, available: i32, created: i64) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(size),
                ..Default::default()
            },
            status: Some(ReplicaSetStatus {
                replicas: size,
                available_replicas: Some(available),
                ..Default::default()
            }),
        }
    }

    /// One sync of the rolling strategy on in-memory ReplicaSets (the new one last), as
    /// `rollout_rolling` applies it.
    fn step(d: &Deployment, rss: &mut [ReplicaSet]) {
        let new = rss.len() - 1;
        let split = Split {
            new: Some(new),
            old: (0..new).collect(),
        };
        let all = split.all();
        if let Some(t) = new_replica_set_target(d, rss, &all, new).unwrap() {
            if t != rs_replicas(&rss[new]) {
                rss[new].spec.replicas = Some(t);
                return;
            }
        }
        let old = active(rss, &split.old);
        if replica_count(&refs(rss, &old)) == 0 {
            return;
        }
        let room = max_scaled_down(d, rss, &all, new);
        if room <= 0 {
            return;
        }
        let old = oldest_first(rss, &old);
        for (i, size) in cleanup_unhealthy_plan(rss, &old, room) {
            rss[i].spec.replicas = Some(size);
        }
        for (i, size) in scale_down_old_plan(d, rss, &all, &old, max_unavailable(d)) {
            rss[i].spec.replicas = Some(size);
        }
    }

    /// The world catching up: removed pods are gone at once; the new ReplicaSet's pods
    /// become available `per_tick` at a time (old pods stay as available as they were).
    fn tick(rss: &mut [ReplicaSet], per_tick: i32) {
        let new = rss.len() - 1;
        for (i, rs) in rss.iter_mut().enumerate() {
            let size = rs_replicas(rs);
            let status = rs.status.get_or_insert_with(Default::default);
            let was = status.available_replicas.unwrap_or(0);
            let now = if i == new {
                (was + per_tick).min(size)
            } else {
                was.min(size)
            };
            status.replicas = size;
            status.available_replicas = Some(now);
        }
    }

    /// Rolls `replicas` pods from an old ReplicaSet to a new one and checks, after every
    /// step, that the ReplicaSets never exceed `replicas + maxSurge` and availability
    /// never drops below `replicas - maxUnavailable`. Returns the number of steps.
    fn simulate(
        replicas: i32,
        surge: IntOrString,
        unavailable: IntOrString,
        per_tick: i32,
    ) -> usize {
        let d = dep(replicas, surge, unavailable);
        let (max_total, min_avail) = (replicas + max_surge(&d), replicas - max_unavailable(&d));
        let mut rss = vec![rs("old", replicas, replicas, 1), rs("new", 0, 0, 2)];
        for steps in 1..=1000 {
            step(&d, &mut rss);
            let total: i32 = rss.iter().map(rs_replicas).sum();
            assert!(
                total <= max_total,
                "{replicas} replicas: {total} > {max_total} after step {steps}"
            );
            tick(&mut rss, per_tick);
            let avail: i32 = rss.iter().map(available).sum();
            assert!(
                avail >= min_avail,
                "{replicas} replicas: {avail} available < {min_avail} at step {steps}"
            );
            if rs_replicas(&rss[0]) == 0
                && rs_replicas(&rss[1]) == replicas
                && available(&rss[1]) == replicas
            {
                return steps;
            }
        }
        panic!(
            "the rollout of {replicas} did not finish: {:?}",
            rss.iter().map(rs_replicas).collect::<Vec<_>>()
        );
    }

    #[test]
    fn rollouts_respect_surge_and_unavailability() {
        let p = |s: &str| IntOrString::String(s.into());
        let i = IntOrString::Int;
        for (replicas, surge, unavailable) in [
            (10, p("25%"), p("25%")),
            (3, i(1), i(0)),
            (3, i(0), i(1)),
            (10, p("30%"), p("0%")),
            (1, p("25%"), p("25%")),
            (5, p("0%"), p("1%")),
            (7, i(10), i(10)),
            (100, p("25%"), p("25%")),
        ] {
            for per_tick in [1, 3, 1000] {
                simulate(replicas, surge.clone(), unavailable.clone(), per_tick);
            }
        }
    }

    #[test]
    fn the_first_steps_of_a_rollout() {
        // 10 replicas, maxSurge 3, maxUnavailable 2 (the example of kube-controller-manager).
        let d = dep(10, IntOrString::Int(3), IntOrString::Int(2));
        let mut rss = vec![rs("old", 10, 10, 1), rs("new", 0, 0, 2)];
        step(&d, &mut rss);
        assert_eq!(
            rss.iter().map(rs_replicas).collect::<Vec<_>>(),
            [10, 3],
            "surge first"
        );
        step(&d, &mut rss);
        // Nothing new is available: old may lose only the 2 it can spare.
        assert_eq!(rss.iter().map(rs_replicas).collect::<Vec<_>>(), [8, 3]);
        // While the old ReplicaSet still has its 10 pods, the new one may not grow.
        step(&d, &mut rss);
        assert_eq!(rss.iter().map(rs_replicas).collect::<Vec<_>>(), [8, 3]);
        // Its 2 pods gone (and none of the new ones available yet), the surge moves on.
        tick(&mut rss, 0);
        step(&d, &mut rss);
        assert_eq!(rss.iter().map(rs_replicas).collect::<Vec<_>>(), [8, 5]);
        // The new pods never become available: 13 - 8 - 5 = 0, old stays at 8.
        step(&d, &mut rss);
        assert_eq!(rss.iter().map(rs_replicas).collect::<Vec<_>>(), [8, 5]);
    }

    #[test]
    fn unhealthy_old_pods_go_first() {
        let d = dep(10, IntOrString::Int(0), IntOrString::Int(2));
        // Two old ReplicaSets, the older with 3 unavailable pods.
        let rss = vec![
            rs("oldest", 5, 2, 1),
            rs("older", 5, 5, 2),
            rs("new", 0, 0, 3),
        ];
        let room = max_scaled_down(&d, &rss, &[0, 1, 2], 2);
        assert_eq!(room, 2);
        assert_eq!(cleanup_unhealthy_plan(&rss, &[0, 1], room), [(0, 3)]);
        assert_eq!(cleanup_unhealthy_plan(&rss, &[0, 1], 10), [(0, 2)]);
        // Available 7 < min 8: no further scale down.
        assert!(scale_down_old_plan(&d, &rss, &[0, 1, 2], &[0, 1], 2).is_empty());
    }

    #[test]
    fn a_status_that_lags_a_scale_down_does_not_drain_old_pods() {
        // Scaled from 14 to 5 a moment ago: the status still reports 14 available pods.
        let d = dep(5, IntOrString::Int(3), IntOrString::Int(2));
        let mut old = rs("old", 5, 14, 1);
        old.status.as_mut().unwrap().replicas = 14;
        let rss = vec![old, rs("new", 3, 0, 2)];
        // Only the 2 that maxUnavailable allows may go: 3 stay available.
        assert_eq!(scale_down_old_plan(&d, &rss, &[0, 1], &[0], 2), [(0, 3)]);
        assert!(cleanup_unhealthy_plan(&rss, &[0], 10).is_empty());
    }
}
