//! The node lifecycle controller: notices nodes whose kubelet went silent, marks them, and
//! evicts their pods — Kubernetes' `node-lifecycle-controller` together with the
//! `taint-eviction-controller`.
//!
//! It watches Nodes, the node Leases in `kube-node-lease` and Pods, and every
//! `node_monitor_period` (5 s) checks each node's health (see `health`): a node whose
//! `Ready` heartbeat and Lease have both not moved for `node_monitor_grace_period` (50 s,
//! Kubernetes 1.32's default; 60 s for a node that never reported) gets its `Ready`,
//! `MemoryPressure`, `DiskPressure` and `PIDPressure` conditions set to `Unknown`
//! (`NodeStatusUnknown`, "Kubelet stopped posting node status."), a `NodeNotReady` event,
//! and its pods' `Ready` condition set to `False`.
//!
//! Taints follow the conditions:
//! - `NoSchedule`: on every change of a node, the taints its conditions call for
//!   (`node.kubernetes.io/unreachable` for `Ready=Unknown`, `…/not-ready` for `False`,
//!   the pressure taints, `…/unschedulable`) are added and the stale ones removed;
//! - `NoExecute`: a node observed not ready is queued for the `unreachable` (or
//!   `not-ready`) `NoExecute` taint, added at a pace set per zone (see `zones`); a node
//!   observed `Ready` again loses both at once.
//!
//! Pods on a node with `NoExecute` taints are evicted as `eviction` decides (at once
//! without a matching toleration, after the shortest `tolerationSeconds`, or never): the
//! pod gets a `DisruptionTarget` condition (`DeletionByTaintManager`) and is deleted with
//! its default grace period; `TaintManagerEviction` events tell of it.

mod eviction;
mod health;
pub mod taints;
mod zones;

use crate::node_agent::wall_clock::{time, WallClock};
use crate::node_agent::NODE_LEASE_NAMESPACE;
use crate::node_agent::{EventRecorder, EventType};
use client::cache::ConfigureReflector as _;
use client::cache::{
    object_key, DeleteEvent, Indexers, ResourceEventHandlerFuncs, RestListerWatcher,
    SharedIndexInformer,
};
use client::clock::{RealClock, SharedClock};
use client::rest::resource::{LEASES, NODES, PODS};
use client::rest::{Client, DeleteParams, Error};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use eviction::{no_execute, Effect, Evictions};
use health::{check_node_health, NodeHealth};
use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, Taint};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taints::{
    condition_taint, is_controller_no_schedule_key, same_taint, taint, NO_EXECUTE, NO_SCHEDULE,
    TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE, TAINT_NODE_UNSCHEDULABLE,
};
use tokio::task::JoinSet;
use zones::{compute_zone_state, zone_key, TaintQueue, ZoneState};

/// How often the node lifecycle controller checks node health by default.
pub const DEFAULT_NODE_MONITOR_PERIOD: Duration = Duration::from_secs(5);
/// How long a node may be silent before it is marked `Unknown` (Kubernetes 1.32).
pub const DEFAULT_NODE_MONITOR_GRACE_PERIOD: Duration = Duration::from_secs(50);
/// The grace period of a node that never reported its status.
pub const DEFAULT_NODE_STARTUP_GRACE_PERIOD: Duration = Duration::from_secs(60);

/// The pods index of the controller's pod informer: pods by `spec.nodeName`.
const NODE_NAME_INDEX: &str = "spec.nodeName";
/// Attempts to taint or untaint a node before giving up until the next pass.
const TAINT_TRIES: usize = 5;
/// Attempts to evict a pod.
const EVICTION_TRIES: usize = 5;
/// The pause before a node whose tainting failed is tried again.
const TAINT_RETRY: Duration = Duration::from_millis(50);
/// Pod evictions in flight at once.
const EVICTIONS_IN_FLIGHT: usize = 16;
/// Workers of the node queue (taint passes), as kube-controller-manager's eight: a thousand
/// new nodes lose their not-ready taint in one round trip per eight.
const NODE_WORKERS: usize = 8;
/// The label that keeps a node out of the zone disruption counts.
const EXCLUDE_DISRUPTION_LABEL: &str = "node.kubernetes.io/exclude-disruption";

/// Configuration of the [`NodeLifecycleController`] (Kubernetes' flags and defaults).
#[derive(Debug, Clone)]
pub struct NodeLifecycleConfig {
    /// How often node health is checked (`--node-monitor-period`).
    pub node_monitor_period: Duration,
    /// How long a node may be silent before it is `Unknown` (`--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// The same for a node that never reported (`--node-startup-grace-period`).
    pub node_startup_grace_period: Duration,
    /// Nodes per second that may get the `NoExecute` taint in a healthy zone
    /// (`--node-eviction-rate`).
    pub eviction_limiter_qps: f32,
    /// The same in a large, partially disrupted zone (`--secondary-node-eviction-rate`).
    pub secondary_eviction_limiter_qps: f32,
    /// Zones with more nodes than this are large (`--large-cluster-size-threshold`).
    pub large_cluster_threshold: usize,
    /// The share of not-ready nodes that makes a zone partially disrupted
    /// (`--unhealthy-zone-threshold`).
    pub unhealthy_zone_threshold: f32,
    /// The clock every timer runs on.
    pub clock: SharedClock,
    /// The client the informers list and watch with, when it is not the controller's own
    /// (kube-controller-manager's informers use its own identity, the controller's writes
    /// that of the `node-controller` ServiceAccount, whose role cannot watch Leases).
    pub informer_client: Option<Client>,
}

impl Default for NodeLifecycleConfig {
    fn default() -> Self {
        NodeLifecycleConfig {
            node_monitor_period: DEFAULT_NODE_MONITOR_PERIOD,
            node_monitor_grace_period: DEFAULT_NODE_MONITOR_GRACE_PERIOD,
            node_startup_grace_period: DEFAULT_NODE_STARTUP_GRACE_PERIOD,
            eviction_limiter_qps: 0.1,
            secondary_eviction_limiter_qps: 0.01,
            large_cluster_threshold: 50,
            unhealthy_zone_threshold: 0.55,
            clock: RealClock::shared(),
            informer_client: None,
        }
    }
}

/// The node lifecycle controller (see the [module docs](self)).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use controllers::node_lifecycle::{NodeLifecycleConfig, NodeLifecycleController};
/// let client = client::rest::Client::try_default()?;
/// NodeLifecycleController::new(client, NodeLifecycleConfig::default()).run().await;
/// # Ok(())
/// # }
/// ```
#[must_use]
#[derive(Debug)]
pub struct NodeLifecycleController {
    client: Client,
    config: NodeLifecycleConfig,
}

impl NodeLifecycleController {
    /// A controller working through `client`.
    pub fn new(client: Client, config: NodeLifecycleConfig) -> NodeLifecycleController {
        NodeLifecycleController { client, config }
    }

    /// Runs until the future is dropped. API failures are retried; nothing ends it.
    pub async fn run(self) {
        self.run_until(std::future::pending()).await;
    }

    /// Runs until `shutdown` completes (or the future is dropped); then every task and
    /// watch of the controller stops.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let ctl = Controller::new(self.client, self.config);
        let running = Running {
            ctl: Arc::clone(&ctl),
            tasks: JoinSet::new(),
        };
        tokio::select! {
            () = ctl.run(running) => {}
            () = shutdown => {}
        }
    }
}

/// An item of the taint eviction queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum EvictionItem {
    /// A node's `NoExecute` taints may have changed.
    Node(String),
    /// A pod (`namespace/name`) was added, moved, changed its tolerations or left.
    Pod(String),
    /// A pod's eviction timer went off.
    Fire(String),
}

/// What the health monitor remembers between passes.
#[derive(Default)]
struct MonitorState {
    /// Nodes seen, with their uid.
    known: HashMap<String, String>,
    health: HashMap<String, NodeHealth>,
    zone_states: HashMap<String, ZoneState>,
    tainters: HashMap<String, TaintQueue>,
    /// Nodes whose pods could not all be marked not ready.
    retry_pods: HashSet<String>,
}

struct Controller {
    client: Client,
    config: NodeLifecycleConfig,
    wall: WallClock,
    nodes: SharedIndexInformer<Node>,
    leases: SharedIndexInformer<Lease>,
    pods: SharedIndexInformer<Pod>,
    recorder: EventRecorder,
    eviction_recorder: EventRecorder,
    monitor: tokio::sync::Mutex<MonitorState>,
    evictions: Mutex<Evictions>,
    node_queue: RateLimitingQueue<String>,
    eviction_queue: RateLimitingQueue<EvictionItem>,
    eviction_permits: tokio::sync::Semaphore,
}

/// Owns the controller's tasks and watches; dropping it stops them all.
struct Running {
    ctl: Arc<Controller>,
    tasks: JoinSet<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.tasks.abort_all();
        self.ctl.node_queue.shut_down();
        self.ctl.eviction_queue.shut_down();
        self.ctl.nodes.stop();
        self.ctl.leases.stop();
        self.ctl.pods.stop();
    }
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
}

fn has_taint(node: &Node, t: &Taint) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|x| same_taint(x, t)))
}

fn pod_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

fn node_reference(name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..Default::default()
    }
}

impl Controller {
    fn new(client: Client, config: NodeLifecycleConfig) -> Arc<Controller> {
        let clock = config.clock.clone();
        let reader = config
            .informer_client
            .clone()
            .unwrap_or_else(|| client.clone());
        let nodes = SharedIndexInformer::builder(Arc::new(
            RestListerWatcher::<Node>::new(reader.clone(), NODES).strip_managed_fields(true),
        ))
        .name("nodes (node lifecycle)")
        .clock(clock.clone())
        .build();
        let leases = SharedIndexInformer::builder(Arc::new(
            RestListerWatcher::<Lease>::new(reader.clone(), LEASES)
                .namespace(NODE_LEASE_NAMESPACE)
                .strip_managed_fields(true),
        ))
        .name("node leases (node lifecycle)")
        .clock(clock.clone())
        .build();
        let mut indexers: Indexers<Pod> = Indexers::new();
        indexers.insert(
            NODE_NAME_INDEX.to_string(),
            Arc::new(|p: &Pod| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .filter(|n| !n.is_empty())
                    .into_iter()
                    .collect()
            }),
        );
        let pods = SharedIndexInformer::builder(Arc::new(
            RestListerWatcher::<Pod>::new(reader.clone(), PODS).strip_managed_fields(true),
        ))
        .name("pods (node lifecycle)")
        .clock(clock.clone())
        .indexers(indexers)
        .build();
        let queue_config = || QueueConfig::new().clock(clock.clone());
        Arc::new(Controller {
            recorder: EventRecorder::new(client.clone(), "node-controller", None),
            eviction_recorder: EventRecorder::new(
                client.clone(),
                "taint-eviction-controller",
                None,
            ),
            wall: WallClock::new(clock.clone()),
            client,
            nodes,
            leases,
            pods,
            monitor: tokio::sync::Mutex::new(MonitorState::default()),
            evictions: Mutex::new(Evictions::default()),
            node_queue: RateLimitingQueue::with_default_limiter(queue_config()),
            eviction_queue: RateLimitingQueue::with_default_limiter(queue_config()),
            eviction_permits: tokio::sync::Semaphore::new(EVICTIONS_IN_FLIGHT),
            config,
        })
    }

    async fn run(self: &Arc<Self>, mut running: Running) {
        self.add_handlers();
        self.nodes.start();
        self.leases.start();
        self.pods.start();
        let (nodes, leases, pods) = (self.nodes.clone(), self.leases.clone(), self.pods.clone());
        let synced: [&dyn client::cache::HasSynced; 3] = [&nodes, &leases, &pods];
        client::cache::wait_for_cache_sync(&synced, Duration::MAX).await;
        for _ in 0..NODE_WORKERS {
            let ctl = Arc::clone(self);
            running.tasks.spawn(async move { ctl.node_worker().await });
        }
        let ctl = Arc::clone(self);
        running
            .tasks
            .spawn(async move { ctl.eviction_worker().await });
        self.control_loop().await;
    }

    fn add_handlers(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let node_changed = move |old: Option<&Node>, new: Option<&Node>| {
            let Some(ctl) = me.upgrade() else { return };
            let Some(name) = new.or(old).and_then(|n| n.metadata.name.clone()) else {
                return;
            };
            if new.is_some() {
                ctl.node_queue.add(name.clone());
            }
            let taints = |n: Option<&Node>| {
                no_execute(
                    n.and_then(|n| n.spec.as_ref())
                        .and_then(|s| s.taints.as_ref()),
                )
            };
            if old.is_none() || new.is_none() || taints(old) != taints(new) {
                ctl.eviction_queue.add(EvictionItem::Node(name));
            }
        };
        let (a, u, d) = (node_changed.clone(), node_changed.clone(), node_changed);
        self.nodes.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |n: &Arc<Node>, _| a(None, Some(n)))
                .on_update(move |o: &Arc<Node>, n: &Arc<Node>| u(Some(o), Some(n)))
                .on_delete(move |e: &DeleteEvent<Node>| d(Some(e.object()), None)),
        );
        let me = Arc::downgrade(self);
        let pod_changed = move |old: Option<&Pod>, new: Option<&Pod>| {
            let Some(ctl) = me.upgrade() else { return };
            let placement = |p: Option<&Pod>| {
                p.and_then(|p| p.spec.as_ref())
                    .map(|s| (s.node_name.clone(), s.tolerations.clone()))
            };
            if let (Some(_), Some(_)) = (old, new) {
                if placement(old) == placement(new) {
                    return;
                }
            }
            if let Some(p) = new.or(old) {
                ctl.eviction_queue.add(EvictionItem::Pod(object_key(p)));
            }
        };
        let (a, u, d) = (pod_changed.clone(), pod_changed.clone(), pod_changed);
        self.pods.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |p: &Arc<Pod>, _| a(None, Some(p)))
                .on_update(move |o: &Arc<Pod>, n: &Arc<Pod>| u(Some(o), Some(n)))
                .on_delete(move |e: &DeleteEvent<Pod>| d(Some(e.object()), None)),
        );
    }

    /// Health checks every monitor period, and the `NoExecute` tainting in between.
    async fn control_loop(self: &Arc<Self>) {
        let clock = self.config.clock.clone();
        let mut next_monitor = clock.now();
        loop {
            let now = clock.now();
            if now >= next_monitor {
                self.monitor_node_health().await;
                next_monitor += self.config.node_monitor_period;
                if next_monitor <= now {
                    next_monitor = now + self.config.node_monitor_period;
                }
            }
            let next_taint = self.no_execute_tainting_pass().await;
            let wake = next_taint.map_or(next_monitor, |t| t.min(next_monitor));
            clock.sleep_until(wake).await;
        }
    }

    /// One health check of every node (see the module docs).
    async fn monitor_node_health(self: &Arc<Self>) {
        let now = self.config.clock.now();
        let wall_now = self.wall.now();
        let nodes = self.nodes.indexer().list();
        let mut state = self.monitor.lock().await;
        let names: HashSet<&str> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let deleted: Vec<(String, String)> = state
            .known
            .iter()
            .filter(|(name, _)| !names.contains(name.as_str()))
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        for (name, uid) in deleted {
            self.recorder.event(
                &node_reference(&name, &uid),
                EventType::Normal,
                "RemovingNode",
                format!("Node {name} event: Removing Node {name} from Controller"),
            );
            state.known.remove(&name);
            state.health.remove(&name);
            state.retry_pods.remove(&name);
        }
        for node in &nodes {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            let zone = zone_key(node.metadata.labels.as_ref());
            let qps = self.config.eviction_limiter_qps;
            state
                .tainters
                .entry(zone)
                .or_insert_with(|| TaintQueue::new(qps, now));
            if !state.known.contains_key(name) {
                let uid = node.metadata.uid.clone().unwrap_or_default();
                self.recorder.event(
                    &node_reference(name, &uid),
                    EventType::Normal,
                    "RegisteredNode",
                    format!("Node {name} event: Registered Node {name} in Controller"),
                );
                state.known.insert(name.to_string(), uid);
                self.mark_node_as_reachable(&mut state, node).await;
            }
        }

        let mut zone_ready: HashMap<String, Vec<Option<String>>> = HashMap::new();
        for node in &nodes {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            let lease = self.leases.lister().get(Some(NODE_LEASE_NAMESPACE), name);
            let previous = state.health.get(name).cloned();
            let (health, check) = check_node_health(
                previous,
                node,
                lease.as_deref(),
                now,
                wall_now,
                self.config.node_monitor_grace_period,
                self.config.node_startup_grace_period,
            );
            if let Some(conditions) = &check.write {
                if let Err(e) = self.write_conditions(node, conditions).await {
                    tracing::warn!(node = name, error = %e,
                        "updating the health of the node failed; no pods will be evicted this pass");
                    continue;
                }
            }
            state.health.insert(name.to_string(), health);
            let excluded = node
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(EXCLUDE_DISRUPTION_LABEL));
            if !excluded {
                zone_ready
                    .entry(zone_key(node.metadata.labels.as_ref()))
                    .or_default()
                    .push(check.current_ready.as_ref().map(|c| c.status.clone()));
            }
            let Some(current) = &check.current_ready else {
                continue;
            };
            self.process_taint_based_eviction(&mut state, node, &check.observed_ready.status, now)
                .await;
            let went_not_ready = current.status != "True" && check.observed_ready.status == "True";
            let retry = state.retry_pods.contains(name) && check.observed_ready.status != "True";
            if went_not_ready {
                let uid = node.metadata.uid.as_deref().unwrap_or_default();
                self.recorder.event(
                    &node_reference(name, uid),
                    EventType::Normal,
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                );
            }
            if went_not_ready || retry {
                if self.mark_pods_not_ready(name).await {
                    state.retry_pods.remove(name);
                } else {
                    state.retry_pods.insert(name.to_string());
                }
            } else {
                state.retry_pods.remove(name);
            }
        }
        self.handle_disruption(&mut state, &zone_ready, &nodes, now)
            .await;
    }

    /// Writes `conditions` to the node's status (a strategic merge patch, conditional on
    /// the node's resourceVersion).
    async fn write_conditions(
        &self,
        node: &Node,
        conditions: &[NodeCondition],
    ) -> Result<(), Error> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let path = format!("{}/status", NODES.item_path(None, name));
        let body = serde_json::json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "status": {"conditions": conditions},
        });
        self.send(
            Method::PATCH,
            &path,
            &body,
            "application/strategic-merge-patch+json",
        )
        .await
        .map(drop)
    }

    /// Queues a not-ready node for its `NoExecute` taint, or swaps the taint it has for
    /// the right one; a ready node loses both.
    async fn process_taint_based_eviction(
        &self,
        state: &mut MonitorState,
        node: &Node,
        observed: &str,
        now: Instant,
    ) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let (want, other) = match observed {
            "False" => (TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE),
            "Unknown" => (TAINT_NODE_UNREACHABLE, TAINT_NODE_NOT_READY),
            "True" => {
                self.mark_node_as_reachable(state, node).await;
                return;
            }
            _ => return,
        };
        if has_taint(node, &taint(other, NO_EXECUTE)) {
            // Already evicting: switch the taint at once.
            if !self
                .swap_taints(
                    name,
                    vec![taint(want, NO_EXECUTE)],
                    vec![taint(other, NO_EXECUTE)],
                )
                .await
            {
                tracing::warn!(
                    node = name,
                    "swapping the NoExecute taint failed; retrying next pass"
                );
            }
        } else if !has_taint(node, &taint(want, NO_EXECUTE)) {
            let zone = zone_key(node.metadata.labels.as_ref());
            let qps = self.config.eviction_limiter_qps;
            let queued = state
                .tainters
                .entry(zone)
                .or_insert_with(|| TaintQueue::new(qps, now))
                .add(name, now);
            if queued {
                tracing::info!(
                    node = name,
                    ready = observed,
                    "node queued for its NoExecute taint"
                );
            }
        }
    }

    /// Removes the `NoExecute` taints the controller sets and takes the node off its
    /// zone's tainting queue.
    async fn mark_node_as_reachable(&self, state: &mut MonitorState, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let ours = [
            taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE),
            taint(TAINT_NODE_NOT_READY, NO_EXECUTE),
        ];
        if ours.iter().any(|t| has_taint(node, t)) {
            if self.swap_taints(name, vec![], ours.to_vec()).await {
                tracing::info!(
                    node = name,
                    "node is reachable again: NoExecute taints removed"
                );
            } else {
                tracing::warn!(
                    node = name,
                    "removing the NoExecute taints failed; retrying next pass"
                );
            }
        }
        if let Some(q) = state
            .tainters
            .get_mut(&zone_key(node.metadata.labels.as_ref()))
        {
            q.remove(name);
        }
    }

    /// Zone states and tainting rates (see `zones`).
    async fn handle_disruption(
        &self,
        state: &mut MonitorState,
        zone_ready: &HashMap<String, Vec<Option<String>>>,
        nodes: &[Arc<Node>],
        now: Instant,
    ) {
        let mut new_states = HashMap::new();
        let mut all_fully = true;
        for (zone, ready) in zone_ready {
            let statuses: Vec<Option<&str>> = ready.iter().map(|s| s.as_deref()).collect();
            let (_, st) = compute_zone_state(&statuses, self.config.unhealthy_zone_threshold);
            if st != ZoneState::FullDisruption {
                all_fully = false;
            }
            new_states.insert(zone.clone(), st);
            state
                .zone_states
                .entry(zone.clone())
                .or_insert(ZoneState::Initial);
        }
        state
            .zone_states
            .retain(|zone, _| zone_ready.contains_key(zone));
        let all_were_fully = state
            .zone_states
            .values()
            .all(|s| *s == ZoneState::FullDisruption);
        if all_fully && all_were_fully {
            return;
        }
        if all_fully {
            tracing::warn!(
                "no node is ready: stopping evictions (this is more likely our own connectivity)"
            );
            for node in nodes {
                self.mark_node_as_reachable(state, node).await;
            }
            for q in state.tainters.values_mut() {
                q.limiter.set_qps(0.0, now);
            }
            for s in state.zone_states.values_mut() {
                *s = ZoneState::FullDisruption;
            }
            return;
        }
        if all_were_fully {
            tracing::info!("some nodes are ready again: resuming evictions");
            for h in state.health.values_mut() {
                h.probe = now;
                h.ready_transition = now;
            }
        }
        let zones: Vec<String> = state.zone_states.keys().cloned().collect();
        for zone in zones {
            let new = new_states.get(&zone).copied().unwrap_or(ZoneState::Normal);
            if !all_were_fully && state.zone_states.get(&zone) == Some(&new) {
                continue;
            }
            let size = zone_ready.get(&zone).map_or(0, Vec::len);
            let qps = match new {
                ZoneState::PartialDisruption if size > self.config.large_cluster_threshold => {
                    self.config.secondary_eviction_limiter_qps
                }
                ZoneState::PartialDisruption => 0.0,
                _ => self.config.eviction_limiter_qps,
            };
            if let Some(q) = state.tainters.get_mut(&zone) {
                q.limiter.set_qps(qps, now);
            }
            state.zone_states.insert(zone, new);
        }
    }

    /// Adds the due `NoExecute` taints; returns when it next has something to do.
    async fn no_execute_tainting_pass(&self) -> Option<Instant> {
        let now = self.config.clock.now();
        let mut state = self.monitor.lock().await;
        let due: Vec<(String, String)> = state
            .tainters
            .iter_mut()
            .flat_map(|(zone, q)| q.pop_ready(now).into_iter().map(move |n| (zone.clone(), n)))
            .collect();
        for (zone, name) in due {
            let Some(node) = self.nodes.lister().get(None, &name) else {
                continue;
            };
            let (add, remove) = match ready_condition(&node).map(|c| c.status.as_str()) {
                Some("False") => (TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE),
                Some("Unknown") => (TAINT_NODE_UNREACHABLE, TAINT_NODE_NOT_READY),
                Some(_) => continue, // ready again
                None => {
                    if let Some(q) = state.tainters.get_mut(&zone) {
                        q.add(&name, now + TAINT_RETRY);
                    }
                    continue;
                }
            };
            if self
                .swap_taints(
                    &name,
                    vec![taint(add, NO_EXECUTE)],
                    vec![taint(remove, NO_EXECUTE)],
                )
                .await
            {
                tracing::info!(node = %name, taint = add, "node tainted NoExecute");
            } else if let Some(q) = state.tainters.get_mut(&zone) {
                q.add(&name, now + TAINT_RETRY);
            }
        }
        let now = self.config.clock.now();
        state
            .tainters
            .values()
            .filter_map(|q| q.next_due(now))
            .min()
    }

    /// Adds `add` and removes `remove` from the node's taints (by key and effect; added
    /// taints get `timeAdded`), conditional on its resourceVersion and retried on
    /// conflicts. False if it could not be done.
    async fn swap_taints(&self, name: &str, add: Vec<Taint>, remove: Vec<Taint>) -> bool {
        let stamp = Some(time(self.wall.now()));
        let mut node = self.nodes.lister().get(None, name).map(|n| (*n).clone());
        for _ in 0..TAINT_TRIES {
            let Some(current) = node.take() else {
                return false;
            };
            let old: Vec<Taint> = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            let mut new: Vec<Taint> = old
                .iter()
                .filter(|t| !remove.iter().any(|r| same_taint(r, t)))
                .cloned()
                .collect();
            for a in &add {
                match new.iter_mut().find(|t| same_taint(t, a)) {
                    Some(t) if t.value == a.value => {}
                    Some(t) => {
                        *t = a.clone();
                        t.time_added = stamp.clone();
                    }
                    None => {
                        let mut a = a.clone();
                        a.time_added = stamp.clone();
                        new.push(a);
                    }
                }
            }
            if new == old {
                return true;
            }
            // No taints left: the field goes, as it was before the first one.
            let taints = if new.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::json!(new)
            };
            let body = serde_json::json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints},
            });
            let path = NODES.item_path(None, name);
            match self
                .send(Method::PATCH, &path, &body, "application/merge-patch+json")
                .await
            {
                Ok(_) => return true,
                Err(e) if e.is_conflict() => {
                    node = self.client.get::<Node>(&NODES, None, name).await.ok();
                }
                Err(e) if e.is_not_found() => return false,
                Err(e) => {
                    tracing::warn!(node = name, error = %e, "updating the node's taints failed");
                    return false;
                }
            }
        }
        false
    }

    /// The `NoSchedule` taints a node's conditions call for (see the module docs).
    async fn no_schedule_tainting_pass(&self, name: &str) -> bool {
        let Some(node) = self.nodes.lister().get(None, name) else {
            return true;
        };
        let mut want: Vec<Taint> = node_conditions(&node)
            .filter_map(|c| condition_taint(&c.type_, &c.status))
            .map(|k| taint(k, NO_SCHEDULE))
            .collect();
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            want.push(taint(TAINT_NODE_UNSCHEDULABLE, NO_SCHEDULE));
        }
        let have: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.effect == NO_SCHEDULE && is_controller_no_schedule_key(&t.key))
            .collect();
        let add: Vec<Taint> = want
            .iter()
            .filter(|w| !have.iter().any(|h| same_taint(h, w)))
            .cloned()
            .collect();
        let remove: Vec<Taint> = have
            .iter()
            .filter(|h| !want.iter().any(|w| same_taint(h, w)))
            .cloned()
            .collect();
        if add.is_empty() && remove.is_empty() {
            return true;
        }
        self.swap_taints(name, add, remove).await
    }

    async fn node_worker(self: Arc<Self>) {
        while let Some(name) = self.node_queue.get().await {
            if self.no_schedule_tainting_pass(&name).await {
                self.node_queue.forget(&name);
            } else {
                self.node_queue.add_rate_limited(name.clone());
            }
            self.node_queue.done(&name);
        }
    }

    /// Sets the `Ready` condition of the node's pods to `False`; false if some failed.
    async fn mark_pods_not_ready(&self, node: &str) -> bool {
        let pods = self
            .pods
            .indexer()
            .by_index(NODE_NAME_INDEX, node)
            .unwrap_or_default();
        let mut ok = true;
        for pod in pods {
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
            let Some(ready) = ready else { continue };
            if ready.status == "False" {
                continue;
            }
            let (ns, name) = (
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            );
            let mut cond = ready.clone();
            cond.status = "False".into();
            cond.last_transition_time = Some(time(self.wall.now()));
            let body = serde_json::json!({
                "metadata": {"uid": pod.metadata.uid},
                "status": {"conditions": [cond]},
            });
            let path = format!("{}/status", PODS.item_path(Some(ns), name));
            match self
                .send(
                    Method::PATCH,
                    &path,
                    &body,
                    "application/strategic-merge-patch+json",
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => continue,
                Err(e) => {
                    tracing::warn!(pod = %object_key(&*pod), error = %e, "marking the pod not ready failed");
                    ok = false;
                    continue;
                }
            }
            self.recorder.event(
                &pod_reference(ns, name),
                EventType::Warning,
                "NodeNotReady",
                "Node is not ready",
            );
        }
        ok
    }

    async fn eviction_worker(self: Arc<Self>) {
        let mut deletions: JoinSet<()> = JoinSet::new();
        while let Some(item) = self.eviction_queue.get().await {
            while deletions.try_join_next().is_some() {}
            let now = self.config.clock.now();
            let effects = match &item {
                EvictionItem::Node(name) => {
                    let node = self.nodes.lister().get(None, name);
                    let taints =
                        node.map(|n| no_execute(n.spec.as_ref().and_then(|s| s.taints.as_ref())));
                    let pods: Vec<(String, Vec<k8s_openapi::api::core::v1::Toleration>)> = self
                        .pods
                        .indexer()
                        .by_index(NODE_NAME_INDEX, name)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| {
                            (
                                object_key(&**p),
                                p.spec
                                    .as_ref()
                                    .and_then(|s| s.tolerations.clone())
                                    .unwrap_or_default(),
                            )
                        })
                        .collect();
                    self.evictions.lock().node_updated(name, taints, &pods, now)
                }
                EvictionItem::Pod(key) => {
                    let (ns, name) = key.split_once('/').unwrap_or(("", key));
                    let pod = self.pods.lister().get(Some(ns), name);
                    let spec = pod.as_ref().and_then(|p| p.spec.clone());
                    let node = spec.as_ref().and_then(|s| s.node_name.clone());
                    let tolerations = spec.and_then(|s| s.tolerations).unwrap_or_default();
                    match (&pod, node.filter(|n| !n.is_empty())) {
                        (None, _) => self.evictions.lock().pod_updated(key, None, now),
                        (Some(_), Some(node)) => {
                            self.evictions
                                .lock()
                                .pod_updated(key, Some((&node, &tolerations)), now)
                        }
                        (Some(_), None) => Vec::new(),
                    }
                }
                EvictionItem::Fire(key) => {
                    if self.evictions.lock().take_due(key, now) {
                        let ctl = Arc::clone(&self);
                        let key = key.clone();
                        deletions.spawn(async move { ctl.evict(&key).await });
                    }
                    Vec::new()
                }
            };
            for effect in effects {
                match effect {
                    Effect::Cancelled(key) => {
                        let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                        self.eviction_recorder.event(
                            &pod_reference(ns, name),
                            EventType::Normal,
                            "TaintManagerEviction",
                            format!("Cancelling deletion of Pod {key}"),
                        );
                    }
                    Effect::Scheduled(key, at) => {
                        let delay = at.saturating_duration_since(now);
                        self.eviction_queue
                            .add_after(EvictionItem::Fire(key), delay);
                    }
                }
            }
            self.eviction_queue.done(&item);
        }
    }

    /// Evicts a pod: a `DisruptionTarget` condition, then a delete with the pod's grace
    /// period; retried a few times.
    async fn evict(&self, key: &str) {
        let _permit = self.eviction_permits.acquire().await;
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        tracing::info!(pod = key, "evicting pod from a NoExecute-tainted node");
        self.eviction_recorder.event(
            &pod_reference(ns, name),
            EventType::Normal,
            "TaintManagerEviction",
            format!("Marking for deletion Pod {key}"),
        );
        for attempt in 0..EVICTION_TRIES {
            match self.add_condition_and_delete(ns, name).await {
                Ok(()) => return,
                Err(e) if e.is_not_found() => return,
                Err(e) if attempt + 1 == EVICTION_TRIES => {
                    tracing::warn!(pod = key, error = %e, "evicting the pod failed");
                }
                Err(_) => self.config.clock.sleep(Duration::from_millis(10)).await,
            }
        }
    }

    async fn add_condition_and_delete(&self, ns: &str, name: &str) -> Result<(), Error> {
        let pod: Pod = self.client.get(&PODS, Some(ns), name).await?;
        let reason = "DeletionByTaintManager";
        let has = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.status == "True"
                        && c.reason.as_deref() == Some(reason)
                })
            });
        if !has {
            let body = serde_json::json!({
                "metadata": {"uid": pod.metadata.uid},
                "status": {"conditions": [{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": "Taint manager: deleting due to NoExecute taint",
                    "lastTransitionTime": time(self.wall.now()),
                }]},
            });
            let path = format!("{}/status", PODS.item_path(Some(ns), name));
            self.send(
                Method::PATCH,
                &path,
                &body,
                "application/strategic-merge-patch+json",
            )
            .await?;
        }
        self.client
            .delete::<serde::de::IgnoredAny>(&PODS, Some(ns), name, &DeleteParams::default())
            .await
            .map(drop)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
        content_type: &'static str,
    ) -> Result<bytes::Bytes, Error> {
        let body = serde_json::to_vec(body).map_err(|source| Error::Decode {
            context: "the request body (encoding)".into(),
            source,
        })?;
        let (_, bytes) = self
            .client
            .request_bytes(method, path, Some((bytes::Bytes::from(body), content_type)))
            .await?;
        Ok(bytes)
    }
}

/// A node's conditions.
fn node_conditions(node: &Node) -> impl Iterator<Item = &NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
}
