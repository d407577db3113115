//! `listwatch bench fanout`: many watchers on one namespace while a writer updates its pods at
//! a fixed, open-loop rate. Measures how many events reach the watchers, how late, and what
//! that costs the server.
//!
//! Watchers run on this process's single-threaded runtime and never parse JSON. With
//! `--transport http1` (the default) each is a raw TCP socket that de-chunks and counts
//! newlines, all sharing one read buffer; with `--transport ws` each is a raw TCP socket that
//! upgrades to WebSocket and counts text messages; with `--transport h2` the watchers share
//! HTTP/2 connections (hyper's client, prior knowledge, `--streams-per-conn` streams each) and
//! count the newlines of each DATA chunk. Every `--sample-every`-th
//! watcher also finds each event's resourceVersion (a byte search) and stamps its arrival, so
//! delivery latency is computed afterwards against the writer's records. The writer runs on its
//! own thread (with its own single-threaded runtime) so busy watchers cannot delay its schedule.

use super::http::{self, ChunkedDecoder, HttpConn, HttpError};
use super::kinds::Kind;
use super::watch_stream::{self, LineScanner, WsParser};
use super::{
    cpu_delta, ensure_namespace, fmt_usage, line, nanos_since, round3, usage_json, LatencySummary,
    ProcUsage, ServerOpts, Target, BENCH_NAMESPACE,
};
use anyhow::{bail, Context as _};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use http_body_util::{BodyExt as _, Empty};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Options of `listwatch bench fanout`.
#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    /// Number of concurrent watch connections.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Target pod updates per second (the first rate with `--ramp`).
    #[arg(long, default_value_t = 100)]
    pub writes_per_sec: u64,
    /// Seconds of writing per measured round.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Approximate size of each pod in bytes (padding goes in an annotation).
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// What the writer updates and the watchers watch.
    #[arg(long, value_enum, default_value_t = Kind::Pod)]
    pub kind: Kind,
    /// Number of pods the writer updates round-robin.
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// Minimum number of writer connections (raised to rate/50 for high rates).
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Every n-th watcher measures per-event latency.
    #[arg(long, default_value_t = 50)]
    pub sample_every: usize,
    /// Connections being opened at once (paces the SYNs).
    #[arg(long, default_value_t = 64)]
    pub connect_concurrency: usize,
    /// Repeat with doubled write rates until delivery falls below 95% or p99 exceeds 1 s.
    #[arg(long)]
    pub ramp: bool,
    /// Highest write rate `--ramp` tries.
    #[arg(long, default_value_t = 102_400)]
    pub max_rate: u64,
    /// How the watchers connect: one HTTP/1.1 connection each, HTTP/2 streams sharing
    /// connections (h2c with prior knowledge), or one WebSocket connection each.
    #[arg(long, value_enum, default_value_t = Transport::Http1)]
    pub transport: Transport,
    /// With `--transport h2`: watch streams per HTTP/2 connection (ceil(watchers / N)
    /// connections are opened).
    #[arg(long, default_value_t = 100)]
    pub streams_per_conn: usize,
    /// Extra watchers (HTTP/1.1, one connection each) that open their watch and then never
    /// read: clients the server has to terminate without the others suffering. They are not
    /// counted in the figures.
    #[arg(long, default_value_t = 0)]
    pub slow_watchers: usize,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// The transport the watchers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// One HTTP/1.1 connection per watcher, chunked body, one event per line.
    Http1,
    /// HTTP/2 with prior knowledge: many watch streams per connection.
    H2,
    /// One WebSocket connection per watcher, one event per text message.
    Ws,
}

impl Transport {
    /// The name used on the command line and in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Http1 => "http1",
            Transport::H2 => "h2",
            Transport::Ws => "ws",
        }
    }
}

/// The HTTP/2 client's flow-control window per stream: large, so the client never throttles
/// the server.
const H2_STREAM_WINDOW: u32 = 1 << 20;
/// The HTTP/2 client's flow-control window per connection.
const H2_CONN_WINDOW: u32 = 64 << 20;

thread_local! {
    /// The one read buffer every watcher on this thread reads into.
    static READ_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; 64 * 1024].into_boxed_slice());
}

/// State shared by the watcher tasks and the coordinator.
struct Shared {
    epoch: Instant,
    /// Events received, all watchers together.
    delivered: AtomicU64,
    /// Events received per watcher.
    per_watcher: Vec<AtomicU64>,
    /// Watchers that got their 200 head.
    ready: AtomicUsize,
    /// Watchers that could not open (error or non-200).
    failed: AtomicUsize,
    /// Watchers whose open stream ended (server close, error).
    ended: AtomicUsize,
    /// `(resourceVersion, arrival ns)` per sampled watcher.
    samples: Vec<Mutex<Vec<(u64, u64)>>>,
    first_error: Mutex<Option<String>>,
}

impl Shared {
    fn note_error(&self, what: String) {
        if let Ok(mut e) = self.first_error.lock() {
            e.get_or_insert(what);
        }
    }
}

/// Turns the raw body bytes of one watch stream into event counts (and, for a sampled watcher,
/// `(resourceVersion, arrival)` samples). No allocation per event: a sampled watcher reuses one
/// line buffer.
#[derive(Debug, Default)]
pub struct WatchParser {
    dec: ChunkedDecoder,
    lines: LineScanner,
}

impl WatchParser {
    /// A parser at the start of a chunked watch body; `sampled` turns on RV sampling.
    pub fn new(sampled: bool) -> Self {
        WatchParser {
            dec: ChunkedDecoder::new(),
            lines: LineScanner::new(sampled),
        }
    }

    /// Consumes body bytes received at `now_ns`; returns the number of complete events in
    /// them.
    pub fn feed(&mut self, data: &[u8], now_ns: u64) -> Result<u64, HttpError> {
        let mut events = 0;
        let WatchParser { dec, lines } = self;
        dec.feed(data, |d| events += lines.feed(d, now_ns))?;
        Ok(events)
    }

    /// Samples found by [`WatchParser::feed`] and not yet taken.
    pub fn samples(&mut self) -> &mut Vec<(u64, u64)> {
        &mut self.lines.samples
    }

    /// True once the server ended the stream cleanly.
    pub fn is_done(&self) -> bool {
        self.dec.is_done()
    }
}

/// The decoder of one raw-socket watcher (HTTP/1.1 chunked or WebSocket).
enum RawStream {
    Http1(WatchParser),
    Ws(WsParser),
}

impl RawStream {
    fn feed(&mut self, data: &[u8], now_ns: u64) -> Result<u64, HttpError> {
        match self {
            RawStream::Http1(p) => p.feed(data, now_ns),
            RawStream::Ws(p) => p.feed(data, now_ns),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            RawStream::Http1(p) => p.is_done(),
            RawStream::Ws(p) => p.is_done(),
        }
    }

    fn samples(&mut self) -> &mut Vec<(u64, u64)> {
        match self {
            RawStream::Http1(p) => p.samples(),
            RawStream::Ws(p) => &mut p.samples,
        }
    }
}

enum Step {
    Events(u64),
    Eof,
}

/// Adds `n` events of watcher `idx` to the totals and moves its samples (if it is sampled)
/// into the shared slot.
fn record(
    shared: &Shared,
    idx: usize,
    sample_slot: Option<usize>,
    n: u64,
    samples: &mut Vec<(u64, u64)>,
) {
    if n > 0 {
        shared.delivered.fetch_add(n, Ordering::Relaxed);
        shared.per_watcher[idx].fetch_add(n, Ordering::Relaxed);
    }
    if let Some(slot) = sample_slot {
        if !samples.is_empty() {
            if let Ok(mut s) = shared.samples[slot].lock() {
                s.append(samples);
            }
        }
    }
}

/// Checks a complete response head for the transport: 200 chunked for HTTP/1.1, a 101 with
/// the right `Sec-WebSocket-Accept` for WebSocket.
fn check_head(
    transport: Transport,
    head: &http::ResponseHead,
    raw: &[u8],
    ws_accept: &str,
) -> Result<(), HttpError> {
    if transport == Transport::Ws {
        if head.status != 101 {
            return Err(HttpError::BadHead(
                "WebSocket upgrade not answered with 101",
            ));
        }
        if watch_stream::header_value(&raw[..head.head_len], "sec-websocket-accept")
            != Some(ws_accept.as_bytes())
        {
            return Err(HttpError::BadHead("wrong or missing Sec-WebSocket-Accept"));
        }
        return Ok(());
    }
    if head.status != 200 {
        return Err(HttpError::BadHead("watch answered with a non-200 status"));
    }
    if head.body != http::BodyKind::Chunked {
        return Err(HttpError::BadHead("watch response is not chunked"));
    }
    Ok(())
}

/// One raw-socket watcher (HTTP/1.1 or WebSocket): open (holding a connect permit until the
/// head arrives), then count events until the stream ends.
async fn watcher(
    idx: usize,
    addr: SocketAddr,
    transport: Transport,
    request: Arc<[u8]>,
    shared: Arc<Shared>,
    sample_slot: Option<usize>,
    permits: Arc<Semaphore>,
) {
    let ws_accept = apiserver::server::websocket::accept_key(&watch_stream::ws_key());
    let opened = async {
        let _permit = permits.acquire().await.ok();
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(&request).await?;
        let mut head = Vec::with_capacity(2048);
        loop {
            if stream.read_buf(&mut head).await? == 0 {
                return Err(HttpError::Closed);
            }
            if let Some(h) = http::parse_head(&head)? {
                check_head(transport, &h, &head, &ws_accept)?;
                head.drain(..h.head_len);
                return Ok((stream, head));
            }
        }
    };
    let (stream, leftover) = match opened.await {
        Ok(v) => v,
        Err(e) => {
            shared.note_error(format!("watcher {idx} failed to open: {e}"));
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    shared.ready.fetch_add(1, Ordering::Relaxed);
    let sampled = sample_slot.is_some();
    let mut parser = match transport {
        Transport::Ws => RawStream::Ws(WsParser::new(sampled)),
        _ => RawStream::Http1(WatchParser::new(sampled)),
    };
    match parser.feed(&leftover, nanos_since(shared.epoch)) {
        Ok(n) => record(&shared, idx, sample_slot, n, parser.samples()),
        Err(e) => {
            shared.note_error(format!("watcher {idx}: {e}"));
            shared.ended.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    drop(leftover);
    loop {
        if let Err(e) = stream.readable().await {
            shared.note_error(format!("watcher {idx}: {e}"));
            break;
        }
        let step = READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            match stream.try_read(&mut buf) {
                Ok(0) => Ok(Step::Eof),
                Ok(n) => {
                    let now = if sampled {
                        nanos_since(shared.epoch)
                    } else {
                        0
                    };
                    parser.feed(&buf[..n], now).map(Step::Events)
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Step::Events(0)),
                Err(e) => Err(HttpError::Io(e)),
            }
        });
        match step {
            Ok(Step::Events(n)) => {
                record(&shared, idx, sample_slot, n, parser.samples());
                if parser.is_done() {
                    break;
                }
            }
            Ok(Step::Eof) => {
                shared.note_error(format!("watcher {idx}: the server closed the stream"));
                break;
            }
            Err(e) => {
                shared.note_error(format!("watcher {idx}: {e}"));
                break;
            }
        }
    }
    shared.ended.fetch_add(1, Ordering::Relaxed);
}

/// One HTTP/2 connection carrying the watchers `first..first + count`: connects (holding a
/// connect permit for the TCP connect and the HTTP/2 handshake), then opens one watch stream
/// per watcher. If the connection cannot be opened, all its watchers count as failed.
async fn h2_connection(
    first: usize,
    count: usize,
    addr: SocketAddr,
    uri: ::http::Uri,
    shared: Arc<Shared>,
    sample_every: usize,
    permits: Arc<Semaphore>,
) {
    let opened = async {
        let _permit = permits.acquire().await.ok();
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (sender, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .initial_stream_window_size(H2_STREAM_WINDOW)
                .initial_connection_window_size(H2_CONN_WINDOW)
                .max_concurrent_reset_streams(count)
                .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(tcp))
                .await?;
        anyhow::Ok((sender, conn))
    };
    let (sender, conn) = match opened.await {
        Ok(v) => v,
        Err(e) => {
            shared.note_error(format!(
                "HTTP/2 connection of watchers {first}..{} failed to open: {e}",
                first + count
            ));
            shared.failed.fetch_add(count, Ordering::Relaxed);
            return;
        }
    };
    let conn_shared = shared.clone();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            conn_shared.note_error(format!("HTTP/2 connection ended: {e}"));
        }
    });
    for idx in first..first + count {
        let slot = (idx % sample_every == 0).then_some(idx / sample_every);
        tokio::spawn(h2_stream(
            idx,
            sender.clone(),
            uri.clone(),
            shared.clone(),
            slot,
        ));
    }
}

/// One watch stream on a shared HTTP/2 connection: count the newlines of each DATA chunk
/// until the stream ends.
async fn h2_stream(
    idx: usize,
    mut sender: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    uri: ::http::Uri,
    shared: Arc<Shared>,
    sample_slot: Option<usize>,
) {
    let opened = async {
        sender.ready().await?;
        let req = ::http::Request::get(uri)
            .header(::http::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        if resp.status() != ::http::StatusCode::OK {
            bail!("watch answered with HTTP {}", resp.status());
        }
        anyhow::Ok(resp.into_body())
    };
    let mut body = match opened.await {
        Ok(b) => b,
        Err(e) => {
            shared.note_error(format!("watcher {idx} failed to open: {e:#}"));
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    shared.ready.fetch_add(1, Ordering::Relaxed);
    let sampled = sample_slot.is_some();
    let mut lines = LineScanner::new(sampled);
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let now = if sampled {
                    nanos_since(shared.epoch)
                } else {
                    0
                };
                let n = lines.feed(&data, now);
                record(&shared, idx, sample_slot, n, &mut lines.samples);
            }
            Some(Err(e)) => {
                shared.note_error(format!("watcher {idx}: {e}"));
                break;
            }
            None => break,
        }
    }
    shared.ended.fetch_add(1, Ordering::Relaxed);
}

/// One acknowledged write.
#[derive(Debug, Clone, Copy)]
struct WriteRecord {
    rv: u64,
    sched_ns: u64,
    sent_ns: u64,
    ack_ns: u64,
}

/// What the writer thread reports back.
#[derive(Debug, Default)]
struct WriteOutcome {
    records: Vec<WriteRecord>,
    errors: u64,
    first_error: Option<String>,
}

/// The writer's schedule for one round.
#[derive(Debug, Clone)]
struct WritePlan {
    addr: SocketAddr,
    rate: u64,
    total: u64,
    writers: usize,
    pods: usize,
    kind: Kind,
    object_size: usize,
    epoch: Instant,
    start_ns: u64,
    seq_base: u64,
}

fn pod_name(i: usize) -> String {
    format!("fanout-{i}")
}

/// Runs the plan on a new thread; the result arrives on the returned channel.
fn spawn_writer(plan: WritePlan) -> tokio::sync::oneshot::Receiver<anyhow::Result<WriteOutcome>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run_writers(plan)));
        let _ = tx.send(result);
    });
    rx
}

async fn run_writers(plan: WritePlan) -> anyhow::Result<WriteOutcome> {
    let mut conns = Vec::with_capacity(plan.writers);
    for _ in 0..plan.writers {
        conns.push(HttpConn::connect(plan.addr).await?);
    }
    let plan = Arc::new(plan);
    let mut tasks = Vec::new();
    for (w, mut conn) in conns.into_iter().enumerate() {
        let plan = plan.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = WriteOutcome::default();
            let mut resp = Vec::with_capacity(8 * 1024);
            let interval = 1e9 / plan.rate as f64;
            let mut k = w as u64;
            while k < plan.total {
                let sched_ns = plan.start_ns + (k as f64 * interval) as u64;
                tokio::time::sleep_until((plan.epoch + Duration::from_nanos(sched_ns)).into())
                    .await;
                let idx = (k % plan.pods as u64) as usize;
                let name = pod_name(idx);
                let body = plan
                    .kind
                    .body(&name, plan.object_size, Some(plan.seq_base + k));
                let path = plan.kind.item_path(&name);
                if conn.is_closed() {
                    match HttpConn::connect(plan.addr).await {
                        Ok(c) => conn = c,
                        Err(e) => {
                            out.errors += 1;
                            out.first_error.get_or_insert(format!("reconnect: {e}"));
                            k += plan.writers as u64;
                            continue;
                        }
                    }
                }
                let sent_ns = nanos_since(plan.epoch);
                // A pod's spec holds what admission added at create (the ServiceAccount
                // volume), which a PUT of the bench's body would remove: pods are changed
                // by a merge patch of their annotations instead, of the same size.
                let result = if plan.kind == Kind::Pod {
                    let patch = super::pod_patch(plan.object_size, Some(plan.seq_base + k));
                    conn.merge_patch(&path, &patch, &mut resp).await
                } else {
                    conn.request("PUT", &path, Some(&body), &mut resp).await
                };
                let ack_ns = nanos_since(plan.epoch);
                match result {
                    Ok(200) => match http::find_rv(&resp) {
                        Some(rv) => out.records.push(WriteRecord {
                            rv,
                            sched_ns,
                            sent_ns,
                            ack_ns,
                        }),
                        None => {
                            out.errors += 1;
                            out.first_error
                                .get_or_insert("update answer without a resourceVersion".into());
                        }
                    },
                    Ok(status) => {
                        out.errors += 1;
                        out.first_error.get_or_insert(format!(
                            "update {name}: HTTP {status}: {}",
                            String::from_utf8_lossy(&resp[..resp.len().min(300)])
                        ));
                    }
                    Err(e) => {
                        out.errors += 1;
                        out.first_error.get_or_insert(format!("update {name}: {e}"));
                    }
                }
                k += plan.writers as u64;
            }
            out
        }));
    }
    let mut all = WriteOutcome::default();
    for t in tasks {
        let mut o = t.await?;
        all.records.append(&mut o.records);
        all.errors += o.errors;
        if all.first_error.is_none() {
            all.first_error = o.first_error;
        }
    }
    Ok(all)
}

/// Creates the pods the writer updates and returns the store's resourceVersion afterwards.
async fn setup(addr: SocketAddr, args: &FanoutArgs) -> anyhow::Result<u64> {
    ensure_namespace(addr).await?;
    args.kind.install(addr).await?;
    let kind = args.kind;
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let next = next.clone();
        let (pods, size) = (args.pods, args.object_size);
        tasks.push(tokio::spawn(async move {
            let mut conn = HttpConn::connect(addr).await?;
            let mut out = Vec::new();
            let path = kind.collection_path();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    return anyhow::Ok(());
                }
                let body = kind.body(&pod_name(i), size, None);
                let status = conn.request("POST", &path, Some(&body), &mut out).await?;
                if status != 201 && status != 409 {
                    bail!(
                        "creating pod {i}: HTTP {status}: {}",
                        String::from_utf8_lossy(&out)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let status = conn
        .request(
            "GET",
            &format!("{}?limit=1", kind.collection_path()),
            None,
            &mut out,
        )
        .await?;
    if status != 200 {
        bail!("listing pods: HTTP {status}");
    }
    http::find_rv(&out).context("the pod list carries no resourceVersion")
}

/// The figures of one measured round.
#[derive(Debug, Clone)]
struct Round {
    target_rate: u64,
    writers: usize,
    window_secs: f64,
    acked_writes: u64,
    write_errors: u64,
    achieved_rate: f64,
    open_watchers: usize,
    ended_watchers: usize,
    expected: u64,
    delivered: u64,
    min_per_watcher: u64,
    max_per_watcher: u64,
    drain_secs: f64,
    latency_ack: LatencySummary,
    latency_send: LatencySummary,
    early: usize,
    write_latency: LatencySummary,
    max_sched_lag_ms: f64,
    server_cpu: Option<f64>,
    loadgen_cpu: Option<f64>,
    server_mem: Option<ProcUsage>,
}

impl Round {
    fn delivered_ratio(&self) -> f64 {
        if self.expected == 0 {
            1.0
        } else {
            self.delivered as f64 / self.expected as f64
        }
    }

    fn kept_up(&self) -> bool {
        self.delivered_ratio() >= 0.95 && self.latency_ack.p99_ms <= 1000.0
    }

    fn cpu_per_million(&self) -> Option<f64> {
        let cpu = self.server_cpu?;
        (self.delivered > 0).then(|| cpu / self.delivered as f64 * 1e6)
    }

    fn print(&self) {
        println!("round: target {} writes/s", self.target_rate);
        line(
            "writes",
            format!(
                "{} acked, {} errors, {:.1}/s achieved over {:.2} s ({} writer connections)",
                self.acked_writes,
                self.write_errors,
                self.achieved_rate,
                self.window_secs,
                self.writers
            ),
        );
        line(
            "watchers",
            format!(
                "{} open at start, {} ended during the round",
                self.open_watchers, self.ended_watchers
            ),
        );
        line(
            "events expected / delivered",
            format!(
                "{} / {} ({:.2}%)",
                self.expected,
                self.delivered,
                self.delivered_ratio() * 100.0
            ),
        );
        line(
            "delivered events/s",
            format!("{:.0}", self.delivered as f64 / self.window_secs),
        );
        line(
            "per-watcher events min / max",
            format!("{} / {}", self.min_per_watcher, self.max_per_watcher),
        );
        line(
            "drain after last write",
            format!("{:.2} s", self.drain_secs),
        );
        line("latency ack->client", self.latency_ack);
        line(
            "  (events seen before their ack)",
            format!("{} (counted as 0 ms)", self.early),
        );
        line("latency send->client", self.latency_send);
        line("write latency (ack - send)", self.write_latency);
        line(
            "writer max schedule lag",
            format!("{:.2} ms", self.max_sched_lag_ms),
        );
        match self.server_cpu {
            Some(cpu) => line(
                "server CPU",
                format!(
                    "{:.2} s ({:.0}% of a core), {} per 1M delivered events",
                    cpu,
                    cpu / self.window_secs * 100.0,
                    self.cpu_per_million()
                        .map_or("n/a".to_string(), |c| format!("{c:.2} s"))
                ),
            ),
            None => line("server CPU", "n/a"),
        }
        line("server memory", fmt_usage(self.server_mem));
        line(
            "loadgen CPU",
            self.loadgen_cpu.map_or("n/a".to_string(), |c| {
                format!("{c:.2} s ({:.0}% of a core)", c / self.window_secs * 100.0)
            }),
        );
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "target_writes_per_sec": self.target_rate,
            "writer_connections": self.writers,
            "window_secs": round3(self.window_secs),
            "acked_writes": self.acked_writes,
            "write_errors": self.write_errors,
            "achieved_writes_per_sec": round3(self.achieved_rate),
            "open_watchers": self.open_watchers,
            "ended_watchers": self.ended_watchers,
            "expected_events": self.expected,
            "delivered_events": self.delivered,
            "delivered_ratio": round3(self.delivered_ratio()),
            "delivered_events_per_sec": round3(self.delivered as f64 / self.window_secs),
            "min_events_per_watcher": self.min_per_watcher,
            "max_events_per_watcher": self.max_per_watcher,
            "drain_secs": round3(self.drain_secs),
            "latency_ack_to_client": self.latency_ack.to_json(),
            "latency_send_to_client": self.latency_send.to_json(),
            "events_before_ack": self.early,
            "write_latency": self.write_latency.to_json(),
            "max_schedule_lag_ms": round3(self.max_sched_lag_ms),
            "server_cpu_secs": self.server_cpu.map(round3),
            "server_cpu_secs_per_million_events": self.cpu_per_million().map(round3),
            "server_memory": usage_json(self.server_mem),
            "loadgen_cpu_secs": self.loadgen_cpu.map(round3),
            "kept_up": self.kept_up(),
        })
    }
}

/// Runs the fan-out benchmark.
pub async fn run(args: FanoutArgs) -> anyhow::Result<()> {
    if args.writes_per_sec == 0 || args.duration == 0 || args.pods == 0 {
        bail!("--writes-per-sec, --duration and --pods must be positive");
    }
    let target = Target::start(&args.target)?;
    let addr = target.addr;
    let rv = setup(addr, &args).await?;
    println!(
        "setup: {} pods of ~{} bytes in namespace {BENCH_NAMESPACE}; watching from resourceVersion {rv}",
        args.pods, args.object_size
    );

    let sample_every = args.sample_every.max(1);
    let sampled = args.watchers.div_ceil(sample_every);
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        delivered: AtomicU64::new(0),
        per_watcher: (0..args.watchers).map(|_| AtomicU64::new(0)).collect(),
        ready: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        ended: AtomicUsize::new(0),
        samples: (0..sampled).map(|_| Mutex::new(Vec::new())).collect(),
        first_error: Mutex::new(None),
    });
    let path = format!(
        "{}?watch=true&resourceVersion={rv}",
        args.kind.collection_path()
    );
    let permits = Arc::new(Semaphore::new(args.connect_concurrency.max(1)));
    let open_started = Instant::now();
    let streams_per_conn = args.streams_per_conn.max(1);
    let connections = match args.transport {
        Transport::H2 => {
            let uri: ::http::Uri = format!("http://{addr}{path}")
                .parse()
                .context("building the watch URI")?;
            let mut first = 0;
            while first < args.watchers {
                let count = streams_per_conn.min(args.watchers - first);
                tokio::spawn(h2_connection(
                    first,
                    count,
                    addr,
                    uri.clone(),
                    shared.clone(),
                    sample_every,
                    permits.clone(),
                ));
                first += count;
            }
            args.watchers.div_ceil(streams_per_conn)
        }
        transport => {
            let request: Arc<[u8]> = if transport == Transport::Ws {
                watch_stream::ws_request(&addr.to_string(), &path).into()
            } else {
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n")
                    .into_bytes()
                    .into()
            };
            for i in 0..args.watchers {
                let slot = (i % sample_every == 0).then_some(i / sample_every);
                tokio::spawn(watcher(
                    i,
                    addr,
                    transport,
                    request.clone(),
                    shared.clone(),
                    slot,
                    permits.clone(),
                ));
            }
            args.watchers
        }
    };
    let open_deadline = open_started + Duration::from_secs(120);
    while shared.ready.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed)
        < args.watchers
    {
        if Instant::now() > open_deadline {
            bail!("watchers did not all open within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failed = shared.failed.load(Ordering::Relaxed);
    println!(
        "watchers ({}, {connections} connections): {} open, {} failed, in {:.2} s{}",
        args.transport.name(),
        shared.ready.load(Ordering::Relaxed),
        failed,
        open_started.elapsed().as_secs_f64(),
        if failed > 0 {
            format!(
                " (first error: {})",
                shared
                    .first_error
                    .lock()
                    .ok()
                    .and_then(|e| e.clone())
                    .unwrap_or_default()
            )
        } else {
            String::new()
        }
    );
    if shared.ready.load(Ordering::Relaxed) == 0 {
        bail!("no watcher could open");
    }

    // Held (never read) until the end of the run. A small receive buffer, so that the
    // kernel holds few of their events and the server's queue for them fills within a run.
    let mut slow = Vec::with_capacity(args.slow_watchers);
    for _ in 0..args.slow_watchers {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(SLOW_WATCHER_RCVBUF)?;
        let mut s = socket.connect(addr).await?;
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        slow.push(s);
    }
    if !slow.is_empty() {
        println!("slow watchers: {} open, never read", slow.len());
    }

    let mut rounds: Vec<Round> = Vec::new();
    let mut rate = args.writes_per_sec;
    let mut seq_base = 0u64;
    loop {
        let round = measure_round(&target, &shared, &args, rate, seq_base).await?;
        seq_base += round.acked_writes + round.write_errors + 1;
        round.print();
        let kept_up = round.kept_up();
        let writer_limited = round.achieved_rate < 0.95 * rate as f64;
        rounds.push(round);
        if !args.ramp {
            break;
        }
        if !kept_up {
            println!("ramp: stopping, the watchers did not keep up at {rate} writes/s");
            break;
        }
        if writer_limited {
            println!("ramp: stopping, the write path could not sustain {rate} writes/s");
            break;
        }
        if rate.saturating_mul(2) > args.max_rate {
            println!("ramp: stopping at --max-rate {}", args.max_rate);
            break;
        }
        rate *= 2;
    }
    let last_kept_up = rounds
        .iter()
        .filter(|r| r.kept_up())
        .map(|r| r.target_rate)
        .max();
    if args.ramp {
        println!(
            "ramp: highest write rate that kept up with {} watchers: {}",
            args.watchers,
            last_kept_up.map_or("none".to_string(), |r| format!("{r} writes/s"))
        );
    }
    if let Some(e) = shared.first_error.lock().ok().and_then(|e| e.clone()) {
        println!("first watcher error: {e}");
    }
    // The server's account of the watchers it closed for not keeping up.
    let terminated = terminated_watchers(addr).await;
    let terminated_logged = target.server.as_ref().map(|s| {
        std::fs::read_to_string(s.dir.join("server.log"))
            .unwrap_or_default()
            .matches("terminating watcher: it cannot keep up")
            .count()
    });
    line(
        "watchers terminated as too slow",
        format!(
            "{} (apiserver_terminated_watchers_total), {} log lines",
            terminated.map_or("n/a".to_string(), |t| t.to_string()),
            terminated_logged.map_or("n/a".to_string(), |t| t.to_string())
        ),
    );
    let json = serde_json::json!({
        "bench": "fanout",
        "transport": args.transport.name(),
        "connections": connections,
        "streams_per_conn": if args.transport == Transport::H2 { serde_json::json!(streams_per_conn) } else { serde_json::Value::Null },
        "watchers": args.watchers,
        "slow_watchers": slow.len(),
        "terminated_watchers": terminated,
        "terminated_watchers_logged": terminated_logged,
        "watchers_failed_to_open": failed,
        "pods": args.pods,
        "kind": args.kind.plural(),
        "object_size": args.object_size,
        "duration_secs": args.duration,
        "sampled_watchers": sampled,
        "spawned_server": target.server.is_some(),
        "latency_reference": "ack time of the write (send time also given)",
        "rounds": rounds.iter().map(Round::to_json).collect::<Vec<_>>(),
        "max_writes_per_sec_kept_up": if args.ramp { serde_json::json!(last_kept_up) } else { serde_json::Value::Null },
    });
    println!("{json}");
    Ok(())
}

/// The receive buffer of a `--slow-watchers` connection.
const SLOW_WATCHER_RCVBUF: u32 = 16 * 1024;

/// The sum of `apiserver_terminated_watchers_total` over every resource, from `/metrics`;
/// `None` if it cannot be read.
async fn terminated_watchers(addr: std::net::SocketAddr) -> Option<u64> {
    let mut conn = HttpConn::connect(addr).await.ok()?;
    let mut body = Vec::new();
    let status = conn
        .request("GET", "/metrics", None, &mut body)
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    let text = String::from_utf8_lossy(&body);
    Some(
        text.lines()
            .filter(|l| l.starts_with("apiserver_terminated_watchers_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

async fn measure_round(
    target: &Target,
    shared: &Arc<Shared>,
    args: &FanoutArgs,
    rate: u64,
    seq_base: u64,
) -> anyhow::Result<Round> {
    let writers = args
        .writers
        .max(usize::try_from(rate.div_ceil(50)).unwrap_or(usize::MAX))
        .clamp(1, 256);
    // Forget samples from before this round.
    for s in &shared.samples {
        if let Ok(mut s) = s.lock() {
            s.clear();
        }
    }
    let srv_before = target.usage();
    let self_before = ProcUsage::of_self();
    let delivered_before = shared.delivered.load(Ordering::Relaxed);
    let per_before: Vec<u64> = shared
        .per_watcher
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let ended_before = shared.ended.load(Ordering::Relaxed);
    let open = shared.ready.load(Ordering::Relaxed) - ended_before;
    let round_start_ns = nanos_since(shared.epoch);
    let plan = WritePlan {
        addr: target.addr,
        rate,
        total: rate * args.duration,
        writers,
        pods: args.pods,
        kind: args.kind,
        object_size: args.object_size,
        epoch: shared.epoch,
        // Leave the writer thread time to connect.
        start_ns: round_start_ns + 200_000_000,
        seq_base,
    };
    let start_ns = plan.start_ns;
    let outcome = spawn_writer(plan)
        .await
        .context("the writer thread died")??;
    let writes_done = Instant::now();
    let acked = outcome.records.len() as u64;
    let expected = acked * open as u64;

    // Drain: wait for the expected events, giving up after 2 s without progress.
    let mut last = shared.delivered.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    loop {
        let now = shared.delivered.load(Ordering::Relaxed);
        if now - delivered_before >= expected
            || last_progress.elapsed() > Duration::from_secs(2)
            || writes_done.elapsed() > Duration::from_secs(60)
        {
            break;
        }
        if now != last {
            last = now;
            last_progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain_secs = writes_done.elapsed().as_secs_f64();
    let end_ns = nanos_since(shared.epoch);
    let srv_after = target.usage();
    let self_after = ProcUsage::of_self();
    let delivered = shared.delivered.load(Ordering::Relaxed) - delivered_before;
    let per: Vec<u64> = shared
        .per_watcher
        .iter()
        .zip(&per_before)
        .map(|(c, b)| c.load(Ordering::Relaxed) - b)
        .collect();

    let by_rv: HashMap<u64, WriteRecord> = outcome.records.iter().map(|r| (r.rv, *r)).collect();
    let mut lat_ack = Vec::new();
    let mut lat_send = Vec::new();
    let mut early = 0;
    for s in &shared.samples {
        let Ok(s) = s.lock() else { continue };
        for &(rv, at) in s.iter() {
            if let Some(w) = by_rv.get(&rv) {
                if at < w.ack_ns {
                    early += 1;
                }
                lat_ack.push(at.saturating_sub(w.ack_ns) / 1000);
                lat_send.push(at.saturating_sub(w.sent_ns) / 1000);
            }
        }
    }
    let mut write_lat: Vec<u64> = outcome
        .records
        .iter()
        .map(|r| (r.ack_ns - r.sent_ns) / 1000)
        .collect();
    let max_lag = outcome
        .records
        .iter()
        .map(|r| r.sent_ns.saturating_sub(r.sched_ns))
        .max()
        .unwrap_or(0);
    let last_ack = outcome
        .records
        .iter()
        .map(|r| r.ack_ns)
        .max()
        .unwrap_or(start_ns);
    let write_secs = (last_ack.saturating_sub(start_ns) as f64 / 1e9).max(1e-9);
    if let Some(e) = &outcome.first_error {
        println!("first write error: {e}");
    }
    Ok(Round {
        target_rate: rate,
        writers,
        window_secs: (end_ns - start_ns) as f64 / 1e9,
        acked_writes: acked,
        write_errors: outcome.errors,
        achieved_rate: acked as f64 / write_secs,
        open_watchers: open,
        ended_watchers: shared.ended.load(Ordering::Relaxed) - ended_before,
        expected,
        delivered,
        min_per_watcher: per.iter().copied().min().unwrap_or(0),
        max_per_watcher: per.iter().copied().max().unwrap_or(0),
        drain_secs,
        latency_ack: LatencySummary::of_micros(&mut lat_ack),
        latency_send: LatencySummary::of_micros(&mut lat_send),
        early,
        write_latency: LatencySummary::of_micros(&mut write_lat),
        max_sched_lag_ms: max_lag as f64 / 1e6,
        server_cpu: cpu_delta(srv_before, srv_after),
        loadgen_cpu: cpu_delta(self_before, self_after),
        server_mem: srv_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(events: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in events {
            out.extend_from_slice(format!("{:x}\r\n{e}\n\r\n", e.len() + 1).as_bytes());
        }
        out
    }

    #[test]
    fn parser_counts_events_across_any_split() {
        let events = [
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"10"}}}"#,
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"b","resourceVersion":"11"}}}"#,
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"c","resourceVersion":"12"}}}"#,
        ];
        let body = chunked(&events);
        for sampled in [false, true] {
            for piece in 1..body.len() {
                let mut p = WatchParser::new(sampled);
                let mut n = 0;
                for (i, part) in body.chunks(piece).enumerate() {
                    n += p.feed(part, i as u64).unwrap();
                }
                assert_eq!(n, 3, "sampled {sampled}, piece {piece}");
                if sampled {
                    let rvs: Vec<u64> = p.samples().iter().map(|s| s.0).collect();
                    assert_eq!(rvs, vec![10, 11, 12], "piece {piece}");
                    // The arrival stamp is that of the read holding the final newline (the
                    // body ends with that newline and then the chunk's CRLF).
                    let last_part = (body.len() - 3) / piece;
                    assert_eq!(p.samples()[2].1, last_part as u64);
                } else {
                    assert!(p.samples().is_empty());
                }
            }
        }
    }

    #[test]
    fn parser_handles_two_events_in_one_chunk_and_end_of_stream() {
        let mut p = WatchParser::new(true);
        let data = b"30\r\n{\"resourceVersion\":\"5\"}\n{\"resourceVersion\":\"6\"}\n\r\n0\r\n\r\n";
        assert_eq!(p.feed(data, 7).unwrap(), 2);
        assert_eq!(*p.samples(), vec![(5, 7), (6, 7)]);
        assert!(p.is_done());
    }
}
