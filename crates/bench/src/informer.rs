//! `listwatch bench informer-sync` and `listwatch bench informer-events`: the client library's
//! informer machinery (issue 3), measured in this process.
//!
//! - `informer-sync`: a spawned server holds N pods; a `SharedIndexInformer<DynamicObject>`
//!   (with `--protobuf`, `<ProtobufObject>`) over a `RestListerWatcher` (plain HTTP) is
//!   started here and timed to `has_synced`; this
//!   process's memory is read from `/proc/self/status` (the peak `VmHWM` is reset first
//!   through `/proc/self/clear_refs`). Then the watch is made to fail with 410 Gone, so the
//!   reflector relists, and the relist's peak is compared with the steady memory.
//! - `informer-events`: (a) in process, a `FakeListerWatcher` feeding reflector → DeltaFIFO
//!   → indexer → one counting handler; (b) from the socket, one informer on the bench
//!   namespace of a spawned server while a writer updates its pods as fast as it can.
//!
//! Unlike the other benchmarks these run on a multi-threaded runtime (2 workers): the
//! informer's reflector, process loop and handler are separate tasks, as in a controller.

use super::creates::{create_pods, CreateLimit};
use super::http::HttpConn;
use super::{
    ensure_namespace, line, pod_patch, round3, run_id, ProcUsage, ServerOpts, Target,
    BENCH_NAMESPACE,
};
use anyhow::{bail, Context as _};
use async_trait::async_trait;
use bytes::Bytes;
use clap::Args;
use client::cache::ConfigureReflector as _;
use client::cache::{
    EventSource, FakeListerWatcher, ListPage, ListRequest, ListerWatcher,
    ResourceEventHandlerFuncs, RestListerWatcher, SharedIndexInformer, WatchError, WatchEvent,
    WatchRequest,
};
use client::object::{DecodeObject, DynamicObject, KubeObject};
use client::protobuf_object::ProtobufObject;
use client::rest::resource::PODS;
use client::rest::{Client, Config, ListParams};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Options of `listwatch bench informer-sync`.
#[derive(Args, Debug, Clone)]
pub struct InformerSyncArgs {
    /// Pods to create before the informer starts.
    #[arg(long, default_value_t = 100_000)]
    pub pods: usize,
    /// Approximate size of each pod in bytes.
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// Concurrent connections creating the pods.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// The reflector's list page size (0 = one unpaged list).
    #[arg(long, default_value_t = 500)]
    pub page_size: u32,
    /// Use the reflector's watch-list mode (a streaming list: one watch with
    /// `sendInitialEvents=true`) instead of a paged list, for the sync and the relist.
    #[arg(long)]
    pub watch_list: bool,
    /// The informer reads `ProtobufObject`s (Kubernetes' protobuf encoding) instead of
    /// `DynamicObject`s (JSON). The server converts each pod to protobuf on the first
    /// protobuf list, so the sync includes those conversions and the relist does not.
    #[arg(long)]
    pub protobuf: bool,
    /// Make the relist one of changed objects: while the informer is cut off (its watch
    /// failed with 410 and its next list or watch held back), every pod is updated once,
    /// and lists at its last synced resourceVersion fail with 410 as after a compaction.
    /// The relist then lists the current state and replaces every cached object, instead
    /// of finding it unchanged.
    #[arg(long)]
    pub relist_changed: bool,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// Options of `listwatch bench informer-events`.
#[derive(Args, Debug, Clone)]
pub struct InformerEventsArgs {
    /// Events pushed through the in-process pipeline.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Distinct keys the in-process events cycle over.
    #[arg(long, default_value_t = 1_000)]
    pub keys: u64,
    /// Pods in the namespace the socket informer watches.
    #[arg(long, default_value_t = 1_000)]
    pub pods: usize,
    /// Seconds the socket writer updates pods.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Concurrent writer connections.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// Approximate size of each pod in bytes (socket case).
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// Skip the socket cases.
    #[arg(long)]
    pub in_process_only: bool,
    /// Events of the socket *replay* case: this many updates are written first, then an
    /// informer whose watch starts at the resourceVersion before them receives them all at
    /// once from the server's watch cache (0 = skip the case). The spawned server's
    /// `--watch-cache-size` is raised to hold them unless given.
    #[arg(long, default_value_t = 100_000)]
    pub replay_events: u64,
    /// Times the written updates are replayed, each to a new informer (the writes, which
    /// take most of the case's time, are made once). Each round is reported.
    #[arg(long, default_value_t = 1)]
    pub replay_rounds: u32,
    /// Skip the socket case driven by live writes (limited by the server's write rate).
    #[arg(long)]
    pub skip_live: bool,
    /// The encoding the replay's informers read: `json` (`DynamicObject`), `protobuf`
    /// (`ProtobufObject`), or `both`, alternating round by round starting with JSON.
    #[arg(long, value_enum, default_value_t = ReplayEncoding::Json)]
    pub encoding: ReplayEncoding,
    /// Turn the client's message buffer pool (`client::buffer_pool`) off for every other
    /// protobuf round, starting with the first, to compare the two in rounds a moment
    /// apart. Those rounds are reported as encoding `protobuf-nopool`.
    #[arg(long)]
    pub pool_ab: bool,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// What the replay's informers ask the server for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayEncoding {
    /// JSON lines, read into `DynamicObject`s.
    Json,
    /// Protobuf frames, read into `ProtobufObject`s.
    Protobuf,
    /// JSON and protobuf in alternate rounds.
    Both,
}

/// The multi-threaded runtime the informer benchmarks run on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Runs `informer-sync` on its own runtime.
pub fn run_sync(args: InformerSyncArgs) -> anyhow::Result<()> {
    runtime()?.block_on(sync_bench(args))
}

/// Runs `informer-events` on its own runtime.
pub fn run_events(args: InformerEventsArgs) -> anyhow::Result<()> {
    runtime()?.block_on(events_bench(args))
}

/// Resets this process's peak RSS (`VmHWM`) to the current RSS. False if the kernel refused.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A `ListerWatcher` that forwards to another one and can make the open watch (and the next
/// one) fail with 410 Gone on demand, forcing the reflector to relist. It also remembers the
/// last item of the last list page, or (in watch-list mode, where the relist is a watch) the
/// latest watched state of the object named by [`GoneSwitch::track`], so the caller can tell
/// when a relist reached the cache.
struct GoneSwitch<L, K> {
    inner: L,
    gone: Arc<AtomicBool>,
    trigger: Arc<Notify>,
    lists: AtomicU64,
    last_listed: Arc<Mutex<Option<Arc<K>>>>,
    tracked: Arc<Tracked>,
    /// While set, lists and new watches wait (see [`GoneSwitch::hold`]).
    held: AtomicBool,
    /// While set, a first page asked for at a given resourceVersion fails with 410, as
    /// after a compaction past it (see [`GoneSwitch::expire_versions`]).
    versions_expired: AtomicBool,
    released: Notify,
}

/// The object (namespace, name) whose watched states [`GoneSource`] records in
/// `last_listed`, once `on`.
#[derive(Default)]
struct Tracked {
    on: AtomicBool,
    id: Mutex<(Option<String>, String)>,
}

impl<L, K> GoneSwitch<L, K> {
    fn new(inner: L) -> Self {
        GoneSwitch {
            inner,
            gone: Arc::new(AtomicBool::new(false)),
            trigger: Arc::new(Notify::new()),
            lists: AtomicU64::new(0),
            last_listed: Arc::new(Mutex::new(None)),
            tracked: Arc::new(Tracked::default()),
            held: AtomicBool::new(false),
            versions_expired: AtomicBool::new(false),
            released: Notify::new(),
        }
    }

    /// From now on, lists that start at a given resourceVersion fail with 410, so the
    /// reflector lists the current state (resourceVersion ""), as it would after the
    /// server compacted past its last synced version.
    fn expire_versions(&self) {
        self.versions_expired.store(true, Ordering::SeqCst);
    }

    /// 410 for a first page at a given resourceVersion while versions are expired.
    fn check_expired(&self, request: &ListRequest) -> Result<(), WatchError> {
        let rv = request.resource_version.as_str();
        let at_version = !rv.is_empty() && rv != "0" && request.continue_token.is_none();
        if at_version && self.versions_expired.load(Ordering::SeqCst) {
            return Err(WatchError::Gone);
        }
        Ok(())
    }

    /// From now on, lists and new watches wait until [`GoneSwitch::release`].
    fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    /// Lets held and later lists and watches go on.
    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
        self.released.notify_waiters();
    }

    async fn wait_released(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.held.load(Ordering::SeqCst) {
                return;
            }
            released.await;
        }
    }

    /// From now on, every watched state of the object named as `obj` is remembered as the
    /// last listed one.
    fn track(&self, obj: &K)
    where
        K: KubeObject,
    {
        *self.tracked.id.lock() = (obj.namespace().map(str::to_string), obj.name().to_string());
        self.tracked.on.store(true, Ordering::SeqCst);
    }

    /// Fails the open watch with 410 now (or the next watch, if none is open); once one watch
    /// has reported the 410, later watches are healthy again.
    fn fire(&self) {
        self.gone.store(true, Ordering::SeqCst);
        self.trigger.notify_waiters();
    }
}

#[async_trait]
impl<K: KubeObject, L: ListerWatcher<K>> ListerWatcher<K> for GoneSwitch<L, K> {
    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError> {
        self.wait_released().await;
        self.check_expired(&request)?;
        let page = self.inner.list(request).await?;
        self.lists.fetch_add(1, Ordering::Relaxed);
        // A relist is under way: later watches are healthy again.
        self.gone.store(false, Ordering::SeqCst);
        if page.continue_token.as_deref().is_none_or(str::is_empty) {
            *self.last_listed.lock() = page.items.last().cloned();
        }
        Ok(page)
    }

    async fn list_streaming(
        &self,
        request: ListRequest,
        sink: &mut (dyn FnMut(Vec<Arc<K>>) + Send),
    ) -> Result<ListPage<K>, WatchError> {
        self.wait_released().await;
        self.check_expired(&request)?;
        let mut last = None;
        let page = self
            .inner
            .list_streaming(request, &mut |items: Vec<Arc<K>>| {
                last = items.last().cloned().or(last.take());
                sink(items);
            })
            .await?;
        self.lists.fetch_add(1, Ordering::Relaxed);
        self.gone.store(false, Ordering::SeqCst);
        if page.continue_token.as_deref().is_none_or(str::is_empty) {
            *self.last_listed.lock() = last;
        }
        Ok(page)
    }

    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        self.wait_released().await;
        if self.gone.swap(false, Ordering::SeqCst) {
            return Err(WatchError::Gone);
        }
        let inner = self.inner.watch(request).await?;
        Ok(Box::new(GoneSource {
            inner,
            gone: self.gone.clone(),
            trigger: self.trigger.clone(),
            last_listed: self.last_listed.clone(),
            tracked: self.tracked.clone(),
        }))
    }
}

struct GoneSource<K> {
    inner: Box<dyn EventSource<K>>,
    gone: Arc<AtomicBool>,
    trigger: Arc<Notify>,
    last_listed: Arc<Mutex<Option<Arc<K>>>>,
    tracked: Arc<Tracked>,
}

impl<K: KubeObject> GoneSource<K> {
    /// Remembers `event`'s object if it is the tracked one.
    fn record(
        &self,
        event: Option<Result<WatchEvent<K>, WatchError>>,
    ) -> Option<Result<WatchEvent<K>, WatchError>> {
        if self.tracked.on.load(Ordering::Relaxed) {
            if let Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) = &event {
                // Compared by parts: no key is built per event.
                let id = self.tracked.id.lock();
                if o.name() == id.1 && o.namespace() == id.0.as_deref() {
                    *self.last_listed.lock() = Some(Arc::clone(o));
                }
            }
        }
        event
    }
}

#[async_trait]
impl<K: KubeObject> EventSource<K> for GoneSource<K> {
    async fn next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        let fired = self.trigger.notified();
        tokio::pin!(fired);
        fired.as_mut().enable();
        if self.gone.swap(false, Ordering::SeqCst) {
            return Some(Err(WatchError::Gone));
        }
        tokio::select! {
            ev = self.inner.next() => self.record(ev),
            _ = fired => {
                self.gone.store(false, Ordering::SeqCst);
                Some(Err(WatchError::Gone))
            }
        }
    }

    fn try_next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        // A pending 410 is left for `next` to report.
        if self.gone.load(Ordering::SeqCst) {
            return None;
        }
        let event = self.inner.try_next();
        self.record(event)
    }
}

/// Polls `cond` every millisecond until it holds or `limit` passes; returns the time taken.
async fn wait_until(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            bail!("{what}: not reached within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(start.elapsed())
}

/// What the sync benchmark reads of a cached object.
trait SyncObject: DecodeObject {
    /// The name in the report.
    const TYPE: &'static str;
    /// Bytes the object holds, by its own estimate.
    fn approx_bytes(&self) -> usize;
    /// Its JSON's length, when it is kept as JSON.
    fn json_len(&self) -> Option<usize>;
}

impl SyncObject for DynamicObject {
    const TYPE: &'static str = "DynamicObject";
    fn approx_bytes(&self) -> usize {
        self.approx_size()
    }
    fn json_len(&self) -> Option<usize> {
        Some(self.json().len())
    }
}

impl SyncObject for ProtobufObject {
    const TYPE: &'static str = "ProtobufObject";
    fn approx_bytes(&self) -> usize {
        self.approx_size()
    }
    fn json_len(&self) -> Option<usize> {
        None
    }
}

async fn sync_bench(args: InformerSyncArgs) -> anyhow::Result<()> {
    if args.protobuf {
        sync_bench_of::<ProtobufObject>(args).await
    } else {
        sync_bench_of::<DynamicObject>(args).await
    }
}

async fn sync_bench_of<K: SyncObject>(args: InformerSyncArgs) -> anyhow::Result<()> {
    let target = Target::start(&args.target)?;
    ensure_namespace(target.addr).await?;
    let prefix = format!("lwbi-{}-", run_id());
    create_all(
        target.addr,
        args.clients,
        args.object_size,
        &prefix,
        args.pods,
    )
    .await?;
    let srv = target.usage();
    let client = Client::new(Config::new(&format!("http://{}", target.addr))?)?;
    // For objects not kept as JSON, the JSON size they are compared with: the mean over a
    // first page of the same pods as JSON (they differ only in their names' digits). A
    // small page, so the baseline below is not taken over a freed list.
    let json_sample = if K::PROTOBUF {
        let first_page = ListParams {
            limit: Some(500),
            ..Default::default()
        };
        let page = client.list_raw(&PODS, None, &first_page).await?;
        let n = page.items.len().max(1);
        Some(page.items.iter().map(Bytes::len).sum::<usize>() as f64 / n as f64)
    } else {
        None
    };

    // Let the allocator settle, then take the baseline.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = ProcUsage::of_self().context("reading /proc/self")?;
    let hwm_reset = reset_peak_rss();

    let rest = RestListerWatcher::<K>::new(client, PODS);
    let switch = Arc::new(GoneSwitch::new(rest));
    let informer = SharedIndexInformer::builder(switch.clone() as Arc<dyn ListerWatcher<K>>)
        .name("pods")
        .page_size(args.page_size)
        .watch_list(args.watch_list)
        .build();
    let start = Instant::now();
    informer.start();
    wait_until("has_synced", Duration::from_secs(120), || {
        informer.has_synced()
    })
    .await?;
    let sync_time = start.elapsed();
    let pages = switch.lists.load(Ordering::Relaxed);
    let after_sync = ProcUsage::of_self().context("reading /proc/self")?;

    let objects = informer.indexer().list();
    let count = objects.len();
    if count < args.pods {
        bail!(
            "the cache holds {count} objects, expected at least {}",
            args.pods
        );
    }
    let json_bytes: usize = objects.iter().filter_map(|o| o.json_len()).sum();
    let approx: usize = objects.iter().map(|o| o.approx_bytes()).sum();
    drop(objects);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let steady = ProcUsage::of_self().context("reading /proc/self")?;
    let per_object = (steady.rss_kib.saturating_sub(base.rss_kib) * 1024) as f64 / count as f64;
    let json_per_object = json_sample.unwrap_or(json_bytes as f64 / count as f64);
    let ratio = per_object / json_per_object;

    // The relist: fail the watch with 410; the reflector lists again (paged, or with a
    // streaming list in watch-list mode) and replaces. Both deliver the objects in key order,
    // so the relist has reached the cache once the object with the greatest key was applied
    // (only that one old object is kept here, so the measurement holds no other).
    if args.relist_changed {
        switch.hold();
        switch.expire_versions();
        switch.fire();
        update_all(target.addr, &prefix, &args).await?;
        // The writers' buffers are freed before the peak is reset.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    reset_peak_rss();
    let relist_start = Instant::now();
    let lists_before = switch.lists.load(Ordering::Relaxed);
    let old_last = informer
        .indexer()
        .list()
        .into_iter()
        .max_by(|a, b| client::cache::object_key(&**a).cmp(&client::cache::object_key(&**b)))
        .context("empty cache")?;
    let listed_before = switch.last_listed.lock().clone();
    switch.track(&*old_last);
    if args.relist_changed {
        switch.release();
    } else {
        switch.fire();
    }
    // Reached: the relist's copy of that object is either cached, or — unchanged, so the
    // informer kept its own copy — dropped by everyone but the switch (and this check).
    let relist_done = || {
        let Some(listed) = switch.last_listed.lock().clone() else {
            return false;
        };
        let from_the_first_list = listed_before
            .as_ref()
            .is_some_and(|before| Arc::ptr_eq(before, &listed));
        if from_the_first_list || Arc::ptr_eq(&listed, &old_last) {
            return false;
        }
        let cached = informer.indexer().get(&old_last);
        cached.is_some_and(|c| Arc::ptr_eq(&c, &listed)) || Arc::strong_count(&listed) == 2
    };
    wait_until("relist", Duration::from_secs(120), relist_done).await?;
    let relist_time = relist_start.elapsed();
    let relist_pages = switch.lists.load(Ordering::Relaxed) - lists_before;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_relist = ProcUsage::of_self().context("reading /proc/self")?;
    let relist_peak_ratio = after_relist.hwm_kib.saturating_sub(base.rss_kib) as f64
        / steady.rss_kib.saturating_sub(base.rss_kib).max(1) as f64;
    let relist_peak_total_ratio = after_relist.hwm_kib as f64 / steady.rss_kib.max(1) as f64;
    informer.shutdown().await;

    println!(
        "informer-sync: {count} pods of ~{} bytes JSON{}, one SharedIndexInformer<{}>, {}",
        json_per_object.round(),
        if json_sample.is_some() {
            " (the mean of a first page of 500)"
        } else {
            ""
        },
        K::TYPE,
        if args.watch_list {
            "watch-list (streaming list)".to_string()
        } else {
            format!("page size {}", args.page_size)
        }
    );
    line(
        "time to has_synced",
        format!(
            "{:.3} s ({pages} list pages, {:.0} objects/s)",
            sync_time.as_secs_f64(),
            count as f64 / sync_time.as_secs_f64()
        ),
    );
    line(
        "RSS before informer",
        format!("{:.1} MiB", mib(base.rss_kib)),
    );
    line(
        "RSS at has_synced / peak",
        format!(
            "{:.1} MiB / {:.1} MiB{}",
            mib(after_sync.rss_kib),
            mib(after_sync.hwm_kib),
            if hwm_reset { "" } else { " (peak NOT reset)" }
        ),
    );
    line(
        "steady RSS",
        format!(
            "{:.1} MiB (+{:.1} MiB)",
            mib(steady.rss_kib),
            mib(steady.rss_kib.saturating_sub(base.rss_kib))
        ),
    );
    line(
        "bytes per cached object",
        format!(
            "{per_object:.0} (RSS delta) vs {json_per_object:.0} JSON = {ratio:.2}x; \
             approx_size says {:.0}",
            approx as f64 / count as f64
        ),
    );
    line(
        "relist",
        format!(
            "{:.3} s ({relist_pages} pages) incl. the reflector's backoff, of {} objects",
            relist_time.as_secs_f64(),
            if args.relist_changed {
                "changed"
            } else {
                "unchanged"
            }
        ),
    );
    line(
        "relist peak / steady",
        format!(
            "{:.1} MiB / {:.1} MiB: {relist_peak_ratio:.2}x of the cache's memory \
             ({relist_peak_total_ratio:.2}x of the process RSS)",
            mib(after_relist.hwm_kib),
            mib(steady.rss_kib)
        ),
    );
    line("server memory after creates", super::fmt_usage(srv));
    let json = serde_json::json!({
        "bench": "informer-sync",
        "pods": count,
        "object_type": K::TYPE,
        "json_bytes_per_object": round3(json_per_object),
        "sync_secs": round3(sync_time.as_secs_f64()),
        "page_size": args.page_size,
        "watch_list": args.watch_list,
        "list_pages": pages,
        "base_rss_kib": base.rss_kib,
        "synced_rss_kib": after_sync.rss_kib,
        "sync_peak_kib": after_sync.hwm_kib,
        "steady_rss_kib": steady.rss_kib,
        "bytes_per_object": round3(per_object),
        "bytes_per_object_vs_json": round3(ratio),
        "relist_secs": round3(relist_time.as_secs_f64()),
        "relist_peak_kib": after_relist.hwm_kib,
        "relist_peak_vs_steady_cache": round3(relist_peak_ratio),
        "relist_peak_vs_steady_process": round3(relist_peak_total_ratio),
        "peak_reset_ok": hwm_reset,
        "relist_changed": args.relist_changed,
    });
    println!("{json}");
    Ok(())
}

/// Updates each of the `args.pods` pods named `{prefix}{i:07}` once.
async fn update_all(addr: SocketAddr, prefix: &str, args: &InformerSyncArgs) -> anyhow::Result<()> {
    let writes = update_pods(
        addr,
        pod_names(prefix, args.pods),
        args.clients,
        args.object_size,
        Instant::now() + Duration::from_secs(600),
        args.pods as u64,
    )
    .await?;
    if writes.acked < args.pods as u64 {
        bail!(
            "only {} of {} pods were updated: {}",
            writes.acked,
            args.pods,
            writes.first_error.unwrap_or_default()
        );
    }
    Ok(())
}

/// An informer with one handler counting adds and updates.
fn counting_informer<K: KubeObject>(
    lw: Arc<dyn ListerWatcher<K>>,
) -> (SharedIndexInformer<K>, Arc<AtomicU64>) {
    let informer = SharedIndexInformer::builder(lw).name("pods").build();
    let handled = Arc::new(AtomicU64::new(0));
    let (a, u) = (handled.clone(), handled.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |_, _| {
                a.fetch_add(1, Ordering::Relaxed);
            })
            .on_update(move |_, _| {
                u.fetch_add(1, Ordering::Relaxed);
            }),
    );
    (informer, handled)
}

/// Figures of the in-process case.
struct InProcess {
    events: u64,
    secs: f64,
    feed_secs: f64,
    cpu_secs: Option<f64>,
}

async fn in_process(events: u64, keys: u64) -> anyhow::Result<InProcess> {
    let keys = keys.max(1);
    // Every event carries a new resourceVersion (an unchanged one would count as a resync
    // and reach no handler), so the objects are built before the clock starts.
    let objects: Vec<Arc<DynamicObject>> = (0..events)
        .map(|i| {
            let json = format!(
                r#"{{"metadata":{{"name":"o{}","namespace":"bench","resourceVersion":"{}","labels":{{"app":"web"}}}}}}"#,
                i % keys,
                i + 1
            );
            DynamicObject::from_slice(json.as_bytes()).map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
    let (informer, handled) =
        counting_informer(fake.clone() as Arc<dyn ListerWatcher<DynamicObject>>);
    informer.start();
    wait_until("has_synced", Duration::from_secs(10), || {
        informer.has_synced()
    })
    .await?;
    // The watch must be open before events are fed, or they would arrive through a list.
    wait_until("open watch", Duration::from_secs(10), || {
        fake.open_watches() > 0
    })
    .await?;
    let cpu0 = ProcUsage::of_self();
    let start = Instant::now();
    for (i, o) in objects.iter().enumerate() {
        if (i as u64) < keys {
            fake.add(Arc::clone(o));
        } else {
            fake.modify(Arc::clone(o));
        }
        if i % 1024 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let fed = start.elapsed();
    wait_until("all events handled", Duration::from_secs(300), || {
        handled.load(Ordering::Relaxed) >= events
    })
    .await?;
    let total = start.elapsed();
    let cpu = super::cpu_delta(cpu0, ProcUsage::of_self());
    let cached = informer.indexer().len() as u64;
    informer.shutdown().await;
    if cached != keys.min(events) {
        bail!(
            "the cache holds {cached} objects, expected {}",
            keys.min(events)
        );
    }
    Ok(InProcess {
        events,
        secs: total.as_secs_f64(),
        feed_secs: fed.as_secs_f64(),
        cpu_secs: cpu,
    })
}

/// What the socket writer achieved.
#[derive(Debug, Default)]
struct Writes {
    acked: u64,
    errors: u64,
    first_error: Option<String>,
}

/// The names `create_all` gives `pods` pods: `{prefix}{i:07}`.
fn pod_names(prefix: &str, pods: usize) -> Arc<Vec<String>> {
    Arc::new((0..pods).map(|i| format!("{prefix}{i:07}")).collect())
}

/// Updates pods `names` round-robin over `writers` connections until `until` or until
/// `limit` updates were started, on a thread of its own (with its own single-threaded
/// runtime, so the writes do not compete with the informer's tasks), and returns once
/// they are all answered.
async fn update_pods(
    addr: SocketAddr,
    names: Arc<Vec<String>>,
    writers: usize,
    object_size: usize,
    until: Instant,
    limit: u64,
) -> anyhow::Result<Writes> {
    let writer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let next = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..writers.max(1) {
                let conn = HttpConn::connect(addr).await?;
                let (next, names) = (next.clone(), names.clone());
                tasks.push(tokio::spawn(async move {
                    let mut conn = conn;
                    let mut w = Writes::default();
                    let mut resp = Vec::with_capacity(8 * 1024);
                    while Instant::now() < until {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= limit {
                            break;
                        }
                        let name = &names[(k % names.len() as u64) as usize];
                        let patch = pod_patch(object_size, Some(k));
                        let path = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods/{name}");
                        if conn.is_closed() {
                            match HttpConn::connect(addr).await {
                                Ok(c) => conn = c,
                                Err(e) => {
                                    w.errors += 1;
                                    w.first_error.get_or_insert(format!("reconnect: {e}"));
                                    tokio::time::sleep(Duration::from_millis(10)).await;
                                    continue;
                                }
                            }
                        }
                        match conn.merge_patch(&path, &patch, &mut resp).await {
                            Ok(200) => w.acked += 1,
                            Ok(status) => {
                                w.errors += 1;
                                w.first_error.get_or_insert(format!(
                                    "update {name}: HTTP {status}: {}",
                                    String::from_utf8_lossy(&resp[..resp.len().min(300)])
                                ));
                            }
                            Err(e) => {
                                w.errors += 1;
                                w.first_error.get_or_insert(format!("update {name}: {e}"));
                            }
                        }
                    }
                    w
                }));
            }
            let mut all = Writes::default();
            for t in tasks {
                let w = t.await?;
                all.acked += w.acked;
                all.errors += w.errors;
                if all.first_error.is_none() {
                    all.first_error = w.first_error;
                }
            }
            Ok(all)
        })
    });
    while !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match writer.join() {
        Ok(r) => r,
        Err(_) => bail!("the writer thread panicked"),
    }
}

/// Figures of the socket case.
struct FromSocket {
    pods: usize,
    secs: f64,
    writes: Writes,
    handled: u64,
    drain_secs: f64,
    server_cpu: Option<f64>,
    self_cpu: Option<f64>,
}

async fn from_socket(args: &InformerEventsArgs) -> anyhow::Result<FromSocket> {
    let target = Target::start(&args.target)?;
    ensure_namespace(target.addr).await?;
    let prefix = format!("lwbe-{}-", run_id());
    create_all(
        target.addr,
        args.writers.min(args.pods.max(1)),
        args.object_size,
        &prefix,
        args.pods,
    )
    .await?;
    let names = pod_names(&prefix, args.pods);
    let client = Client::new(Config::new(&format!("http://{}", target.addr))?)?;
    let lw = RestListerWatcher::<DynamicObject>::new(client, PODS).namespace(BENCH_NAMESPACE);
    let (informer, handled) = counting_informer(Arc::new(lw));
    informer.start();
    wait_until("has_synced", Duration::from_secs(60), || {
        informer.has_synced()
    })
    .await?;
    wait_until("initial adds handled", Duration::from_secs(60), || {
        handled.load(Ordering::Relaxed) >= args.pods as u64
    })
    .await?;
    let base = handled.load(Ordering::Relaxed);
    let srv0 = target.usage();
    let self0 = ProcUsage::of_self();
    let start = Instant::now();
    let until = start + Duration::from_secs(args.duration);
    let writes = update_pods(
        target.addr,
        names,
        args.writers,
        args.object_size,
        until,
        u64::MAX,
    )
    .await?;
    let secs = start.elapsed().as_secs_f64();
    // Wait for the informer to see every acknowledged write (or give up after 10 s).
    let drain_start = Instant::now();
    let _ = wait_until("events drained", Duration::from_secs(10), || {
        handled.load(Ordering::Relaxed) - base >= writes.acked
    })
    .await;
    let drain_secs = drain_start.elapsed().as_secs_f64();
    let server_cpu = super::cpu_delta(srv0, target.usage());
    let self_cpu = super::cpu_delta(self0, ProcUsage::of_self());
    let seen = handled.load(Ordering::Relaxed) - base;
    informer.shutdown().await;
    Ok(FromSocket {
        pods: args.pods,
        secs,
        writes,
        handled: seen,
        drain_secs,
        server_cpu,
        self_cpu,
    })
}

/// A `ListerWatcher` whose list is empty at a fixed resourceVersion: the informer's watch
/// then starts there, and the server replays every later event from its watch cache at
/// once — a burst as fast as the server can send and the client can take.
struct ReplayFrom<L> {
    inner: L,
    resource_version: String,
}

#[async_trait]
impl<K: KubeObject, L: ListerWatcher<K>> ListerWatcher<K> for ReplayFrom<L> {
    async fn list(&self, _request: ListRequest) -> Result<ListPage<K>, WatchError> {
        Ok(ListPage {
            items: Vec::new(),
            resource_version: self.resource_version.clone(),
            continue_token: None,
        })
    }

    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        self.inner.watch(request).await
    }
}

/// Figures of the socket replay case.
struct Replay {
    pods: usize,
    events: u64,
    write_secs: f64,
    rounds: Vec<ReplayRound>,
    raw: RawReplay,
}

/// One informer's replay of all the written updates.
struct ReplayRound {
    /// `json` or `protobuf`.
    encoding: &'static str,
    secs: f64,
    handled: u64,
    server_cpu: Option<f64>,
    self_cpu: Option<f64>,
}

async fn replay(args: &InformerEventsArgs) -> anyhow::Result<Replay> {
    let mut opts = args.target.clone();
    let need = (args.replay_events as usize + args.pods) * 11 / 10;
    if opts.server.is_none() && opts.watch_cache_size.is_none() {
        opts.watch_cache_size = Some(need.max(1000));
    }
    let target = Target::start(&opts)?;
    ensure_namespace(target.addr).await?;
    let prefix = format!("lwbr-{}-", run_id());
    create_all(
        target.addr,
        args.writers.min(args.pods.max(1)),
        args.object_size,
        &prefix,
        args.pods,
    )
    .await?;
    let client = Client::new(Config::new(&format!("http://{}", target.addr))?)?;
    let params = client::rest::ListParams {
        limit: Some(1),
        ..Default::default()
    };
    let start_rv = client
        .list_raw(&PODS, Some(BENCH_NAMESPACE), &params)
        .await?
        .resource_version;
    let write_start = Instant::now();
    let writes = update_pods(
        target.addr,
        pod_names(&prefix, args.pods),
        args.writers,
        args.object_size,
        write_start + Duration::from_secs(600),
        args.replay_events,
    )
    .await?;
    let write_secs = write_start.elapsed().as_secs_f64();
    if writes.errors > 0 {
        bail!(
            "{} of the replayed updates failed: {}",
            writes.errors,
            writes.first_error.unwrap_or_default()
        );
    }
    let mut rounds = Vec::new();
    // With --pool-ab, the protobuf rounds alternate, starting without the pool.
    let mut next_without_pool = true;
    for i in 0..args.replay_rounds.max(1) {
        let protobuf = match args.encoding {
            ReplayEncoding::Json => false,
            ReplayEncoding::Protobuf => true,
            ReplayEncoding::Both => i % 2 == 1,
        };
        let round = if protobuf {
            let pool_off = args.pool_ab && next_without_pool;
            next_without_pool = !next_without_pool;
            client::buffer_pool::set_enabled(!pool_off);
            let mut round =
                replay_round::<ProtobufObject>(&client, &start_rv, writes.acked, &target).await;
            client::buffer_pool::set_enabled(true);
            if pool_off {
                if let Ok(r) = &mut round {
                    r.encoding = "protobuf-nopool";
                }
            }
            round?
        } else {
            replay_round::<DynamicObject>(&client, &start_rv, writes.acked, &target).await?
        };
        rounds.push(round);
    }
    // After the informer, so that its figures compare with runs from before this reader.
    let raw = raw_replay(target.addr, &start_rv, writes.acked, &target).await?;
    Ok(Replay {
        pods: args.pods,
        events: writes.acked,
        write_secs,
        rounds,
        raw,
    })
}

/// One informer reading objects as `K` replays the `events` written after `start_rv`.
async fn replay_round<K: DecodeObject>(
    client: &Client,
    start_rv: &str,
    events: u64,
    target: &Target,
) -> anyhow::Result<ReplayRound> {
    let lw = RestListerWatcher::<K>::new(client.clone(), PODS).namespace(BENCH_NAMESPACE);
    let (informer, handled) = counting_informer::<K>(Arc::new(ReplayFrom {
        inner: lw,
        resource_version: start_rv.to_string(),
    }));
    let srv0 = target.usage();
    let self0 = ProcUsage::of_self();
    let start = Instant::now();
    informer.start();
    wait_until("replayed events handled", Duration::from_secs(300), || {
        handled.load(Ordering::Relaxed) >= events
    })
    .await?;
    let secs = start.elapsed().as_secs_f64();
    let server_cpu = super::cpu_delta(srv0, target.usage());
    let self_cpu = super::cpu_delta(self0, ProcUsage::of_self());
    let seen = handled.load(Ordering::Relaxed);
    informer.shutdown().await;
    Ok(ReplayRound {
        encoding: if K::PROTOBUF { "protobuf" } else { "json" },
        secs,
        handled: seen,
        server_cpu,
        self_cpu,
    })
}

/// What a reader that does nothing with the bytes gets from the same replay: the floor
/// the server and the socket set for any client.
struct RawReplay {
    secs: f64,
    server_cpu: Option<f64>,
    self_cpu: Option<f64>,
}

/// Replays the same events to a plain socket reader that only undoes the chunked framing
/// and counts lines, as the fan-out benchmark's watchers do.
async fn raw_replay(
    addr: SocketAddr,
    start_rv: &str,
    events: u64,
    target: &Target,
) -> anyhow::Result<RawReplay> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let srv0 = target.usage();
    let self0 = ProcUsage::of_self();
    let start = Instant::now();
    let mut sock = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "GET /api/v1/namespaces/{BENCH_NAMESPACE}/pods?watch=true&resourceVersion={start_rv} \
         HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    sock.write_all(request.as_bytes()).await?;
    // The fan-out benchmark's watcher parts: its head parser and its chunked line counter.
    let mut head = Vec::with_capacity(2048);
    let mut parser = loop {
        if sock.read_buf(&mut head).await? == 0 {
            bail!("the raw replay watch closed before its head");
        }
        if let Some(h) = super::http::parse_head(&head)? {
            if h.status != 200 || h.body != super::http::BodyKind::Chunked {
                bail!("raw replay: {}", String::from_utf8_lossy(&head));
            }
            head.drain(..h.head_len);
            break super::fanout::WatchParser::new(false);
        }
    };
    let mut seen = parser.feed(&head, 0)?;
    let mut buf = vec![0u8; 256 << 10];
    while seen < events {
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf))
            .await
            .context("raw replay stalled")??;
        if n == 0 {
            bail!("the raw replay watch ended after {seen} of {events} events");
        }
        seen += parser.feed(&buf[..n], 0)?;
    }
    Ok(RawReplay {
        secs: start.elapsed().as_secs_f64(),
        server_cpu: super::cpu_delta(srv0, target.usage()),
        self_cpu: super::cpu_delta(self0, ProcUsage::of_self()),
    })
}

async fn events_bench(args: InformerEventsArgs) -> anyhow::Result<()> {
    let ip = in_process(args.events, args.keys).await?;
    let ip_rate = ip.events as f64 / ip.secs;
    println!(
        "informer-events (in process): {} events over {} keys, FakeListerWatcher → reflector → \
         DeltaFIFO → indexer → 1 handler",
        ip.events, args.keys
    );
    line(
        "events/s",
        format!(
            "{ip_rate:.0} ({:.3} s; feeding took {:.3} s)",
            ip.secs, ip.feed_secs
        ),
    );
    line(
        "process CPU",
        ip.cpu_secs.map_or("n/a".to_string(), |c| {
            format!("{c:.2} s ({:.0} ns per event)", c * 1e9 / ip.events as f64)
        }),
    );
    let mut json = serde_json::json!({
        "bench": "informer-events",
        "in_process": {
            "events": ip.events,
            "keys": args.keys,
            "secs": round3(ip.secs),
            "events_per_sec": round3(ip_rate),
            "cpu_secs": ip.cpu_secs.map(round3),
        },
    });
    if !args.in_process_only && args.replay_events > 0 {
        let r = replay(&args).await?;
        println!(
            "informer-events (socket replay): {} updates of {} pods of ~{} bytes written first \
             ({:.1} s), then replayed from the watch cache to 1 informer (RestListerWatcher → \
             reflector → DeltaFIFO → indexer → 1 handler), {} time(s)",
            r.events,
            r.pods,
            args.object_size,
            r.write_secs,
            r.rounds.len()
        );
        let mut rounds_json = Vec::new();
        for round in &r.rounds {
            let rate = r.events as f64 / round.secs;
            line(
                &format!("handler ({}): events/s", round.encoding),
                format!(
                    "{rate:.0} ({} events in {:.3} s)",
                    round.handled, round.secs
                ),
            );
            line(
                "server CPU / this process CPU",
                format!(
                    "{} / {}",
                    round
                        .server_cpu
                        .map_or("n/a".to_string(), |c| format!("{c:.2} s")),
                    round.self_cpu.map_or("n/a".to_string(), |c| format!(
                        "{c:.2} s ({:.0} ns per event)",
                        c * 1e9 / r.events.max(1) as f64
                    ))
                ),
            );
            rounds_json.push(serde_json::json!({
                "encoding": round.encoding,
                "secs": round3(round.secs),
                "events_per_sec": round3(rate),
                "server_cpu_secs": round.server_cpu.map(round3),
                "self_cpu_secs": round.self_cpu.map(round3),
            }));
        }
        let raw_rate = r.events as f64 / r.raw.secs;
        line(
            "plain reader: events/s",
            format!(
                "{raw_rate:.0} (server CPU {}, reader CPU {}: the floor of server and socket)",
                r.raw
                    .server_cpu
                    .map_or("n/a".to_string(), |c| format!("{c:.2} s")),
                r.raw
                    .self_cpu
                    .map_or("n/a".to_string(), |c| format!("{c:.2} s")),
            ),
        );
        json["socket_replay"] = serde_json::json!({
            "plain_reader_events_per_sec": round3(raw_rate),
            "plain_reader_server_cpu_secs": r.raw.server_cpu.map(round3),
            "plain_reader_self_cpu_secs": r.raw.self_cpu.map(round3),
            "pods": r.pods,
            "object_size": args.object_size,
            "events": r.events,
            "rounds": rounds_json,
        });
    }
    if !args.in_process_only && !args.skip_live {
        let s = from_socket(&args).await?;
        let written = s.writes.acked as f64 / s.secs;
        let seen = s.handled as f64 / s.secs;
        println!(
            "informer-events (socket): 1 informer on {} pods of ~{} bytes, {} writer \
             connections for {} s",
            s.pods, args.object_size, args.writers, args.duration
        );
        line(
            "server: acknowledged writes/s",
            format!(
                "{written:.0} ({} writes, {} errors)",
                s.writes.acked, s.writes.errors
            ),
        );
        if let Some(e) = &s.writes.first_error {
            line("first write error", e);
        }
        line(
            "handler: events/s",
            format!(
                "{seen:.0} ({} events; {:.3} s to drain after the writer stopped)",
                s.handled, s.drain_secs
            ),
        );
        line(
            "server CPU / this process CPU",
            format!(
                "{} / {}",
                s.server_cpu
                    .map_or("n/a".to_string(), |c| format!("{c:.2} s")),
                s.self_cpu.map_or("n/a".to_string(), |c| format!(
                    "{c:.2} s (writer + informer)"
                ))
            ),
        );
        json["from_socket"] = serde_json::json!({
            "pods": s.pods,
            "object_size": args.object_size,
            "writers": args.writers,
            "secs": round3(s.secs),
            "acked_writes": s.writes.acked,
            "write_errors": s.writes.errors,
            "writes_per_sec": round3(written),
            "handled_events": s.handled,
            "handled_per_sec": round3(seen),
            "drain_secs": round3(s.drain_secs),
            "server_cpu_secs": s.server_cpu.map(round3),
            "self_cpu_secs": s.self_cpu.map(round3),
        });
    }
    println!("{json}");
    Ok(())
}

/// Creates exactly `pods` bench pods named `{prefix}{i:07}` over `conns` connections; an error
/// if any create failed.
async fn create_all(
    addr: std::net::SocketAddr,
    conns: usize,
    object_size: usize,
    prefix: &str,
    pods: usize,
) -> anyhow::Result<()> {
    let created = create_pods(addr, conns, object_size, prefix, CreateLimit::Count(pods))
        .await?
        .created;
    if created < pods as u64 {
        bail!("only {created} of {pods} pods were created");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::object::KubeObject;

    fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"bench","resourceVersion":"{rv}"}}}}"#
        );
        Arc::new(DynamicObject::from_slice(json.as_bytes()).unwrap())
    }

    #[tokio::test]
    async fn gone_switch_fails_the_open_watch_or_the_next_one_once() {
        let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        fake.add(obj("a", 1));
        let switch = GoneSwitch::new(fake.clone());
        let page = switch.list(ListRequest::default()).await.unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(
            switch
                .last_listed
                .lock()
                .as_ref()
                .map(|o| o.name().to_string()),
            Some("a".to_string())
        );
        let mut source = switch
            .watch(WatchRequest {
                resource_version: page.resource_version.clone(),
                ..WatchRequest::default()
            })
            .await
            .unwrap();
        fake.modify(obj("a", 2));
        assert!(matches!(
            source.next().await,
            Some(Ok(WatchEvent::Modified(_)))
        ));
        // Untracked, a watched state is not remembered; tracked, it is.
        let rv_of_last = |s: &GoneSwitch<_, DynamicObject>| {
            s.last_listed
                .lock()
                .as_ref()
                .and_then(|o| o.resource_version().map(str::to_string))
        };
        assert_eq!(rv_of_last(&switch).as_deref(), Some("1"));
        switch.track(&obj("a", 0));
        fake.add(obj("b", 3));
        fake.modify(obj("a", 4));
        for _ in 0..2 {
            assert!(source.next().await.unwrap().is_ok());
        }
        assert_eq!(rv_of_last(&switch).as_deref(), Some("4"));
        switch.fire();
        assert_eq!(source.next().await.unwrap().err(), Some(WatchError::Gone));
        // Reported once: the next watch is healthy.
        assert!(switch.watch(WatchRequest::default()).await.is_ok());
        // Fired with no watch open: the next watch fails, once.
        switch.fire();
        assert_eq!(
            switch.watch(WatchRequest::default()).await.err(),
            Some(WatchError::Gone)
        );
        assert!(switch.watch(WatchRequest::default()).await.is_ok());
        switch.list(ListRequest::default()).await.unwrap();
        assert_eq!(switch.lists.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_held_switch_makes_lists_wait_and_expired_versions_fail_with_410() {
        let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        fake.add(obj("a", 1));
        let switch = Arc::new(GoneSwitch::new(fake.clone()));
        let at = |rv: &str| ListRequest {
            resource_version: rv.to_string(),
            ..ListRequest::default()
        };
        switch.expire_versions();
        assert_eq!(switch.list(at("1")).await.err(), Some(WatchError::Gone));
        assert_eq!(switch.lists.load(Ordering::Relaxed), 0);
        // The current state and any state are still listed.
        assert!(switch.list(at("")).await.is_ok());
        assert!(switch.list(at("0")).await.is_ok());
        switch.hold();
        let held = tokio::spawn({
            let switch = switch.clone();
            async move { switch.list(at("")).await.map(|p| p.items.len()) }
        });
        let watch = tokio::spawn({
            let switch = switch.clone();
            async move { switch.watch(WatchRequest::default()).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!held.is_finished() && !watch.is_finished());
        assert_eq!(switch.lists.load(Ordering::Relaxed), 2);
        switch.release();
        assert_eq!(held.await.unwrap(), Ok(1));
        assert!(watch.await.unwrap());
        assert_eq!(switch.lists.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_process_pipeline_counts_every_event() {
        let r = in_process(5_000, 10).await.unwrap();
        assert_eq!(r.events, 5_000);
        assert!(r.secs > 0.0);
    }
}
