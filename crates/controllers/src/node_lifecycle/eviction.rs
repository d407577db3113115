//! Taint-based eviction (what Kubernetes calls the taint eviction controller): which pods on
//! a node with `NoExecute` taints must go, and when.
//!
//! A pod that does not tolerate every `NoExecute` taint of its node is evicted at once. A
//! pod that tolerates them all stays for the shortest `tolerationSeconds` of the
//! tolerations it uses (counted from when the controller noticed), or for ever if none is
//! limited. When the taints go (or the pod, or its tolerations change so that it may
//! stay), a scheduled eviction is cancelled. Time is the controller's monotonic clock;
//! this file decides, the controller does the deleting.

use super::taints::{matching_tolerations, min_toleration_time, NO_EXECUTE};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::collections::HashMap;
use std::time::Instant;

/// An eviction waiting for its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scheduled {
    pub created_at: Instant,
    pub fire_at: Instant,
}

/// What the controller must do after a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// The pod's scheduled eviction was cancelled (record an event).
    Cancelled(String),
    /// The pod is to be evicted at the instant (arm a timer; now or past: at once).
    Scheduled(String, Instant),
}

/// The `NoExecute` taints of `taints`.
pub(crate) fn no_execute(taints: Option<&Vec<Taint>>) -> Vec<Taint> {
    taints
        .into_iter()
        .flatten()
        .filter(|t| t.effect == NO_EXECUTE)
        .cloned()
        .collect()
}

/// The taint eviction state: the `NoExecute` taints of each tainted node and the pending
/// evictions by pod key (`namespace/name`).
#[derive(Debug, Default)]
pub(crate) struct Evictions {
    tainted: HashMap<String, Vec<Taint>>,
    scheduled: HashMap<String, Scheduled>,
}

impl Evictions {
    /// The `NoExecute` taints known for `node`.
    #[cfg(test)]
    pub(crate) fn taints_of(&self, node: &str) -> Option<&Vec<Taint>> {
        self.tainted.get(node)
    }

    /// The eviction pending for `pod`, if any.
    #[cfg(test)]
    pub(crate) fn scheduled(&self, pod: &str) -> Option<Scheduled> {
        self.scheduled.get(pod).copied()
    }

    fn cancel(&mut self, pod: &str, effects: &mut Vec<Effect>) {
        if self.scheduled.remove(pod).is_some() {
            effects.push(Effect::Cancelled(pod.to_string()));
        }
    }

    fn process_pod(
        &mut self,
        pod: &str,
        tolerations: &[Toleration],
        taints: &[Taint],
        now: Instant,
        effects: &mut Vec<Effect>,
    ) {
        if taints.is_empty() {
            self.cancel(pod, effects);
            return;
        }
        let Some(used) = matching_tolerations(taints, tolerations) else {
            self.cancel(pod, effects);
            self.schedule(pod, now, now, effects);
            return;
        };
        let Some(min) = min_toleration_time(&used) else {
            self.cancel(pod, effects);
            return;
        };
        let mut created_at = now;
        if let Some(existing) = self.scheduled.get(pod).copied() {
            // An eviction counted from an earlier moment stands.
            if existing.created_at + min < now + min {
                return;
            }
            created_at = existing.created_at;
            self.cancel(pod, effects);
        }
        self.schedule(pod, created_at, now + min, effects);
    }

    fn schedule(
        &mut self,
        pod: &str,
        created_at: Instant,
        fire_at: Instant,
        effects: &mut Vec<Effect>,
    ) {
        self.scheduled.insert(
            pod.to_string(),
            Scheduled {
                created_at,
                fire_at,
            },
        );
        effects.push(Effect::Scheduled(pod.to_string(), fire_at));
    }

    /// `node` now has `taints` (its `NoExecute` ones; empty or `None` when it is gone);
    /// `pods` are the (key, tolerations) of the pods on it.
    pub(crate) fn node_updated(
        &mut self,
        node: &str,
        taints: Option<Vec<Taint>>,
        pods: &[(String, Vec<Toleration>)],
        now: Instant,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        let taints = taints.unwrap_or_default();
        if taints.is_empty() {
            self.tainted.remove(node);
            for (pod, _) in pods {
                self.cancel(pod, &mut effects);
            }
            return effects;
        }
        self.tainted.insert(node.to_string(), taints.clone());
        for (pod, tolerations) in pods {
            self.process_pod(pod, tolerations, &taints, now, &mut effects);
        }
        effects
    }

    /// `pod` is (now) on `node` with `tolerations`; `None` for a deleted pod.
    pub(crate) fn pod_updated(
        &mut self,
        pod: &str,
        placement: Option<(&str, &[Toleration])>,
        now: Instant,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        match placement {
            None => self.cancel(pod, &mut effects),
            Some((node, tolerations)) => {
                let Some(taints) = self.tainted.get(node).cloned() else {
                    return effects;
                };
                self.process_pod(pod, tolerations, &taints, now, &mut effects);
            }
        }
        effects
    }

    /// The timer of `pod` went off at `now`: true if its eviction is due (and it is taken
    /// off the schedule).
    pub(crate) fn take_due(&mut self, pod: &str, now: Instant) -> bool {
        match self.scheduled.get(pod) {
            Some(s) if s.fire_at <= now => {
                self.scheduled.remove(pod);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_lifecycle::taints::{taint, TAINT_NODE_UNREACHABLE};
    use std::time::Duration;

    fn tolerate(secs: Option<i64>) -> Vec<Toleration> {
        vec![Toleration {
            key: Some(TAINT_NODE_UNREACHABLE.into()),
            operator: Some("Exists".into()),
            effect: Some(NO_EXECUTE.into()),
            toleration_seconds: secs,
            ..Default::default()
        }]
    }

    #[test]
    fn pods_go_at_once_after_their_toleration_or_never() {
        let t0 = Instant::now();
        let mut e = Evictions::default();
        let pods = vec![
            ("ns/none".to_string(), vec![]),
            ("ns/short".to_string(), tolerate(Some(30))),
            ("ns/forever".to_string(), tolerate(None)),
        ];
        let taints = vec![taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)];
        let effects = e.node_updated("n", Some(taints), &pods, t0);
        assert_eq!(
            effects,
            [
                Effect::Scheduled("ns/none".into(), t0),
                Effect::Scheduled("ns/short".into(), t0 + Duration::from_secs(30)),
            ]
        );
        assert!(e.take_due("ns/none", t0));
        assert!(!e.take_due("ns/short", t0 + Duration::from_secs(29)));
        // A later update of the node does not restart the count.
        let effects = e.node_updated(
            "n",
            Some(vec![taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)]),
            &pods[1..],
            t0 + Duration::from_secs(10),
        );
        assert!(effects.is_empty(), "{effects:?}");
        assert!(e.take_due("ns/short", t0 + Duration::from_secs(30)));
        assert!(
            !e.take_due("ns/short", t0 + Duration::from_secs(31)),
            "once"
        );
    }

    #[test]
    fn evictions_are_cancelled_when_the_taints_go() {
        let t0 = Instant::now();
        let mut e = Evictions::default();
        let pods = vec![("ns/short".to_string(), tolerate(Some(30)))];
        let taints = Some(vec![taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)]);
        e.node_updated("n", taints, &pods, t0);
        assert!(e.scheduled("ns/short").is_some());
        let effects = e.node_updated("n", Some(vec![]), &pods, t0 + Duration::from_secs(5));
        assert_eq!(effects, [Effect::Cancelled("ns/short".into())]);
        assert!(!e.take_due("ns/short", t0 + Duration::from_secs(60)));
        assert!(e.taints_of("n").is_none());
    }

    #[test]
    fn pods_arriving_on_a_tainted_node_and_leaving() {
        let t0 = Instant::now();
        let mut e = Evictions::default();
        e.node_updated(
            "n",
            Some(vec![taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)]),
            &[],
            t0,
        );
        let effects = e.pod_updated("ns/p", Some(("n", &tolerate(Some(5)))), t0);
        assert_eq!(
            effects,
            [Effect::Scheduled(
                "ns/p".into(),
                t0 + Duration::from_secs(5)
            )]
        );
        // Its tolerations change to for ever: cancelled.
        let effects = e.pod_updated("ns/p", Some(("n", &tolerate(None))), t0);
        assert_eq!(effects, [Effect::Cancelled("ns/p".into())]);
        // On an untainted node nothing happens.
        assert!(e.pod_updated("ns/q", Some(("other", &[])), t0).is_empty());
        // A deleted pod's eviction is cancelled.
        e.pod_updated("ns/r", Some(("n", &[])), t0);
        assert_eq!(
            e.pod_updated("ns/r", None, t0),
            [Effect::Cancelled("ns/r".into())]
        );
    }
}
