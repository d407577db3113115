//! The per-resource cacher: its state (the [`WatchCache`], the watcher index, counters), its
//! start, freshness waits and the watch entry point handlers call. The storage reflector,
//! the dispatcher and lists live beside it ([`super::reflector`], [`super::dispatch`],
//! [`super::list`]) as further `impl Cacher` blocks over the fields declared here.

use super::cache_watcher::{CacheWatcher, WatchFrame, WatchRegistration};
use super::cached_object::CachedObject;
use super::dispatch::{DIRECT_WRITES_HELP, DIRECT_WRITES_METRIC};
use super::filter::Filter;
use super::list::{ListResult, PageCount};
use super::reflector::reflector_loop;
use super::time_budget::TimeBudget;
use super::watch_cache::{WatchCache, WatchCacheEvent};
use super::watcher_index::WatcherIndex;
use crate::metrics::Metrics;
use crate::registry::ResourceInfo;
use api::Status;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use storage::{Storage, StorageError};
use tokio::sync::watch;

/// How long a request waits for the cache to reach a requested resourceVersion.
pub const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a request waits for a cache loaded on demand (see [`Cacher::on_demand`]) to
/// load: the first read after a long while may have a great many objects to list.
pub const ON_DEMAND_LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a cache loaded on demand stays loaded with no watcher and no read.
pub const ON_DEMAND_IDLE: Duration = Duration::from_secs(300);

/// How long a consistent read waits for the cache before reading storage instead.
pub const CONSISTENT_CACHE_WAIT: Duration = Duration::from_millis(250);

/// How often a request waiting for the cache to reach a revision asks storage for
/// progress again (see [`Cacher::wait_fresh_within`]).
pub const PROGRESS_REQUEST_INTERVAL: Duration = Duration::from_millis(50);

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

/// The cacher's metrics.
pub(super) struct Counters {
    pub(super) events: Arc<AtomicU64>,
    pub(super) terminated: Arc<AtomicU64>,
    pub(super) watchers: Arc<AtomicI64>,
    pub(super) received: Arc<AtomicU64>,
    pub(super) direct_written: Arc<AtomicU64>,
    pub(super) direct_deferred: Arc<AtomicU64>,
}

/// Whether a cache loaded on demand is loaded, and when it was last asked for.
struct Demand {
    running: bool,
    last_used: tokio::time::Instant,
}

/// The watch cache of one resource, and everything that serves from it.
pub struct Cacher {
    pub(super) info: &'static ResourceInfo,
    pub(super) storage: Arc<dyn Storage>,
    pub(super) prefix: String,
    pub(super) opts: CacherOptions,
    pub(super) state: RwLock<WatchCache>,
    pub(super) watchers: Mutex<WatcherIndex>,
    pub(super) rv_tx: watch::Sender<u64>,
    pub(super) ready_tx: watch::Sender<bool>,
    pub(super) next_id: AtomicU64,
    pub(super) counters: Counters,
    pub(super) budget: Mutex<TimeBudget>,
    pub(super) page_counts: Mutex<VecDeque<PageCount>>,
    pub(super) self_ref: OnceLock<Weak<Cacher>>,
    /// See [`Cacher::set_defaulted_after`].
    defaulted_after: AtomicU64,
    /// See [`Cacher::generation`].
    pub(super) generation: AtomicU64,
    /// See [`Cacher::on_demand`]; `None` for a cache that is always loaded.
    demand: Option<Mutex<Demand>>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("resource", &self.info.resource)
            .finish()
    }
}

/// The Status for a storage error on a read.
pub(super) fn storage_status(e: StorageError) -> Status {
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
        let cacher = Cacher::build(info, storage, opts, metrics, false);
        tokio::spawn(reflector_loop(Arc::downgrade(&cacher)));
        cacher
    }

    /// Creates a cacher that loads on its first read (a list, a watch, a lookup) and unloads
    /// again after [`ON_DEMAND_IDLE`] with no watcher and no read, for a resource written
    /// far more than it is read (events: Kubernetes keeps them out of its watch cache
    /// altogether). Meanwhile storage's changes to it cost nothing here. A read that loads
    /// it waits up to [`ON_DEMAND_LOAD_TIMEOUT`] for the load; the loaded state is never
    /// older than one the cache showed before it unloaded.
    pub fn on_demand(
        info: &'static ResourceInfo,
        storage: Arc<dyn Storage>,
        opts: CacherOptions,
        metrics: &Metrics,
    ) -> Arc<Cacher> {
        Cacher::build(info, storage, opts, metrics, true)
    }

    fn build(
        info: &'static ResourceInfo,
        storage: Arc<dyn Storage>,
        opts: CacherOptions,
        metrics: &Metrics,
        on_demand: bool,
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
            defaulted_after: AtomicU64::new(u64::MAX),
            generation: AtomicU64::new(0),
            demand: on_demand.then(|| {
                Mutex::new(Demand {
                    running: false,
                    last_used: tokio::time::Instant::now(),
                })
            }),
        });
        let _ = cacher.self_ref.set(Arc::downgrade(&cacher));
        cacher
    }

    /// Whether this cache loads on demand (see [`Cacher::on_demand`]).
    pub fn loads_on_demand(&self) -> bool {
        self.demand.is_some()
    }

    /// Notes a read of a cache loaded on demand, loading it if it is not loaded.
    pub(super) fn touch(&self) {
        let Some(demand) = &self.demand else { return };
        let mut d = demand.lock();
        d.last_used = tokio::time::Instant::now();
        if d.running {
            return;
        }
        // Outside a runtime (never in the server) there is nothing to load it with.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        d.running = true;
        let weak = self.self_ref.get().cloned().unwrap_or_default();
        rt.spawn(reflector_loop(weak));
    }

    /// For a cache loaded on demand with no watcher that nothing has read for
    /// [`ON_DEMAND_IDLE`]: drops its state and returns true (its reflector then ends).
    /// Reads always touch it first and finish their waits well within the idle time, so
    /// none is left reading the dropped state.
    pub(super) fn unload_if_idle(&self) -> bool {
        let Some(demand) = &self.demand else {
            return false;
        };
        let mut d = demand.lock();
        if !d.running || d.last_used.elapsed() < ON_DEMAND_IDLE {
            return false;
        }
        // Watchers register under the state's read lock: counted under its write lock, none
        // can be registering meanwhile.
        let mut state = self.state.write();
        if self.watcher_count() > 0 {
            return false;
        }
        d.running = false;
        self.ready_tx.send_replace(false);
        let dropped = std::mem::replace(
            &mut *state,
            WatchCache::new(self.opts.watch_cache_size, self.opts.watch_cache_bytes),
        );
        // Freeing a large state takes a while: not while readers and loads wait on the locks.
        drop(state);
        drop(d);
        drop(dropped);
        self.generation.fetch_add(1, Ordering::AcqRel);
        tracing::info!(
            resource = self.info.resource,
            "watch cache unloaded: no watcher and no read for a while"
        );
        true
    }

    /// The resource this cacher serves.
    pub fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    /// The newest resourceVersion the cache has applied.
    pub fn resource_version(&self) -> u64 {
        *self.rv_tx.borrow()
    }

    /// Counts the changes applied to the state (each event, each relist). Unlike
    /// [`Cacher::resource_version`], which progress notifications also move, an unchanged
    /// generation means an unchanged set of objects: what is derived from them (the RBAC
    /// index) need not be rebuilt.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Number of registered watchers.
    pub fn watcher_count(&self) -> usize {
        self.watchers.lock().count
    }

    /// True once the first list from storage has been loaded (for a cache loaded on demand:
    /// while it is loaded).
    pub fn is_ready(&self) -> bool {
        *self.ready_tx.borrow()
    }

    /// Declares that custom objects last written after revision `rv` were written under this
    /// cacher's schema and carry its defaults, so that they are cached without being
    /// parsed again (see [`CachedObject::decode_defaulted_after`]). Until called, every
    /// custom object with defaults to apply is parsed. Meaningless for built-in kinds.
    pub fn set_defaulted_after(&self, rv: u64) {
        self.defaulted_after.store(rv, Ordering::Relaxed);
    }

    /// Decodes a stored value of this cacher's resource.
    pub(super) fn decode(
        &self,
        key: &str,
        stored: &[u8],
        resource_version: u64,
    ) -> Result<CachedObject, String> {
        CachedObject::decode_defaulted_after(
            self.info,
            key,
            stored,
            resource_version,
            self.defaulted_after.load(Ordering::Relaxed),
        )
    }

    /// A receiver of the newest resourceVersion the cache has applied: it changes after
    /// every applied change (and progress notification).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.touch();
        self.rv_tx.subscribe()
    }

    /// Every object in the current state, in key order (a cache loaded on demand is empty
    /// until loaded: wait with [`Cacher::wait_until_fresh`] first).
    pub fn objects(&self) -> Vec<Arc<CachedObject>> {
        self.touch();
        self.state.read().range_from("").cloned().collect()
    }

    /// Looks up one object in the current state (may lag storage by a few milliseconds).
    pub fn get_cached(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.touch();
        self.state.read().get(key).cloned()
    }

    pub(super) async fn wait_ready(&self) -> Result<(), Status> {
        self.touch();
        let mut rx = self.ready_tx.subscribe();
        let timeout = match self.demand {
            Some(_) => ON_DEMAND_LOAD_TIMEOUT,
            None => FRESHNESS_TIMEOUT,
        };
        let ok = matches!(
            tokio::time::timeout(timeout, rx.wait_for(|r| *r)).await,
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

    /// Waits up to `timeout` for the cache to apply `rv`. Storage does not tell a cache of
    /// commits to other resources unless asked, so while the cache is behind, progress is
    /// requested now and again every [`PROGRESS_REQUEST_INTERVAL`] (a revision still ahead of
    /// storage may be reached by a later commit).
    pub(super) async fn wait_fresh_within(&self, rv: u64, timeout: Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        if *rx.borrow_and_update() >= rv {
            return true;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Err(e) = self.storage.request_progress(self.prefix.as_bytes()).await {
                tracing::debug!(
                    resource = self.info.resource,
                    "progress request failed: {e}"
                );
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return false;
            }
            let step = (deadline - now).min(PROGRESS_REQUEST_INTERVAL);
            match tokio::time::timeout(step, rx.wait_for(|cur| *cur >= rv)).await {
                Ok(Ok(_)) => return true,
                Ok(Err(_)) => return false,
                Err(_) => {}
            }
        }
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
    /// Returns the revision and whether the cache got there. Storage that answers progress
    /// requests (the embedded store) gets there at once; etcd only sends progress
    /// periodically, so an idle resource may not — callers then read storage instead.
    pub(super) async fn try_consistent(&self) -> Result<(u64, bool), Status> {
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

    /// Registers a watch: its initial frames and the queue the dispatcher fills, for a
    /// transport to stream until `deadline` (see [`WatchRegistration`]).
    pub async fn watch(
        &self,
        filter: Filter,
        start: WatchStart,
        allow_bookmarks: bool,
        deadline: Instant,
    ) -> Result<WatchRegistration, Status> {
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
        // A cache loaded on demand that unloaded while this request read storage loads again
        // now; its load then ends this watcher, whose client resumes (as after any relist).
        self.touch();
        let state = self.state.read();
        let mut rv = state.resource_version();
        let mut initial = VecDeque::new();
        // The cache may have caught up (or passed) the revision read from storage while it
        // was read: its events up to `rv` were dispatched before this watcher existed, so
        // the initial state must then be the cache's own, not the older list.
        if from_storage
            .as_ref()
            .is_some_and(|l| l.resource_version <= rv)
        {
            from_storage = None;
        }
        match start {
            WatchStart::CurrentState { .. } if from_storage.is_some() => {
                let listed = from_storage.take().unwrap_or_else(|| ListResult {
                    items: Vec::new(),
                    resource_version: rv,
                    continue_token: None,
                    remaining: None,
                });
                // The cache is behind the listed revision: events up to it are in the list,
                // and the watcher skips them as the cache catches up.
                rv = listed.resource_version;
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
                    return Ok(WatchRegistration {
                        initial,
                        outbox: None,
                        deadline,
                        api_version,
                        kind,
                        on_close: None,
                        flush_interval: Duration::ZERO,
                    });
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
        Ok(WatchRegistration {
            initial,
            outbox: Some(rx),
            deadline,
            api_version,
            kind,
            on_close: Some(on_close),
            flush_interval: self.opts.flush_interval,
        })
    }

    pub(super) fn restamped_prev(&self, ev: &WatchCacheEvent) -> Arc<CachedObject> {
        super::dispatch::restamped_prev(self.info, ev)
    }
}

/// How many events apart a replay prefetches each step of an event's chain (the event, its
/// objects, their namespaces): see [`Cacher::watch`].
const REPLAY_PREFETCH_STEP: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use storage::memory::MemoryStorage;

    fn event(name: &str) -> bytes::Bytes {
        bytes::Bytes::from(format!(
            r#"{{"apiVersion":"v1","kind":"Event","metadata":{{"name":"{name}","namespace":"default"}},"involvedObject":{{"kind":"Pod","name":"p"}},"message":"m"}}"#
        ))
    }

    fn loaded(c: &Cacher) -> bool {
        c.demand.as_ref().is_some_and(|d| d.lock().running)
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_on_demand_loads_when_read_and_unloads_when_left_alone() {
        let info = crate::registry::resources::find("", "v1", "events").unwrap();
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let c = Cacher::on_demand(
            info,
            storage.clone(),
            CacherOptions::default(),
            &Metrics::new(),
        );
        let key = |n: &str| format!("{}default/{n}", info.key_prefix());
        storage.create(key("a").into(), event("a")).await.unwrap();
        storage.create(key("b").into(), event("b")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Unread: nothing listed, nothing received.
        assert!(!loaded(&c));
        assert_eq!(c.counters.received.load(Ordering::Relaxed), 0);
        assert!(!c.is_ready());

        // A consistent read loads it, and then sees later writes as they happen.
        let rev = c.wait_consistent().await.unwrap();
        assert!(loaded(&c) && c.is_ready());
        assert_eq!(c.objects().len(), 2);
        storage.create(key("c").into(), event("c")).await.unwrap();
        assert!(c.wait_fresh_within(rev + 1, Duration::from_secs(1)).await);
        assert_eq!(c.objects().len(), 3);
        let shown = c.resource_version();

        // A watcher keeps it loaded however long nothing reads it.
        let filter = Filter::everything(info, None);
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut reg = c
            .watch(filter, WatchStart::After(shown), false, deadline)
            .await
            .unwrap();
        tokio::time::sleep(ON_DEMAND_IDLE * 2).await;
        assert!(loaded(&c), "unloaded under a watcher");
        (reg.on_close.take().unwrap())();
        // With the watcher gone and no read for the idle time, the state is dropped.
        tokio::time::sleep(ON_DEMAND_IDLE + Duration::from_secs(2)).await;
        assert!(!loaded(&c), "still loaded after the idle time");
        assert!(!c.is_ready());
        assert_eq!(c.state.read().len(), 0);
        storage.create(key("d").into(), event("d")).await.unwrap();
        let received = c.counters.received.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(c.counters.received.load(Ordering::Relaxed), received);

        // Loaded again by the next read, never older than what it showed before.
        c.wait_until_fresh(shown).await.unwrap();
        assert!(c.resource_version() >= shown);
        assert_eq!(c.objects().len(), 4);
    }
}
