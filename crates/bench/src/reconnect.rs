//! `listwatch bench reconnect-storm`: many informers of our client watch one server; the
//! server is killed (SIGKILL) and started again on the same data and address. Measures how
//! long until every informer watches again, how many of them had to relist, and what the
//! storm cost the new server's CPU.
//!
//! The informers resume from their last resourceVersions: the new server's watch cache is
//! primed from the store's history, so none of them should need a list.

use super::http::HttpConn;
use super::{line, ServerOpts, ServerProc, BENCH_NAMESPACE};
use anyhow::{bail, Context as _};
use clap::Args;
use client::cache::{RestListerWatcher, SharedIndexInformer};
use client::object::DynamicObject;
use client::rest::resource::CONFIGMAPS;
use client::rest::{Client, Config};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `listwatch bench reconnect-storm`.
#[derive(Args, Debug, Clone)]
pub struct ReconnectArgs {
    /// Informers (each its own watch connection).
    #[arg(long, default_value_t = 1000)]
    pub informers: usize,
    /// ConfigMaps in the watched namespace.
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Server restarts measured, one after the other. (The informers' backoff grows over
    /// restarts less than 2 minutes apart, as client-go's does: later rounds measure that.)
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Server options (`--server` is not supported: the benchmark restarts its own server).
    #[command(flatten)]
    pub target: ServerOpts,
}

async fn metrics(addr: SocketAddr) -> anyhow::Result<String> {
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let status = conn.request("GET", "/metrics", None, &mut out).await?;
    if status != 200 {
        bail!("/metrics answered HTTP {status}");
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Creates (round 0) or replaces the benchmark's ConfigMaps, marking them with `round`.
async fn put_configmaps(addr: SocketAddr, n: usize, round: usize) -> anyhow::Result<()> {
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let collection = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/configmaps");
    for i in 0..n {
        let name = format!("storm-{i}");
        let body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"round": round.to_string()}
        }))?;
        let (method, path) = if round == 0 {
            ("POST", collection.clone())
        } else {
            ("PUT", format!("{collection}/{name}"))
        };
        let status = conn.request(method, &path, Some(&body), &mut out).await?;
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
    Ok(())
}

/// Runs the benchmark on its own multi-threaded runtime.
pub fn run(args: ReconnectArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(storm(args))
}

async fn storm(args: ReconnectArgs) -> anyhow::Result<()> {
    if args.target.server.is_some() {
        bail!("reconnect-storm restarts its own server: --server is not supported");
    }
    let mut extra = Vec::new();
    if let Some(n) = args.target.watch_cache_size {
        extra.extend(["--watch-cache-size".to_string(), n.to_string()]);
    }
    if let Some(n) = args.target.watcher_queue {
        extra.extend(["--watcher-queue".to_string(), n.to_string()]);
    }
    extra.extend(args.target.server_args.iter().cloned());
    let mut server = ServerProc::spawn(&extra)?;
    let addr = server.addr;
    println!(
        "target: spawned server pid {} on http://{addr} (data in {})",
        server.pid(),
        server.dir.display()
    );
    super::ensure_namespace(addr).await?;
    let client = Client::new(Config::new(&format!("http://{addr}"))?)?;
    put_configmaps(addr, args.objects, 0).await?;

    let informers: Vec<SharedIndexInformer<DynamicObject>> = (0..args.informers)
        .map(|_| {
            let lw = RestListerWatcher::<DynamicObject>::new(client.clone(), CONFIGMAPS.clone())
                .namespace(BENCH_NAMESPACE);
            SharedIndexInformer::builder(Arc::new(lw)).build()
        })
        .collect();
    let started = Instant::now();
    for inf in &informers {
        inf.start();
    }
    while !informers.iter().all(|i| i.has_synced()) {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the informers did not sync within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{} informers synced in {:.2} s",
        args.informers,
        started.elapsed().as_secs_f64()
    );
    let watching = |text: &str| {
        super::metric_sum(
            text,
            "apiserver_longrunning_requests",
            &[("verb", "WATCH"), ("resource", "configmaps")],
        )
    };
    let mut results = Vec::new();
    for round in 1..=args.rounds {
        // Let every watch open, and give the informers versions that are not the newest.
        let deadline = Instant::now() + Duration::from_secs(120);
        while watching(&metrics(addr).await?) < args.informers as f64 {
            if Instant::now() > deadline {
                bail!("the informers were not all watching before round {round}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        put_configmaps(addr, args.objects, round).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;

        let killed = Instant::now();
        server.restart(&extra).context("restarting the server")?;
        let up = killed.elapsed();
        let pid = server.pid();
        let mut all_watching = None;
        let mut text = String::new();
        while killed.elapsed() < Duration::from_secs(300) {
            text = match metrics(addr).await {
                Ok(t) => t,
                Err(_) => continue,
            };
            if watching(&text) >= args.informers as f64 {
                all_watching = Some(killed.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(all_watching) = all_watching else {
            bail!(
                "round {round}: only {} of {} informers watching again after 300 s",
                watching(&text),
                args.informers
            );
        };
        let cpu = super::ProcUsage::of_pid(pid);
        let lists = super::metric_sum(
            &text,
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "configmaps")],
        );
        println!("round {round}: server killed and started again");
        line(
            "new server up (serving)",
            format!("{:.3} s", up.as_secs_f64()),
        );
        line(
            "every informer watching again",
            format!("{:.3} s after the kill", all_watching.as_secs_f64()),
        );
        line("relists (LIST requests)", format!("{lists}"));
        line(
            "new server's CPU until then",
            cpu.map_or("n/a".to_string(), |c| format!("{:.3} s", c.cpu_secs)),
        );
        line("new server's memory", super::fmt_usage(cpu));
        results.push(serde_json::json!({
            "round": round,
            "server_up_secs": super::round3(up.as_secs_f64()),
            "all_watching_secs": super::round3(all_watching.as_secs_f64()),
            "relists": lists,
            "server_cpu_secs": cpu.map(|c| super::round3(c.cpu_secs)),
            "server_memory": super::usage_json(cpu),
        }));
    }
    for inf in &informers {
        inf.stop();
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "reconnect-storm",
            "informers": args.informers,
            "objects": args.objects,
            "rounds": results,
        })
    );
    Ok(())
}
