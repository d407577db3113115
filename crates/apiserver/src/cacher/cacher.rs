//! The per-resource cacher: a reflector over storage that feeds the [`WatchCache`], the
//! watcher index, and the list/watch entry points handlers call.

use super::cache_watcher::{
    wire_of, CacheWatcher, DeliverError, Delivered, Framing, WatchBody, WatchFrame, WireCache,
};
use super::cached_object::CachedObject;
use super::filter::{object_buckets, Bucket, Filter};
use super::watch_cache::{EventType, WatchCache, WatchCacheEvent};
use crate::metrics::Metrics;
use crate::registry::ResourceInfo;
use api::Status;
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use storage::{Event, EventKind, RangeRequest, Storage, StorageError, WatchMessage};
use tokio::sync::watch;

/// How long a request waits for the cache to reach a requested resourceVersion.
pub const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a consistent read waits for the cache before reading storage instead.
pub const CONSISTENT_CACHE_WAIT: Duration = Duration::from_millis(250);

/// The default [`CacherOptions::watch_cache_bytes`]: 32 MiB per resource.
pub const DEFAULT_WATCH_CACHE_BYTES: usize = 32 << 20;

/// Tunables of a cacher.
#[derive(Debug, Clone)]
pub struct CacherOptions {
    /// Ring capacity (events kept for resumption).
    pub watch_cache_size: usize,
    /// The most bytes of objects the ring keeps (each event counts its object's JSON); the
    /// oldest events go first when a new one would exceed it.
    pub watch_cache_bytes: usize,
    /// Per-watcher queue capacity in frames; a watcher with a full queue is terminated.
    pub watcher_queue: usize,
    /// Minimum time between two writes to one watch stream (0 = write as soon as possible).
    pub flush_interval: Duration,
}

impl Default for CacherOptions {
    fn default() -> Self {
        CacherOptions {
            watch_cache_size: 10_000,
            watch_cache_bytes: DEFAULT_WATCH_CACHE_BYTES,
            watcher_queue: 1_000,
            flush_interval: Duration::ZERO,
        }
    }
}

#[derive(Default)]
struct WatcherIndex {
    buckets: HashMap<Bucket, BucketWatchers>,
    count: usize,
}

/// The watchers of one bucket.
#[derive(Default)]
struct BucketWatchers {
    by_id: HashMap<u64, Arc<CacheWatcher>>,
    /// The same watchers as one shared list, built when the dispatcher first needs it after a
    /// change: an event then costs one reference count, not one per watcher.
    snapshot: Option<Arc<[Arc<CacheWatcher>]>>,
}

impl BucketWatchers {
    fn snapshot(&mut self) -> Arc<[Arc<CacheWatcher>]> {
        self.snapshot
            .get_or_insert_with(|| self.by_id.values().cloned().collect())
            .clone()
    }
}

impl WatcherIndex {
    fn insert(&mut self, w: Arc<CacheWatcher>) {
        let b = self.buckets.entry(w.bucket.clone()).or_default();
        b.by_id.insert(w.id, w);
        b.snapshot = None;
        self.count += 1;
    }

    fn remove(&mut self, bucket: &Bucket, id: u64) -> Option<Arc<CacheWatcher>> {
        let b = self.buckets.get_mut(bucket)?;
        let removed = b.by_id.remove(&id);
        if removed.is_some() {
            b.snapshot = None;
            self.count -= 1;
        }
        if b.by_id.is_empty() {
            self.buckets.remove(bucket);
        }
        removed
    }
}

/// One page of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Matching objects in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// The resourceVersion the list is consistent at.
    pub resource_version: u64,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// Objects left after this page, when known.
    pub remaining: Option<u64>,
}

/// How a watch should start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// Send the current state as ADDED first (resourceVersion unset or "0").
    CurrentState {
        /// Wait until the cache is as fresh as storage first (unset resourceVersion).
        consistent: bool,
    },
    /// Send every change after this version.
    After(u64),
    /// Streaming list: current state at least as new as this, then an initial-events-end
    /// bookmark.
    InitialEvents(u64),
}

struct Counters {
    events: Arc<AtomicU64>,
    terminated: Arc<AtomicU64>,
    watchers: Arc<AtomicI64>,
    received: Arc<AtomicU64>,
    direct_written: Arc<AtomicU64>,
    direct_deferred: Arc<AtomicU64>,
}

/// The watch cache of one resource, and everything that serves from it.
pub struct Cacher {
    info: &'static ResourceInfo,
    storage: Arc<dyn Storage>,
    prefix: String,
    opts: CacherOptions,
    state: RwLock<WatchCache>,
    watchers: Mutex<WatcherIndex>,
    rv_tx: watch::Sender<u64>,
    ready_tx: watch::Sender<bool>,
    next_id: AtomicU64,
    counters: Counters,
    budget: Mutex<TimeBudget>,
    page_counts: Mutex<VecDeque<PageCount>>,
    self_ref: OnceLock<Weak<Cacher>>,
}

/// How many objects a cache-served list has from `start` on (inclusive), at `rv` under
/// `prefix`: remembered so that the next page's `remainingItemCount` costs nothing.
struct PageCount {
    rv: u64,
    prefix: String,
    start: String,
    from_start: u64,
}

/// Lists being paged through at once whose counts are remembered.
const PAGE_COUNT_MEMO: usize = 64;

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("resource", &self.info.resource)
            .finish()
    }
}

fn storage_status(e: StorageError) -> Status {
    match e {
        StorageError::Compacted {
            requested,
            compacted,
        } => Status::too_old_resource_version(requested, compacted + 1),
        StorageError::Unavailable(m) => Status::unavailable(format!("storage is unavailable: {m}")),
        other => Status::internal(other),
    }
}

impl Cacher {
    /// Creates the cacher and starts its reflector on the current tokio runtime.
    pub fn start(
        info: &'static ResourceInfo,
        storage: Arc<dyn Storage>,
        opts: CacherOptions,
        metrics: &Metrics,
    ) -> Arc<Cacher> {
        let res = info.resource;
        let group = info.group;
        let counters = Counters {
            events: metrics.counter(
                "apiserver_watch_events_total",
                "Number of events sent in watch clients",
                &[
                    ("group", group),
                    ("version", info.version),
                    ("kind", info.kind),
                ],
            ),
            terminated: metrics.counter(
                "apiserver_terminated_watchers_total",
                "Counter of watchers closed due to unresponsiveness",
                &[("group", group), ("resource", res)],
            ),
            watchers: metrics.gauge(
                "apiserver_registered_watchers",
                "Number of currently registered watchers for a given resources",
                &[
                    ("group", group),
                    ("version", info.version),
                    ("kind", info.kind),
                ],
            ),
            received: metrics.counter(
                "apiserver_watch_cache_events_received_total",
                "Counter of events received in watch cache broken by resource type",
                &[("group", group), ("resource", res)],
            ),
            direct_written: metrics.counter(
                DIRECT_WRITES_METRIC,
                DIRECT_WRITES_HELP,
                &[("resource", res), ("result", "written")],
            ),
            direct_deferred: metrics.counter(
                DIRECT_WRITES_METRIC,
                DIRECT_WRITES_HELP,
                &[("resource", res), ("result", "deferred")],
            ),
        };
        metrics
            .gauge(
                "apiserver_watch_cache_capacity",
                "Total capacity of watch cache broken by resource type",
                &[("group", group), ("resource", res)],
            )
            .store(opts.watch_cache_size as i64, Ordering::Relaxed);
        let (rv_tx, _) = watch::channel(0);
        let (ready_tx, _) = watch::channel(false);
        let cacher = Arc::new(Cacher {
            info,
            storage,
            prefix: info.key_prefix(),
            state: RwLock::new(WatchCache::new(
                opts.watch_cache_size,
                opts.watch_cache_bytes,
            )),
            opts,
            watchers: Mutex::new(WatcherIndex::default()),
            rv_tx,
            ready_tx,
            next_id: AtomicU64::new(1),
            counters,
            budget: Mutex::new(TimeBudget::new()),
            page_counts: Mutex::new(VecDeque::new()),
            self_ref: OnceLock::new(),
        });
        let _ = cacher.self_ref.set(Arc::downgrade(&cacher));
        let weak = Arc::downgrade(&cacher);
        tokio::spawn(async move { reflector_loop(weak).await });
        cacher
    }

    /// The resource this cacher serves.
    pub fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    /// The newest resourceVersion the cache has applied.
    pub fn resource_version(&self) -> u64 {
        *self.rv_tx.borrow()
    }

    /// Number of registered watchers.
    pub fn watcher_count(&self) -> usize {
        self.watchers.lock().count
    }

    /// True once the first list from storage has been loaded.
    pub fn is_ready(&self) -> bool {
        *self.ready_tx.borrow()
    }

    /// Looks up one object in the current state (may lag storage by a few milliseconds).
    pub fn get_cached(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.state.read().get(key).cloned()
    }

    async fn wait_ready(&self) -> Result<(), Status> {
        let mut rx = self.ready_tx.subscribe();
        let ok = matches!(
            tokio::time::timeout(FRESHNESS_TIMEOUT, rx.wait_for(|r| *r)).await,
            Ok(Ok(_))
        );
        match ok {
            true => Ok(()),
            false => Err(Status::unavailable(format!(
                "the watch cache for {} is not ready yet",
                self.info.resource
            ))),
        }
    }

    /// Waits (bounded) until the cache has applied `rv`; 504 ResourceVersionTooLarge if not.
    pub async fn wait_until_fresh(&self, rv: u64) -> Result<(), Status> {
        self.wait_ready().await?;
        if self.wait_fresh_within(rv, FRESHNESS_TIMEOUT).await {
            Ok(())
        } else {
            Err(Status::resource_version_too_large(
                rv,
                self.resource_version(),
            ))
        }
    }

    async fn wait_fresh_within(&self, rv: u64, timeout: Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        let reached = matches!(
            tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv)).await,
            Ok(Ok(_))
        );
        reached
    }

    /// Waits until the cache is at least as fresh as storage's current revision.
    pub async fn wait_consistent(&self) -> Result<u64, Status> {
        let rev = self
            .storage
            .current_revision()
            .await
            .map_err(storage_status)?;
        self.wait_until_fresh(rev).await?;
        Ok(rev)
    }

    /// Reads storage's current revision and waits, briefly, for the cache to reach it.
    /// Returns the revision and whether the cache got there. Storage that sends progress
    /// with every commit (the embedded store) gets there at once; etcd only sends progress
    /// periodically, so an idle resource may not — callers then read storage instead.
    async fn try_consistent(&self) -> Result<(u64, bool), Status> {
        self.wait_ready().await?;
        let rev = self
            .storage
            .current_revision()
            .await
            .map_err(storage_status)?;
        Ok((
            rev,
            self.wait_fresh_within(rev, CONSISTENT_CACHE_WAIT).await,
        ))
    }

    /// A consistent list (no resourceVersion): at least as fresh as storage's current
    /// revision — from the cache when it proves that freshness quickly, else from storage at
    /// that revision (as kube-apiserver does when its cache cannot).
    pub async fn list_consistent(
        &self,
        filter: &Filter,
        limit: usize,
    ) -> Result<ListResult, Status> {
        match self.try_consistent().await? {
            (_, true) => Ok(self.list_from_cache(filter, "", limit)),
            (rev, false) => self.list_from_storage(filter, rev, "", limit, false).await,
        }
    }

    /// Lists from the cache's current state: objects with key ≥ `start_key` that pass
    /// `filter`, at most `limit` (0 = all). The continue token points into storage at the
    /// same resourceVersion.
    pub fn list_from_cache(&self, filter: &Filter, start_key: &str, limit: usize) -> ListResult {
        self.list_in(&self.state.read(), filter, start_key, limit)
    }

    /// Serves a continuation page at `rv`: from the cache while it is still exactly at `rv`
    /// (nothing under this resource changed since the first page, so its state *is* the
    /// state at `rv` — a page then costs O(page), not a storage range), else from storage
    /// at `rv`.
    pub async fn list_continue(
        &self,
        filter: &Filter,
        rv: u64,
        start_key: &str,
        limit: usize,
    ) -> Result<ListResult, Status> {
        {
            let state = self.state.read();
            if state.resource_version() == rv {
                return Ok(self.list_in(&state, filter, start_key, limit));
            }
        }
        self.list_from_storage(filter, rv, start_key, limit, true)
            .await
    }

    fn list_in(
        &self,
        state: &WatchCache,
        filter: &Filter,
        start_key: &str,
        limit: usize,
    ) -> ListResult {
        let rv = state.resource_version();
        let prefix = match (&filter.namespace, self.info.namespaced) {
            (Some(ns), true) => format!("{ns}/"),
            _ => String::new(),
        };
        let begin = if start_key > prefix.as_str() {
            start_key.to_string()
        } else {
            prefix.clone()
        };
        let mut items = Vec::new();
        let mut iter = state
            .range_from(&begin)
            .take_while(|o| o.key.starts_with(&prefix));
        let mut more = false;
        for o in iter.by_ref() {
            if !filter.matches(o) {
                continue;
            }
            if limit > 0 && items.len() == limit {
                more = true;
                break;
            }
            items.push(o.clone());
        }
        let mut remaining = None;
        let continue_token = if more {
            let token = items.last().map(|last| continue_after(rv, &last.key));
            if filter.is_unfiltered() {
                // The object we stopped at plus whatever follows it. Counting that is a walk
                // over the rest of the collection, so each count is remembered for the next
                // page of the same list: it then only subtracts what it served.
                let counts = &mut *self.page_counts.lock();
                let known = counts
                    .iter()
                    .find(|c| c.rv == rv && c.prefix == prefix && c.start == start_key)
                    .map(|c| c.from_start);
                let n = match known {
                    Some(from_start) => from_start.saturating_sub(items.len() as u64),
                    None => 1 + iter.count() as u64,
                };
                remaining = Some(n);
                if let Some(last) = items.last() {
                    if counts.len() == PAGE_COUNT_MEMO {
                        counts.pop_front();
                    }
                    counts.push_back(PageCount {
                        rv,
                        prefix: prefix.clone(),
                        start: format!("{}\u{0}", last.key),
                        from_start: n,
                    });
                }
            }
            token
        } else {
            None
        };
        ListResult {
            items,
            resource_version: rv,
            continue_token,
            remaining,
        }
    }

    /// Lists from storage at exactly `rv` (pagination continuations and `Exact` reads).
    /// A compacted `rv` is 410 Expired, worded for a continue token when `from_continue`.
    pub async fn list_from_storage(
        &self,
        filter: &Filter,
        rv: u64,
        start_key: &str,
        limit: usize,
        from_continue: bool,
    ) -> Result<ListResult, Status> {
        let ns_prefix = match (&filter.namespace, self.info.namespaced) {
            (Some(ns), true) => format!("{}{ns}/", self.prefix),
            _ => self.prefix.clone(),
        };
        let mut start = format!("{}{}", self.prefix, start_key);
        if start < ns_prefix {
            start = ns_prefix.clone();
        }
        let end = storage::prefix_end(ns_prefix.as_bytes());
        let mut items = Vec::new();
        let page = if limit == 0 {
            1000
        } else {
            // Storage is read in chunks; the loop gathers up to `limit` matching items.
            limit.saturating_add(1).clamp(100, 10_000)
        };
        let mut more_in_storage = true;
        let mut stopped_early = false;
        let mut read_rv = rv;
        let mut total_from_start: Option<usize> = None;
        'outer: while more_in_storage {
            let resp = self
                .storage
                .range(RangeRequest {
                    start: start.clone().into_bytes().into(),
                    end: end.clone(),
                    revision: rv,
                    limit: page,
                })
                .await
                .map_err(|e| match e {
                    StorageError::Compacted { .. } if from_continue => Status::continue_expired(),
                    StorageError::FutureRevision { requested, current } => {
                        Status::resource_version_too_large(requested, current)
                    }
                    other => storage_status(other),
                })?;
            read_rv = resp.revision;
            more_in_storage = resp.more;
            // Each read must move past where it started (`start` is still that key here), or
            // the next would start there again: a loop without end on a store that breaks
            // its contract.
            if resp.more
                && resp
                    .kvs
                    .last()
                    .is_none_or(|kv| kv.key[..] <= *start.as_bytes())
            {
                return Err(Status::internal(format!(
                    "storage said more keys follow {start:?} but returned none after it"
                )));
            }
            total_from_start.get_or_insert(resp.count);
            for kv in &resp.kvs {
                let key = String::from_utf8_lossy(&kv.key[self.prefix.len().min(kv.key.len())..])
                    .into_owned();
                start = format!("{}{}\u{0}", self.prefix, key);
                let obj = match CachedObject::decode(self.info, &key, &kv.value, kv.mod_revision) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::error!(resource = self.info.resource, "{e}");
                        continue;
                    }
                };
                if !filter.matches(&obj) {
                    continue;
                }
                if limit > 0 && items.len() == limit {
                    stopped_early = true;
                    break 'outer;
                }
                items.push(Arc::new(obj));
            }
        }
        let continue_token = if stopped_early {
            items.last().map(|l| continue_after(read_rv, &l.key))
        } else {
            None
        };
        // Like kube-apiserver, the count of what is left is only given for unfiltered lists,
        // where it is exact: every key from the page's start onwards is an item.
        let remaining = match (stopped_early && filter.is_unfiltered(), total_from_start) {
            (true, Some(total)) => Some(total.saturating_sub(items.len()) as u64),
            _ => None,
        };
        Ok(ListResult {
            items,
            resource_version: read_rv,
            continue_token,
            remaining,
        })
    }

    /// Starts a watch. The returned body streams JSON lines until `deadline`.
    pub async fn watch(
        &self,
        filter: Filter,
        start: WatchStart,
        allow_bookmarks: bool,
        deadline: Instant,
    ) -> Result<WatchBody, Status> {
        // A consistent start the cache could not reach quickly: the initial state read from
        // storage at the revision that had to be reached, and events after it.
        let mut from_storage: Option<ListResult> = None;
        match start {
            WatchStart::CurrentState { consistent: true } => {
                // As fresh as storage at the time of the request, as a consistent list is:
                // from the cache once it proves it has caught up, else (etcd is slow to say
                // an idle resource is current) from storage at that revision.
                if let (rev, false) = self.try_consistent().await? {
                    from_storage = Some(self.list_from_storage(&filter, rev, "", 0, false).await?);
                }
            }
            WatchStart::CurrentState { consistent: false } => self.wait_ready().await?,
            WatchStart::After(rv) | WatchStart::InitialEvents(rv) => {
                self.wait_until_fresh(rv).await?
            }
        }
        let api_version = self.info.api_version();
        let kind = self.info.kind.to_string();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = self.state.read();
        let mut rv = state.resource_version();
        let mut initial = VecDeque::new();
        match start {
            WatchStart::CurrentState { .. } if from_storage.is_some() => {
                let listed = from_storage.take().unwrap_or_else(|| ListResult {
                    items: Vec::new(),
                    resource_version: rv,
                    continue_token: None,
                    remaining: None,
                });
                // Events up to the listed revision are in the list: the watcher skips them
                // as the cache catches up.
                rv = rv.max(listed.resource_version);
                initial.extend(listed.items.into_iter().map(|object| WatchFrame::Event {
                    event_type: "ADDED",
                    object,
                }));
            }
            WatchStart::CurrentState { .. } | WatchStart::InitialEvents(_) => {
                let prefix = match (&filter.namespace, self.info.namespaced) {
                    (Some(ns), true) => format!("{ns}/"),
                    _ => String::new(),
                };
                for o in state.with_prefix(&prefix) {
                    if filter.matches(o) {
                        initial.push_back(WatchFrame::Event {
                            event_type: "ADDED",
                            object: o.clone(),
                        });
                    }
                }
                if matches!(start, WatchStart::InitialEvents(_)) && allow_bookmarks {
                    initial.push_back(WatchFrame::Bookmark {
                        resource_version: rv,
                        initial_events_end: true,
                    });
                }
            }
            WatchStart::After(after) => match state.events_after(after) {
                Ok(events) => {
                    let (probe, _) =
                        CacheWatcher::new(0, filter.clone(), after, false, deadline, 1);
                    // Each event, its objects and their namespaces are cache misses from
                    // memory in a long replay: ask for them a few events ahead.
                    let mut events_ahead = events.clone().skip(3 * REPLAY_PREFETCH_STEP);
                    let mut objects_ahead = events.clone().skip(2 * REPLAY_PREFETCH_STEP);
                    let mut names_ahead = events.clone().skip(REPLAY_PREFETCH_STEP);
                    for ev in events {
                        if let Some(e) = events_ahead.next() {
                            super::prefetch::prefetch(Arc::as_ptr(e));
                        }
                        if let Some(e) = objects_ahead.next() {
                            e.prefetch_objects();
                        }
                        if let Some(e) = names_ahead.next() {
                            e.prefetch_namespaces();
                        }
                        if let Some(f) = probe.frame_for(ev, false, || self.restamped_prev(ev)) {
                            initial.push_back(f);
                        }
                    }
                }
                Err(oldest) => {
                    drop(state);
                    let status = Status::too_old_resource_version(after, oldest);
                    initial.push_back(WatchFrame::Error(status.to_json().into()));
                    return Ok(WatchBody::new(
                        initial,
                        None,
                        deadline,
                        api_version,
                        kind,
                        None,
                    ));
                }
            },
        }
        let (watcher, rx) = CacheWatcher::new(
            id,
            filter,
            rv,
            allow_bookmarks,
            deadline,
            self.opts.watcher_queue,
        );
        let bucket = watcher.bucket.clone();
        self.watchers.lock().insert(Arc::new(watcher));
        drop(state);
        self.counters.watchers.fetch_add(1, Ordering::Relaxed);
        let weak = self.self_ref.get().cloned().unwrap_or_default();
        let on_close = Box::new(move || {
            if let Some(c) = weak.upgrade() {
                if c.watchers.lock().remove(&bucket, id).is_some() {
                    c.counters.watchers.fetch_sub(1, Ordering::Relaxed);
                }
            }
        });
        Ok(WatchBody::new(
            initial,
            Some(rx),
            deadline,
            api_version,
            kind,
            Some(on_close),
        )
        .with_flush_interval(self.opts.flush_interval))
    }

    fn restamped_prev(&self, ev: &WatchCacheEvent) -> Arc<CachedObject> {
        restamped_prev(self.info, ev)
    }

    /// Applies storage events to the cache, in order, then dispatches the changes: one by one
    /// when there is one, per watcher in one go when several arrived together (a dispatcher
    /// that falls behind then writes several events per socket write instead of falling
    /// further behind).
    async fn process_batch(&self, events: Vec<Event>) {
        let applied: Vec<Arc<WatchCacheEvent>> = events
            .into_iter()
            .filter_map(|e| self.apply_event(e))
            .collect();
        match applied.as_slice() {
            [] => {}
            [one] => self.dispatch(one).await,
            many => self.dispatch_batch(many).await,
        }
    }

    /// Applies a storage event to the cache; the change to dispatch, if any.
    fn apply_event(&self, ev: Event) -> Option<Arc<WatchCacheEvent>> {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let key = ev
            .kv
            .key
            .get(self.prefix.len()..)
            .map(|k| String::from_utf8_lossy(k).into_owned())?;
        let decoded = match ev.kind {
            EventKind::Create | EventKind::Update => {
                match CachedObject::decode(self.info, &key, &ev.kv.value, ev.revision) {
                    Ok(o) => Some(Arc::new(o)),
                    Err(e) => {
                        tracing::error!(resource = self.info.resource, "{e}");
                        None
                    }
                }
            }
            EventKind::Delete => None,
        };
        let applied = {
            let mut state = self.state.write();
            let prev = state.get(&key).cloned().or_else(|| {
                ev.prev.as_ref().and_then(|p| {
                    CachedObject::decode(self.info, &key, &p.value, p.mod_revision)
                        .ok()
                        .map(Arc::new)
                })
            });
            let event = match (ev.kind, decoded, prev) {
                (EventKind::Delete, _, Some(prev)) => Some(WatchCacheEvent {
                    event_type: EventType::Deleted,
                    object: Arc::new(prev.restamped(self.info, ev.revision)),
                    prev: Some(prev),
                    resource_version: ev.revision,
                    prev_restamped: OnceLock::new(),
                }),
                (EventKind::Create | EventKind::Update, Some(obj), prev) => Some(WatchCacheEvent {
                    event_type: if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    },
                    object: obj,
                    prev,
                    resource_version: ev.revision,
                    prev_restamped: OnceLock::new(),
                }),
                _ => None,
            };
            match event {
                Some(e) => state.apply(e),
                None => {
                    state.progress(ev.revision);
                    None
                }
            }
        };
        self.rv_tx.send_if_modified(|cur| {
            if ev.revision > *cur {
                *cur = ev.revision;
                true
            } else {
                false
            }
        });
        applied
    }

    /// Hands `event` to every watcher whose bucket and filter match. A watcher with a full
    /// queue is waited for, but only within the shared [`TimeBudget`]: a reader that pauses
    /// briefly keeps its watch, one that stays stuck is terminated (and resumes later from
    /// its last resourceVersion), and healthy watchers are delayed by at most the budget.
    async fn dispatch(&self, event: &WatchCacheEvent) {
        let mut buckets = Vec::with_capacity(8);
        object_buckets(self.info, &event.object, &mut buckets);
        if let Some(p) = &event.prev {
            object_buckets(self.info, p, &mut buckets);
        }
        // Snapshot the candidates so the index is not locked while writing to sockets.
        let mut targets: Vec<Arc<[Arc<CacheWatcher>]>> = Vec::new();
        {
            let mut index = self.watchers.lock();
            for b in &buckets {
                if let Some(ws) = index.buckets.get_mut(b) {
                    targets.push(ws.snapshot());
                }
            }
        }
        // One task delivers: splitting the writes over the runtime's workers was measured to
        // help nothing on a busy machine and to delay request handling (writes) behind it.
        // HTTP/2 connections are woken once, after the whole fan-out, to write all their
        // streams' frames together.
        let out = crate::server::http2::writer::batch(|| fan_out(self.info, &targets, event));
        self.settle(out).await;
    }

    /// Like [`Cacher::dispatch`] for several events at once: each watcher gets its frames of
    /// all of them, in order, in one push (so one socket write in direct mode).
    async fn dispatch_batch(&self, events: &[Arc<WatchCacheEvent>]) {
        let mut per: HashMap<u64, WatcherFrames> = HashMap::new();
        {
            let index = self.watchers.lock();
            let mut buckets = Vec::with_capacity(8);
            for ev in events {
                buckets.clear();
                object_buckets(self.info, &ev.object, &mut buckets);
                if let Some(p) = &ev.prev {
                    object_buckets(self.info, p, &mut buckets);
                }
                for b in &buckets {
                    let Some(ws) = index.buckets.get(b) else {
                        continue;
                    };
                    for w in ws.by_id.values() {
                        if let Some(f) = w.frame_for(ev, true, || restamped_prev(self.info, ev)) {
                            per.entry(w.id)
                                .or_insert_with(|| (w.clone(), Vec::new()))
                                .1
                                .push((f, ev.resource_version));
                        }
                    }
                }
            }
        }
        let api_version = self.info.api_version();
        let mut wire = WireCache::new(&api_version, self.info.kind);
        let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
        let out = crate::server::http2::writer::batch(|| {
            let mut out = FanOut::default();
            for (_, (w, frames)) in per {
                let n = frames.len();
                let (o, rest_rvs) = w.deliver_many(frames, &mut wire);
                if o.closed {
                    out.gone.push((w.bucket.clone(), w.id, false));
                    continue;
                }
                out.sent += (n - o.rest.len()) as u64;
                out.written += o.written as u64;
                out.deferred += o.deferred as u64;
                for (f, rv) in o.rest.into_iter().zip(rest_rvs) {
                    out.blocked.push((w.clone(), f, rv));
                }
            }
            out
        });
        self.settle(out).await;
    }

    /// Finishes a fan-out: waits (within the shared [`TimeBudget`]) for watchers whose queue
    /// was full, in order per watcher, terminates those that stay full, counts. A watcher
    /// whose client has taken nothing for a progress period is terminated without a wait.
    async fn settle(&self, mut out: FanOut) {
        let api_version = self.info.api_version();
        let mut wire = WireCache::new(&api_version, self.info.kind);
        let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
        let mut failed: Vec<u64> = Vec::new();
        for (w, frame, rv) in std::mem::take(&mut out.blocked) {
            if failed.contains(&w.id) {
                continue;
            }
            // A client that has read nothing for a while gets no wait: it would only delay
            // the others (and use up the budget meant for clients briefly behind).
            let budget = if w.is_stalled() {
                Duration::ZERO
            } else {
                self.budget.lock().take()
            };
            let started = Instant::now();
            if w.deliver_within(frame, rv, &mut wire, budget).await {
                out.sent += 1;
            } else {
                failed.push(w.id);
                out.gone.push((w.bucket.clone(), w.id, true));
            }
            self.budget
                .lock()
                .give_back(budget.saturating_sub(started.elapsed()));
        }
        self.counters.events.fetch_add(out.sent, Ordering::Relaxed);
        if out.written > 0 {
            self.counters
                .direct_written
                .fetch_add(out.written, Ordering::Relaxed);
        }
        if out.deferred > 0 {
            self.counters
                .direct_deferred
                .fetch_add(out.deferred, Ordering::Relaxed);
        }
        if !out.gone.is_empty() {
            self.drop_watchers(out.gone);
        }
    }

    fn drop_watchers(&self, gone: Vec<(Bucket, u64, bool)>) {
        let mut index = self.watchers.lock();
        for (b, id, too_slow) in gone {
            let Some(w) = index.remove(&b, id) else {
                continue;
            };
            self.counters.watchers.fetch_sub(1, Ordering::Relaxed);
            if too_slow {
                self.counters.terminated.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    resource = self.info.resource,
                    watcher = id,
                    "terminating watcher: it cannot keep up (queue full)"
                );
                if let Some(conn) = w.terminate() {
                    reset_if_still_unread(conn, self.info.resource, id);
                }
            }
        }
    }

    /// Ends every watcher (after a relist their view may have a gap; they resume and get 410
    /// if their version is gone).
    fn terminate_all(&self) {
        let mut index = self.watchers.lock();
        let n = index.count;
        index.buckets.clear();
        index.count = 0;
        self.counters
            .watchers
            .fetch_sub(n as i64, Ordering::Relaxed);
    }

    /// Once a second: bookmarks to the watchers due one, and each watcher's progress check
    /// (see [`CacheWatcher::check_progress`]).
    fn send_bookmarks(&self) {
        let now = Instant::now();
        let api_version = self.info.api_version();
        let mut wire = |f: &WatchFrame, fr: Framing| wire_of(f, fr, &api_version, self.info.kind);
        let rv = self.state.read().resource_version();
        let mut gone = Vec::new();
        {
            let index = self.watchers.lock();
            for (b, ws) in &index.buckets {
                for w in ws.by_id.values() {
                    w.check_progress();
                    if w.bookmark_due(now) && rv >= w.last_sent_rv.load(Ordering::Relaxed) {
                        let frame = WatchFrame::Bookmark {
                            resource_version: rv,
                            initial_events_end: false,
                        };
                        // A full queue just skips this bookmark; events matter, bookmarks are hints.
                        if let Err(DeliverError::Closed) = w.deliver(frame, rv, &mut wire) {
                            gone.push((b.clone(), w.id, false));
                        }
                    }
                }
            }
        }
        if !gone.is_empty() {
            self.drop_watchers(gone);
        }
    }

    /// Loads the state from storage and returns the revision it is at. Watchers are ended.
    ///
    /// The state is listed at an older revision when storage still has it — as many
    /// revisions back as the ring holds events — and storage's history from there is
    /// replayed into the ring. So after a restart (or a relist) the ring covers what it
    /// would have covered had the cache never stopped, and clients resume their watches
    /// from the versions they had instead of relisting. If storage has compacted that far,
    /// or the replay stalls, the ring simply starts later.
    async fn relist(&self) -> Result<u64, StorageError> {
        let current = self.storage.current_revision().await?;
        let back = u64::try_from(self.opts.watch_cache_size).unwrap_or(u64::MAX);
        // Revision 0 would mean "current" to storage; the first revision is 1.
        let from = current
            .saturating_sub(back)
            .max(self.storage.compacted_revision().await?)
            .max(1);
        let (objects, listed) = if from < current {
            match self.range_all(from).await {
                Ok(listed) => listed,
                Err(StorageError::Compacted { .. }) => self.range_all(0).await?,
                Err(e) => return Err(e),
            }
        } else {
            self.range_all(0).await?
        };
        self.terminate_all();
        self.state.write().replace(objects, listed);
        let revision = if listed < current {
            self.replay_history(listed, current).await
        } else {
            listed
        };
        self.rv_tx.send_replace(revision);
        self.ready_tx.send_replace(true);
        Ok(revision)
    }

    /// Applies storage's changes after `from` to the state and its ring (there are no
    /// watchers yet), until `until` or until storage goes quiet for a moment (etcd says
    /// nothing about an idle prefix between its progress notifications); the state is
    /// exactly at the returned revision either way.
    async fn replay_history(&self, from: u64, until: u64) -> u64 {
        const QUIET: Duration = Duration::from_secs(1);
        let prefix: bytes::Bytes = self.prefix.clone().into_bytes().into();
        let mut stream = match self.storage.watch(prefix, from).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::info!(resource = self.info.resource, "no history to replay: {e}");
                return from;
            }
        };
        let mut last = from;
        while last < until {
            match tokio::time::timeout(QUIET, stream.next()).await {
                Ok(Some(Ok(WatchMessage::Events(events)))) => {
                    for e in events {
                        last = last.max(e.revision);
                        self.apply_event(e);
                    }
                }
                Ok(Some(Ok(WatchMessage::Progress(rv)))) if rv > last => {
                    last = rv;
                    self.state.write().progress(rv);
                }
                Ok(Some(Ok(WatchMessage::Progress(_)))) => {}
                _ => break,
            }
        }
        last
    }

    /// Every object under the prefix at `revision` (0 = current), read in pages, and the
    /// revision read at.
    async fn range_all(
        &self,
        mut revision: u64,
    ) -> Result<(Vec<Arc<CachedObject>>, u64), StorageError> {
        let mut objects = Vec::new();
        let mut start: bytes::Bytes = self.prefix.clone().into_bytes().into();
        let end = storage::prefix_end(self.prefix.as_bytes());
        loop {
            let resp = self
                .storage
                .range(RangeRequest {
                    start: start.clone(),
                    end: end.clone(),
                    revision,
                    limit: 10_000,
                })
                .await?;
            revision = resp.revision;
            for kv in &resp.kvs {
                let key = String::from_utf8_lossy(&kv.key[self.prefix.len().min(kv.key.len())..])
                    .into_owned();
                match CachedObject::decode(self.info, &key, &kv.value, kv.mod_revision) {
                    Ok(o) => objects.push(Arc::new(o)),
                    Err(e) => tracing::error!(resource = self.info.resource, "{e}"),
                }
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    let mut next = last.key.to_vec();
                    next.push(0);
                    start = next.into();
                }
                _ => break,
            }
        }
        Ok((objects, revision))
    }
}

/// How long a terminated watcher's client has to take another byte of its connection
/// before the connection is reset.
pub const UNREAD_RESET_GRACE: Duration = Duration::from_secs(5);

/// Resets `conn` (see [`DirectConn::abort`]) unless it takes a byte within
/// [`UNREAD_RESET_GRACE`]: a terminated watcher's response can only end once its client reads
/// what the socket holds, and one that never reads would keep the connection, its kernel
/// buffers and its place among the running requests forever.
fn reset_if_still_unread(conn: Arc<super::DirectConn>, resource: &'static str, watcher: u64) {
    let mark = conn.writes();
    tokio::spawn(async move {
        tokio::time::sleep(UNREAD_RESET_GRACE).await;
        if conn.writes() == mark {
            tracing::info!(
                resource,
                watcher,
                "resetting the connection of a terminated watcher: its client reads nothing"
            );
            conn.abort();
        }
    });
}

/// Events the dispatcher wrote straight to an HTTP/1.1 watch's socket (`result="written"`),
/// or handed to the connection's task because the socket was full (`result="deferred"`).
const DIRECT_WRITES_METRIC: &str = "listwatch_watch_direct_writes_total";
const DIRECT_WRITES_HELP: &str =
    "Watch events the watch cache wrote directly to HTTP/1.1 sockets, by whether the socket took them at once";

/// A watcher and the frames (with their versions) one batch of events has for it, in order.
type WatcherFrames = (Arc<CacheWatcher>, Vec<(WatchFrame, u64)>);

/// The most storage events the reflector applies and dispatches as one batch.
const MAX_DISPATCH_BATCH: usize = 1024;

/// What delivering one event to some watchers left to do.
#[derive(Default)]
struct FanOut {
    sent: u64,
    written: u64,
    deferred: u64,
    gone: Vec<(Bucket, u64, bool)>,
    blocked: Vec<(Arc<CacheWatcher>, WatchFrame, u64)>,
}

/// Delivers `event` to each of `targets` that wants it, without waiting: watchers with a
/// full queue come back in `blocked`, departed ones in `gone`.
fn fan_out(
    info: &'static ResourceInfo,
    targets: &[Arc<[Arc<CacheWatcher>]>],
    event: &WatchCacheEvent,
) -> FanOut {
    let api_version = info.api_version();
    let mut wire = WireCache::new(&api_version, info.kind);
    let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
    let mut out = FanOut::default();
    let watchers = targets.iter().flat_map(|bucket| {
        bucket.iter().enumerate().map(move |(i, w)| {
            // The watchers ahead of this one are cold in cache: start fetching them, each
            // link of the chain (watcher, queue, direct target) a step before the next, whose
            // address it holds.
            if let Some(next) = bucket.get(i + 3 * PREFETCH_AHEAD) {
                CacheWatcher::prefetch(next);
            }
            if let Some(next) = bucket.get(i + 2 * PREFETCH_AHEAD) {
                next.prefetch_queue();
            }
            if let Some(next) = bucket.get(i + PREFETCH_AHEAD) {
                next.prefetch_target();
            }
            w
        })
    });
    for w in watchers {
        let Some(frame) = w.frame_for(event, true, || restamped_prev(info, event)) else {
            continue;
        };
        match w.deliver(frame, event.resource_version, &mut wire) {
            Ok(d) => {
                out.sent += 1;
                match d {
                    Delivered::Written => out.written += 1,
                    Delivered::Deferred => out.deferred += 1,
                    Delivered::Queued => {}
                }
            }
            Err(DeliverError::Full(frame)) => {
                out.blocked.push((w.clone(), frame, event.resource_version))
            }
            Err(DeliverError::Closed) => out.gone.push((w.bucket.clone(), w.id, false)),
        }
    }
    out
}

/// How many watchers ahead [`fan_out`] prefetches each step of the chain (watcher, queue,
/// stream window): enough for a memory access to complete while that many are delivered.
const PREFETCH_AHEAD: usize = 8;

/// How many events apart a replay prefetches each step of an event's chain (the event, its
/// objects, their namespaces): see [`Cacher::watch`].
const REPLAY_PREFETCH_STEP: usize = 4;

/// `ev.prev` stamped with the event's version (computed once per event), or the object.
fn restamped_prev(info: &ResourceInfo, ev: &WatchCacheEvent) -> Arc<CachedObject> {
    match &ev.prev {
        Some(p) => ev
            .prev_restamped
            .get_or_init(|| Arc::new(p.restamped(info, ev.resource_version)))
            .clone(),
        None => ev.object.clone(),
    }
}

/// How long dispatch may wait, in total, for watchers with full queues: at most
/// [`TimeBudget::MAX`] at once, refilled at a tenth of real time (kube-apiserver's cacher
/// uses the same shape), so stuck clients cannot slow everyone down for long.
#[derive(Debug)]
pub struct TimeBudget {
    available: Duration,
    refilled_at: Instant,
}

impl TimeBudget {
    /// The most that can be spent at once.
    pub const MAX: Duration = Duration::from_millis(100);

    fn new() -> TimeBudget {
        TimeBudget {
            available: Self::MAX,
            refilled_at: Instant::now(),
        }
    }

    /// Takes everything available now (after refilling for the time that passed).
    pub fn take(&mut self) -> Duration {
        let now = Instant::now();
        let refill = now.duration_since(self.refilled_at) / 10;
        self.refilled_at = now;
        let all = (self.available + refill).min(Self::MAX);
        self.available = Duration::ZERO;
        all
    }

    /// Returns what was not spent.
    pub fn give_back(&mut self, unused: Duration) {
        self.available = (self.available + unused).min(Self::MAX);
    }
}

/// A continue token that resumes right after `last_key` at `rv`.
fn continue_after(rv: u64, last_key: &str) -> String {
    api::continue_token::ContinueToken {
        resource_version: rv,
        start_key: format!("{last_key}\u{0}"),
    }
    .encode()
}

/// Spaces out attempts that keep failing or ending at once: an attempt started within
/// [`Pacer::MIN_GAP`] of the previous one waits first, 100 ms doubling to 5 s; an attempt after
/// a longer gap goes at once and resets the wait. Storage that is down, ends every watch
/// immediately, or answers every watch with "compacted" then costs a few requests per second
/// instead of a busy loop.
#[derive(Debug, Default)]
struct Pacer {
    last: Option<std::time::Instant>,
    delay: Duration,
}

impl Pacer {
    const MIN_GAP: Duration = Duration::from_secs(1);
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// How long the attempt starting at `now` should wait.
    fn next_delay(&mut self, now: std::time::Instant) -> Duration {
        let wait = match self.last {
            Some(t) if now.saturating_duration_since(t) < Self::MIN_GAP => {
                let d = self.delay.max(Self::FIRST);
                self.delay = (d * 2).min(Self::MAX);
                d
            }
            _ => {
                self.delay = Self::FIRST;
                Duration::ZERO
            }
        };
        self.last = Some(now + wait);
        wait
    }

    async fn pace(&mut self) {
        let wait = self.next_delay(std::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Keeps one resource's cache in step with storage: list, then watch from the list's
/// revision, re-watching from the last event seen when a watch ends and relisting when
/// storage has compacted past it. Failed or short-lived attempts are spaced out by the
/// [`Pacer`]s, one for lists and one for watches.
async fn reflector_loop(weak: Weak<Cacher>) {
    let mut relists = Pacer::default();
    let mut rewatches = Pacer::default();
    'relist: loop {
        relists.pace().await;
        let Some(c) = weak.upgrade() else { return };
        let mut last = match c.relist().await {
            Ok(rv) => rv,
            Err(e) => {
                tracing::warn!(resource = c.info.resource, "watch cache list failed: {e}");
                continue;
            }
        };
        let prefix: bytes::Bytes = c.prefix.clone().into_bytes().into();
        drop(c);
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            rewatches.pace().await;
            let Some(c) = weak.upgrade() else { return };
            let mut stream = match c.storage.watch(prefix.clone(), last).await {
                Ok(s) => s,
                Err(StorageError::Compacted { .. }) => continue 'relist,
                Err(e) => {
                    tracing::warn!(resource = c.info.resource, "storage watch failed: {e}");
                    continue;
                }
            };
            drop(c);
            loop {
                tokio::select! {
                    msg = stream.next() => {
                        let Some(c) = weak.upgrade() else { return };
                        // Take whatever else is already waiting too, so a dispatcher that fell
                        // behind catches up in batches.
                        let mut msg = msg;
                        let mut batch: Vec<Event> = Vec::new();
                        let mut progress = 0;
                        let end = loop {
                            match msg {
                                Some(Ok(WatchMessage::Events(events))) => {
                                    for e in &events {
                                        last = last.max(e.revision);
                                    }
                                    batch.extend(events);
                                }
                                Some(Ok(WatchMessage::Progress(rv))) => {
                                    progress = progress.max(rv);
                                    last = last.max(rv);
                                }
                                other => break other,
                            }
                            if batch.len() >= MAX_DISPATCH_BATCH {
                                break Some(Ok(WatchMessage::Progress(0)));
                            }
                            match stream.try_next() {
                                Some(m) => msg = m,
                                None => break Some(Ok(WatchMessage::Progress(0))),
                            }
                        };
                        c.process_batch(batch).await;
                        if progress > 0 {
                            c.state.write().progress(progress);
                            c.rv_tx.send_if_modified(|cur| if progress > *cur { *cur = progress; true } else { false });
                        }
                        match end {
                            Some(Ok(_)) => {}
                            Some(Err(StorageError::Compacted { .. })) => continue 'relist,
                            Some(Err(e)) => {
                                tracing::info!(resource = c.info.resource, "storage watch ended ({e}); resuming from {last}");
                                break;
                            }
                            None => break,
                        }
                    }
                    _ = ticker.tick() => {
                        let Some(c) = weak.upgrade() else { return };
                        c.send_bookmarks();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pacer;
    use std::time::{Duration, Instant};

    #[test]
    fn attempts_that_keep_ending_at_once_are_spaced_out_and_a_healthy_one_resets() {
        let mut p = Pacer::default();
        let t0 = Instant::now();
        assert_eq!(
            p.next_delay(t0),
            Duration::ZERO,
            "the first attempt goes at once"
        );
        // Each next attempt comes right after the previous one started (it ended at once).
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let w = p.next_delay(now);
            waits.push(w.as_millis());
            now += w;
        }
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // An attempt that lasted longer than the gap: the next goes at once, waits start over.
        now += Duration::from_secs(30);
        assert_eq!(p.next_delay(now), Duration::ZERO);
        assert_eq!(p.next_delay(now), Duration::from_millis(100));
    }
}
