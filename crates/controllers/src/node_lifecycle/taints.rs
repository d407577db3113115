//! Taints and tolerations: which taints the node lifecycle controller manages, whether a
//! pod tolerates a node's taints, and for how long.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::time::Duration;

/// The taint key of a node whose kubelet stopped reporting (`Ready` is `Unknown`).
pub const TAINT_NODE_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint key of a node that reports itself not ready (`Ready` is `False`).
pub const TAINT_NODE_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint key of a node under memory pressure.
pub const TAINT_NODE_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// The taint key of a node under disk pressure.
pub const TAINT_NODE_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// The taint key of a node under PID pressure.
pub const TAINT_NODE_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
/// The taint key of a node whose network is not set up.
pub const TAINT_NODE_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
/// The taint key of a node marked unschedulable (`spec.unschedulable`).
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// `NoSchedule`: no new pods unless they tolerate it.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// `NoExecute`: running pods that do not tolerate it are evicted.
pub const NO_EXECUTE: &str = "NoExecute";

/// The `NoSchedule` taint key a node condition in a status calls for, if any.
pub(crate) fn condition_taint(condition_type: &str, status: &str) -> Option<&'static str> {
    match (condition_type, status) {
        ("Ready", "False") => Some(TAINT_NODE_NOT_READY),
        ("Ready", "Unknown") => Some(TAINT_NODE_UNREACHABLE),
        ("MemoryPressure", "True") => Some(TAINT_NODE_MEMORY_PRESSURE),
        ("DiskPressure", "True") => Some(TAINT_NODE_DISK_PRESSURE),
        ("NetworkUnavailable", "True") => Some(TAINT_NODE_NETWORK_UNAVAILABLE),
        ("PIDPressure", "True") => Some(TAINT_NODE_PID_PRESSURE),
        _ => None,
    }
}

/// Whether `key` is one the controller sets from node conditions (or unschedulability).
pub(crate) fn is_controller_no_schedule_key(key: &str) -> bool {
    matches!(
        key,
        TAINT_NODE_NOT_READY
            | TAINT_NODE_UNREACHABLE
            | TAINT_NODE_MEMORY_PRESSURE
            | TAINT_NODE_DISK_PRESSURE
            | TAINT_NODE_NETWORK_UNAVAILABLE
            | TAINT_NODE_PID_PRESSURE
            | TAINT_NODE_UNSCHEDULABLE
    )
}

/// A taint with `key` and `effect`, no value.
pub(crate) fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_string(),
        effect: effect.to_string(),
        ..Default::default()
    }
}

/// Whether two taints are the same taint (key and effect; value and time do not count).
pub(crate) fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// Whether `toleration` tolerates `taint`: an empty effect matches every effect, an empty
/// key (with `Exists`) every key; `Exists` ignores the value, `Equal` (the default)
/// compares it.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty()) {
        if effect != taint.effect {
            return false;
        }
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty()) {
        if key != taint.key {
            return false;
        }
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether every taint is tolerated, and the toleration used for each (the first matching
/// one).
pub(crate) fn matching_tolerations<'t>(
    taints: &[Taint],
    tolerations: &'t [Toleration],
) -> Option<Vec<&'t Toleration>> {
    taints
        .iter()
        .map(|taint| tolerations.iter().find(|t| tolerates(t, taint)))
        .collect()
}

/// How long the pod may stay given the tolerations it uses: the shortest
/// `tolerationSeconds` (zero or less: not at all), `None` if none is limited (forever).
pub(crate) fn min_toleration_time(used: &[&Toleration]) -> Option<Duration> {
    if used.is_empty() {
        return Some(Duration::ZERO);
    }
    used.iter()
        .filter_map(|t| t.toleration_seconds)
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, op: &str, value: &str, effect: &str, secs: Option<i64>) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: secs,
        }
    }

    #[test]
    fn toleration_matching() {
        let unreachable = taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE);
        assert!(tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "Exists", "", NO_EXECUTE, None),
            &unreachable
        ));
        assert!(tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "Exists", "", "", None),
            &unreachable
        ));
        assert!(
            tolerates(&tol("", "Exists", "", "", None), &unreachable),
            "tolerates everything"
        );
        assert!(!tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "Exists", "", NO_SCHEDULE, None),
            &unreachable
        ));
        assert!(!tolerates(
            &tol(TAINT_NODE_NOT_READY, "Exists", "", NO_EXECUTE, None),
            &unreachable
        ));
        // Equal compares the (empty) value.
        assert!(tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "", "", NO_EXECUTE, None),
            &unreachable
        ));
        assert!(!tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "Equal", "x", NO_EXECUTE, None),
            &unreachable
        ));
        assert!(!tolerates(
            &tol(TAINT_NODE_UNREACHABLE, "Bogus", "", "", None),
            &unreachable
        ));
    }

    #[test]
    fn how_long_a_pod_may_stay() {
        let taints = [taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)];
        assert_eq!(matching_tolerations(&taints, &[]), None);
        let tols = [
            tol(TAINT_NODE_NOT_READY, "Exists", "", NO_EXECUTE, Some(1)),
            tol(TAINT_NODE_UNREACHABLE, "Exists", "", NO_EXECUTE, Some(300)),
        ];
        let used = matching_tolerations(&taints, &tols).unwrap();
        assert_eq!(min_toleration_time(&used), Some(Duration::from_secs(300)));
        let forever = [tol(TAINT_NODE_UNREACHABLE, "Exists", "", NO_EXECUTE, None)];
        let used = matching_tolerations(&taints, &forever).unwrap();
        assert_eq!(min_toleration_time(&used), None);
        let negative = [tol(
            TAINT_NODE_UNREACHABLE,
            "Exists",
            "",
            NO_EXECUTE,
            Some(-5),
        )];
        let used = matching_tolerations(&taints, &negative).unwrap();
        assert_eq!(min_toleration_time(&used), Some(Duration::ZERO));
        assert_eq!(matching_tolerations(&[], &tols), Some(vec![]));
    }

    #[test]
    fn conditions_to_taints() {
        assert_eq!(
            condition_taint("Ready", "Unknown"),
            Some(TAINT_NODE_UNREACHABLE)
        );
        assert_eq!(
            condition_taint("Ready", "False"),
            Some(TAINT_NODE_NOT_READY)
        );
        assert_eq!(condition_taint("Ready", "True"), None);
        assert_eq!(condition_taint("MemoryPressure", "Unknown"), None);
        assert_eq!(
            condition_taint("DiskPressure", "True"),
            Some(TAINT_NODE_DISK_PRESSURE)
        );
    }
}
