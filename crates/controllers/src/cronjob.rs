//! The CronJob controller: creates a Job from each CronJob's template at the times its
//! schedule names, as kube-controller-manager's `cronjob` controller (v2) does.
//!
//! Shape: shared CronJob and Job informers from one factory; handlers that map events to
//! CronJob keys on a rate-limited work queue; workers that read the caches and write
//! through the API. After every sync the CronJob is queued again for its next scheduled
//! time (plus 100 ms), so nothing polls.
//!
//! - **Scheduling.** The schedule ([`schedule`]) is read in UTC (`spec.timeZone` may be
//!   unset, `UTC` or `Etc/UTC`; another zone is reported as `UnknownTimeZone`). The time to
//!   run is the most recent scheduled time after the last one run (or the creation), and
//!   not older than `startingDeadlineSeconds`; one older than that is `MissSchedule`d.
//!   More than 100 missed times are reported as `TooManyMissedTimes` (the latest still
//!   runs).
//! - **Jobs.** Named `<cronjob>-<scheduled time in minutes since the epoch>` (so a time
//!   runs at most once), with the template's labels and annotations, the
//!   `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation and a controller
//!   reference. `concurrencyPolicy: Forbid` skips a time while a Job is active
//!   (`JobAlreadyActive`); `Replace` deletes the active Jobs first.
//! - **Status.** `active` (references to the running Jobs), `lastScheduleTime`,
//!   `lastSuccessfulTime`; finished Jobs beyond `successfulJobsHistoryLimit` /
//!   `failedJobsHistoryLimit` are deleted, oldest first.
//! - `suspend: true` creates nothing (Jobs already running are left alone).

pub mod schedule;

use crate::controller_ref_manager::{ensure_controller_uid_index, CONTROLLER_UID_INDEX};
use crate::controller_utils::{
    controller_of, finish_sync, is_namespace_terminating, new_controller_ref, update_status,
    ControllerError, WallClock,
};
use crate::event_recorder::{object_reference, EventRecorder, EventType};
use crate::job::status::{has_true_condition, COMPLETE, FAILED};
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Indexer, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory,
};
use client::clock::{RealClock, SharedClock};
use client::rest::{Api, Client, DeleteParams, PostParams, PropagationPolicy};
use client::workqueue::WorkQueue as _;
use client::workqueue::{
    default_controller_rate_limiter_with_clock, InMemoryMetrics, QueueConfig, RateLimitingQueue,
};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use schedule::Schedule;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The annotation recording, on each Job, the time it was scheduled for (RFC 3339).
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// More missed start times than this are reported as `TooManyMissedTimes`.
pub const MAX_MISSED_TIMES: usize = 100;
/// How long after a scheduled time the CronJob is looked at again.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// How a [`CronJobController`] runs. [`Default`]: 5 workers (kube-controller-manager's
/// `--concurrent-cron-job-syncs`), real time.
#[derive(Clone)]
pub struct CronJobControllerOptions {
    /// Workers syncing CronJobs concurrently.
    pub workers: usize,
    /// The clock schedules are read on (a fake one lets tests skip ahead).
    pub clock: SharedClock,
}

impl std::fmt::Debug for CronJobControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronJobControllerOptions")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Default for CronJobControllerOptions {
    fn default() -> Self {
        CronJobControllerOptions {
            workers: 5,
            clock: RealClock::shared(),
        }
    }
}

/// The CronJob controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it indexes the shared Job informer), then
/// await [`CronJobController::run`].
pub struct CronJobController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    cronjob_informer: SharedIndexInformer<CronJob>,
    job_informer: SharedIndexInformer<Job>,
    registrations: Vec<(Registration, bool)>,
    workers: usize,
}

impl std::fmt::Debug for CronJobController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronJobController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    cronjob_lister: Lister<CronJob>,
    job_indexer: Arc<Indexer<Job>>,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    recorder: EventRecorder,
    wall: WallClock,
}

impl CronJobController {
    /// A controller over the CronJobs and Jobs of `factory`'s informers, writing through
    /// `client`, with `workers` workers and real time.
    ///
    /// # Errors
    /// See [`CronJobController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<CronJobController, ControllerError> {
        Self::with_options(
            factory,
            client,
            CronJobControllerOptions {
                workers,
                ..Default::default()
            },
        )
    }

    /// A controller with explicit options.
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client;
    /// [`ControllerError::Informer`] if the shared Job informer was started before this
    /// controller could add its index.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue and the event recorder spawn tasks).
    pub fn with_options(
        factory: &SharedInformerFactory,
        client: Client,
        options: CronJobControllerOptions,
    ) -> Result<CronJobController, ControllerError> {
        let cronjob_informer = factory.informer::<CronJob>()?;
        let job_informer = factory.informer::<Job>()?;
        ensure_controller_uid_index(&job_informer)?;
        let clock = options.clock.clone();
        let metrics = Arc::new(InMemoryMetrics::with_clock("cronjob", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let recorder =
            EventRecorder::with_clock(client.clone(), "cronjob-controller", None, clock.clone());
        let shared = Arc::new(Shared {
            client,
            cronjob_lister: cronjob_informer.lister(),
            job_indexer: Arc::clone(job_informer.indexer()),
            queue,
            metrics,
            recorder,
            wall: WallClock::new(clock),
        });
        let (s1, s2) = (shared.clone(), shared.clone());
        let cj_reg = cronjob_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |cj: &Arc<CronJob>, _| s1.queue.add(object_key(&**cj)))
                .on_update(move |_: &Arc<CronJob>, cur: &Arc<CronJob>| {
                    s2.queue.add(object_key(&**cur))
                }),
        );
        let (j1, j2, j3) = (shared.clone(), shared.clone(), shared.clone());
        let job_reg = job_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |job: &Arc<Job>, _| j1.job_changed(job))
                .on_update(move |old: &Arc<Job>, cur: &Arc<Job>| {
                    if controller_of(&old.metadata) != controller_of(&cur.metadata) {
                        j2.job_changed(old);
                    }
                    j2.job_changed(cur);
                })
                .on_delete(move |d: &DeleteEvent<Job>| j3.job_changed(d.object())),
        );
        Ok(CronJobController {
            shared,
            factory: factory.clone(),
            cronjob_informer,
            job_informer,
            registrations: vec![(cj_reg, true), (job_reg, false)],
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the CronJob and Job caches,
    /// then syncs CronJobs until the controller is dropped (or forever).
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.cronjob_informer, &self.job_informer], Duration::MAX).await;
        tracing::info!(workers = self.workers, "starting the cronjob controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="cronjob"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }
}

impl Drop for CronJobController {
    fn drop(&mut self) {
        for (reg, is_cj) in &self.registrations {
            if *is_cj {
                self.cronjob_informer.remove_event_handler(reg);
            } else {
                self.job_informer.remove_event_handler(reg);
            }
        }
        self.shared.queue.shut_down();
    }
}

/// The name of the Job for the time `scheduled` (a minute since the epoch).
pub fn job_name(cronjob: &str, scheduled_minute: i64) -> String {
    format!("{cronjob}-{scheduled_minute}")
}

/// When a CronJob should have run last, as of `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The most recent scheduled minute at or before `now` and after the earliest time
    /// considered, if any.
    pub most_recent: Option<i64>,
    /// Whether more than [`MAX_MISSED_TIMES`] scheduled times fell in that window.
    pub too_many_missed: bool,
}

fn minute_of(t: Timestamp) -> i64 {
    t.as_second().div_euclid(60)
}

fn timestamp_of_minute(m: i64) -> Timestamp {
    Timestamp::from_second(m.saturating_mul(60)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The scheduled time a CronJob is due for at `now`: the latest one after its last
/// scheduled time (or its creation), and — with `startingDeadlineSeconds` — not before
/// `now` minus that deadline.
pub fn due(cj: &CronJob, schedule: &Schedule, now: Timestamp) -> Due {
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .or(cj.metadata.creation_timestamp.as_ref())
        .map_or(now, |t| t.0);
    if let Some(deadline) = cj.spec.starting_deadline_seconds {
        let cutoff = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(deadline))
            .unwrap_or(now);
        if cutoff > earliest {
            earliest = cutoff;
        }
    }
    let now_m = minute_of(now);
    let Some(first) = schedule.next(minute_of(earliest)).filter(|t| *t <= now_m) else {
        return Due {
            most_recent: None,
            too_many_missed: false,
        };
    };
    let mut missed = 1;
    let mut t = first;
    while missed <= MAX_MISSED_TIMES {
        match schedule.next(t) {
            Some(n) if n <= now_m => {
                missed += 1;
                t = n;
            }
            _ => break,
        }
    }
    Due {
        most_recent: schedule.prev(now_m).filter(|p| *p >= first),
        too_many_missed: missed > MAX_MISSED_TIMES,
    }
}

/// How long until the CronJob should be looked at again: its next scheduled time after
/// `now`, plus 100 ms.
pub fn requeue_after(schedule: &Schedule, now: Timestamp) -> Option<Duration> {
    let next = schedule.next(minute_of(now))?;
    let until = timestamp_of_minute(next).duration_since(now);
    Some(Duration::try_from(until).unwrap_or(Duration::ZERO) + NEXT_SCHEDULE_DELTA)
}

/// The Job a CronJob runs for the scheduled minute `scheduled`.
///
/// # Errors
/// The CronJob has no uid (it was never stored).
pub fn job_from_template(cj: &CronJob, scheduled: i64) -> Result<Job, String> {
    let spec = cj.spec.clone();
    let template = spec.job_template;
    let tmeta = template.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP_ANNOTATION.to_string(),
        timestamp_of_minute(scheduled)
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
    );
    let controller_ref =
        new_controller_ref(&cj.metadata, "batch/v1", "CronJob").ok_or("the cronjob has no uid")?;
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(
                cj.metadata.name.as_deref().unwrap_or_default(),
                scheduled,
            )),
            namespace: cj.metadata.namespace.clone(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    })
}

fn job_ref(job: &Job) -> ObjectReference {
    let mut r = object_reference(job);
    r.field_path = None;
    r
}

fn finished_condition(job: &Job) -> Option<&'static str> {
    if has_true_condition(job, COMPLETE) {
        Some(COMPLETE)
    } else if has_true_condition(job, FAILED) {
        Some(FAILED)
    } else {
        None
    }
}

/// The finished Jobs beyond `limit`, oldest (by start time; never-started last) first.
fn beyond_history_limit(mut jobs: Vec<Arc<Job>>, limit: Option<i32>) -> Vec<Arc<Job>> {
    let Some(limit) = limit else {
        return Vec::new();
    };
    let limit = usize::try_from(limit).unwrap_or(0);
    if jobs.len() <= limit {
        return Vec::new();
    }
    jobs.sort_by(|a, b| {
        let start = |j: &Job| {
            j.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0)
        };
        match (start(a), start(b)) {
            (Some(x), Some(y)) => x
                .cmp(&y)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.metadata.name.cmp(&b.metadata.name),
        }
    });
    let n = jobs.len() - limit;
    jobs.truncate(n);
    jobs
}

impl Shared {
    fn job_changed(&self, job: &Job) {
        let Some(r) = controller_of(&job.metadata) else {
            return;
        };
        if r.kind != "CronJob" {
            return;
        }
        let ns = job.metadata.namespace.as_deref();
        if let Some(cj) = self
            .cronjob_lister
            .get(ns, &r.name)
            .filter(|cj| cj.metadata.uid.as_deref() == Some(r.uid.as_str()))
        {
            self.queue.add(object_key(&*cj));
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await.map(|requeue| {
                if let Some(after) = requeue {
                    self.queue.add_after(key.clone(), after);
                }
            });
            finish_sync(&self.queue, key, result, "the cronjob");
        }
    }

    fn event(&self, cj: &CronJob, t: EventType, reason: &str, message: String) {
        self.recorder
            .event(&object_reference(cj), t, reason, message);
    }

    async fn delete_job(&self, cj: &CronJob, job_ns: &str, name: &str) -> Result<(), String> {
        let api: Api<Job> = Api::for_type(self.client.clone(), job_ns);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                self.event(
                    cj,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted job {name}"),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "FailedDelete",
                    format!("Deleted job: {e}"),
                );
                Err(format!("deleting job {name}: {e}"))
            }
        }
    }

    /// Syncs the CronJob `key`; returns when to look at it again.
    async fn sync(&self, key: &str) -> Result<Option<Duration>, String> {
        let Ok((Some(ns), name)) = split_key(key) else {
            return Ok(None);
        };
        let Some(cached) = self.cronjob_lister.get(Some(ns), name) else {
            return Ok(None);
        };
        let mut cj = (*cached).clone();
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        let jobs: Vec<Arc<Job>> = self
            .job_indexer
            .by_index(CONTROLLER_UID_INDEX, &uid)
            .unwrap_or_default()
            .into_iter()
            .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.kind == "CronJob"))
            .collect();
        let original_status = cj.status.clone();
        let result = self.sync_cronjob(&mut cj, &jobs).await;
        let cleaned = self.cleanup_finished_jobs(&mut cj, &jobs).await;
        if cj.status != original_status {
            update_status(&self.client, &cj)
                .await
                .map_err(|e| format!("updating the cronjob status: {e}"))?;
        }
        cleaned?;
        result
    }

    async fn sync_cronjob(
        &self,
        cj: &mut CronJob,
        jobs: &[Arc<Job>],
    ) -> Result<Option<Duration>, String> {
        let now = self.wall.now_precise();
        let ns = cj.metadata.namespace.clone().unwrap_or_default();
        let reference = object_reference(&*cj);
        let status = cj.status.get_or_insert_with(Default::default);
        let mut children = HashSet::new();
        for job in jobs {
            let juid = job.metadata.uid.clone().unwrap_or_default();
            children.insert(juid.clone());
            let in_active = status
                .active
                .iter()
                .flatten()
                .any(|r| r.uid.as_deref() == Some(juid.as_str()));
            let finished = finished_condition(job);
            if !in_active && finished.is_none() {
                // A running Job of ours not in the list: made by hand from us, or the
                // status write after its creation was lost. It is left as it is.
                tracing::debug!(job = ?job.metadata.name, "unexpected job of the cronjob");
            } else if in_active && finished.is_some() {
                if let Some(active) = status.active.as_mut() {
                    active.retain(|r| r.uid.as_deref() != Some(juid.as_str()));
                }
                self.recorder.event(
                    &reference,
                    EventType::Normal,
                    "SawCompletedJob",
                    format!(
                        "Saw completed job: {}, condition: {}",
                        job.metadata.name.as_deref().unwrap_or(""),
                        finished.unwrap_or("")
                    ),
                );
            }
            if finished == Some(COMPLETE) {
                if let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.clone()) {
                    if status
                        .last_successful_time
                        .as_ref()
                        .is_none_or(|t| done.0 > t.0)
                    {
                        status.last_successful_time = Some(done);
                    }
                }
            }
        }
        // Jobs in the list that no longer exist.
        let missing: Vec<ObjectReference> = status
            .active
            .iter()
            .flatten()
            .filter(|r| !children.contains(r.uid.as_deref().unwrap_or("")))
            .cloned()
            .collect();
        for r in missing {
            let name = r.name.clone().unwrap_or_default();
            let api: Api<Job> =
                Api::for_type(self.client.clone(), r.namespace.as_deref().unwrap_or(&ns));
            match api.get(&name).await {
                Err(e) if e.is_not_found() => {
                    if let Some(active) = status.active.as_mut() {
                        active.retain(|a| a.uid != r.uid);
                    }
                    self.recorder.event(
                        &reference,
                        EventType::Normal,
                        "MissingJob",
                        format!("Active job went missing: {name}"),
                    );
                }
                Err(e) => return Err(format!("reading job {name}: {e}")),
                Ok(_) => {}
            }
        }
        if cj.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let spec = cj.spec.clone();
        if let Some(tz) = spec.time_zone.as_deref() {
            if tz != "UTC" && tz != "Etc/UTC" {
                self.event(
                    cj,
                    EventType::Warning,
                    "UnknownTimeZone",
                    format!("invalid timeZone: {tz:?}: only UTC is supported"),
                );
                return Ok(None);
            }
        }
        if spec.suspend == Some(true) {
            return Ok(None);
        }
        let sched = match Schedule::parse(&spec.schedule) {
            Ok(s) => s,
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "UnparseableSchedule",
                    format!("unparseable schedule: {:?} : {e}", spec.schedule),
                );
                return Ok(None);
            }
        };
        let next = requeue_after(&sched, now);
        let due = due(cj, &sched, now);
        if due.too_many_missed {
            self.event(
                cj,
                EventType::Warning,
                "TooManyMissedTimes",
                format!("too many missed start times: > {MAX_MISSED_TIMES}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"),
            );
        }
        let Some(scheduled) = due.most_recent else {
            return Ok(next);
        };
        let scheduled_at = timestamp_of_minute(scheduled);
        if let Some(deadline) = spec.starting_deadline_seconds {
            let late = scheduled_at
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(deadline))
                .is_ok_and(|t| t < now);
            if late {
                self.event(
                    cj,
                    EventType::Warning,
                    "MissSchedule",
                    format!(
                        "Missed scheduled time to start a job: {}",
                        scheduled_at.strftime("%a, %d %b %Y %H:%M:%S +0000")
                    ),
                );
                return Ok(next);
            }
        }
        let cj_name = cj.metadata.name.clone().unwrap_or_default();
        let wanted = job_name(&cj_name, scheduled);
        let status = cj.status.get_or_insert_with(Default::default);
        let already = status
            .active
            .iter()
            .flatten()
            .any(|r| r.name.as_deref() == Some(wanted.as_str()))
            || status
                .last_schedule_time
                .as_ref()
                .is_some_and(|t| t.0 == scheduled_at);
        if already {
            return Ok(next);
        }
        let active_count = status.active.as_ref().map_or(0, Vec::len);
        match spec.concurrency_policy.as_deref() {
            Some("Forbid") if active_count > 0 => {
                self.event(
                    cj,
                    EventType::Normal,
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
                );
                return Ok(next);
            }
            Some("Replace") => {
                let active = status.active.clone().unwrap_or_default();
                for r in active {
                    let jname = r.name.clone().unwrap_or_default();
                    let jns = r.namespace.clone().unwrap_or_else(|| ns.clone());
                    self.delete_job(cj, &jns, &jname).await?;
                    if let Some(list) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
                        list.retain(|a| a.uid != r.uid);
                    }
                }
            }
            _ => {}
        }
        let body = job_from_template(cj, scheduled)?;
        let api: Api<Job> = Api::for_type(self.client.clone(), &ns);
        let created = match api.create(&PostParams::default(), &body).await {
            Ok(j) => {
                self.event(
                    cj,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created job {wanted}"),
                );
                j
            }
            Err(e) if e.is_already_exists() => {
                // Created by an earlier sync whose status write was lost: adopt it as run.
                let existing = api
                    .get(&wanted)
                    .await
                    .map_err(|e| format!("reading job {wanted}: {e}"))?;
                let ours = controller_of(&existing.metadata)
                    .is_some_and(|r| Some(r.uid.as_str()) == cj.metadata.uid.as_deref());
                if !ours {
                    return Err(format!(
                        "job {wanted} exists and is not controlled by the cronjob"
                    ));
                }
                existing
            }
            Err(e) if is_namespace_terminating(&e) => return Ok(None),
            Err(e) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "FailedCreate",
                    format!("Error creating job: {e}"),
                );
                return Err(format!("creating job {wanted}: {e}"));
            }
        };
        let status = cj.status.get_or_insert_with(Default::default);
        if finished_condition(&created).is_none() {
            status
                .active
                .get_or_insert_with(Vec::new)
                .push(job_ref(&created));
        }
        status.last_schedule_time = Some(Time(scheduled_at));
        Ok(next)
    }

    /// Deletes the finished Jobs beyond the history limits. Returns an error if a delete
    /// failed.
    async fn cleanup_finished_jobs(
        &self,
        cj: &mut CronJob,
        jobs: &[Arc<Job>],
    ) -> Result<(), String> {
        let spec = cj.spec.clone();
        if spec.successful_jobs_history_limit.is_none() && spec.failed_jobs_history_limit.is_none()
        {
            return Ok(());
        }
        let mut succeeded = Vec::new();
        let mut failed = Vec::new();
        for job in jobs {
            match finished_condition(job) {
                Some(COMPLETE) => succeeded.push(job.clone()),
                Some(_) => failed.push(job.clone()),
                None => {}
            }
        }
        let mut doomed = beyond_history_limit(succeeded, spec.successful_jobs_history_limit);
        doomed.extend(beyond_history_limit(failed, spec.failed_jobs_history_limit));
        let mut first_error = Ok(());
        for job in doomed {
            let name = job.metadata.name.clone().unwrap_or_default();
            let jns = job.metadata.namespace.clone().unwrap_or_default();
            match self.delete_job(cj, &jns, &name).await {
                Ok(()) => {
                    if let Some(list) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
                        list.retain(|a| a.uid != job.metadata.uid);
                    }
                }
                Err(e) => {
                    if first_error.is_ok() {
                        first_error = Err(e);
                    }
                }
            }
        }
        first_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{CronJobSpec, CronJobStatus, JobStatus, JobTemplateSpec};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn cj(schedule: &str, created: i64, last: Option<i64>, deadline: Option<i64>) -> CronJob {
        CronJob {
            metadata: ObjectMeta {
                name: Some("tick".into()),
                namespace: Some("ns".into()),
                uid: Some("cj-uid".into()),
                creation_timestamp: Some(Time(ts(created))),
                ..Default::default()
            },
            spec: CronJobSpec {
                schedule: schedule.into(),
                starting_deadline_seconds: deadline,
                job_template: JobTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_string(), "tick".to_string())].into()),
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            },
            status: Some(CronJobStatus {
                last_schedule_time: last.map(|l| Time(ts(l))),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_most_recent_missed_time_is_due() {
        let every = Schedule::parse("*/1 * * * *").unwrap();
        // Created at 00:00:30; at 00:00:50 nothing is due yet.
        let c = cj("*/1 * * * *", 30, None, None);
        assert_eq!(due(&c, &every, ts(50)).most_recent, None);
        // At 00:03:10 the times 1, 2 and 3 were missed: 3 is due.
        let d = due(&c, &every, ts(190));
        assert_eq!(d.most_recent, Some(3));
        assert!(!d.too_many_missed);
        // After running minute 3, nothing more until minute 4.
        let c = cj("*/1 * * * *", 30, Some(180), None);
        assert_eq!(due(&c, &every, ts(200)).most_recent, None);
        assert_eq!(
            requeue_after(&every, ts(200)),
            Some(Duration::from_millis(40_100))
        );
        // More than 100 missed times are reported, and the latest still runs.
        let d = due(&c, &every, ts(180 + 60 * 150));
        assert!(d.too_many_missed);
        assert_eq!(d.most_recent, Some(3 + 150));
        // A starting deadline bounds how far back to look.
        let c = cj("*/1 * * * *", 30, Some(180), Some(90));
        let d = due(&c, &every, ts(180 + 60 * 150 + 10));
        assert!(!d.too_many_missed, "only the last 90 s count");
        assert_eq!(d.most_recent, Some(3 + 150));
    }

    #[test]
    fn jobs_are_named_after_their_minute_and_owned() {
        let c = cj("@hourly", 0, None, None);
        let job = job_from_template(&c, 29_000_000).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("tick-29000000"));
        assert_eq!(job.metadata.labels.as_ref().unwrap()["app"], "tick");
        assert_eq!(
            job.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION],
            "2025-02-19T21:20:00Z"
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("CronJob", "cj-uid")
        );
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn the_oldest_finished_jobs_go_beyond_the_limit() {
        let job = |name: &str, start: Option<i64>| {
            Arc::new(Job {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: None,
                status: Some(JobStatus {
                    start_time: start.map(|s| Time(ts(s))),
                    ..Default::default()
                }),
            })
        };
        let jobs = vec![
            job("c", Some(30)),
            job("none", None),
            job("a", Some(10)),
            job("b", Some(20)),
        ];
        let names = |v: Vec<Arc<Job>>| -> Vec<String> {
            v.into_iter()
                .map(|j| j.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(
            names(beyond_history_limit(jobs.clone(), Some(2))),
            ["a", "b"]
        );
        assert_eq!(names(beyond_history_limit(jobs.clone(), Some(0))).len(), 4);
        assert!(beyond_history_limit(jobs.clone(), Some(4)).is_empty());
        assert!(beyond_history_limit(jobs, None).is_empty());
    }
}
