//! The `listwatch` binary: `serve` runs the API server on the embedded store (or, with
//! `--etcd-servers`, on an etcd v3 cluster); `kubeconfig` prints a kubeconfig for kubectl.

// The server's write path allocates and frees many short-lived JSON trees across threads;
// mimalloc measured 14.2k creates/s against glibc's 10.3–12.2k and twice the update rate
// (docs/benchmark-history.md, session 6). The benchmarks run in `listwatch-bench`, with the
// system allocator (see the package docs), unless `bench --mimalloc` asks for this one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context as _;
use apiserver::cacher::cacher::CacherOptions;
use apiserver::{ApiServer, ServerConfig};
use clap::{Parser, Subcommand};
use listwatch::components;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use storage::Storage;
use storage_etcd::{EtcdOptions, EtcdStorage};

#[derive(Parser, Debug)]
#[command(
    name = "listwatch",
    version,
    about = "A Kubernetes-compatible API server with a watch cache, in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options of `listwatch up`.
#[derive(clap::Args, Debug)]
struct UpArgs {
    /// How many node agents (simulated kubelets) run.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// How long a node's Lease may go unrenewed before the node lifecycle controller marks
    /// it Unknown and unreachable (Kubernetes 1.32's default).
    #[arg(long, default_value = "50s", value_parser = parse_interval)]
    node_monitor_grace_period: std::time::Duration,
    /// The same for a node that has never reported.
    #[arg(long, default_value = "60s", value_parser = parse_interval)]
    node_startup_grace_period: std::time::Duration,
    #[command(flatten)]
    syncs: components::ConcurrentSyncs,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Options of `listwatch serve`.
#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// The TLS address (HTTP/2 and HTTP/1.1 by ALPN). Requests are authenticated (client
    /// certificate of the CA, the admin token, `--token-auth-file`, ServiceAccount tokens;
    /// else anonymous) and authorized by RBAC.
    #[arg(long, default_value = "127.0.0.1:6443")]
    bind: SocketAddr,
    /// Also serve plain HTTP (HTTP/1.1, h2c, WebSocket) without authentication on this
    /// address, for local development and tests. Only loopback addresses are accepted, and
    /// only requests a web page cannot make: to a loopback host name or address, without a
    /// foreign `Origin`, and writes naming their body's media type.
    #[arg(long)]
    insecure_bind: Option<SocketAddr>,
    /// Directory of the embedded store and of the TLS credentials (`pki/`: CA, serving
    /// certificate, admin token; created on first start). With `--etcd-servers` it holds only
    /// the credentials. Private to the user: directories 0700, files 0600 (looser modes
    /// found at start are tightened, and logged).
    #[arg(long, default_value = "./listwatch-data")]
    data_dir: PathBuf,
    /// Encrypt resources at rest as this EncryptionConfiguration
    /// (apiserver.config.k8s.io/v1, YAML or JSON) says, as kube-apiserver's flag of that
    /// name: providers aesgcm, secretbox and identity; the first key of the first provider
    /// encrypts.
    #[arg(long, value_name = "FILE")]
    encryption_provider_config: Option<PathBuf>,
    /// Store everything in this etcd v3 cluster instead of the embedded store: client URLs,
    /// comma-separated (e.g. `http://127.0.0.1:2379,http://127.0.0.1:22379`). Several
    /// `listwatch serve` processes on one etcd cluster act as one API server.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Keep everything in memory: nothing is persisted, and a restart starts empty (for
    /// tests, e.g. of operators in other languages). The data directory then holds only the
    /// TLS credentials.
    #[arg(long, conflicts_with = "etcd_servers")]
    memory: bool,
    /// With `--etcd-servers`: an extra namespace prepended to every etcd key (keys are
    /// `/registry/...` as in Kubernetes; default: no namespace).
    #[arg(long, default_value = "")]
    etcd_prefix: String,
    /// With `--etcd-servers`: how often etcd is compacted, keeping one interval of history
    /// (e.g. `5m`, `90s`, `1500ms`; `0` = never). With several servers on one etcd, one
    /// compaction happens per interval between them.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    etcd_compaction_interval: std::time::Duration,
    /// Events kept per resource for watch resumption.
    #[arg(long, default_value_t = 10_000)]
    watch_cache_size: usize,
    /// The most bytes of objects one resource's watch cache keeps in its ring of recent
    /// events (e.g. 32Mi); older events are dropped sooner when objects are large.
    #[arg(long, default_value = "32Mi", value_parser = parse_bytes)]
    watch_cache_bytes: u64,
    /// Frames a watcher may have queued before it is closed as too slow.
    #[arg(long, default_value_t = 1_000)]
    watcher_queue: usize,
    /// Storage revisions of history kept for paging and watch resumption.
    #[arg(long, default_value_t = 100_000)]
    history_window: u64,
    /// The most bytes of old object revisions the embedded store keeps (e.g. 64Mi): past
    /// it, history is compacted at once, however few revisions that leaves.
    #[arg(long, default_value = "64Mi", value_parser = parse_bytes)]
    history_window_bytes: u64,
    /// Minimum milliseconds between two writes to one watch stream (0 = write each event
    /// at once). A busy watcher then gets fewer, larger writes; an idle one is not delayed.
    #[arg(long, default_value_t = 0)]
    watch_flush_interval_ms: u64,
    /// Concurrent HTTP/2 streams (e.g. watches) one client connection may open.
    #[arg(long, default_value_t = 10_000)]
    http2_max_concurrent_streams: u32,
    /// How long events are kept after their last activity (e.g. `1h`, `90s`), as
    /// kube-apiserver's flag of that name.
    #[arg(long, default_value = "1h", value_parser = parse_interval)]
    event_ttl: std::time::Duration,
    /// Static bearer tokens, as kube-apiserver's flag of that name: a CSV file of
    /// `token,user,uid[,"group1,group2"]` lines, read at start.
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// Read-only requests in flight before requests queue (fairly, per user) and are then
    /// refused with 429; watches do not count. Members of system:masters are exempt.
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Mutating requests in flight, as `--max-requests-inflight`.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// Write the audit log here: `audit.k8s.io/v1` events as JSON lines (created 0600).
    #[arg(long, value_name = "FILE", requires = "audit_policy_file")]
    audit_log_path: Option<PathBuf>,
    /// The audit policy (`audit.k8s.io/v1` `Policy`, YAML or JSON): which requests are
    /// audited, at which level.
    #[arg(long, value_name = "FILE", requires = "audit_log_path")]
    audit_policy_file: Option<PathBuf>,
    /// Admission plugins not to run, comma-separated, by kube-apiserver's names:
    /// LimitRanger, ServiceAccount, ResourceQuota.
    #[arg(long, value_name = "PLUGINS", default_value = "", value_parser = apiserver::admission::Disabled::parse)]
    disable_admission_plugins: apiserver::admission::Disabled,
    /// Keep a `default` ServiceAccount in every active namespace, which kube-apiserver
    /// leaves to the controller-manager (`=false` to leave it to one here too).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    default_service_accounts: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the API server (TLS with a bearer token; plain HTTP only with `--insecure-bind`)
    /// on the embedded, persistent store, or on etcd with `--etcd-servers`.
    Serve(ServeArgs),
    /// Print a kubeconfig that points kubectl at a listwatch server: with the CA and admin
    /// token of `--data-dir` when `serve` has created them, else an unauthenticated one.
    Kubeconfig {
        /// The server URL (default: `https://127.0.0.1:6443` when the data directory has
        /// credentials, else `http://127.0.0.1:8080`).
        #[arg(long)]
        server: Option<String>,
        /// The data directory of the server.
        #[arg(long, default_value = "./listwatch-data")]
        data_dir: PathBuf,
        /// Authenticate with a client certificate issued now by the server's CA (user
        /// `admin`, group `system:masters`, unless `--user` says otherwise) instead of the
        /// admin token.
        #[arg(long)]
        client_cert: bool,
        /// With `--client-cert`: the certificate's user (its common name). Such a user may
        /// do what RBAC grants it, and nothing more.
        #[arg(long, requires = "client_cert")]
        user: Option<String>,
        /// With `--user`: the user's group (the certificate's organization).
        #[arg(long, requires = "user")]
        group: Option<String>,
    },
    /// Run the scheduler against an API server (any Kubernetes API server, a real
    /// kube-apiserver included): it binds the pods of its `schedulerName` to nodes.
    Scheduler {
        /// The kubeconfig to reach the API server with (its current context).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The `spec.schedulerName` of the pods it schedules.
        #[arg(long, default_value = "default-scheduler")]
        scheduler_name: String,
        /// Act only while holding the `kube-system/kube-scheduler` Lease, so that several
        /// schedulers can run and one acts (`--leader-elect=false` to act at once).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
    },
    /// Run the controller-manager against an API server: the ReplicaSet, Deployment,
    /// DaemonSet, Job, CronJob, StatefulSet, node lifecycle, ServiceAccounts, Endpoints,
    /// EndpointSlice and namespace controllers and the garbage collector.
    ControllerManager {
        /// The kubeconfig to reach the API server with (its current context).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The controllers to run, comma-separated (default: all of replicaset,
        /// deployment, daemonset, job, cronjob, statefulset, nodelifecycle, serviceaccount,
        /// endpoint, endpointslice, garbagecollector, namespace, resourcequota).
        #[arg(long, value_delimiter = ',')]
        controllers: Vec<String>,
        /// Run each controller with the credentials of its own ServiceAccount in
        /// kube-system (created, with its tokens, through the kubeconfig's identity), so
        /// that it can do only what its `system:controller:*` role allows.
        #[arg(long)]
        use_service_account_credentials: bool,
        /// Act only while holding the `kube-system/kube-controller-manager` Lease.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// How long a node's Lease may go unrenewed before its node is marked Unknown.
        #[arg(long, default_value = "50s", value_parser = parse_interval)]
        node_monitor_grace_period: std::time::Duration,
        #[command(flatten)]
        syncs: components::ConcurrentSyncs,
    },
    /// Run simulated kubelets against an API server: each registers a Node, renews its
    /// Lease, and runs the pods bound to it.
    NodeAgent {
        /// The kubeconfig to reach the API server with (its current context).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// How many nodes this process runs.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// The node names' prefix (`PREFIX-0`, `PREFIX-1`, …).
        #[arg(long, default_value = "node")]
        name_prefix: String,
    },
    /// A whole cluster in one process: the API server (every `serve` flag applies) and, each
    /// connected to it through the client library, the scheduler, the controller-manager
    /// (ReplicaSets, Deployments, node lifecycle, namespaces, …) and `--nodes` node agents.
    /// Ctrl-C stops everything.
    Up(UpArgs),
    /// Run a benchmark against a spawned (or `--server`) listwatch and print its figures.
    Bench {
        /// Run the benchmark in this process, whose allocator is mimalloc, instead of in
        /// `listwatch-bench` with the system allocator: what a controller that links
        /// mimalloc gets from the client library.
        #[arg(long)]
        mimalloc: bool,
        /// Which benchmark.
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Kubeconfig {
            server,
            data_dir,
            client_cert,
            user,
            group,
        } => {
            let creds = apiserver::server::tls::read_client_credentials(&data_dir)
                .with_context(|| format!("reading credentials in {}", data_dir.display()))?;
            let creds = match creds {
                Some((ca, token)) if client_cert => {
                    let (name, groups) = match (&user, &group) {
                        (None, _) => ("admin", vec!["system:masters"]),
                        (Some(u), Some(g)) => (u.as_str(), vec![g.as_str()]),
                        (Some(u), None) => (u.as_str(), vec![]),
                    };
                    let (cert, key) =
                        apiserver::server::tls::issue_client_certificate(&data_dir, name, &groups)
                            .context("issuing a client certificate")?;
                    Some((ca, UserAuth::Certificate { cert, key }, token))
                }
                Some((ca, token)) => Some((ca, UserAuth::Token, token)),
                None if client_cert => anyhow::bail!(
                    "{} has no CA yet: run `listwatch serve --data-dir {0}` first",
                    data_dir.display()
                ),
                None => None,
            };
            print!("{}", kubeconfig(server.as_deref(), creds.as_ref()));
            Ok(())
        }
        Command::Bench {
            mimalloc: true,
            which,
        } => {
            println!("client allocator: mimalloc (benchmark run inside `listwatch`)");
            bench::run(which)
        }
        Command::Bench { .. } => run_bench_binary(),
        Command::Serve(args) => runtime()?.block_on(serve(args)),
        Command::Up(args) => runtime()?.block_on(up(args)),
        Command::Scheduler {
            kubeconfig,
            scheduler_name,
            leader_elect,
        } => exit_on_error(
            "scheduler",
            runtime()?.block_on(async move {
                let client = components::client_from_kubeconfig(&kubeconfig).await?;
                let config = controllers::scheduler::SchedulerConfig {
                    scheduler_name,
                    ..Default::default()
                };
                tokio::select! {
                    r = components::run_scheduler(client, config, leader_elect) => r,
                    _ = tokio::signal::ctrl_c() => Ok(()),
                }
            }),
        ),
        Command::ControllerManager {
            kubeconfig,
            controllers,
            use_service_account_credentials,
            leader_elect,
            node_monitor_grace_period,
            syncs,
        } => exit_on_error(
            "controller-manager",
            runtime()?.block_on(async move {
                let client = components::client_from_kubeconfig(&kubeconfig).await?;
                let base = use_service_account_credentials
                    .then(|| client::rest::Config::from_kubeconfig_file(&kubeconfig, None))
                    .transpose()
                    .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
                let mut config = components::ControllerManagerConfig {
                    syncs,
                    service_account_credentials: base
                        .map(|c| components::ServiceAccountCredentials::Tokens(Box::new(c))),
                    ..Default::default()
                };
                if !controllers.is_empty() {
                    config.controllers = controllers;
                }
                config.node_lifecycle.node_monitor_grace_period = node_monitor_grace_period;
                tokio::select! {
                    r = components::run_controller_manager(client, config, leader_elect) => r,
                    _ = tokio::signal::ctrl_c() => Ok(()),
                }
            }),
        ),
        Command::NodeAgent {
            kubeconfig,
            nodes,
            name_prefix,
        } => exit_on_error(
            "node-agent",
            runtime()?.block_on(async move {
                // A connection per NODES_PER_NETWORK_CONNECTION agents: each agent's watch
                // holds a stream open, and kube-apiserver allows 1,000 per connection.
                let config = client::rest::Config::from_kubeconfig_file(&kubeconfig, None)
                    .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
                let mut clients = Vec::new();
                for _ in 0..nodes.div_ceil(NODES_PER_NETWORK_CONNECTION).max(1) {
                    clients.push(components::checked_client(config.clone()).await?);
                }
                components::run_node_agents_as(
                    clients,
                    nodes,
                    &name_prefix,
                    tokio::signal::ctrl_c(),
                )
                .await
            }),
        ),
    }
}

/// Logs to stderr (`RUST_LOG`, default `info`) and builds the multi-threaded runtime.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// A component that cannot start says why in one line and exits with status 1.
fn exit_on_error(component: &str, result: anyhow::Result<()>) -> anyhow::Result<()> {
    if let Err(e) = result {
        eprintln!("listwatch {component}: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

/// How many agents of `listwatch node-agent` share one connection: each holds a watch
/// stream open, and kube-apiserver allows 1,000 streams per HTTP/2 connection
/// (`--http2-max-streams-per-connection`); a request past the limit would wait for a watch
/// to end.
const NODES_PER_NETWORK_CONNECTION: usize = 500;

/// `listwatch up`: the server and the control plane in one process, until Ctrl-C.
async fn up(args: UpArgs) -> anyhow::Result<()> {
    let running = start_server(args.serve).await?;
    // The components share the process with the server, so they call it in-process (no
    // socket, no TLS, no HTTP framing), each request naming its identity in front-proxy
    // headers that only such a call is trusted with; every request is authorized as that
    // identity.
    //
    // The controller-manager runs as kube-controller-manager does with
    // --use-service-account-credentials: its informers and leader election as user
    // system:kube-controller-manager, each controller as its own ServiceAccount.
    let manager_client = running
        .in_process_client()
        .as_front_proxied("system:kube-controller-manager", &[])?;
    // The scheduler runs as kube-scheduler does: user system:kube-scheduler, which the
    // default policy grants what scheduling needs and nothing more.
    let scheduler = running
        .in_process_client()
        .as_front_proxied("system:kube-scheduler", &[])?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(components::run_scheduler_forever(scheduler));
    let manager = components::ControllerManagerConfig {
        node_lifecycle: controllers::node_lifecycle::NodeLifecycleConfig {
            node_monitor_grace_period: args.node_monitor_grace_period,
            node_startup_grace_period: args.node_startup_grace_period,
            ..Default::default()
        },
        syncs: args.syncs,
        service_account_credentials: Some(components::ServiceAccountCredentials::InProcess(
            running.in_process_server(),
        )),
        ..Default::default()
    };
    tasks.spawn(components::run_controller_manager_forever(
        manager_client,
        manager,
    ));
    // Each node agent runs as its node, `system:node:NAME` in `system:nodes`, so that the
    // Node authorizer holds it to its own Node, Lease and pods (a TLS connection per node,
    // as kubelets have, cost 14 % of the control plane's CPU at 1,000 nodes: BENCHMARKS.md,
    // session 34).
    let mut agents = Vec::with_capacity(args.nodes);
    let base = running.in_process_client();
    for name in components::node_names(args.nodes, "node")? {
        let user = format!("system:node:{name}");
        agents.push(base.as_front_proxied(&user, &["system:nodes".to_string()])?);
    }
    tasks.spawn(async move {
        if let Err(e) =
            components::run_node_agents_as(agents, args.nodes, "node", std::future::pending::<()>())
                .await
        {
            tracing::error!("node agents: {e:#}");
        }
    });
    tracing::info!(nodes = args.nodes, "control plane running");
    let _ = tokio::signal::ctrl_c().await;
    tasks.shutdown().await;
    running.stop().await;
    Ok(())
}

/// `listwatch serve`: runs the server until Ctrl-C.
async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let running = start_server(args).await?;
    let _ = tokio::signal::ctrl_c().await;
    running.stop().await;
    Ok(())
}

/// A started API server: its listeners' tasks, until [`RunningServer::stop`].
struct RunningServer {
    stop_tx: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    // Dropping it stops the etcd compactor.
    _compactor: Option<storage_etcd::Compactor>,
    /// The server as in-process clients call it: one, cloned for every client, so that
    /// their watches share what they decode.
    in_process: client::rest::InProcessServer,
}

impl RunningServer {
    /// A client of this server in-process (see
    /// [`apiserver::server::in_process`]), with no identity until
    /// [`client::rest::Client::as_front_proxied`] gives it one.
    fn in_process_client(&self) -> client::rest::Client {
        client::rest::Client::in_process(self.in_process_server())
    }

    /// This server as in-process clients call it.
    fn in_process_server(&self) -> client::rest::InProcessServer {
        self.in_process.clone()
    }

    /// Stops accepting and waits for the listeners to end.
    async fn stop(self) {
        let _ = self.stop_tx.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Opens the store, starts the API server and its listeners, and prints the "serving on"
/// lines.
async fn start_server(args: ServeArgs) -> anyhow::Result<RunningServer> {
    let ServeArgs {
        bind,
        insecure_bind,
        data_dir,
        encryption_provider_config,
        etcd_servers,
        memory,
        etcd_prefix,
        etcd_compaction_interval,
        watch_cache_size,
        watch_cache_bytes,
        watcher_queue,
        history_window,
        history_window_bytes,
        watch_flush_interval_ms,
        http2_max_concurrent_streams,
        event_ttl,
        token_auth_file,
        max_requests_inflight,
        max_mutating_requests_inflight,
        audit_log_path,
        audit_policy_file,
        disable_admission_plugins,
        default_service_accounts,
    } = args;
    let audit = match (audit_log_path, audit_policy_file) {
        (Some(log), Some(policy)) => {
            let text = tokio::fs::read_to_string(&policy)
                .await
                .with_context(|| format!("reading --audit-policy-file {}", policy.display()))?;
            let policy = apiserver::audit::policy::Policy::parse(&text)
                .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", policy.display()))?;
            let backend = apiserver::audit::log_backend::LogBackend::open(&log)
                .with_context(|| format!("opening --audit-log-path {}", log.display()))?;
            Some(Arc::new(apiserver::audit::Auditor::new(policy, backend)))
        }
        _ => None,
    };
    let token_file = match token_auth_file {
        Some(path) => {
            let text = tokio::fs::read_to_string(&path)
                .await
                .with_context(|| format!("reading --token-auth-file {}", path.display()))?;
            apiserver::auth::token_file::TokenFile::parse(&text)
                .with_context(|| format!("--token-auth-file {}", path.display()))?
        }
        None => Default::default(),
    };
    if let Some(addr) = insecure_bind {
        if !addr.ip().is_loopback() {
            anyhow::bail!(
                "--insecure-bind {addr}: plain HTTP without authentication is only served on a loopback address (127.0.0.1, ::1)"
            );
        }
    }
    let encryption = match encryption_provider_config {
        Some(path) => Some(
            tokio::task::spawn_blocking(move || {
                apiserver::encryption::EncryptionConfig::load(&path)
            })
            .await??,
        ),
        None => None,
    };
    {
        let dir = data_dir.clone();
        tokio::task::spawn_blocking(move || listwatch::data_dir::make_private(&dir))
            .await?
            .with_context(|| format!("preparing the data directory {}", data_dir.display()))?;
    }
    let creds = {
        let dir = data_dir.clone();
        let hosts = vec![bind.ip().to_string()];
        tokio::task::spawn_blocking(move || {
            apiserver::server::tls::ensure_credentials(&dir, &hosts)
        })
        .await?
        .with_context(|| format!("preparing TLS credentials in {}", data_dir.display()))?
    };
    let tls = apiserver::server::tls::server_config(&creds)?;
    // Runs for as long as `serve` does (dropping it stops it).
    let mut _compactor = None;
    let (store, location): (Arc<dyn Storage>, String) = if memory {
        (
            Arc::new(storage::memory::MemoryStorage::new()),
            "memory (nothing persisted)".to_string(),
        )
    } else if etcd_servers.is_empty() {
        let opts = EmbeddedOptions {
            history_window_revisions: history_window,
            history_window_bytes,
            ..EmbeddedOptions::default()
        };
        let dir = data_dir.clone();
        let store = tokio::task::spawn_blocking(move || EmbeddedStorage::open(&dir, opts))
            .await?
            .with_context(|| format!("opening the store in {}", data_dir.display()))?;
        (Arc::new(store), data_dir.display().to_string())
    } else {
        let opts = EtcdOptions {
            prefix: etcd_prefix,
            ..EtcdOptions::default()
        };
        let store = connect_etcd(&etcd_servers, opts).await?;
        if !etcd_compaction_interval.is_zero() {
            _compactor = Some(storage_etcd::spawn_compactor(
                store.clone(),
                etcd_compaction_interval,
            ));
        }
        (Arc::new(store), format!("etcd {}", etcd_servers.join(",")))
    };
    let store = match &encryption {
        Some(enc) => {
            for r in enc.resources() {
                let how = r.transformer.describe();
                tracing::info!(resource = %r.resource, "encryption at rest: {how}");
            }
            apiserver::encryption::EncryptedStorage::wrap(store, enc)
        }
        None => store,
    };
    let config = ServerConfig {
        cacher: CacherOptions {
            watch_cache_size,
            watch_cache_bytes: usize::try_from(watch_cache_bytes).unwrap_or(usize::MAX),
            watcher_queue,
            flush_interval: std::time::Duration::from_millis(watch_flush_interval_ms),
        },
        event_ttl: Some(event_ttl),
        service_account_key: Some(creds.service_account_key.clone()),
        max_in_flight: apiserver::flow_control::Limits {
            read_only: max_requests_inflight,
            mutating: max_mutating_requests_inflight,
        },
        audit,
        admission_disabled: disable_admission_plugins,
        no_default_service_accounts: !default_service_accounts,
    };
    let srv = ApiServer::new(store, config)
        .await
        .map_err(|s| anyhow::anyhow!("starting the API server: {}", s.message))?;
    let insecure = match insecure_bind {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?,
        ),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read these lines to learn the ports when binding to :0; the plain
    // HTTP one, when asked for, comes first.
    if let Some(l) = &insecure {
        let addr = l.local_addr()?;
        println!("listwatch serving on http://{addr}");
        tracing::info!(%addr, "serving plain HTTP without authentication");
    }
    println!("listwatch serving on https://{local}");
    tracing::info!(%local, storage = %location, "listwatch serving");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let http2 = apiserver::server::Http2Options {
        max_concurrent_streams: http2_max_concurrent_streams,
        ..Default::default()
    };
    let secure = apiserver::ServeOptions {
        tls: Some(tls),
        authenticator: Some(Arc::new(
            apiserver::auth::authenticator::Authenticator::new(
                Some(creds.token.clone()),
                token_file,
            ),
        )),
        http2: http2.clone(),
        ..Default::default()
    };
    // Nothing authenticates on the plain port: refuse what a web page could send to it.
    let insecure_opts = apiserver::ServeOptions {
        http2,
        loopback_only: true,
        ..Default::default()
    };
    let mut tasks = vec![tokio::spawn(apiserver::serve_with(
        listener,
        srv.clone(),
        secure,
        stopped(),
    ))];
    if let Some(l) = insecure {
        tasks.push(tokio::spawn(apiserver::serve_with(
            l,
            srv.clone(),
            insecure_opts,
            stopped(),
        )));
    }
    let in_process =
        client::rest::InProcessServer::new(apiserver::server::in_process::handler(srv));
    Ok(RunningServer {
        stop_tx,
        tasks,
        _compactor,
        in_process,
    })
}

/// Parses a duration such as `5m`, `90s`, `1500ms`, `1h` or a plain number of seconds.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number followed by ms, s, m or h"))?;
    let per_unit_ms: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ))
        }
    };
    n.checked_mul(per_unit_ms)
        .map(std::time::Duration::from_millis)
        .ok_or_else(|| format!("{text:?}: too long"))
}

/// A byte count: digits, optionally followed by Ki, Mi or Gi (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number, optionally followed by Ki, Mi or Gi"))?;
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use Ki, Mi or Gi)"
            ))
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}

/// Connects to etcd, retrying every few seconds (and saying so) while it is unreachable — it
/// may still be starting. A configuration error (bad URL) ends start-up at once.
async fn connect_etcd(endpoints: &[String], opts: EtcdOptions) -> anyhow::Result<EtcdStorage> {
    const RETRY: std::time::Duration = std::time::Duration::from_secs(2);
    let mut attempt = 1u32;
    loop {
        match EtcdStorage::connect(endpoints, opts.clone()).await {
            Ok(store) => return Ok(store),
            Err(e) if e.is_retryable() => {
                tracing::error!(
                    attempt,
                    error = %e,
                    "cannot reach etcd; retrying in {}s",
                    RETRY.as_secs()
                );
                attempt += 1;
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e).context("connecting to etcd"),
        }
    }
}

/// How the kubeconfig's user authenticates.
enum UserAuth {
    /// With the admin bearer token.
    Token,
    /// With this client certificate and key (PEM).
    Certificate { cert: String, key: String },
}

/// A kubeconfig for `server`; with `creds` (CA PEM, how to authenticate, token) it trusts
/// that CA and sends the token or the client certificate, else it is the unauthenticated
/// form for the insecure port. A plain `http://` server URL always gets the
/// unauthenticated form.
fn kubeconfig(server: Option<&str>, creds: Option<&(String, UserAuth, String)>) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let creds = creds.filter(|_| !server.is_some_and(|s| s.starts_with("http://")));
    let (cluster, user, default_server) = match creds {
        Some((ca, auth, token)) => (
            format!("    certificate-authority-data: {}\n", b64(ca)),
            match auth {
                UserAuth::Token => format!("\n    token: {token}"),
                UserAuth::Certificate { cert, key } => format!(
                    "\n    client-certificate-data: {}\n    client-key-data: {}",
                    b64(cert),
                    b64(key)
                ),
            },
            "https://127.0.0.1:6443",
        ),
        None => (String::new(), " {}".to_string(), "http://127.0.0.1:8080"),
    };
    let server = server.unwrap_or(default_server);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n{cluster}    server: {server}\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: listwatch\n    namespace: default\ncurrent-context: listwatch\nusers:\n- name: listwatch\n  user:{user}\npreferences: {{}}\n"
    )
}

/// Runs `listwatch-bench` (beside this executable) with the arguments after `bench`, and
/// exits with its status.
fn run_bench_binary() -> anyhow::Result<()> {
    let exe = bench::sibling_exe("listwatch-bench")?;
    let args: Vec<_> = std::env::args_os()
        .skip_while(|a| a != "bench")
        .skip(1)
        .collect();
    let status = std::process::Command::new(&exe)
        .args(args)
        .status()
        .with_context(|| format!("running {}", exe.display()))?;
    std::process::exit(status.code().unwrap_or(1));
}

#[cfg(test)]
mod interval_tests {
    use super::parse_interval;
    use std::time::Duration;

    #[test]
    fn parses_units_and_rejects_garbage() {
        assert_eq!(parse_interval("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_interval("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        for bad in ["", "m", "5x", "-1s", "1.5s", "99999999999999999999h"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }
}
