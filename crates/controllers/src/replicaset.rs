//! The ReplicaSet controller: keeps the number of active pods of every ReplicaSet at its
//! `spec.replicas`, as kube-controller-manager's `replicaset` controller does (the step of
//! the seeds' figure 7-1 where the controller-manager turns a ReplicaSet into pods).
//!
//! Shape (client-go's pattern): shared ReplicaSet and Pod informers from one factory;
//! handlers that only map events to ReplicaSet keys on a rate-limited work queue; workers
//! that read the ReplicaSet and its pods from the caches and write through the API.
//!
//! - **Which pods.** A pod index by controller uid gives each ReplicaSet its own pods and
//!   the orphans of its namespace; the ReplicaSet then claims them
//!   ([`crate::controller_ref_manager`]): orphans its selector matches are adopted, own pods
//!   it no longer matches are released. Inactive pods (Succeeded, Failed, being deleted)
//!   do not count.
//! - **Creating.** Missing pods are created from the template (`generateName:
//!   <replicaset>-`, a controller reference), at most 500 per sync, in slow-start batches
//!   (1, 2, 4, … concurrent creates; a failed batch stops the rest). A failure is reported
//!   as a `ReplicaFailure` condition (`FailedCreate`) and the key is retried with per-key
//!   exponential backoff.
//! - **Deleting.** Surplus pods are deleted concurrently, in Kubernetes' order
//!   ([`crate::controller_utils::deletion_less`]: unassigned, pending, not ready first, …).
//! - **Expectations.** After issuing creates or deletes, the ReplicaSet is not acted on
//!   again until the pod informer has reported all of them ([`crate::expectations`]), so a
//!   stale cache never causes extra pods.
//! - **Status.** `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`
//!   (ready for `minReadySeconds`), `observedGeneration`, and the `ReplicaFailure`
//!   condition, written through the status subresource when they change.
//!
//! What kube-apiserver's validation would refuse is not acted on: a ReplicaSet whose
//! selector is invalid or selects everything is skipped, and one whose template labels its
//! selector does not match creates nothing (`ReplicaFailure`), since its pods would never
//! be counted.

use crate::controller_ref_manager::{
    claim, ensure_controller_uid_index, owned_and_orphans, recheck_deletion_timestamp, Owner,
    CONTROLLER_UID_INDEX,
};
use crate::controller_utils::{
    controller_of, deletion_less, finish_sync, is_namespace_terminating, is_pod_active,
    is_pod_available, is_pod_ready, label_selector_as_selector, new_controller_ref, nonzero,
    pod_labels, rs_replicas, selects_everything, slow_start_batch, sort_by_less, update_status,
    ControllerError, WallClock, NO_LABELS, SLOW_START_INITIAL_BATCH_SIZE,
};
use crate::event_recorder::{object_reference, EventRecorder};
use crate::expectations::ControllerExpectations;
use crate::pod_control::{PodBody, PodControl, DEFAULT_MAX_IN_FLIGHT};
use crate::uncertain_creates::{Seen, UncertainCreates};
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
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// The most pods one sync creates or deletes (kube-controller-manager's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// The condition type reporting that pods could not be created or deleted.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// How status updates are retried after a conflict (one fresh read and one more write).
const STATUS_UPDATE_RETRIES: usize = 1;

/// How a [`ReplicaSetController`] runs. [`Default`]: 5 workers (kube-controller-manager's
/// `--concurrent-replicaset-syncs`), bursts of 500, 128 pod requests in flight, real time.
#[derive(Clone)]
pub struct ReplicaSetControllerOptions {
    /// Workers syncing ReplicaSets concurrently (each ReplicaSet is synced by one worker at
    /// a time).
    pub workers: usize,
    /// The most pods created or deleted per sync.
    pub burst_replicas: usize,
    /// Pod requests in flight at once, across all workers.
    pub max_in_flight: usize,
    /// The clock of the work queue, its backoff, the expectations and availability.
    pub clock: SharedClock,
}

impl std::fmt::Debug for ReplicaSetControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaSetControllerOptions")
            .field("workers", &self.workers)
            .field("burst_replicas", &self.burst_replicas)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Default for ReplicaSetControllerOptions {
    fn default() -> Self {
        ReplicaSetControllerOptions {
            workers: 5,
            burst_replicas: BURST_REPLICAS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            clock: RealClock::shared(),
        }
    }
}

/// The ReplicaSet controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it adds an index to the shared pod
/// informer), then await [`ReplicaSetController::run`]. Dropping the `run` future stops the
/// workers; dropping the controller unregisters its handlers and shuts its queue down.
pub struct ReplicaSetController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    pod_informer: SharedIndexInformer<Pod>,
    rs_informer: SharedIndexInformer<ReplicaSet>,
    registrations: Vec<(Registration, bool)>,
    workers: usize,
}

impl std::fmt::Debug for ReplicaSetController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaSetController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    rs_lister: Lister<ReplicaSet>,
    rs_indexer: Arc<Indexer<ReplicaSet>>,
    pod_indexer: Arc<Indexer<Pod>>,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    expectations: ControllerExpectations,
    /// Creates whose answer was lost, to retry under the same names.
    uncertain: UncertainCreates,
    pod_control: PodControl,
    wall: WallClock,
    burst_replicas: usize,
}

impl ReplicaSetController {
    /// A controller over the ReplicaSets and Pods of `factory`'s informers, writing through
    /// `client`, with `workers` workers and otherwise [`ReplicaSetControllerOptions::default`].
    ///
    /// # Errors
    /// See [`ReplicaSetController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<ReplicaSetController, ControllerError> {
        Self::with_options(
            factory,
            client,
            ReplicaSetControllerOptions {
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
        options: ReplicaSetControllerOptions,
    ) -> Result<ReplicaSetController, ControllerError> {
        let pod_informer = factory.informer::<Pod>()?;
        let rs_informer = factory.informer::<ReplicaSet>()?;
        ensure_controller_uid_index(&pod_informer)?;
        ensure_controller_uid_index(&rs_informer)?;
        let clock = options.clock.clone();
        let metrics = Arc::new(InMemoryMetrics::with_clock("replicaset", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let recorder =
            EventRecorder::with_clock(client.clone(), "replicaset-controller", None, clock.clone());
        let shared = Arc::new(Shared {
            pod_control: PodControl::new(client.clone(), recorder, options.max_in_flight),
            client,
            rs_lister: rs_informer.lister(),
            rs_indexer: Arc::clone(rs_informer.indexer()),
            pod_indexer: Arc::clone(pod_informer.indexer()),
            queue,
            metrics,
            expectations: ControllerExpectations::new(clock.clone()),
            uncertain: UncertainCreates::new(),
            wall: WallClock::new(clock),
            burst_replicas: options.burst_replicas.max(1),
        });
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let rs_reg = rs_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |rs: &Arc<ReplicaSet>, _| s1.enqueue(rs))
                .on_update(move |old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>| {
                    if old.metadata.uid != cur.metadata.uid {
                        s2.rs_deleted(old);
                    }
                    s2.enqueue(cur);
                })
                .on_delete(move |d: &DeleteEvent<ReplicaSet>| s3.rs_deleted(d.object())),
        );
        let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
        let pod_reg = pod_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |pod: &Arc<Pod>, _| p1.pod_added(pod))
                .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| p2.pod_updated(old, cur))
                .on_delete(move |d: &DeleteEvent<Pod>| p3.pod_deleted(d.object())),
        );
        Ok(ReplicaSetController {
            shared,
            factory: factory.clone(),
            pod_informer,
            rs_informer,
            registrations: vec![(rs_reg, true), (pod_reg, false)],
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the ReplicaSet and Pod caches,
    /// then syncs ReplicaSets with the configured workers until the controller is dropped
    /// (or forever). Dropping the returned future stops the workers.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.pod_informer, &self.rs_informer], Duration::MAX).await;
        tracing::info!(workers = self.workers, "starting the replicaset controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="replicaset"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }

    /// The expectations the controller holds, by ReplicaSet key.
    pub fn expectations(&self) -> &ControllerExpectations {
        &self.shared.expectations
    }
}

impl Drop for ReplicaSetController {
    fn drop(&mut self) {
        for (reg, is_rs) in &self.registrations {
            if *is_rs {
                self.rs_informer.remove_event_handler(reg);
            } else {
                self.pod_informer.remove_event_handler(reg);
            }
        }
        self.shared.queue.shut_down();
    }
}

/// The `ReplicaFailure` condition of a status, if any.
fn failure_condition(status: &ReplicaSetStatus) -> Option<&ReplicaSetCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some(REPLICA_FAILURE))
}

/// Sets `cond` in `status` (unless a condition of its type with the same status and reason
/// is there already, which is kept as it is).
fn set_condition(status: &mut ReplicaSetStatus, cond: ReplicaSetCondition) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if conditions
        .iter()
        .any(|c| c.type_ == cond.type_ && c.status == cond.status && c.reason == cond.reason)
    {
        return;
    }
    conditions.retain(|c| c.type_ != cond.type_);
    conditions.push(cond);
}

fn remove_condition(status: &mut ReplicaSetStatus, type_: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_.as_deref() != Some(type_));
        if c.is_empty() {
            status.conditions = None;
        }
    }
}

/// The status `rs` should have with `pods` (its active, claimed pods) at `now`, after a
/// manage step that failed with `manage_error` (if it did).
pub fn calculate_status(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    manage_error: Option<&str>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let mut status = rs.status.clone().unwrap_or_default();
    let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
    let template_labels = rs
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .unwrap_or(&NO_LABELS);
    let (mut fully_labeled, mut ready, mut available) = (0, 0, 0);
    for pod in pods {
        let labels = pod_labels(pod);
        if template_labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|x| x == v))
        {
            fully_labeled += 1;
        }
        if is_pod_ready(pod) {
            ready += 1;
            if is_pod_available(pod, min_ready, now) {
                available += 1;
            }
        }
    }
    let has_failure = failure_condition(&status).is_some();
    match manage_error {
        Some(message) if !has_failure => {
            let diff = pods.len() as i64 - i64::from(rs_replicas(rs));
            let reason = match diff.cmp(&0) {
                std::cmp::Ordering::Less => Some("FailedCreate".to_string()),
                std::cmp::Ordering::Greater => Some("FailedDelete".to_string()),
                std::cmp::Ordering::Equal => None,
            };
            set_condition(
                &mut status,
                ReplicaSetCondition {
                    type_: Some(REPLICA_FAILURE.to_string()),
                    status: Some("True".to_string()),
                    last_transition_time: Some(Time(now)),
                    reason,
                    message: (!message.is_empty()).then(|| message.to_string()),
                },
            );
        }
        None if has_failure => remove_condition(&mut status, REPLICA_FAILURE),
        _ => {}
    }
    status.replicas = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    status.fully_labeled_replicas = nonzero(fully_labeled);
    status.ready_replicas = nonzero(ready);
    status.available_replicas = nonzero(available);
    status
}

/// Whether `new` says nothing that `rs`'s current status does not (for a ReplicaSet whose
/// generation was observed already).
fn status_unchanged(rs: &ReplicaSet, new: &ReplicaSetStatus) -> bool {
    let cur = rs.status.clone().unwrap_or_default();
    let n = |o: Option<i32>| o.unwrap_or(0);
    let conditions = |s: &ReplicaSetStatus| s.conditions.clone().unwrap_or_default();
    cur.replicas == new.replicas
        && n(cur.fully_labeled_replicas) == n(new.fully_labeled_replicas)
        && n(cur.ready_replicas) == n(new.ready_replicas)
        && n(cur.available_replicas) == n(new.available_replicas)
        && rs.metadata.generation.unwrap_or(0) == cur.observed_generation.unwrap_or(0)
        && conditions(&cur) == conditions(new)
}

/// The pods to delete to remove `count` of `pods`: all of them when there are not more,
/// else the first `count` in deletion order, each pod ranked by how many of `related`
/// (the active pods of every ReplicaSet with the same controller) share its node.
pub fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    count: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if count >= pods.len() {
        return pods.to_vec();
    }
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let mut on_node: HashMap<String, usize> = HashMap::new();
    for p in related.iter().filter(|p| is_pod_active(p)) {
        *on_node.entry(node(p)).or_default() += 1;
    }
    let mut ranked: Vec<(Arc<Pod>, usize)> = pods
        .iter()
        .map(|p| (Arc::clone(p), on_node.get(&node(p)).copied().unwrap_or(0)))
        .collect();
    sort_by_less(
        &mut ranked,
        &|a: &(Arc<Pod>, usize), b: &(Arc<Pod>, usize)| deletion_less(&a.0, a.1, &b.0, b.1, now),
    );
    ranked.truncate(count);
    ranked.into_iter().map(|(p, _)| p).collect()
}

/// How one pod create ended.
enum CreateOutcome {
    /// Made, by this request or by an earlier one whose answer was lost: the informer will
    /// report it.
    Created,
    /// Refused by the server: it will never exist.
    Refused(String),
    /// No answer (a broken connection, a timeout, a 5xx): it may exist.
    Unanswered(String),
}

/// Creates pod `name` of `body` for the ReplicaSet `rs_uid` (`retry`: a create whose answer
/// was lost before, so that a 409 AlreadyExists for a pod of this ReplicaSet means that
/// the earlier request landed).
async fn create_one(
    control: &PodControl,
    client: &Client,
    body: &PodBody,
    parent: &ObjectReference,
    (name, retry): (&str, bool),
    rs_uid: &str,
) -> CreateOutcome {
    let Err(e) = control.create_named(body, name, parent).await else {
        return CreateOutcome::Created;
    };
    let Some(api_error) = e.api() else {
        // The template could not be made into a pod.
        return CreateOutcome::Refused(e.to_string());
    };
    // Every create fails in a namespace being deleted; nothing to retry.
    if is_namespace_terminating(api_error) {
        return CreateOutcome::Created;
    }
    if retry && api_error.is_already_exists() {
        let pods: Api<Pod> = Api::for_type(client.clone(), body.namespace());
        return match pods.get(name).await {
            Ok(pod) if controller_of(&pod.metadata).is_some_and(|r| r.uid == rs_uid) => {
                control.record_created(parent, name);
                CreateOutcome::Created
            }
            Ok(_) => CreateOutcome::Refused(format!(
                "pod {name} exists and belongs to another controller"
            )),
            Err(e) => CreateOutcome::Unanswered(e.to_string()),
        };
    }
    match api_error.code() {
        // A request timeout may have been applied all the same.
        Some(code) if (400..500).contains(&code) && code != 408 => {
            CreateOutcome::Refused(e.to_string())
        }
        _ => CreateOutcome::Unanswered(e.to_string()),
    }
}

fn pod_key(pod: &Pod) -> String {
    object_key(pod)
}

impl Shared {
    fn enqueue(&self, rs: &ReplicaSet) {
        self.queue.add(object_key(rs));
    }

    fn rs_deleted(&self, rs: &ReplicaSet) {
        let key = object_key(rs);
        // A new ReplicaSet of the same name starts without expectations.
        self.expectations.delete(&key);
        self.uncertain.forget(&key);
        self.queue.add(key);
    }

    /// The ReplicaSet a controller reference points at, if it is in the cache with that uid.
    fn resolve(
        &self,
        namespace: Option<&str>,
        r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Option<Arc<ReplicaSet>> {
        if r.kind != "ReplicaSet" {
            return None;
        }
        self.rs_lister
            .get(namespace, &r.name)
            .filter(|rs| rs.metadata.uid.as_deref() == Some(r.uid.as_str()))
    }

    /// The ReplicaSets of the pod's namespace whose (non-empty, valid) selector matches it.
    fn replica_sets_selecting(&self, pod: &Pod) -> Vec<Arc<ReplicaSet>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let labels = pod_labels(pod);
        self.rs_indexer
            .by_index(NAMESPACE_INDEX, ns)
            .unwrap_or_default()
            .into_iter()
            .filter(|rs| {
                !selects_everything(&rs.spec.selector)
                    && label_selector_as_selector(&rs.spec.selector)
                        .is_ok_and(|sel| sel.matches(labels))
            })
            .collect()
    }

    fn pod_added(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            // Already being deleted (seen after a restart): not a creation.
            self.pod_deleted(pod);
            return;
        }
        let ns = pod.metadata.namespace.as_deref();
        if let Some(r) = controller_of(&pod.metadata) {
            if let Some(rs) = self.resolve(ns, r) {
                let key = object_key(&*rs);
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                // An uncertain create's expectation was taken back when its answer was lost.
                if !self.uncertain.observed(&key, name) {
                    self.expectations.creation_observed(&key);
                }
                self.queue.add(key);
            }
            return;
        }
        // An orphan: every ReplicaSet that could adopt it looks.
        for rs in self.replica_sets_selecting(pod) {
            self.enqueue(&rs);
        }
    }

    fn pod_updated(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            // A resync: nothing changed.
            return;
        }
        let label_changed = pod_labels(old) != pod_labels(cur);
        if cur.metadata.deletion_timestamp.is_some() {
            // Marked for deletion: replace it now rather than when it is finally gone.
            self.pod_deleted(cur);
            if label_changed {
                self.pod_deleted(old);
            }
            return;
        }
        let ns = cur.metadata.namespace.as_deref();
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = cur_ref != old_ref;
        if ref_changed {
            if let Some(rs) = old_ref.and_then(|r| self.resolve(ns, r)) {
                self.enqueue(&rs);
            }
        }
        if let Some(r) = cur_ref {
            if let Some(rs) = self.resolve(ns, r) {
                self.enqueue(&rs);
                let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
                if min_ready > 0 && !is_pod_ready(old) && is_pod_ready(cur) {
                    // Look again once the pod has been ready for long enough to be available
                    // (a second more, against rounding).
                    let after = Duration::from_secs(min_ready.unsigned_abs().into())
                        + Duration::from_secs(1);
                    self.queue.add_after(object_key(&*rs), after);
                }
            }
            return;
        }
        if label_changed || ref_changed {
            for rs in self.replica_sets_selecting(cur) {
                self.enqueue(&rs);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        let Some(r) = controller_of(&pod.metadata) else {
            return;
        };
        if let Some(rs) = self.resolve(pod.metadata.namespace.as_deref(), r) {
            let key = object_key(&*rs);
            self.expectations.deletion_observed(&key, &pod_key(pod));
            self.queue.add(key);
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await;
            finish_sync(&self.queue, key, result, "the replica set");
        }
    }

    /// Brings the ReplicaSet `key` in line with its pods (see the module docs).
    async fn sync(&self, key: &str) -> Result<(), String> {
        let (ns, name) = match split_key(key) {
            Ok((Some(ns), name)) => (ns.to_string(), name.to_string()),
            _ => {
                tracing::warn!(key, "ignoring a malformed key");
                return Ok(());
            }
        };
        let Some(rs) = self.rs_lister.get(Some(&ns), &name) else {
            self.expectations.delete(key);
            self.uncertain.forget(key);
            return Ok(());
        };
        let needs_sync = self.expectations.satisfied(key);
        // Before the pods are read: see `UncertainCreates::plan`.
        let uncertain = self.uncertain.snapshot(key);
        let spec = &rs.spec;
        let selector = match label_selector_as_selector(&spec.selector) {
            Ok(s) if !selects_everything(&spec.selector) => s,
            Ok(_) => {
                tracing::warn!(key, "replica set selects every pod: not managing it");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "replica set has an invalid selector");
                return Ok(());
            }
        };
        let rs_uid = rs.metadata.uid.clone().unwrap_or_default();
        let candidates: Vec<Arc<Pod>> = owned_and_orphans(&self.pod_indexer, &rs_uid, &ns)
            .into_iter()
            .filter(|p| is_pod_active(p))
            .collect();
        let owner = Owner {
            meta: &rs.metadata,
            api_version: "apps/v1",
            kind: "ReplicaSet",
        };
        let api: Api<ReplicaSet> = Api::for_type(self.client.clone(), &ns);
        let fresh_name = name.clone();
        let mut adoption = recheck_deletion_timestamp(owner, async move {
            api.get(&fresh_name).await.map(|rs| rs.metadata)
        });
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

        let manage_error = if needs_sync && rs.metadata.deletion_timestamp.is_none() {
            self.manage_replicas(key, &rs, &pods, &selector, &uncertain)
                .await
                .err()
        } else {
            None
        };
        let new_status = calculate_status(&rs, &pods, manage_error.as_deref(), self.wall.now());
        let updated = self.write_status(&rs, new_status).await?;
        let replicas = rs_replicas(&updated);
        let st = updated.status.clone().unwrap_or_default();
        let min_ready = updated.spec.min_ready_seconds.unwrap_or(0);
        if manage_error.is_none()
            && min_ready > 0
            && st.ready_replicas.unwrap_or(0) == replicas
            && st.available_replicas.unwrap_or(0) != replicas
        {
            // Ready but not yet available: look again when they should be.
            self.queue.add_after(
                key.to_string(),
                Duration::from_secs(min_ready.unsigned_abs().into()),
            );
        }
        manage_error.map_or(Ok(()), Err)
    }

    /// Creates or deletes pods so that `pods` (the claimed, active ones) number
    /// `spec.replicas`; `uncertain`: the ReplicaSet's uncertain creates when `pods` was read.
    async fn manage_replicas(
        &self,
        key: &str,
        rs: &ReplicaSet,
        pods: &[Arc<Pod>],
        selector: &api::labels::LabelSelector,
        uncertain: &[String],
    ) -> Result<(), String> {
        let want = i64::from(rs_replicas(rs));
        let diff = pods.len() as i64 - want;
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        if diff < 0 {
            let count = usize::try_from(-diff)
                .unwrap_or(usize::MAX)
                .min(self.burst_replicas);
            let template = rs
                .spec
                .template
                .as_ref()
                .ok_or("the replica set has no pod template")?;
            let template_labels = template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref())
                .unwrap_or(&NO_LABELS);
            if !selector.matches(template_labels) {
                return Err("`selector` does not match template `labels`".to_string());
            }
            let controller_ref = new_controller_ref(&rs.metadata, "apps/v1", "ReplicaSet")
                .ok_or("the replica set has no uid")?;
            let body = PodControl::pod_body(&ns, template, &name, controller_ref)
                .map_err(|e| e.to_string())?;
            let counted: HashSet<&str> = pods
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .collect();
            let in_cache = |n: &str| self.pod_indexer.get_by_key(&format!("{ns}/{n}")).is_some();
            let plan = self.uncertain.plan(
                key,
                count,
                uncertain,
                |n| {
                    if counted.contains(n) {
                        Seen::Counted
                    } else if in_cache(n) {
                        Seen::Cached
                    } else {
                        Seen::Absent
                    }
                },
                || self.pod_control.fresh_name(&body),
                |n| self.expectations.expect_creations(key, n),
            );
            tracing::debug!(
                key,
                need = want,
                have = pods.len(),
                creating = ?plan,
                "too few replicas"
            );
            let planned = plan.len();
            let parent = Arc::new(object_reference(rs));
            let rs_uid = rs.metadata.uid.clone().unwrap_or_default();
            let queue = Arc::new(parking_lot::Mutex::new(
                plan.into_iter().collect::<VecDeque<_>>(),
            ));
            let outcomes = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let control = self.pod_control.clone();
            let client = self.client.clone();
            let (_, error) = slow_start_batch(planned, SLOW_START_INITIAL_BATCH_SIZE, || {
                let next = queue.lock().pop_front();
                let (control, body, parent, client, rs_uid, outcomes) = (
                    control.clone(),
                    body.clone(),
                    parent.clone(),
                    client.clone(),
                    rs_uid.clone(),
                    outcomes.clone(),
                );
                async move {
                    let Some((name, retry)) = next else {
                        return Ok(());
                    };
                    let outcome =
                        create_one(&control, &client, &body, &parent, (&name, retry), &rs_uid)
                            .await;
                    let result = match &outcome {
                        CreateOutcome::Created => Ok(()),
                        CreateOutcome::Refused(e) | CreateOutcome::Unanswered(e) => Err(e.clone()),
                    };
                    outcomes.lock().push((name, outcome));
                    result
                }
            })
            .await;
            // Creates that were not made will never be observed; those whose answer was lost
            // are retried under their names (`UncertainCreates::failed`).
            let outcomes = std::mem::take(&mut *outcomes.lock());
            let left = std::mem::take(&mut *queue.lock());
            // A call that panicked took its name and reported nothing: never observed either.
            let lost = planned.saturating_sub(outcomes.len() + left.len());
            self.expectations.lower(key, lost as i64, 0);
            for (name, outcome) in outcomes {
                match outcome {
                    CreateOutcome::Created => {}
                    CreateOutcome::Refused(_) => self.expectations.lower(key, 1, 0),
                    CreateOutcome::Unanswered(_) => {
                        self.uncertain
                            .failed(key, &name, in_cache, || self.expectations.lower(key, 1, 0))
                    }
                }
            }
            let interrupted = left.len() + lost;
            for (name, retry) in left {
                if retry {
                    self.uncertain
                        .failed(key, &name, in_cache, || self.expectations.lower(key, 1, 0));
                } else {
                    self.expectations.lower(key, 1, 0);
                }
            }
            return match (error, interrupted) {
                (Some(e), _) => Err(e),
                (None, 0) => Ok(()),
                (None, n) => Err(format!("{n} pod creations were interrupted")),
            };
        }
        if diff > 0 {
            let count = usize::try_from(diff)
                .unwrap_or(usize::MAX)
                .min(self.burst_replicas);
            tracing::debug!(key, need = want, deleting = count, "too many replicas");
            let related = self.indirectly_related_pods(rs);
            let doomed = pods_to_delete(pods, &related, count, self.wall.now_precise());
            self.expectations
                .expect_deletions(key, doomed.iter().map(|p| pod_key(p)));
            let parent = Arc::new(object_reference(rs));
            let mut deletes = tokio::task::JoinSet::new();
            for pod in doomed {
                let (control, parent) = (self.pod_control.clone(), parent.clone());
                let pod_ns = pod.metadata.namespace.clone().unwrap_or_default();
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                deletes.spawn(async move {
                    let result = control.delete(&pod_ns, &pod_name, &parent).await;
                    (pod_key(&pod), result)
                });
            }
            let mut first_error = None;
            while let Some(done) = deletes.join_next().await {
                let Ok((pod_key, result)) = done else {
                    first_error.get_or_insert_with(|| "a pod deletion was interrupted".to_string());
                    continue;
                };
                if let Err(e) = result {
                    // This deletion will never be observed.
                    self.expectations.deletion_observed(key, &pod_key);
                    if !e.is_not_found() {
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            return first_error.map_or(Ok(()), Err);
        }
        Ok(())
    }

    /// The pods of every ReplicaSet that has the same controller as `rs` (`rs` included).
    fn indirectly_related_pods(&self, rs: &ReplicaSet) -> Vec<Arc<Pod>> {
        let Some(r) = controller_of(&rs.metadata) else {
            return Vec::new();
        };
        let siblings = self
            .rs_indexer
            .by_index(CONTROLLER_UID_INDEX, &r.uid)
            .unwrap_or_default();
        let mut out = Vec::new();
        for sibling in siblings {
            if let Some(uid) = sibling.metadata.uid.as_deref() {
                out.extend(
                    self.pod_indexer
                        .by_index(CONTROLLER_UID_INDEX, uid)
                        .unwrap_or_default(),
                );
            }
        }
        out
    }

    /// Writes `status` unless it says nothing new; on a conflict, re-reads the ReplicaSet
    /// and tries once more. Returns the ReplicaSet as stored.
    async fn write_status(
        &self,
        rs: &Arc<ReplicaSet>,
        mut status: ReplicaSetStatus,
    ) -> Result<ReplicaSet, String> {
        if status_unchanged(rs, &status) {
            return Ok((**rs).clone());
        }
        status.observed_generation = rs.metadata.generation;
        let mut current = (**rs).clone();
        let mut attempt = 0;
        loop {
            current.status = Some(status.clone());
            match update_status(&self.client, &current).await {
                Ok(updated) => return Ok(updated),
                Err(e) if attempt >= STATUS_UPDATE_RETRIES => {
                    return Err(format!("updating the status: {e}"))
                }
                Err(_) => {
                    attempt += 1;
                    let ns = current.metadata.namespace.clone().unwrap_or_default();
                    let name = current.metadata.name.clone().unwrap_or_default();
                    let api: Api<ReplicaSet> = Api::for_type(self.client.clone(), &ns);
                    current = api
                        .get(&name)
                        .await
                        .map_err(|e| format!("re-reading for the status update: {e}"))?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn rs(replicas: i32, min_ready: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                generation: Some(3),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: Some(min_ready),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(
                            [("app".into(), "web".into()), ("v".into(), "2".into())].into(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            status: None,
        }
    }

    fn pod(name: &str, v: &str, ready_since: Option<i64>, node: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(name.into()),
                labels: Some([("app".into(), "web".into()), ("v".into(), v.into())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(
                    if node.is_empty() {
                        "Pending"
                    } else {
                        "Running"
                    }
                    .into(),
                ),
                conditions: ready_since.map(|s| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(ts(s))),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn status_counts_and_failure_condition() {
        let r = rs(4, 10);
        let pods = vec![
            pod("a", "2", Some(100), "n1"),
            pod("b", "2", Some(195), "n1"),
            pod("c", "1", None, "n2"),
        ];
        let s = calculate_status(&r, &pods, None, ts(200));
        assert_eq!(s.replicas, 3);
        assert_eq!(s.fully_labeled_replicas, Some(2));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(1), "b is ready for 5 s of 10");
        assert!(s.conditions.is_none());

        let s = calculate_status(&r, &pods, Some("quota exceeded"), ts(200));
        let c = failure_condition(&s).unwrap();
        assert_eq!(c.reason.as_deref(), Some("FailedCreate"));
        assert_eq!(c.message.as_deref(), Some("quota exceeded"));
        assert_eq!(c.status.as_deref(), Some("True"));
        // Kept as it is while the failure lasts, removed once a sync succeeds.
        let mut failing = r.clone();
        failing.status = Some(s);
        let again = calculate_status(&failing, &pods, Some("other"), ts(300));
        assert_eq!(
            failure_condition(&again).unwrap().message.as_deref(),
            Some("quota exceeded")
        );
        let healed = calculate_status(&failing, &pods, None, ts(300));
        assert!(failure_condition(&healed).is_none());

        let s = calculate_status(&rs(1, 0), &pods, Some("forbidden"), ts(200));
        assert_eq!(
            failure_condition(&s).unwrap().reason.as_deref(),
            Some("FailedDelete")
        );
        assert_eq!(
            s.available_replicas,
            Some(2),
            "no minReadySeconds: ready is available"
        );
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let mut r = rs(2, 0);
        let pods = vec![pod("a", "2", Some(1), "n1")];
        let s = calculate_status(&r, &pods, None, ts(10));
        assert!(!status_unchanged(&r, &s), "generation 3 was never observed");
        let mut written = s.clone();
        written.observed_generation = Some(3);
        r.status = Some(written);
        assert!(status_unchanged(
            &r,
            &calculate_status(&r, &pods, None, ts(20))
        ));
        // Zeros written explicitly by one server and left out by another are the same.
        let mut explicit = r.clone();
        explicit.status.as_mut().unwrap().available_replicas = Some(1);
        explicit.status.as_mut().unwrap().ready_replicas = Some(1);
        explicit.status.as_mut().unwrap().fully_labeled_replicas = Some(1);
        assert!(status_unchanged(
            &explicit,
            &calculate_status(&explicit, &pods, None, ts(20))
        ));
    }

    #[test]
    fn surplus_pods_are_chosen_by_rank() {
        let pods = vec![
            pod("ready-old", "2", Some(100), "n1"),
            pod("ready-new", "2", Some(9_990), "n2"),
            pod("pending", "2", None, ""),
            pod("not-ready", "2", None, "n3"),
        ];
        let names = |v: Vec<Arc<Pod>>| -> Vec<String> {
            v.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
        };
        let now = ts(10_000);
        assert_eq!(names(pods_to_delete(&pods, &pods, 1, now)), ["pending"]);
        assert_eq!(
            names(pods_to_delete(&pods, &pods, 3, now)),
            ["pending", "not-ready", "ready-new"]
        );
        // Doubled-up nodes go first among otherwise equal pods.
        let spread = vec![
            pod("x", "2", Some(100), "n1"),
            pod("y", "2", Some(100), "n2"),
        ];
        let related = vec![
            spread[0].clone(),
            spread[1].clone(),
            pod("z", "1", Some(100), "n2"),
        ];
        assert_eq!(names(pods_to_delete(&spread, &related, 1, now)), ["y"]);
        assert_eq!(pods_to_delete(&pods, &pods, 9, now).len(), 4);
    }
}
