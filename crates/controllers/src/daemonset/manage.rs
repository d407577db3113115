//! The manage step of a DaemonSet sync: which nodes need a daemon pod and which pods must
//! go, node by node (Kubernetes' `podsShouldBeOnNode`).
//!
//! - A node that should run the pod and has none needs one.
//! - On a node where a pod may continue: failed pods are deleted (each node's replacement
//!   paced by a backoff the caller keeps), succeeded ones too; of the others, without
//!   surge only the first in [`cmp_by_creation_and_phase`] order stays; with surge the
//!   first current and the first old pod may both stay while the current one is not yet
//!   available and the old one is ready.
//! - On a node where no pod may continue, every pod not already being deleted goes.
//! - Pods for a node that no longer exists and were never bound go too.

use super::eligibility::Placement;
use super::pods::{cmp_by_creation_and_phase, is_pod_updated, NodesToPods};
use crate::controller_utils::{is_pod_available, is_pod_ready};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashSet;
use std::sync::Arc;

/// What the manage step does to one node.
#[derive(Debug, Default)]
pub struct NodeActions {
    /// The node needs a daemon pod.
    pub needs_pod: bool,
    /// Pods to delete.
    pub delete: Vec<Arc<Pod>>,
}

/// What the manage step needs to know beyond the pods.
#[derive(Debug, Clone, Copy)]
pub struct ManageContext<'a> {
    /// Whether the update strategy lets a new pod start before the old one is gone.
    pub allows_surge: bool,
    /// The current revision's hash.
    pub hash: &'a str,
    /// The template generation, if the server recorded one.
    pub generation: Option<i64>,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i32,
    /// The time availability is judged at.
    pub now: Timestamp,
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The manage step on one node (see the [module docs](self)). `failed_may_go` is asked
/// for each failed pod whether its replacement may start now (the caller's backoff).
pub fn pods_should_be_on_node(
    placement: Placement,
    pods: Option<&[Arc<Pod>]>,
    ctx: ManageContext<'_>,
    mut failed_may_go: impl FnMut(&Pod) -> bool,
) -> NodeActions {
    let mut out = NodeActions::default();
    let Some(pods) = pods.filter(|p| !p.is_empty()) else {
        out.needs_pod = placement.should_run;
        return out;
    };
    if !placement.may_continue {
        out.delete = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        return out;
    }
    let mut running = Vec::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match phase(pod) {
            "Failed" => {
                if failed_may_go(pod) {
                    out.delete.push(Arc::clone(pod));
                }
            }
            "Succeeded" => out.delete.push(Arc::clone(pod)),
            _ => running.push(Arc::clone(pod)),
        }
    }
    if running.len() <= 1 {
        return out;
    }
    running.sort_by(|a, b| cmp_by_creation_and_phase(a, b));
    if !ctx.allows_surge {
        out.delete.extend(running.into_iter().skip(1));
        return out;
    }
    let (mut oldest_new, mut oldest_old): (Option<Arc<Pod>>, Option<Arc<Pod>>) = (None, None);
    for pod in running {
        let slot = if is_pod_updated(&pod, ctx.hash, ctx.generation) {
            &mut oldest_new
        } else {
            &mut oldest_old
        };
        if slot.is_none() {
            *slot = Some(pod);
        } else {
            out.delete.push(pod);
        }
    }
    if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
        if !is_pod_ready(&old) || is_pod_available(&new, ctx.min_ready_seconds, ctx.now) {
            out.delete.push(old);
        }
    }
    out
}

/// The pods for nodes not in `existing` that were never bound to a node: their node is
/// gone and the scheduler will never place them.
pub fn unscheduled_pods_without_node(
    existing: &HashSet<&str>,
    by_node: &NodesToPods,
) -> Vec<Arc<Pod>> {
    by_node
        .iter()
        .filter(|(node, _)| !existing.contains(node.as_str()))
        .flat_map(|(_, pods)| pods.iter())
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::pods::tests::pod;
    use super::*;

    const RUN: Placement = Placement {
        should_run: true,
        may_continue: true,
    };
    const STAY: Placement = Placement {
        should_run: false,
        may_continue: true,
    };
    const NO: Placement = Placement {
        should_run: false,
        may_continue: false,
    };

    fn ctx(allows_surge: bool) -> ManageContext<'static> {
        ManageContext {
            allows_surge,
            hash: "new",
            generation: None,
            min_ready_seconds: 0,
            now: Timestamp::from_second(1000).unwrap(),
        }
    }

    fn names(v: &[Arc<Pod>]) -> Vec<&str> {
        v.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    fn with_status(p: &Arc<Pod>, status: serde_json::Value) -> Arc<Pod> {
        let mut p = (**p).clone();
        p.status = Some(serde_json::from_value(status).unwrap());
        Arc::new(p)
    }

    fn ready(p: &Arc<Pod>) -> Arc<Pod> {
        with_status(
            p,
            serde_json::json!({"phase": "Running", "conditions": [{"type": "Ready",
                "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}),
        )
    }

    #[test]
    fn creates_keeps_and_deletes() {
        let a = pod("a", "n1", true, "new", 1);
        let b = pod("b", "n1", true, "new", 2);
        let none = pods_should_be_on_node(RUN, None, ctx(false), |_| true);
        assert!(none.needs_pod && none.delete.is_empty());
        let not_here = pods_should_be_on_node(STAY, None, ctx(false), |_| true);
        assert!(!not_here.needs_pod);
        let dup = pods_should_be_on_node(RUN, Some(&[b.clone(), a.clone()]), ctx(false), |_| true);
        assert!(!dup.needs_pod);
        assert_eq!(names(&dup.delete), ["b"]);
        let gone = pods_should_be_on_node(NO, Some(&[a.clone(), b.clone()]), ctx(false), |_| true);
        assert_eq!(names(&gone.delete), ["a", "b"]);
    }

    #[test]
    fn failed_pods_go_when_the_backoff_allows() {
        let failed = with_status(
            &pod("f", "n1", true, "new", 1),
            serde_json::json!({"phase": "Failed"}),
        );
        let done = with_status(
            &pod("s", "n1", true, "new", 2),
            serde_json::json!({"phase": "Succeeded"}),
        );
        let mut asked = 0;
        let now = pods_should_be_on_node(
            RUN,
            Some(&[failed.clone(), done.clone()]),
            ctx(false),
            |_| {
                asked += 1;
                true
            },
        );
        assert_eq!(names(&now.delete), ["f", "s"]);
        assert_eq!(asked, 1);
        let later = pods_should_be_on_node(RUN, Some(&[failed]), ctx(false), |_| false);
        assert!(later.delete.is_empty() && !later.needs_pod);
    }

    #[test]
    fn surge_keeps_an_unavailable_new_pod_beside_a_ready_old_one() {
        let old = ready(&pod("old", "n1", true, "prev", 1));
        let new = pod("new", "n1", true, "new", 2);
        let keep =
            pods_should_be_on_node(RUN, Some(&[old.clone(), new.clone()]), ctx(true), |_| true);
        assert!(keep.delete.is_empty());
        let swap =
            pods_should_be_on_node(RUN, Some(&[old.clone(), ready(&new)]), ctx(true), |_| true);
        assert_eq!(names(&swap.delete), ["old"]);
        let unready_old = pod("old", "n1", true, "prev", 1);
        let both_unready =
            pods_should_be_on_node(RUN, Some(&[unready_old, new]), ctx(true), |_| true);
        assert_eq!(names(&both_unready.delete), ["old"]);
    }

    #[test]
    fn pods_of_vanished_nodes_never_bound() {
        let by_node = super::super::pods::nodes_to_pods(&[
            pod("a", "gone", false, "h", 1),
            pod("b", "gone", true, "h", 1),
            pod("c", "here", false, "h", 1),
        ]);
        let existing: HashSet<&str> = ["here"].into();
        assert_eq!(
            names(&unscheduled_pods_without_node(&existing, &by_node)),
            ["a"]
        );
    }
}
