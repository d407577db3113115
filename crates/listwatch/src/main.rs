//! The `listwatch` binary: `serve` runs the API server on the embedded store; `kubeconfig`
//! prints a kubeconfig for kubectl.

mod bench;

use anyhow::Context as _;
use apiserver::cacher::cacher::CacherOptions;
use apiserver::{ApiServer, ServerConfig};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};

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
    /// Directory of the embedded store (created on first start).
    #[arg(long, default_value = "./listwatch-data")]
    data_dir: PathBuf,
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
    /// Run the API server (plain HTTP/1.1 and h2c) on the embedded, persistent store.
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
        watch_cache_size,
        watcher_queue,
        history_window,
        watch_flush_interval_ms,
    } = args;
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
    let config = ServerConfig {
        cacher: CacherOptions {
            watch_cache_size,
            watcher_queue,
            flush_interval: std::time::Duration::from_millis(watch_flush_interval_ms),
        },
    };
    let srv = ApiServer::new(Arc::new(store), config)
        .await
        .map_err(|s| anyhow::anyhow!("starting the API server: {}", s.message))?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line to learn the port when binding to :0.
    println!("listwatch serving on http://{local}");
    tracing::info!(%local, data_dir = %data_dir.display(), "listwatch serving");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    apiserver::serve(listener, srv, shutdown).await;
    Ok(())
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n    server: {server}\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: listwatch\n    namespace: default\ncurrent-context: listwatch\nusers:\n- name: listwatch\n  user: {{}}\npreferences: {{}}\n"
    )
}
