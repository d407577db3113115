//! `listwatch bench cluster`: the seeds' pod-creation flow at scale. N simulated nodes, a
//! scheduler and the API server; clients create pods; a watcher records when each pod is
//! bound and when it is Running.
//!
//! Figures: pods scheduled and Running per second (from the first create to the last pod
//! bound / Running), pod startup latency (a create's acknowledgement to the watcher seeing
//! the pod Running: the SLI of Kubernetes' pod-startup SLO), API writes per pod (from
//! `apiserver_request_total`), and CPU-seconds per 1,000 pods and memory of each process.
//!
//! `--layout processes` (the default) runs `listwatch serve`, `listwatch scheduler` and
//! `listwatch node-agent` as three processes, so that each one's CPU is its own;
//! `--layout up` runs them all in one `listwatch up`. `--scheduler-binary` runs a real
//! kube-scheduler in place of ours, measured the same way, for a side-by-side comparison.

use super::http::{ChunkedDecoder, HttpConn};
use super::{
    fmt_usage, line, percentile, round3, sibling_exe, ProcUsage, ServerProc, BENCH_NAMESPACE,
};
use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How the components run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// `serve`, `scheduler` and `node-agent` as three processes.
    Processes,
    /// Everything in one `listwatch up`.
    Up,
}

/// Options of `listwatch bench cluster`.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods created.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Offered creates per second, all clients together (0: as fast as they go).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// How the components run.
    #[arg(long, value_enum, default_value_t = Layout::Processes)]
    pub layout: Layout,
    /// Run this kube-scheduler binary (1.24 or later) in place of `listwatch scheduler`,
    /// without leader election or a serving port and with its client's rate limits lifted
    /// as ours has none (`--layout processes` only).
    #[arg(long)]
    pub scheduler_binary: Option<std::path::PathBuf>,
    /// Also write the pod startup latencies' distribution (a histogram) as an SVG to this
    /// file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
}

/// A child process of the benchmark, killed on drop.
/// A component process of the benchmark, killed when dropped.
pub(super) struct Component {
    pub(super) name: &'static str,
    child: Child,
}

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Component {
    /// `listwatch ARGS`, its stderr in `log`.
    pub(super) fn spawn(
        name: &'static str,
        args: &[String],
        log: std::path::PathBuf,
    ) -> anyhow::Result<Self> {
        Self::spawn_exe(name, &sibling_exe("listwatch")?, args, log)
    }

    /// `EXE ARGS`, its stderr in `log`.
    fn spawn_exe(
        name: &'static str,
        exe: &std::path::Path,
        args: &[String],
        log: std::path::PathBuf,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(&log)?;
        let child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawning {name} ({})", exe.display()))?;
        Ok(Component { name, child })
    }

    /// Its CPU and memory so far.
    pub(super) fn usage(&self) -> Option<ProcUsage> {
        ProcUsage::of_pid(self.child.id())
    }
}

/// Writes the kubeconfig the components authenticate with, as any client would (the
/// server's CA and a token, for its TLS address `tls`), into the server's directory, and
/// returns its path.
pub(super) fn component_kubeconfig(server: &ServerProc, tls: SocketAddr) -> anyhow::Result<String> {
    let kubeconfig = server.dir.join("kubeconfig");
    let out = Command::new(sibling_exe("listwatch")?)
        .args([
            "kubeconfig",
            "--server",
            &format!("https://{tls}"),
            "--data-dir",
        ])
        .arg(server.dir.join("data"))
        .output()?;
    if !out.status.success() {
        bail!(
            "listwatch kubeconfig: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(&kubeconfig, &out.stdout)?;
    Ok(kubeconfig.display().to_string())
}

/// When each pod was bound and seen Running, by name (nanoseconds since the epoch).
#[derive(Default)]
struct Seen {
    bound: HashMap<String, u64>,
    running: HashMap<String, u64>,
}

pub(super) async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<Vec<u8>> {
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let status = conn.request("GET", path, None, &mut out).await?;
    if status != 200 {
        bail!("GET {path}: HTTP {status}");
    }
    Ok(out)
}

/// Write requests the server has answered so far (every verb that changes state).
pub(super) async fn writes(addr: SocketAddr) -> anyhow::Result<f64> {
    let text = String::from_utf8_lossy(&get(addr, "/metrics").await?).into_owned();
    Ok(["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|v| super::metric_sum(&text, "apiserver_request_total", &[("verb", v)]))
        .sum())
}

/// Nodes whose Ready condition is True, and those of them that no longer carry the
/// not-ready taint the server gives every new node (the node lifecycle controller lifts it).
pub(super) async fn ready_nodes(addr: SocketAddr) -> anyhow::Result<(usize, usize)> {
    let list: serde_json::Value = serde_json::from_slice(&get(addr, "/api/v1/nodes").await?)?;
    let (mut ready, mut schedulable) = (0, 0);
    for n in list["items"].as_array().into_iter().flatten() {
        let is_ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        let tainted = n["spec"]["taints"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["key"] == "node.kubernetes.io/not-ready")
        });
        ready += usize::from(is_ready);
        schedulable += usize::from(is_ready && !tainted);
    }
    Ok((ready, schedulable))
}

/// The resourceVersion of a list of the benchmark's pods: where a watch that misses nothing
/// of what follows starts.
pub(super) async fn pods_resource_version(addr: SocketAddr) -> anyhow::Result<u64> {
    let list: serde_json::Value = serde_json::from_slice(
        &get(
            addr,
            &format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods?limit=1"),
        )
        .await?,
    )?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .context("no list resourceVersion")
}

/// Streams the watch at `path` (a JSON watch URL) and hands each event to `on_event` with
/// its arrival time (nanoseconds since `epoch`), until the stream ends (an error).
pub(super) async fn watch_json(
    addr: SocketAddr,
    path: &str,
    epoch: Instant,
    mut on_event: impl FnMut(serde_json::Value, u64) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
    stream.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut dec = ChunkedDecoder::new();
    let mut line = Vec::new();
    let mut in_body = false;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            bail!("the watch {path} ended");
        }
        let now = super::nanos_since(epoch);
        let mut data = &buf[..n];
        if !in_body {
            head.extend_from_slice(data);
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let rest = head.split_off(end + 4);
            head.clear();
            in_body = true;
            let mut lines = Vec::new();
            dec.feed(&rest, |d| lines.extend_from_slice(d))?;
            line.extend_from_slice(&lines);
            data = &[];
        }
        dec.feed(data, |d| line.extend_from_slice(d))?;
        while let Some(pos) = line.iter().position(|b| *b == b'\n') {
            let ev: serde_json::Value = serde_json::from_slice(&line[..pos]).unwrap_or_default();
            line.drain(..=pos);
            on_event(ev, now)?;
        }
    }
}

/// Watches the benchmark's pods from `rv`, recording binding and Running times.
async fn watch_pods(
    addr: SocketAddr,
    rv: u64,
    epoch: Instant,
    seen: Arc<Mutex<Seen>>,
) -> anyhow::Result<()> {
    let path = format!(
        "/api/v1/namespaces/{BENCH_NAMESPACE}/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=false"
    );
    watch_json(addr, &path, epoch, |ev, now| {
        let obj = &ev["object"];
        let Some(name) = obj["metadata"]["name"].as_str() else {
            return Ok(());
        };
        let mut s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        if obj["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
        {
            s.bound.entry(name.to_string()).or_insert(now);
        }
        if obj["status"]["phase"] == "Running" {
            s.running.entry(name.to_string()).or_insert(now);
        }
        Ok(())
    })
    .await
}

fn pod_body(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-cluster"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .unwrap_or_default()
}

/// The SVG histogram of the pods' startup latencies (`sorted_ms`, ascending), its caption
/// naming the run's parameters and percentiles.
fn startup_histogram(args: &ClusterArgs, sorted_ms: &[f64]) -> String {
    let p = |q: f64| percentile(sorted_ms, q).unwrap_or(f64::NAN);
    let caption = format!(
        "listwatch bench cluster --nodes {} --pods {} --clients {}{} --layout {}{}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        args.nodes,
        args.pods,
        args.clients,
        if args.rate > 0 { format!(" --rate {}", args.rate) } else { String::new() },
        match args.layout {
            Layout::Processes => "processes",
            Layout::Up => "up",
        },
        if args.scheduler_binary.is_some() { " (kube-scheduler)" } else { "" },
        p(50.0),
        p(99.0),
        p(100.0),
    );
    super::svg::histogram(
        super::svg::Labels {
            title: "Pod startup latency (create acknowledged to Running seen)",
            x: "startup latency, ms",
            y: "pods",
            caption: &caption,
        },
        &super::svg::bin_values(sorted_ms, 50),
    )
}

/// Runs the benchmark on its own multi-threaded runtime.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench(args))
}

async fn bench(args: ClusterArgs) -> anyhow::Result<()> {
    if args.scheduler_binary.is_some() && args.layout != Layout::Processes {
        bail!("--scheduler-binary needs --layout processes");
    }
    let nodes = args.nodes.to_string();
    let server = match args.layout {
        Layout::Processes => ServerProc::spawn(&[])?,
        Layout::Up => ServerProc::spawn_command(&["up", "--nodes", &nodes], &[])?,
    };
    let addr = server.addr;
    let tls = server
        .tls_addr
        .context("the server did not report its TLS address")?;
    println!(
        "target: listwatch {} pid {} on http://{addr} (TLS {tls})",
        match args.layout {
            Layout::Processes => "serve",
            Layout::Up => "up",
        },
        server.pid()
    );
    let kc = component_kubeconfig(&server, tls)?;
    let mut components = Vec::new();
    if args.layout == Layout::Processes {
        let log = server.dir.join("scheduler.log");
        components.push(match &args.scheduler_binary {
            Some(exe) => Component::spawn_exe(
                "kube-scheduler",
                exe,
                &[
                    format!("--kubeconfig={kc}"),
                    "--leader-elect=false".into(),
                    "--kube-api-qps=10000".into(),
                    "--kube-api-burst=10000".into(),
                    "--bind-address=127.0.0.1".into(),
                    "--secure-port=0".into(),
                    format!("--cert-dir={}", server.dir.join("kube-scheduler").display()),
                ],
                log,
            )?,
            None => Component::spawn(
                "scheduler",
                &[
                    "scheduler".into(),
                    "--kubeconfig".into(),
                    kc.clone(),
                    "--leader-elect=false".into(),
                ],
                log,
            )?,
        });
        components.push(Component::spawn(
            "node-agent",
            &[
                "node-agent".into(),
                "--kubeconfig".into(),
                kc.clone(),
                "--nodes".into(),
                nodes.clone(),
            ],
            server.dir.join("node-agent.log"),
        )?);
        // New nodes carry the not-ready taint until the node lifecycle controller lifts it.
        components.push(Component::spawn(
            "controller-manager",
            &[
                "controller-manager".into(),
                "--kubeconfig".into(),
                kc,
                "--controllers".into(),
                "nodelifecycle".into(),
                "--leader-elect=false".into(),
            ],
            server.dir.join("controller-manager.log"),
        )?);
    }
    let started = Instant::now();
    let mut all_ready = None;
    loop {
        let (ready, schedulable) = ready_nodes(addr).await?;
        if ready >= args.nodes && all_ready.is_none() {
            all_ready = Some(started.elapsed());
        }
        if schedulable >= args.nodes {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the nodes were not all Ready and untainted within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{} nodes Ready {:.2} s after the components started, without the not-ready taint {:.2} s",
        args.nodes,
        all_ready.unwrap_or_default().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    super::ensure_namespace(addr).await?;
    let rv = pods_resource_version(addr).await?;
    let epoch = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher = tokio::spawn(watch_pods(addr, rv, epoch, seen.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let usage_before = (
        ProcUsage::of_pid(server.pid()),
        components.iter().map(|c| c.usage()).collect::<Vec<_>>(),
    );
    let writes_before = writes(addr).await?;
    // Creators: `clients` keep-alive connections, open loop at `rate` if given.
    let next = Arc::new(AtomicUsize::new(0));
    let acks = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let mut tasks = Vec::new();
    for _ in 0..args.clients.max(1) {
        let (next, acks) = (next.clone(), acks.clone());
        let (pods, rate) = (args.pods, args.rate);
        tasks.push(tokio::spawn(async move {
            let mut conn = HttpConn::connect(addr).await?;
            let mut out = Vec::new();
            let path = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    return anyhow::Ok(());
                }
                if rate > 0 {
                    let at = epoch + Duration::from_secs_f64(i as f64 / rate as f64);
                    tokio::time::sleep_until(at.into()).await;
                }
                let name = format!("p-{i:06}");
                let status = conn
                    .request("POST", &path, Some(&pod_body(&name)), &mut out)
                    .await?;
                if status != 201 {
                    bail!(
                        "creating {name}: HTTP {status}: {}",
                        String::from_utf8_lossy(&out)
                    );
                }
                let now = super::nanos_since(epoch);
                acks.lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .insert(name, now);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let created = epoch.elapsed();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let running = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .running
            .len();
        if running >= args.pods {
            break;
        }
        if Instant::now() > deadline || watcher.is_finished() {
            bail!("only {running} of {} pods Running after 300 s", args.pods);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_running = epoch.elapsed();
    let usage_after = (
        ProcUsage::of_pid(server.pid()),
        components.iter().map(|c| c.usage()).collect::<Vec<_>>(),
    );
    let writes_after = writes(addr).await?;
    watcher.abort();

    let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let acks = acks.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let last_bound = seen.bound.values().copied().max().unwrap_or(0) as f64 / 1e9;
    let last_running = seen.running.values().copied().max().unwrap_or(0) as f64 / 1e9;
    let mut startup: Vec<f64> = seen
        .running
        .iter()
        .filter_map(|(name, at)| Some((*at as f64 - *acks.get(name)? as f64) / 1e6))
        .collect();
    startup.sort_by(f64::total_cmp);
    let p = |q: f64| percentile(&startup, q * 100.0).unwrap_or(f64::NAN);
    let pods = args.pods as f64;
    let per_1000 = |before: Option<ProcUsage>, after: Option<ProcUsage>| {
        super::cpu_delta(before, after).map(|c| c / pods * 1000.0)
    };
    println!(
        "{} pods by {} clients{} onto {} nodes ({:?} layout{})",
        args.pods,
        args.clients,
        if args.rate > 0 {
            format!(" at {} creates/s offered", args.rate)
        } else {
            String::new()
        },
        args.nodes,
        args.layout,
        if args.scheduler_binary.is_some() {
            ", kube-scheduler"
        } else {
            ""
        }
    );
    line("created in", format!("{:.2} s", created.as_secs_f64()));
    line(
        "pods scheduled per second",
        format!("{:.0}", pods / last_bound),
    );
    line(
        "pods Running per second",
        format!("{:.0}", pods / last_running),
    );
    line(
        "all Running after",
        format!("{:.2} s", all_running.as_secs_f64()),
    );
    line(
        "startup (create ack -> Running seen)",
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            p(0.5),
            p(0.99),
            p(1.0)
        ),
    );
    line(
        "API writes per pod",
        format!("{:.2}", (writes_after - writes_before) / pods),
    );
    let mut procs = vec![(
        match args.layout {
            Layout::Processes => "server",
            Layout::Up => "up (everything)",
        },
        usage_before.0,
        usage_after.0,
    )];
    for (i, c) in components.iter().enumerate() {
        procs.push((c.name, usage_before.1[i], usage_after.1[i]));
    }
    let mut json_procs = Vec::new();
    for (name, before, after) in &procs {
        line(
            &format!("{name} CPU per 1,000 pods"),
            per_1000(*before, *after).map_or("n/a".into(), |c| format!("{c:.2} s")),
        );
        line(&format!("{name} memory"), fmt_usage(*after));
        json_procs.push(serde_json::json!({
            "process": name,
            "cpu_secs_per_1000_pods": per_1000(*before, *after).map(round3),
            "memory": super::usage_json(*after),
        }));
    }
    if let Some(path) = &args.svg {
        let doc = startup_histogram(&args, &startup);
        std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))?;
        line("startup histogram", path.display());
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "cluster",
            "layout": format!("{:?}", args.layout),
            "scheduler": if args.scheduler_binary.is_some() { "kube-scheduler" } else { "listwatch" },
            "nodes": args.nodes,
            "pods": args.pods,
            "clients": args.clients,
            "offered_rate": args.rate,
            "created_secs": round3(created.as_secs_f64()),
            "scheduled_per_sec": round3(pods / last_bound),
            "running_per_sec": round3(pods / last_running),
            "startup_ms": {"p50": round3(p(0.5)), "p99": round3(p(0.99)), "max": round3(p(1.0))},
            "api_writes_per_pod": round3((writes_after - writes_before) / pods),
            "processes": json_procs,
        })
    );
    Ok(())
}
