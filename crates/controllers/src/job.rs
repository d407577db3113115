//! The Job controller: runs the pods of every batch/v1 Job until enough of them succeeded
//! or the Job fails, as kube-controller-manager's `job` controller does (1.32 semantics).
//!
//! Shape (client-go's pattern, like [`crate::replicaset`]): shared Job and Pod informers
//! from one factory; handlers that map events to Job keys on a rate-limited work queue;
//! workers that read the Job fresh from the API (its status is the controller's own
//! ledger, so a stale cached copy must never be built upon), its pods from the cache, and
//! write through the API.
//!
//! - **Pods.** Created from the template with `generateName: <job>-`, a controller
//!   reference and the [`JOB_TRACKING_FINALIZER`], up to `parallelism` at once and never
//!   more than the completions still missing (a Job without `completions` runs
//!   `parallelism` pods until one succeeds). `completionMode: Indexed` gives each pod an
//!   index in `[0, completions)` (annotation and label [`JOB_COMPLETION_INDEX_ANNOTATION`],
//!   the `JOB_COMPLETION_INDEX` environment variable, hostname `<job>-<index>`) and
//!   succeeds once every index has.
//! - **Counting.** A finished pod is first recorded by uid in
//!   `status.uncountedTerminatedPods`, then its finalizer is removed, then it moves to
//!   `succeeded`/`failed`: a pod is counted exactly once, even if it is deleted at any
//!   point. A pod being deleted before it succeeded counts as failed (unless
//!   `podReplacementPolicy: Failed`).
//! - **Failure.** More failed pods than `backoffLimit` (or, for `restartPolicy: OnFailure`,
//!   that many container restarts) fails the Job with `BackoffLimitExceeded`; running
//!   past `activeDeadlineSeconds` with `DeadlineExceeded`. Replacements of failed pods
//!   wait 10 s, doubling per further failure up to 10 minutes.
//! - **Finishing.** As in 1.32, the interim `SuccessCriteriaMet` / `FailureTarget`
//!   condition is written first; the remaining pods are deleted; `Complete` (with
//!   `completionTime`) / `Failed` follows once no pod is terminating and every pod is
//!   counted.
//! - **Suspend.** A suspended Job deletes its active pods (uncounted) and has a
//!   `Suspended` condition; resuming resets `startTime`.
//! - **Expectations.** After creating or deleting pods, the Job is not managed again until
//!   the informer has seen them ([`crate::expectations`]); pods whose finalizer removal
//!   is in flight are not counted a second time.
//!
//! Pods that hold the finalizer but have no Job (an orphan), or whose Job is gone or
//! finished, have it removed, so they can be deleted. `ttlSecondsAfterFinished`, pod
//! failure policies, success policies and `backoffLimitPerIndex` are not implemented.

mod backoff;
mod indexed;
pub mod status;

use crate::controller_ref_manager::{
    claim, ensure_controller_uid_index, owned_and_orphans, AdoptionCheck, Owner,
    CONTROLLER_UID_INDEX,
};
use crate::controller_utils::{
    controller_of, deletion_less, finish_sync, is_namespace_terminating, is_pod_active,
    is_pod_ready, label_selector_as_selector, new_controller_ref, pod_labels, selects_everything,
    slow_start_batch, sort_by_less, update_status, ControllerError, WallClock,
    SLOW_START_INITIAL_BATCH_SIZE,
};
use crate::event_recorder::{object_reference, EventRecorder, EventType};
use crate::expectations::ControllerExpectations;
use crate::pod_control::{PodControl, DEFAULT_MAX_IN_FLIGHT};
use backoff::BackoffRecord;
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Indexer, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory, NAMESPACE_INDEX,
};
use client::clock::{RealClock, SharedClock};
use client::rest::{Api, Client};
use client::workqueue::WorkQueue as _;
use client::workqueue::{
    default_controller_rate_limiter_with_clock, InMemoryMetrics, QueueConfig, RateLimitingQueue,
};
use k8s_openapi::api::batch::v1::{Job, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use status::{
    clean_uncounted, has_tracking_finalizer, is_finished, is_pod_failed, is_succeeded,
    is_suspended, is_terminating, only_replace_failed, past_backoff_limit_on_failure,
    remaining_active_time, BACKOFF_LIMIT_EXCEEDED, COMPLETE, COMPLETIONS_REACHED,
    DEADLINE_EXCEEDED, FAILED, FAILURE_TARGET, SUCCESS_CRITERIA_MET, SUSPENDED,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The finalizer the controller puts on every pod it creates, and removes once the pod is
/// counted: a pod deleted early is never lost from the Job's counts.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation (and label) carrying an Indexed Job pod's completion index.
pub const JOB_COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable through which an Indexed Job's containers read their index.
pub const JOB_COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// The most pods recorded in `status.uncountedTerminatedPods` per sync.
pub const MAX_UNCOUNTED_PODS: usize = 500;
/// The most pods one sync creates or deletes.
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;

/// Queue keys of pods whose finalizer may have to be removed (`:` never occurs in a
/// namespace or name, so they cannot collide with Job keys).
const ORPHAN_POD_PREFIX: &str = "pod:";

fn uid_of(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// How a [`JobController`] runs. [`Default`]: 5 workers (kube-controller-manager's
/// `--concurrent-job-syncs`), 128 pod requests in flight, real time.
#[derive(Clone)]
pub struct JobControllerOptions {
    /// Workers syncing Jobs concurrently (each Job is synced by one worker at a time).
    pub workers: usize,
    /// Pod requests in flight at once, across all workers.
    pub max_in_flight: usize,
    /// The clock of the work queue, the expectations, deadlines and back-off.
    pub clock: SharedClock,
}

impl std::fmt::Debug for JobControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobControllerOptions")
            .field("workers", &self.workers)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Default for JobControllerOptions {
    fn default() -> Self {
        JobControllerOptions {
            workers: 5,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            clock: RealClock::shared(),
        }
    }
}

/// The Job controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it adds an index to the shared pod
/// informer), then await [`JobController::run`]. Dropping the `run` future stops the
/// workers; dropping the controller unregisters its handlers and shuts its queue down.
pub struct JobController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    pod_informer: SharedIndexInformer<Pod>,
    job_informer: SharedIndexInformer<Job>,
    registrations: Vec<(Registration, bool)>,
    workers: usize,
}

impl std::fmt::Debug for JobController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    job_lister: Lister<Job>,
    job_indexer: Arc<Indexer<Job>>,
    pod_lister: Lister<Pod>,
    pod_indexer: Arc<Indexer<Pod>>,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    expectations: ControllerExpectations,
    /// Uids of pods whose finalizer removal was sent but not yet seen in the informer.
    removing_finalizer: Mutex<HashSet<String>>,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    pod_control: PodControl,
    recorder: EventRecorder,
    wall: WallClock,
}

impl JobController {
    /// A controller over the Jobs and Pods of `factory`'s informers, writing through
    /// `client`, with `workers` workers and otherwise [`JobControllerOptions::default`].
    ///
    /// # Errors
    /// See [`JobController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<JobController, ControllerError> {
        Self::with_options(
            factory,
            client,
            JobControllerOptions {
                workers,
                ..Default::default()
            },
        )
    }

    /// A controller with explicit options.
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client;
    /// [`ControllerError::Informer`] if the shared pod informer was started before this
    /// controller could add its index.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue and the event recorder spawn tasks).
    pub fn with_options(
        factory: &SharedInformerFactory,
        client: Client,
        options: JobControllerOptions,
    ) -> Result<JobController, ControllerError> {
        let pod_informer = factory.informer::<Pod>()?;
        let job_informer = factory.informer::<Job>()?;
        ensure_controller_uid_index(&pod_informer)?;
        let clock = options.clock.clone();
        let metrics = Arc::new(InMemoryMetrics::with_clock("job", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let recorder =
            EventRecorder::with_clock(client.clone(), "job-controller", None, clock.clone());
        let shared = Arc::new(Shared {
            pod_control: PodControl::new(client.clone(), recorder.clone(), options.max_in_flight),
            recorder,
            client,
            job_lister: job_informer.lister(),
            job_indexer: Arc::clone(job_informer.indexer()),
            pod_lister: pod_informer.lister(),
            pod_indexer: Arc::clone(pod_informer.indexer()),
            queue,
            metrics,
            expectations: ControllerExpectations::new(clock.clone()),
            removing_finalizer: Mutex::new(HashSet::new()),
            backoff: Mutex::new(HashMap::new()),
            wall: WallClock::new(clock),
        });
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let job_reg = job_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |job: &Arc<Job>, _| s1.queue.add(object_key(&**job)))
                .on_update(move |old: &Arc<Job>, cur: &Arc<Job>| {
                    if old.metadata.uid != cur.metadata.uid {
                        s2.job_deleted(old);
                    }
                    s2.queue.add(object_key(&**cur));
                })
                .on_delete(move |d: &DeleteEvent<Job>| s3.job_deleted(d.object())),
        );
        let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
        let pod_reg = pod_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |pod: &Arc<Pod>, _| p1.pod_added(pod))
                .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| p2.pod_updated(old, cur))
                .on_delete(move |d: &DeleteEvent<Pod>| {
                    // Gone: no finalizer removal of it is pending any more.
                    p3.removing_finalizer.lock().remove(uid_of(d.object()));
                    p3.pod_deleted(d.object())
                }),
        );
        Ok(JobController {
            shared,
            factory: factory.clone(),
            pod_informer,
            job_informer,
            registrations: vec![(job_reg, true), (pod_reg, false)],
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the Job and Pod caches, then
    /// syncs Jobs with the configured workers until the controller is dropped (or
    /// forever). Dropping the returned future stops the workers.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.pod_informer, &self.job_informer], Duration::MAX).await;
        tracing::info!(workers = self.workers, "starting the job controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="job"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }
}

impl Drop for JobController {
    fn drop(&mut self) {
        for (reg, is_job) in &self.registrations {
            if *is_job {
                self.job_informer.remove_event_handler(reg);
            } else {
                self.pod_informer.remove_event_handler(reg);
            }
        }
        self.shared.queue.shut_down();
    }
}

/// What a sync decided about the end of a Job.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finish {
    Success(String, String),
    Failure(String, String),
}

impl Finish {
    fn interim_type(&self) -> &'static str {
        match self {
            Finish::Success(..) => SUCCESS_CRITERIA_MET,
            Finish::Failure(..) => FAILURE_TARGET,
        }
    }

    fn final_type(&self) -> &'static str {
        match self {
            Finish::Success(..) => COMPLETE,
            Finish::Failure(..) => FAILED,
        }
    }

    fn reason_message(&self) -> (&str, &str) {
        match self {
            Finish::Success(r, m) | Finish::Failure(r, m) => (r, m),
        }
    }
}

fn finish_of(pair: (&str, &str), success: bool) -> Finish {
    let (r, m) = (pair.0.to_string(), pair.1.to_string());
    if success {
        Finish::Success(r, m)
    } else {
        Finish::Failure(r, m)
    }
}

/// The interim condition a previous sync recorded, as the end it stands for.
fn recorded_finish(status: &JobStatus) -> Option<Finish> {
    let conditions = status.conditions.as_deref().unwrap_or(&[]);
    let interim = |t: &str| {
        status::find_condition(conditions, t)
            .filter(|c| c.status == "True")
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            })
    };
    if let Some((r, m)) = interim(SUCCESS_CRITERIA_MET) {
        return Some(Finish::Success(r, m));
    }
    interim(FAILURE_TARGET).map(|(r, m)| Finish::Failure(r, m))
}

/// Statuses compare equal whether a server wrote zeros and empty lists or left them out
/// (an older kube-apiserver drops the `terminating` and `ready` counts it does not know, and
/// a zero there must not look like a change to write again and again).
fn status_equal(a: &JobStatus, b: &JobStatus) -> bool {
    fn norm(s: &JobStatus) -> JobStatus {
        let mut s = s.clone();
        for n in [
            &mut s.active,
            &mut s.succeeded,
            &mut s.failed,
            &mut s.ready,
            &mut s.terminating,
        ] {
            if *n == Some(0) {
                *n = None;
            }
        }
        if s.completed_indexes.as_deref() == Some("") {
            s.completed_indexes = None;
        }
        if s.conditions.as_ref().is_some_and(Vec::is_empty) {
            s.conditions = None;
        }
        let u = s.uncounted_terminated_pods.take().unwrap_or_default();
        let empty = |l: &Option<Vec<String>>| l.as_ref().is_none_or(Vec::is_empty);
        if !empty(&u.succeeded) || !empty(&u.failed) {
            s.uncounted_terminated_pods = Some(UncountedTerminatedPods {
                succeeded: u.succeeded.filter(|l| !l.is_empty()),
                failed: u.failed.filter(|l| !l.is_empty()),
            });
        }
        s
    }
    norm(a) == norm(b)
}

/// The pods to delete when `rm_at_least` active pods are too many: for an Indexed Job
/// first those with an invalid, repeated or already succeeded index, then the rest in
/// Kubernetes' deletion order (unassigned, pending, not ready first).
fn active_pods_for_removal(
    indexed: Option<(i32, &BTreeSet<i32>)>,
    active: &[Arc<Pod>],
    rm_at_least: usize,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<Arc<Pod>> {
    let mut rm = Vec::new();
    let mut left: Vec<Arc<Pod>> = Vec::new();
    match indexed {
        Some((completions, succeeded)) => {
            let mut seen = HashSet::new();
            let mut sorted = active.to_vec();
            // The most advanced pod of each index is kept.
            sort_by_less(&mut sorted, &|a: &Arc<Pod>, b: &Arc<Pod>| {
                deletion_less(b, 0, a, 0, now)
            });
            for p in sorted {
                match indexed::completion_index(&p) {
                    Some(ix) if ix < completions && !succeeded.contains(&ix) && seen.insert(ix) => {
                        left.push(p)
                    }
                    _ => rm.push(p),
                }
            }
        }
        None => left = active.to_vec(),
    }
    if rm.len() < rm_at_least {
        sort_by_less(&mut left, &|a: &Arc<Pod>, b: &Arc<Pod>| {
            deletion_less(a, 0, b, 0, now)
        });
        let more = rm_at_least - rm.len();
        rm.extend(left.into_iter().take(more));
    }
    rm
}

/// The template of an Indexed Job's pod of index `ix`.
fn indexed_template(template: &PodTemplateSpec, job_name: &str, ix: i32) -> PodTemplateSpec {
    let mut t = template.clone();
    let meta = t.metadata.get_or_insert_with(Default::default);
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(JOB_COMPLETION_INDEX_ANNOTATION.into(), ix.to_string());
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(JOB_COMPLETION_INDEX_ANNOTATION.into(), ix.to_string());
    if let Some(spec) = t.spec.as_mut() {
        spec.hostname = Some(format!("{job_name}-{ix}"));
        let env = EnvVar {
            name: JOB_COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!(
                        "metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"
                    ),
                }),
                ..Default::default()
            }),
        };
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            let vars = c.env.get_or_insert_with(Vec::new);
            if !vars.iter().any(|v| v.name == JOB_COMPLETION_INDEX_ENV) {
                vars.push(env.clone());
            }
        }
    }
    t
}

/// The strategic merge patch removing the tracking finalizer.
fn remove_finalizer_patch() -> serde_json::Value {
    serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER]}
    })
}

/// What one sync works with: the Job as last stored, and the status being built.
struct SyncCtx {
    key: String,
    job: Job,
    status: JobStatus,
    pods: Vec<Arc<Pod>>,
    active: Vec<Arc<Pod>>,
    indexed: bool,
    completions: Option<i32>,
    succeeded: i32,
    ready: i32,
    terminating: i32,
    succeeded_indexes: BTreeSet<i32>,
    prev_succeeded_indexes: BTreeSet<i32>,
    finish: Option<Finish>,
    backoff: BackoffRecord,
    removing: HashSet<String>,
}

impl Shared {
    fn job_deleted(&self, job: &Job) {
        let key = object_key(job);
        self.expectations.delete(&key);
        // Its pods may still hold the finalizer.
        if let Some(uid) = job.metadata.uid.as_deref() {
            for pod in self
                .pod_indexer
                .by_index(CONTROLLER_UID_INDEX, uid)
                .unwrap_or_default()
            {
                if has_tracking_finalizer(&pod) {
                    self.queue
                        .add(format!("{ORPHAN_POD_PREFIX}{}", object_key(&*pod)));
                }
            }
        }
        self.queue.add(key);
    }

    /// The Job a controller reference points at, if it is in the cache with that uid.
    fn resolve(
        &self,
        namespace: Option<&str>,
        r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Option<Arc<Job>> {
        if r.kind != "Job" {
            return None;
        }
        self.job_lister
            .get(namespace, &r.name)
            .filter(|j| j.metadata.uid.as_deref() == Some(r.uid.as_str()))
    }

    /// The key of the pod's Job, if it has one in the cache; else, when the pod holds the
    /// finalizer, queues the pod itself so the finalizer is looked at.
    fn job_key_of(&self, pod: &Pod) -> Option<String> {
        let job = controller_of(&pod.metadata)
            .and_then(|r| self.resolve(pod.metadata.namespace.as_deref(), r));
        match job {
            Some(j) => Some(object_key(&*j)),
            None => {
                if has_tracking_finalizer(pod) {
                    self.queue
                        .add(format!("{ORPHAN_POD_PREFIX}{}", object_key(pod)));
                }
                None
            }
        }
    }

    /// Jobs of the pod's namespace whose selector matches it (candidates to adopt it).
    fn jobs_selecting(&self, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        self.job_indexer
            .by_index(NAMESPACE_INDEX, ns)
            .unwrap_or_default()
            .into_iter()
            .filter(|j| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| {
                        !selects_everything(sel)
                            && label_selector_as_selector(sel)
                                .is_ok_and(|s| s.matches(pod_labels(pod)))
                    })
            })
            .map(|j| object_key(&*j))
            .collect()
    }

    fn pod_added(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(pod);
            return;
        }
        if controller_of(&pod.metadata).is_some() {
            if let Some(key) = self.job_key_of(pod) {
                self.expectations.creation_observed(&key);
                self.queue.add(key);
            }
            return;
        }
        for key in self.jobs_selecting(pod) {
            self.queue.add(key);
        }
        if has_tracking_finalizer(pod) {
            self.queue
                .add(format!("{ORPHAN_POD_PREFIX}{}", object_key(&**pod)));
        }
    }

    fn pod_updated(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        if !has_tracking_finalizer(cur) {
            self.removing_finalizer.lock().remove(uid_of(cur));
        }
        if controller_of(&old.metadata) != controller_of(&cur.metadata) {
            if let Some(key) = self.job_key_of(old) {
                self.queue.add(key);
            }
        }
        match self.job_key_of(cur) {
            Some(key) => {
                if cur.metadata.deletion_timestamp.is_some() {
                    self.expectations
                        .deletion_observed(&key, &object_key(&**cur));
                }
                self.queue.add(key);
            }
            None if controller_of(&cur.metadata).is_none() => {
                for key in self.jobs_selecting(cur) {
                    self.queue.add(key);
                }
            }
            None => {}
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        if !has_tracking_finalizer(pod) {
            self.removing_finalizer.lock().remove(uid_of(pod));
        }
        if let Some(key) = self.job_key_of(pod) {
            self.expectations.deletion_observed(&key, &object_key(pod));
            self.queue.add(key);
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = match key.strip_prefix(ORPHAN_POD_PREFIX) {
                Some(pod_key) => self.sync_orphan_pod(pod_key).await,
                None => self.sync(&key).await,
            };
            finish_sync(&self.queue, key, result, "the job");
        }
    }

    /// Removes the finalizer of a pod whose Job is gone or finished.
    async fn sync_orphan_pod(&self, pod_key: &str) -> Result<(), String> {
        let Ok((Some(ns), name)) = split_key(pod_key) else {
            return Ok(());
        };
        let Some(pod) = self.pod_lister.get(Some(ns), name) else {
            return Ok(());
        };
        if !has_tracking_finalizer(&pod) {
            return Ok(());
        }
        if let Some(r) = controller_of(&pod.metadata) {
            if r.kind != "Job" || !r.api_version.starts_with("batch/") {
                // Someone else's pod: not ours to release.
                return Ok(());
            }
            // Confirmed with the server, not the cache: a Job the informer has not shown
            // yet must not lose its pods' counts.
            let api: Api<Job> = Api::for_type(self.client.clone(), ns);
            match api.get(&r.name).await {
                Ok(job) if job.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                    if !is_finished(&job) {
                        // Its Job counts it.
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(format!("reading the job of {pod_key}: {e}")),
            }
        }
        match self
            .pod_control
            .patch(ns, name, &remove_finalizer_patch())
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(format!("removing the finalizer of {pod_key}: {e}")),
        }
    }

    /// Brings the Job `key` forward (see the module docs).
    async fn sync(&self, key: &str) -> Result<(), String> {
        let (ns, name) = match split_key(key) {
            Ok((Some(ns), name)) => (ns.to_string(), name.to_string()),
            _ => {
                tracing::warn!(key, "ignoring a malformed key");
                return Ok(());
            }
        };
        let api: Api<Job> = Api::for_type(self.client.clone(), &ns);
        let job = match api.get(&name).await {
            Ok(j) => j,
            Err(e) if e.is_not_found() => {
                self.expectations.delete(key);
                self.backoff.lock().remove(key);
                return Ok(());
            }
            Err(e) => return Err(format!("reading the job: {e}")),
        };
        if is_finished(&job) {
            self.backoff.lock().remove(key);
            return Ok(());
        }
        let Some(spec) = job.spec.clone() else {
            return Ok(());
        };
        let mode = spec.completion_mode.as_deref().unwrap_or("NonIndexed");
        if mode != "NonIndexed" && mode != "Indexed" {
            self.recorder.event(
                &object_reference(&job),
                EventType::Warning,
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown",
            );
            return Ok(());
        }
        let indexed = mode == "Indexed";
        let Some(selector_spec) = spec.selector.as_ref() else {
            tracing::warn!(key, "job has no selector: not managing it");
            return Ok(());
        };
        let selector = match label_selector_as_selector(selector_spec) {
            Ok(s) if !selects_everything(selector_spec) => s,
            Ok(_) => {
                tracing::warn!(key, "job selects every pod: not managing it");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "job has an invalid selector");
                return Ok(());
            }
        };
        if indexed && spec.completions.is_none() {
            tracing::warn!(key, "indexed job without completions: not managing it");
            return Ok(());
        }
        let satisfied = self.expectations.satisfied(key);
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let candidates = owned_and_orphans(&self.pod_indexer, &uid, &ns);
        let owner = Owner {
            meta: &job.metadata,
            api_version: "batch/v1",
            kind: "Job",
        };
        // The Job was just read from the server: that is the re-read adoption needs.
        let mut adoption = AdoptionCheck::new(|| Box::pin(async { Ok(()) }));
        let pods = claim(
            candidates,
            owner,
            |p: &Pod| selector.matches(pod_labels(p)),
            &mut adoption,
            |ns, name, patch| {
                let control = self.pod_control.clone();
                async move { control.patch(&ns, &name, &patch).await }
            },
        )
        .await
        .map_err(|e| e.to_string())?;

        let now = self.wall.now();
        let now_precise = self.wall.now_precise();
        let removing: HashSet<String> = {
            let set = self.removing_finalizer.lock();
            pods.iter()
                .map(|p| uid_of(p).to_string())
                .filter(|u| set.contains(u))
                .collect()
        };
        let mut status = job.status.clone().unwrap_or_default();
        let uncounted = status
            .uncounted_terminated_pods
            .get_or_insert_with(Default::default);
        let unc_succeeded: HashSet<String> =
            uncounted.succeeded.iter().flatten().cloned().collect();
        let unc_failed: HashSet<String> = uncounted.failed.iter().flatten().cloned().collect();
        let completions = spec.completions;
        let valid_index = |p: &Pod| {
            !indexed || indexed::completion_index(p).is_some_and(|ix| ix < completions.unwrap_or(0))
        };
        let countable = |p: &Arc<Pod>| {
            has_tracking_finalizer(p) && !removing.contains(uid_of(p)) && valid_index(p)
        };
        let new_succeeded: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| countable(p) && !unc_succeeded.contains(uid_of(p)) && is_succeeded(p))
            .cloned()
            .collect();
        let new_failed: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| countable(p) && !unc_failed.contains(uid_of(p)) && is_pod_failed(p, &job))
            .cloned()
            .collect();
        let active: Vec<Arc<Pod>> = pods.iter().filter(|p| is_pod_active(p)).cloned().collect();
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        let mut succeeded = status
            .succeeded
            .unwrap_or(0)
            .saturating_add(count(new_succeeded.len() + unc_succeeded.len()));
        let failed = status
            .failed
            .unwrap_or(0)
            .saturating_add(count(new_failed.len() + unc_failed.len()));
        if status.start_time.is_none() && !is_suspended(&job) {
            status.start_time = Some(Time(now));
        }
        let prev_backoff = self.backoff.lock().get(key).cloned().unwrap_or_default();
        let backoff = prev_backoff.with_new_pods(&new_succeeded, &new_failed, now_precise);

        let mut finish = recorded_finish(&status);
        if finish.is_none() {
            let backoff_limit = spec.backoff_limit.unwrap_or(6);
            if failed > backoff_limit || past_backoff_limit_on_failure(&job, &pods) {
                finish = Some(finish_of(BACKOFF_LIMIT_EXCEEDED, false));
            } else if let Some(left) = remaining_active_time(
                // With the start time this sync may just have set.
                &Job {
                    status: Some(status.clone()),
                    ..job.clone()
                },
                now_precise,
            ) {
                if left.is_zero() {
                    finish = Some(finish_of(DEADLINE_EXCEEDED, false));
                } else {
                    self.queue.add_after(key.to_string(), left);
                }
            }
        }
        let (mut prev_succeeded_indexes, mut succeeded_indexes) =
            (BTreeSet::new(), BTreeSet::new());
        if indexed {
            let c = completions.unwrap_or(0);
            prev_succeeded_indexes =
                indexed::parse_indexes(status.completed_indexes.as_deref().unwrap_or(""), c);
            succeeded_indexes = prev_succeeded_indexes.clone();
            for p in &pods {
                if is_succeeded(p) && has_tracking_finalizer(p) {
                    if let Some(ix) = indexed::completion_index(p).filter(|ix| *ix < c) {
                        succeeded_indexes.insert(ix);
                    }
                }
            }
            succeeded = count(succeeded_indexes.len());
        }
        let mut ctx = SyncCtx {
            key: key.to_string(),
            ready: count(active.iter().filter(|p| is_pod_ready(p)).count()),
            terminating: count(pods.iter().filter(|p| is_terminating(p)).count()),
            job,
            status,
            pods,
            active,
            indexed,
            completions,
            succeeded,
            succeeded_indexes,
            prev_succeeded_indexes,
            finish,
            backoff,
            removing,
        };
        let mut active_count = count(ctx.active.len());
        let mut manage_error = None;
        if ctx.finish.is_some() {
            let (deleted, deleted_ready, err) = self.delete_active_pods(&ctx).await;
            if deleted != active_count {
                // Pods are still going away: not finished yet.
                ctx.finish = None;
            }
            active_count -= deleted;
            ctx.terminating += deleted;
            ctx.ready -= deleted_ready;
            manage_error = err;
        } else {
            let mut managed = false;
            if satisfied && ctx.job.metadata.deletion_timestamp.is_none() {
                let (a, err) = self.manage_job(&mut ctx, active_count).await;
                active_count = a;
                manage_error = err;
                managed = true;
            }
            let complete = match ctx.completions {
                None => ctx.succeeded > 0 && active_count == 0,
                Some(c) => ctx.succeeded >= c && active_count == 0,
            };
            if complete {
                ctx.finish = Some(finish_of(COMPLETIONS_REACHED, true));
            } else if managed {
                self.update_suspend_condition(&mut ctx, now);
            }
        }
        ctx.status.active = Some(active_count);
        ctx.status.ready = Some(ctx.ready);
        ctx.status.terminating = Some(ctx.terminating);
        self.track_and_remove_finalizers(&mut ctx).await?;
        manage_error.map_or(Ok(()), Err)
    }

    fn update_suspend_condition(&self, ctx: &mut SyncCtx, now: k8s_openapi::jiff::Timestamp) {
        let conditions = ctx.status.conditions.get_or_insert_with(Vec::new);
        let reference = object_reference(&ctx.job);
        if is_suspended(&ctx.job) {
            if status::ensure_condition(
                conditions,
                SUSPENDED,
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            ) {
                self.recorder
                    .event(&reference, EventType::Normal, "Suspended", "Job suspended");
            }
        } else if status::ensure_condition(
            conditions,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            now,
        ) {
            self.recorder
                .event(&reference, EventType::Normal, "Resumed", "Job resumed");
            // The deadline counts the time the Job runs continuously.
            ctx.status.start_time = Some(Time(now));
        }
    }

    /// Creates or deletes pods so that the right number runs. Returns the number of active
    /// pods after it, and the first error.
    async fn manage_job(&self, ctx: &mut SyncCtx, mut active: i32) -> (i32, Option<String>) {
        let key = ctx.key.clone();
        let spec = ctx.job.spec.clone().unwrap_or_default();
        let now = self.wall.now_precise();
        if is_suspended(&ctx.job) {
            let all = ctx.active.clone();
            let (removed, removed_ready, err) = self.delete_job_pods(ctx, &all).await;
            ctx.terminating += removed;
            ctx.ready -= removed_ready;
            return (active - removed, err);
        }
        let parallelism = spec.parallelism.unwrap_or(1).max(0);
        let want = match ctx.completions {
            None if ctx.succeeded > 0 => active,
            None => parallelism,
            Some(c) => (c - ctx.succeeded).clamp(0, parallelism),
        };
        let rm_at_least = usize::try_from(active - want).unwrap_or(0);
        let indexed_info = ctx
            .indexed
            .then(|| (ctx.completions.unwrap_or(0), &ctx.succeeded_indexes));
        let mut doomed = active_pods_for_removal(indexed_info, &ctx.active, rm_at_least, now);
        doomed.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
        if !doomed.is_empty() {
            tracing::debug!(
                key,
                deleting = doomed.len(),
                want,
                active,
                "deleting excess job pods"
            );
            let (removed, removed_ready, err) = self.delete_job_pods(ctx, &doomed).await;
            ctx.terminating += removed;
            ctx.ready -= removed_ready;
            return (active - removed, err);
        }
        let terminating = if only_replace_failed(&ctx.job) {
            ctx.terminating
        } else {
            0
        };
        let diff = want - terminating - active;
        if diff <= 0 {
            return (active, None);
        }
        let wait = ctx.backoff.remaining(now);
        if !wait.is_zero() {
            tracing::debug!(key, ?wait, "delaying pod creation after failures");
            self.queue.add_after(key, wait);
            return (active, None);
        }
        let mut diff = usize::try_from(diff)
            .unwrap_or(0)
            .min(MAX_POD_CREATE_DELETE_PER_SYNC);
        let job_name = ctx.job.metadata.name.clone().unwrap_or_default();
        let ns = ctx.job.metadata.namespace.clone().unwrap_or_default();
        let Some(controller_ref) = new_controller_ref(&ctx.job.metadata, "batch/v1", "Job") else {
            return (active, Some("the job has no uid".into()));
        };
        let mut template = spec.template.clone();
        let meta = template.metadata.get_or_insert_with(Default::default);
        let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == JOB_TRACKING_FINALIZER) {
            finalizers.push(JOB_TRACKING_FINALIZER.to_string());
        }
        let mut bodies = Vec::new();
        if ctx.indexed {
            let active_indexes: BTreeSet<i32> = ctx
                .active
                .iter()
                .filter_map(|p| indexed::completion_index(p))
                .collect();
            let indexes = indexed::first_pending_indexes(
                &ctx.succeeded_indexes,
                &active_indexes,
                diff,
                ctx.completions.unwrap_or(0),
            );
            diff = indexes.len();
            for ix in indexes {
                let t = indexed_template(&template, &job_name, ix);
                match PodControl::pod_body(
                    &ns,
                    &t,
                    &format!("{job_name}-{ix}"),
                    controller_ref.clone(),
                ) {
                    Ok(b) => bodies.push(b),
                    Err(e) => return (active, Some(e.to_string())),
                }
            }
        } else {
            match PodControl::pod_body(&ns, &template, &job_name, controller_ref) {
                Ok(b) => bodies = vec![b; diff],
                Err(e) => return (active, Some(e.to_string())),
            }
        }
        if diff == 0 {
            return (active, None);
        }
        tracing::debug!(key, creating = diff, want, active, "creating job pods");
        self.expectations.expect_creations(&key, diff);
        let parent = Arc::new(object_reference(&ctx.job));
        let bodies = Arc::new(bodies);
        let next = Arc::new(AtomicUsize::new(0));
        let control = self.pod_control.clone();
        let (created, error) = slow_start_batch(diff, SLOW_START_INITIAL_BATCH_SIZE, || {
            let (control, parent, bodies, next) = (
                control.clone(),
                parent.clone(),
                bodies.clone(),
                next.clone(),
            );
            async move {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(i) else {
                    return Ok(());
                };
                match control.create(body, &parent).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.api().is_some_and(is_namespace_terminating) => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await;
        let skipped = diff - created;
        if skipped > 0 {
            self.expectations.lower(&key, skipped as i64, 0);
        }
        active += i32::try_from(created).unwrap_or(0);
        (active, error)
    }

    /// Deletes `pods` after removing their finalizer (they are not counted: a suspended
    /// Job's or surplus pods). Returns (deleted, of which ready, first error).
    async fn delete_job_pods(
        &self,
        ctx: &SyncCtx,
        pods: &[Arc<Pod>],
    ) -> (i32, i32, Option<String>) {
        self.delete_pods(ctx, pods, true).await
    }

    /// Deletes the active pods of a Job that is finishing, keeping their finalizer so they
    /// are counted. Returns (deleted, of which ready, first error).
    async fn delete_active_pods(&self, ctx: &SyncCtx) -> (i32, i32, Option<String>) {
        let pods = ctx.active.clone();
        self.delete_pods(ctx, &pods, false).await
    }

    async fn delete_pods(
        &self,
        ctx: &SyncCtx,
        pods: &[Arc<Pod>],
        remove_finalizer: bool,
    ) -> (i32, i32, Option<String>) {
        if pods.is_empty() {
            return (0, 0, None);
        }
        if remove_finalizer {
            self.expectations
                .expect_deletions(&ctx.key, pods.iter().map(|p| object_key(&**p)));
        }
        let parent = Arc::new(object_reference(&ctx.job));
        let mut tasks = tokio::task::JoinSet::new();
        for pod in pods {
            let (control, parent, pod) = (self.pod_control.clone(), parent.clone(), pod.clone());
            tasks.spawn(async move {
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                if remove_finalizer && has_tracking_finalizer(&pod) {
                    if let Err(e) = control.patch(&ns, &name, &remove_finalizer_patch()).await {
                        if !e.is_not_found() {
                            return (pod, Err(format!("removing the finalizer: {e}")));
                        }
                    }
                }
                let result = match control.delete(&ns, &name, &parent).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(e.to_string()),
                };
                (pod, result)
            });
        }
        let (mut deleted, mut ready, mut first_error) = (0, 0, None);
        while let Some(done) = tasks.join_next().await {
            let Ok((pod, result)) = done else {
                first_error.get_or_insert_with(|| "a pod deletion was interrupted".to_string());
                continue;
            };
            match result {
                Ok(()) => {
                    deleted += 1;
                    if is_pod_ready(&pod) {
                        ready += 1;
                    }
                }
                Err(e) => {
                    if remove_finalizer {
                        self.expectations
                            .deletion_observed(&ctx.key, &object_key(&*pod));
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        (deleted, ready, first_error)
    }

    /// Records finished pods as uncounted, removes their finalizers, moves them to the
    /// counters, and writes the interim and final conditions (see the module docs).
    async fn track_and_remove_finalizers(&self, ctx: &mut SyncCtx) -> Result<(), String> {
        let with_finalizer: HashSet<String> = ctx
            .pods
            .iter()
            .filter(|p| has_tracking_finalizer(p))
            .map(|p| uid_of(p).to_string())
            .collect();
        let mut with_finalizer = with_finalizer;
        let mut needs_flush = clean_uncounted(&mut ctx.status, &with_finalizer);
        let completions = ctx.completions.unwrap_or(0);
        let job_deleting = ctx.job.metadata.deletion_timestamp.is_some();
        let failing = matches!(ctx.finish, Some(Finish::Failure(..)));
        let mut to_remove = Vec::new();
        let mut new_indexes = Vec::new();
        let mut reached_max = false;
        let mut pods = ctx.pods.clone();
        if ctx.indexed {
            pods.sort_by_key(|p| indexed::completion_index(p).unwrap_or(i32::MAX));
        }
        let uncounted = ctx
            .status
            .uncounted_terminated_pods
            .get_or_insert_with(Default::default);
        let unc_succeeded = uncounted.succeeded.get_or_insert_with(Vec::new);
        let mut succ_set: HashSet<String> = unc_succeeded.iter().cloned().collect();
        let unc_failed_list = uncounted.failed.get_or_insert_with(Vec::new);
        let mut fail_set: HashSet<String> = unc_failed_list.iter().cloned().collect();
        let mut add_succeeded = Vec::new();
        let mut add_failed = Vec::new();
        for pod in &pods {
            let uid = uid_of(pod).to_string();
            if !has_tracking_finalizer(pod) || ctx.removing.contains(&uid) {
                continue;
            }
            let failed = is_pod_failed(pod, &ctx.job);
            let can_remove = job_deleting || ctx.finish.is_some() || is_succeeded(pod) || failed;
            if !can_remove {
                continue;
            }
            to_remove.push(pod.clone());
            let ix = indexed::completion_index(pod);
            if is_succeeded(pod) && !fail_set.contains(&uid) {
                if ctx.indexed {
                    if let Some(ix) = ix.filter(|ix| *ix < completions) {
                        if !ctx.prev_succeeded_indexes.contains(&ix) {
                            new_indexes.push(ix);
                            needs_flush = true;
                        }
                    }
                } else if succ_set.insert(uid.clone()) {
                    add_succeeded.push(uid);
                    needs_flush = true;
                }
            } else if (failed || failing)
                && !fail_set.contains(&uid)
                && (!ctx.indexed || ix.is_some_and(|ix| ix < completions))
            {
                fail_set.insert(uid.clone());
                add_failed.push(uid);
                needs_flush = true;
            }
            if new_indexes.len() + succ_set.len() + fail_set.len() >= MAX_UNCOUNTED_PODS {
                reached_max = true;
                break;
            }
        }
        unc_succeeded.extend(add_succeeded);
        if let Some(list) = uncounted.failed.as_mut() {
            list.extend(add_failed);
        }
        if ctx.indexed {
            ctx.succeeded_indexes.extend(new_indexes);
            let s = indexed::format_indexes(&ctx.succeeded_indexes);
            ctx.status.succeeded =
                Some(i32::try_from(ctx.succeeded_indexes.len()).unwrap_or(i32::MAX));
            if ctx.status.completed_indexes.as_deref().unwrap_or("") != s {
                needs_flush = true;
            }
            ctx.status.completed_indexes = Some(s);
        }
        let now = self.wall.now();
        if let Some(finish) = ctx.finish.clone() {
            let conditions = ctx.status.conditions.get_or_insert_with(Vec::new);
            let interim = finish.interim_type();
            if !conditions
                .iter()
                .any(|c| c.type_ == interim && c.status == "True")
            {
                let (r, m) = finish.reason_message();
                conditions.push(status::new_condition(interim, "True", r, m, now));
                needs_flush = true;
            }
        }
        if needs_flush || !status_equal(&ctx.status, &ctx.job.status.clone().unwrap_or_default()) {
            self.write_status(ctx).await?;
            self.backoff
                .lock()
                .insert(ctx.key.clone(), ctx.backoff.clone());
            needs_flush = false;
        }
        let mut rm_error = None;
        if !to_remove.is_empty() {
            {
                let mut set = self.removing_finalizer.lock();
                for p in &to_remove {
                    set.insert(uid_of(p).to_string());
                }
            }
            let mut tasks = tokio::task::JoinSet::new();
            for pod in to_remove {
                let control = self.pod_control.clone();
                tasks.spawn(async move {
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let r = control.patch(&ns, &name, &remove_finalizer_patch()).await;
                    (pod, r)
                });
            }
            while let Some(done) = tasks.join_next().await {
                let Ok((pod, result)) = done else {
                    rm_error
                        .get_or_insert_with(|| "a finalizer removal was interrupted".to_string());
                    continue;
                };
                match result {
                    Ok(()) => {
                        with_finalizer.remove(uid_of(&pod));
                    }
                    Err(e) if e.is_not_found() => {
                        with_finalizer.remove(uid_of(&pod));
                        self.removing_finalizer.lock().remove(uid_of(&pod));
                    }
                    Err(e) => {
                        // This removal will never be observed.
                        self.removing_finalizer.lock().remove(uid_of(&pod));
                        rm_error
                            .get_or_insert_with(|| format!("removing the tracking finalizer: {e}"));
                    }
                }
            }
        }
        if clean_uncounted(&mut ctx.status, &with_finalizer) {
            needs_flush = true;
        }
        if let Some(e) = rm_error {
            if needs_flush {
                self.write_status(ctx).await?;
            }
            return Err(e);
        }
        let uncounted_left = ctx
            .status
            .uncounted_terminated_pods
            .as_ref()
            .map_or(0, |u| {
                u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
            });
        let mut finished = None;
        if let Some(finish) = ctx.finish.clone() {
            if !reached_max && uncounted_left == 0 && ctx.terminating == 0 {
                let (r, m) = finish.reason_message();
                let conditions = ctx.status.conditions.get_or_insert_with(Vec::new);
                status::ensure_condition(conditions, finish.final_type(), "True", r, m, now);
                if matches!(finish, Finish::Success(..)) {
                    ctx.status.completion_time = Some(Time(now));
                }
                finished = Some(finish);
                needs_flush = true;
            }
        }
        if needs_flush {
            self.write_status(ctx).await?;
            if let Some(finish) = finished {
                self.record_finished(ctx, &finish);
            }
        }
        Ok(())
    }

    fn record_finished(&self, ctx: &SyncCtx, finish: &Finish) {
        let reference = object_reference(&ctx.job);
        self.backoff.lock().remove(&ctx.key);
        match finish {
            Finish::Success(..) => {
                if ctx
                    .completions
                    .is_some_and(|c| ctx.status.succeeded.unwrap_or(0) > c)
                {
                    self.recorder.event(
                        &reference,
                        EventType::Warning,
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    );
                }
                self.recorder
                    .event(&reference, EventType::Normal, "Completed", "Job completed");
                tracing::info!(key = ctx.key, "job completed");
            }
            Finish::Failure(reason, message) => {
                self.recorder
                    .event(&reference, EventType::Warning, reason, message.clone());
                tracing::info!(key = ctx.key, reason, "job failed");
            }
        }
    }

    /// Writes `ctx.status` through the status subresource; `ctx.job` becomes the stored Job.
    async fn write_status(&self, ctx: &mut SyncCtx) -> Result<(), String> {
        let mut job = ctx.job.clone();
        job.status = Some(ctx.status.clone());
        let updated = update_status(&self.client, &job)
            .await
            .map_err(|e| format!("updating the job status: {e}"))?;
        ctx.job = updated;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ts(s: i64) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_second(s).unwrap()
    }

    fn pod(name: &str, ix: Option<&str>, node: &str, phase: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(name.into()),
                annotations: ix
                    .map(|i| [(JOB_COMPLETION_INDEX_ANNOTATION.to_string(), i.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        })
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        let mut v: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn surplus_pods_go_unassigned_and_pending_first() {
        let pods = vec![
            pod("running", None, "n1", "Running"),
            pod("pending", None, "n1", "Pending"),
            pod("unassigned", None, "", "Pending"),
        ];
        assert_eq!(
            names(&active_pods_for_removal(None, &pods, 1, ts(0))),
            ["unassigned"]
        );
        assert_eq!(
            names(&active_pods_for_removal(None, &pods, 2, ts(0))),
            ["pending", "unassigned"]
        );
        assert!(active_pods_for_removal(None, &pods, 0, ts(0)).is_empty());
    }

    #[test]
    fn indexed_pods_with_bad_repeated_or_done_indexes_go_first() {
        let pods = vec![
            pod("a0", Some("0"), "n1", "Running"),
            pod("b0", Some("0"), "", "Pending"),
            pod("c1", Some("1"), "n1", "Running"),
            pod("d9", Some("9"), "n1", "Running"),
            pod("none", None, "n1", "Running"),
            pod("e2", Some("2"), "n1", "Running"),
        ];
        let succeeded: BTreeSet<i32> = [2].into();
        let rm = active_pods_for_removal(Some((3, &succeeded)), &pods, 0, ts(0));
        assert_eq!(
            names(&rm),
            ["b0", "d9", "e2", "none"],
            "the running pod of index 0 stays"
        );
        let rm = active_pods_for_removal(Some((3, &succeeded)), &pods, 5, ts(0));
        assert_eq!(rm.len(), 5);
    }

    #[test]
    fn indexed_pods_carry_their_index_everywhere() {
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let t = indexed_template(&template, "work", 4);
        let meta = t.metadata.as_ref().unwrap();
        assert_eq!(
            meta.annotations.as_ref().unwrap()[JOB_COMPLETION_INDEX_ANNOTATION],
            "4"
        );
        assert_eq!(
            meta.labels.as_ref().unwrap()[JOB_COMPLETION_INDEX_ANNOTATION],
            "4"
        );
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "x");
        let spec = t.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("work-4"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, JOB_COMPLETION_INDEX_ENV);
        assert_eq!(
            env.value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        // Applying it twice does not add the variable twice.
        let again = indexed_template(&t, "work", 4);
        assert_eq!(
            again.spec.unwrap().containers[0]
                .env
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn statuses_compare_without_zeros_and_empty_lists() {
        let a = JobStatus {
            active: Some(0),
            uncounted_terminated_pods: Some(UncountedTerminatedPods::default()),
            ready: Some(0),
            ..Default::default()
        };
        let b = JobStatus {
            ready: Some(0),
            uncounted_terminated_pods: Some(UncountedTerminatedPods {
                succeeded: Some(vec![]),
                failed: None,
            }),
            ..Default::default()
        };
        assert!(status_equal(&a, &b));
        let dropped = JobStatus {
            ready: None,
            terminating: Some(0),
            ..b.clone()
        };
        assert!(status_equal(&a, &dropped));
        let c = JobStatus {
            ready: Some(1),
            ..b.clone()
        };
        assert!(!status_equal(&a, &c));
        let d = JobStatus {
            uncounted_terminated_pods: Some(UncountedTerminatedPods {
                succeeded: Some(vec!["u".into()]),
                failed: None,
            }),
            ..b
        };
        assert!(!status_equal(&a, &d));
    }

    #[test]
    fn an_interim_condition_stands_for_the_end() {
        let mut st = JobStatus::default();
        assert_eq!(recorded_finish(&st), None);
        st.conditions = Some(vec![status::new_condition(
            FAILURE_TARGET,
            "True",
            "DeadlineExceeded",
            "m",
            ts(1),
        )]);
        assert_eq!(
            recorded_finish(&st),
            Some(Finish::Failure("DeadlineExceeded".into(), "m".into()))
        );
        st.conditions = Some(vec![status::new_condition(
            SUCCESS_CRITERIA_MET,
            "True",
            "CompletionsReached",
            "m",
            ts(1),
        )]);
        assert_eq!(recorded_finish(&st).unwrap().final_type(), COMPLETE);
    }
}
