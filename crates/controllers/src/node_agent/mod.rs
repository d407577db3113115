//! Node agents: simulated kubelets, many in one process.
//!
//! Each agent registers its `Node` (capacity and allocatable, the well-known labels,
//! addresses, a pod CIDR, the conditions `Ready`, `MemoryPressure`, `DiskPressure` and
//! `PIDPressure`), renews its `Lease` in `kube-node-lease` every 10 s, reports its status
//! when it changed (someone marked it `Unknown`, or deleted the node) and at least every
//! 5 minutes, and runs its pods: it watches them with the field selector
//! `spec.nodeName=NODE` and takes each through what a kubelet would report — `Pending` →
//! `Running` with an address from the node's CIDR, container statuses and conditions, the
//! `Pulled`/`Created`/`Started` events; readiness after the readiness probe's initial delay;
//! exits asked for by the [`EXIT_AFTER_ANNOTATION`] and [`EXIT_CODE_ANNOTATION`]
//! annotations, restarted (with the kubelet's back-off) or not as the `restartPolicy` says,
//! ending `Succeeded` or `Failed`; and when the pod is being deleted, its containers stop
//! (terminated states) and the pod is deleted with grace period 0. See `pod_runtime` for
//! the simulated runtime and `pod_status` for the status written.
//!
//! # Scale
//!
//! A thousand nodes are one process on one Tokio runtime:
//! - every request goes through the [`Client`]s given (one by default): over `https://`
//!   each client is one HTTP/2 connection carrying all its nodes' watches and requests
//!   (the first registration of each client runs alone, so that the rest find the
//!   connection open instead of racing to open their own); over plain `http://` each watch
//!   needs a connection of its own, as HTTP/1.1 does;
//! - each node's pod watch is one [`SharedIndexInformer`] (so a cut watch resumes from its
//!   last resourceVersion without relisting, and a 410 relists), whose handler only queues
//!   the pod's key; a few workers shared by all nodes sync the pods, and a pod waiting for
//!   something (an exit, a readiness delay, a back-off) is a timer entry in the work
//!   queue, not a task;
//! - lease renewals and status reports are batched into 100 ms slots by one heartbeat
//!   loop (see `heartbeat`), spread over the renewal interval; a renewal is a small JSON
//!   merge patch whose answer is not decoded;
//! - one shared Node informer notices when someone changed a node's conditions, so that
//!   its agent reports at once.
//!
//! # Shutdown
//!
//! [`NodeAgents::run`] runs until its future is dropped; [`NodeAgents::run_until`] also
//! returns when a shutdown future completes. Either way every task and watch of the
//! agents stops. Nothing is written on the way out: like a kubelet that is killed, the
//! nodes simply stop renewing, and the node lifecycle controller notices.

mod agent;
pub mod config;
mod heartbeat;
mod ids;
mod ipam;
mod lease;
mod node;
mod pod_runtime;
mod pod_status;
mod pod_worker;
pub mod wall_clock;

pub use config::{
    ConfigError, NodeAgentConfig, NodeResources, DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_RENEW_INTERVAL, DEFAULT_STATUS_REPORT_INTERVAL,
};
pub use lease::NODE_LEASE_NAMESPACE;
pub use node::KUBELET_VERSION;
pub use pod_runtime::{EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION};

pub(crate) use crate::event_recorder::{object_reference, EventRecorder, EventType};

use agent::Agent;
use client::cache::ConfigureReflector as _;
use client::cache::{
    object_key, DeleteEvent, ResourceEventHandlerFuncs, RestListerWatcher, SharedIndexInformer,
};
use client::clock::Sleep;
use client::rest::resource::{NODES, PODS};
use client::rest::Client;
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use heartbeat::{spread, Beat, HeartbeatSchedule};
use k8s_openapi::api::core::v1::{Node, Pod};
use node::NodeIdentity;
use parking_lot::Mutex;
use pod_worker::{PodKey, PodTable};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use wall_clock::WallClock;

/// How many slots one lease renewal interval is cut into.
const SLOTS_PER_INTERVAL: u32 = 100;
/// The first retry of a failed lease renewal (doubling up to [`LEASE_RETRY_MAX`]), as the
/// kubelet's lease controller.
const LEASE_RETRY_FIRST: Duration = Duration::from_millis(200);
/// The longest pause between lease renewal retries.
const LEASE_RETRY_MAX: Duration = Duration::from_secs(7);
/// The pause before a failed status report is tried again (the kubelet's status update
/// frequency).
const STATUS_RETRY: Duration = Duration::from_secs(10);
/// The longest pause between registration attempts of a node.
const REGISTER_RETRY_MAX: Duration = Duration::from_secs(30);

/// Why the node agents stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeAgentError {
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No client was given.
    #[error("no API client given")]
    NoClient,
    /// The API server refused or could not be reached when the first node registered (a
    /// kubeconfig that cannot be used, a server that is down).
    #[error("cannot register node {node:?} with the API server: {source}")]
    Register {
        /// The node.
        node: String,
        /// What the client said.
        #[source]
        source: client::rest::Error,
    },
}

/// A process's node agents (see the [module docs](self)).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use controllers::node_agent::{NodeAgentConfig, NodeAgents};
/// let client = client::rest::Client::try_default()?;
/// let config = NodeAgentConfig { nodes: 100, name_prefix: "sim".into(), ..Default::default() };
/// NodeAgents::new(client, config).run().await?; // runs until dropped
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct NodeAgents {
    clients: Vec<Client>,
    config: NodeAgentConfig,
}

impl std::fmt::Debug for NodeAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAgents")
            .field("clients", &self.clients.len())
            .field("config", &self.config)
            .finish()
    }
}

impl NodeAgents {
    /// Agents for `config.nodes` nodes, all talking through `client`.
    pub fn new(client: Client, config: NodeAgentConfig) -> NodeAgents {
        NodeAgents::with_clients(vec![client], config)
    }

    /// Agents spread round-robin over `clients`: with `https://` servers each client is
    /// one HTTP/2 connection, so `k` clients (each from its own `Client::new`) spread the
    /// nodes' watches over `k` connections.
    pub fn with_clients(clients: Vec<Client>, config: NodeAgentConfig) -> NodeAgents {
        NodeAgents { clients, config }
    }

    /// The names of the nodes these agents run, in order.
    pub fn node_names(&self) -> Vec<String> {
        (0..self.config.nodes)
            .map(|i| self.config.node_name(i))
            .collect()
    }

    /// Runs the agents until the future is dropped.
    ///
    /// # Errors
    /// A configuration that does not validate; the API server refusing (or not answering)
    /// the registration of the first node of each client. Later failures are retried.
    pub async fn run(self) -> Result<(), NodeAgentError> {
        self.run_until(std::future::pending()).await
    }

    /// Runs the agents until `shutdown` completes (or the future is dropped); then every
    /// task and watch of theirs stops.
    ///
    /// # Errors
    /// As [`NodeAgents::run`].
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), NodeAgentError> {
        self.config.validate()?;
        if self.clients.is_empty() {
            return Err(NodeAgentError::NoClient);
        }
        let (shared, beats) = Shared::new(self.clients.clone(), self.config);
        let mut running = Running {
            shared: Arc::clone(&shared),
            tasks: JoinSet::new(),
        };
        for _ in 0..shared.config.pod_workers {
            running
                .tasks
                .spawn(pod_worker::run_worker(Arc::clone(&shared)));
        }
        // The first node of each client alone: a refusal is reported at once, and the
        // client's connection is open before the rest race for it.
        let first = self.clients.len().min(shared.agents.len());
        for i in 0..first {
            shared
                .register_and_start(i as u32)
                .await
                .map_err(|source| NodeAgentError::Register {
                    node: shared.agents[i].name().to_string(),
                    source,
                })?;
        }
        running.start_node_informer(&self.clients[0]);
        for i in first..shared.agents.len() {
            let s = Arc::clone(&shared);
            running
                .tasks
                .spawn(async move { s.start_retrying(i as u32).await });
        }
        tokio::select! {
            () = heartbeat_loop(Arc::clone(&shared), beats) => {}
            () = shutdown => {}
        }
        drop(running);
        Ok(())
    }
}

/// What the heartbeat loop is told.
#[derive(Debug)]
enum BeatRequest {
    /// The node is registered: start its heartbeats.
    Registered(u32),
    /// The node's conditions were changed by someone else: report now.
    ReportNow(u32),
}

/// State shared by the tasks of a [`NodeAgents`].
pub(crate) struct Shared {
    config: NodeAgentConfig,
    wall: WallClock,
    agents: Vec<Agent>,
    by_name: HashMap<String, u32>,
    queue: RateLimitingQueue<PodKey>,
    pods: Mutex<PodTable>,
    beats: mpsc::UnboundedSender<BeatRequest>,
    permits: Semaphore,
    nodes: OnceLock<SharedIndexInformer<Node>>,
}

impl Shared {
    fn new(
        clients: Vec<Client>,
        config: NodeAgentConfig,
    ) -> (Arc<Shared>, mpsc::UnboundedReceiver<BeatRequest>) {
        let boot = format!("{:?}", SystemTime::now());
        let agents: Vec<Agent> = (0..config.nodes)
            .map(|i| {
                Agent::new(
                    NodeIdentity::new(&config, i, &boot),
                    clients[i % clients.len()].clone(),
                )
            })
            .collect();
        let by_name = agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name().to_string(), i as u32))
            .collect();
        let (beats, rx) = mpsc::unbounded_channel();
        let queue =
            RateLimitingQueue::with_default_limiter(QueueConfig::new().clock(config.clock.clone()));
        let shared = Shared {
            wall: WallClock::new(config.clock.clone()),
            permits: Semaphore::new(config.max_in_flight),
            config,
            agents,
            by_name,
            queue,
            pods: Mutex::new(PodTable::new()),
            beats,
            nodes: OnceLock::new(),
        };
        (Arc::new(shared), rx)
    }

    /// Registers node `i`, creates its lease, starts its heartbeats and its pod watch.
    async fn register_and_start(self: &Arc<Self>, i: u32) -> Result<(), client::rest::Error> {
        let agent = &self.agents[i as usize];
        {
            let _permit = self.permits.acquire().await;
            agent.register(&self.config, self.wall.now()).await?;
        }
        {
            let _permit = self.permits.acquire().await;
            if let Err(e) = agent.ensure_lease(&self.config, self.wall.now()).await {
                // The renewals create it when it is missing.
                tracing::warn!(node = %agent.name(), error = %e, "creating the node lease failed");
            }
        }
        let _ = self.beats.send(BeatRequest::Registered(i));
        self.start_pod_informer(i);
        agent.node_event("Starting", "Starting kubelet.".into());
        agent.node_event(
            "NodeReady",
            format!("Node {} status is now: NodeReady", agent.name()),
        );
        Ok(())
    }

    /// [`Shared::register_and_start`], retried with a growing pause until it succeeds.
    async fn start_retrying(self: Arc<Self>, i: u32) {
        let mut pause = Duration::from_secs(1);
        while let Err(e) = self.register_and_start(i).await {
            tracing::warn!(node = %self.agents[i as usize].name(), error = %e,
                "registering the node failed; retrying in {pause:?}");
            self.config.clock.sleep(pause).await;
            pause = (pause * 2).min(REGISTER_RETRY_MAX);
        }
    }

    /// Starts the watch of node `i`'s pods, whose changes queue the pods' keys.
    fn start_pod_informer(self: &Arc<Self>, i: u32) {
        let agent = &self.agents[i as usize];
        if agent.pods.get().is_some() {
            return;
        }
        let lw = RestListerWatcher::<Pod>::new(agent.client.clone(), PODS)
            .fields(format!("spec.nodeName={}", agent.name()))
            .strip_managed_fields(true);
        let informer = SharedIndexInformer::builder(Arc::new(lw))
            .name(format!("pods of {}", agent.name()))
            .clock(self.config.clock.clone())
            .build();
        let enqueue = {
            let shared = Arc::downgrade(self);
            move |pod: &Pod| {
                if let Some(shared) = shared.upgrade() {
                    shared.queue.add(PodKey {
                        node: i,
                        key: object_key(pod).into(),
                    });
                }
            }
        };
        let (on_add, on_update, on_delete) = (enqueue.clone(), enqueue.clone(), enqueue);
        informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |p: &Arc<Pod>, _| on_add(p))
                .on_update(move |_, p: &Arc<Pod>| on_update(p))
                .on_delete(move |d: &DeleteEvent<Pod>| on_delete(d.object())),
        );
        if agent.pods.set(informer.clone()).is_ok() {
            informer.start();
        }
    }

    /// Does one heartbeat of node `i`.
    async fn beat(&self, i: u32, beat: Beat) -> Result<(), client::rest::Error> {
        let agent = &self.agents[i as usize];
        let _permit = self.permits.acquire().await;
        let now = self.wall.now();
        match beat {
            Beat::Lease => agent.renew_lease(&self.config, now).await,
            Beat::Status => {
                let seen = self
                    .nodes
                    .get()
                    .and_then(|inf| inf.lister().get(None, agent.name()));
                let recovering = seen.as_deref().is_some_and(node::conditions_differ);
                match agent
                    .report_status(&self.config, seen.as_deref(), now)
                    .await
                {
                    Ok(_) => {
                        if recovering {
                            agent.node_event(
                                "NodeReady",
                                format!("Node {} status is now: NodeReady", agent.name()),
                            );
                        }
                        Ok(())
                    }
                    // The node was deleted: register it again.
                    Err(e) if e.is_not_found() => agent.register(&self.config, now).await,
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// Owns the agents' tasks and watches; dropping it stops them all.
struct Running {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
}

impl Running {
    /// The shared Node informer, through which agents notice changes others made to their
    /// nodes.
    fn start_node_informer(&mut self, client: &Client) {
        let lw = RestListerWatcher::<Node>::new(client.clone(), NODES).strip_managed_fields(true);
        let informer = SharedIndexInformer::builder(Arc::new(lw))
            .name("nodes (node agents)")
            .clock(self.shared.config.clock.clone())
            .build();
        let check = {
            let shared = Arc::downgrade(&self.shared);
            move |node: &Node, deleted: bool| {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let Some(&i) = node
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| shared.by_name.get(n))
                else {
                    return;
                };
                if deleted || node::conditions_differ(node) {
                    let _ = shared.beats.send(BeatRequest::ReportNow(i));
                }
            }
        };
        let (on_add, on_update, on_delete) = (check.clone(), check.clone(), check);
        informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |n: &Arc<Node>, _| on_add(n, false))
                .on_update(move |_, n: &Arc<Node>| on_update(n, false))
                .on_delete(move |d: &DeleteEvent<Node>| on_delete(d.object(), true)),
        );
        if self.shared.nodes.set(informer.clone()).is_ok() {
            informer.start();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.tasks.abort_all();
        self.shared.queue.shut_down();
        if let Some(nodes) = self.shared.nodes.get() {
            nodes.stop();
        }
        for agent in &self.shared.agents {
            if let Some(pods) = agent.pods.get() {
                pods.stop();
            }
        }
    }
}

/// The heartbeat loop: renews leases and reports node statuses when due (see the module
/// docs). Runs until dropped.
async fn heartbeat_loop(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<BeatRequest>) {
    let clock = shared.config.clock.clone();
    let cfg = &shared.config;
    let n = shared.agents.len();
    let renew = cfg.lease_renew_interval;
    let report = cfg.status_report_interval;
    let mut schedule = HeartbeatSchedule::new(n, clock.now(), renew / SLOTS_PER_INTERVAL);
    // When each node's current lease renewal was due (renewals follow that grid, so that
    // slow answers do not make them drift).
    let mut lease_due: Vec<Instant> = vec![clock.now(); n];
    let mut lease_failures: Vec<u32> = vec![0; n];
    let mut in_flight: Vec<[bool; 2]> = vec![[false; 2]; n];
    // A status report that fell due while one was in flight: it runs once that one ends
    // (the one in flight may have been computed before the change it is due for).
    let mut report_again: Vec<bool> = vec![false; n];
    let mut tasks: JoinSet<(u32, Beat, bool)> = JoinSet::new();
    let mut timer: Option<(Instant, Sleep)> = None;
    loop {
        let next = schedule.next_due();
        if timer.as_ref().map(|(at, _)| *at) != next {
            timer = next.map(|at| (at, clock.sleep_until(at)));
        }
        tokio::select! {
            () = async {
                match timer.as_mut() {
                    Some((_, sleep)) => sleep.await,
                    None => std::future::pending().await,
                }
            } => {
                timer = None;
                for (i, beat) in schedule.pop_due(clock.now()) {
                    let slot = &mut in_flight[i as usize][beat as usize];
                    if *slot {
                        // Rescheduled when the one in flight ends.
                        if beat == Beat::Status {
                            report_again[i as usize] = true;
                        }
                        continue;
                    }
                    *slot = true;
                    let s = Arc::clone(&shared);
                    tasks.spawn(async move {
                        let result = s.beat(i, beat).await;
                        if let Err(e) = &result {
                            tracing::warn!(node = %s.agents[i as usize].name(), ?beat, error = %e,
                                "node heartbeat failed");
                        }
                        (i, beat, result.is_ok())
                    });
                }
            }
            Some(request) = requests.recv() => match request {
                BeatRequest::Registered(i) => {
                    let now = clock.now();
                    // The lease was just written: the first renewal comes within the next
                    // interval but one, spread so that renewals do not come in bursts.
                    let first = spread(now + renew, renew, i as usize, n);
                    lease_due[i as usize] = first;
                    schedule.schedule(i, Beat::Lease, first);
                    // The first report was the registration; later ones spread over the
                    // second half of the report interval.
                    let at = spread(now + report / 2, report / 2, i as usize, n);
                    schedule.schedule(i, Beat::Status, at);
                }
                BeatRequest::ReportNow(i) => {
                    if shared.agents[i as usize].is_registered() {
                        schedule.schedule_by(i, Beat::Status, clock.now());
                    }
                }
            },
            Some(Ok((i, beat, ok))) = tasks.join_next(), if !tasks.is_empty() => {
                let idx = i as usize;
                in_flight[idx][beat as usize] = false;
                let now = clock.now();
                match (beat, ok) {
                    (Beat::Lease, true) => {
                        lease_failures[idx] = 0;
                        let mut next = lease_due[idx] + renew;
                        if next <= now {
                            next = now + renew;
                        }
                        lease_due[idx] = next;
                        schedule.schedule(i, Beat::Lease, next);
                    }
                    (Beat::Lease, false) => {
                        let exp = lease_failures[idx].min(10);
                        lease_failures[idx] += 1;
                        let pause = (LEASE_RETRY_FIRST * 2u32.pow(exp)).min(LEASE_RETRY_MAX);
                        lease_due[idx] = now + pause;
                        schedule.schedule(i, Beat::Lease, now + pause);
                    }
                    (Beat::Status, true) if std::mem::take(&mut report_again[idx]) => {
                        schedule.schedule(i, Beat::Status, now);
                    }
                    (Beat::Status, true) => schedule.schedule(i, Beat::Status, now + report),
                    (Beat::Status, false) => schedule.schedule_by(i, Beat::Status, now + STATUS_RETRY),
                }
            }
        }
    }
}
