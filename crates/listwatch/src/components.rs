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

/// Runs `nodes` node agents named `{prefix}-{i}` until `shutdown` resolves.
///
/// # Errors
/// The configuration is invalid (e.g. a prefix that makes invalid node names), or the
/// agents failed to start.
pub async fn run_node_agents(
    client: Client,
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
    NodeAgents::new(client, config)
        .run_until(async move {
            shutdown.await;
        })
        .await
        .context("node agents")?;
    Ok(())
}

/// Runs the node lifecycle controller while holding the `kube-system/kube-controller-manager`
/// Lease (it is one of kube-controller-manager's controllers), campaigning again after
/// losing it.
pub async fn run_node_lifecycle_forever(
    client: Client,
    config: controllers::node_lifecycle::NodeLifecycleConfig,
) {
    use controllers::node_lifecycle::NodeLifecycleController;
    loop {
        let elector = LeaderElector::new(
            client.clone(),
            LeaderElectionConfig::new(
                "kube-system",
                "kube-controller-manager",
                identity("controller-manager"),
            ),
        );
        let (c, config) = (client.clone(), config.clone());
        let lead = async move { NodeLifecycleController::new(c, config).run().await };
        if elector.run(lead).await == LeadershipEnd::Lost {
            tracing::warn!("controller-manager: leader election lost; campaigning again");
        }
    }
}
