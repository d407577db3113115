//! The Deployment controller: rolls a Deployment's pod template out through ReplicaSets, as
//! kube-controller-manager's `deployment` controller does.
//!
//! Shape (client-go's pattern): shared Deployment, ReplicaSet and Pod informers from one
//! factory; handlers that map events to Deployment keys on a rate-limited work queue;
//! workers that read from the caches and write ReplicaSets and Deployment status through
//! the API. The ReplicaSet controller ([`crate::replicaset`]) turns ReplicaSets into pods.
//!
//! - **New ReplicaSet.** The ReplicaSet whose template equals the Deployment's (ignoring
//!   the `pod-template-hash` label) is the new one; if there is none, one is created,
//!   named `<deployment>-<hash>` with `pod-template-hash=<hash>` added to its labels,
//!   selector and template ([`crate::controller_utils::compute_hash`]; on a name clash
//!   with a different template, `status.collisionCount` is raised and the hash changes).
//! - **Revisions.** Each new ReplicaSet gets `deployment.kubernetes.io/revision` = the
//!   highest so far + 1 (a ReplicaSet rolled back to gets a new number and keeps its old
//!   ones in `revision-history`), copies the Deployment's annotations, and records
//!   `desired-replicas` and `max-replicas`; old ReplicaSets beyond
//!   `revisionHistoryLimit` that have scaled to zero are deleted.
//! - **Rollouts.** `RollingUpdate` ([`rolling`]): the new ReplicaSet grows while all
//!   ReplicaSets together stay within `replicas + maxSurge`, old ones shrink while at least
//!   `replicas - maxUnavailable` pods stay available. `Recreate` ([`recreate`]): old
//!   ReplicaSets go to zero, and the new one grows once their pods are gone.
//! - **Scaling.** A change of `spec.replicas` (seen against the ReplicaSets'
//!   `desired-replicas`) is spread over the active ReplicaSets in proportion to their size,
//!   also during a rollout; a paused Deployment is only scaled.
//! - **Status.** `observedGeneration`, `replicas`, `updatedReplicas`, `readyReplicas`,
//!   `availableReplicas`, `unavailableReplicas`, `collisionCount`, and the conditions
//!   `Available` (`MinimumReplicasAvailable`) and `Progressing` (`NewReplicaSetCreated`,
//!   `ReplicaSetUpdated`, `NewReplicaSetAvailable`, `ProgressDeadlineExceeded` after
//!   `progressDeadlineSeconds` without progress, `DeploymentPaused`/`DeploymentResumed`),
//!   plus `ReplicaFailure` taken from the ReplicaSets — what `kubectl rollout status`
//!   reads.
//! - **Rollback** ([`rollback`]): `kubectl rollout undo` patches the template itself (client
//!   side); the older `deprecated.deployment.rollback.to` annotation is honoured too.
//!
//! A Deployment whose selector selects everything, is invalid, or does not match its
//! template's labels is not acted on (kube-apiserver would have refused it), with a
//! warning event. Failed syncs are retried with per-key backoff, 15 times.

mod progress;
mod recreate;
mod rollback;
mod rolling;
mod sync;
pub mod util;

use crate::controller_ref_manager::{
    claim, ensure_controller_uid_index, owned_and_orphans, recheck_deletion_timestamp, Owner,
    CONTROLLER_UID_INDEX,
};
use crate::controller_utils::{
    controller_of, label_selector_as_selector, selects_everything, update_status, ControllerError,
    WallClock, NO_LABELS,
};
use crate::event_recorder::{object_reference, EventRecorder, EventType};
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Indexer, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory, NAMESPACE_INDEX,
};
use client::clock::{RealClock, SharedClock};
use client::rest::{Api, Client, PatchParams, PatchType, PostParams};
use client::workqueue::WorkQueue as _;
use client::workqueue::{
    default_controller_rate_limiter_with_clock, InMemoryMetrics, QueueConfig, RateLimitingQueue,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How many times a failing Deployment is retried before it waits for its next change
/// (kube-controller-manager's `maxRetries`).
pub const MAX_RETRIES: u32 = 15;

/// How a [`DeploymentController`] runs. [`Default`]: 5 workers (kube-controller-manager's
/// `--concurrent-deployment-syncs`), real time.
#[derive(Clone)]
pub struct DeploymentControllerOptions {
    /// Workers syncing Deployments concurrently (one worker per Deployment at a time).
    pub workers: usize,
    /// The clock of the work queue, its backoff, and progress deadlines.
    pub clock: SharedClock,
}

impl std::fmt::Debug for DeploymentControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentControllerOptions")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Default for DeploymentControllerOptions {
    fn default() -> Self {
        DeploymentControllerOptions {
            workers: 5,
            clock: RealClock::shared(),
        }
    }
}

/// The Deployment controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it adds indexes to shared informers), then
/// await [`DeploymentController::run`]. Dropping the `run` future stops the workers;
/// dropping the controller unregisters its handlers and shuts its queue down.
pub struct DeploymentController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    d_informer: SharedIndexInformer<Deployment>,
    rs_informer: SharedIndexInformer<ReplicaSet>,
    pod_informer: SharedIndexInformer<Pod>,
    registrations: [Registration; 3],
    workers: usize,
}

impl std::fmt::Debug for DeploymentController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

/// What the handlers and workers share.
struct Shared {
    client: Client,
    d_lister: Lister<Deployment>,
    d_indexer: Arc<Indexer<Deployment>>,
    rs_lister: Lister<ReplicaSet>,
    rs_indexer: Arc<Indexer<ReplicaSet>>,
    pod_indexer: Arc<Indexer<Pod>>,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    recorder: EventRecorder,
    wall: WallClock,
}

impl DeploymentController {
    /// A controller over the Deployments, ReplicaSets and Pods of `factory`'s informers,
    /// writing through `client`, with `workers` workers.
    ///
    /// # Errors
    /// See [`DeploymentController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<DeploymentController, ControllerError> {
        Self::with_options(
            factory,
            client,
            DeploymentControllerOptions {
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
        options: DeploymentControllerOptions,
    ) -> Result<DeploymentController, ControllerError> {
        let d_informer = factory.informer::<Deployment>()?;
        let rs_informer = factory.informer::<ReplicaSet>()?;
        let pod_informer = factory.informer::<Pod>()?;
        ensure_controller_uid_index(&rs_informer)?;
        ensure_controller_uid_index(&pod_informer)?;
        let clock = options.clock;
        let metrics = Arc::new(InMemoryMetrics::with_clock("deployment", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let shared = Arc::new(Shared {
            recorder: EventRecorder::with_clock(
                client.clone(),
                "deployment-controller",
                None,
                clock.clone(),
            ),
            client,
            d_lister: d_informer.lister(),
            d_indexer: Arc::clone(d_informer.indexer()),
            rs_lister: rs_informer.lister(),
            rs_indexer: Arc::clone(rs_informer.indexer()),
            pod_indexer: Arc::clone(pod_informer.indexer()),
            queue,
            metrics,
            wall: WallClock::new(clock),
        });
        let (a, b, c) = (shared.clone(), shared.clone(), shared.clone());
        let d_reg = d_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |d: &Arc<Deployment>, _| a.enqueue(d))
                .on_update(move |_, d: &Arc<Deployment>| b.enqueue(d))
                .on_delete(move |d: &DeleteEvent<Deployment>| c.enqueue(d.object())),
        );
        let (a, b, c) = (shared.clone(), shared.clone(), shared.clone());
        let rs_reg = rs_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |rs: &Arc<ReplicaSet>, _| a.rs_added(rs))
                .on_update(move |old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>| {
                    b.rs_updated(old, cur)
                })
                .on_delete(move |d: &DeleteEvent<ReplicaSet>| c.rs_deleted(d.object())),
        );
        let a = shared.clone();
        let pod_reg = pod_informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_delete(move |d: &DeleteEvent<Pod>| a.pod_deleted(d.object())),
        );
        Ok(DeploymentController {
            shared,
            factory: factory.clone(),
            d_informer,
            rs_informer,
            pod_informer,
            registrations: [d_reg, rs_reg, pod_reg],
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the caches, then syncs
    /// Deployments with the configured workers until the controller is dropped (or
    /// forever). Dropping the returned future stops the workers.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(
            &[&self.d_informer, &self.rs_informer, &self.pod_informer],
            Duration::MAX,
        )
        .await;
        tracing::info!(workers = self.workers, "starting the deployment controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="deployment"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }
}

impl Drop for DeploymentController {
    fn drop(&mut self) {
        let [d, rs, pod] = &self.registrations;
        self.d_informer.remove_event_handler(d);
        self.rs_informer.remove_event_handler(rs);
        self.pod_informer.remove_event_handler(pod);
        self.shared.queue.shut_down();
    }
}

impl Shared {
    fn enqueue(&self, d: &Deployment) {
        self.queue.add(object_key(d));
    }

    /// The Deployment a controller reference points at, if it is cached with that uid.
    fn resolve(&self, namespace: Option<&str>, r: &OwnerReference) -> Option<Arc<Deployment>> {
        if r.kind != "Deployment" {
            return None;
        }
        self.d_lister
            .get(namespace, &r.name)
            .filter(|d| d.metadata.uid.as_deref() == Some(r.uid.as_str()))
    }

    /// The Deployments of the ReplicaSet's namespace whose selector matches it.
    fn deployments_selecting(&self, rs: &ReplicaSet) -> Vec<Arc<Deployment>> {
        let ns = rs.metadata.namespace.as_deref().unwrap_or("");
        let labels = rs.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        self.d_indexer
            .by_index(NAMESPACE_INDEX, ns)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| {
                !selects_everything(&d.spec.selector)
                    && label_selector_as_selector(&d.spec.selector).is_ok_and(|s| s.matches(labels))
            })
            .collect()
    }

    fn rs_added(&self, rs: &Arc<ReplicaSet>) {
        if rs.metadata.deletion_timestamp.is_some() {
            self.rs_deleted(rs);
            return;
        }
        let ns = rs.metadata.namespace.as_deref();
        if let Some(r) = controller_of(&rs.metadata) {
            if let Some(d) = self.resolve(ns, r) {
                self.enqueue(&d);
            }
            return;
        }
        for d in self.deployments_selecting(rs) {
            self.enqueue(&d);
        }
    }

    fn rs_updated(&self, old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        let ns = cur.metadata.namespace.as_deref();
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = cur_ref != old_ref;
        if ref_changed {
            if let Some(d) = old_ref.and_then(|r| self.resolve(ns, r)) {
                self.enqueue(&d);
            }
        }
        if let Some(r) = cur_ref {
            if let Some(d) = self.resolve(ns, r) {
                self.enqueue(&d);
            }
            return;
        }
        let labels = |rs: &ReplicaSet| rs.metadata.labels.clone().unwrap_or_default();
        if ref_changed || labels(old) != labels(cur) {
            for d in self.deployments_selecting(cur) {
                self.enqueue(&d);
            }
        }
    }

    fn rs_deleted(&self, rs: &ReplicaSet) {
        if let Some(r) = controller_of(&rs.metadata) {
            if let Some(d) = self.resolve(rs.metadata.namespace.as_deref(), r) {
                self.enqueue(&d);
            }
        }
    }

    /// A pod went away: a Recreate rollout waiting for its old pods to be gone may go on.
    fn pod_deleted(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref();
        let Some(rs_ref) = controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet") else {
            return;
        };
        let Some(rs) = self
            .rs_lister
            .get(ns, &rs_ref.name)
            .filter(|rs| rs.metadata.uid.as_deref() == Some(rs_ref.uid.as_str()))
        else {
            return;
        };
        let Some(d) = controller_of(&rs.metadata).and_then(|r| self.resolve(ns, r)) else {
            return;
        };
        if !util::is_recreate(&d) {
            return;
        }
        let owned: Vec<ReplicaSet> = self
            .rs_indexer
            .by_index(
                CONTROLLER_UID_INDEX,
                d.metadata.uid.as_deref().unwrap_or(""),
            )
            .unwrap_or_default()
            .iter()
            .map(|rs| (**rs).clone())
            .collect();
        if self.pod_map(&d, &owned).values().all(Vec::is_empty) {
            self.enqueue(&d);
        }
    }

    /// The pods of each of `rss` (by ReplicaSet uid) that the Deployment's selector
    /// matches.
    fn pod_map(&self, d: &Deployment, rss: &[ReplicaSet]) -> BTreeMap<String, Vec<Arc<Pod>>> {
        let Ok(selector) = label_selector_as_selector(&d.spec.selector) else {
            return BTreeMap::new();
        };
        rss.iter()
            .filter_map(|rs| rs.metadata.uid.clone())
            .map(|uid| {
                let pods = self
                    .pod_indexer
                    .by_index(CONTROLLER_UID_INDEX, &uid)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&NO_LABELS)))
                    .collect();
                (uid, pods)
            })
            .collect()
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            match self.sync_deployment(&key).await {
                Ok(()) => self.queue.forget(&key),
                Err(e) if self.queue.num_requeues(&key) < MAX_RETRIES => {
                    tracing::debug!(key, error = %e, "syncing the deployment failed; retrying with backoff");
                    self.queue.add_rate_limited(key.clone());
                }
                Err(e) => {
                    tracing::warn!(key, error = %e, "dropping the deployment out of the queue after repeated failures");
                    self.queue.forget(&key);
                }
            }
            self.queue.done(&key);
        }
    }

    fn warn(&self, d: &Deployment, reason: &str, message: impl Into<String>) {
        self.recorder
            .event(&object_reference(d), EventType::Warning, reason, message);
    }

    fn normal(&self, d: &Deployment, reason: &str, message: impl Into<String>) {
        self.recorder
            .event(&object_reference(d), EventType::Normal, reason, message);
    }

    /// Brings the Deployment `key` a step closer to its spec (see the module docs).
    async fn sync_deployment(&self, key: &str) -> Result<(), String> {
        let (ns, name) = match split_key(key) {
            Ok((Some(ns), name)) => (ns.to_string(), name.to_string()),
            _ => {
                tracing::warn!(key, "ignoring a malformed key");
                return Ok(());
            }
        };
        let Some(cached) = self.d_lister.get(Some(&ns), &name) else {
            return Ok(());
        };
        let mut d = (*cached).clone();
        if selects_everything(&d.spec.selector) {
            self.warn(
                &d,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            let observed = d
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if observed < d.metadata.generation.unwrap_or(0) {
                d.status
                    .get_or_insert_with(Default::default)
                    .observed_generation = d.metadata.generation;
                self.write_status(&mut d).await?;
            }
            return Ok(());
        }
        let selector = match label_selector_as_selector(&d.spec.selector) {
            Ok(s) => s,
            Err(e) => {
                self.warn(
                    &d,
                    "InvalidSelector",
                    format!("invalid label selector: {e}"),
                );
                return Ok(());
            }
        };
        let template_labels = d
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or(&NO_LABELS);
        if !selector.matches(template_labels) {
            self.warn(
                &d,
                "InvalidSelector",
                "`selector` does not match template `labels`",
            );
            return Ok(());
        }
        let mut rss = self.replica_sets_for(&d, &selector).await?;
        if d.metadata.deletion_timestamp.is_some() {
            return self.sync_status_only(&mut d, &mut rss).await;
        }
        self.check_paused_conditions(&mut d).await?;
        if d.spec.paused == Some(true) {
            return self.sync(&mut d, &mut rss).await;
        }
        if rollback::rollback_to(&d).is_some() {
            return self.rollback(&mut d, &mut rss).await;
        }
        if self.is_scaling_event(&mut d, &mut rss).await? {
            return self.sync(&mut d, &mut rss).await;
        }
        if util::is_recreate(&d) {
            self.rollout_recreate(&mut d, &mut rss).await
        } else if util::is_rolling_update(&d) {
            self.rollout_rolling(&mut d, &mut rss).await
        } else {
            Err(format!(
                "unexpected deployment strategy type: {:?}",
                d.spec
                    .strategy
                    .as_ref()
                    .and_then(|s| s.type_.clone())
                    .unwrap_or_default()
            ))
        }
    }

    /// The ReplicaSets the Deployment controls, adopting orphans its selector matches and
    /// releasing its own that no longer match.
    async fn replica_sets_for(
        &self,
        d: &Deployment,
        selector: &api::labels::LabelSelector,
    ) -> Result<Vec<ReplicaSet>, String> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let candidates = owned_and_orphans(&self.rs_indexer, &uid, &ns);
        let owner = Owner {
            meta: &d.metadata,
            api_version: "apps/v1",
            kind: "Deployment",
        };
        let api: Api<Deployment> = Api::for_type(self.client.clone(), &ns);
        let name = d.metadata.name.clone().unwrap_or_default();
        let mut adoption =
            recheck_deletion_timestamp(
                owner,
                async move { api.get(&name).await.map(|d| d.metadata) },
            );
        let rs_api: Api<ReplicaSet> = Api::for_type(self.client.clone(), &ns);
        let claimed = claim(
            candidates,
            owner,
            |rs: &ReplicaSet| selector.matches(rs.metadata.labels.as_ref().unwrap_or(&NO_LABELS)),
            &mut adoption,
            |_ns, name, patch| {
                let api = rs_api.clone();
                async move {
                    api.patch(&name, &PatchParams::default(), PatchType::Strategic, &patch)
                        .await
                        .map(|_| ())
                }
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(claimed.iter().map(|rs| (**rs).clone()).collect())
    }

    /// Writes the Deployment's status (its `status`, through the status subresource) and
    /// carries the stored resourceVersion back into `d`. The revision annotation, which
    /// kube-apiserver takes along with a status write, is written to the main resource when
    /// the server left it out.
    async fn write_status(&self, d: &mut Deployment) -> Result<(), String> {
        let updated = update_status(&self.client, &*d)
            .await
            .map_err(|e| format!("updating the deployment status: {e}"))?;
        d.metadata.resource_version = updated.metadata.resource_version.clone();
        d.status = updated.status.clone();
        let want = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(util::REVISION_ANNOTATION))
            .cloned();
        let have = updated
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(util::REVISION_ANNOTATION));
        if let Some(want) = want.filter(|w| Some(w) != have) {
            // A replace, as kube-controller-manager writes it (its role may update
            // Deployments, not patch them), conditional on the version just written.
            let api: Api<Deployment> = Api::for_type(
                self.client.clone(),
                d.metadata.namespace.as_deref().unwrap_or(""),
            );
            let mut annotated = updated.clone();
            annotated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(util::REVISION_ANNOTATION.to_string(), want);
            let replaced = api
                .replace(
                    d.metadata.name.as_deref().unwrap_or(""),
                    &PostParams::default(),
                    &annotated,
                )
                .await
                .map_err(|e| format!("annotating the deployment's revision: {e}"))?;
            d.metadata.resource_version = replaced.metadata.resource_version;
        }
        Ok(())
    }

    /// Replaces a ReplicaSet (spec and metadata), returning it as stored.
    async fn update_replica_set(&self, rs: &ReplicaSet) -> Result<ReplicaSet, String> {
        let api: Api<ReplicaSet> = Api::for_type(
            self.client.clone(),
            rs.metadata.namespace.as_deref().unwrap_or(""),
        );
        api.replace(
            rs.metadata.name.as_deref().unwrap_or(""),
            &PostParams::default(),
            rs,
        )
        .await
        .map_err(|e| {
            format!(
                "updating replica set {}: {e}",
                rs.metadata.name.as_deref().unwrap_or("")
            )
        })
    }
}
