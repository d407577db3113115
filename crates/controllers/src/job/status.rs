//! What the Job controller reads off a Job and its pods, as pure functions: whether a Job
//! finished, which pods count as failed, the back-off and deadline rules, and the
//! bookkeeping of `status.uncountedTerminatedPods` and of the Job's conditions.

use super::JOB_TRACKING_FINALIZER;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashSet;
use std::time::Duration;

/// Condition: the Job finished successfully.
pub const COMPLETE: &str = "Complete";
/// Condition: the Job failed.
pub const FAILED: &str = "Failed";
/// Condition: the Job will fail once its pods are gone (set before [`FAILED`]).
pub const FAILURE_TARGET: &str = "FailureTarget";
/// Condition: the Job will complete once its pods are gone (set before [`COMPLETE`]).
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
/// Condition: the Job is suspended (`True`) or was resumed (`False`).
pub const SUSPENDED: &str = "Suspended";

/// The reason and message of a Job that reached its completions.
pub const COMPLETIONS_REACHED: (&str, &str) = (
    "CompletionsReached",
    "Reached expected number of succeeded pods",
);
/// The reason and message of a Job whose pods failed too often.
pub const BACKOFF_LIMIT_EXCEEDED: (&str, &str) = (
    "BackoffLimitExceeded",
    "Job has reached the specified backoff limit",
);
/// The reason and message of a Job that ran past `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: (&str, &str) = (
    "DeadlineExceeded",
    "Job was active longer than specified deadline",
);

/// The condition of `type_` in `conditions`, if any.
pub fn find_condition<'a>(conditions: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition `type_` is present with status `True`.
pub fn has_true_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(|c| find_condition(c, type_))
        .is_some_and(|c| c.status == "True")
}

/// Whether the Job finished (a `Complete` or `Failed` condition that is `True`): then
/// nothing about it changes any more.
pub fn is_finished(job: &Job) -> bool {
    has_true_condition(job, COMPLETE) || has_true_condition(job, FAILED)
}

/// Whether `spec.suspend` is true.
pub fn is_suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

/// A condition stamped `now` (probe and transition time).
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Makes the condition `type_` say `status`/`reason`/`message`: replaces one that says
/// something else, adds a missing one unless it would be `False`. Returns whether the
/// list changed.
pub fn ensure_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status
            || c.reason.as_deref() != Some(reason)
            || c.message.as_deref() != Some(message)
        {
            *c = new_condition(type_, status, reason, message, now);
            return true;
        }
        return false;
    }
    if status == "False" {
        return false;
    }
    conditions.push(new_condition(type_, status, reason, message, now));
    true
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the pod ran to its end (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether the pod succeeded.
pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == "Succeeded"
}

/// Whether the pod is being deleted without having ended.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !is_terminal(pod)
}

/// Whether the pod still carries the Job's tracking finalizer.
pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == JOB_TRACKING_FINALIZER)
}

/// Whether pods are replaced only once they failed (`podReplacementPolicy: Failed`, which
/// a pod failure policy implies), rather than as soon as they are terminating.
pub fn only_replace_failed(job: &Job) -> bool {
    let Some(spec) = job.spec.as_ref() else {
        return false;
    };
    spec.pod_failure_policy.is_some() || spec.pod_replacement_policy.as_deref() == Some("Failed")
}

/// Whether the pod counts as failed: it is `Failed`, or (unless pods are replaced only once
/// failed) it is being deleted before it succeeded, since its end will not be seen.
pub fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    if only_replace_failed(job) {
        return phase(pod) == "Failed";
    }
    phase(pod) == "Failed" || (pod.metadata.deletion_timestamp.is_some() && !is_succeeded(pod))
}

/// For `restartPolicy: OnFailure`: whether the container restarts of the running and
/// pending pods reached `backoffLimit` (any restart, for a limit of 0).
pub fn past_backoff_limit_on_failure(job: &Job, pods: &[std::sync::Arc<Pod>]) -> bool {
    let Some(spec) = job.spec.as_ref() else {
        return false;
    };
    let policy = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref());
    if policy != Some("OnFailure") {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| i64::from(c.restart_count))
        .sum();
    let limit = i64::from(spec.backoff_limit.unwrap_or(6));
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// How long the Job may still run before `activeDeadlineSeconds` is reached: `None` when
/// it has no deadline, no start time or is suspended; zero once it is past.
pub fn remaining_active_time(job: &Job, now: Timestamp) -> Option<Duration> {
    let secs = job.spec.as_ref()?.active_deadline_seconds?;
    if is_suspended(job) {
        return None;
    }
    let start = job.status.as_ref()?.start_time.as_ref()?.0;
    let allowed = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    let elapsed = Duration::try_from(now.duration_since(start)).unwrap_or(Duration::ZERO);
    Some(allowed.saturating_sub(elapsed))
}

/// When the pod ended: the latest time one of its containers terminated, else when it
/// was marked for deletion, else `now`.
pub fn finished_time(pod: &Pod, now: Timestamp) -> Timestamp {
    let status = pod.status.as_ref();
    let latest = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    latest
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now)
}

/// Moves the uids of `status.uncountedTerminatedPods` whose pods no longer hold the
/// finalizer (`with_finalizer` are those that still do) into the `succeeded` and `failed`
/// counters. Returns whether anything moved.
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let Some(uncounted) = status.uncounted_terminated_pods.as_mut() else {
        return false;
    };
    let mut moved = false;
    for (list, counter) in [
        (&mut uncounted.succeeded, &mut status.succeeded),
        (&mut uncounted.failed, &mut status.failed),
    ] {
        let Some(uids) = list.as_mut() else {
            continue;
        };
        let before = uids.len();
        uids.retain(|u| with_finalizer.contains(u));
        let gone = before - uids.len();
        if gone > 0 {
            moved = true;
            let n = counter
                .unwrap_or(0)
                .saturating_add(i32::try_from(gone).unwrap_or(i32::MAX));
            *counter = Some(n);
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobSpec, UncountedTerminatedPods};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodSpec, PodStatus,
        PodTemplateSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Arc;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn pod(phase: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then(|| Time(ts(50))),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    fn job(policy: Option<&str>, restart: &str, backoff: i32) -> Job {
        Job {
            spec: Some(JobSpec {
                pod_replacement_policy: policy.map(Into::into),
                backoff_limit: Some(backoff),
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        restart_policy: Some(restart.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_terminating_pod_counts_as_failed_unless_only_failed_pods_are_replaced() {
        let default = job(Some("TerminatingOrFailed"), "Never", 6);
        let strict = job(Some("Failed"), "Never", 6);
        assert!(is_pod_failed(&pod("Failed", false), &default));
        assert!(is_pod_failed(&pod("Running", true), &default));
        assert!(!is_pod_failed(&pod("Succeeded", true), &default));
        assert!(!is_pod_failed(&pod("Running", false), &default));
        assert!(!is_pod_failed(&pod("Running", true), &strict));
        assert!(is_pod_failed(&pod("Failed", true), &strict));
        assert!(is_terminating(&pod("Running", true)));
        assert!(!is_terminating(&pod("Failed", true)));
    }

    #[test]
    fn restarts_count_against_the_backoff_limit_for_on_failure() {
        let mut p = pod("Running", false);
        p.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            restart_count: 2,
            ..Default::default()
        }]);
        let pods = vec![Arc::new(p)];
        assert!(past_backoff_limit_on_failure(
            &job(None, "OnFailure", 2),
            &pods
        ));
        assert!(!past_backoff_limit_on_failure(
            &job(None, "OnFailure", 3),
            &pods
        ));
        assert!(!past_backoff_limit_on_failure(
            &job(None, "Never", 1),
            &pods
        ));
        let none = vec![Arc::new(pod("Running", false))];
        assert!(!past_backoff_limit_on_failure(
            &job(None, "OnFailure", 0),
            &none
        ));
        assert!(past_backoff_limit_on_failure(
            &job(None, "OnFailure", 0),
            &pods
        ));
    }

    #[test]
    fn active_deadline_is_measured_from_the_start_time() {
        let mut j = job(None, "Never", 6);
        assert_eq!(remaining_active_time(&j, ts(100)), None);
        j.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
        assert_eq!(remaining_active_time(&j, ts(100)), None, "not started");
        j.status = Some(JobStatus {
            start_time: Some(Time(ts(100))),
            ..Default::default()
        });
        assert_eq!(
            remaining_active_time(&j, ts(110)),
            Some(Duration::from_secs(20))
        );
        assert_eq!(remaining_active_time(&j, ts(130)), Some(Duration::ZERO));
        j.spec.as_mut().unwrap().suspend = Some(true);
        assert_eq!(remaining_active_time(&j, ts(130)), None);
    }

    #[test]
    fn conditions_are_replaced_only_when_they_say_something_else() {
        let mut list = Vec::new();
        assert!(!ensure_condition(
            &mut list,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            ts(1)
        ));
        assert!(list.is_empty(), "a False condition is not added");
        assert!(ensure_condition(
            &mut list,
            SUSPENDED,
            "True",
            "JobSuspended",
            "Job suspended",
            ts(1)
        ));
        assert!(!ensure_condition(
            &mut list,
            SUSPENDED,
            "True",
            "JobSuspended",
            "Job suspended",
            ts(2)
        ));
        assert_eq!(list[0].last_transition_time, Some(Time(ts(1))));
        assert!(ensure_condition(
            &mut list,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            ts(3)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, "False");
    }

    #[test]
    fn uncounted_pods_are_counted_once_their_finalizer_is_gone() {
        let mut status = JobStatus {
            succeeded: Some(1),
            uncounted_terminated_pods: Some(UncountedTerminatedPods {
                succeeded: Some(vec!["a".into(), "b".into()]),
                failed: Some(vec!["c".into()]),
            }),
            ..Default::default()
        };
        let still: HashSet<String> = ["b".to_string()].into();
        assert!(clean_uncounted(&mut status, &still));
        assert_eq!(status.succeeded, Some(2));
        assert_eq!(status.failed, Some(1));
        let u = status.uncounted_terminated_pods.as_ref().unwrap();
        assert_eq!(u.succeeded.as_deref(), Some(&["b".to_string()][..]));
        assert_eq!(u.failed.as_deref(), Some(&[][..]));
        assert!(
            !clean_uncounted(&mut status, &still),
            "nothing more to move"
        );
    }

    #[test]
    fn a_pod_ends_when_its_last_container_terminated() {
        let mut p = pod("Failed", false);
        let term = |s| ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    finished_at: Some(Time(ts(s))),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.status.as_mut().unwrap().container_statuses = Some(vec![term(10), term(20)]);
        assert_eq!(finished_time(&p, ts(99)), ts(20));
        assert_eq!(finished_time(&pod("Failed", true), ts(99)), ts(50));
        assert_eq!(finished_time(&pod("Failed", false), ts(99)), ts(99));
    }
}
