//! The `RollingUpdate` strategy of a DaemonSet: which old pods to delete and which nodes get
//! a new pod, within `maxUnavailable` and `maxSurge` (Kubernetes' `rollingUpdate`).
//!
//! Both are resolved against the number of nodes that should run the pod, rounding
//! percentages up; when both come to 0 one pod may be unavailable.
//! - **Without surge** an old pod is deleted (and replaced by the manage step) while fewer
//!   than `maxUnavailable` nodes are unavailable; an old pod that is not available anyway
//!   is always replaced.
//! - **With surge** a new pod is started beside an old one on up to `maxSurge` nodes at once
//!   (always where the old pod is not available), and the old pod is deleted once the new one
//!   is available.

use super::pods::{find_updated_pods_on_node, NodesToPods};
use crate::controller_utils::is_pod_available;
use crate::deployment::util::int_or_percent;
use k8s_openapi::api::apps::v1::{DaemonSet, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;

/// The rolling-update parameters of `ds`, if it updates with `RollingUpdate`.
fn rolling(ds: &DaemonSet) -> Option<&RollingUpdateDaemonSet> {
    let s = ds.spec.update_strategy.as_ref()?;
    if s.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    s.rolling_update.as_ref()
}

/// Whether `ds` updates with `OnDelete` (pods are replaced only when deleted by someone).
pub fn is_on_delete(ds: &DaemonSet) -> bool {
    ds.spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        == Some("OnDelete")
}

fn scaled(v: Option<&IntOrString>, desired: i32) -> Result<i32, String> {
    match v {
        None => Ok(0),
        Some(v) => int_or_percent(v, desired, true),
    }
}

/// `maxSurge` against `desired` nodes (0 without a rolling update).
///
/// # Errors
/// A malformed percentage.
pub fn surge_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    scaled(rolling(ds).and_then(|r| r.max_surge.as_ref()), desired)
}

/// `maxUnavailable` against `desired` nodes (0 without a rolling update).
///
/// # Errors
/// A malformed percentage.
pub fn unavailable_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    scaled(
        rolling(ds).and_then(|r| r.max_unavailable.as_ref()),
        desired,
    )
}

/// Whether `ds` surges (a nonzero `maxSurge`).
pub fn allows_surge(ds: &DaemonSet) -> bool {
    surge_count(ds, 1).is_ok_and(|n| n != 0)
}

/// (maxSurge, maxUnavailable) for `desired` nodes, at least one unavailable when both are 0.
///
/// # Errors
/// A malformed percentage.
pub fn max_counts(ds: &DaemonSet, desired: i32) -> Result<(i32, i32), String> {
    let surge = surge_count(ds, desired)?;
    let mut unavailable = unavailable_count(ds, desired)?;
    if desired > 0 && surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// What one rolling-update step does.
#[derive(Debug, Default)]
pub struct RollingPlan {
    /// Old pods to delete.
    pub delete: Vec<Arc<Pod>>,
    /// Nodes that get a new pod beside their old one (surge only).
    pub create_on: Vec<String>,
}

/// One rolling-update step over `by_node` (every node that should run the pod has an entry,
/// empty when it has no pods), for revision `hash`, at `now`.
pub fn plan(
    by_node: &NodesToPods,
    hash: &str,
    generation: Option<i64>,
    (max_surge, max_unavailable): (i32, i32),
    min_ready_seconds: i32,
    now: Timestamp,
) -> RollingPlan {
    let available = |p: &Pod| is_pod_available(p, min_ready_seconds, now);
    let limit = |n: i32| usize::try_from(n.max(0)).unwrap_or(0);
    let mut out = RollingPlan::default();
    if max_surge == 0 {
        let mut unavailable = 0usize;
        let mut replace = Vec::new();
        let mut candidates = Vec::new();
        for pods in by_node.values() {
            let Some((new, old)) = find_updated_pods_on_node(pods, hash, generation) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !available(&new) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !available(&old) {
                        replace.push(old);
                    } else if unavailable < limit(max_unavailable) {
                        candidates.push(old);
                    }
                }
            }
        }
        let room = limit(max_unavailable)
            .saturating_sub(unavailable)
            .min(candidates.len());
        out.delete = replace;
        out.delete.extend(candidates.into_iter().take(room));
        return out;
    }
    let mut surging = 0usize;
    let mut allowed = Vec::new();
    let mut candidates = Vec::new();
    for (node, pods) in by_node {
        let Some((new, old)) = find_updated_pods_on_node(pods, hash, generation) else {
            surging += 1;
            continue;
        };
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !available(&old) {
                    allowed.push(node.clone());
                } else if surging < limit(max_surge) {
                    candidates.push(node.clone());
                }
            }
            (Some(new), Some(old)) => {
                if available(&new) {
                    out.delete.push(old);
                } else {
                    surging += 1;
                }
            }
        }
    }
    let room = limit(max_surge)
        .saturating_sub(surging)
        .min(candidates.len());
    out.create_on = allowed;
    out.create_on.extend(candidates.into_iter().take(room));
    out
}

#[cfg(test)]
mod tests {
    use super::super::pods::tests::pod;
    use super::*;
    use serde_json::json;

    fn ds(strategy: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "ds"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": []}},
            "updateStrategy": strategy}}))
        .unwrap()
    }

    fn ready(p: Arc<Pod>) -> Arc<Pod> {
        let mut p = (*p).clone();
        p.status = Some(
            serde_json::from_value(json!({"phase": "Running", "conditions": [{"type": "Ready",
                "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}))
            .unwrap(),
        );
        Arc::new(p)
    }

    fn now() -> Timestamp {
        Timestamp::from_second(2_000_000_000).unwrap()
    }

    #[test]
    fn counts_round_up_and_fall_back_to_one_unavailable() {
        let pct = ds(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}));
        assert_eq!(max_counts(&pct, 15).unwrap(), (0, 2));
        let zero = ds(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 0}}));
        assert_eq!(max_counts(&zero, 5).unwrap(), (0, 1));
        assert_eq!(max_counts(&zero, 0).unwrap(), (0, 0));
        let surge = ds(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}));
        assert_eq!(max_counts(&surge, 5).unwrap(), (2, 0));
        assert!(allows_surge(&surge));
        assert!(!allows_surge(&pct));
        let on_delete = ds(json!({"type": "OnDelete"}));
        assert!(is_on_delete(&on_delete));
        assert_eq!(max_counts(&on_delete, 3).unwrap(), (0, 1));
        let bad = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "x"}}));
        assert!(max_counts(&bad, 3).is_err());
    }

    fn names(v: &[Arc<Pod>]) -> Vec<&str> {
        v.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn without_surge_deletes_within_max_unavailable() {
        let mut by_node = NodesToPods::new();
        for i in 1..=4 {
            let n = format!("n{i}");
            by_node.insert(
                n.clone(),
                vec![ready(pod(&format!("old{i}"), &n, true, "prev", 1))],
            );
        }
        let p = plan(&by_node, "new", None, (0, 2), 0, now());
        assert_eq!(names(&p.delete), ["old1", "old2"]);
        assert!(p.create_on.is_empty());
        // One node mid-replacement (no pod yet) uses one of the two.
        by_node.insert("n1".into(), vec![]);
        let p = plan(&by_node, "new", None, (0, 2), 0, now());
        assert_eq!(names(&p.delete), ["old2"]);
        // An old pod that is unavailable anyway is always replaced.
        by_node.insert("n4".into(), vec![pod("old4", "n4", true, "prev", 1)]);
        let p = plan(&by_node, "new", None, (0, 1), 0, now());
        assert_eq!(names(&p.delete), ["old4"]);
        // A new pod that is not available yet counts as unavailable.
        by_node.insert("n1".into(), vec![pod("new1", "n1", true, "new", 1)]);
        let p = plan(&by_node, "new", None, (0, 2), 0, now());
        assert_eq!(names(&p.delete), ["old4", "old2"]);
    }

    #[test]
    fn with_surge_starts_new_pods_then_deletes_old_ones() {
        let mut by_node = NodesToPods::new();
        for i in 1..=3 {
            let n = format!("n{i}");
            by_node.insert(
                n.clone(),
                vec![ready(pod(&format!("old{i}"), &n, true, "prev", 1))],
            );
        }
        let p = plan(&by_node, "new", None, (1, 0), 0, now());
        assert_eq!(p.create_on, ["n1"]);
        assert!(p.delete.is_empty());
        by_node
            .get_mut("n1")
            .unwrap()
            .push(pod("new1", "n1", true, "new", 2));
        // Waiting for new1: no more room.
        let p = plan(&by_node, "new", None, (1, 0), 0, now());
        assert!(p.create_on.is_empty() && p.delete.is_empty());
        let n1 = by_node.get_mut("n1").unwrap();
        n1[1] = ready(n1[1].clone());
        let p = plan(&by_node, "new", None, (1, 0), 0, now());
        assert_eq!(names(&p.delete), ["old1"]);
        assert_eq!(p.create_on, ["n2"]);
    }
}
