//! The `listwatch` binary: `serve` runs the API server on the embedded store (or, with
//! `--etcd-servers`, on an etcd v3 cluster); `kubeconfig` prints a kubeconfig for kubectl.

mod bench;

use anyhow::Context as _;
use apiserver::cacher::cacher::CacherOptions;
use apiserver::{ApiServer, ServerConfig};
use clap::{Parser, Subcommand};
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

/// Options of `listwatch serve`.
#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Directory of the embedded store (created on first start). Unused with
    /// `--etcd-servers`.
    #[arg(long, default_value = "./listwatch-data")]
    data_dir: PathBuf,
    /// Store everything in this etcd v3 cluster instead of the embedded store: client URLs,
    /// comma-separated (e.g. `http://127.0.0.1:2379,http://127.0.0.1:22379`). Several
    /// `listwatch serve` processes on one etcd cluster act as one API server.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// With `--etcd-servers`: an extra namespace prepended to every etcd key (keys are
    /// `/registry/...` as in Kubernetes; default: no namespace).
    #[arg(long, default_value = "")]
    etcd_prefix: String,
    /// Events kept per resource for watch resumption.
    #[arg(long, default_value_t = 10_000)]
    watch_cache_size: usize,
    /// Frames a watcher may have queued before it is closed as too slow.
    #[arg(long, default_value_t = 1_000)]
    watcher_queue: usize,
    /// Storage revisions of history kept for paging and watch resumption.
    #[arg(long, default_value_t = 100_000)]
    history_window: u64,
    /// Minimum milliseconds between two writes to one watch stream (0 = write each event
    /// at once). A busy watcher then gets fewer, larger writes; an idle one is not delayed.
    #[arg(long, default_value_t = 0)]
    watch_flush_interval_ms: u64,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the API server (plain HTTP/1.1 and h2c) on the embedded, persistent store, or on
    /// etcd with `--etcd-servers`.
    Serve(ServeArgs),
    /// Print a kubeconfig that points kubectl at a listwatch server.
    Kubeconfig {
        /// The server URL.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
    },
    /// Run a benchmark against a spawned (or `--server`) listwatch and print its figures.
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Kubeconfig { server } => {
            print!("{}", kubeconfig(&server));
            Ok(())
        }
        Command::Bench { which } => bench::run(which),
        Command::Serve(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .init();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(serve(args))
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        bind,
        data_dir,
        etcd_servers,
        etcd_prefix,
        watch_cache_size,
        watcher_queue,
        history_window,
        watch_flush_interval_ms,
    } = args;
    let (store, location): (Arc<dyn Storage>, String) = if etcd_servers.is_empty() {
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let opts = EmbeddedOptions {
            history_window_revisions: history_window,
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
        (Arc::new(store), format!("etcd {}", etcd_servers.join(",")))
    };
    let config = ServerConfig {
        cacher: CacherOptions {
            watch_cache_size,
            watcher_queue,
            flush_interval: std::time::Duration::from_millis(watch_flush_interval_ms),
        },
    };
    let srv = ApiServer::new(store, config)
        .await
        .map_err(|s| anyhow::anyhow!("starting the API server: {}", s.message))?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line to learn the port when binding to :0.
    println!("listwatch serving on http://{local}");
    tracing::info!(%local, storage = %location, "listwatch serving");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    apiserver::serve(listener, srv, shutdown).await;
    Ok(())
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

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n    server: {server}\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: listwatch\n    namespace: default\ncurrent-context: listwatch\nusers:\n- name: listwatch\n  user: {{}}\npreferences: {{}}\n"
    )
}
