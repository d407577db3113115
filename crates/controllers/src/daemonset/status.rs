//! A DaemonSet's status as its controller computes it (Kubernetes' `updateDaemonSetStatus`):
//! per node that should run the pod, whether it has one and whether the oldest is ready,
//! available and of the current revision; pods on other nodes are misscheduled.

use super::eligibility::Placement;
use super::pods::{cmp_by_creation_and_phase, is_pod_updated, NodesToPods};
use crate::controller_utils::{is_pod_available, is_pod_ready};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::jiff::Timestamp;

/// The counts of a DaemonSet's status.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Nodes that should run the pod.
    pub desired: i32,
    /// Of those, nodes that have one.
    pub current: i32,
    /// Nodes that have a pod but should not.
    pub misscheduled: i32,
    /// Nodes whose oldest pod is ready.
    pub ready: i32,
    /// Nodes whose oldest pod is of the current revision.
    pub updated: i32,
    /// Nodes whose oldest pod is available.
    pub available: i32,
}

impl Counts {
    /// Nodes that should run the pod but have no available one.
    pub fn unavailable(&self) -> i32 {
        self.desired - self.available
    }
}

/// The counts over `nodes` (each with its placement for the DaemonSet) and the pods by node.
pub fn counts<'a>(
    nodes: impl IntoIterator<Item = (&'a str, Placement)>,
    by_node: &NodesToPods,
    hash: &str,
    generation: Option<i64>,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Counts {
    let mut c = Counts::default();
    for (name, placement) in nodes {
        let pods = by_node.get(name).filter(|p| !p.is_empty());
        if !placement.should_run {
            if pods.is_some() {
                c.misscheduled += 1;
            }
            continue;
        }
        c.desired += 1;
        let Some(pods) = pods else {
            continue;
        };
        c.current += 1;
        let Some(oldest) = pods.iter().min_by(|a, b| cmp_by_creation_and_phase(a, b)) else {
            continue;
        };
        if is_pod_ready(oldest) {
            c.ready += 1;
            if is_pod_available(oldest, min_ready_seconds, now) {
                c.available += 1;
            }
        }
        if is_pod_updated(oldest, hash, generation) {
            c.updated += 1;
        }
    }
    c
}

/// `ds`'s status with `counts`, and `observedGeneration` set to its generation when
/// `observe` (a sync that acted on the current spec).
pub fn with_counts(ds: &DaemonSet, c: Counts, observe: bool) -> DaemonSetStatus {
    let mut s = ds.status.clone().unwrap_or_default();
    s.desired_number_scheduled = c.desired;
    s.current_number_scheduled = c.current;
    s.number_misscheduled = c.misscheduled;
    s.number_ready = c.ready;
    s.updated_number_scheduled = Some(c.updated);
    s.number_available = Some(c.available);
    s.number_unavailable = Some(c.unavailable());
    if observe {
        s.observed_generation = ds.metadata.generation;
    }
    s
}

/// Whether `new` says nothing `ds`'s status does not.
pub fn unchanged(ds: &DaemonSet, new: &DaemonSetStatus) -> bool {
    let cur = ds.status.clone().unwrap_or_default();
    let n = |o: Option<i32>| o.unwrap_or(0);
    cur.desired_number_scheduled == new.desired_number_scheduled
        && cur.current_number_scheduled == new.current_number_scheduled
        && cur.number_misscheduled == new.number_misscheduled
        && cur.number_ready == new.number_ready
        && n(cur.updated_number_scheduled) == n(new.updated_number_scheduled)
        && n(cur.number_available) == n(new.number_available)
        && n(cur.number_unavailable) == n(new.number_unavailable)
        && cur.observed_generation.unwrap_or(0) >= new.observed_generation.unwrap_or(0)
        && cur.collision_count == new.collision_count
}

#[cfg(test)]
mod tests {
    use super::super::pods::nodes_to_pods;
    use super::super::pods::tests::pod;
    use super::*;
    use std::sync::Arc;

    const RUN: Placement = Placement {
        should_run: true,
        may_continue: true,
    };
    const NO: Placement = Placement {
        should_run: false,
        may_continue: false,
    };

    fn ready(p: Arc<k8s_openapi::api::core::v1::Pod>) -> Arc<k8s_openapi::api::core::v1::Pod> {
        let mut p = (*p).clone();
        p.status = Some(
            serde_json::from_value(serde_json::json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True",
                 "lastTransitionTime": "2020-01-01T00:00:00Z"}]}))
            .unwrap(),
        );
        Arc::new(p)
    }

    #[test]
    fn counts_per_node() {
        let by_node = nodes_to_pods(&[
            ready(pod("a", "n1", true, "new", 1)),
            pod("b", "n1", true, "prev", 5),
            ready(pod("c", "n2", true, "prev", 1)),
            pod("d", "n4", true, "new", 1),
        ]);
        let nodes = [("n1", RUN), ("n2", RUN), ("n3", RUN), ("n4", NO)];
        let now = Timestamp::from_second(2_000_000_000).unwrap();
        let c = counts(nodes, &by_node, "new", None, 0, now);
        assert_eq!(
            c,
            Counts {
                desired: 3,
                current: 2,
                misscheduled: 1,
                ready: 2,
                updated: 1,
                available: 2,
            }
        );
        assert_eq!(c.unavailable(), 1);
        // minReadySeconds not yet passed since the pods became ready in 2020: still
        // available; one far in the future is not.
        let early = Timestamp::from_second(1_577_836_801).unwrap();
        assert_eq!(counts(nodes, &by_node, "new", None, 60, early).available, 0);

        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ds", "generation": 4},
            "spec": {"selector": {}, "template": {}},
            "status": {"currentNumberScheduled": 0, "desiredNumberScheduled": 0,
                "numberMisscheduled": 0, "numberReady": 0, "observedGeneration": 3}}))
        .unwrap();
        let s = with_counts(&ds, c, true);
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.number_unavailable, Some(1));
        assert!(!unchanged(&ds, &s));
        let mut stored = ds.clone();
        stored.status = Some(s.clone());
        assert!(unchanged(&stored, &s));
        assert_eq!(with_counts(&ds, c, false).observed_generation, Some(3));
    }
}
