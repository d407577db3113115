//! The StatefulSet controller: pods with stable identities, created and deleted in order,
//! each with claims of its own, as kube-controller-manager's `statefulset` controller
//! keeps them.
//!
//! Shape (client-go's pattern): shared StatefulSet, Pod, PersistentVolumeClaim and
//! ControllerRevision informers from one factory; handlers that map pod and set events to
//! set keys on a rate-limited work queue; workers that read from the caches and write
//! through the API.
//!
//! - **Identity** ([`identity`]). The pod of ordinal *i* is `<set>-<i>` (ordinals start at
//!   `spec.ordinals.start`), labelled `statefulset.kubernetes.io/pod-name`,
//!   `apps.kubernetes.io/pod-index` and `controller-revision-hash`, with hostname `<pod>`
//!   and subdomain `spec.serviceName`. Each `volumeClaimTemplates` entry becomes the claim
//!   `<claim>-<set>-<i>`, created before the pod and mounted in place of the template's
//!   volume of that name. The claims' owners follow `persistentVolumeClaimRetentionPolicy`:
//!   with `whenDeleted: Delete` the set owns them, with `whenScaled: Delete` a condemned pod
//!   is given its claims before it is deleted; the garbage collector does the deleting.
//! - **Which pods.** The set claims ([`crate::controller_ref_manager`]) the pods its
//!   selector matches whose names make them members (`<set>-<digits>`), adopting orphans
//!   and releasing pods it no longer matches; it adopts orphaned revisions the same way.
//! - **Order** ([`plan`]). `OrderedReady`: ordinal *i* is created only when 0..*i*-1 are
//!   Running and Ready (and available, with `minReadySeconds`), pods beyond `replicas` are
//!   deleted highest first, one at a time, and an unhealthy pod halts both. `Parallel`:
//!   all at once. A `Failed` or `Succeeded` pod is deleted and recreated under its name.
//! - **Revisions** ([`revision`]). The template is recorded in ControllerRevisions
//!   `<set>-<hash>` ([`crate::controller_history`]); `status.updateRevision` records the
//!   template now, `status.currentRevision` the one the set was at before the update. A
//!   template equal to an older revision reuses it with a new number (`rollout undo`).
//!   Revisions beyond `revisionHistoryLimit` that no pod uses are deleted, oldest first.
//! - **Updates.** `RollingUpdate`: from the highest ordinal down to `partition`, one pod at
//!   a time is deleted and recreated at the update revision once the pods above it are
//!   available again; `OnDelete`: pods are replaced only when deleted. (`maxUnavailable`
//!   is alpha in Kubernetes 1.32 and, as there, ignored.)
//! - **Status.** `observedGeneration`, `replicas`, `readyReplicas`, `availableReplicas`,
//!   `currentReplicas`, `updatedReplicas`, `currentRevision`, `updateRevision`,
//!   `collisionCount`: what `kubectl rollout status` reads.
//!
//! A set whose selector is invalid or selects everything is not acted on (kube-apiserver
//! refuses such sets). Failed syncs are retried with per-key backoff.

pub mod identity;
pub mod plan;
pub mod revision;
pub mod stateful_pod_control;

use crate::controller_history::{
    find_equal_revisions, max_revision, new_controller_revision, revisions_to_truncate,
    sort_controller_revisions, ControllerHistory, HistoryLimit,
};
use crate::controller_ref_manager::{
    claim, ensure_controller_uid_index, owned_and_orphans, recheck_deletion_timestamp, Owner,
};
use crate::controller_utils::{
    controller_of, finish_sync, label_selector_as_selector, new_controller_ref, nonzero,
    pod_labels, selects_everything, update_status, ControllerError, WallClock,
};
use crate::event_recorder::{object_reference, EventRecorder};
use crate::pod_control::{PodControl, DEFAULT_MAX_IN_FLIGHT};
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
use identity::{is_member_of, new_pod, set_replicas};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use plan::{Action, Which};
use stateful_pod_control::StatefulPodControl;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most pods one step of a `Parallel` set creates or deletes at once
/// (kube-controller-manager's `MaxBatchSize`).
pub const MAX_BATCH_SIZE: usize = 500;

/// How status updates are retried after a conflict (a fresh read and another write each).
const STATUS_UPDATE_RETRIES: usize = 3;

/// How a [`StatefulSetController`] runs. [`Default`]: 5 workers (kube-controller-manager's
/// `--concurrent-statefulset-syncs`), 128 pod requests in flight, real time.
#[derive(Clone)]
pub struct StatefulSetControllerOptions {
    /// Workers syncing sets concurrently (one worker per set at a time).
    pub workers: usize,
    /// Pod requests in flight at once, across all workers.
    pub max_in_flight: usize,
    /// The clock of the work queue, its backoff and availability.
    pub clock: SharedClock,
}

impl std::fmt::Debug for StatefulSetControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatefulSetControllerOptions")
            .field("workers", &self.workers)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Default for StatefulSetControllerOptions {
    fn default() -> Self {
        StatefulSetControllerOptions {
            workers: 5,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            clock: RealClock::shared(),
        }
    }
}

/// The StatefulSet controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it adds indexes to shared informers), then
/// await [`StatefulSetController::run`]. Dropping the `run` future stops the workers;
/// dropping the controller unregisters its handlers and shuts its queue down.
pub struct StatefulSetController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    set_informer: SharedIndexInformer<StatefulSet>,
    pod_informer: SharedIndexInformer<Pod>,
    claim_informer: SharedIndexInformer<PersistentVolumeClaim>,
    revision_informer: SharedIndexInformer<ControllerRevision>,
    registrations: [Registration; 2],
    workers: usize,
}

impl std::fmt::Debug for StatefulSetController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatefulSetController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    set_lister: Lister<StatefulSet>,
    set_indexer: Arc<Indexer<StatefulSet>>,
    pod_indexer: Arc<Indexer<Pod>>,
    history: ControllerHistory,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    pod_control: PodControl,
    control: StatefulPodControl,
    wall: WallClock,
}

impl StatefulSetController {
    /// A controller over the StatefulSets, Pods, PersistentVolumeClaims and
    /// ControllerRevisions of `factory`'s informers, writing through `client`, with
    /// `workers` workers and otherwise [`StatefulSetControllerOptions::default`].
    ///
    /// # Errors
    /// See [`StatefulSetController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<StatefulSetController, ControllerError> {
        Self::with_options(
            factory,
            client,
            StatefulSetControllerOptions {
                workers,
                ..Default::default()
            },
        )
    }

    /// A controller with explicit options.
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client;
    /// [`ControllerError::Informer`] if a shared informer was started before this
    /// controller could add its index.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue and the event recorder spawn tasks).
    pub fn with_options(
        factory: &SharedInformerFactory,
        client: Client,
        options: StatefulSetControllerOptions,
    ) -> Result<StatefulSetController, ControllerError> {
        let set_informer = factory.informer::<StatefulSet>()?;
        let pod_informer = factory.informer::<Pod>()?;
        let claim_informer = factory.informer::<PersistentVolumeClaim>()?;
        let revision_informer = factory.informer::<ControllerRevision>()?;
        ensure_controller_uid_index(&pod_informer)?;
        let history = ControllerHistory::new(client.clone(), &revision_informer)?;
        let clock = options.clock;
        let metrics = Arc::new(InMemoryMetrics::with_clock("statefulset", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let recorder = EventRecorder::with_clock(
            client.clone(),
            "statefulset-controller",
            None,
            clock.clone(),
        );
        let pod_control = PodControl::new(client.clone(), recorder, options.max_in_flight);
        let shared = Arc::new(Shared {
            control: StatefulPodControl::new(
                client.clone(),
                pod_control.clone(),
                claim_informer.lister(),
            ),
            pod_control,
            client,
            set_lister: set_informer.lister(),
            set_indexer: Arc::clone(set_informer.indexer()),
            pod_indexer: Arc::clone(pod_informer.indexer()),
            history,
            queue,
            metrics,
            wall: WallClock::new(clock),
        });
        let (a, b, c) = (shared.clone(), shared.clone(), shared.clone());
        let set_reg = set_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |s: &Arc<StatefulSet>, _| a.enqueue(s))
                .on_update(move |_, s: &Arc<StatefulSet>| b.enqueue(s))
                .on_delete(move |d: &DeleteEvent<StatefulSet>| c.enqueue(d.object())),
        );
        let (a, b, c) = (shared.clone(), shared.clone(), shared.clone());
        let pod_reg = pod_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |p: &Arc<Pod>, _| a.pod_added(p))
                .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| b.pod_updated(old, cur))
                .on_delete(move |d: &DeleteEvent<Pod>| c.pod_deleted(d.object())),
        );
        Ok(StatefulSetController {
            shared,
            factory: factory.clone(),
            set_informer,
            pod_informer,
            claim_informer,
            revision_informer,
            registrations: [set_reg, pod_reg],
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the caches, then syncs sets
    /// with the configured workers until the controller is dropped (or forever). Dropping
    /// the returned future stops the workers.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(
            &[
                &self.set_informer,
                &self.pod_informer,
                &self.claim_informer,
                &self.revision_informer,
            ],
            Duration::MAX,
        )
        .await;
        tracing::info!(
            workers = self.workers,
            "starting the statefulset controller"
        );
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="statefulset"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }
}

impl Drop for StatefulSetController {
    fn drop(&mut self) {
        let [set, pod] = &self.registrations;
        self.set_informer.remove_event_handler(set);
        self.pod_informer.remove_event_handler(pod);
        self.shared.queue.shut_down();
    }
}

/// The set's two revisions and its collision count, as one sync settles them.
struct Chosen {
    current: ControllerRevision,
    update: ControllerRevision,
    collision_count: i32,
}

fn revision_name(r: &ControllerRevision) -> &str {
    r.metadata.name.as_deref().unwrap_or("")
}

/// Whether `new` says nothing that `set`'s current status does not (Kubernetes'
/// `inconsistentStatus`, negated).
fn status_unchanged(set: &StatefulSet, new: &StatefulSetStatus) -> bool {
    let Some(cur) = set.status.as_ref() else {
        return false;
    };
    let n = |o: Option<i32>| o.unwrap_or(0);
    cur.observed_generation.is_some()
        && new.observed_generation.unwrap_or(0) <= cur.observed_generation.unwrap_or(0)
        && cur.replicas == new.replicas
        && n(cur.current_replicas) == n(new.current_replicas)
        && n(cur.ready_replicas) == n(new.ready_replicas)
        && n(cur.updated_replicas) == n(new.updated_replicas)
        && n(cur.available_replicas) == n(new.available_replicas)
        && cur.current_revision == new.current_revision
        && cur.update_revision == new.update_revision
        && n(cur.collision_count) == n(new.collision_count)
}

impl Shared {
    fn enqueue(&self, set: &StatefulSet) {
        self.queue.add(object_key(set));
    }

    /// The set a controller reference points at, if it is cached with that uid.
    fn resolve(&self, namespace: Option<&str>, r: &OwnerReference) -> Option<Arc<StatefulSet>> {
        if r.kind != "StatefulSet" {
            return None;
        }
        self.set_lister
            .get(namespace, &r.name)
            .filter(|s| s.metadata.uid.as_deref() == Some(r.uid.as_str()))
    }

    /// The sets of the pod's namespace whose (valid, non-empty) selector matches it.
    fn sets_selecting(&self, pod: &Pod) -> Vec<Arc<StatefulSet>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        self.set_indexer
            .by_index(NAMESPACE_INDEX, ns)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| {
                !selects_everything(&s.spec.selector)
                    && label_selector_as_selector(&s.spec.selector)
                        .is_ok_and(|sel| sel.matches(pod_labels(pod)))
            })
            .collect()
    }

    fn pod_added(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(pod);
            return;
        }
        if let Some(r) = controller_of(&pod.metadata) {
            if let Some(s) = self.resolve(pod.metadata.namespace.as_deref(), r) {
                self.enqueue(&s);
            }
            return;
        }
        for s in self.sets_selecting(pod) {
            self.enqueue(&s);
        }
    }

    fn pod_updated(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        let ns = cur.metadata.namespace.as_deref();
        let label_changed = pod_labels(old) != pod_labels(cur);
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = cur_ref != old_ref;
        if ref_changed {
            if let Some(s) = old_ref.and_then(|r| self.resolve(ns, r)) {
                self.enqueue(&s);
            }
        }
        if let Some(r) = cur_ref {
            if let Some(s) = self.resolve(ns, r) {
                self.enqueue(&s);
                let min_ready = s.spec.min_ready_seconds.unwrap_or(0);
                if min_ready > 0
                    && !crate::controller_utils::is_pod_ready(old)
                    && crate::controller_utils::is_pod_ready(cur)
                {
                    // Look again once it has been ready long enough to be available.
                    self.queue.add_after(
                        object_key(&*s),
                        Duration::from_secs(min_ready.unsigned_abs().into()),
                    );
                }
            }
            return;
        }
        if label_changed || ref_changed {
            for s in self.sets_selecting(cur) {
                self.enqueue(&s);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(r) = controller_of(&pod.metadata) {
            if let Some(s) = self.resolve(pod.metadata.namespace.as_deref(), r) {
                self.enqueue(&s);
            }
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await;
            finish_sync(&self.queue, key, result, "the statefulset");
        }
    }

    /// Brings the set `key` in line with its spec (see the module docs).
    async fn sync(&self, key: &str) -> Result<(), String> {
        let (ns, name) = match split_key(key) {
            Ok((Some(ns), name)) => (ns.to_string(), name.to_string()),
            _ => {
                tracing::warn!(key, "ignoring a malformed key");
                return Ok(());
            }
        };
        let Some(set) = self.set_lister.get(Some(&ns), &name) else {
            return Ok(());
        };
        let selector = match label_selector_as_selector(&set.spec.selector) {
            Ok(s) if !selects_everything(&set.spec.selector) => s,
            Ok(_) => {
                tracing::warn!(key, "statefulset selects every pod: not managing it");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "statefulset has an invalid selector");
                return Ok(());
            }
        };
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let owner = Owner {
            meta: &set.metadata,
            api_version: "apps/v1",
            kind: "StatefulSet",
        };
        let api: Api<StatefulSet> = Api::for_type(self.client.clone(), &ns);
        let fresh_name = name.clone();
        let mut adoption = recheck_deletion_timestamp(owner, async move {
            api.get(&fresh_name).await.map(|s| s.metadata)
        });

        let revisions = self
            .history
            .claim_controller_revisions(owner, &selector, &mut adoption)
            .await
            .map_err(|e| e.to_string())?;

        let set_name = name.clone();
        let pods = claim(
            owned_and_orphans(&self.pod_indexer, &uid, &ns),
            owner,
            |p: &Pod| selector.matches(pod_labels(p)) && is_member_of(&set_name, p),
            &mut adoption,
            |ns, name, patch| {
                let control = self.pod_control.clone();
                async move { control.patch(&ns, &name, &patch).await }
            },
        )
        .await
        .map_err(|e| e.to_string())?;

        let chosen = self.choose_revisions(&set, &revisions).await?;
        let result = self.update_set(&set, &pods, &chosen).await;
        let truncated = self
            .truncate_history(&set, &pods, &revisions, &chosen)
            .await;
        let status = result?;
        truncated?;
        let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
        if min_ready > 0 && status.available_replicas.unwrap_or(0) != set_replicas(&set) {
            self.queue.add_after(
                key.to_string(),
                Duration::from_secs(min_ready.unsigned_abs().into()),
            );
        }
        Ok(())
    }

    /// Plans and runs one sync of `set`, then writes its status (also when a step failed).
    /// Returns the status written.
    async fn update_set(
        &self,
        set: &Arc<StatefulSet>,
        pods: &[Arc<Pod>],
        chosen: &Chosen,
    ) -> Result<StatefulSetStatus, String> {
        let revisions = plan::Revisions {
            current: revision_name(&chosen.current),
            update: revision_name(&chosen.update),
        };
        let now = self.wall.now();
        let the_plan = plan::plan(set, pods, revisions, now, &self.control.view(set));
        let run = self.run_steps(set, &the_plan.steps, chosen).await;
        let (current_revision, current) =
            plan::complete_rolling_update(set, the_plan.counts, revisions);
        let counts = the_plan.counts;
        let status = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            replicas: counts.replicas,
            ready_replicas: nonzero(counts.ready),
            available_replicas: Some(counts.available),
            current_replicas: nonzero(current),
            updated_replicas: nonzero(counts.updated),
            current_revision: Some(current_revision.to_string()),
            update_revision: Some(revisions.update.to_string()),
            collision_count: Some(chosen.collision_count),
            conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
        };
        let written = self.write_status(set, status.clone()).await;
        run?;
        written?;
        Ok(status)
    }

    /// Runs `steps` in order; the actions of one step concurrently, in slow-start batches
    /// of at most [`MAX_BATCH_SIZE`]. Stops at the first step with a failure.
    async fn run_steps(
        &self,
        set: &Arc<StatefulSet>,
        steps: &[Vec<Action>],
        chosen: &Chosen,
    ) -> Result<(), String> {
        let parent = Arc::new(object_reference(&**set));
        let controller_ref = new_controller_ref(&set.metadata, "apps/v1", "StatefulSet")
            .ok_or("the statefulset has no uid")?;
        let current = Arc::new(revision::template_of(&chosen.current)?);
        let update = Arc::new(revision::template_of(&chosen.update)?);
        for step in steps {
            let next = Arc::new(AtomicUsize::new(0));
            let step = Arc::new(step.clone());
            let mut batch = 1usize;
            let mut done = 0;
            while done < step.len() {
                let size = batch.min(step.len() - done).min(MAX_BATCH_SIZE);
                let mut calls = tokio::task::JoinSet::new();
                for _ in 0..size {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(action) = step.get(i).cloned() else {
                        break;
                    };
                    let ctx = ActionContext {
                        control: self.control.clone(),
                        set: Arc::clone(set),
                        parent: Arc::clone(&parent),
                        controller_ref: controller_ref.clone(),
                        current: (
                            Arc::clone(&current),
                            revision_name(&chosen.current).to_string(),
                        ),
                        update: (
                            Arc::clone(&update),
                            revision_name(&chosen.update).to_string(),
                        ),
                    };
                    calls.spawn(ctx.run(action));
                }
                let mut first_error = None;
                while let Some(r) = calls.join_next().await {
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            first_error.get_or_insert(e);
                        }
                        Err(_) => {
                            first_error.get_or_insert_with(|| "an action was interrupted".into());
                        }
                    }
                }
                if let Some(e) = first_error {
                    return Err(e);
                }
                done += size;
                batch = batch.saturating_mul(2);
            }
        }
        Ok(())
    }

    /// Writes `status` unless it says nothing new; on a conflict, re-reads the set and
    /// tries again.
    async fn write_status(
        &self,
        set: &Arc<StatefulSet>,
        status: StatefulSetStatus,
    ) -> Result<(), String> {
        if status_unchanged(set, &status) {
            return Ok(());
        }
        let mut current = (**set).clone();
        let mut attempt = 0;
        loop {
            current.status = Some(status.clone());
            match update_status(&self.client, &current).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if attempt >= STATUS_UPDATE_RETRIES || !e.is_conflict() => {
                    return Err(format!("updating the status: {e}"))
                }
                Err(_) => {
                    attempt += 1;
                    let ns = current.metadata.namespace.clone().unwrap_or_default();
                    let name = current.metadata.name.clone().unwrap_or_default();
                    let api: Api<StatefulSet> = Api::for_type(self.client.clone(), &ns);
                    current = api
                        .get(&name)
                        .await
                        .map_err(|e| format!("re-reading for the status update: {e}"))?;
                }
            }
        }
    }
}

/// What one action needs, owned, so that actions run as tasks.
struct ActionContext {
    control: StatefulPodControl,
    set: Arc<StatefulSet>,
    parent: Arc<ObjectReference>,
    controller_ref: OwnerReference,
    current: (Arc<k8s_openapi::api::core::v1::PodTemplateSpec>, String),
    update: (Arc<k8s_openapi::api::core::v1::PodTemplateSpec>, String),
}

impl ActionContext {
    async fn run(self, action: Action) -> Result<(), String> {
        let set = &*self.set;
        match action {
            Action::Create { ordinal, revision } => {
                let (template, name) = match revision {
                    Which::Current => &self.current,
                    Which::Update => &self.update,
                };
                let pod = new_pod(set, template, name, ordinal, self.controller_ref.clone());
                self.control
                    .create_pod(set, &pod, ordinal, &self.parent)
                    .await
            }
            Action::CreateClaims { ordinal } => {
                self.control
                    .create_missing_claims(set, ordinal, &self.parent)
                    .await
            }
            Action::Delete { name, uid, reason } => {
                tracing::debug!(pod = name, ?reason, "deleting a statefulset pod");
                self.control
                    .delete_pod(set, &name, &uid, &self.parent)
                    .await
            }
            Action::SetClaimOwners { claim, owners } => {
                self.control
                    .set_claim_owners(set, &claim, &owners, &self.parent)
                    .await
            }
            Action::Relabel { name, labels } => {
                self.control
                    .relabel_pod(set, &name, &labels, &self.parent)
                    .await
            }
        }
    }
}

impl Shared {
    /// Settles the set's current and update revisions among its `revisions` (Kubernetes'
    /// `getStatefulSetRevisions`): the update revision records the template now — the
    /// newest revision if it does, else an older equal one renumbered as the newest, else
    /// a new one (past name collisions, which raise the collision count); the current
    /// revision is `status.currentRevision`, or the update revision for a new set.
    async fn choose_revisions(
        &self,
        set: &StatefulSet,
        revisions: &[Arc<ControllerRevision>],
    ) -> Result<Chosen, String> {
        let mut sorted = revisions.to_vec();
        sort_controller_revisions(&mut sorted);
        let mut collision_count = set
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0);
        let next = max_revision(&sorted) + 1;
        let mut wanted = new_controller_revision(
            &set.metadata,
            "apps/v1",
            "StatefulSet",
            set.spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
            revision::revision_data(set),
            next,
            Some(collision_count),
        )
        .ok_or("the statefulset has no uid")?;
        wanted.metadata.annotations = set.metadata.annotations.clone();
        let equal = find_equal_revisions(&sorted, &wanted);
        let update = match (equal.last(), sorted.last()) {
            (Some(eq), Some(last)) if revision_name(eq) == revision_name(last) => (**eq).clone(),
            // The template of an older revision again (a rollback): it becomes the newest.
            (Some(eq), _) => self
                .history
                .update_controller_revision(eq, next)
                .await
                .map_err(|e| format!("renumbering revision {}: {e}", revision_name(eq)))?,
            (None, _) => self
                .history
                .create_controller_revision(&set.metadata, &wanted, &mut collision_count)
                .await
                .map_err(|e| format!("creating a revision: {e}"))?,
        };
        let current_name = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_deref())
            .unwrap_or("");
        let current = sorted
            .iter()
            .find(|r| !current_name.is_empty() && revision_name(r) == current_name)
            .map(|r| (**r).clone())
            .unwrap_or_else(|| update.clone());
        Ok(Chosen {
            current,
            update,
            collision_count,
        })
    }

    /// Deletes the oldest revisions that are not live (current, update, or some pod's)
    /// beyond `spec.revisionHistoryLimit`.
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
        revisions: &[Arc<ControllerRevision>],
        chosen: &Chosen,
    ) -> Result<(), String> {
        let mut live: std::collections::HashSet<&str> =
            pods.iter().map(|p| identity::pod_revision(p)).collect();
        live.insert(revision_name(&chosen.current));
        live.insert(revision_name(&chosen.update));
        let mut sorted = revisions.to_vec();
        sort_controller_revisions(&mut sorted);
        let Ok(limit) = usize::try_from(set.spec.revision_history_limit.unwrap_or(10)) else {
            return Ok(());
        };
        for r in revisions_to_truncate(&sorted, HistoryLimit::NonLive(limit), |r| {
            live.contains(revision_name(r))
        }) {
            self.history
                .delete_controller_revision(&r)
                .await
                .map_err(|e| format!("deleting revision {}: {e}", revision_name(&r)))?;
        }
        Ok(())
    }
}
