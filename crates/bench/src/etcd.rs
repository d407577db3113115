//! `listwatch bench etcd`: the etcd backend against raw etcd and against the embedded store,
//! side by side, in one run on one etcd.
//!
//! Phases, in order:
//! 1. raw etcd: `--clients` concurrent tasks (sharing one `etcd-client` connection, as the API
//!    server does) put ~`--object-size` byte values on unique keys for `--duration` seconds;
//! 2. listwatch on that etcd (a spawned `listwatch serve --etcd-servers …` with its own key
//!    prefix): first watch latency (a few watchers, creates at a steady rate), then creates/s
//!    through HTTP with `--clients` keep-alive connections;
//! 3. listwatch on its embedded store (another spawned server): the same two measurements.
//!
//! Watch latency is "commit→client": from the moment the create's 201 answer (sent after the
//! commit) reached the writer to the moment a watcher read the event with that
//! resourceVersion; an event that arrived before its acknowledgement counts as 0 ms.
//!
//! Unless `--etcd URL` is given, etcd is `/usr/bin/etcd` (or `--etcd-binary`) started here on
//! free loopback ports with a data directory under the system temp dir (on disk, so its
//! fsyncs are real) and a 1 s progress-notification interval; it is killed and its directory
//! removed at the end.

use super::creates::{create_pods, CreateLimit};
use super::http::{self, BodyKind, HttpConn, HttpError};
use super::{
    cpu_delta, ensure_namespace, fanout::WatchParser, line, nanos_since, parse_server_url,
    pod_body, round3, run_id, LatencySummary, ProcUsage, ServerProc, BENCH_NAMESPACE,
};
use anyhow::{bail, Context as _};
use clap::Args;
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Options of `listwatch bench etcd`.
#[derive(Args, Debug, Clone)]
pub struct EtcdArgs {
    /// Use this running etcd (`http://HOST:PORT`) instead of starting one; etcd's CPU is then
    /// not reported.
    #[arg(long)]
    pub etcd: Option<String>,
    /// The etcd executable to start when `--etcd` is not given.
    #[arg(long, default_value = "/usr/bin/etcd")]
    pub etcd_binary: PathBuf,
    /// Seconds of each throughput phase (raw puts, creates on etcd, creates embedded).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Requests in flight: raw etcd put tasks, and HTTP clients for the create phases.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Approximate size of each value / pod in bytes.
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// Watchers per server in the watch-latency phase.
    #[arg(long, default_value_t = 10)]
    pub watchers: usize,
    /// Creates per second during the watch-latency phase.
    #[arg(long, default_value_t = 200)]
    pub watch_rate: u64,
    /// Seconds of writing in the watch-latency phase.
    #[arg(long, default_value_t = 5)]
    pub watch_duration: u64,
    /// Also measure raw puts with a prefix watch open and create-txns without one, to tell
    /// the cost of the compare-txn from that of the watch (two more `--duration` phases).
    #[arg(long)]
    pub raw_breakdown: bool,
}

/// The ratio of listwatch-on-etcd creates/s to raw etcd puts/s that issue 4 asks for.
pub const TARGET_RATIO: f64 = 0.7;

/// A single-member etcd started by the benchmark: killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct EtcdProc {
    child: Child,
    /// The directory holding `data/` and `etcd.log`.
    pub dir: PathBuf,
    /// The client URL, `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl EtcdProc {
    /// Starts `binary` on two free loopback ports with a fresh data directory under the
    /// system temp dir, and waits (up to 30 s) until it answers a linearizable read.
    pub async fn start(binary: &std::path::Path) -> anyhow::Result<EtcdProc> {
        let ports = free_ports(2)?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "listwatch-bench-etcd-{}-{stamp:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = std::fs::File::create(dir.join("etcd.log"))?;
        let endpoint = format!("http://127.0.0.1:{}", ports[0]);
        let peer = format!("http://127.0.0.1:{}", ports[1]);
        let spawned = Command::new(binary)
            .arg("--name=bench")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=bench={peer}"))
            .arg("--initial-cluster-state=new")
            .arg("--experimental-watch-progress-notify-interval=1s")
            .arg("--quota-backend-bytes=8589934592")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e).with_context(|| format!("starting {}", binary.display()));
            }
        };
        // From here on, `Drop` cleans up on every error path.
        let mut proc = EtcdProc {
            child,
            dir,
            endpoint,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = proc.child.try_wait() {
                bail!("etcd exited ({status}); log:\n{}", proc.log_tail());
            }
            if ping(&proc.endpoint).await.is_ok() {
                return Ok(proc);
            }
            if Instant::now() > deadline {
                bail!("etcd did not answer within 30 s; log:\n{}", proc.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// etcd's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last 2 KB of etcd's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read(self.dir.join("etcd.log")).unwrap_or_default();
        let from = log.len().saturating_sub(2048);
        String::from_utf8_lossy(&log[from..]).into_owned()
    }
}

impl Drop for EtcdProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` distinct free loopback ports (bound to :0 together, then released).
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("binding a free loopback port")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// One linearizable read against `endpoint`, with short timeouts.
async fn ping(endpoint: &str) -> anyhow::Result<()> {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(1));
    let mut client = etcd_client::Client::connect([endpoint], Some(opts)).await?;
    client.get("/listwatch-bench-ping", None).await?;
    Ok(())
}

/// The outcome of [`raw_puts`].
#[derive(Debug, Default)]
pub struct PutStats {
    /// Puts acknowledged by etcd.
    pub puts: u64,
    /// Puts that failed.
    pub errors: u64,
    /// Latency of each acknowledged put, in microseconds.
    pub latencies_us: Vec<u64>,
    /// From the first put to the last answer.
    pub elapsed: Duration,
    /// The first error seen.
    pub first_error: Option<String>,
}

/// What each request of [`raw_puts`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawOp {
    /// A plain put.
    Put,
    /// A plain put while a watch is open on the prefix (as for `CreateTxnWatched`).
    PutWatched,
    /// A txn that puts the key only if its create_revision is 0, with no watch.
    CreateTxn,
    /// The etcd work of one listwatch create: a txn that puts the key only if its
    /// create_revision is 0, while a watch with previous values and progress notifications is
    /// open on the prefix (as listwatch's watch cache keeps one).
    CreateTxnWatched,
}

/// The etcd key of raw put number `i` under `prefix`.
pub fn raw_key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:09}")
}

/// Puts values of `value_size` bytes on the unique keys [`raw_key`]`(prefix, 0, 1, …)` from
/// `in_flight` concurrent tasks sharing one client connection to `endpoint`, each sending its
/// next put when the previous one is answered, until `until`. Errors only if etcd cannot be
/// reached at all.
pub async fn raw_puts(
    endpoint: &str,
    in_flight: usize,
    value_size: usize,
    prefix: &str,
    until: Instant,
    op: RawOp,
) -> anyhow::Result<PutStats> {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .with_context(|| format!("connecting to etcd at {endpoint}"))?;
    // The watch (if any) is drained until this function returns.
    let _drain = match op {
        RawOp::Put | RawOp::CreateTxn => None,
        RawOp::PutWatched | RawOp::CreateTxnWatched => {
            let opts = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_prev_key()
                .with_progress_notify();
            let mut stream = client
                .watch(prefix, Some(opts))
                .await
                .context("opening the prefix watch")?;
            Some(AbortOnDrop(tokio::spawn(async move {
                while let Ok(Some(_)) = stream.message().await {}
            })))
        }
    };
    let value = Arc::new(vec![b'x'; value_size]);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(in_flight);
    for _ in 0..in_flight.max(1) {
        let mut kv = client.kv_client();
        let (value, next, prefix) = (value.clone(), next.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let mut st = PutStats::default();
            while Instant::now() < until {
                let key = raw_key(&prefix, next.fetch_add(1, Ordering::Relaxed));
                let t0 = Instant::now();
                let result = match op {
                    RawOp::Put | RawOp::PutWatched => kv
                        .put(key.as_str(), value.as_slice(), None)
                        .await
                        .map(|_| true),
                    RawOp::CreateTxn | RawOp::CreateTxnWatched => {
                        let txn = etcd_client::Txn::new()
                            .when([etcd_client::Compare::create_revision(
                                key.as_str(),
                                etcd_client::CompareOp::Equal,
                                0,
                            )])
                            .and_then([etcd_client::TxnOp::put(
                                key.as_str(),
                                value.as_slice(),
                                None,
                            )]);
                        kv.txn(txn).await.map(|r| r.succeeded())
                    }
                };
                match result {
                    Ok(false) => {
                        st.errors += 1;
                        st.first_error
                            .get_or_insert(format!("{key} already exists"));
                    }
                    Ok(true) => {
                        st.puts += 1;
                        st.latencies_us
                            .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                    Err(e) => {
                        st.errors += 1;
                        st.first_error.get_or_insert(e.to_string());
                    }
                }
            }
            st
        }));
    }
    let mut all = PutStats::default();
    for t in tasks {
        let mut st = t.await?;
        all.puts += st.puts;
        all.errors += st.errors;
        all.latencies_us.append(&mut st.latencies_us);
        if all.first_error.is_none() {
            all.first_error = st.first_error;
        }
    }
    all.elapsed = started.elapsed();
    Ok(all)
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Pairs each watcher sample `(resourceVersion, arrival ns)` with the acknowledgement time of
/// the write that produced it (`acks`: resourceVersion → ack ns) and returns the latencies in
/// microseconds (an arrival before its ack counts as 0) and how many arrived early. Samples of
/// resourceVersions that are not in `acks` are ignored.
pub fn watch_latencies(acks: &HashMap<u64, u64>, samples: &[(u64, u64)]) -> (Vec<u64>, usize) {
    let mut out = Vec::with_capacity(samples.len());
    let mut early = 0;
    for &(rv, at) in samples {
        if let Some(&ack) = acks.get(&rv) {
            if at < ack {
                early += 1;
            }
            out.push(at.saturating_sub(ack) / 1000);
        }
    }
    (out, early)
}

/// The figures of one watch-latency phase.
#[derive(Debug, Default, Clone)]
pub struct WatchFigures {
    /// Watchers whose stream opened.
    pub watchers: usize,
    /// Creates acknowledged during the phase.
    pub acked: u64,
    /// Creates that failed.
    pub write_errors: u64,
    /// Events expected (acked × watchers) and received.
    pub expected: u64,
    /// Events received (with an acknowledged resourceVersion).
    pub received: u64,
    /// Commit→client latency: from the create's acknowledgement to the event's arrival.
    pub latency: LatencySummary,
    /// From the create's send time to the event's arrival (an upper bound).
    pub latency_send: LatencySummary,
    /// Events read before their create's acknowledgement.
    pub early: usize,
    /// The first error seen, if any.
    pub first_error: Option<String>,
}

impl WatchFigures {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "watchers": self.watchers,
            "acked_writes": self.acked,
            "write_errors": self.write_errors,
            "expected_events": self.expected,
            "received_events": self.received,
            "latency_ack_to_client": self.latency.to_json(),
            "latency_send_to_client": self.latency_send.to_json(),
            "events_before_ack": self.early,
        })
    }
}

/// Opens a watch on the bench namespace's pods from `rv`; returns the stream and the body
/// bytes that came with the head.
async fn open_watch(addr: SocketAddr, rv: u64) -> Result<(TcpStream, Vec<u8>), HttpError> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "GET /api/v1/namespaces/{BENCH_NAMESPACE}/pods?watch=true&resourceVersion={rv} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(2048);
    loop {
        if stream.read_buf(&mut head).await? == 0 {
            return Err(HttpError::Closed);
        }
        if let Some(h) = http::parse_head(&head)? {
            if h.status != 200 {
                return Err(HttpError::BadHead("watch answered with a non-200 status"));
            }
            if h.body != BodyKind::Chunked {
                return Err(HttpError::BadHead("watch response is not chunked"));
            }
            head.drain(..h.head_len);
            return Ok((stream, head));
        }
    }
}

/// The store's current resourceVersion, from a one-item list of the bench namespace's pods.
async fn current_rv(addr: SocketAddr) -> anyhow::Result<u64> {
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let path = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods?limit=1");
    let status = conn.request("GET", &path, None, &mut out).await?;
    if status != 200 {
        bail!("listing pods: HTTP {status}");
    }
    http::find_rv(&out).context("the pod list carries no resourceVersion")
}

/// `watchers` watches from the current resourceVersion, then creates at `rate`/s for
/// `secs` seconds from 4 writer connections; waits for the events (up to 2 s without progress)
/// and pairs them with the creates' acknowledgements.
async fn watch_latency(
    addr: SocketAddr,
    watchers: usize,
    rate: u64,
    secs: u64,
    object_size: usize,
    prefix: &str,
) -> anyhow::Result<WatchFigures> {
    let epoch = Instant::now();
    let rv = current_rv(addr).await?;
    let received = Arc::new(AtomicU64::new(0));
    let mut samples = Vec::new();
    let mut tasks = Vec::new();
    let mut fig = WatchFigures::default();
    for _ in 0..watchers.max(1) {
        let (mut stream, leftover) = match open_watch(addr, rv).await {
            Ok(v) => v,
            Err(e) => {
                fig.first_error
                    .get_or_insert(format!("opening a watch: {e}"));
                continue;
            }
        };
        fig.watchers += 1;
        let slot = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
        samples.push(slot.clone());
        let received = received.clone();
        tasks.push(tokio::spawn(async move {
            let mut parser = WatchParser::new(true);
            let mut buf = leftover;
            loop {
                let now = nanos_since(epoch);
                match parser.feed(&buf, now) {
                    Ok(n) => {
                        received.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(_) => return,
                }
                if let Ok(mut s) = slot.lock() {
                    s.append(parser.samples());
                }
                if parser.is_done() {
                    return;
                }
                buf.clear();
                match stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        }));
    }
    if fig.watchers == 0 {
        bail!(
            "no watch could be opened: {}",
            fig.first_error.unwrap_or_default()
        );
    }

    // Writers: open-loop, creation `k` is due at start + k / rate.
    const WRITERS: u64 = 4;
    let total = rate * secs;
    let start = Instant::now() + Duration::from_millis(100);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut conn = HttpConn::connect(addr).await?;
        let prefix = prefix.to_string();
        writers.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            let (mut errors, mut first_error) = (0u64, None::<String>);
            let mut out = Vec::with_capacity(8 * 1024);
            let path = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods");
            let mut k = w;
            while k < total {
                let due = start + Duration::from_secs_f64(k as f64 / rate.max(1) as f64);
                tokio::time::sleep_until(due.into()).await;
                if conn.is_closed() {
                    match HttpConn::connect(addr).await {
                        Ok(c) => conn = c,
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(format!("reconnect: {e}"));
                            k += WRITERS;
                            continue;
                        }
                    }
                }
                let body = pod_body(&format!("{prefix}{k:07}"), object_size, None);
                let sent = nanos_since(epoch);
                let result = conn.request("POST", &path, Some(&body), &mut out).await;
                let ack = nanos_since(epoch);
                match result {
                    Ok(201) => match http::find_rv(&out) {
                        Some(rv) => acks.push((rv, sent, ack)),
                        None => {
                            errors += 1;
                            first_error
                                .get_or_insert("create answer without a resourceVersion".into());
                        }
                    },
                    Ok(status) => {
                        errors += 1;
                        first_error.get_or_insert(format!(
                            "HTTP {status}: {}",
                            String::from_utf8_lossy(&out[..out.len().min(300)])
                        ));
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e.to_string());
                    }
                }
                k += WRITERS;
            }
            (acks, errors, first_error)
        }));
    }
    let mut acks = HashMap::new();
    let mut sends = HashMap::new();
    for w in writers {
        let (a, errors, first_error) = w.await?;
        for (rv, sent, ack) in a {
            acks.insert(rv, ack);
            sends.insert(rv, sent);
        }
        fig.write_errors += errors;
        if fig.first_error.is_none() {
            fig.first_error = first_error;
        }
    }
    fig.acked = acks.len() as u64;
    fig.expected = fig.acked * fig.watchers as u64;

    // Drain: until every expected event arrived, or 2 s without progress.
    let mut last = received.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    loop {
        let now = received.load(Ordering::Relaxed);
        if now >= fig.expected || last_progress.elapsed() > Duration::from_secs(2) {
            break;
        }
        if now != last {
            last = now;
            last_progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in &tasks {
        t.abort();
    }
    let mut all = Vec::new();
    for s in &samples {
        if let Ok(s) = s.lock() {
            all.extend_from_slice(&s);
        }
    }
    let (mut lat, early) = watch_latencies(&acks, &all);
    fig.received = lat.len() as u64;
    fig.early = early;
    fig.latency = LatencySummary::of_micros(&mut lat);
    let (mut lat_send, _) = watch_latencies(&sends, &all);
    fig.latency_send = LatencySummary::of_micros(&mut lat_send);
    Ok(fig)
}

/// The figures of one throughput phase (raw puts or HTTP creates).
#[derive(Debug, Default, Clone)]
pub struct WriteFigures {
    /// Writes acknowledged.
    pub writes: u64,
    /// Writes that failed.
    pub errors: u64,
    /// Seconds from the first request to the last answer.
    pub secs: f64,
    /// Latency of the acknowledged writes.
    pub latency: LatencySummary,
    /// CPU seconds of the spawned listwatch server over the phase (none for raw etcd).
    pub server_cpu: Option<f64>,
    /// CPU seconds of etcd over the phase (when this benchmark started etcd).
    pub etcd_cpu: Option<f64>,
    /// CPU seconds of this load generator over the phase.
    pub loadgen_cpu: Option<f64>,
    /// etcd gRPC requests handled over the phase, by method (when etcd's `/metrics` answers).
    pub etcd_requests: Option<BTreeMap<String, f64>>,
    /// The first error seen.
    pub first_error: Option<String>,
}

impl WriteFigures {
    /// Acknowledged writes per second.
    pub fn rate(&self) -> f64 {
        self.writes as f64 / self.secs.max(1e-9)
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "writes": self.writes,
            "errors": self.errors,
            "elapsed_secs": round3(self.secs),
            "writes_per_sec": round3(self.rate()),
            "latency": self.latency.to_json(),
            "server_cpu_secs": self.server_cpu.map(round3),
            "etcd_cpu_secs": self.etcd_cpu.map(round3),
            "loadgen_cpu_secs": self.loadgen_cpu.map(round3),
            "etcd_requests_per_write": self.requests_per_write(),
        })
    }

    /// etcd gRPC requests per acknowledged write, by method, rounded to 3 decimals (methods
    /// that round to 0 left out).
    pub fn requests_per_write(&self) -> Option<BTreeMap<String, f64>> {
        let reqs = self.etcd_requests.as_ref()?;
        let n = self.writes.max(1) as f64;
        Some(
            reqs.iter()
                .map(|(m, &c)| (m.clone(), round3(c / n)))
                .filter(|&(_, c)| c > 0.0)
                .collect(),
        )
    }
}

/// Sums `grpc_server_handled_total` of an etcd `/metrics` text by `grpc_method` (over every
/// code and service). Lines that do not parse are skipped.
pub fn parse_grpc_handled(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("grpc_server_handled_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let method = labels.split(',').find_map(|kv| {
            kv.strip_prefix("grpc_method=\"")
                .and_then(|v| v.strip_suffix('"'))
        });
        if let Some(m) = method {
            *out.entry(m.to_string()).or_insert(0.0) += value;
        }
    }
    out
}

/// etcd's handled gRPC requests by method, read from `endpoint`'s `/metrics`; `None` when it
/// cannot be read.
async fn etcd_requests(endpoint: &str) -> Option<BTreeMap<String, f64>> {
    let addr = parse_server_url(endpoint).ok()?;
    let mut conn = HttpConn::connect(addr).await.ok()?;
    let mut out = Vec::new();
    let status = conn.request("GET", "/metrics", None, &mut out).await.ok()?;
    (status == 200).then(|| parse_grpc_handled(&String::from_utf8_lossy(&out)))
}

/// `after - before` per method.
fn count_delta(
    before: Option<BTreeMap<String, f64>>,
    after: Option<BTreeMap<String, f64>>,
) -> Option<BTreeMap<String, f64>> {
    let before = before?;
    Some(
        after?
            .into_iter()
            .map(|(m, v)| {
                let b = before.get(&m).copied().unwrap_or(0.0);
                (m, v - b)
            })
            .collect(),
    )
}

/// CPU snapshots of the processes involved in a phase.
struct CpuProbe {
    server: Option<u32>,
    etcd: Option<u32>,
    before: [Option<ProcUsage>; 3],
}

impl CpuProbe {
    fn start(server: Option<u32>, etcd: Option<u32>) -> CpuProbe {
        CpuProbe {
            server,
            etcd,
            before: [
                server.and_then(ProcUsage::of_pid),
                etcd.and_then(ProcUsage::of_pid),
                ProcUsage::of_self(),
            ],
        }
    }

    /// (server, etcd, loadgen) CPU seconds since `start`.
    fn finish(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        (
            cpu_delta(self.before[0], self.server.and_then(ProcUsage::of_pid)),
            cpu_delta(self.before[1], self.etcd.and_then(ProcUsage::of_pid)),
            cpu_delta(self.before[2], ProcUsage::of_self()),
        )
    }
}

/// Creates through HTTP on `server` for `secs` seconds, measuring CPU of it and of etcd.
async fn http_creates(
    server: &ServerProc,
    etcd: Option<(&str, Option<u32>)>,
    args: &EtcdArgs,
    prefix: &str,
) -> anyhow::Result<WriteFigures> {
    let etcd_pid = etcd.and_then(|e| e.1);
    let reqs_before = match etcd {
        Some((url, _)) => etcd_requests(url).await,
        None => None,
    };
    let probe = CpuProbe::start(Some(server.pid()), etcd_pid);
    let until = Instant::now() + Duration::from_secs(args.duration);
    let mut st = create_pods(
        server.addr,
        args.clients,
        args.object_size,
        prefix,
        CreateLimit::Until(until),
    )
    .await?;
    let (server_cpu, etcd_cpu, loadgen_cpu) = probe.finish();
    let reqs_after = match etcd {
        Some((url, _)) => etcd_requests(url).await,
        None => None,
    };
    Ok(WriteFigures {
        writes: st.created,
        errors: st.errors,
        secs: st.elapsed.as_secs_f64(),
        latency: LatencySummary::of_micros(&mut st.latencies_us),
        server_cpu,
        etcd_cpu,
        loadgen_cpu,
        etcd_requests: count_delta(reqs_before, reqs_after),
        first_error: st.first_error,
    })
}

/// Formats CPU seconds over `secs` as "X.XX s (NN% of a core)", or "n/a".
fn fmt_cpu(cpu: Option<f64>, secs: f64) -> String {
    cpu.map_or("n/a".to_string(), |c| {
        format!("{c:.2} s ({:.0}% of a core)", c / secs.max(1e-9) * 100.0)
    })
}

fn print_writes(label: &str, f: &WriteFigures) {
    println!("{label}");
    line(
        "writes/s",
        format!("{:.0} ({} in {:.2} s)", f.rate(), f.writes, f.secs),
    );
    line("write latency", f.latency);
    line("errors", f.errors);
    if let Some(e) = &f.first_error {
        line("first error", e);
    }
    line("listwatch server CPU", fmt_cpu(f.server_cpu, f.secs));
    line("etcd CPU", fmt_cpu(f.etcd_cpu, f.secs));
    line("loadgen CPU", fmt_cpu(f.loadgen_cpu, f.secs));
    if let Some(per) = f.requests_per_write() {
        let text: Vec<String> = per.iter().map(|(m, c)| format!("{m} {c:.2}")).collect();
        line("etcd gRPC requests per write", text.join(", "));
    }
    if let (Some(cpu), true) = (f.etcd_cpu, f.writes > 0) {
        line(
            "etcd CPU per write",
            format!("{:.0} us", cpu * 1e6 / f.writes as f64),
        );
    }
}

fn print_watch(label: &str, w: &WatchFigures) {
    println!("{label}");
    line(
        "writes",
        format!("{} acked, {} errors", w.acked, w.write_errors),
    );
    line(
        "events expected / received",
        format!("{} / {} ({} watchers)", w.expected, w.received, w.watchers),
    );
    line("latency ack->client", w.latency);
    line(
        "  (events seen before their ack)",
        format!("{} (counted as 0 ms)", w.early),
    );
    line("latency send->client", w.latency_send);
    if let Some(e) = &w.first_error {
        line("first error", e);
    }
}

/// One spawned listwatch server: its watch latency, then its create throughput.
async fn measure_server(
    server: &ServerProc,
    etcd: Option<(&str, Option<u32>)>,
    args: &EtcdArgs,
    run: &str,
) -> anyhow::Result<(WatchFigures, WriteFigures)> {
    ensure_namespace(server.addr).await?;
    let watch = watch_latency(
        server.addr,
        args.watchers,
        args.watch_rate,
        args.watch_duration,
        args.object_size,
        &format!("lwbw-{run}-"),
    )
    .await?;
    let creates = http_creates(server, etcd, args, &format!("lwbc-{run}-")).await?;
    Ok((watch, creates))
}

/// One raw etcd phase of `args.duration` seconds, with etcd's CPU and request counts.
async fn raw_phase(
    endpoint: &str,
    etcd_pid: Option<u32>,
    args: &EtcdArgs,
    prefix: &str,
    op: RawOp,
) -> anyhow::Result<WriteFigures> {
    let reqs_before = etcd_requests(endpoint).await;
    let probe = CpuProbe::start(None, etcd_pid);
    let until = Instant::now() + Duration::from_secs(args.duration);
    let mut st = raw_puts(endpoint, args.clients, args.object_size, prefix, until, op).await?;
    let (_, etcd_cpu, loadgen_cpu) = probe.finish();
    let reqs_after = etcd_requests(endpoint).await;
    Ok(WriteFigures {
        writes: st.puts,
        errors: st.errors,
        secs: st.elapsed.as_secs_f64(),
        latency: LatencySummary::of_micros(&mut st.latencies_us),
        server_cpu: None,
        etcd_cpu,
        loadgen_cpu,
        etcd_requests: count_delta(reqs_before, reqs_after),
        first_error: st.first_error,
    })
}

/// Runs the etcd benchmark.
pub async fn run(args: EtcdArgs) -> anyhow::Result<()> {
    if args.duration == 0 || args.clients == 0 || args.watch_rate == 0 {
        bail!("--duration, --clients and --watch-rate must be positive");
    }
    let run = run_id();
    let etcd_proc = match &args.etcd {
        Some(_) => None,
        None => Some(EtcdProc::start(&args.etcd_binary).await?),
    };
    let (endpoint, etcd_pid) = match (&etcd_proc, &args.etcd) {
        (Some(p), _) => {
            println!(
                "etcd: started {} pid {} on {} (data in {}, on disk)",
                args.etcd_binary.display(),
                p.pid(),
                p.endpoint,
                p.dir.display()
            );
            (p.endpoint.clone(), Some(p.pid()))
        }
        (None, url) => {
            let url = url.clone().unwrap_or_default();
            println!("etcd: {url} (not started here: no etcd CPU figures)");
            (url, None)
        }
    };
    println!(
        "load: {} in flight, {} s per throughput phase, ~{} byte values; watch phase {} watchers, {} creates/s for {} s",
        args.clients,
        args.duration,
        args.object_size,
        args.watchers,
        args.watch_rate,
        args.watch_duration
    );

    // 1. Raw etcd: plain puts (the reference), then listwatch's etcd work per create.
    let raw = raw_phase(
        &endpoint,
        etcd_pid,
        &args,
        &format!("/bench-raw-{run}/"),
        RawOp::Put,
    )
    .await?;
    print_writes("raw etcd puts (etcd-client, one connection):", &raw);
    let raw_txn = raw_phase(
        &endpoint,
        etcd_pid,
        &args,
        &format!("/bench-rawtxn-{run}/"),
        RawOp::CreateTxnWatched,
    )
    .await?;
    print_writes(
        "raw etcd create-txns with a prefix watch (listwatch's etcd work per create):",
        &raw_txn,
    );
    let mut breakdown = serde_json::Map::new();
    if args.raw_breakdown {
        for (name, label, op) in [
            (
                "puts_watched",
                "raw etcd puts with a prefix watch:",
                RawOp::PutWatched,
            ),
            (
                "create_txns",
                "raw etcd create-txns, no watch:",
                RawOp::CreateTxn,
            ),
        ] {
            let prefix = format!("/bench-raw-{name}-{run}/");
            let f = raw_phase(&endpoint, etcd_pid, &args, &prefix, op).await?;
            print_writes(label, &f);
            breakdown.insert(name.to_string(), f.to_json());
        }
    }

    // 2. listwatch on etcd.
    let on_etcd = ServerProc::spawn(&[
        "--etcd-servers".to_string(),
        endpoint.clone(),
        "--etcd-prefix".to_string(),
        format!("/bench-{run}/"),
    ])?;
    println!(
        "listwatch on etcd: pid {} on http://{}",
        on_etcd.pid(),
        on_etcd.addr
    );
    let (etcd_watch, etcd_creates) =
        measure_server(&on_etcd, Some((endpoint.as_str(), etcd_pid)), &args, &run).await?;
    drop(on_etcd);
    print_watch("listwatch on etcd, watch latency:", &etcd_watch);
    print_writes("listwatch on etcd, creates through HTTP:", &etcd_creates);

    // 3. listwatch embedded.
    let embedded = ServerProc::spawn(&[])?;
    println!(
        "listwatch embedded: pid {} on http://{} (data in {})",
        embedded.pid(),
        embedded.addr,
        embedded.dir.display()
    );
    let (emb_watch, emb_creates) = measure_server(&embedded, None, &args, &run).await?;
    drop(embedded);
    print_watch("listwatch embedded, watch latency:", &emb_watch);
    print_writes("listwatch embedded, creates through HTTP:", &emb_creates);

    // Side by side.
    let ratio = etcd_creates.rate() / raw.rate().max(1e-9);
    let ratio_txn = etcd_creates.rate() / raw_txn.rate().max(1e-9);
    let lat = |l: &LatencySummary| format!("{:.1} / {:.1}", l.p50_ms, l.p99_ms);
    let cores = |c: Option<f64>, secs: f64| {
        c.map_or("-".to_string(), |c| format!("{:.2}", c / secs.max(1e-9)))
    };
    let per_write = |f: &WriteFigures| {
        f.etcd_cpu
            .filter(|_| f.writes > 0)
            .map_or("-".to_string(), |c| {
                format!("{:.0}", c * 1e6 / f.writes as f64)
            })
    };
    let row = |label: &str, cells: [String; 4]| {
        println!(
            "  {label:<24} {:>14} {:>16} {:>16} {:>16}",
            cells[0], cells[1], cells[2], cells[3]
        );
    };
    let phases = [&raw, &raw_txn, &etcd_creates, &emb_creates];
    println!(
        "side by side ({} in flight, {} s each):",
        args.clients, args.duration
    );
    row(
        "",
        [
            "raw etcd put".into(),
            "raw etcd txn+w".into(),
            "listwatch+etcd".into(),
            "listwatch embed".into(),
        ],
    );
    row("writes/s", phases.map(|f| format!("{:.0}", f.rate())));
    row("write p50 / p99 ms", phases.map(|f| lat(&f.latency)));
    row(
        "watch p50 / p99 ms",
        [
            "-".into(),
            "-".into(),
            lat(&etcd_watch.latency),
            lat(&emb_watch.latency),
        ],
    );
    row(
        "listwatch CPU (cores)",
        phases.map(|f| cores(f.server_cpu, f.secs)),
    );
    row(
        "etcd CPU (cores)",
        phases.map(|f| cores(f.etcd_cpu, f.secs)),
    );
    row("etcd CPU us per write", phases.map(per_write));
    println!(
        "  listwatch-on-etcd / raw etcd puts = {ratio:.2}x (target >= {TARGET_RATIO}x: {}); / raw create-txns with a watch = {ratio_txn:.2}x",
        if ratio >= TARGET_RATIO {
            "met"
        } else {
            "NOT met"
        }
    );
    let json = serde_json::json!({
        "bench": "etcd",
        "etcd_spawned": args.etcd.is_none(),
        "in_flight": args.clients,
        "duration_secs": args.duration,
        "object_size": args.object_size,
        "raw_etcd_puts": raw.to_json(),
        "raw_etcd_create_txns_watched": raw_txn.to_json(),
        "raw_etcd_breakdown": breakdown,
        "listwatch_etcd": {
            "creates": etcd_creates.to_json(),
            "watch": etcd_watch.to_json(),
        },
        "listwatch_embedded": {
            "creates": emb_creates.to_json(),
            "watch": emb_watch.to_json(),
        },
        "ratio_etcd_to_raw": round3(ratio),
        "ratio_etcd_to_raw_create_txns": round3(ratio_txn),
        "target_ratio": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
    });
    println!("{json}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_pair_samples_with_acks() {
        let acks: HashMap<u64, u64> = [(10, 5_000_000), (11, 6_000_000)].into_iter().collect();
        let samples = [
            (10, 7_000_000), // 2 ms after its ack
            (11, 5_500_000), // before its ack: 0 ms, early
            (12, 9_000_000), // not one of ours: ignored
            (10, 5_250_000), // another watcher: 0.25 ms
        ];
        let (lat, early) = watch_latencies(&acks, &samples);
        assert_eq!(lat, vec![2000, 0, 250]);
        assert_eq!(early, 1);
        assert_eq!(watch_latencies(&acks, &[]), (vec![], 0));
    }

    #[test]
    fn grpc_metrics_are_summed_by_method() {
        let text = concat!(
            "# HELP grpc_server_handled_total Total number of RPCs.\n",
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 120\n",
            "grpc_server_handled_total{grpc_code=\"Unavailable\",grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 3\n",
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 7\n",
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Put\"} notanumber\n",
            "grpc_server_started_total{grpc_method=\"Txn\"} 999\n",
        );
        let m = parse_grpc_handled(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m["Txn"], 123.0);
        assert_eq!(m["Range"], 7.0);
        let before: BTreeMap<String, f64> = [("Txn".to_string(), 23.0)].into_iter().collect();
        let d = count_delta(Some(before), Some(m)).unwrap();
        assert_eq!((d["Txn"], d["Range"]), (100.0, 7.0));
        assert_eq!(count_delta(None, Some(BTreeMap::new())), None);
        let f = WriteFigures {
            writes: 50,
            etcd_requests: Some(d),
            ..WriteFigures::default()
        };
        let per = f.requests_per_write().unwrap();
        assert_eq!((per["Txn"], per["Range"]), (2.0, 0.14));
    }

    #[test]
    fn raw_keys_are_unique_and_ordered() {
        assert_eq!(raw_key("/p/", 7), "/p/000000007");
        assert!(raw_key("/p/", 9) < raw_key("/p/", 10));
    }

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports(3).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0] != p[1] && p[1] != p[2] && p[0] != p[2]);
    }

    #[test]
    fn write_figures_rate() {
        let f = WriteFigures {
            writes: 500,
            secs: 2.0,
            ..WriteFigures::default()
        };
        assert_eq!(f.rate(), 250.0);
        assert_eq!(WriteFigures::default().rate(), 0.0);
        assert_eq!(fmt_cpu(Some(0.5), 2.0), "0.50 s (25% of a core)");
        assert_eq!(fmt_cpu(None, 2.0), "n/a");
    }

    /// Starts a real etcd (skipped when `/usr/bin/etcd` is absent) and puts for half a second.
    #[tokio::test]
    async fn raw_puts_against_a_real_etcd() {
        let bin = std::path::Path::new("/usr/bin/etcd");
        if !bin.exists() {
            eprintln!("skipping: {} is missing", bin.display());
            return;
        }
        let etcd = EtcdProc::start(bin).await.unwrap();
        let dir = etcd.dir.clone();
        let until = Instant::now() + Duration::from_millis(500);
        let st = raw_puts(&etcd.endpoint, 8, 2048, "/t/", until, RawOp::Put)
            .await
            .unwrap();
        assert!(st.puts > 0, "no put succeeded: {:?}", st.first_error);
        assert_eq!(st.errors, 0, "{:?}", st.first_error);
        assert_eq!(st.latencies_us.len() as u64, st.puts);
        let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
            .await
            .unwrap();
        let got = client
            .get(
                "/t/",
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap();
        assert_eq!(got.count() as u64, st.puts);
        let reqs = etcd_requests(&etcd.endpoint).await.unwrap();
        assert!(
            reqs.get("Put").is_some_and(|&n| n >= st.puts as f64),
            "{reqs:?}"
        );
        // Create-txns on fresh keys succeed; on the same keys again they are refused.
        let until = Instant::now() + Duration::from_millis(300);
        let first = raw_puts(
            &etcd.endpoint,
            4,
            100,
            "/c/",
            until,
            RawOp::CreateTxnWatched,
        )
        .await
        .unwrap();
        assert!(
            first.puts > 0 && first.errors == 0,
            "{:?}",
            first.first_error
        );
        let until = Instant::now() + Duration::from_millis(100);
        let again = raw_puts(
            &etcd.endpoint,
            1,
            100,
            "/c/",
            until,
            RawOp::CreateTxnWatched,
        )
        .await
        .unwrap();
        assert!(again.errors > 0, "re-creating existing keys must fail");
        assert!(again
            .first_error
            .is_some_and(|e| e.contains("/c/000000000 already exists")));
        drop(etcd);
        assert!(!dir.exists(), "the data directory was not removed");
    }
}
