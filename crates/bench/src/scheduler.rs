//! `listwatch bench scheduler-algorithm`: the scheduler's decisions per second over a
//! simulated cluster, with no server and the binding stubbed (measured in this process).
//!
//! The cluster: `--nodes` nodes of 16 to 64 CPUs (4 GiB per CPU, 110 pods each) in three
//! zones, one in twenty tainted `dedicated=infra:NoSchedule`; `--pods` pods of 100 to 500
//! millicores and 128 to 512 MiB, ten per ReplicaSet (so the spreading score has work),
//! one in ten with a zone `nodeSelector`, one in twenty tolerating the taint, one in a
//! hundred asking for a host port.
//!
//! Two figures:
//! - `algorithm`: the decision alone, on one thread — filter and score every node, pick
//!   one, assume the pod there (the cache's per-node totals, per-owner counts and host
//!   ports updated) and mark its binding done: decisions per second, and the latency of one
//!   decision (p50, p99).
//! - `loop`: the whole scheduler (`Scheduler::run`) on a 2-worker runtime, fed by in-memory
//!   informers holding the pods and nodes, with a binder that accepts at once: pods bound
//!   per second from the first decision to the last binding (queue, decision, binding tasks,
//!   `Scheduled` events to a no-op sink). The informers' initial sync is timed apart.
//!
//! `listwatch bench scheduler-end-to-end` measures the scheduler against a spawned server
//! (or `--server`): `--nodes` nodes are created through the API, then `--pods` pending pods,
//! then `Scheduler::new` is started in this process and timed until every pod is bound
//! (bindings accepted by the server): pods per second from the first decision, with the
//! CPU time of this process (the scheduler) and of the server.

use super::creates::{create_pods, CreateLimit};
use super::{
    ensure_namespace, fmt_usage, line, round3, run_id, ProcUsage, ServerOpts, Target,
    BENCH_NAMESPACE,
};
use anyhow::{bail, Context as _};
use clap::Args;
use client::cache::FakeListerWatcher;
use client::clock::RealClock;
use client::rest::resource::{NODES, PODS};
use client::rest::{Api, Client, Config, ListParams, PostParams};
use controllers::scheduler::algorithm::{Algorithm, TieBreaker};
use controllers::scheduler::assume_cache::SchedulerCache;
use controllers::scheduler::binder::{BoxFuture, PodTarget, PodWriter, WriteError};
use controllers::scheduler::events::EventSink;
use controllers::scheduler::pod_info::PodInfo;
use controllers::scheduler::{EventType, Scheduler, SchedulerConfig, SchedulerInformers};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `listwatch bench scheduler-algorithm`.
#[derive(Args, Debug, Clone)]
pub struct SchedulerAlgorithmArgs {
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods to schedule.
    #[arg(long, default_value_t = 20_000)]
    pub pods: usize,
    /// Skip the whole-scheduler (`loop`) figure.
    #[arg(long)]
    pub algorithm_only: bool,
}

fn node(i: usize) -> Arc<Node> {
    let cpus = [16, 32, 48, 64][i % 4];
    let mut spec = json!({});
    if i % 20 == 7 {
        spec = json!({"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]});
    }
    let v = json!({
        "metadata": {"name": format!("node-{i:05}"), "uid": format!("node-uid-{i}"),
            "labels": {"topology.kubernetes.io/zone": format!("z{}", i % 3),
                       "kubernetes.io/hostname": format!("node-{i:05}")}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpus.to_string(), "memory": format!("{}Gi", cpus * 4),
                            "ephemeral-storage": "200Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]},
    });
    Arc::new(serde_json::from_value(v).expect("a node"))
}

fn pod(i: usize) -> Arc<Pod> {
    let rs = i / 10;
    let mut spec = json!({
        "schedulerName": "default-scheduler",
        "containers": [{"name": "app", "image": "app:1",
            "resources": {"requests": {"cpu": format!("{}m", 100 + 50 * (i % 9)),
                                       "memory": format!("{}Mi", 128 + 64 * (i % 7))}}}],
    });
    if i % 10 == 3 {
        spec["nodeSelector"] = json!({"topology.kubernetes.io/zone": format!("z{}", rs % 3)});
    }
    if i % 20 == 5 {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    if i % 100 == 9 {
        spec["containers"][0]["ports"] =
            json!([{"containerPort": 80, "hostPort": 8000 + (i / 100) % 50}]);
    }
    let v = json!({
        "metadata": {"name": format!("pod-{i:06}"), "namespace": "bench",
            "uid": format!("pod-uid-{i}"), "resourceVersion": (i + 1).to_string(),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("rs-{rs}"), "uid": format!("rs-uid-{rs}"), "controller": true}]},
        "spec": spec,
    });
    Arc::new(serde_json::from_value(v).expect("a pod"))
}

/// The `p`-th percentile of sorted `xs`.
fn percentile(xs: &[u64], p: f64) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    let i = ((xs.len() - 1) as f64 * p).round() as usize;
    xs[i.min(xs.len() - 1)]
}

struct AlgorithmFigures {
    decisions_per_sec: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    unschedulable: usize,
}

/// The decision alone, on this thread.
fn algorithm_bench(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> AlgorithmFigures {
    let mut cache = SchedulerCache::new(None);
    for n in nodes {
        cache.add_or_update_node(Arc::clone(n));
    }
    let infos: Vec<Arc<PodInfo>> = pods
        .iter()
        .map(|p| Arc::new(PodInfo::new(Arc::clone(p))))
        .collect();
    let mut algorithm = Algorithm::new(TieBreaker::new(1));
    let mut latencies = Vec::with_capacity(infos.len());
    let mut unschedulable = 0;
    let started = Instant::now();
    for info in &infos {
        let t = Instant::now();
        match algorithm.schedule(&cache, info) {
            Ok(decision) => {
                // Assume, then "bind": the stubbed binding succeeds at once.
                let _ = cache.assume_pod(Arc::clone(info), &decision.node);
                cache.finish_binding(&info.uid, t);
            }
            Err(_) => unschedulable += 1,
        }
        latencies.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    AlgorithmFigures {
        decisions_per_sec: infos.len() as f64 / elapsed,
        mean_us: elapsed * 1e6 / infos.len().max(1) as f64,
        p50_us: percentile(&latencies, 0.50) as f64 / 1000.0,
        p99_us: percentile(&latencies, 0.99) as f64 / 1000.0,
        unschedulable,
    }
}

/// A binder that accepts every binding at once.
struct AcceptAll;

impl PodWriter for AcceptAll {
    fn bind(&self, _: &PodTarget, _: &str) -> BoxFuture<Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
    fn patch_status(
        &self,
        _: &PodTarget,
        _: serde_json::Value,
    ) -> BoxFuture<Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Drops every event.
struct NoEvents;

impl EventSink for NoEvents {
    fn pod_event(&self, _: &Pod, _: EventType, _: &str, _: String) {}
}

struct LoopFigures {
    sync_secs: f64,
    bound: u64,
    unschedulable: u64,
    pods_per_sec: f64,
}

/// The whole scheduler over in-memory informers.
async fn loop_bench(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> LoopFigures {
    let unassigned = Arc::new(FakeListerWatcher::<Pod>::new());
    for p in pods {
        unassigned.add(Arc::clone(p));
    }
    let node_source = Arc::new(FakeListerWatcher::<Node>::new());
    for n in nodes {
        node_source.add(Arc::clone(n));
    }
    let informers = SchedulerInformers::from_sources(
        unassigned,
        Arc::new(FakeListerWatcher::<Pod>::new()),
        node_source,
        RealClock::shared(),
    );
    let scheduler = Scheduler::from_parts(
        informers,
        Arc::new(AcceptAll),
        Arc::new(NoEvents),
        RealClock::shared(),
        SchedulerConfig {
            assumed_pod_ttl: None,
            seed: Some(1),
            ..SchedulerConfig::default()
        },
    );
    let handle = scheduler.handle();
    let started = Instant::now();
    let run = tokio::spawn(scheduler.run());
    let total = pods.len() as u64;
    let mut first: Option<Instant> = None;
    let mut first_bound = 0;
    let deadline = started + Duration::from_secs(600);
    loop {
        let s = handle.stats();
        if first.is_none() && s.attempts > 0 {
            first = Some(Instant::now());
            first_bound = s.bound + s.unschedulable;
        }
        if s.bound + s.unschedulable >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let done = Instant::now();
    run.abort();
    let s = handle.stats();
    let first = first.unwrap_or(done);
    let decided = (s.bound + s.unschedulable).saturating_sub(first_bound);
    LoopFigures {
        sync_secs: first.duration_since(started).as_secs_f64(),
        bound: s.bound,
        unschedulable: s.unschedulable,
        pods_per_sec: decided as f64 / done.duration_since(first).as_secs_f64().max(1e-9),
    }
}

/// Runs the benchmark and prints its figures.
pub fn run(args: SchedulerAlgorithmArgs) -> anyhow::Result<()> {
    let nodes: Vec<Arc<Node>> = (0..args.nodes).map(node).collect();
    let pods: Vec<Arc<Pod>> = (0..args.pods).map(pod).collect();
    println!(
        "scheduler-algorithm: {} nodes, {} pods (binding stubbed, no server)",
        args.nodes, args.pods
    );
    let a = algorithm_bench(&nodes, &pods);
    println!("algorithm (one thread: filter + score every node, assume):");
    line("decisions/s", format!("{:.0}", a.decisions_per_sec));
    line("mean per decision", format!("{:.1} µs", a.mean_us));
    line(
        "p50 / p99",
        format!("{:.1} µs / {:.1} µs", a.p50_us, a.p99_us),
    );
    line("unschedulable", a.unschedulable);
    let mut json = json!({
        "bench": "scheduler-algorithm",
        "nodes": args.nodes,
        "pods": args.pods,
        "algorithm_decisions_per_sec": a.decisions_per_sec.round(),
        "algorithm_mean_us": round3(a.mean_us),
        "algorithm_p50_us": round3(a.p50_us),
        "algorithm_p99_us": round3(a.p99_us),
        "algorithm_unschedulable": a.unschedulable,
    });
    if !args.algorithm_only {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let l = rt.block_on(loop_bench(&nodes, &pods));
        println!("loop (Scheduler::run on 2 workers, in-memory informers, instant binder):");
        line("informer sync", format!("{:.3} s", l.sync_secs));
        line(
            "pods/s (decided and bound)",
            format!("{:.0}", l.pods_per_sec),
        );
        line(
            "bound / unschedulable",
            format!("{} / {}", l.bound, l.unschedulable),
        );
        json["loop_sync_secs"] = json!(round3(l.sync_secs));
        json["loop_pods_per_sec"] = json!(l.pods_per_sec.round());
        json["loop_bound"] = json!(l.bound);
        json["loop_unschedulable"] = json!(l.unschedulable);
    }
    println!("{json}");
    Ok(())
}

/// Options of `listwatch bench scheduler-end-to-end`.
#[derive(Args, Debug, Clone)]
pub struct SchedulerEndToEndArgs {
    /// Nodes to create (each 64 CPUs, 256 GiB, 110 pods).
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// Pending pods to create before the scheduler starts.
    #[arg(long, default_value_t = 5000)]
    pub pods: usize,
    /// Concurrent connections creating the pods.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// The scheduler's `max_in_flight_bindings`.
    #[arg(long, default_value_t = 256)]
    pub in_flight: usize,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// Runs `scheduler-end-to-end` on a 2-worker runtime.
pub fn run_end_to_end(args: SchedulerEndToEndArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(end_to_end(args))
}

async fn end_to_end(args: SchedulerEndToEndArgs) -> anyhow::Result<()> {
    let target = Target::start(&args.target)?;
    ensure_namespace(target.addr).await?;
    let client = Client::new(Config::new(&format!("http://{}", target.addr))?)?;
    let prefix = format!("lwbs-{}-", run_id());
    let nodes: Api<Node> = Api::all(client.clone(), NODES);
    for i in 0..args.nodes {
        let name = format!("{prefix}node-{i:05}");
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        nodes.create(&PostParams::default(), &node).await?;
        let status = json!({"status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti", "pods": "110"},
            "capacity": {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}});
        client
            .request_bytes(
                http::Method::PATCH,
                &format!("{}/status", NODES.item_path(None, &name)),
                Some((
                    serde_json::to_vec(&status)?.into(),
                    "application/merge-patch+json",
                )),
            )
            .await
            .with_context(|| format!("reporting the status of node {name}"))?;
    }
    let created = create_pods(
        target.addr,
        args.clients,
        1024,
        &format!("{prefix}pod-"),
        CreateLimit::Count(args.pods),
    )
    .await?;
    if created.created as usize != args.pods {
        bail!(
            "only {} of {} pods created: {:?}",
            created.created,
            args.pods,
            created.first_error
        );
    }
    println!(
        "scheduler-end-to-end: {} nodes, {} pending pods ({} bindings in flight at most)",
        args.nodes, args.pods, args.in_flight
    );
    let server_before = target.usage();
    let me_before = ProcUsage::of_self();
    let scheduler = Scheduler::new(
        client.clone(),
        SchedulerConfig {
            max_in_flight_bindings: args.in_flight,
            ..SchedulerConfig::default()
        },
    );
    let handle = scheduler.handle();
    let started = Instant::now();
    let run = tokio::spawn(scheduler.run());
    let total = args.pods as u64;
    let mut first: Option<Instant> = None;
    let deadline = started + Duration::from_secs(600);
    loop {
        let s = handle.stats();
        if first.is_none() && s.attempts > 0 {
            first = Some(Instant::now());
        }
        if s.bound >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let done = Instant::now();
    let s = handle.stats();
    let me_after = ProcUsage::of_self();
    let server_after = target.usage();
    run.abort();
    let first = first.unwrap_or(done);
    let pods_per_sec = s.bound as f64 / done.duration_since(first).as_secs_f64().max(1e-9);
    // Check on the server that every pod has its node.
    let pods: Api<Pod> = Api::namespaced(client, PODS, BENCH_NAMESPACE);
    let listed = pods.list_all(&ListParams::default()).await?.items;
    let placed = listed
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        })
        .count();
    let cpu = |a: Option<ProcUsage>, b: Option<ProcUsage>| match (a, b) {
        (Some(a), Some(b)) => Some(b.cpu_secs - a.cpu_secs),
        _ => None,
    };
    let scheduler_cpu = cpu(me_before, me_after);
    let server_cpu = cpu(server_before, server_after);
    line(
        "informer sync (to first decision)",
        format!("{:.3} s", first.duration_since(started).as_secs_f64()),
    );
    line(
        "pods/s (first decision to last binding)",
        format!("{pods_per_sec:.0}"),
    );
    line(
        "bound / attempts / binding failures",
        format!("{} / {} / {}", s.bound, s.attempts, s.binding_failures),
    );
    line("pods with a node on the server", placed);
    line(
        "scheduler CPU",
        scheduler_cpu.map_or("n/a".into(), |c| format!("{c:.2} s")),
    );
    line(
        "server CPU",
        server_cpu.map_or("n/a".into(), |c| format!("{c:.2} s")),
    );
    line("server memory", fmt_usage(server_after));
    let json = json!({
        "bench": "scheduler-end-to-end",
        "nodes": args.nodes,
        "pods": args.pods,
        "in_flight": args.in_flight,
        "sync_secs": round3(first.duration_since(started).as_secs_f64()),
        "pods_per_sec": pods_per_sec.round(),
        "bound": s.bound,
        "binding_failures": s.binding_failures,
        "placed_on_server": placed,
        "scheduler_cpu_secs": scheduler_cpu.map(round3),
        "server_cpu_secs": server_cpu.map(round3),
    });
    println!("{json}");
    if placed != args.pods {
        bail!("{placed} of {} pods have a node on the server", args.pods);
    }
    Ok(())
}
