//! What one sync of a StatefulSet does, decided from the cached pods alone: which pods to
//! create, delete or relabel, in which order, and the status that results. Kubernetes'
//! rules, in the order its controller applies them:
//!
//! 1. Pods are sorted by ordinal into the set's range `[start, start + replicas)` and the
//!    **condemned** beyond it (names without an ordinal are ignored).
//! 2. Each ordinal of the range, lowest first: a pod that has ended (`Failed`,
//!    `Succeeded`) is deleted, to be recreated under its name on a later sync; a missing
//!    pod is created (at the current revision below the partition, else the update
//!    revision); a pending pod gets the claims it lacks; a pod without its identity labels
//!    gets them, and its claims the owners the retention policy asks for. With `podManagementPolicy: OrderedReady` (monotonic) the walk stops at the
//!    first pod it created or deleted, and at the first pod that is terminating, not
//!    Running and Ready, or not yet available (`minReadySeconds`): ordinal *i* is created
//!    only once 0..*i*-1 are Running and Ready. With `Parallel` every ordinal is handled at
//!    once.
//! 3. The condemned, highest ordinal first: their claims get the owners the retention
//!    policy asks for (the pod itself with `whenScaled: Delete`), then they are deleted. Monotonically one at a time, and only
//!    when every pod of the range is healthy and the pod is healthy itself or the first
//!    unhealthy one; a terminating pod is waited for.
//! 4. `RollingUpdate` only: from the highest ordinal down to the `partition`, the first pod
//!    not at the update revision is deleted (one per sync; it is recreated at the update
//!    revision by step 2), and the walk stops at a pod that is unavailable. `OnDelete`
//!    replaces pods only when users delete them.
//!
//! A set being deleted is not acted on; its status is still computed.

use super::identity::{
    has_ended, in_ordinal_range, is_created, is_pending, is_running_and_available,
    is_running_and_ready, is_terminating, is_unavailable, missing_identity_labels, ordinal_of,
    pod_revision, set_replicas, start_ordinal, storage_matches,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Which of the set's two revisions a pod is created at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `status.currentRevision`: below the partition during a rolling update.
    Current,
    /// `status.updateRevision`: the set's template now.
    Update,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// It ended (`Failed` or `Succeeded`); it is recreated under the same name.
    Ended,
    /// Its ordinal is beyond the set's range (scale down).
    Condemned,
    /// It is not at the update revision (rolling update).
    Update,
}

/// One change to the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the pod of `ordinal` at `revision`, its missing claims first.
    Create {
        /// The pod's ordinal.
        ordinal: i32,
        /// The revision it is made from.
        revision: Which,
    },
    /// Create the claims the (existing, pending) pod of `ordinal` lacks.
    CreateClaims {
        /// The pod's ordinal.
        ordinal: i32,
    },
    /// Delete pod `name`, if it is still the pod `uid`.
    Delete {
        /// The pod's name.
        name: String,
        /// The pod's uid.
        uid: String,
        /// Why.
        reason: DeleteReason,
    },
    /// Give claim `claim` the owner references `owners` (the retention policy's).
    SetClaimOwners {
        /// The claim's name.
        claim: String,
        /// Its owner references, all of them.
        owners: Vec<OwnerReference>,
    },
    /// Add `labels` (the identity labels it lacks) to pod `name`.
    Relabel {
        /// The pod's name.
        name: String,
        /// The labels to set.
        labels: BTreeMap<String, String>,
    },
}

/// The replica counts of a status (`replicas`, `readyReplicas`, `availableReplicas`,
/// `currentReplicas`, `updatedReplicas`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods that exist.
    pub replicas: i32,
    /// Running and Ready.
    pub ready: i32,
    /// Running and ready for `minReadySeconds`.
    pub available: i32,
    /// Existing, not terminating, at the current revision.
    pub current: i32,
    /// Existing, not terminating, at the update revision.
    pub updated: i32,
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Steps run one after the other, each stopping the rest if it fails; the actions of
    /// one step run concurrently (in slow-start batches).
    pub steps: Vec<Vec<Action>>,
    /// The replica counts after the plan's rolling-update deletion (if any).
    pub counts: Counts,
}

/// What [`plan`] reads besides the set and its pods.
#[derive(Debug, Clone, Copy)]
pub struct Revisions<'a> {
    /// The name of the current revision.
    pub current: &'a str,
    /// The name of the update revision.
    pub update: &'a str,
}

/// What [`plan`] knows of the claims.
pub trait ClaimView {
    /// Whether some claim of the pod of `ordinal` does not exist.
    fn lacks_claims(&self, ordinal: i32) -> bool;
    /// The claims of `pod` whose owner references the retention policy wants changed, with
    /// the references they should have.
    fn owner_updates(&self, pod: &Pod) -> Vec<(String, Vec<OwnerReference>)>;
}

/// Counts `pods` (those with an ordinal) for the status.
pub fn count(
    pods: &[&Pod],
    min_ready_seconds: i32,
    revisions: Revisions<'_>,
    now: Timestamp,
) -> Counts {
    let mut c = Counts::default();
    for pod in pods {
        if is_created(pod) {
            c.replicas += 1;
        }
        if is_running_and_ready(pod) {
            c.ready += 1;
            if is_running_and_available(pod, min_ready_seconds, now) {
                c.available += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            let rev = pod_revision(pod);
            if rev == revisions.current {
                c.current += 1;
            }
            if rev == revisions.update {
                c.updated += 1;
            }
        }
    }
    c
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Whether the set creates and deletes pods one at a time in ordinal order.
pub fn is_monotonic(set: &StatefulSet) -> bool {
    set.spec.pod_management_policy.as_deref() != Some("Parallel")
}

fn is_on_delete(set: &StatefulSet) -> bool {
    set.spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        == Some("OnDelete")
}

fn partition(set: &StatefulSet) -> Option<i32> {
    let s = set.spec.update_strategy.as_ref()?;
    if s.type_.as_deref().is_some_and(|t| t != "RollingUpdate") {
        return None;
    }
    Some(
        s.rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .unwrap_or(0)
            .max(0),
    )
}

/// The revision a missing pod of `ordinal` is created at: the current one below the
/// rolling update's partition (or, without one, below `status.currentReplicas`), else the
/// update revision.
pub fn revision_for_new_pod(set: &StatefulSet, ordinal: i32) -> Which {
    let start = i64::from(start_ordinal(set));
    let ord = i64::from(ordinal);
    let strategy = set.spec.update_strategy.as_ref();
    let rolling = !is_on_delete(set);
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let below = match ru {
        None if rolling => {
            let current = set
                .status
                .as_ref()
                .and_then(|s| s.current_replicas)
                .unwrap_or(0);
            ord < start + i64::from(current)
        }
        None => false,
        Some(r) => ord < start + i64::from(r.partition.unwrap_or(0)),
    };
    if below {
        Which::Current
    } else {
        Which::Update
    }
}

/// Decides one sync of `set` over its claimed `pods` (see the [module docs](self)), with
/// what `claims` tells of their claims.
pub fn plan(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    revisions: Revisions<'_>,
    now: Timestamp,
    claims: &dyn ClaimView,
) -> Plan {
    let start = start_ordinal(set);
    let n = usize::try_from(set_replicas(set)).unwrap_or(0);
    let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
    let mut slots: Vec<Option<&Pod>> = vec![None; n];
    let mut condemned: Vec<(i32, &Pod)> = Vec::new();
    for pod in pods {
        let Some(ord) = ordinal_of(pod) else {
            continue;
        };
        if in_ordinal_range(set, ord) {
            if let Some(slot) = usize::try_from(ord - start)
                .ok()
                .and_then(|i| slots.get_mut(i))
            {
                *slot = Some(pod);
            }
        } else {
            condemned.push((ord, pod));
        }
    }
    condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
    let existing: Vec<&Pod> = slots
        .iter()
        .flatten()
        .copied()
        .chain(condemned.iter().map(|(_, p)| *p))
        .collect();
    let mut out = Plan {
        steps: Vec::new(),
        counts: count(&existing, min_ready, revisions, now),
    };
    if set.metadata.deletion_timestamp.is_some() {
        return out;
    }
    // The first unhealthy pod: a missing ordinal counts (it is not available), then the
    // condemned from the lowest ordinal.
    let first_unhealthy: Option<&str> = slots
        .iter()
        .enumerate()
        .find(|(_, p)| p.is_none_or(|p| is_unavailable(p, min_ready, now)))
        .map(|(_, p)| p.map_or("", |p| p.metadata.name.as_deref().unwrap_or("")))
        .or_else(|| {
            condemned
                .iter()
                .rev()
                .find(|(_, p)| is_unavailable(p, min_ready, now))
                .map(|(_, p)| p.metadata.name.as_deref().unwrap_or(""))
        });
    let monotonic = is_monotonic(set);
    let mut deleted: HashSet<String> = HashSet::new();

    // Step 2: the ordinals of the range.
    let mut parallel_step = Vec::new();
    let mut push = |steps: &mut Vec<Vec<Action>>, a: Action| {
        if monotonic {
            steps.push(vec![a]);
        } else {
            parallel_step.push(a);
        }
    };
    for (i, slot) in slots.iter().enumerate() {
        let ordinal = start + i32::try_from(i).unwrap_or(i32::MAX);
        let Some(pod) = slot else {
            push(
                &mut out.steps,
                Action::Create {
                    ordinal,
                    revision: revision_for_new_pod(set, ordinal),
                },
            );
            if monotonic {
                return out;
            }
            continue;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        if has_ended(pod) {
            if !is_terminating(pod) {
                deleted.insert(name.clone());
                push(
                    &mut out.steps,
                    Action::Delete {
                        name,
                        uid: uid_of(pod),
                        reason: DeleteReason::Ended,
                    },
                );
            }
            if monotonic {
                return out;
            }
            continue;
        }
        if is_pending(pod) && claims.lacks_claims(ordinal) {
            push(&mut out.steps, Action::CreateClaims { ordinal });
        }
        if monotonic
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || !is_running_and_available(pod, min_ready, now))
        {
            return out;
        }
        let labels = missing_identity_labels(set, pod);
        if !labels.is_empty() {
            push(&mut out.steps, Action::Relabel { name, labels });
        }
        if !is_pending(pod) && !storage_matches(set, pod) && claims.lacks_claims(ordinal) {
            push(&mut out.steps, Action::CreateClaims { ordinal });
        }
        for (claim, owners) in claims.owner_updates(pod) {
            push(&mut out.steps, Action::SetClaimOwners { claim, owners });
        }
    }
    if !parallel_step.is_empty() {
        out.steps.push(std::mem::take(&mut parallel_step));
    }

    // Step 3: the condemned, highest ordinal first: their claims are handed to them (if
    // they are to go with them), then they are deleted.
    let mut owners_step = Vec::new();
    for (_, pod) in &condemned {
        for (claim, owners) in claims.owner_updates(pod) {
            let a = Action::SetClaimOwners { claim, owners };
            if monotonic {
                out.steps.push(vec![a]);
            } else {
                owners_step.push(a);
            }
        }
    }
    if !owners_step.is_empty() {
        out.steps.push(owners_step);
    }
    let mut condemned_step = Vec::new();
    for (_, pod) in &condemned {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if is_terminating(pod) {
            if monotonic {
                return out;
            }
            continue;
        }
        let is_first_unhealthy = first_unhealthy == Some(name.as_str());
        if monotonic
            && !is_first_unhealthy
            && (!is_running_and_ready(pod) || !is_running_and_available(pod, min_ready, now))
        {
            return out;
        }
        deleted.insert(name.clone());
        condemned_step.push(Action::Delete {
            name,
            uid: uid_of(pod),
            reason: DeleteReason::Condemned,
        });
        if monotonic {
            out.steps.push(condemned_step);
            return out;
        }
    }
    if !condemned_step.is_empty() {
        out.steps.push(condemned_step);
    }

    // Step 4: the rolling update, highest ordinal first.
    let Some(partition) = partition(set) else {
        return out;
    };
    let update_min = usize::try_from(partition).unwrap_or(0);
    for i in (update_min..n).rev() {
        let Some(pod) = slots[i] else {
            // Being created at the update revision: not available yet.
            return out;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let gone = is_terminating(pod) || deleted.contains(&name);
        if pod_revision(pod) != revisions.update && !gone {
            out.steps.push(vec![Action::Delete {
                name,
                uid: uid_of(pod),
                reason: DeleteReason::Update,
            }]);
            out.counts.current -= 1;
            return out;
        }
        if gone || is_unavailable(pod, min_ready, now) {
            return out;
        }
    }
    out
}

/// Completes a rolling update in `counts`' terms: once every pod is at the update revision
/// and ready, the update revision becomes the current one. Returns the current revision
/// and count to report.
pub fn complete_rolling_update<'a>(
    set: &StatefulSet,
    counts: Counts,
    revisions: Revisions<'a>,
) -> (&'a str, i32) {
    let rolling = partition(set).is_some();
    if rolling && counts.updated == counts.replicas && counts.ready == counts.replicas {
        (revisions.update, counts.updated)
    } else {
        (revisions.current, counts.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const NOW: i64 = 10_000;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn set(replicas: i32, policy: &str, strategy: serde_json::Value) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {
                "replicas": replicas,
                "serviceName": "web",
                "podManagementPolicy": policy,
                "updateStrategy": strategy,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}
            }
        }))
        .unwrap()
    }

    fn ordered(replicas: i32) -> StatefulSet {
        set(
            replicas,
            "OrderedReady",
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        )
    }

    #[derive(Clone, Copy)]
    enum State {
        Ready,
        Running,
        Pending,
        Failed,
        Terminating,
    }

    fn pod(ordinal: i32, state: State, rev: &str) -> Arc<Pod> {
        let name = format!("web-{ordinal}");
        let (phase, ready) = match state {
            State::Ready | State::Terminating => ("Running", true),
            State::Running => ("Running", false),
            State::Pending => ("Pending", false),
            State::Failed => ("Failed", false),
        };
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                uid: Some(format!("uid-{name}")),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        ("app".to_string(), "web".to_string()),
                        ("controller-revision-hash".into(), rev.into()),
                        ("statefulset.kubernetes.io/pod-name".into(), name),
                        ("apps.kubernetes.io/pod-index".into(), ordinal.to_string()),
                    ]
                    .into(),
                ),
                deletion_timestamp: matches!(state, State::Terminating).then(|| Time(ts(NOW))),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(ts(NOW - 100))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    const REVS: Revisions<'static> = Revisions {
        current: "web-1",
        update: "web-1",
    };

    /// Claims as a test wants them: which ordinals lack theirs, which pods' claims need
    /// new owners.
    struct Claims {
        lacking: Vec<i32>,
        owners_of: Vec<&'static str>,
    }

    impl ClaimView for Claims {
        fn lacks_claims(&self, ordinal: i32) -> bool {
            self.lacking.contains(&ordinal)
        }
        fn owner_updates(&self, pod: &Pod) -> Vec<(String, Vec<OwnerReference>)> {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            if self.owners_of.contains(&name) {
                vec![(format!("www-{name}"), Vec::new())]
            } else {
                Vec::new()
            }
        }
    }

    const NO_CLAIMS: Claims = Claims {
        lacking: Vec::new(),
        owners_of: Vec::new(),
    };

    fn run(set: &StatefulSet, pods: &[Arc<Pod>]) -> Plan {
        plan(set, pods, REVS, ts(NOW), &NO_CLAIMS)
    }

    fn create(ordinal: i32) -> Action {
        Action::Create {
            ordinal,
            revision: Which::Update,
        }
    }

    fn delete(ordinal: i32, reason: DeleteReason) -> Action {
        Action::Delete {
            name: format!("web-{ordinal}"),
            uid: format!("uid-web-{ordinal}"),
            reason,
        }
    }

    #[test]
    fn ordered_creation_waits_for_each_predecessor() {
        let s = ordered(3);
        assert_eq!(run(&s, &[]).steps, [vec![create(0)]]);
        // web-0 exists but is not Running and Ready: nothing more.
        for state in [State::Pending, State::Running, State::Terminating] {
            assert!(run(&s, &[pod(0, state, "web-1")]).steps.is_empty());
        }
        assert_eq!(
            run(&s, &[pod(0, State::Ready, "web-1")]).steps,
            [vec![create(1)]]
        );
        // A gap below is filled first, even when higher ordinals exist.
        assert_eq!(
            run(
                &s,
                &[pod(0, State::Ready, "web-1"), pod(2, State::Ready, "web-1")]
            )
            .steps,
            [vec![create(1)]]
        );
        let all: Vec<_> = (0..3).map(|i| pod(i, State::Ready, "web-1")).collect();
        let p = run(&s, &all);
        assert!(p.steps.is_empty());
        assert_eq!(
            p.counts,
            Counts {
                replicas: 3,
                ready: 3,
                available: 3,
                current: 3,
                updated: 3
            }
        );
    }

    #[test]
    fn min_ready_seconds_holds_the_next_pod_back() {
        let mut s = ordered(2);
        s.spec.min_ready_seconds = Some(500);
        let p = run(&s, &[pod(0, State::Ready, "web-1")]);
        assert!(p.steps.is_empty(), "ready for 100 s of 500");
        assert_eq!((p.counts.ready, p.counts.available), (1, 0));
        s.spec.min_ready_seconds = Some(50);
        assert_eq!(
            run(&s, &[pod(0, State::Ready, "web-1")]).steps,
            [vec![create(1)]]
        );
    }

    #[test]
    fn parallel_creates_everything_at_once() {
        let s = set(
            3,
            "Parallel",
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        );
        assert_eq!(run(&s, &[]).steps, [vec![create(0), create(1), create(2)]]);
        // An unhealthy pod does not hold the others back.
        assert_eq!(
            run(&s, &[pod(0, State::Pending, "web-1")]).steps,
            [vec![create(1), create(2)]]
        );
    }

    #[test]
    fn ended_pods_are_deleted_to_be_recreated() {
        let s = ordered(2);
        let p = run(
            &s,
            &[
                pod(0, State::Failed, "web-1"),
                pod(1, State::Ready, "web-1"),
            ],
        );
        assert_eq!(p.steps, [vec![delete(0, DeleteReason::Ended)]]);
        // Once it is gone, it is created again under its name.
        assert_eq!(
            run(&s, &[pod(1, State::Ready, "web-1")]).steps,
            [vec![create(0)]]
        );
    }

    #[test]
    fn scale_down_removes_the_highest_ordinal_one_at_a_time() {
        let s = ordered(1);
        let pods: Vec<_> = (0..3).map(|i| pod(i, State::Ready, "web-1")).collect();
        assert_eq!(
            run(&s, &pods).steps,
            [vec![delete(2, DeleteReason::Condemned)]]
        );
        // While web-2 terminates, web-1 waits.
        let terminating = vec![
            pod(0, State::Ready, "web-1"),
            pod(1, State::Ready, "web-1"),
            pod(2, State::Terminating, "web-1"),
        ];
        assert!(run(&s, &terminating).steps.is_empty());
        assert_eq!(
            run(&s, &pods[..2]).steps,
            [vec![delete(1, DeleteReason::Condemned)]]
        );
        // An unhealthy pod in the range halts the scale down.
        let halted = vec![
            pod(0, State::Running, "web-1"),
            pod(1, State::Ready, "web-1"),
        ];
        assert!(run(&s, &halted).steps.is_empty());
        // The first unhealthy condemned pod may go; a healthy one above it waits for it.
        let unhealthy_top = vec![
            pod(0, State::Ready, "web-1"),
            pod(1, State::Running, "web-1"),
        ];
        assert_eq!(
            run(&s, &unhealthy_top).steps,
            [vec![delete(1, DeleteReason::Condemned)]]
        );
        let parallel = set(1, "Parallel", serde_json::json!({"type": "OnDelete"}));
        assert_eq!(
            run(&parallel, &pods).steps,
            [vec![
                delete(2, DeleteReason::Condemned),
                delete(1, DeleteReason::Condemned)
            ]]
        );
    }

    #[test]
    fn rolling_update_goes_from_the_highest_ordinal_down_to_the_partition() {
        let revs = Revisions {
            current: "old",
            update: "new",
        };
        let s = ordered(3);
        let old: Vec<_> = (0..3).map(|i| pod(i, State::Ready, "old")).collect();
        let p = plan(&s, &old, revs, ts(NOW), &NO_CLAIMS);
        assert_eq!(p.steps, [vec![delete(2, DeleteReason::Update)]]);
        assert_eq!((p.counts.current, p.counts.updated), (2, 0));
        // web-2 recreated at the new revision but not ready yet: wait.
        let mid = vec![
            pod(0, State::Ready, "old"),
            pod(1, State::Ready, "old"),
            pod(2, State::Running, "new"),
        ];
        assert!(plan(&s, &mid, revs, ts(NOW), &NO_CLAIMS).steps.is_empty());
        let next = vec![
            pod(0, State::Ready, "old"),
            pod(1, State::Ready, "old"),
            pod(2, State::Ready, "new"),
        ];
        assert_eq!(
            plan(&s, &next, revs, ts(NOW), &NO_CLAIMS).steps,
            [vec![delete(1, DeleteReason::Update)]]
        );
        // A deleted pod comes back at the new revision.
        assert_eq!(
            plan(&s, &next[..1], revs, ts(NOW), &NO_CLAIMS).steps,
            [vec![create(1)]]
        );
        // With partition 2, only web-2 is updated; web-1 is recreated at the old revision.
        let part = set(
            3,
            "OrderedReady",
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}),
        );
        assert!(plan(&part, &next, revs, ts(NOW), &NO_CLAIMS)
            .steps
            .is_empty());
        assert_eq!(
            plan(&part, &[next[0].clone()], revs, ts(NOW), &NO_CLAIMS).steps,
            [vec![Action::Create {
                ordinal: 1,
                revision: Which::Current
            }]]
        );
        // OnDelete replaces nothing by itself.
        let on_delete = set(3, "OrderedReady", serde_json::json!({"type": "OnDelete"}));
        assert!(plan(&on_delete, &old, revs, ts(NOW), &NO_CLAIMS)
            .steps
            .is_empty());
    }

    #[test]
    fn completion_makes_the_update_revision_current() {
        let revs = Revisions {
            current: "old",
            update: "new",
        };
        let s = ordered(2);
        let done = Counts {
            replicas: 2,
            ready: 2,
            available: 2,
            current: 0,
            updated: 2,
        };
        assert_eq!(complete_rolling_update(&s, done, revs), ("new", 2));
        let half = Counts {
            current: 1,
            updated: 1,
            ..done
        };
        assert_eq!(complete_rolling_update(&s, half, revs), ("old", 1));
        let on_delete = set(2, "OrderedReady", serde_json::json!({"type": "OnDelete"}));
        assert_eq!(complete_rolling_update(&on_delete, done, revs), ("old", 0));
    }

    #[test]
    fn pending_pods_get_missing_claims_and_labels_are_restored() {
        let s = ordered(2);
        let lacking = Claims {
            lacking: vec![0],
            owners_of: Vec::new(),
        };
        let p = plan(
            &s,
            &[pod(0, State::Pending, "web-1")],
            REVS,
            ts(NOW),
            &lacking,
        );
        assert_eq!(p.steps, [vec![Action::CreateClaims { ordinal: 0 }]]);
        let mut bare = (*pod(0, State::Ready, "web-1")).clone();
        bare.metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("statefulset.kubernetes.io/pod-name");
        let p = run(&s, &[Arc::new(bare)]);
        assert_eq!(
            p.steps,
            [
                vec![Action::Relabel {
                    name: "web-0".into(),
                    labels: [(
                        "statefulset.kubernetes.io/pod-name".to_string(),
                        "web-0".to_string()
                    )]
                    .into()
                }],
                vec![create(1)]
            ]
        );
    }

    #[test]
    fn condemned_claims_get_their_owners_before_the_pod_goes() {
        let s = ordered(1);
        let pods: Vec<_> = (0..3).map(|i| pod(i, State::Ready, "web-1")).collect();
        let owners = Claims {
            lacking: Vec::new(),
            owners_of: vec!["web-1", "web-2"],
        };
        let set_owners = |name: &str| Action::SetClaimOwners {
            claim: format!("www-{name}"),
            owners: Vec::new(),
        };
        assert_eq!(
            plan(&s, &pods, REVS, ts(NOW), &owners).steps,
            [
                vec![set_owners("web-2")],
                vec![set_owners("web-1")],
                vec![delete(2, DeleteReason::Condemned)]
            ]
        );
    }

    #[test]
    fn a_set_being_deleted_is_only_counted() {
        let mut s = ordered(3);
        s.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        let p = run(&s, &[pod(0, State::Ready, "web-1")]);
        assert!(p.steps.is_empty());
        assert_eq!(p.counts.replicas, 1);
    }

    #[test]
    fn start_ordinal_shifts_the_range() {
        let mut s = ordered(2);
        s.spec.ordinals = Some(k8s_openapi::api::apps::v1::StatefulSetOrdinals { start: Some(3) });
        assert_eq!(run(&s, &[]).steps, [vec![create(3)]]);
        // web-0 is now outside the range: condemned once 3 and 4 are healthy.
        let pods = vec![
            pod(0, State::Ready, "web-1"),
            pod(3, State::Ready, "web-1"),
            pod(4, State::Ready, "web-1"),
        ];
        assert_eq!(
            run(&s, &pods).steps,
            [vec![delete(0, DeleteReason::Condemned)]]
        );
    }
}
