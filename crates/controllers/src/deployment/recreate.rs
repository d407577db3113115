//! The `Recreate` strategy, after kube-controller-manager's `recreate.go`: old ReplicaSets
//! go to zero first; the new ReplicaSet is created and grown only once no old pod is left
//! running (Succeeded and Failed pods do not count).

use super::sync::{active, refs};
use super::util::*;
use super::Shared;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Whether pods of old ReplicaSets still run: the old ReplicaSets report pods, or
/// `pods_by_rs` (pods by ReplicaSet uid) holds a pod of another ReplicaSet than
/// `new_uid` that has not finished.
pub(super) fn old_pods_running(
    old: &[&ReplicaSet],
    new_uid: Option<&str>,
    pods_by_rs: &BTreeMap<String, Vec<Arc<Pod>>>,
) -> bool {
    if actual_replica_count(old) > 0 {
        return true;
    }
    pods_by_rs
        .iter()
        .filter(|(uid, _)| Some(uid.as_str()) != new_uid)
        .flat_map(|(_, pods)| pods)
        .any(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
}

impl Shared {
    /// One step of a Recreate rollout, then the rollout status.
    pub(super) async fn rollout_recreate(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<(), String> {
        let mut split = self
            .get_all_replica_sets_and_sync_revision(d, rss, false)
            .await?;
        let mut scaled_down = false;
        for i in active(rss, &split.old) {
            scaled_down |= self
                .scale_replica_set_and_record_event(d, rss, i, 0)
                .await?;
        }
        if scaled_down {
            return self.sync_rollout_status(d, rss, &split).await;
        }
        let new_uid = split.new.and_then(|i| rss[i].metadata.uid.clone());
        let pods = self.pod_map(d, rss);
        if old_pods_running(&refs(rss, &split.old), new_uid.as_deref(), &pods) {
            return self.sync_rollout_status(d, rss, &split).await;
        }
        if split.new.is_none() {
            split = self
                .get_all_replica_sets_and_sync_revision(d, rss, true)
                .await?;
        }
        if let Some(new) = split.new {
            self.scale_replica_set_and_record_event(d, rss, new, replicas(d))
                .await?;
        }
        let current = d.status.clone().unwrap_or_default();
        if deployment_complete(d, &current) {
            self.cleanup_deployment(d, rss, &split.old).await?;
        }
        self.sync_rollout_status(d, rss, &split).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{ReplicaSetSpec, ReplicaSetStatus};
    use k8s_openapi::api::core::v1::PodStatus;

    fn pod(phase: &str) -> Arc<Pod> {
        Arc::new(Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn old_pods_block_the_new_replica_set() {
        let idle = ReplicaSet {
            spec: ReplicaSetSpec::default(),
            status: Some(ReplicaSetStatus::default()),
            ..Default::default()
        };
        let mut busy = idle.clone();
        busy.status.as_mut().unwrap().replicas = 1;
        let none = BTreeMap::new();
        assert!(old_pods_running(&[&busy], None, &none));
        assert!(!old_pods_running(&[&idle], None, &none));
        let finished = BTreeMap::from([("old".to_string(), vec![pod("Succeeded"), pod("Failed")])]);
        assert!(!old_pods_running(&[&idle], Some("new"), &finished));
        let running = BTreeMap::from([("old".to_string(), vec![pod("Running")])]);
        assert!(old_pods_running(&[&idle], Some("new"), &running));
        let unknown = BTreeMap::from([("old".to_string(), vec![pod("Unknown")])]);
        assert!(old_pods_running(&[&idle], Some("new"), &unknown));
        // The new ReplicaSet's own pods do not count.
        let new_only = BTreeMap::from([("new".to_string(), vec![pod("Running")])]);
        assert!(!old_pods_running(&[&idle], Some("new"), &new_only));
    }
}
