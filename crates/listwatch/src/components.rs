//! The control-plane components as the binary runs them (`listwatch scheduler`,
//! `node-agent`, `up`): each built on the `controllers` crate with a client of its own,
//! talking to the API server only over the wire — the same whether the server is in this
//! process (`up`) or elsewhere, a real kube-apiserver included.

use anyhow::Context as _;
use client::rest::{Client, Config};
use controllers::leader_election::{LeaderElectionConfig, LeaderElector, LeadershipEnd};
use controllers::scheduler::{Scheduler, SchedulerConfig};
use std::path::Path;

/// A client for the kubeconfig at `path` (its current context), checked by asking the
/// server for its API groups, so that a kubeconfig that cannot be used fails here with one
/// clear message rather than in a retry loop.
///
/// # Errors
/// The file is unreadable or invalid, or the server cannot be reached with it.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<Client> {
    let config = Config::from_kubeconfig_file(path, None)
        .with_context(|| format!("kubeconfig {}", path.display()))?;
    checked_client(config).await
}

/// A client for `config`, checked as [`client_from_kubeconfig`] does.
///
/// # Errors
/// The configuration is refused, or the server cannot be reached with it.
pub async fn checked_client(config: Config) -> anyhow::Result<Client> {
    let server = config.server.to_string();
    let client = Client::new(config).context("building the client")?;
    client
        .request_bytes(http::Method::GET, "/api", None)
        .await
        .with_context(|| format!("cannot use the API server {server}"))?;
    Ok(client)
}

/// A unique identity for leader election: the host name, the process id and a random
/// part, as Kubernetes components form theirs.
pub fn identity(component: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let random = std::collections::hash_map::RandomState::new();
    let tag = std::hash::BuildHasher::hash_one(&random, std::process::id());
    format!("{host}_{component}_{:08x}", tag as u32)
}

/// Runs the scheduler. With `leader_elect`, only while holding the `kube-system/kube-scheduler`
/// Lease; losing it ends the call with an error (a component that lost its lease stops, as
/// kube-scheduler does). Without, until the future is dropped.
///
/// # Errors
/// The lease was lost.
pub async fn run_scheduler(
    client: Client,
    config: SchedulerConfig,
    leader_elect: bool,
) -> anyhow::Result<()> {
    if !leader_elect {
        Scheduler::new(client, config).run().await;
        return Ok(());
    }
    let elector = LeaderElector::new(
        client.clone(),
        LeaderElectionConfig::new("kube-system", "kube-scheduler", identity("scheduler")),
    );
    // The scheduler (and its informers) exists only while this process leads.
    let lead = async move { Scheduler::new(client, config).run().await };
    match elector.run(lead).await {
        LeadershipEnd::Finished => Ok(()),
        LeadershipEnd::Lost => anyhow::bail!("leader election lost: the kube-scheduler lease"),
    }
}

/// [`run_scheduler`] that campaigns again after losing the lease, for `listwatch up`, whose
/// other components keep running.
pub async fn run_scheduler_forever(client: Client) {
    loop {
        if let Err(e) = run_scheduler(client.clone(), SchedulerConfig::default(), true).await {
            tracing::warn!("scheduler: {e:#}; campaigning again");
        }
    }
}

/// The names [`run_node_agents_as`] gives `nodes` nodes named after `prefix`, in order.
///
/// # Errors
/// The prefix or count is refused by [`controllers::node_agent::NodeAgentConfig::validate`].
pub fn node_names(nodes: usize, prefix: &str) -> anyhow::Result<Vec<String>> {
    let config = controllers::node_agent::NodeAgentConfig {
        nodes,
        name_prefix: prefix.to_string(),
        ..Default::default()
    };
    config.validate().context("node agents")?;
    Ok((0..nodes).map(|i| config.node_name(i)).collect())
}

/// Runs `nodes` node agents named `{prefix}-{i}` until `shutdown` resolves, node `i`
/// talking through `clients[i % clients.len()]` (a client per node gives each agent its own
/// identity; a few clients spread the agents' watches over as many connections).
///
/// # Errors
/// The configuration is invalid (e.g. a prefix that makes invalid node names), or the
/// agents failed to start.
pub async fn run_node_agents_as(
    clients: Vec<Client>,
    nodes: usize,
    prefix: &str,
    shutdown: impl std::future::Future<Output = impl Sized>,
) -> anyhow::Result<()> {
    use controllers::node_agent::{NodeAgentConfig, NodeAgents};
    let config = NodeAgentConfig {
        nodes,
        name_prefix: prefix.to_string(),
        ..NodeAgentConfig::default()
    };
    config.validate().context("node agents")?;
    NodeAgents::with_clients(clients, config)
        .run_until(async move {
            shutdown.await;
        })
        .await
        .context("node agents")?;
    Ok(())
}

/// The controllers `listwatch controller-manager` can run, by kube-controller-manager's
/// names for them.
pub const CONTROLLERS: &[&str] = &[
    "replicaset",
    "deployment",
    "statefulset",
    "daemonset",
    "job",
    "cronjob",
    "nodelifecycle",
    "serviceaccount",
    "endpoint",
    "endpointslice",
    "garbagecollector",
    "namespace",
    "resourcequota",
];

/// The ServiceAccount in kube-system a controller (by its name in [`CONTROLLERS`]) runs
/// as under service-account credentials, bound by the default policy to the ClusterRole
/// `system:controller:ACCOUNT`.
pub fn service_account_of(controller: &str) -> &'static str {
    match controller {
        "replicaset" => "replicaset-controller",
        "deployment" => "deployment-controller",
        "statefulset" => "statefulset-controller",
        "daemonset" => "daemon-set-controller",
        "job" => "job-controller",
        "cronjob" => "cronjob-controller",
        "nodelifecycle" => "node-controller",
        "serviceaccount" => "service-account-controller",
        "endpoint" => "endpoint-controller",
        "endpointslice" => "endpointslice-controller",
        "garbagecollector" => "generic-garbage-collector",
        "namespace" => "namespace-controller",
        "resourcequota" => "resourcequota-controller",
        _ => "kube-controller-manager",
    }
}

/// Workers per controller, under kube-controller-manager's flag names and with its defaults:
/// each controller syncs that many of its objects at once (one object by one worker at a
/// time). Raise them when the API server keeps up and the controllers are what waits, as
/// on a cluster with many objects changing at once.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ConcurrentSyncs {
    /// ReplicaSets synced at once.
    #[arg(long = "concurrent-replicaset-syncs", default_value_t = 5)]
    pub replicaset: usize,
    /// Deployments synced at once.
    #[arg(long = "concurrent-deployment-syncs", default_value_t = 5)]
    pub deployment: usize,
    /// StatefulSets synced at once.
    #[arg(long = "concurrent-statefulset-syncs", default_value_t = 5)]
    pub statefulset: usize,
    /// DaemonSets synced at once.
    #[arg(long = "concurrent-daemonset-syncs", default_value_t = 2)]
    pub daemonset: usize,
    /// Jobs synced at once.
    #[arg(long = "concurrent-job-syncs", default_value_t = 5)]
    pub job: usize,
    /// CronJobs synced at once.
    #[arg(long = "concurrent-cron-job-syncs", default_value_t = 5)]
    pub cronjob: usize,
    /// Services whose Endpoints are synced at once.
    #[arg(long = "concurrent-endpoint-syncs", default_value_t = 5)]
    pub endpoint: usize,
    /// Services whose EndpointSlices are synced at once.
    #[arg(long = "concurrent-service-endpoint-syncs", default_value_t = 5)]
    pub endpointslice: usize,
    /// Objects the garbage collector processes at once.
    #[arg(long = "concurrent-gc-syncs", default_value_t = 20)]
    pub garbagecollector: usize,
    /// Namespaces deleted at once.
    #[arg(long = "concurrent-namespace-syncs", default_value_t = 10)]
    pub namespace: usize,
    /// ResourceQuotas recomputed at once.
    #[arg(long = "concurrent-resource-quota-syncs", default_value_t = 5)]
    pub resourcequota: usize,
}

impl Default for ConcurrentSyncs {
    /// kube-controller-manager's defaults.
    fn default() -> Self {
        ConcurrentSyncs {
            replicaset: 5,
            deployment: 5,
            statefulset: 5,
            daemonset: 2,
            job: 5,
            cronjob: 5,
            endpoint: 5,
            endpointslice: 5,
            garbagecollector: 20,
            namespace: 10,
            resourcequota: 5,
        }
    }
}

/// What the controller-manager runs.
#[derive(Debug, Clone)]
pub struct ControllerManagerConfig {
    /// The controllers to run (names from [`CONTROLLERS`]).
    pub controllers: Vec<String>,
    /// Workers per controller.
    pub syncs: ConcurrentSyncs,
    /// The node lifecycle controller's settings.
    pub node_lifecycle: controllers::node_lifecycle::NodeLifecycleConfig,
    /// The namespace controller's settings (its workers come from `syncs`).
    pub namespace: controllers::namespace::NamespaceConfig,
    /// The ResourceQuota controller's settings (its workers come from `syncs`).
    pub resource_quota: controllers::resource_quota::ResourceQuotaConfig,
    /// kube-controller-manager's `--use-service-account-credentials`: each controller's
    /// client is made as its ServiceAccount in kube-system; `None`: every controller uses
    /// the given client.
    pub service_account_credentials: Option<ServiceAccountCredentials>,
}

/// How a controller's client authenticates as its ServiceAccount.
#[derive(Debug, Clone)]
pub enum ServiceAccountCredentials {
    /// With a token from the TokenRequest API, over a connection made from this
    /// configuration (server, CA; its credentials are replaced).
    Tokens(Box<client::rest::Config>),
    /// As a client of this in-process server, named in front-proxy headers
    /// ([`Client::as_front_proxied`]).
    InProcess(client::rest::InProcessServer),
}

impl Default for ControllerManagerConfig {
    fn default() -> Self {
        ControllerManagerConfig {
            controllers: CONTROLLERS.iter().map(|c| c.to_string()).collect(),
            syncs: ConcurrentSyncs::default(),
            node_lifecycle: Default::default(),
            namespace: Default::default(),
            resource_quota: Default::default(),
            service_account_credentials: None,
        }
    }
}

/// Runs the chosen controllers, sharing one informer factory, until the future is dropped.
///
/// # Errors
/// A controller name is unknown, or a controller could not be set up.
pub async fn run_controllers(
    client: Client,
    config: ControllerManagerConfig,
) -> anyhow::Result<()> {
    use client::cache::SharedInformerFactory;
    use controllers::cronjob::CronJobController;
    use controllers::daemonset::DaemonSetController;
    use controllers::deployment::DeploymentController;
    use controllers::endpoints::EndpointsController;
    use controllers::endpointslice::EndpointSliceController;
    use controllers::garbage_collector::GarbageCollector;
    use controllers::job::JobController;
    use controllers::namespace::NamespaceController;
    use controllers::node_lifecycle::NodeLifecycleController;
    use controllers::replicaset::ReplicaSetController;
    use controllers::resource_quota::ResourceQuotaController;
    use controllers::serviceaccounts::ServiceAccountsController;
    use controllers::statefulset::StatefulSetController;
    for c in &config.controllers {
        if !CONTROLLERS.contains(&c.as_str()) {
            anyhow::bail!(
                "unknown controller {c:?} (known: {})",
                CONTROLLERS.join(", ")
            );
        }
    }
    let wants = |name: &str| config.controllers.iter().any(|c| c == name);
    // Every controller is built before any runs: the workload controllers add indexers to
    // the shared informers, which must happen before the factory starts them.
    // Like kube-controller-manager, the informers hold no field-ownership records.
    let factory = SharedInformerFactory::builder()
        .client(client.clone())
        .strip_managed_fields(true)
        .build();
    let syncs = &config.syncs;
    // With service-account credentials each controller writes as its own ServiceAccount
    // (and the informers read as the controller-manager); without, everything runs as the
    // controller-manager's client.
    let builder = config.service_account_credentials.clone().map(|base| {
        use controllers::client_builder::ServiceAccountClientBuilder;
        match base {
            ServiceAccountCredentials::Tokens(config) => {
                ServiceAccountClientBuilder::new(client.clone(), *config)
            }
            ServiceAccountCredentials::InProcess(base) => {
                ServiceAccountClientBuilder::in_process(client.clone(), base)
            }
        }
    });
    let client_for = |controller: &'static str| {
        let (builder, client) = (builder.clone(), client.clone());
        async move {
            match builder {
                Some(b) => {
                    let account = service_account_of(controller);
                    b.client_for(account)
                        .await
                        .with_context(|| format!("the client of the {controller} controller"))
                }
                None => Ok(client),
            }
        }
    };
    let mut runs: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = Vec::new();
    macro_rules! workload {
        ($name:literal, $controller:ty, $workers:expr) => {
            if wants($name) {
                let c = <$controller>::new(&factory, client_for($name).await?, $workers)?;
                runs.push(Box::pin(async move { c.run().await }));
            }
        };
    }
    workload!("replicaset", ReplicaSetController, syncs.replicaset);
    workload!("deployment", DeploymentController, syncs.deployment);
    workload!("statefulset", StatefulSetController, syncs.statefulset);
    workload!("daemonset", DaemonSetController, syncs.daemonset);
    workload!("job", JobController, syncs.job);
    workload!("cronjob", CronJobController, syncs.cronjob);
    workload!("endpoint", EndpointsController, syncs.endpoint);
    workload!(
        "endpointslice",
        EndpointSliceController,
        syncs.endpointslice
    );
    if wants("serviceaccount") {
        let c = ServiceAccountsController::new(&factory, client_for("serviceaccount").await?, 1)?;
        runs.push(Box::pin(async move { c.run().await }));
    }
    if wants("namespace") {
        let namespace = controllers::namespace::NamespaceConfig {
            workers: syncs.namespace,
            ..config.namespace.clone()
        };
        let c = NamespaceController::new(&factory, client_for("namespace").await?, namespace)?;
        runs.push(Box::pin(async move { c.run().await }));
    }
    if wants("resourcequota") {
        let resource_quota = controllers::resource_quota::ResourceQuotaConfig {
            workers: syncs.resourcequota,
            ..config.resource_quota.clone()
        };
        let c = ResourceQuotaController::new(
            &factory,
            client_for("resourcequota").await?,
            resource_quota,
        )?;
        runs.push(Box::pin(async move { c.run().await }));
    }
    if wants("garbagecollector") {
        let c = GarbageCollector::new(
            &factory,
            client_for("garbagecollector").await?,
            syncs.garbagecollector,
        );
        runs.push(Box::pin(async move {
            if let Err(e) = c.run().await {
                tracing::error!(error = %e, "the garbage collector stopped");
            }
        }));
    }
    if wants("nodelifecycle") {
        let node_lifecycle = controllers::node_lifecycle::NodeLifecycleConfig {
            informer_client: Some(client.clone()),
            ..config.node_lifecycle.clone()
        };
        let c = NodeLifecycleController::new(client_for("nodelifecycle").await?, node_lifecycle);
        runs.push(Box::pin(c.run()));
    }
    tracing::info!(controllers = ?config.controllers, "controller-manager running");
    // Each controller on its own task; dropping this future (leadership lost) aborts them all.
    let mut tasks = tokio::task::JoinSet::new();
    for run in runs {
        tasks.spawn(run);
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    Ok(())
}

/// Runs the controller-manager's controllers. With `leader_elect`, only while holding the
/// `kube-system/kube-controller-manager` Lease; losing it ends the call with an error.
///
/// # Errors
/// As [`run_controllers`], or the lease was lost.
pub async fn run_controller_manager(
    client: Client,
    config: ControllerManagerConfig,
    leader_elect: bool,
) -> anyhow::Result<()> {
    if !leader_elect {
        return run_controllers(client, config).await;
    }
    let elector = LeaderElector::new(
        client.clone(),
        LeaderElectionConfig::new(
            "kube-system",
            "kube-controller-manager",
            identity("controller-manager"),
        ),
    );
    let mut failed = None;
    let lead = async {
        if let Err(e) = run_controllers(client, config).await {
            failed = Some(e);
        }
    };
    let end = elector.run(lead).await;
    if let Some(e) = failed {
        return Err(e);
    }
    match end {
        LeadershipEnd::Finished => Ok(()),
        LeadershipEnd::Lost => {
            anyhow::bail!("leader election lost: the kube-controller-manager lease")
        }
    }
}

/// [`run_controller_manager`] that campaigns again after losing the lease, for `listwatch up`.
pub async fn run_controller_manager_forever(client: Client, config: ControllerManagerConfig) {
    loop {
        match run_controller_manager(client.clone(), config.clone(), true).await {
            Ok(()) => return,
            Err(e) => tracing::warn!("controller-manager: {e:#}; campaigning again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        syncs: ConcurrentSyncs,
    }

    #[test]
    fn concurrent_syncs_default_as_kube_controller_manager_and_take_its_flags() {
        let none = Flags::try_parse_from(["cm"]).unwrap();
        assert_eq!(none.syncs, ConcurrentSyncs::default());
        let some = Flags::try_parse_from([
            "cm",
            "--concurrent-replicaset-syncs",
            "50",
            "--concurrent-gc-syncs=3",
            "--concurrent-resource-quota-syncs",
            "7",
        ])
        .unwrap();
        assert_eq!(
            some.syncs,
            ConcurrentSyncs {
                replicaset: 50,
                garbagecollector: 3,
                resourcequota: 7,
                ..ConcurrentSyncs::default()
            }
        );
        assert!(Flags::try_parse_from(["cm", "--concurrent-job-syncs", "many"]).is_err());
    }
}
