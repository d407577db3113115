//! The DaemonSet controller: one pod of every DaemonSet on each node that should run it, as
//! kube-controller-manager 1.32's `daemonset` controller keeps them.
//!
//! Shape (client-go's pattern): shared DaemonSet, Pod, Node and ControllerRevision
//! informers; handlers that map changes to DaemonSet keys on a rate-limited work queue;
//! workers that read the caches and write through the API.
//!
//! - **Where.** A node should run a DaemonSet's pod when it passes the template's node
//!   selector, required node affinity and `nodeName`, and the pod (with Kubernetes' default
//!   DaemonSet tolerations) tolerates its taints ([`eligibility`]). Node additions, label,
//!   taint and removal changes re-sync the DaemonSets they concern.
//! - **Creating.** A missing pod is created from the template, labelled with the current
//!   revision's `controller-revision-hash`, pinned to its node by a required node affinity
//!   on `metadata.name` and left for the scheduler to bind; at most 250 per sync, in
//!   slow-start batches.
//! - **Deleting.** Pods on nodes that should not run them (or may not keep them), extra pods
//!   on a node, succeeded pods, and failed pods (each node's replacement paced by an
//!   exponential backoff from 1 s to 15 minutes, [`backoff`]) are deleted ([`manage`]).
//! - **Expectations.** After issuing creates or deletes, a DaemonSet is not managed again
//!   until the pod informer has reported them ([`crate::expectations`]).
//! - **History.** The current template's ControllerRevision is found or created
//!   ([`history`], on [`crate::controller_history`]); old ones beyond
//!   `revisionHistoryLimit` that no pod still uses are deleted.
//! - **Updates.** `RollingUpdate` replaces pods of older revisions within `maxUnavailable`,
//!   or starts new ones beside them within `maxSurge` ([`rolling_update`]); `OnDelete`
//!   leaves them until they are deleted.
//! - **Status.** `desiredNumberScheduled`, `currentNumberScheduled`, `numberMisscheduled`,
//!   `numberReady`, `updatedNumberScheduled`, `numberAvailable`, `numberUnavailable`,
//!   `observedGeneration` and `collisionCount` ([`status`]), so that `kubectl rollout
//!   status ds/x` follows a rollout.
//!
//! Unlike Kubernetes, whose pod garbage collector removes the pods of a deleted node, a
//! node's removal also re-syncs the DaemonSets, so that their status counts it out at once.

pub mod backoff;
pub mod eligibility;
pub mod history;
pub mod manage;
pub mod pods;
pub mod rolling_update;
pub mod status;

use crate::controller_history::{ControllerHistory, POD_REVISION_LABEL};
use crate::controller_ref_manager::{
    claim, ensure_controller_uid_index, owned_and_orphans, recheck_deletion_timestamp, Owner,
    CONTROLLER_UID_INDEX,
};
use crate::controller_utils::{
    controller_of, finish_sync, is_namespace_terminating, is_pod_ready, label_selector_as_selector,
    new_controller_ref, pod_labels, selects_everything, slow_start_batch, update_status,
    ControllerError, WallClock, NO_LABELS, SLOW_START_INITIAL_BATCH_SIZE,
};
use crate::event_recorder::{object_reference, EventRecorder, EventType};
use crate::expectations::ControllerExpectations;
use crate::pod_control::{PodControl, DEFAULT_MAX_IN_FLIGHT};
use backoff::FailedPodsBackoff;
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
use eligibility::{replace_node_name_affinity, DaemonPodShape, Placement};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use manage::{pods_should_be_on_node, unscheduled_pods_without_node, ManageContext};
use pods::{nodes_to_pods, template_generation, NodesToPods, POD_TEMPLATE_GENERATION_LABEL};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The most pods one sync creates or deletes (kube-controller-manager's `BurstReplicas`
/// for DaemonSets).
pub const BURST_REPLICAS: usize = 250;

/// The event reason for a failed daemon pod about to be replaced.
pub const FAILED_DAEMON_POD: &str = "FailedDaemonPod";

/// How status updates are retried after a conflict (one fresh read and one more write).
const STATUS_UPDATE_RETRIES: usize = 1;

/// How a [`DaemonSetController`] runs. [`Default`]: 2 workers (kube-controller-manager's
/// `--concurrent-daemonset-syncs`), bursts of 250, 128 pod requests in flight, real time.
#[derive(Clone)]
pub struct DaemonSetControllerOptions {
    /// Workers syncing DaemonSets concurrently (each DaemonSet by one worker at a time).
    pub workers: usize,
    /// The most pods created or deleted per sync.
    pub burst_replicas: usize,
    /// Pod requests in flight at once, across all workers.
    pub max_in_flight: usize,
    /// The clock of the work queue, the expectations, the backoff and availability.
    pub clock: SharedClock,
}

impl std::fmt::Debug for DaemonSetControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonSetControllerOptions")
            .field("workers", &self.workers)
            .field("burst_replicas", &self.burst_replicas)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Default for DaemonSetControllerOptions {
    fn default() -> Self {
        DaemonSetControllerOptions {
            workers: 2,
            burst_replicas: BURST_REPLICAS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            clock: RealClock::shared(),
        }
    }
}

/// The DaemonSet controller. See the [module docs](self).
///
/// Build it before the informer factory starts (it adds indexes to the shared pod and
/// revision informers), then await [`DaemonSetController::run`]. Dropping the `run` future
/// stops the workers; dropping the controller unregisters its handlers and shuts its queue
/// down.
pub struct DaemonSetController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    ds_informer: SharedIndexInformer<DaemonSet>,
    pod_informer: SharedIndexInformer<Pod>,
    node_informer: SharedIndexInformer<Node>,
    rev_informer: SharedIndexInformer<ControllerRevision>,
    registrations: Vec<(Registration, Informer)>,
    workers: usize,
}

#[derive(Debug, Clone, Copy)]
enum Informer {
    DaemonSets,
    Pods,
    Nodes,
    Revisions,
}

impl std::fmt::Debug for DaemonSetController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonSetController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    ds_lister: Lister<DaemonSet>,
    ds_indexer: Arc<Indexer<DaemonSet>>,
    pod_indexer: Arc<Indexer<Pod>>,
    node_indexer: Arc<Indexer<Node>>,
    history: ControllerHistory,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    expectations: ControllerExpectations,
    pod_control: PodControl,
    recorder: EventRecorder,
    backoff: FailedPodsBackoff,
    wall: WallClock,
    burst_replicas: usize,
}

impl DaemonSetController {
    /// A controller over `factory`'s informers, writing through `client`, with `workers`
    /// workers and otherwise [`DaemonSetControllerOptions::default`].
    ///
    /// # Errors
    /// See [`DaemonSetController::with_options`].
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<DaemonSetController, ControllerError> {
        Self::with_options(
            factory,
            client,
            DaemonSetControllerOptions {
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
        options: DaemonSetControllerOptions,
    ) -> Result<DaemonSetController, ControllerError> {
        let ds_informer = factory.informer::<DaemonSet>()?;
        let pod_informer = factory.informer::<Pod>()?;
        let node_informer = factory.informer::<Node>()?;
        let rev_informer = factory.informer::<ControllerRevision>()?;
        ensure_controller_uid_index(&pod_informer)?;
        let history = ControllerHistory::new(client.clone(), &rev_informer)?;
        let clock = options.clock.clone();
        let metrics = Arc::new(InMemoryMetrics::with_clock("daemonset", clock.clone()));
        let queue = RateLimitingQueue::with_config(
            QueueConfig::new()
                .clock(clock.clone())
                .metrics(Arc::clone(&metrics) as _),
            default_controller_rate_limiter_with_clock(clock.clone()),
        );
        let recorder =
            EventRecorder::with_clock(client.clone(), "daemonset-controller", None, clock.clone());
        let shared = Arc::new(Shared {
            pod_control: PodControl::new(client.clone(), recorder.clone(), options.max_in_flight),
            recorder,
            client,
            ds_lister: ds_informer.lister(),
            ds_indexer: Arc::clone(ds_informer.indexer()),
            pod_indexer: Arc::clone(pod_informer.indexer()),
            node_indexer: Arc::clone(node_informer.indexer()),
            history,
            queue,
            metrics,
            expectations: ControllerExpectations::new(clock.clone()),
            backoff: FailedPodsBackoff::new(clock.clone()),
            wall: WallClock::new(clock),
            burst_replicas: options.burst_replicas.max(1),
        });
        let mut registrations = Vec::new();
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        registrations.push((
            ds_informer.add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |ds: &Arc<DaemonSet>, _| s1.enqueue(ds))
                    .on_update(move |old: &Arc<DaemonSet>, cur: &Arc<DaemonSet>| {
                        if old.metadata.uid != cur.metadata.uid {
                            s2.ds_deleted(old);
                        }
                        s2.enqueue(cur);
                    })
                    .on_delete(move |d: &DeleteEvent<DaemonSet>| s3.ds_deleted(d.object())),
            ),
            Informer::DaemonSets,
        ));
        let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
        registrations.push((
            pod_informer.add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |pod: &Arc<Pod>, _| p1.pod_added(pod))
                    .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| p2.pod_updated(old, cur))
                    .on_delete(move |d: &DeleteEvent<Pod>| p3.pod_deleted(d.object())),
            ),
            Informer::Pods,
        ));
        let (n1, n2, n3) = (shared.clone(), shared.clone(), shared.clone());
        registrations.push((
            node_informer.add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |node: &Arc<Node>, _| n1.node_added(node))
                    .on_update(move |old: &Arc<Node>, cur: &Arc<Node>| n2.node_updated(old, cur))
                    .on_delete(move |_: &DeleteEvent<Node>| n3.enqueue_all()),
            ),
            Informer::Nodes,
        ));
        let (r1, r2, r3) = (shared.clone(), shared.clone(), shared.clone());
        registrations.push((
            rev_informer.add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |r: &Arc<ControllerRevision>, _| r1.revision_changed(r))
                    .on_update(
                        move |_: &Arc<ControllerRevision>, cur: &Arc<ControllerRevision>| {
                            r2.revision_changed(cur)
                        },
                    )
                    .on_delete(move |d: &DeleteEvent<ControllerRevision>| {
                        r3.revision_changed(d.object())
                    }),
            ),
            Informer::Revisions,
        ));
        Ok(DaemonSetController {
            shared,
            factory: factory.clone(),
            ds_informer,
            pod_informer,
            node_informer,
            rev_informer,
            registrations,
            workers: options.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the caches, then syncs
    /// DaemonSets with the configured workers until the controller is dropped (or forever).
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(
            &[
                &self.ds_informer,
                &self.pod_informer,
                &self.node_informer,
                &self.rev_informer,
            ],
            Duration::MAX,
        )
        .await;
        tracing::info!(workers = self.workers, "starting the daemonset controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        let shared = Arc::clone(&self.shared);
        workers.spawn(async move {
            // Forget the backoff of nodes whose pods stopped failing long ago.
            loop {
                tokio::time::sleep(backoff::MAX).await;
                shared.backoff.gc();
            }
        });
        while workers.join_next().await.is_some() {}
    }

    /// The work queue's metrics (`workqueue_*{name="daemonset"}`).
    pub fn metrics(&self) -> Arc<InMemoryMetrics> {
        Arc::clone(&self.shared.metrics)
    }

    /// The expectations the controller holds, by DaemonSet key.
    pub fn expectations(&self) -> &ControllerExpectations {
        &self.shared.expectations
    }
}

impl Drop for DaemonSetController {
    fn drop(&mut self) {
        for (reg, which) in &self.registrations {
            match which {
                Informer::DaemonSets => self.ds_informer.remove_event_handler(reg),
                Informer::Pods => self.pod_informer.remove_event_handler(reg),
                Informer::Nodes => self.node_informer.remove_event_handler(reg),
                Informer::Revisions => self.rev_informer.remove_event_handler(reg),
            };
        }
        self.shared.queue.shut_down();
    }
}

fn pod_key(pod: &Pod) -> String {
    object_key(pod)
}

/// Whether a node update can change where DaemonSets run: anything but its status and
/// resource version.
fn node_spec_changed(old: &Node, cur: &Node) -> bool {
    let strip = |n: &Node| {
        let mut n = n.clone();
        n.metadata.resource_version = None;
        n.metadata.managed_fields = None;
        n.status = None;
        n
    };
    strip(old) != strip(cur)
}

impl Shared {
    fn enqueue(&self, ds: &DaemonSet) {
        self.queue.add(object_key(ds));
    }

    fn enqueue_all(&self) {
        for ds in self.ds_indexer.list() {
            self.enqueue(&ds);
        }
    }

    fn ds_deleted(&self, ds: &DaemonSet) {
        let key = object_key(ds);
        self.expectations.delete(&key);
        self.queue.add(key);
    }

    /// The DaemonSet a controller reference points at, if it is in the cache with that uid.
    fn resolve(
        &self,
        namespace: Option<&str>,
        r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Option<Arc<DaemonSet>> {
        if r.kind != "DaemonSet" {
            return None;
        }
        self.ds_lister
            .get(namespace, &r.name)
            .filter(|ds| ds.metadata.uid.as_deref() == Some(r.uid.as_str()))
    }

    /// The DaemonSets of the namespace whose (non-empty, valid) selector matches `labels`.
    fn daemon_sets_selecting(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<Arc<DaemonSet>> {
        self.ds_indexer
            .by_index(NAMESPACE_INDEX, namespace)
            .unwrap_or_default()
            .into_iter()
            .filter(|ds| {
                !selects_everything(&ds.spec.selector)
                    && label_selector_as_selector(&ds.spec.selector)
                        .is_ok_and(|sel| sel.matches(labels))
            })
            .collect()
    }

    fn pod_added(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(pod);
            return;
        }
        let ns = pod.metadata.namespace.as_deref();
        if let Some(r) = controller_of(&pod.metadata) {
            if let Some(ds) = self.resolve(ns, r) {
                let key = object_key(&*ds);
                self.expectations.creation_observed(&key);
                self.queue.add(key);
            }
            return;
        }
        for ds in self.daemon_sets_selecting(ns.unwrap_or(""), pod_labels(pod)) {
            self.enqueue(&ds);
        }
    }

    fn pod_updated(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        if cur.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(cur);
            return;
        }
        let ns = cur.metadata.namespace.as_deref();
        let (old_ref, cur_ref) = (controller_of(&old.metadata), controller_of(&cur.metadata));
        let ref_changed = old_ref != cur_ref;
        if ref_changed {
            if let Some(ds) = old_ref.and_then(|r| self.resolve(ns, r)) {
                self.enqueue(&ds);
            }
        }
        if let Some(r) = cur_ref {
            if let Some(ds) = self.resolve(ns, r) {
                self.enqueue(&ds);
                let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
                if min_ready > 0 && !is_pod_ready(old) && is_pod_ready(cur) {
                    let after = Duration::from_secs(min_ready.unsigned_abs().into())
                        + Duration::from_secs(1);
                    self.queue.add_after(object_key(&*ds), after);
                }
            }
            return;
        }
        if ref_changed || pod_labels(old) != pod_labels(cur) {
            for ds in self.daemon_sets_selecting(ns.unwrap_or(""), pod_labels(cur)) {
                self.enqueue(&ds);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        let Some(r) = controller_of(&pod.metadata) else {
            return;
        };
        if let Some(ds) = self.resolve(pod.metadata.namespace.as_deref(), r) {
            let key = object_key(&*ds);
            self.expectations.deletion_observed(&key, &pod_key(pod));
            self.queue.add(key);
        }
    }

    fn node_added(&self, node: &Arc<Node>) {
        for ds in self.ds_indexer.list() {
            if DaemonPodShape::new(&ds).placement(node).should_run {
                self.enqueue(&ds);
            }
        }
    }

    fn node_updated(&self, old: &Arc<Node>, cur: &Arc<Node>) {
        if !node_spec_changed(old, cur) {
            return;
        }
        for ds in self.ds_indexer.list() {
            let shape = DaemonPodShape::new(&ds);
            if shape.placement(old) != shape.placement(cur) {
                self.enqueue(&ds);
            }
        }
    }

    fn revision_changed(&self, rev: &ControllerRevision) {
        let ns = rev.metadata.namespace.as_deref();
        match controller_of(&rev.metadata) {
            Some(r) => {
                if let Some(ds) = self.resolve(ns, r) {
                    self.enqueue(&ds);
                }
            }
            None => {
                let labels = rev.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
                for ds in self.daemon_sets_selecting(ns.unwrap_or(""), labels) {
                    self.enqueue(&ds);
                }
            }
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await;
            finish_sync(&self.queue, key, result, "the daemon set");
        }
    }

    /// The pods the DaemonSet controls, as the cache has them (no adoption).
    fn claimed_pods_unchecked(&self, ds: &DaemonSet) -> Vec<Arc<Pod>> {
        let uid = ds.metadata.uid.as_deref().unwrap_or("");
        self.pod_indexer
            .by_index(CONTROLLER_UID_INDEX, uid)
            .unwrap_or_default()
    }

    /// The DaemonSet's pods after claiming (adopting orphans it selects, releasing its
    /// pods it no longer selects), by node; pods both terminal and being deleted left out.
    async fn claim_pods(
        &self,
        ds: &Arc<DaemonSet>,
        selector: &api::labels::LabelSelector,
    ) -> Result<NodesToPods, String> {
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let candidates: Vec<Arc<Pod>> = owned_and_orphans(&self.pod_indexer, &uid, &ns)
            .into_iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                let terminal = matches!(phase, Some("Failed" | "Succeeded"));
                !(terminal && p.metadata.deletion_timestamp.is_some())
            })
            .collect();
        let owner = Owner {
            meta: &ds.metadata,
            api_version: "apps/v1",
            kind: "DaemonSet",
        };
        let api: Api<DaemonSet> = Api::for_type(self.client.clone(), &ns);
        let name = ds.metadata.name.clone().unwrap_or_default();
        let mut adoption =
            recheck_deletion_timestamp(
                owner,
                async move { api.get(&name).await.map(|d| d.metadata) },
            );
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
        Ok(nodes_to_pods(&pods))
    }

    /// Brings the DaemonSet `key` in line with the nodes (see the module docs).
    async fn sync(&self, key: &str) -> Result<(), String> {
        let (ns, name) = match split_key(key) {
            Ok((Some(ns), name)) => (ns.to_string(), name.to_string()),
            _ => {
                tracing::warn!(key, "ignoring a malformed key");
                return Ok(());
            }
        };
        let Some(ds) = self.ds_lister.get(Some(&ns), &name) else {
            self.expectations.delete(key);
            return Ok(());
        };
        let selector = match label_selector_as_selector(&ds.spec.selector) {
            Ok(s) if !selects_everything(&ds.spec.selector) => s,
            Ok(_) => {
                tracing::warn!(key, "daemon set selects every pod: not managing it");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "daemon set has an invalid selector");
                return Ok(());
            }
        };
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let (current, old) = self.construct_history(&ds, &selector).await?;
        let hash = history::revision_hash(&current).unwrap_or("").to_string();
        let nodes = self.node_indexer.list();
        let shape = DaemonPodShape::new(&ds);
        let placements: Vec<(Arc<Node>, Placement)> = nodes
            .iter()
            .map(|n| (Arc::clone(n), shape.placement(n)))
            .collect();
        if !self.expectations.satisfied(key) {
            let by_node = self.claim_pods(&ds, &selector).await?;
            return self
                .write_status(&ds, &placements, &by_node, &hash, false)
                .await;
        }
        let mut by_node = self.claim_pods(&ds, &selector).await?;
        let result = self
            .update_daemon_set(key, &ds, &placements, &mut by_node, &hash, old)
            .await;
        // The status reflects what the caches show now, after this sync's writes were
        // issued (the next sync, triggered by their events, catches up).
        let by_node = self.claim_pods(&ds, &selector).await?;
        let status = self
            .write_status(&ds, &placements, &by_node, &hash, result.is_ok())
            .await;
        result.and(status)
    }

    /// Manage, then the update strategy, then the history clean-up.
    async fn update_daemon_set(
        &self,
        key: &str,
        ds: &Arc<DaemonSet>,
        placements: &[(Arc<Node>, Placement)],
        by_node: &mut NodesToPods,
        hash: &str,
        old: Vec<Arc<ControllerRevision>>,
    ) -> Result<(), String> {
        self.manage(key, ds, placements, by_node, hash).await?;
        if self.expectations.satisfied(key) && !rolling_update::is_on_delete(ds) {
            self.rolling_update(key, ds, placements, by_node, hash)
                .await?;
        }
        let pods: Vec<Arc<Pod>> = by_node.values().flatten().cloned().collect();
        self.cleanup_history(ds, &pods, old).await
    }

    async fn manage(
        &self,
        key: &str,
        ds: &Arc<DaemonSet>,
        placements: &[(Arc<Node>, Placement)],
        by_node: &NodesToPods,
        hash: &str,
    ) -> Result<(), String> {
        let ctx = ManageContext {
            allows_surge: rolling_update::allows_surge(ds),
            hash,
            generation: template_generation(ds),
            min_ready_seconds: ds.spec.min_ready_seconds.unwrap_or(0),
            now: self.wall.now(),
        };
        let ds_uid = ds.metadata.uid.clone().unwrap_or_default();
        let parent = object_reference(&**ds);
        let mut create_on = Vec::new();
        let mut delete = Vec::new();
        for (node, placement) in placements {
            let node_name = node.metadata.name.clone().unwrap_or_default();
            let actions = pods_should_be_on_node(
                *placement,
                by_node.get(&node_name).map(Vec::as_slice),
                ctx,
                |pod| {
                    let bkey = FailedPodsBackoff::key(&ds_uid, &node_name);
                    if let Some(wait) = self.backoff.remaining(&bkey) {
                        self.queue.add_after(key.to_string(), wait);
                        return false;
                    }
                    self.backoff.next(&bkey);
                    self.recorder.event(
                        &parent,
                        EventType::Warning,
                        FAILED_DAEMON_POD,
                        format!(
                            "Found failed daemon pod {}/{} on node {node_name}, will try to kill it",
                            pod.metadata.namespace.as_deref().unwrap_or(""),
                            pod.metadata.name.as_deref().unwrap_or("")
                        ),
                    );
                    true
                },
            );
            if actions.needs_pod {
                create_on.push(node_name);
            }
            delete.extend(actions.delete);
        }
        let existing: HashSet<&str> = placements
            .iter()
            .filter_map(|(n, _)| n.metadata.name.as_deref())
            .collect();
        delete.extend(unscheduled_pods_without_node(&existing, by_node));
        self.sync_nodes(key, ds, delete, create_on, hash).await
    }

    async fn rolling_update(
        &self,
        key: &str,
        ds: &Arc<DaemonSet>,
        placements: &[(Arc<Node>, Placement)],
        by_node: &mut NodesToPods,
        hash: &str,
    ) -> Result<(), String> {
        let mut desired = 0;
        for (node, placement) in placements {
            if placement.should_run {
                desired += 1;
                by_node
                    .entry(node.metadata.name.clone().unwrap_or_default())
                    .or_default();
            }
        }
        let counts = rolling_update::max_counts(ds, desired)?;
        let plan = rolling_update::plan(
            by_node,
            hash,
            template_generation(ds),
            counts,
            ds.spec.min_ready_seconds.unwrap_or(0),
            self.wall.now(),
        );
        self.sync_nodes(key, ds, plan.delete, plan.create_on, hash)
            .await
    }

    /// Creates a pod on each of `create_on` and deletes `delete`, at most the burst size
    /// each, with expectations for both.
    async fn sync_nodes(
        &self,
        key: &str,
        ds: &Arc<DaemonSet>,
        mut delete: Vec<Arc<Pod>>,
        mut create_on: Vec<String>,
        hash: &str,
    ) -> Result<(), String> {
        create_on.truncate(self.burst_replicas);
        delete.truncate(self.burst_replicas);
        if create_on.is_empty() && delete.is_empty() {
            return Ok(());
        }
        self.expectations
            .expect(key, create_on.len(), delete.iter().map(|p| pod_key(p)));
        let parent = Arc::new(object_reference(&**ds));
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let name = ds.metadata.name.clone().unwrap_or_default();
        let mut first_error: Option<String> = None;

        if !create_on.is_empty() {
            let controller_ref = new_controller_ref(&ds.metadata, "apps/v1", "DaemonSet")
                .ok_or("the daemon set has no uid")?;
            let mut template = ds.spec.template.clone();
            let meta = template.metadata.get_or_insert_with(Default::default);
            let labels = meta.labels.get_or_insert_with(BTreeMap::new);
            if let Some(g) = template_generation(ds) {
                labels.insert(POD_TEMPLATE_GENERATION_LABEL.to_string(), g.to_string());
            }
            if !hash.is_empty() {
                labels.insert(POD_REVISION_LABEL.to_string(), hash.to_string());
            }
            let spec = template.spec.get_or_insert_with(Default::default);
            eligibility::add_daemon_tolerations(spec);
            let mut bodies = Vec::with_capacity(create_on.len());
            for node in &create_on {
                let mut t = template.clone();
                if let Some(spec) = t.spec.as_mut() {
                    spec.affinity = Some(replace_node_name_affinity(spec.affinity.take(), node));
                }
                bodies.push(
                    PodControl::pod_body(&ns, &t, &name, controller_ref.clone())
                        .map_err(|e| e.to_string())?,
                );
            }
            let bodies = Arc::new(parking_lot::Mutex::new(bodies));
            let count = create_on.len();
            let control = self.pod_control.clone();
            let (created, error) = slow_start_batch(count, SLOW_START_INITIAL_BATCH_SIZE, || {
                let body = bodies.lock().pop();
                let (control, parent) = (control.clone(), parent.clone());
                async move {
                    let Some(body) = body else {
                        return Ok(());
                    };
                    match control.create(&body, &parent).await {
                        Ok(_) => Ok(()),
                        Err(e) if e.api().is_some_and(is_namespace_terminating) => Ok(()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            })
            .await;
            let skipped = count - created;
            if skipped > 0 {
                self.expectations.lower(key, skipped as i64, 0);
            }
            if let Some(e) = error {
                first_error = Some(e);
            }
        }

        let mut deletes = tokio::task::JoinSet::new();
        for pod in delete {
            let (control, parent) = (self.pod_control.clone(), parent.clone());
            let pod_ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            deletes.spawn(async move {
                let result = control.delete(&pod_ns, &pod_name, &parent).await;
                (pod_key(&pod), result)
            });
        }
        while let Some(done) = deletes.join_next().await {
            let Ok((pkey, result)) = done else {
                first_error.get_or_insert_with(|| "a pod deletion was interrupted".to_string());
                continue;
            };
            if let Err(e) = result {
                self.expectations.deletion_observed(key, &pkey);
                if !e.is_not_found() {
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Computes and writes the status (unless it says nothing new); on a conflict re-reads
    /// the DaemonSet and tries once more.
    async fn write_status(
        &self,
        ds: &Arc<DaemonSet>,
        placements: &[(Arc<Node>, Placement)],
        by_node: &NodesToPods,
        hash: &str,
        observe: bool,
    ) -> Result<(), String> {
        let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
        let counts = status::counts(
            placements
                .iter()
                .map(|(n, p)| (n.metadata.name.as_deref().unwrap_or(""), *p)),
            by_node,
            hash,
            template_generation(ds),
            min_ready,
            self.wall.now(),
        );
        if min_ready > 0 && counts.ready != counts.available {
            self.queue.add_after(
                object_key(&**ds),
                Duration::from_secs(min_ready.unsigned_abs().into()),
            );
        }
        let new: DaemonSetStatus = status::with_counts(ds, counts, observe);
        if status::unchanged(ds, &new) {
            return Ok(());
        }
        let mut current = (**ds).clone();
        let mut attempt = 0;
        loop {
            let mut s = new.clone();
            // The collision count is the stored one (a snapshot may have just raised it).
            s.collision_count = current.status.as_ref().and_then(|c| c.collision_count);
            if !observe {
                s.observed_generation = current.status.as_ref().and_then(|c| c.observed_generation);
            }
            current.status = Some(s);
            match update_status(&self.client, &current).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if attempt >= STATUS_UPDATE_RETRIES => {
                    return Err(format!("updating the status: {e}"))
                }
                Err(_) => {
                    attempt += 1;
                    let ns = current.metadata.namespace.clone().unwrap_or_default();
                    let name = current.metadata.name.clone().unwrap_or_default();
                    let api: Api<DaemonSet> = Api::for_type(self.client.clone(), &ns);
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
    use serde_json::json;

    #[test]
    fn node_status_changes_are_ignored() {
        let a: Node = serde_json::from_value(json!({"metadata": {"name": "n",
            "resourceVersion": "1", "labels": {"x": "1"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap();
        let mut b = a.clone();
        b.metadata.resource_version = Some("2".into());
        b.status = None;
        assert!(!node_spec_changed(&a, &b));
        b.metadata.labels = Some(BTreeMap::from([("x".into(), "2".into())]));
        assert!(node_spec_changed(&a, &b));
    }
}
