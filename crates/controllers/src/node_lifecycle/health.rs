//! Node health as the node lifecycle controller judges it: when it last heard from each
//! node — a new heartbeat in the node's `Ready` condition, or a renewed Lease — on its
//! own monotonic clock (never comparing the kubelet's timestamps with its own, which may
//! be skewed), and whether that is longer ago than the grace period, in which case the
//! node's `Ready`, `MemoryPressure`, `DiskPressure` and `PIDPressure` conditions become
//! `Unknown`.

use crate::node_agent::wall_clock::time;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use std::time::{Duration, Instant, SystemTime};

/// The conditions set to `Unknown` when a node goes silent (`NetworkUnavailable` is the
/// network plugin's business and is left alone).
const CONDITIONS_TO_UNKNOWN: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// What the controller last observed of a node, and when (on its own clock).
#[derive(Debug, Clone)]
pub(crate) struct NodeHealth {
    /// When the controller last heard from the node.
    pub probe: Instant,
    /// When the node's `Ready` condition was last seen to change.
    pub ready_transition: Instant,
    /// The node's `Ready` condition as last observed.
    pub ready: Option<NodeCondition>,
    /// The lease's `renewTime` as last observed.
    pub lease_renewed: Option<MicroTime>,
}

/// The outcome of one health check of a node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HealthCheck {
    /// The `Ready` condition the node had (a synthetic `Unknown` if it had none).
    pub observed_ready: NodeCondition,
    /// The `Ready` condition it has after the check (`None` if it has none).
    pub current_ready: Option<NodeCondition>,
    /// The conditions to write, when the check changed the `Ready` condition.
    pub write: Option<Vec<NodeCondition>>,
}

fn ready_of(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
}

/// Checks `node` (with its `lease`) at `now` (`wall_now` on the wall clock) against what
/// `previous` recorded; returns the new record and the outcome. `grace` is the node
/// monitor grace period, `startup_grace` the one of nodes that never reported `Ready`.
pub(crate) fn check_node_health(
    previous: Option<NodeHealth>,
    node: &Node,
    lease: Option<&Lease>,
    now: Instant,
    wall_now: SystemTime,
    grace: Duration,
    startup_grace: Duration,
) -> (NodeHealth, HealthCheck) {
    let current = ready_of(node).cloned();
    let creation = node.metadata.creation_timestamp.clone();
    let (observed, grace) = match &current {
        Some(c) => (c.clone(), grace),
        None => (
            NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                last_heartbeat_time: creation.clone(),
                last_transition_time: creation.clone(),
                ..Default::default()
            },
            startup_grace,
        ),
    };
    let fresh = |ready: Option<NodeCondition>| NodeHealth {
        probe: now,
        ready_transition: now,
        ready,
        lease_renewed: None,
    };
    let mut health = match previous {
        None => fresh(current.clone()),
        Some(prev) => match (&prev.ready, &current) {
            (None, Some(_)) | (Some(_), None) => fresh(current.clone()),
            (Some(saved), Some(cur)) if saved.last_heartbeat_time != cur.last_heartbeat_time => {
                NodeHealth {
                    probe: now,
                    ready_transition: if saved.last_transition_time != cur.last_transition_time {
                        now
                    } else {
                        prev.ready_transition
                    },
                    ready: current.clone(),
                    lease_renewed: prev.lease_renewed,
                }
            }
            _ => prev,
        },
    };
    // A renewed lease counts as hearing from the node.
    if let Some(renewed) = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.clone())
    {
        if health
            .lease_renewed
            .as_ref()
            .is_none_or(|saved| saved.0 < renewed.0)
        {
            health.lease_renewed = Some(renewed);
            health.probe = now;
        }
    }
    let mut check = HealthCheck {
        observed_ready: observed.clone(),
        current_ready: current,
        write: None,
    };
    if now.saturating_duration_since(health.probe) > grace {
        let transition = Some(time(wall_now));
        let mut conditions: Vec<NodeCondition> = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for type_ in CONDITIONS_TO_UNKNOWN {
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                None => conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: creation.clone(),
                    last_transition_time: transition.clone(),
                }),
                Some(c) if c.status != "Unknown" => {
                    c.status = "Unknown".into();
                    c.reason = Some("NodeStatusUnknown".into());
                    c.message = Some("Kubelet stopped posting node status.".into());
                    c.last_transition_time = transition.clone();
                }
                Some(_) => {}
            }
        }
        let new_ready = conditions.iter().find(|c| c.type_ == "Ready").cloned();
        if new_ready.as_ref() != Some(&observed) {
            check.current_ready = new_ready.clone();
            check.write = Some(conditions);
            health.ready = new_ready;
            health.ready_transition = now;
        }
    }
    (health, check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::wall_clock::micro_time;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::UNIX_EPOCH;

    const GRACE: Duration = Duration::from_secs(50);
    const STARTUP: Duration = Duration::from_secs(60);

    fn wall(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn ready_node(heartbeat: u64) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                creation_timestamp: Some(time(wall(0))),
                ..Default::default()
            },
            status: Some(NodeStatus {
                conditions: Some(
                    ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
                        .iter()
                        .map(|t| NodeCondition {
                            type_: t.to_string(),
                            status: if *t == "Ready" { "True" } else { "False" }.into(),
                            last_heartbeat_time: Some(time(wall(heartbeat))),
                            last_transition_time: Some(time(wall(0))),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn lease(renewed: u64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(micro_time(wall(renewed))),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_renewed_lease_keeps_a_node_healthy() {
        let t0 = Instant::now();
        let node = ready_node(0);
        let (h, c) = check_node_health(None, &node, Some(&lease(0)), t0, wall(0), GRACE, STARTUP);
        assert!(c.write.is_none());
        // The status heartbeat never changes, but the lease is renewed every 10 s.
        let mut h = h;
        for i in 1..=10u64 {
            let now = t0 + Duration::from_secs(10 * i);
            let (next, c) = check_node_health(
                Some(h),
                &node,
                Some(&lease(10 * i)),
                now,
                wall(10 * i),
                GRACE,
                STARTUP,
            );
            assert!(c.write.is_none(), "healthy at {}s", 10 * i);
            h = next;
        }
    }

    #[test]
    fn a_silent_node_turns_unknown_after_the_grace_period() {
        let t0 = Instant::now();
        let node = ready_node(0);
        let l = lease(0);
        let (h, _) = check_node_health(None, &node, Some(&l), t0, wall(0), GRACE, STARTUP);
        // Exactly at the grace period: still healthy.
        let (h, c) = check_node_health(
            Some(h),
            &node,
            Some(&l),
            t0 + GRACE,
            wall(50),
            GRACE,
            STARTUP,
        );
        assert!(c.write.is_none());
        let later = t0 + GRACE + Duration::from_secs(1);
        let (h, c) = check_node_health(Some(h), &node, Some(&l), later, wall(51), GRACE, STARTUP);
        let written = c.write.expect("the conditions become Unknown");
        assert_eq!(written.len(), 4);
        for cond in &written {
            assert_eq!(cond.status, "Unknown");
            assert_eq!(cond.reason.as_deref(), Some("NodeStatusUnknown"));
            assert_eq!(
                cond.message.as_deref(),
                Some("Kubelet stopped posting node status.")
            );
            assert_eq!(cond.last_transition_time, Some(time(wall(51))));
            assert_eq!(
                cond.last_heartbeat_time,
                Some(time(wall(0))),
                "heartbeat kept"
            );
        }
        assert_eq!(c.observed_ready.status, "True");
        assert_eq!(c.current_ready.unwrap().status, "Unknown");
        // The node as written: nothing more to write at the next check.
        let mut unknown = node.clone();
        unknown.status.as_mut().unwrap().conditions = Some(written);
        let (h, c) = check_node_health(
            Some(h),
            &unknown,
            Some(&l),
            later + Duration::from_secs(5),
            wall(56),
            GRACE,
            STARTUP,
        );
        assert!(c.write.is_none());
        assert_eq!(c.observed_ready.status, "Unknown");
        // The kubelet comes back: a renewed lease and a new heartbeat.
        let back = ready_node(60);
        let (_, c) = check_node_health(
            Some(h),
            &back,
            Some(&lease(60)),
            later + Duration::from_secs(10),
            wall(61),
            GRACE,
            STARTUP,
        );
        assert!(c.write.is_none());
        assert_eq!(c.observed_ready.status, "True");
    }

    #[test]
    fn a_node_that_never_reported_gets_the_startup_grace() {
        let t0 = Instant::now();
        let mut node = ready_node(0);
        node.status = None;
        let (h, c) = check_node_health(None, &node, None, t0, wall(0), GRACE, STARTUP);
        assert!(c.write.is_none());
        assert_eq!(c.observed_ready.status, "Unknown");
        let (h, c) = check_node_health(
            Some(h),
            &node,
            None,
            t0 + Duration::from_secs(55),
            wall(55),
            GRACE,
            STARTUP,
        );
        assert!(c.write.is_none(), "within the startup grace");
        let (_, c) = check_node_health(
            Some(h),
            &node,
            None,
            t0 + Duration::from_secs(61),
            wall(61),
            GRACE,
            STARTUP,
        );
        let written = c.write.unwrap();
        assert!(written
            .iter()
            .all(|c| c.reason.as_deref() == Some("NodeStatusNeverUpdated")
                && c.message.as_deref() == Some("Kubelet never posted node status.")));
    }
}
