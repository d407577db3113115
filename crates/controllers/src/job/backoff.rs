//! The pause before a Job replaces failed pods: 10 s after the first failure since the last
//! success, doubling with every further one up to 10 minutes, counted from when the last
//! failed pod ended (kube-controller-manager's pod failure back-off).

use super::status::finished_time;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use std::time::Duration;

/// The first pause after a failure.
pub const DEFAULT_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
/// The longest pause.
pub const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10 * 60);

/// The failures of one Job since its last success.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    /// Pods that failed after the last pod that succeeded.
    pub failures_after_last_success: u32,
    /// When the last of them ended.
    pub last_failure_time: Option<Timestamp>,
}

impl BackoffRecord {
    /// The record after the pods that newly `succeeded` and `failed` (not counted before)
    /// are taken into account.
    pub fn with_new_pods(
        &self,
        succeeded: &[Arc<Pod>],
        failed: &[Arc<Pod>],
        now: Timestamp,
    ) -> BackoffRecord {
        let mut failed_times: Vec<Timestamp> =
            failed.iter().map(|p| finished_time(p, now)).collect();
        failed_times.sort();
        let last_success = succeeded.iter().map(|p| finished_time(p, now)).max();
        match last_success {
            None => match failed_times.last() {
                None => self.clone(),
                Some(&last) => BackoffRecord {
                    failures_after_last_success: self
                        .failures_after_last_success
                        .saturating_add(u32::try_from(failed_times.len()).unwrap_or(u32::MAX)),
                    last_failure_time: Some(last),
                },
            },
            Some(success) => {
                let after: Vec<Timestamp> =
                    failed_times.into_iter().filter(|t| *t > success).collect();
                BackoffRecord {
                    failures_after_last_success: u32::try_from(after.len()).unwrap_or(u32::MAX),
                    last_failure_time: after.last().copied(),
                }
            }
        }
    }

    /// How long pod creation must still wait at `now`.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let Some(last) = self.last_failure_time else {
            return Duration::ZERO;
        };
        if self.failures_after_last_success == 0 {
            return Duration::ZERO;
        }
        let mut backoff = DEFAULT_POD_FAILURE_BACKOFF;
        for _ in 1..self.failures_after_last_success {
            backoff = backoff.saturating_mul(2);
            if backoff >= MAX_POD_FAILURE_BACKOFF {
                backoff = MAX_POD_FAILURE_BACKOFF;
                break;
            }
        }
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
        backoff.saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn ended(at: i64) -> Arc<Pod> {
        Arc::new(Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            finished_at: Some(Time(ts(at))),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn failures_double_the_pause_and_a_success_resets_it() {
        let r = BackoffRecord::default();
        assert_eq!(r.remaining(ts(0)), Duration::ZERO);
        let r = r.with_new_pods(&[], &[ended(100)], ts(101));
        assert_eq!(r.failures_after_last_success, 1);
        assert_eq!(r.remaining(ts(104)), Duration::from_secs(6));
        assert_eq!(r.remaining(ts(200)), Duration::ZERO);
        let r = r.with_new_pods(&[], &[ended(120), ended(110)], ts(121));
        assert_eq!(r.failures_after_last_success, 3);
        assert_eq!(r.last_failure_time, Some(ts(120)));
        assert_eq!(r.remaining(ts(120)), Duration::from_secs(40));
        // Only the failures after the latest success count.
        let r = r.with_new_pods(&[ended(130)], &[ended(125), ended(140)], ts(141));
        assert_eq!(r.failures_after_last_success, 1);
        assert_eq!(r.last_failure_time, Some(ts(140)));
        let r = r.with_new_pods(&[ended(150)], &[], ts(151));
        assert_eq!(r, BackoffRecord::default());
        let many = BackoffRecord {
            failures_after_last_success: 30,
            last_failure_time: Some(ts(0)),
        };
        assert_eq!(many.remaining(ts(0)), MAX_POD_FAILURE_BACKOFF);
    }
}
