//! Rollout progress, after kube-controller-manager's `progress.go`: the `Progressing`
//! condition (created, updated, complete, or `ProgressDeadlineExceeded` after
//! `progressDeadlineSeconds` without progress), `ReplicaFailure` surfaced from the
//! ReplicaSets, and a timely look at a Deployment that may be stuck.

use super::sync::{calculate_status, refs, status_eq, Split};
use super::util::*;
use super::Shared;
use client::cache::object_key;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// The status of a Deployment mid-rollout: [`calculate_status`], with the `Progressing`
/// condition estimated (only with a progress deadline, and not again once the rollout is
/// complete) and the ReplicaSets' failures.
pub(super) fn rollout_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = calculate_status(d, all, new, now);
    if !has_progress_deadline(d) {
        remove_condition(&mut status, PROGRESSING);
    }
    let current_status = d.status.clone().unwrap_or_default();
    let current = get_condition(&current_status, PROGRESSING);
    let complete_before = status.replicas.unwrap_or(0) == status.updated_replicas.unwrap_or(0)
        && current.is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
    if has_progress_deadline(d) && !complete_before {
        let subject = |what: &str| match new {
            Some(rs) => format!(
                "ReplicaSet {:?} {what}",
                rs.metadata.name.as_deref().unwrap_or("")
            ),
            None => format!(
                "Deployment {:?} {what}",
                d.metadata.name.as_deref().unwrap_or("")
            ),
        };
        if deployment_complete(d, &status) {
            set_condition(
                &mut status,
                new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE_REASON,
                    subject("has successfully progressed."),
                    now,
                ),
            );
        } else if deployment_progressing(d, &status) {
            // Progress refreshes the update time every time (the reason stays the same),
            // and keeps the transition time while the status stays True.
            let mut cond = new_condition(
                PROGRESSING,
                "True",
                REPLICA_SET_UPDATED_REASON,
                subject("is progressing."),
                now,
            );
            if let Some(cur) = current {
                if cur.status.as_deref() == Some("True") {
                    cond.last_transition_time = cur.last_transition_time.clone();
                }
                remove_condition(&mut status, PROGRESSING);
            }
            set_condition(&mut status, cond);
        } else if deployment_timed_out(d, &status, now) {
            set_condition(
                &mut status,
                new_condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT_REASON,
                    subject("has timed out progressing."),
                    now,
                ),
            );
        }
    }
    match replica_failures(all, new).into_iter().next() {
        Some(failure) => set_condition(&mut status, failure),
        None => remove_condition(&mut status, REPLICA_FAILURE),
    }
    status
}

/// The `ReplicaFailure` conditions of the new ReplicaSet, or else of the others.
fn replica_failures(all: &[&ReplicaSet], new: Option<&ReplicaSet>) -> Vec<DeploymentCondition> {
    let of = |rs: &ReplicaSet| -> Vec<DeploymentCondition> {
        rs.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| c.type_.as_deref() == Some(REPLICA_FAILURE))
            .map(replica_set_to_deployment_condition)
            .collect()
    };
    let from_new = new.map(of).unwrap_or_default();
    if !from_new.is_empty() {
        return from_new;
    }
    all.iter().flat_map(|rs| of(rs)).collect()
}

/// When to look at the Deployment again to tell whether it timed out: `None` when it
/// cannot time out (no deadline, no Progressing condition, complete, or timed out
/// already); zero when the deadline is (all but) reached; else the time left plus a second.
pub(super) fn stuck_requeue_after(
    d: &Deployment,
    new: &DeploymentStatus,
    now: Timestamp,
) -> Option<Duration> {
    let current_status = d.status.clone().unwrap_or_default();
    let current = get_condition(&current_status, PROGRESSING)?;
    if !has_progress_deadline(d)
        || deployment_complete(d, new)
        || current.reason.as_deref() == Some(TIMED_OUT_REASON)
    {
        return None;
    }
    let from = current.last_update_time.as_ref()?.0;
    let deadline = i64::from(d.spec.progress_deadline_seconds.unwrap_or(0).max(0));
    let left_ns =
        (from.as_nanosecond() + i128::from(deadline) * 1_000_000_000) - now.as_nanosecond();
    if left_ns < 1_000_000_000 {
        return Some(Duration::ZERO);
    }
    let left = Duration::from_nanos(u64::try_from(left_ns).unwrap_or(u64::MAX));
    Some(left + Duration::from_secs(1))
}

impl Shared {
    /// Writes the rollout status if it changed; otherwise schedules a look at a Deployment
    /// that may be stuck.
    pub(super) async fn sync_rollout_status(
        &self,
        d: &mut Deployment,
        rss: &[ReplicaSet],
        split: &Split,
    ) -> Result<(), String> {
        let all = refs(rss, &split.all());
        let status = rollout_status(d, &all, split.new.map(|i| &rss[i]), self.wall.now());
        if status_eq(d.status.as_ref(), &status) {
            match stuck_requeue_after(d, &status, self.wall.now_precise()) {
                Some(Duration::ZERO) => self.queue.add_rate_limited(object_key(&*d)),
                Some(after) => self.queue.add_after(object_key(&*d), after),
                None => {}
            }
            return Ok(());
        }
        d.status = Some(status);
        self.write_status(d).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn dep(replicas: i32) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: DeploymentSpec {
                replicas: Some(replicas),
                progress_deadline_seconds: Some(60),
                ..Default::default()
            },
            status: None,
        }
    }

    fn rs(name: &str, size: i32, available: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(size),
                ..Default::default()
            },
            status: Some(ReplicaSetStatus {
                replicas: size,
                available_replicas: Some(available),
                ready_replicas: Some(available),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn progressing_then_complete_then_left_alone() {
        let mut d = dep(3);
        d.status = Some(DeploymentStatus {
            observed_generation: Some(2),
            conditions: Some(vec![new_condition(
                PROGRESSING,
                "True",
                NEW_REPLICA_SET_REASON,
                "created".into(),
                t(100),
            )]),
            ..Default::default()
        });
        let (old, new) = (rs("web-a", 1, 1), rs("web-b", 3, 2));
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(110));
        let c = get_condition(&s, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(REPLICA_SET_UPDATED_REASON));
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-b\" is progressing.")
        );
        assert_eq!(
            c.last_transition_time,
            Some(Time(t(100))),
            "still True since 100"
        );
        assert_eq!(c.last_update_time, Some(Time(t(110))));

        d.status = Some(s);
        let (old, new) = (rs("web-a", 0, 0), rs("web-b", 3, 3));
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(120));
        let c = get_condition(&s, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE_REASON));
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-b\" has successfully progressed.")
        );
        assert_eq!(
            get_condition(&s, AVAILABLE).unwrap().status.as_deref(),
            Some("True")
        );
        // Complete: nothing more is estimated, and no look is scheduled.
        d.status = Some(s.clone());
        let again = rollout_status(&d, &[&old, &new], Some(&new), t(10_000));
        assert_eq!(
            get_condition(&again, PROGRESSING),
            get_condition(&s, PROGRESSING)
        );
        assert_eq!(stuck_requeue_after(&d, &again, t(10_000)), None);
    }

    #[test]
    fn no_progress_past_the_deadline_times_out() {
        let mut d = dep(3);
        let (old, new) = (rs("web-a", 3, 3), rs("web-b", 1, 0));
        d.status = Some(DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(4),
            updated_replicas: Some(1),
            available_replicas: Some(3),
            ready_replicas: Some(3),
            conditions: Some(vec![new_condition(
                PROGRESSING,
                "True",
                REPLICA_SET_UPDATED_REASON,
                "m".into(),
                t(1000),
            )]),
            ..Default::default()
        });
        // Stuck for 30 s of 60: look again in 31 s.
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(1030));
        assert_eq!(
            get_condition(&s, PROGRESSING).unwrap().reason.as_deref(),
            Some(REPLICA_SET_UPDATED_REASON)
        );
        assert_eq!(
            stuck_requeue_after(&d, &s, t(1030)),
            Some(Duration::from_secs(31))
        );
        // With a second left, a second more; at the deadline, at once.
        assert_eq!(
            stuck_requeue_after(&d, &s, t(1059)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(stuck_requeue_after(&d, &s, t(1060)), Some(Duration::ZERO));
        // Past it: ProgressDeadlineExceeded.
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(1061));
        let c = get_condition(&s, PROGRESSING).unwrap();
        assert_eq!(
            (c.status.as_deref(), c.reason.as_deref()),
            (Some("False"), Some(TIMED_OUT_REASON))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-b\" has timed out progressing.")
        );
        d.status = Some(s.clone());
        assert_eq!(stuck_requeue_after(&d, &s, t(2000)), None);
        // Without a deadline there is no Progressing condition at all.
        d.spec.progress_deadline_seconds = None;
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(5000));
        assert!(get_condition(&s, PROGRESSING).is_none());
    }

    #[test]
    fn replica_failures_surface_new_first() {
        let d = dep(3);
        let failing = |name: &str, msg: &str| {
            let mut r = rs(name, 3, 0);
            r.status.as_mut().unwrap().conditions = Some(vec![ReplicaSetCondition {
                type_: Some(REPLICA_FAILURE.into()),
                status: Some("True".into()),
                reason: Some("FailedCreate".into()),
                message: Some(msg.into()),
                last_transition_time: Some(Time(t(5))),
            }]);
            r
        };
        let (old, new) = (failing("a", "old quota"), failing("b", "new quota"));
        let s = rollout_status(&d, &[&old, &new], Some(&new), t(10));
        let c = get_condition(&s, REPLICA_FAILURE).unwrap();
        assert_eq!(c.message.as_deref(), Some("new quota"));
        assert_eq!(c.last_update_time, Some(Time(t(5))));
        let healthy = rs("b", 3, 0);
        let s = rollout_status(&d, &[&old, &healthy], Some(&healthy), t(10));
        assert_eq!(
            get_condition(&s, REPLICA_FAILURE)
                .unwrap()
                .message
                .as_deref(),
            Some("old quota")
        );
        let mut cleared = d.clone();
        cleared.status = Some(s);
        let s = rollout_status(&cleared, &[&healthy], Some(&healthy), t(10));
        assert!(get_condition(&s, REPLICA_FAILURE).is_none());
    }
}
