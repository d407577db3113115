//! `listwatch bench`: load generators that print figures (they are measurements, not tests).
//!
//! Every benchmark either starts its own `listwatch serve` child on a fresh temporary data
//! directory (and then also reports the server's CPU time and memory, read from `/proc`), or
//! targets a running server given with `--server URL`. The load generator is kept light
//! because it shares the machine with the server: a single-threaded tokio runtime, a raw
//! HTTP/1.1 client ([`http`]), and no JSON parsing on the hot paths.
//!
//! Each benchmark prints readable lines and then one final line of JSON with every figure.
//!
//! The benchmarks measure the other crates through their public API only, and nothing but
//! the `listwatch` binary depends on this crate. They run in this crate's `listwatch-bench`
//! binary because of memory allocators: the server is linked with mimalloc (measured faster
//! on its write path: docs/benchmark-history.md, session 6), while the client library's
//! benchmarks must measure what a library user gets by default — the system allocator.
//! `listwatch bench …` runs `listwatch-bench …` from its own directory, and the benchmarks
//! spawn `listwatch serve` from theirs, so both binaries are built into one directory:
//! `cargo build --release -p listwatch -p bench`. `listwatch bench --mimalloc …` runs them
//! inside `listwatch` instead (through [`run`]), to measure a client linked with mimalloc.
#![warn(missing_docs)]

pub mod cluster;
pub mod crd_schema;
pub mod creates;
pub mod deployments;
pub mod encode;
pub mod etcd;
pub mod fanout;
pub mod fanout_plot;
pub mod http;
pub mod informer;
pub mod kinds;
pub mod list;
pub mod patch_memory;
pub mod reconnect;
pub mod scheduler;
pub mod svg;
pub mod tcp_floor;
pub mod testenv_start;
pub mod watch_stream;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use http::HttpConn;
use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The namespace every benchmark works in.
pub const BENCH_NAMESPACE: &str = "bench";

/// How long a spawned server may take to print its "serving on" line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The `listwatch bench` sub-subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Watch fan-out: N watchers on one namespace while a writer updates pods at a fixed rate.
    Fanout(fanout::FanoutArgs),
    /// Server CPU against watchers, as an SVG, from the JSON lines of `bench fanout` runs.
    FanoutPlot(fanout_plot::FanoutPlotArgs),
    /// List throughput: create many pods, then time full lists from the cache and consistent.
    List(list::ListArgs),
    /// Create throughput and latency with many concurrent keep-alive clients.
    Creates(creates::CreatesArgs),
    /// What a custom resource's structural schema costs per write (no server): pruning,
    /// defaulting and validation, ns per object.
    CrdSchema(crd_schema::CrdSchemaArgs),
    /// JSON encoding cost per watch event (no server): serde_json vs the cached-bytes path.
    Encode(encode::EncodeArgs),
    /// The etcd backend side by side with raw etcd puts and the embedded store, on one etcd.
    Etcd(etcd::EtcdArgs),
    /// Client informer initial sync of many pods: time to has_synced, memory per object,
    /// relist peak.
    InformerSync(informer::InformerSyncArgs),
    /// Client informer events/s: in process (fake source) and from a server's watch.
    InformerEvents(informer::InformerEventsArgs),
    /// An operator test's server: `testenv` started with N CRDs, time to ready and memory.
    Testenv(testenv_start::TestenvArgs),
    /// The kernel's CPU cost per loopback TCP write (no server): the floor under per-event,
    /// per-watcher writes.
    TcpFloor(tcp_floor::TcpFloorArgs),
    /// Many informers, the server killed and started again: time until all watch again,
    /// relists, the new server's CPU.
    ReconnectStorm(reconnect::ReconnectArgs),
    /// Small patches to one large object in a loop: the server's memory meanwhile.
    PatchMemory(patch_memory::PatchMemoryArgs),
    /// The pod-creation flow at scale: N simulated nodes, the scheduler, pods created by
    /// many clients; pods scheduled and Running per second, startup latency, cost.
    Cluster(cluster::ClusterArgs),
    /// The controller-manager at scale: many Deployments applied at once onto N simulated
    /// nodes in one `listwatch up`, then a rolling update of all; times, surge, cost.
    Deployments(deployments::DeploymentsArgs),
    /// The scheduler's decisions/s over a simulated cluster (no server, binding stubbed).
    SchedulerAlgorithm(scheduler::SchedulerAlgorithmArgs),
    /// The scheduler against a server: pending pods bound per second.
    SchedulerEndToEnd(scheduler::SchedulerEndToEndArgs),
}

/// Which server to measure, shared by every benchmark.
#[derive(Args, Debug, Clone)]
pub struct ServerOpts {
    /// Target a running server (`http://HOST:PORT`) instead of spawning one; server CPU and
    /// memory are then not reported.
    #[arg(long)]
    pub server: Option<String>,
    /// Passed to the spawned server as `--watch-cache-size`.
    #[arg(long)]
    pub watch_cache_size: Option<usize>,
    /// Passed to the spawned server as `--watcher-queue`.
    #[arg(long)]
    pub watcher_queue: Option<usize>,
    /// Any further argument for the spawned server (repeatable), e.g.
    /// `--server-arg=--history-window --server-arg=200000`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// Runs one benchmark to completion on a single-threaded runtime.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cmd {
        BenchCommand::Fanout(a) => rt.block_on(fanout::run(a)),
        BenchCommand::FanoutPlot(a) => fanout_plot::run(a),
        BenchCommand::List(a) => rt.block_on(list::run(a)),
        BenchCommand::Creates(a) => rt.block_on(creates::run(a)),
        BenchCommand::Encode(a) => encode::run(a),
        BenchCommand::CrdSchema(a) => crd_schema::run(a),
        BenchCommand::TcpFloor(a) => tcp_floor::run(a),
        // Builds its own multi-threaded runtime.
        BenchCommand::Testenv(a) => testenv_start::run(a),
        BenchCommand::Etcd(a) => rt.block_on(etcd::run(a)),
        // These build their own multi-threaded runtime.
        BenchCommand::InformerSync(a) => informer::run_sync(a),
        BenchCommand::InformerEvents(a) => informer::run_events(a),
        BenchCommand::ReconnectStorm(a) => reconnect::run(a),
        BenchCommand::PatchMemory(a) => rt.block_on(patch_memory::run(a)),
        // Builds its own multi-threaded runtime.
        BenchCommand::Cluster(a) => cluster::run(a),
        BenchCommand::Deployments(a) => deployments::run(a),
        BenchCommand::SchedulerAlgorithm(a) => scheduler::run(a),
        BenchCommand::SchedulerEndToEnd(a) => scheduler::run_end_to_end(a),
    }
}

/// The server under test: its address and, when this process spawned it, the child.
#[derive(Debug)]
pub struct Target {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The spawned server, if any (killed and cleaned up on drop).
    pub server: Option<ServerProc>,
}

impl Target {
    /// Connects to `opts.server`, or spawns a server with the options' extra arguments.
    pub fn start(opts: &ServerOpts) -> anyhow::Result<Target> {
        if let Some(url) = &opts.server {
            let addr = parse_server_url(url)?;
            println!("target: {url} (not spawned: no server CPU/RSS figures)");
            return Ok(Target { addr, server: None });
        }
        let mut extra = Vec::new();
        if let Some(n) = opts.watch_cache_size {
            extra.extend(["--watch-cache-size".to_string(), n.to_string()]);
        }
        if let Some(n) = opts.watcher_queue {
            extra.extend(["--watcher-queue".to_string(), n.to_string()]);
        }
        extra.extend(opts.server_args.iter().cloned());
        let server = ServerProc::spawn(&extra)?;
        println!(
            "target: spawned server pid {} on http://{} (data in {}, extra args {:?})",
            server.pid(),
            server.addr,
            server.dir.display(),
            extra
        );
        Ok(Target {
            addr: server.addr,
            server: Some(server),
        })
    }

    /// The server's resource usage now, if this process spawned it and `/proc` is readable.
    pub fn usage(&self) -> Option<ProcUsage> {
        self.server
            .as_ref()
            .and_then(|s| ProcUsage::of_pid(s.pid()))
    }
}

/// A `listwatch serve` child on a temporary data directory. Dropping it kills the child
/// (by its pid) and removes the directory.
#[derive(Debug)]
pub struct ServerProc {
    child: Child,
    /// The directory holding `data/` and `server.log`.
    pub dir: PathBuf,
    /// The address the server listens on.
    pub addr: SocketAddr,
    /// The TLS listener's address, when the server reported it.
    pub tls_addr: Option<SocketAddr>,
    /// The subcommand it runs (`serve`, `up …`).
    command: Vec<String>,
}

/// The executable `name` in the directory of the running one (the `listwatch` and
/// `listwatch-bench` binaries are built side by side, by
/// `cargo build --release -p listwatch -p bench`).
///
/// # Errors
/// When the running executable cannot be found or `name` is not beside it.
pub fn sibling_exe(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let me = std::env::current_exe().context("finding the running executable")?;
    let exe = me.with_file_name(name);
    if !exe.is_file() {
        bail!(
            "{} is missing (build both binaries: cargo build --release -p listwatch -p bench)",
            exe.display()
        );
    }
    Ok(exe)
}

impl ServerProc {
    /// Spawns this executable as `serve --insecure-bind 127.0.0.1:0 --bind 127.0.0.1:0
    /// --data-dir <fresh dir>/data`
    /// followed by `extra`, and waits for its "serving on" line. Its stderr goes to
    /// `<dir>/server.log`.
    pub fn spawn(extra: &[String]) -> anyhow::Result<ServerProc> {
        Self::spawn_command(&["serve"], extra)
    }

    /// [`ServerProc::spawn`] with another subcommand than `serve` (e.g. `up --nodes 10`).
    pub fn spawn_command(command: &[&str], extra: &[String]) -> anyhow::Result<ServerProc> {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("listwatch-bench-{}-{stamp:x}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (child, addr, tls_addr) = match Self::start_in(&dir, command, "127.0.0.1:0", extra) {
            Ok(started) => started,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        Ok(ServerProc {
            child,
            dir,
            addr,
            tls_addr,
            command: command.iter().map(|c| c.to_string()).collect(),
        })
    }

    /// Kills the server (SIGKILL, as a crash would) and starts it again on the same data
    /// directory and address, with `extra` arguments.
    pub fn restart(&mut self, extra: &[String]) -> anyhow::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let command: Vec<&str> = self.command.iter().map(String::as_str).collect();
        let (child, addr, tls_addr) =
            Self::start_in(&self.dir, &command, &self.addr.to_string(), extra)?;
        self.child = child;
        self.addr = addr;
        self.tls_addr = tls_addr;
        Ok(())
    }

    /// Starts `listwatch serve` on `dir/data` with its plain listener on `insecure_bind`,
    /// and waits for its "serving on" line.
    fn start_in(
        dir: &std::path::Path,
        command: &[&str],
        insecure_bind: &str,
        extra: &[String],
    ) -> anyhow::Result<(Child, SocketAddr, Option<SocketAddr>)> {
        let exe = sibling_exe("listwatch")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))?;
        let mut child = Command::new(exe)
            .args(command)
            .args(["--insecure-bind", insecure_bind, "--bind", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawning listwatch serve")?;
        let stdout = child.stdout.take();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            let Some(out) = stdout else { return };
            let mut lines = BufReader::new(out).lines();
            // The plain listener's line, then the TLS one.
            for _ in 0..2 {
                if let Some(Ok(line)) = lines.next() {
                    let _ = tx.send(line);
                }
            }
            // Keep draining so the child never blocks on (or fails writing to) the pipe.
            for _ in lines {}
        });
        let first = rx.recv_timeout(STARTUP_TIMEOUT);
        let addr = first
            .map_err(|_| {
                anyhow::anyhow!(
                    "the server did not report its address within {STARTUP_TIMEOUT:?}; log:\n{}",
                    log_tail(dir)
                )
            })
            .and_then(|line| match line.strip_prefix("listwatch serving on ") {
                Some(url) => parse_server_url(url.trim()),
                None => Err(anyhow::anyhow!("unexpected first server line {line:?}")),
            });
        let tls_addr = rx
            .recv_timeout(STARTUP_TIMEOUT)
            .ok()
            .and_then(|l| {
                l.strip_prefix("listwatch serving on https://")
                    .map(str::to_string)
            })
            .and_then(|a| a.trim().parse().ok());
        match addr {
            Ok(addr) => Ok((child, addr, tls_addr)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last 2 KB of the server's log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir)
    }
}

/// The last 2 KB of `dir/server.log`.
fn log_tail(dir: &std::path::Path) -> String {
    let log = std::fs::read(dir.join("server.log")).unwrap_or_default();
    let from = log.len().saturating_sub(2048);
    String::from_utf8_lossy(&log[from..]).into_owned()
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The sum of the samples of `name` whose labels include every one of `labels`, in a
/// Prometheus text exposition (0 if there are none).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .fold(0.0, |a, b| a + b)
}

/// Parses `http://HOST:PORT[/]` into a socket address (resolving HOST).
pub fn parse_server_url(url: &str) -> anyhow::Result<SocketAddr> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("only http:// server URLs are supported, not {url:?}");
    };
    let hostport = rest.trim_end_matches('/');
    if hostport.contains('/') {
        bail!("the server URL must not have a path: {url:?}");
    }
    hostport
        .to_socket_addrs()
        .with_context(|| format!("resolving {hostport}"))?
        .next()
        .with_context(|| format!("{hostport} resolves to no address"))
}

/// CPU time and memory of one process, from `/proc`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcUsage {
    /// User + system CPU time, in seconds.
    pub cpu_secs: f64,
    /// Resident set size now, in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size, in KiB (`VmHWM`).
    pub hwm_kib: u64,
}

impl ProcUsage {
    /// The usage of process `pid`; `None` if `/proc` cannot be read or parsed.
    pub fn of_pid(pid: u32) -> Option<ProcUsage> {
        Self::read(&format!("/proc/{pid}"))
    }

    /// The usage of this process.
    pub fn of_self() -> Option<ProcUsage> {
        Self::read("/proc/self")
    }

    /// The CPU time of the calling thread (memory figures are the process's).
    pub fn of_current_thread() -> Option<ProcUsage> {
        Self::read("/proc/thread-self")
    }

    fn read(base: &str) -> Option<ProcUsage> {
        let stat = std::fs::read_to_string(format!("{base}/stat")).ok()?;
        let status = std::fs::read_to_string(format!("{base}/status")).ok()?;
        let ticks = parse_stat_cpu_ticks(&stat)?;
        Some(ProcUsage {
            cpu_secs: ticks as f64 / clock_ticks_per_sec() as f64,
            rss_kib: parse_status_kib(&status, "VmRSS").unwrap_or(0),
            hwm_kib: parse_status_kib(&status, "VmHWM").unwrap_or(0),
        })
    }
}

/// `utime + stime` (clock ticks) from the text of `/proc/<pid>/stat`. The command name in
/// parentheses may contain spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let mut fields = after.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The value in KiB of the `key:` line of a `/proc/<pid>/status` text.
pub fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_ascii_whitespace().next()?.parse().ok()
    })
}

/// `sysconf(_SC_CLK_TCK)`, asked of `getconf CLK_TCK` once; 100 (the Linux value) if that
/// fails.
pub fn clock_ticks_per_sec() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// CPU seconds between two optional snapshots.
pub fn cpu_delta(before: Option<ProcUsage>, after: Option<ProcUsage>) -> Option<f64> {
    Some(after?.cpu_secs - before?.cpu_secs)
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of ascending `sorted`; `None` if empty.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// p50, p99 and max of a set of durations in microseconds, in milliseconds (sorts `us`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    /// Number of samples.
    pub count: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

impl LatencySummary {
    /// Summarizes `us` (microsecond samples; sorted in place). All zero when empty.
    pub fn of_micros(us: &mut [u64]) -> LatencySummary {
        us.sort_unstable();
        let ms = |v: Option<u64>| v.map_or(0.0, |v| v as f64 / 1000.0);
        LatencySummary {
            count: us.len(),
            p50_ms: ms(percentile(us, 50.0)),
            p99_ms: ms(percentile(us, 99.0)),
            max_ms: ms(us.last().copied()),
        }
    }

    /// As a JSON object.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "count": self.count,
            "p50_ms": round3(self.p50_ms),
            "p99_ms": round3(self.p99_ms),
            "max_ms": round3(self.max_ms),
        })
    }
}

impl std::fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={})",
            self.p50_ms, self.p99_ms, self.max_ms, self.count
        )
    }
}

/// `x` rounded to 3 decimals (for compact JSON).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Nanoseconds from `epoch` to now (saturating).
pub fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A short identifier unique to this run, for object names that must not collide with
/// earlier runs against the same server.
pub fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    format!("{:06x}", (nanos ^ std::process::id()) & 0xff_ffff)
}

/// What the server stores for a [`pod_body`] pod besides the padding, roughly: the body's own
/// fields, then uid, timestamps, resourceVersion, the pod defaults (container, spec and status
/// fields) and `managedFields`. Measured with `bench informer-sync`, which prints the stored
/// size (2,872 bytes for 2,048 asked while this was 420, before defaults and managed fields
/// were stored; 2,049 with this value).
const POD_OVERHEAD: usize = 1245;

/// A pod JSON body named `name` in the bench namespace, about `object_size` bytes once the
/// server adds its metadata: the padding is an annotation of `x`s, and `seq` (if any) goes in
/// a second annotation so that updates always change the object.
pub fn pod_body(name: &str, object_size: usize, seq: Option<u64>) -> Vec<u8> {
    let pad = "x".repeat(object_size.saturating_sub(POD_OVERHEAD));
    let seq = seq.map_or(String::new(), |s| format!(",\"lwb-seq\":\"{s}\""));
    format!(
        concat!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"{}\",",
            "\"namespace\":\"{}\",\"labels\":{{\"app\":\"lwbench\"}},",
            "\"annotations\":{{\"lwb-pad\":\"{}\"{}}}}},",
            "\"spec\":{{\"containers\":[{{\"name\":\"main\",\"image\":\"busybox:1.36\"}}]}}}}"
        ),
        name, BENCH_NAMESPACE, pad, seq
    )
    .into_bytes()
}

/// A merge patch giving a pod made by [`pod_body`] the annotations of the same size and
/// `seq`. Benchmarks change pods with it rather than a PUT of [`pod_body`]: the stored
/// spec holds what admission added at create (the ServiceAccount token volume), which such
/// a PUT would remove, and Kubernetes refuses that.
pub fn pod_patch(object_size: usize, seq: Option<u64>) -> Vec<u8> {
    let pad = "x".repeat(object_size.saturating_sub(POD_OVERHEAD));
    let seq = seq.map_or(String::new(), |s| format!(",\"lwb-seq\":\"{s}\""));
    format!("{{\"metadata\":{{\"annotations\":{{\"lwb-pad\":\"{pad}\"{seq}}}}}}}").into_bytes()
}

/// Creates the bench namespace; an existing one is fine.
pub async fn ensure_namespace(addr: SocketAddr) -> anyhow::Result<()> {
    let mut conn = HttpConn::connect(addr).await?;
    let body = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"{BENCH_NAMESPACE}\"}}}}"
    );
    let mut out = Vec::new();
    let status = conn
        .request(
            "POST",
            "/api/v1/namespaces",
            Some(body.as_bytes()),
            &mut out,
        )
        .await?;
    if status != 201 && status != 409 {
        bail!(
            "creating namespace {BENCH_NAMESPACE}: HTTP {status}: {}",
            String::from_utf8_lossy(&out)
        );
    }
    Ok(())
}

/// Prints a labelled figure line.
pub fn line(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<34} {value}");
}

/// Formats optional server usage for the readable output.
pub fn fmt_usage(u: Option<ProcUsage>) -> String {
    match u {
        Some(u) => format!(
            "RSS {:.1} MiB (peak {:.1} MiB)",
            u.rss_kib as f64 / 1024.0,
            u.hwm_kib as f64 / 1024.0
        ),
        None => "n/a".to_string(),
    }
}

/// Server memory as JSON (null when unknown).
pub fn usage_json(u: Option<ProcUsage>) -> serde_json::Value {
    match u {
        Some(u) => serde_json::json!({"rss_kib": u.rss_kib, "hwm_kib": u.hwm_kib}),
        None => serde_json::Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7u64], 99.0), Some(7));
        assert_eq!(percentile(&[1u64, 2], 50.0), Some(1));
        assert_eq!(percentile::<u64>(&[], 50.0), None);
    }

    #[test]
    fn latency_summary_sorts_and_converts() {
        let mut us = vec![3000, 1000, 2000, 250_000];
        let s = LatencySummary::of_micros(&mut us);
        assert_eq!(s.count, 4);
        assert_eq!(s.p50_ms, 2.0);
        assert_eq!(s.p99_ms, 250.0);
        assert_eq!(s.max_ms, 250.0);
        assert_eq!(
            LatencySummary::of_micros(&mut []),
            LatencySummary::default()
        );
    }

    #[test]
    fn proc_parsing() {
        let stat = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 3 0 100";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(175));
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2"), None);
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(1024));
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(2048));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
        assert!(ProcUsage::of_self().is_some_and(|u| u.rss_kib > 0));
    }

    #[test]
    fn server_urls() {
        assert_eq!(
            parse_server_url("http://127.0.0.1:8080/").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 8080))
        );
        assert!(parse_server_url("https://127.0.0.1:8080").is_err());
        assert!(parse_server_url("http://127.0.0.1:8080/api").is_err());
    }

    #[test]
    fn pod_bodies_are_json_of_about_the_size() {
        let b = pod_body("p-1", 2048, Some(7));
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["metadata"]["name"], "p-1");
        assert_eq!(v["metadata"]["annotations"]["lwb-seq"], "7");
        // The padding is the asked size less what the server stores besides it (the body's
        // other fields included), and those fields are a small part of that.
        let pad = v["metadata"]["annotations"]["lwb-pad"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(pad.len(), 2048 - POD_OVERHEAD);
        assert!(b.len() - pad.len() < POD_OVERHEAD / 2, "{}", b.len());
        assert!(http::find(&b, http::RV_MARKER).is_none());
        // Its patch sets the same annotations.
        let p: serde_json::Value = serde_json::from_slice(&pod_patch(2048, Some(7))).unwrap();
        assert_eq!(p["metadata"]["annotations"], v["metadata"]["annotations"]);
        assert_eq!(p.as_object().map(|o| o.len()), Some(1), "{p}");
    }
}
