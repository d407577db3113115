//! The scheduler: assigns each pending pod of its `schedulerName` to a node, as
//! kube-scheduler does, talking to the API server only through list-watch and two writes.
//!
//! ```text
//!  informers (one factory)                 scheduling loop (one task)          binder (tasks)
//!  unassigned pods of our name ─► queue ─► pop ─► filter ─► score ─► assume ─► POST binding
//!  assigned pods ──────────────► cache ◄──────────────────────────────┘  ▲        │ ok: Scheduled event
//!  nodes ──────────────────────► cache                                   └─forget─┘ failed: back to queue
//! ```
//!
//! - Three informers: pods with `spec.nodeName=""` and our `spec.schedulerName` (what is
//!   left to schedule, into the [`queue`]), pods bound to a node (what occupies nodes, into
//!   the [`assume_cache`]) — both leave out finished pods — and nodes.
//! - One loop pops a pod, runs the [`algorithm`] ([`filters`], [`scores`], random
//!   tie-breaking) over the cache and *assumes* the pod on the chosen node: from then on it
//!   counts there, so the next decision, a microsecond later, already sees the node fuller.
//! - The binding is sent on a task of its own ([`binder`]); many are in flight at once.
//!   Success emits `Scheduled` ("Successfully assigned ns/name to node"); the watch then
//!   confirms the assumption. A 409 (already bound, or another pod by now) or 404 (gone)
//!   forgets the assumption and the pod; another error forgets the assumption and puts the
//!   pod back in the queue with backoff.
//! - A pod that fits nowhere gets `PodScheduled=False` (`Unschedulable`, with the
//!   [`fit_error`] message) on its status and a `FailedScheduling` event, and waits in the
//!   queue's unschedulable set for an event that may change that.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use controllers::scheduler::{Scheduler, SchedulerConfig};
//! let client = client::rest::Client::try_default()?;
//! // Runs until the future is dropped (e.g. when leadership is lost, or on Ctrl-C).
//! tokio::select! {
//!     () = Scheduler::new(client, SchedulerConfig::default()).run() => {}
//!     _ = tokio::signal::ctrl_c() => {}
//! }
//! # Ok(())
//! # }
//! ```

pub mod algorithm;
pub mod assume_cache;
pub mod binder;
pub mod events;
pub mod filters;
pub mod fit_error;
pub mod node_info;
pub mod pod_info;
pub mod pod_status;
pub use api::quantity;
pub mod queue;
pub mod scores;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use client::cache::ConfigureReflector as _;
use client::cache::{
    DeleteEvent, FactoryError, ListerWatcher, Registration, ResourceEventHandlerFuncs,
    RestListerWatcher, SharedIndexInformer, SharedInformerFactory,
};
use client::clock::{RealClock, SharedClock};
use client::rest::resource::{NODES, PODS};
use client::rest::Client;
use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

pub use crate::event_recorder::EventType;
use algorithm::{Algorithm, TieBreaker};
use assume_cache::SchedulerCache;
use binder::{PodTarget, PodWriter, RestPodWriter, WriteError};
use events::{truncate_message, EventSink};
use filters::{Plugin, PluginSet};
use pod_info::PodInfo;
use queue::{QueueCounts, QueueTiming, SchedulingQueue};

/// The scheduler name pods get when they name none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// The selection of pods that occupy nodes: bound, and not finished.
pub const ASSIGNED_PODS_SELECTOR: &str =
    "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// The selection of pods `scheduler_name` has to place: not bound, naming it, not finished.
pub fn unassigned_pods_selector(scheduler_name: &str) -> String {
    format!(
        "spec.nodeName=,spec.schedulerName={scheduler_name},\
         status.phase!=Succeeded,status.phase!=Failed"
    )
}

/// How the scheduler behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The `spec.schedulerName` of the pods to schedule; also the events' source.
    pub scheduler_name: String,
    /// How many bindings may be in flight at once; the loop waits for a slot beyond that.
    pub max_in_flight_bindings: usize,
    /// How long an assumed pod whose binding succeeded stays counted if the watch never
    /// confirms it (`None`: until confirmed or deleted).
    pub assumed_pod_ttl: Option<Duration>,
    /// Backoff and unschedulable-set timing.
    pub queue: QueueTiming,
    /// Seed of the tie-breaking among equally good nodes (`None`: random).
    pub seed: Option<u64>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            max_in_flight_bindings: 256,
            assumed_pod_ttl: Some(Duration::from_secs(30)),
            queue: QueueTiming::default(),
            seed: None,
        }
    }
}

/// The three informers the scheduler reads.
#[derive(Clone)]
pub struct SchedulerInformers {
    /// Pods still to be placed by this scheduler ([`unassigned_pods_selector`]).
    pub unassigned_pods: SharedIndexInformer<Pod>,
    /// Pods bound to nodes ([`ASSIGNED_PODS_SELECTOR`]).
    pub assigned_pods: SharedIndexInformer<Pod>,
    /// Nodes.
    pub nodes: SharedIndexInformer<Node>,
}

impl SchedulerInformers {
    /// The informers from `factory` (which must have a REST client): the node informer is
    /// the factory's shared `Node` informer; the two pod informers are the scheduler's own
    /// selections, registered under names of their own.
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory has no client.
    pub fn from_factory(
        factory: &SharedInformerFactory,
        scheduler_name: &str,
    ) -> Result<SchedulerInformers, FactoryError> {
        let client = factory.client().cloned().ok_or(FactoryError::NoClient)?;
        Ok(Self::from_factory_with(factory, &client, scheduler_name))
    }

    /// [`SchedulerInformers::from_factory`], the pod informers listing through `client`.
    fn from_factory_with(
        factory: &SharedInformerFactory,
        client: &Client,
        scheduler_name: &str,
    ) -> SchedulerInformers {
        let pods = |name: String, selector: String| {
            let client = client.clone();
            factory.informer_for::<Pod, _>(&name, move |options| {
                // Ours is ANDed onto any field selector the factory already applies.
                let selection = options.selection.clone().and_fields(&selector);
                Arc::new(
                    RestListerWatcher::<Pod>::new(client, PODS)
                        .with_options(options)
                        .selection(selection),
                ) as Arc<dyn ListerWatcher<Pod>>
            })
        };
        let nodes = factory.informer_for::<Node, _>("nodes/v1 as Node", |options| {
            Arc::new(RestListerWatcher::<Node>::new(client.clone(), NODES).with_options(options))
                as Arc<dyn ListerWatcher<Node>>
        });
        SchedulerInformers {
            unassigned_pods: pods(
                format!("pods/v1 as Pod, unassigned for {scheduler_name}"),
                unassigned_pods_selector(scheduler_name),
            ),
            assigned_pods: pods(
                "pods/v1 as Pod, assigned".to_string(),
                ASSIGNED_PODS_SELECTOR.to_string(),
            ),
            nodes,
        }
    }

    /// Informers over the given sources (the selection is the sources' business), on
    /// `clock`. For tests and for embedding over other sources.
    pub fn from_sources(
        unassigned_pods: Arc<dyn ListerWatcher<Pod>>,
        assigned_pods: Arc<dyn ListerWatcher<Pod>>,
        nodes: Arc<dyn ListerWatcher<Node>>,
        clock: SharedClock,
    ) -> SchedulerInformers {
        SchedulerInformers {
            unassigned_pods: SharedIndexInformer::builder(unassigned_pods)
                .name("unassigned pods")
                .clock(clock.clone())
                .build(),
            assigned_pods: SharedIndexInformer::builder(assigned_pods)
                .name("assigned pods")
                .clock(clock.clone())
                .build(),
            nodes: SharedIndexInformer::builder(nodes)
                .name("nodes")
                .clock(clock)
                .build(),
        }
    }
}

/// Counters of what the scheduler did.
#[derive(Debug, Default)]
struct Counters {
    attempts: AtomicU64,
    bound: AtomicU64,
    unschedulable: AtomicU64,
    binding_failures: AtomicU64,
}

/// A snapshot of the scheduler's counters and queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Scheduling attempts (pods popped and decided on).
    pub attempts: u64,
    /// Bindings the server accepted.
    pub bound: u64,
    /// Attempts that found no node.
    pub unschedulable: u64,
    /// Bindings that failed.
    pub binding_failures: u64,
    /// Pods counted in the cache (assumed or confirmed).
    pub cached_pods: usize,
    /// Of those, assumed and not yet confirmed by the watch.
    pub assumed_pods: usize,
    /// Nodes in the cache.
    pub nodes: usize,
    /// The queue.
    pub queue: QueueCounts,
}

/// What the scheduling loop, the binding tasks and the informer handlers share.
struct Shared {
    scheduler_name: String,
    cache: Mutex<SchedulerCache>,
    queue: SchedulingQueue,
    writer: Arc<dyn PodWriter>,
    events: Arc<dyn EventSink>,
    clock: SharedClock,
    counters: Counters,
}

/// A cheap handle to look at a scheduler while it runs.
#[derive(Clone)]
pub struct SchedulerHandle {
    shared: Arc<Shared>,
}

impl SchedulerHandle {
    /// The counters, cache and queue sizes now.
    pub fn stats(&self) -> SchedulerStats {
        let c = &self.shared.counters;
        let cache = self.shared.cache.lock();
        SchedulerStats {
            attempts: c.attempts.load(Ordering::Relaxed),
            bound: c.bound.load(Ordering::Relaxed),
            unschedulable: c.unschedulable.load(Ordering::Relaxed),
            binding_failures: c.binding_failures.load(Ordering::Relaxed),
            cached_pods: cache.pod_count(),
            assumed_pods: cache.assumed_count(),
            nodes: cache.node_count(),
            queue: self.shared.queue.counts(),
        }
    }

    /// Whether the pod with this UID is assumed (decided on, not yet confirmed by the watch).
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.shared.cache.lock().is_assumed(uid)
    }

    /// The node the pod with this UID is counted on, assumed or confirmed.
    pub fn node_of_pod(&self, uid: &str) -> Option<String> {
        self.shared
            .cache
            .lock()
            .node_of_pod(uid)
            .map(str::to_string)
    }
}

/// How the scheduler's informers are started and let go of.
enum InformerOwnership {
    /// Started by the scheduler and stopped when it ends.
    Own,
    /// From a factory others share: started through it; only our handlers are removed.
    Shared(SharedInformerFactory),
}

/// The scheduler. Build it, then [`Scheduler::run`] it.
pub struct Scheduler {
    informers: SchedulerInformers,
    ownership: InformerOwnership,
    shared: Arc<Shared>,
    config: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler listing and watching through `client` with informers of its own, writing
    /// bindings and statuses through it and reporting events as `scheduler_name`.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the event recorder's task is spawned here).
    pub fn new(client: Client, config: SchedulerConfig) -> Scheduler {
        // Like kube-scheduler, the informers hold no field-ownership records.
        let factory = SharedInformerFactory::builder()
            .client(client.clone())
            .strip_managed_fields(true)
            .build();
        let informers =
            SchedulerInformers::from_factory_with(&factory, &client, &config.scheduler_name);
        let events = crate::event_recorder::EventRecorder::new(
            client.clone(),
            config.scheduler_name.clone(),
            None,
        );
        Scheduler::from_parts(
            informers,
            Arc::new(RestPodWriter::new(client)),
            Arc::new(events),
            RealClock::shared(),
            config,
        )
    }

    /// A scheduler whose informers come from `factory` (shared with other components in the
    /// process; it must have a REST client). `run` starts the factory's informers that are
    /// not started yet and, when it ends, removes its handlers but stops no informer.
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory has no client.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the event recorder's task is spawned here).
    pub fn with_factory(
        factory: &SharedInformerFactory,
        config: SchedulerConfig,
    ) -> Result<Scheduler, FactoryError> {
        let client = factory.client().cloned().ok_or(FactoryError::NoClient)?;
        let informers = SchedulerInformers::from_factory(factory, &config.scheduler_name)?;
        let events = crate::event_recorder::EventRecorder::new(
            client.clone(),
            config.scheduler_name.clone(),
            None,
        );
        let mut s = Scheduler::from_parts(
            informers,
            Arc::new(RestPodWriter::new(client)),
            Arc::new(events),
            RealClock::shared(),
            config,
        );
        s.ownership = InformerOwnership::Shared(factory.clone());
        Ok(s)
    }

    /// A scheduler over the given informers, writer, event sink and clock. `run` starts the
    /// informers and stops them when it ends.
    pub fn from_parts(
        informers: SchedulerInformers,
        writer: Arc<dyn PodWriter>,
        events: Arc<dyn EventSink>,
        clock: SharedClock,
        config: SchedulerConfig,
    ) -> Scheduler {
        let shared = Arc::new(Shared {
            scheduler_name: config.scheduler_name.clone(),
            cache: Mutex::new(SchedulerCache::new(config.assumed_pod_ttl)),
            queue: SchedulingQueue::new(clock.clone(), config.queue),
            writer,
            events,
            clock,
            counters: Counters::default(),
        });
        Scheduler {
            informers,
            ownership: InformerOwnership::Own,
            shared,
            config,
        }
    }

    /// A handle to watch the scheduler while it runs.
    pub fn handle(&self) -> SchedulerHandle {
        SchedulerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs the scheduler: starts the informers, waits until the caches hold the initial
    /// state, then schedules until the returned future is dropped. Dropping it stops the
    /// loop, the binding tasks (bindings already sent may still land) and the informers (or,
    /// for a shared factory, removes the handlers).
    pub async fn run(self) {
        let Scheduler {
            informers,
            ownership,
            shared,
            config,
        } = self;
        let registrations = register_handlers(&shared, &informers);
        let _guard = RunGuard {
            shared: Arc::clone(&shared),
            informers: informers.clone(),
            registrations: registrations.clone(),
            stop_informers: matches!(ownership, InformerOwnership::Own),
        };
        match &ownership {
            InformerOwnership::Own => {
                informers.nodes.start();
                informers.assigned_pods.start();
                informers.unassigned_pods.start();
            }
            InformerOwnership::Shared(factory) => factory.start(),
        }
        let [nodes, assigned, unassigned] = &registrations;
        // Decide only once the nodes and bound pods are all counted.
        client::cache::wait_for_cache_sync(&[nodes, assigned, unassigned], Duration::MAX).await;
        tracing::info!(scheduler = %config.scheduler_name, "caches synced; scheduling");

        let mut tasks = JoinSet::new();
        tasks.spawn(expire_assumed_pods(Arc::clone(&shared)));
        let slots = Arc::new(Semaphore::new(config.max_in_flight_bindings.max(1)));
        let tie_breaker = config
            .seed
            .map_or_else(TieBreaker::from_entropy, TieBreaker::new);
        let mut algorithm = Algorithm::new(tie_breaker);
        let mut since_yield = 0u32;
        while let Some(pod) = shared.queue.pop().await {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                break;
            };
            schedule_one(&shared, &mut algorithm, pod, slot, &mut tasks);
            while tasks.try_join_next().is_some() {}
            // The loop rarely waits while pods are pending: let other tasks run.
            since_yield += 1;
            if since_yield >= 64 {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Undoes what `run` set up, however it ends.
struct RunGuard {
    shared: Arc<Shared>,
    informers: SchedulerInformers,
    registrations: [Registration; 3],
    stop_informers: bool,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.shared.queue.close();
        let [nodes, assigned, unassigned] = &self.registrations;
        if self.stop_informers {
            self.informers.unassigned_pods.stop();
            self.informers.assigned_pods.stop();
            self.informers.nodes.stop();
        } else {
            self.informers.nodes.remove_event_handler(nodes);
            self.informers.assigned_pods.remove_event_handler(assigned);
            self.informers
                .unassigned_pods
                .remove_event_handler(unassigned);
        }
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether `pod` is for this scheduler to place (the informer's selection says so, but a
/// source without field selectors would not).
fn is_ours(shared: &Shared, pod: &Pod) -> bool {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_SCHEDULER_NAME);
    name == shared.scheduler_name && node_name(pod).is_none() && !is_terminal(pod)
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn pod_uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| pod_key(pod))
}

/// The plugins whose verdict freed room may turn.
fn room_freed() -> PluginSet {
    PluginSet::EMPTY
        .with(Plugin::NodeResourcesFit)
        .with(Plugin::NodePorts)
}

fn register_handlers(shared: &Arc<Shared>, informers: &SchedulerInformers) -> [Registration; 3] {
    let on_pending = {
        let (s1, s2, s3) = (Arc::clone(shared), Arc::clone(shared), Arc::clone(shared));
        ResourceEventHandlerFuncs::new()
            .on_add(move |pod: &Arc<Pod>, _| {
                if !is_ours(&s1, pod) {
                    return;
                }
                let info = Arc::new(PodInfo::new(Arc::clone(pod)));
                if !s1.cache.lock().contains_pod(&info.uid) {
                    s1.queue.add(info);
                }
            })
            .on_update(move |_old: &Arc<Pod>, new: &Arc<Pod>| {
                if !is_ours(&s2, new) {
                    s2.queue.delete(&pod_key(new));
                    return;
                }
                // Decided on and being bound: the binding settles it.
                if s2.cache.lock().contains_pod(&pod_uid(new)) {
                    return;
                }
                s2.queue.update(Arc::new(PodInfo::new(Arc::clone(new))));
            })
            .on_delete(move |d: &DeleteEvent<Pod>| {
                s3.queue.delete(&pod_key(d.object()));
            })
    };
    let on_bound = {
        let (s1, s2, s3) = (Arc::clone(shared), Arc::clone(shared), Arc::clone(shared));
        ResourceEventHandlerFuncs::new()
            .on_add(move |pod: &Arc<Pod>, _| {
                if let (Some(node), false) = (node_name(pod), is_terminal(pod)) {
                    let info = Arc::new(PodInfo::new(Arc::clone(pod)));
                    s1.cache.lock().add_pod(info, node);
                }
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                let Some(node) = node_name(new) else {
                    return;
                };
                if is_terminal(new) {
                    if s2.cache.lock().remove_pod(&pod_uid(new)) {
                        s2.queue.move_all(room_freed());
                    }
                    return;
                }
                let unchanged = old.spec == new.spec
                    && old.metadata.uid == new.metadata.uid
                    && old.metadata.owner_references == new.metadata.owner_references
                    && s2.cache.lock().contains_pod(&pod_uid(new));
                if !unchanged {
                    let info = Arc::new(PodInfo::new(Arc::clone(new)));
                    s2.cache.lock().update_pod(info, node);
                    // Requests may have shrunk.
                    s2.queue.move_all(room_freed());
                }
            })
            .on_delete(move |d: &DeleteEvent<Pod>| {
                if s3.cache.lock().remove_pod(&pod_uid(d.object())) {
                    s3.queue.move_all(room_freed());
                }
            })
    };
    let on_node = {
        let (s1, s2, s3) = (Arc::clone(shared), Arc::clone(shared), Arc::clone(shared));
        ResourceEventHandlerFuncs::new()
            .on_add(move |node: &Arc<Node>, _| {
                let changed = s1.cache.lock().add_or_update_node(Arc::clone(node));
                s1.queue.move_all(changed);
            })
            .on_update(move |_old: &Arc<Node>, new: &Arc<Node>| {
                let changed = s2.cache.lock().add_or_update_node(Arc::clone(new));
                s2.queue.move_all(changed);
            })
            .on_delete(move |d: &DeleteEvent<Node>| {
                let name = d.object().metadata.name.as_deref().unwrap_or("");
                s3.cache.lock().remove_node(name);
            })
    };
    [
        informers.nodes.add_event_handler(on_node),
        informers.assigned_pods.add_event_handler(on_bound),
        informers.unassigned_pods.add_event_handler(on_pending),
    ]
}

/// One scheduling cycle: decide, assume, and hand the binding to a task (or park the pod).
fn schedule_one(
    shared: &Arc<Shared>,
    algorithm: &mut Algorithm,
    pod: queue::QueuedPod,
    slot: OwnedSemaphorePermit,
    tasks: &mut JoinSet<()>,
) {
    let info = Arc::clone(&pod.info);
    if info.pod.metadata.deletion_timestamp.is_some() {
        shared.queue.done(&pod);
        return;
    }
    shared.counters.attempts.fetch_add(1, Ordering::Relaxed);
    let outcome = {
        let mut cache = shared.cache.lock();
        if cache.contains_pod(&info.uid) {
            None
        } else {
            let decision = algorithm.schedule(&cache, &info);
            if let Ok(d) = &decision {
                // Cannot fail: the pod is not counted (checked under this same lock).
                let _ = cache.assume_pod(Arc::clone(&info), &d.node);
            }
            Some(decision)
        }
    };
    match outcome {
        None => shared.queue.done(&pod),
        Some(Ok(decision)) => {
            tracing::debug!(pod = %info.key, node = %decision.node,
                feasible = decision.feasible_nodes, score = decision.score, "assumed");
            tasks.spawn(bind(Arc::clone(shared), pod, decision.node, slot));
        }
        Some(Err(fit)) => {
            drop(slot);
            shared
                .counters
                .unschedulable
                .fetch_add(1, Ordering::Relaxed);
            if shared.queue.requeue_unschedulable(&pod, fit.plugins) {
                let message = fit.to_string();
                tracing::debug!(pod = %info.key, %message, "unschedulable");
                let shared = Arc::clone(shared);
                tasks.spawn(async move {
                    report_failure(
                        &shared,
                        &info.pod,
                        pod_status::REASON_UNSCHEDULABLE,
                        &message,
                    )
                    .await;
                });
            }
        }
    }
}

fn target(info: &PodInfo) -> PodTarget {
    PodTarget {
        namespace: info.namespace().to_string(),
        name: info.name().to_string(),
        uid: info.pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Sends the binding of an assumed pod and settles the outcome.
async fn bind(
    shared: Arc<Shared>,
    pod: queue::QueuedPod,
    node: Arc<str>,
    _slot: OwnedSemaphorePermit,
) {
    let info = &pod.info;
    let result = shared.writer.bind(&target(info), &node).await;
    match result {
        Ok(()) => {
            shared
                .cache
                .lock()
                .finish_binding(&info.uid, shared.clock.now());
            shared.counters.bound.fetch_add(1, Ordering::Relaxed);
            shared.queue.done(&pod);
            shared.events.pod_event(
                &info.pod,
                EventType::Normal,
                "Scheduled",
                format!(
                    "Successfully assigned {}/{} to {node}",
                    info.namespace(),
                    info.name()
                ),
            );
        }
        Err(e) => {
            shared
                .counters
                .binding_failures
                .fetch_add(1, Ordering::Relaxed);
            if shared.cache.lock().forget_pod(&info.uid) {
                shared.queue.move_all(room_freed());
            }
            match e {
                WriteError::Conflict(_) | WriteError::NotFound(_) => {
                    // Bound already (the watch will say where) or gone: nothing to retry.
                    tracing::info!(pod = %info.key, %node, error = %e, "binding refused");
                    shared.queue.done(&pod);
                }
                WriteError::Other(message) => {
                    tracing::warn!(pod = %info.key, %node, error = %message, "binding failed");
                    if shared.queue.requeue_backoff(&pod) {
                        let message = format!("binding rejected: {message}");
                        report_failure(
                            &shared,
                            &info.pod,
                            pod_status::REASON_SCHEDULER_ERROR,
                            &message,
                        )
                        .await;
                    }
                }
            }
        }
    }
}

/// A `FailedScheduling` event, and `PodScheduled=False` on the pod's status if it does not
/// say so already.
async fn report_failure(shared: &Shared, pod: &Pod, reason: &str, message: &str) {
    let message = truncate_message(message);
    shared
        .events
        .pod_event(pod, EventType::Warning, "FailedScheduling", message.clone());
    let Some(patch) =
        pod_status::unschedulable_patch(pod, reason, &message, &api::time::now_rfc3339())
    else {
        return;
    };
    let target = PodTarget {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    };
    if let Err(e) = shared.writer.patch_status(&target, patch).await {
        tracing::info!(pod = %pod_key(pod), error = %e, "could not update the PodScheduled condition");
    }
}

/// Drops, every second, the assumptions whose binding succeeded long ago without the watch
/// confirming it.
async fn expire_assumed_pods(shared: Arc<Shared>) {
    loop {
        shared.clock.sleep(Duration::from_secs(1)).await;
        let expired = shared.cache.lock().cleanup_expired(shared.clock.now());
        if !expired.is_empty() {
            tracing::warn!(pods = ?expired, "assumed pods expired before the watch confirmed them");
            shared.queue.move_all(room_freed());
        }
    }
}

#[cfg(test)]
mod tests;
