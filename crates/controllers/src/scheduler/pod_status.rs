//! The `PodScheduled` condition of a pod that could not be scheduled, as kube-scheduler
//! sets it: `status: "False"`, a reason (`Unschedulable` when no node fits,
//! `SchedulerError` when the scheduler itself failed, e.g. its binding was refused) and the
//! message. The patch is only sent when the condition changes; its `lastTransitionTime`
//! moves only when the status does.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

/// The condition type.
pub const POD_SCHEDULED: &str = "PodScheduled";
/// The reason for a pod no node fits (`v1.PodReasonUnschedulable`).
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// The reason for a failure of the scheduler itself (`v1.PodReasonSchedulerError`).
pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";

/// The strategic merge patch of `pod`'s status that sets `PodScheduled=False` with
/// `reason` and `message`, or `None` if the pod already says exactly that. `now` is the
/// RFC 3339 time to record as `lastTransitionTime` if the condition's status changes.
pub fn unschedulable_patch(pod: &Pod, reason: &str, message: &str, now: &str) -> Option<Value> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == POD_SCHEDULED));
    let transition = match current {
        Some(c) if c.status == "False" => {
            if c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message) {
                return None;
            }
            c.last_transition_time
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .unwrap_or_else(|| Value::from(now))
        }
        _ => Value::from(now),
    };
    Some(json!({"status": {"conditions": [{
        "type": POD_SCHEDULED,
        "status": "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": transition,
    }]}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(conditions: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"conditions": conditions}}),
        )
        .unwrap()
    }

    #[test]
    fn patch_only_when_the_condition_changes() {
        let now = "2025-01-01T00:00:00Z";
        let fresh = unschedulable_patch(&pod(json!([])), REASON_UNSCHEDULABLE, "m1", now).unwrap();
        assert_eq!(
            fresh,
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "m1", "lastProbeTime": null,
                "lastTransitionTime": now}]}})
        );
        let earlier = "2024-06-01T10:00:00Z";
        let already = pod(json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "m1", "lastTransitionTime": earlier}]));
        assert_eq!(
            unschedulable_patch(&already, REASON_UNSCHEDULABLE, "m1", now),
            None
        );
        // A new message keeps the transition time: the status did not change.
        let p = unschedulable_patch(&already, REASON_UNSCHEDULABLE, "m2", now).unwrap();
        assert_eq!(p["status"]["conditions"][0]["lastTransitionTime"], earlier);
        assert_eq!(p["status"]["conditions"][0]["message"], "m2");
        let was_true = pod(json!([{"type": "PodScheduled", "status": "True",
            "lastTransitionTime": earlier}]));
        let p = unschedulable_patch(&was_true, REASON_SCHEDULER_ERROR, "m", now).unwrap();
        assert_eq!(p["status"]["conditions"][0]["lastTransitionTime"], now);
        assert_eq!(p["status"]["conditions"][0]["reason"], "SchedulerError");
    }
}
