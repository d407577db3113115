//! `listwatch bench deployments`: issue 8's controller-manager benchmark. One `listwatch
//! up` with N simulated nodes; many Deployments applied at once; then a rolling update of
//! all of them at once.
//!
//! Figures: the time until every pod is Running (seen by a pod watcher) and every
//! Deployment Available (from the Deployments' status), pods Running per second, pod
//! startup latency (a pod's first appearance to Running, both seen by the watcher), the time
//! until every rollout is complete, and the largest surge a watcher saw — for each
//! Deployment, its pods that exist and are not being deleted, minus its replicas — against
//! the allowed `maxSurge` (25 %, Kubernetes' default). Also CPU-seconds, API writes per pod
//! and memory of the `up` process.
//!
//! `--layout processes` runs `listwatch serve`, `scheduler`, `node-agent` and
//! `controller-manager` as four processes instead, so that each component's CPU is its own.

use super::cluster::{
    component_kubeconfig, get, pods_resource_version, ready_nodes, watch_json, writes, Component,
    Layout,
};
use super::http::HttpConn;
use super::{fmt_usage, line, percentile, round3, ProcUsage, ServerProc, BENCH_NAMESPACE};
use anyhow::{bail, Context as _};
use clap::Args;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Options of `listwatch bench deployments`.
#[derive(Args, Debug, Clone)]
pub struct DeploymentsArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Deployments applied at once.
    #[arg(long, default_value_t = 100)]
    pub deployments: usize,
    /// Replicas of each.
    #[arg(long, default_value_t = 100)]
    pub replicas: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// The controller-manager's `--concurrent-replicaset-syncs` and
    /// `--concurrent-deployment-syncs` (kube-controller-manager's default, 5, unless given).
    #[arg(long, default_value_t = 5)]
    pub concurrent_syncs: usize,
    /// How the components run: one `listwatch up` (the issue's setting), or one process
    /// each, for each one's CPU.
    #[arg(long, value_enum, default_value_t = Layout::Up)]
    pub layout: Layout,
}

/// A measured process: its name, and its usage before creation, after it, and after the
/// rolling update.
struct Proc {
    name: &'static str,
    before: Option<ProcUsage>,
    mid: Option<ProcUsage>,
    after: Option<ProcUsage>,
}

impl Proc {
    /// CPU-seconds spent creating the pods.
    fn creation(&self) -> Option<f64> {
        super::cpu_delta(self.before, self.mid)
    }

    /// CPU-seconds spent in the rolling update.
    fn rollout(&self) -> Option<f64> {
        super::cpu_delta(self.mid, self.after)
    }
}

/// What the pod watcher saw.
#[derive(Default)]
struct Seen {
    /// First appearance of each pod (ns since the epoch).
    first: HashMap<String, u64>,
    /// When each pod was first seen Running.
    running: HashMap<String, u64>,
    /// The live (existing, not being deleted) pods of each Deployment, by pod name.
    live: HashMap<String, HashSet<String>>,
    /// The largest number of live pods any Deployment had.
    max_live: usize,
    /// At that moment, its live pods by `pod-template-hash`.
    max_live_by_hash: Vec<(String, usize)>,
}

fn deployment_body(name: &str, replicas: usize, image: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image,
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}
    }))
    .unwrap_or_default()
}

/// Deployments whose rollout is complete at `image`: every replica updated and available,
/// no old replica left, the latest generation observed.
async fn complete(addr: SocketAddr, replicas: usize, image: &str) -> anyhow::Result<usize> {
    let list: serde_json::Value = serde_json::from_slice(
        &get(
            addr,
            &format!("/apis/apps/v1/namespaces/{BENCH_NAMESPACE}/deployments"),
        )
        .await?,
    )?;
    let want = replicas as u64;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            let st = &d["status"];
            d["spec"]["template"]["spec"]["containers"][0]["image"] == image
                && st["observedGeneration"].as_u64() >= d["metadata"]["generation"].as_u64()
                && st["updatedReplicas"].as_u64() == Some(want)
                && st["availableReplicas"].as_u64() == Some(want)
                && st["replicas"].as_u64() == Some(want)
        })
        .count())
}

/// Runs the benchmark on its own multi-threaded runtime.
pub fn run(args: DeploymentsArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench(args))
}

async fn bench(args: DeploymentsArgs) -> anyhow::Result<()> {
    let nodes = args.nodes.to_string();
    let syncs = args.concurrent_syncs.to_string();
    let syncs_flags = [
        "--concurrent-replicaset-syncs".to_string(),
        syncs.clone(),
        "--concurrent-deployment-syncs".to_string(),
        syncs,
    ];
    let server = match args.layout {
        Layout::Up => {
            let mut up = vec!["up", "--nodes", &nodes];
            up.extend(syncs_flags.iter().map(String::as_str));
            ServerProc::spawn_command(&up, &[])?
        }
        Layout::Processes => ServerProc::spawn(&[])?,
    };
    let addr = server.addr;
    println!(
        "target: listwatch {} pid {} on http://{addr}, {} nodes",
        match args.layout {
            Layout::Up => "up",
            Layout::Processes => "serve",
        },
        server.pid(),
        args.nodes
    );
    let mut components = Vec::new();
    if args.layout == Layout::Processes {
        let tls = server
            .tls_addr
            .context("the server did not report its TLS address")?;
        let kc = component_kubeconfig(&server, tls)?;
        let flags = |command: &str, extra: &[String]| {
            let mut v = vec![command.to_string(), "--kubeconfig".into(), kc.clone()];
            v.extend_from_slice(extra);
            v
        };
        let log = |name: &str| server.dir.join(format!("{name}.log"));
        components.push(Component::spawn(
            "scheduler",
            &flags("scheduler", &[]),
            log("scheduler"),
        )?);
        components.push(Component::spawn(
            "node-agent",
            &flags("node-agent", &["--nodes".into(), nodes.clone()]),
            log("node-agent"),
        )?);
        components.push(Component::spawn(
            "controller-manager",
            &flags("controller-manager", &syncs_flags),
            log("controller-manager"),
        )?);
    }
    let component_usage = |components: &[Component]| -> Vec<Option<ProcUsage>> {
        components.iter().map(Component::usage).collect()
    };
    let started = Instant::now();
    while ready_nodes(addr).await?.1 < args.nodes {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the nodes were not all Ready and untainted within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    super::ensure_namespace(addr).await?;
    let rv = pods_resource_version(addr).await?;
    let epoch = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher = {
        let seen = seen.clone();
        let path = format!(
            "/api/v1/namespaces/{BENCH_NAMESPACE}/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=false"
        );
        tokio::spawn(async move {
            watch_json(addr, &path, epoch, |ev, now| {
                let obj = &ev["object"];
                let (Some(name), Some(app)) = (
                    obj["metadata"]["name"].as_str(),
                    obj["metadata"]["labels"]["app"].as_str(),
                ) else {
                    return Ok(());
                };
                let mut s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                s.first.entry(name.to_string()).or_insert(now);
                if obj["status"]["phase"] == "Running" {
                    s.running.entry(name.to_string()).or_insert(now);
                }
                let gone =
                    ev["type"] == "DELETED" || obj["metadata"]["deletionTimestamp"].is_string();
                let live = s.live.entry(app.to_string()).or_default();
                if gone {
                    live.remove(name);
                } else {
                    live.insert(name.to_string());
                }
                let n = live.len();
                if n > s.max_live {
                    s.max_live = n;
                    let mut by_hash: HashMap<String, usize> = HashMap::new();
                    for pod in &s.live[app] {
                        // Pod names are `DEPLOYMENT-HASH-SUFFIX`.
                        let hash = pod.rsplit_once('-').map_or("", |x| x.0).to_string();
                        *by_hash.entry(hash).or_default() += 1;
                    }
                    let mut v: Vec<(String, usize)> = by_hash.into_iter().collect();
                    v.sort();
                    s.max_live_by_hash = v;
                }
                Ok(())
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let usage_before = ProcUsage::of_pid(server.pid());
    let components_before = component_usage(&components);
    let writes_before = writes(addr).await?;

    // Phase 1: every Deployment applied at once.
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.clients.max(1) {
        let next = next.clone();
        let (count, replicas) = (args.deployments, args.replicas);
        tasks.push(tokio::spawn(async move {
            let mut conn = HttpConn::connect(addr).await?;
            let mut out = Vec::new();
            let path = format!("/apis/apps/v1/namespaces/{BENCH_NAMESPACE}/deployments");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return anyhow::Ok(());
                }
                let body = deployment_body(&format!("d{i:03}"), replicas, "nginx:1.27");
                let status = conn.request("POST", &path, Some(&body), &mut out).await?;
                if status != 201 {
                    bail!(
                        "creating d{i:03}: HTTP {status}: {}",
                        String::from_utf8_lossy(&out)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let created = epoch.elapsed();
    let pods = args.deployments * args.replicas;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut all_running = None;
    let all_available = loop {
        let running = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .running
            .len();
        if running >= pods && all_running.is_none() {
            all_running = Some(epoch.elapsed());
        }
        if all_running.is_some()
            && complete(addr, args.replicas, "nginx:1.27").await? >= args.deployments
        {
            break epoch.elapsed();
        }
        if Instant::now() > deadline || watcher.is_finished() {
            bail!("only {running} of {pods} pods Running after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let all_running = all_running.unwrap_or(all_available);
    let usage_mid = ProcUsage::of_pid(server.pid());
    let components_mid = component_usage(&components);
    let writes_mid = writes(addr).await?;
    let startup: Vec<f64> = {
        let s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let mut v: Vec<f64> = s
            .running
            .iter()
            .filter_map(|(n, at)| Some((*at as f64 - *s.first.get(n)? as f64) / 1e6))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let surge_before = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .max_live;

    // Phase 2: a rolling update of all of them at once.
    seen.lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .max_live = 0;
    let rollout_start = Instant::now();
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let patch =
        br#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:1.28"}]}}}}"#;
    for i in 0..args.deployments {
        let path = format!("/apis/apps/v1/namespaces/{BENCH_NAMESPACE}/deployments/d{i:03}");
        let status = conn
            .request_with_type(
                "PATCH",
                &path,
                patch,
                "application/strategic-merge-patch+json",
                &mut out,
            )
            .await?;
        if status != 200 {
            bail!(
                "updating d{i:03}: HTTP {status}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while complete(addr, args.replicas, "nginx:1.28").await? < args.deployments {
        if Instant::now() > deadline || watcher.is_finished() {
            bail!("the rollouts did not complete within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rollout = rollout_start.elapsed();
    let usage_after = ProcUsage::of_pid(server.pid());
    let components_after = component_usage(&components);
    let writes_after = writes(addr).await?;
    let (max_live, max_live_by_hash) = {
        let s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        (s.max_live, s.max_live_by_hash.clone())
    };
    watcher.abort();

    let max_surge = args.replicas.div_ceil(4); // 25 %, rounded up as Kubernetes does
    let p = |q: f64| percentile(&startup, q * 100.0).unwrap_or(f64::NAN);
    let mut procs = vec![Proc {
        name: match args.layout {
            Layout::Up => "up (everything)",
            Layout::Processes => "server",
        },
        before: usage_before,
        mid: usage_mid,
        after: usage_after,
    }];
    for (i, c) in components.iter().enumerate() {
        procs.push(Proc {
            name: c.name,
            before: components_before[i],
            mid: components_mid[i],
            after: components_after[i],
        });
    }
    // Sums over every process; none when one could not be read.
    let creation_cpu: Option<f64> = procs.iter().map(Proc::creation).sum();
    let rollout_cpu: Option<f64> = procs.iter().map(Proc::rollout).sum();
    println!(
        "{} Deployments x {} replicas onto {} nodes, {}, {} concurrent syncs",
        args.deployments,
        args.replicas,
        args.nodes,
        match args.layout {
            Layout::Up => "one listwatch up",
            Layout::Processes => "one process per component",
        },
        args.concurrent_syncs
    );
    line("applied in", format!("{:.2} s", created.as_secs_f64()));
    line(
        "all pods Running after",
        format!("{:.2} s", all_running.as_secs_f64()),
    );
    line(
        "pods Running per second",
        format!("{:.0}", pods as f64 / all_running.as_secs_f64()),
    );
    line(
        "all Deployments Available after",
        format!("{:.2} s", all_available.as_secs_f64()),
    );
    line(
        "pod startup (appeared -> Running)",
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            p(0.5),
            p(0.99),
            p(1.0)
        ),
    );
    line(
        "largest Deployment while scaling up",
        format!("{surge_before} pods (replicas {})", args.replicas),
    );
    line(
        "API writes per pod (creation)",
        format!("{:.2}", (writes_mid - writes_before) / pods as f64),
    );
    let per_1000 = |c: f64| c / pods as f64 * 1000.0;
    line(
        "CPU (creation)",
        creation_cpu.map_or("n/a".into(), |c| {
            format!("{c:.2} s, {:.2} s per 1,000 pods", per_1000(c))
        }),
    );
    if procs.len() > 1 {
        for p in &procs {
            line(
                &format!("  {}", p.name),
                p.creation().map_or("n/a".into(), |c| {
                    format!("{c:.2} s, {:.2} s per 1,000 pods", per_1000(c))
                }),
            );
        }
    }
    line(
        "rolling update of all",
        format!("{:.2} s", rollout.as_secs_f64()),
    );
    line(
        "largest surge seen",
        format!(
            "{} pods over replicas (maxSurge {max_surge}; by ReplicaSet then: {max_live_by_hash:?}){}",
            max_live.saturating_sub(args.replicas),
            if max_live > args.replicas + max_surge {
                "  ** BEYOND maxSurge **"
            } else {
                ""
            }
        ),
    );
    line(
        "API writes (rolling update)",
        format!("{:.0}", writes_after - writes_mid),
    );
    line(
        "CPU (rolling update)",
        rollout_cpu.map_or("n/a".into(), |c| format!("{c:.2} s")),
    );
    if procs.len() > 1 {
        for p in &procs {
            line(
                &format!("  {}", p.name),
                p.rollout().map_or("n/a".into(), |c| format!("{c:.2} s")),
            );
        }
    }
    for p in &procs {
        line(&format!("memory, {}", p.name), fmt_usage(p.after));
    }
    let by_component: serde_json::Map<String, serde_json::Value> = procs
        .iter()
        .map(|p| {
            (
                p.name.to_string(),
                serde_json::json!({
                    "cpu_secs_creation": p.creation().map(round3),
                    "cpu_secs_rollout": p.rollout().map(round3),
                    "memory": super::usage_json(p.after),
                }),
            )
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "bench": "deployments",
            "concurrent_syncs": args.concurrent_syncs,
            "nodes": args.nodes,
            "deployments": args.deployments,
            "replicas": args.replicas,
            "applied_secs": round3(created.as_secs_f64()),
            "all_running_secs": round3(all_running.as_secs_f64()),
            "running_per_sec": round3(pods as f64 / all_running.as_secs_f64()),
            "all_available_secs": round3(all_available.as_secs_f64()),
            "startup_ms": {"p50": round3(p(0.5)), "p99": round3(p(0.99)), "max": round3(p(1.0))},
            "rollout_secs": round3(rollout.as_secs_f64()),
            "max_surge_seen": max_live.saturating_sub(args.replicas),
            "max_surge_allowed": max_surge,
            "layout": format!("{:?}", args.layout),
            "cpu_secs_creation": creation_cpu.map(round3),
            "cpu_secs_rollout": rollout_cpu.map(round3),
            "memory": super::usage_json(usage_after),
            "components": by_component,
        })
    );
    Ok(())
}
