//! `Reflector`: keeps a [`DeltaFifo`] in step with the server through list + watch.
//!
//! One [`Reflector::list_and_watch`] cycle:
//! 1. **List**, paged (500 per page), at resourceVersion `"0"` the first time (any state,
//!    served from the server's cache) and at the last synced resourceVersion afterwards; if
//!    that version is gone (410), immediately again at `""` (the newest state). The items
//!    go into the queue with [`DeltaFifo::replace`], which also queues tombstones for known
//!    objects that vanished.
//! 2. **Watch** from the list's resourceVersion, with bookmarks and a server-side timeout
//!    chosen at random in `[5, 10)` minutes so that many clients do not reconnect at once.
//!    Every event goes into the queue (`Added` → add, `Modified` → update, `Deleted` →
//!    delete) and advances [`Reflector::last_sync_resource_version`]; bookmarks advance it
//!    too.
//! 3. When the watch ends — cleanly, or by a transport failure (connection reset, EOF,
//!    GOAWAY, a stream reset, an idle timeout, a refused connection, 429) — watch again from
//!    the last synced resourceVersion: no relist. The first retry goes at once; retries that
//!    follow without a healthy watch in between (one that delivered an event or lasted a
//!    second) wait a jittered exponential [`Backoff`]. Only `Gone` (410) ends the cycle for
//!    a relist; so does any other error (a server error status, an undecodable event),
//!    which is also reported. A watch from the version a list *just* returned that fails
//!    with 410 marks that version unavailable, so the relist asks for `""` (the newest
//!    state) instead of the same old version again (which a paged list would be served at
//!    exactly, and which would fail the same way forever).
//!
//! [`Reflector::run`] repeats cycles forever, waiting a jittered exponential
//! [`Backoff`] between them. The **resync** timer runs inside a cycle, from the end of its
//! list while it watches (never during a list, a relist or the backoff between cycles):
//! every `resync_period` (if non-zero), when the `should_resync` hook agrees, it calls
//! [`DeltaFifo::resync`].
//!
//! **Watch-list mode** (optional, [`ReflectorOptions::watch_list`]): instead of the list, a
//! watch with `send_initial_events` streams the current state as `Added` events ended by a
//! bookmark with `initial_events_end`; the reflector collects them, replaces the queue with
//! them at the bookmark's resourceVersion and keeps watching on the same stream. If that
//! request fails or ends before the bookmark, the cycle falls back to list + watch.
//!
//! All waiting goes through a [`Clock`](crate::clock::Clock).

use crate::cache::backoff::{Backoff, SplitMix64};
use crate::cache::delta_fifo::{DeltaFifo, DeltaType};
use crate::cache::list_watch::{
    EventSource, ListRequest, ListerWatcher, WatchError, WatchEvent, WatchRequest,
};
use crate::cache::reflector_metrics::{ReflectorCounters, ReflectorMetrics};
use crate::cache::reflector_options::{ConfigureReflector, ReflectorOptions};
use crate::clock::SharedClock;
use crate::object::KubeObject;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The page size of the reflector's lists unless configured otherwise (client-go's).
pub const DEFAULT_PAGE_SIZE: u32 = 500;
/// The shortest server-side watch timeout the reflector asks for; the actual one is random
/// in `[MIN_WATCH_TIMEOUT, 2 × MIN_WATCH_TIMEOUT)`.
pub const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// A function applied to every object received from the server before it is queued (for
/// example to drop `managedFields`). It may return the same `Arc` unchanged.
pub type Transform<K> = Arc<dyn Fn(Arc<K>) -> Arc<K> + Send + Sync>;
/// Called with every error the reflector observes (list and watch failures, 410s included).
pub type WatchErrorHandler = Arc<dyn Fn(&WatchError) + Send + Sync>;
/// Asked at every resync tick whether a resync should happen now.
pub type ShouldResync = Arc<dyn Fn() -> bool + Send + Sync>;

struct SyncState {
    last_sync_resource_version: String,
    /// The last synced version was found gone by a list: relist at `""`.
    last_sync_unavailable: bool,
    /// The server answered a list with more than one page.
    paginated_result: bool,
}

/// Keeps a [`DeltaFifo`] in step with one resource. See the [module docs](self).
///
/// Usually an informer runs the reflector; alone, it fills a [`DeltaFifo`] that its
/// consumer pops:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use client::cache::{
///     ConfigureReflector as _, DeltaFifo, DeltaType, FakeListerWatcher, Reflector,
/// };
/// use client::object::DynamicObject;
///
/// let source = Arc::new(FakeListerWatcher::<DynamicObject>::new());
/// let web = br#"{"metadata":{"name":"web","namespace":"default","resourceVersion":"1"}}"#;
/// source.add(Arc::new(DynamicObject::from_slice(web).expect("valid JSON")));
///
/// let fifo = Arc::new(DeltaFifo::new());
/// let reflector = Arc::new(Reflector::builder(source.clone(), fifo.clone()).name("pods").build());
/// let task = tokio::spawn({
///     let reflector = reflector.clone();
///     async move { reflector.run().await }
/// });
///
/// // The list's objects arrive as `Replaced` deltas, keyed `namespace/name`.
/// let (key, kinds) = fifo
///     .pop(|key, deltas| (key, deltas.iter().map(|d| d.kind).collect::<Vec<_>>()))
///     .await
///     .expect("open queue");
/// assert_eq!(key, "default/web");
/// assert_eq!(kinds, [DeltaType::Replaced]);
/// assert_eq!(reflector.metrics().lists, 1);
/// task.abort();
/// # }
/// ```
pub struct Reflector<K> {
    name: String,
    lister_watcher: Arc<dyn ListerWatcher<K>>,
    store: Arc<DeltaFifo<K>>,
    clock: SharedClock,
    page_size: u32,
    use_watch_list: bool,
    list_backpressure: bool,
    transform: Option<Transform<K>>,
    resync_period: Mutex<Duration>,
    resync_changed: tokio::sync::Notify,
    should_resync: Mutex<Option<ShouldResync>>,
    error_handler: Mutex<Option<WatchErrorHandler>>,
    backoff: Mutex<Backoff>,
    rng: Mutex<SplitMix64>,
    sync: Mutex<SyncState>,
    counters: ReflectorCounters,
    /// A list or a watch-list once completed: every later cycle is a relist.
    synced_once: AtomicBool,
}

/// Configures a [`Reflector`]: the source and the queue it was started with, and its
/// [`ReflectorOptions`], set through the [`ConfigureReflector`] setters (`name`, `clock`,
/// `page_size`, `watch_list`, `list_backpressure`, `transform`, `resync_period`, `backoff`,
/// or all at once with `reflector_options`). A bare reflector applies no list backpressure
/// unless asked: its queue may have no consumer.
#[must_use]
pub struct ReflectorBuilder<K> {
    lister_watcher: Arc<dyn ListerWatcher<K>>,
    store: Arc<DeltaFifo<K>>,
    options: ReflectorOptions<K>,
}

impl<K> ConfigureReflector<K> for ReflectorBuilder<K> {
    fn reflector_options_mut(&mut self) -> &mut ReflectorOptions<K> {
        &mut self.options
    }
}

impl<K: KubeObject> ReflectorBuilder<K> {
    /// Builds the reflector; nothing runs until [`Reflector::run`] is polled.
    pub fn build(self) -> Reflector<K> {
        let ReflectorOptions {
            name,
            clock,
            page_size,
            watch_list,
            list_backpressure,
            transform,
            resync_period,
            backoff,
        } = self.options;
        let backoff = backoff.unwrap_or_else(|| Backoff::new(clock.clone()));
        Reflector {
            name,
            lister_watcher: self.lister_watcher,
            store: self.store,
            clock,
            page_size,
            use_watch_list: watch_list,
            list_backpressure: list_backpressure.unwrap_or(false),
            transform,
            resync_period: Mutex::new(resync_period),
            resync_changed: tokio::sync::Notify::new(),
            should_resync: Mutex::new(None),
            error_handler: Mutex::new(None),
            backoff: Mutex::new(backoff),
            rng: Mutex::new(SplitMix64::from_entropy()),
            sync: Mutex::new(SyncState {
                last_sync_resource_version: String::new(),
                last_sync_unavailable: false,
                paginated_result: false,
            }),
            counters: ReflectorCounters::default(),
            synced_once: AtomicBool::new(false),
        }
    }
}

/// How a watch stream ended.
enum WatchEnd {
    /// Watch again from the last synced version: a clean end, or a failure of the
    /// connection (reported already) that a new watch may not have.
    Rewatch {
        /// The watch delivered at least one event or lasted [`HEALTHY_WATCH`]: the
        /// connection worked, so the next attempt goes at once.
        healthy: bool,
    },
    /// End the cycle; the caller relists (`None` after a 410).
    Relist(Option<WatchError>),
}

/// A watch that delivered nothing and ended sooner than this was not a working watch.
const HEALTHY_WATCH: Duration = Duration::from_secs(1);

/// Whether a failure to open or keep a watch is one of the connection (the next watch from
/// the same version may well work) rather than of the request.
fn is_retriable(err: &WatchError) -> bool {
    matches!(
        err,
        WatchError::ConnectionRefused
            | WatchError::TooManyRequests { .. }
            | WatchError::IdleTimeout
            | WatchError::Transport(_)
    )
}

impl<K: KubeObject> Reflector<K> {
    /// Starts configuring a reflector that feeds `store` from `lister_watcher`, with
    /// [`ReflectorOptions::default`] settings.
    pub fn builder(
        lister_watcher: Arc<dyn ListerWatcher<K>>,
        store: Arc<DeltaFifo<K>>,
    ) -> ReflectorBuilder<K> {
        ReflectorBuilder {
            lister_watcher,
            store,
            options: ReflectorOptions::default(),
        }
    }

    /// The resourceVersion of the newest state the queue has received: the last list's, or
    /// the last watch event's or bookmark's. `""` before the first list.
    pub fn last_sync_resource_version(&self) -> String {
        self.sync.lock().last_sync_resource_version.clone()
    }

    /// What this reflector has done so far: lists, items listed, watches, events, short
    /// watches, 410 Gone answers and relists (see [`ReflectorMetrics`]). A copy of its
    /// counters, cheap enough to take on every scrape.
    pub fn metrics(&self) -> ReflectorMetrics {
        self.counters.snapshot()
    }

    /// Changes the resync period (takes effect at the next tick).
    pub fn set_resync_period(&self, period: Duration) {
        *self.resync_period.lock() = period;
        self.resync_changed.notify_waiters();
    }

    /// The current resync period.
    pub fn resync_period(&self) -> Duration {
        *self.resync_period.lock()
    }

    /// Sets the hook asked at each resync tick (none = always resync).
    pub fn set_should_resync(&self, hook: ShouldResync) {
        *self.should_resync.lock() = Some(hook);
    }

    /// Sets the handler called with every observed list/watch error.
    pub fn set_watch_error_handler(&self, handler: WatchErrorHandler) {
        *self.error_handler.lock() = Some(handler);
    }

    /// Hands `err` to the error handler (and counts a 410). Every error the reflector
    /// reports comes through here once.
    fn report(&self, err: &WatchError) {
        tracing::debug!(reflector = %self.name, error = %err, "list/watch error");
        if matches!(err, WatchError::Gone) {
            self.counters.gone();
        }
        let handler = self.error_handler.lock().clone();
        if let Some(h) = handler {
            h(err);
        }
    }

    fn set_last_sync(&self, rv: &str) {
        if !rv.is_empty() {
            let mut s = self.sync.lock();
            // Reuses the string's buffer: this runs for every event.
            s.last_sync_resource_version.clear();
            s.last_sync_resource_version.push_str(rv);
        }
    }

    /// The resourceVersion a relist asks for: `"0"` before anything was synced, `""` when
    /// the last synced version is known to be gone, the last synced version otherwise.
    fn relist_resource_version(&self) -> String {
        let s = self.sync.lock();
        if s.last_sync_unavailable {
            String::new()
        } else if s.last_sync_resource_version.is_empty() {
            "0".to_string()
        } else {
            s.last_sync_resource_version.clone()
        }
    }

    fn transformed(&self, obj: Arc<K>) -> Arc<K> {
        match &self.transform {
            Some(t) => t(obj),
            None => obj,
        }
    }

    fn watch_timeout(&self) -> u64 {
        let r = self.rng.lock().next_f64();
        let secs = MIN_WATCH_TIMEOUT.as_secs_f64() * (1.0 + r);
        (secs as u64).clamp(
            MIN_WATCH_TIMEOUT.as_secs(),
            2 * MIN_WATCH_TIMEOUT.as_secs() - 1,
        )
    }

    async fn back_off(&self) {
        let delay = self.backoff.lock().next_delay();
        self.clock.sleep(delay).await;
    }

    /// Lists everything (paged) and replaces the queue's content with it, page by page (a
    /// streaming replace: each page is queued as it arrives, the tombstones once the last
    /// page is in), so the complete new list is never held at once.
    async fn list(&self) -> Result<(), WatchError> {
        let mut rv = self.relist_resource_version();
        let paginated_before = self.sync.lock().paginated_result;
        let limit = if self.page_size == 0 || (!paginated_before && !rv.is_empty() && rv != "0") {
            // An exact version is served from the server's cache only without a limit.
            None
        } else {
            Some(self.page_size)
        };
        let mut replace = self.store.begin_replace();
        let mut request = ListRequest {
            resource_version: rv.clone(),
            limit,
            continue_token: None,
        };
        let mut pages = 0usize;
        let mut tokens = std::collections::HashSet::new();
        self.counters.list_started();
        let list_rv = loop {
            let mut sink = |items: Vec<Arc<K>>| {
                self.counters.items_listed(items.len());
                replace.add_page(items.into_iter().map(|o| self.transformed(o)));
            };
            let listed = self
                .lister_watcher
                .list_streaming(request.clone(), &mut sink)
                .await;
            let page = match listed {
                Ok(page) => page,
                Err(e @ (WatchError::Gone | WatchError::TooLargeResourceVersion))
                    if pages == 0 && !rv.is_empty() =>
                {
                    // The version we asked for is gone (or ahead of the server, which is
                    // behind what we saw, e.g. restarted): ask for the newest state instead.
                    if e == WatchError::Gone {
                        self.counters.gone();
                    }
                    self.counters.list_started();
                    self.sync.lock().last_sync_unavailable = true;
                    rv = String::new();
                    request = ListRequest {
                        resource_version: String::new(),
                        limit,
                        continue_token: None,
                    };
                    continue;
                }
                Err(WatchError::Gone) if pages > 0 => {
                    // The continue token expired: one full list without paging, as a new
                    // relist (the pages already queued are real states; whatever they hold
                    // that the new list lacks gets its tombstone from the new session).
                    self.counters.gone();
                    self.counters.list_started();
                    drop(replace);
                    replace = self.store.begin_replace();
                    pages = 0;
                    request = ListRequest {
                        resource_version: rv.clone(),
                        limit: None,
                        continue_token: None,
                    };
                    continue;
                }
                Err(e) => return Err(e),
            };
            pages += 1;
            match page.continue_token {
                // A server that hands out a token it already gave would page forever.
                Some(token) if !token.is_empty() && !tokens.insert(token.clone()) => {
                    return Err(WatchError::Other(format!(
                        "the server repeated continue token {token:?} within one list"
                    )));
                }
                Some(token) if !token.is_empty() => {
                    if self.list_backpressure {
                        let page = self.page_size.max(1) as usize;
                        self.store.wait_for_room(2 * page).await;
                    }
                    request = ListRequest {
                        resource_version: String::new(),
                        limit,
                        continue_token: Some(token),
                    };
                }
                _ => break page.resource_version,
            }
        };
        if pages > 1 && rv == "0" {
            // Only a paged answer to "0" (any state, which a watch cache serves whole) says
            // the server pages every list; a list at "" is paged anyway.
            self.sync.lock().paginated_result = true;
        }
        tracing::debug!(reflector = %self.name, asked = %rv, listed = %list_rv, pages, "relisted");
        replace.finish(&list_rv);
        self.synced_once.store(true, Ordering::Relaxed);
        let mut s = self.sync.lock();
        s.last_sync_unavailable = false;
        if !list_rv.is_empty() {
            s.last_sync_resource_version = list_rv;
        }
        Ok(())
    }

    /// Applies one event to the queue and advances the synced version.
    fn apply(&self, event: WatchEvent<K>) {
        if let Some(rv) = event.resource_version() {
            self.set_last_sync(rv);
        }
        match event {
            WatchEvent::Added(o) => self.store.add(self.transformed(o)),
            WatchEvent::Modified(o) => self.store.update(self.transformed(o)),
            WatchEvent::Deleted(o) => {
                self.store.delete(self.transformed(o));
            }
            WatchEvent::Bookmark { .. } => {}
        }
    }

    /// Applies a burst of events to the queue under one lock and advances the synced
    /// version to the newest one they carry.
    fn apply_all(&self, events: &mut Vec<WatchEvent<K>>) {
        // The objects were made on other threads, so queueing each one would first wait
        // for its lines to come over from another core. Asked for all at once, those waits
        // overlap: first the objects, then the names and namespaces they point to (the
        // queue's keys), which reading an object fetched a moment ago finds at hand. Only
        // an object's first two lines: they hold most of a `ProtobufObject` (104 bytes),
        // and a large typed struct keeps its strings elsewhere anyway.
        for object in events.iter().filter_map(|e| e.object()) {
            crate::prefetch::prefetch_value::<K>(object, 2);
        }
        for object in events.iter().filter_map(|e| e.object()) {
            crate::prefetch::prefetch_bytes(object.name().as_bytes(), 1);
            if let Some(namespace) = object.namespace() {
                crate::prefetch::prefetch_bytes(namespace.as_bytes(), 1);
            }
        }
        if let Some(rv) = events.iter().rev().find_map(|e| e.resource_version()) {
            self.set_last_sync(rv);
        }
        self.store
            .queue_changes(events.drain(..).filter_map(|event| match event {
                WatchEvent::Added(o) => Some((DeltaType::Added, self.transformed(o))),
                WatchEvent::Modified(o) => Some((DeltaType::Updated, self.transformed(o))),
                WatchEvent::Deleted(o) => Some((DeltaType::Deleted, self.transformed(o))),
                WatchEvent::Bookmark { .. } => None,
            }));
    }

    /// Reads a watch until it ends and says what to do next.
    async fn handle_watch(&self, mut source: Box<dyn EventSource<K>>) -> WatchEnd {
        /// The most events taken without waiting and queued together.
        const BURST: usize = 256;
        let start = self.clock.now();
        let mut events = 0usize;
        let mut burst: Vec<WatchEvent<K>> = Vec::new();
        let healthy = |events: usize| events > 0 || self.clock.since(start) >= HEALTHY_WATCH;
        loop {
            match source.next().await {
                Some(Ok(event)) => {
                    events += 1;
                    // Whatever else is already there joins it, up to an error (kept for
                    // below) or the burst limit.
                    burst.push(event);
                    let mut failed = None;
                    while burst.len() < BURST {
                        match source.try_next() {
                            Some(Ok(event)) => {
                                events += 1;
                                burst.push(event);
                            }
                            Some(Err(err)) => {
                                failed = Some(err);
                                break;
                            }
                            None => break,
                        }
                    }
                    self.counters.events(burst.len());
                    if burst.len() == 1 {
                        if let Some(event) = burst.pop() {
                            self.apply(event);
                        }
                    } else {
                        self.apply_all(&mut burst);
                    }
                    if let Some(err) = failed {
                        return self.watch_failed(err, true);
                    }
                }
                None => {
                    let healthy = healthy(events);
                    if !healthy {
                        self.counters.short_watch();
                        self.report(&WatchError::Other(
                            "very short watch: closed within a second without any event"
                                .to_string(),
                        ));
                    }
                    return WatchEnd::Rewatch { healthy };
                }
                Some(Err(err)) => return self.watch_failed(err, healthy(events)),
            }
        }
    }

    /// What to do after the open watch failed with `err` (reported here).
    fn watch_failed(&self, err: WatchError, healthy: bool) -> WatchEnd {
        self.report(&err);
        match err {
            WatchError::Gone => WatchEnd::Relist(None),
            err if is_retriable(&err) => WatchEnd::Rewatch { healthy },
            other => WatchEnd::Relist(Some(other)),
        }
    }

    /// A watch from `listed`, the version the cycle's list returned, found it gone: a
    /// relist at the same version could be served at exactly that version again (a paged
    /// list is), so the next list asks for the newest state instead. A later version (the
    /// watch got somewhere first) is relisted as usual: "not older than" it.
    fn gone_after_list(&self, listed: &str) {
        let mut s = self.sync.lock();
        if s.last_sync_resource_version == listed {
            s.last_sync_unavailable = true;
        }
    }

    /// Watch-list mode: a watch that starts with the whole state. Returns the open stream
    /// after its initial events were replaced into the queue.
    async fn watch_list(&self) -> Result<Box<dyn EventSource<K>>, WatchError> {
        // As a relist would: the newest state when the last version is known to be gone.
        let resource_version = {
            let s = self.sync.lock();
            if s.last_sync_unavailable {
                String::new()
            } else {
                s.last_sync_resource_version.clone()
            }
        };
        let request = WatchRequest {
            resource_version,
            allow_bookmarks: true,
            timeout_seconds: Some(self.watch_timeout()),
            send_initial_events: true,
        };
        let mut source = self.lister_watcher.watch(request).await?;
        self.counters.watch_started();
        // Streamed into the queue as a relist, one page of initial events at a time, so the
        // whole state is never held twice. The session is dropped (no tombstones) if the
        // stream fails before the bookmark; the cycle then falls back to list + watch.
        let mut replace = self.store.begin_replace();
        let page_size = match self.page_size {
            0 => DEFAULT_PAGE_SIZE as usize,
            n => n as usize,
        };
        let mut page: Vec<Arc<K>> = Vec::with_capacity(page_size);
        loop {
            let event = match source.try_next() {
                Some(event) => Some(event),
                None => {
                    // About to wait: hand over what arrived so far.
                    if !page.is_empty() {
                        replace.add_page(page.drain(..));
                    }
                    source.next().await
                }
            };
            if matches!(event, Some(Ok(_))) {
                self.counters.events(1);
            }
            match event {
                Some(Ok(WatchEvent::Added(o))) | Some(Ok(WatchEvent::Modified(o))) => {
                    page.push(self.transformed(o));
                    if page.len() >= page_size {
                        replace.add_page(page.drain(..));
                    }
                }
                Some(Ok(WatchEvent::Deleted(o))) => {
                    // In order after whatever was queued for the key; no tombstone needed.
                    replace.add_page(page.drain(..));
                    self.store.delete(self.transformed(o));
                }
                Some(Ok(WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                })) => {
                    if initial_events_end {
                        tracing::debug!(reflector = %self.name, at = %resource_version,
                            "watch-list: initial events complete");
                        replace.add_page(page.drain(..));
                        replace.finish(&resource_version);
                        self.synced_once.store(true, Ordering::Relaxed);
                        let mut s = self.sync.lock();
                        s.last_sync_unavailable = false;
                        s.last_sync_resource_version = resource_version;
                        return Ok(source);
                    }
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(WatchError::Other(
                        "watch-list ended before the initial-events-end bookmark".to_string(),
                    ))
                }
            }
        }
    }

    /// One list + watch cycle (see the [module docs](self)). Returns `Ok(())` when a relist
    /// is needed after a 410, `Err` for any other failure that ends the cycle. The resync
    /// timer runs from the end of the list until this returns.
    pub async fn list_and_watch(&self) -> Result<(), WatchError> {
        if self.synced_once.load(Ordering::Relaxed) {
            self.counters.relist();
        }
        let mut first: Option<Box<dyn EventSource<K>>> = None;
        if self.use_watch_list {
            match self.watch_list().await {
                Ok(source) => first = Some(source),
                Err(e) => {
                    if matches!(e, WatchError::Gone) {
                        self.counters.gone();
                    }
                    tracing::info!(reflector = %self.name, error = %e,
                        "watch-list failed, falling back to list + watch");
                }
            }
        }
        if first.is_none() {
            if let Err(e) = self.list().await {
                self.report(&e);
                return Err(e);
            }
        }
        let listed = self.last_sync_resource_version();
        tokio::select! {
            biased;
            ended = self.watch_until_relist(first, &listed) => ended,
            never = self.resync_loop() => match never {},
        }
    }

    /// The watch half of a cycle: watches from the last synced version again and again
    /// until a relist is needed.
    async fn watch_until_relist(
        &self,
        mut first: Option<Box<dyn EventSource<K>>>,
        listed: &str,
    ) -> Result<(), WatchError> {
        // Retries since the last healthy watch; all but the first wait a backoff.
        let mut retries = 0u32;
        loop {
            if retries > 1 {
                self.back_off().await;
            }
            let source = match first.take() {
                Some(s) => s,
                None => {
                    let request = WatchRequest {
                        resource_version: self.last_sync_resource_version(),
                        allow_bookmarks: true,
                        timeout_seconds: Some(self.watch_timeout()),
                        send_initial_events: false,
                    };
                    let from = request.resource_version.clone();
                    match self.lister_watcher.watch(request).await {
                        Ok(s) => {
                            tracing::debug!(reflector = %self.name, from = %from, "watching");
                            self.counters.watch_started();
                            s
                        }
                        Err(err) => {
                            self.report(&err);
                            match err {
                                WatchError::Gone => {
                                    self.gone_after_list(listed);
                                    return Ok(());
                                }
                                err if is_retriable(&err) => {
                                    // A server that is down or overloaded: always wait.
                                    retries = retries.max(1) + 1;
                                    continue;
                                }
                                other => return Err(other),
                            }
                        }
                    }
                }
            };
            match self.handle_watch(source).await {
                WatchEnd::Rewatch { healthy } => {
                    retries = if healthy { 1 } else { retries + 1 };
                }
                WatchEnd::Relist(None) => {
                    self.gone_after_list(listed);
                    return Ok(());
                }
                WatchEnd::Relist(Some(e)) => return Err(e),
            }
        }
    }

    /// Resyncs every resync period (while one is set) for as long as it is polled.
    async fn resync_loop(&self) -> std::convert::Infallible {
        loop {
            let changed = self.resync_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let period = self.resync_period();
            if period.is_zero() {
                // No timer at all until a period is set.
                changed.await;
                continue;
            }
            tokio::select! {
                _ = self.clock.sleep(period) => {}
                // A new period starts a new wait.
                _ = changed => continue,
            }
            let hook = self.should_resync.lock().clone();
            if hook.is_none_or(|h| h()) {
                let n = self.store.resync();
                tracing::trace!(reflector = %self.name, keys = n, "resync");
            }
        }
    }

    /// Runs list + watch cycles forever, with a backoff between cycles (and the resync
    /// timer within them). Stop it by dropping (or aborting the task polling) the future.
    pub async fn run(&self) {
        loop {
            // Errors were already reported to the handler.
            let _ = self.list_and_watch().await;
            self.back_off().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::delta_fifo::{DeltaObject, DeltaType, KnownObjects};
    use crate::cache::fake_lister_watcher::{Call, FakeListerWatcher};
    use crate::cache::list_watch::ListPage;
    use crate::cache::reflector_metrics::ReflectorMetrics;
    use crate::cache::store::Indexer;
    use crate::clock::FakeClock;
    use crate::object::DynamicObject;
    use serde_json::json;

    fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
        let v = json!({"metadata": {"name": name, "namespace": "ns",
            "resourceVersion": rv.to_string()}});
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    struct Rig {
        clock: FakeClock,
        fake: Arc<FakeListerWatcher<DynamicObject>>,
        indexer: Arc<Indexer<DynamicObject>>,
        fifo: Arc<DeltaFifo<DynamicObject>>,
        reflector: Arc<Reflector<DynamicObject>>,
    }

    fn rig(
        configure: impl FnOnce(ReflectorBuilder<DynamicObject>) -> ReflectorBuilder<DynamicObject>,
    ) -> Rig {
        rig_with(FakeClock::new(), configure)
    }

    fn rig_with(
        clock: FakeClock,
        configure: impl FnOnce(ReflectorBuilder<DynamicObject>) -> ReflectorBuilder<DynamicObject>,
    ) -> Rig {
        let fake = Arc::new(FakeListerWatcher::new());
        let indexer = Arc::new(Indexer::default());
        let fifo = Arc::new(DeltaFifo::with_known_objects(
            indexer.clone() as Arc<dyn KnownObjects<_>>
        ));
        let b = Reflector::builder(fake.clone(), fifo.clone()).clock(clock.shared());
        let reflector = Arc::new(configure(b).build());
        Rig {
            clock,
            fake,
            indexer,
            fifo,
            reflector,
        }
    }

    /// Pops everything queued and applies it to the indexer; returns the deltas.
    fn drain(r: &Rig) -> Vec<(String, DeltaType, bool)> {
        let mut out = Vec::new();
        while let Some(d) = r.fifo.try_pop(|k, d| (k, d)) {
            for delta in d.1 {
                out.push((d.0.clone(), delta.kind, delta.object.is_tombstone()));
                match (&delta.kind, &delta.object) {
                    (DeltaType::Deleted, DeltaObject::DeletedFinalStateUnknown { key, .. }) => {
                        r.indexer.delete_by_key(key);
                    }
                    (DeltaType::Deleted, DeltaObject::Object(o)) => {
                        r.indexer.delete(o);
                    }
                    (_, o) => {
                        r.indexer.add(Arc::clone(o.object()));
                    }
                }
            }
        }
        out
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    async fn until(mut cond: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if cond() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("condition not reached");
    }

    #[tokio::test]
    async fn a_burst_of_ready_events_is_queued_in_order_and_an_error_ends_the_watch() {
        let r = rig(|b| b);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        // 700 events land before the reflector runs again: taken in bursts (more than one
        // per wake-up), queued in order, with the synced version at the newest.
        for i in 1..=700u64 {
            let name = format!("o{}", i % 7);
            if i <= 7 {
                r.fake.add(obj(&name, i));
            } else {
                r.fake.modify(obj(&name, i));
            }
        }
        r.fake.delete(obj("o3", 701));
        until(|| r.reflector.last_sync_resource_version() == "701").await;
        let got = drain(&r);
        assert_eq!(got.len(), 701);
        assert_eq!(got[0], ("ns/o1".to_string(), DeltaType::Added, false));
        let o3: Vec<_> = got.iter().filter(|d| d.0 == "ns/o3").collect();
        assert_eq!(o3.first().map(|d| d.1), Some(DeltaType::Added));
        assert_eq!(o3.last().map(|d| d.1), Some(DeltaType::Deleted));
        assert_eq!(r.indexer.len(), 6);
        assert_eq!(
            r.indexer.get_by_key("ns/o6").unwrap().resource_version(),
            Some("699")
        );
        // A failure ends the cycle (the fake reports it ahead of anything unread).
        r.fake.inject_stream_error(WatchError::Gone);
        let ended = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ended, Ok(()), "410 asks for a relist");
    }

    #[tokio::test]
    async fn with_backpressure_a_paged_list_waits_for_the_consumer_between_pages() {
        let r = rig(|b| b.page_size(2).list_backpressure(true));
        for i in 1..=11 {
            r.fake.add(obj(&format!("o{i}"), i));
        }
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        // Nobody pops: the list stops once more than two pages' worth are queued.
        until(|| r.fake.list_calls().len() == 3).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(r.fake.list_calls().len(), 3, "ran ahead of the consumer");
        assert_eq!(r.fifo.len(), 6);
        assert!(r.fake.watch_calls().is_empty());
        // Popping lets it go on, page by page, to the end and into the watch.
        let mut popped = 0;
        while r.fake.watch_calls().is_empty() {
            popped += drain(&r).len();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        popped += drain(&r).len();
        assert_eq!(popped, 11);
        assert_eq!(r.fake.list_calls().len(), 6, "11 items in pages of 2");
        task.abort();
    }

    #[tokio::test]
    async fn first_list_is_paged_at_zero_then_watch_from_list_rv() {
        let r = rig(|b| b.page_size(2));
        for i in 1..=5 {
            r.fake.add(obj(&format!("o{i}"), i));
        }
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let lists = r.fake.list_calls();
        assert_eq!(lists.len(), 3, "5 items in pages of 2");
        assert_eq!(lists[0].resource_version, "0");
        assert_eq!(lists[0].limit, Some(2));
        assert!(lists[1].continue_token.is_some());
        assert_eq!(lists[1].resource_version, "");
        let w = &r.fake.watch_calls()[0];
        assert_eq!(w.resource_version, "5");
        assert!(w.allow_bookmarks);
        let t = w.timeout_seconds.unwrap();
        assert!((300..600).contains(&t), "timeout {t}");
        assert_eq!(r.reflector.last_sync_resource_version(), "5");
        assert_eq!(drain(&r).len(), 5);
        // Live events go to the queue and advance the version; bookmarks too.
        r.fake.modify(obj("o1", 6));
        r.fake.bookmark_at(9);
        until(|| r.reflector.last_sync_resource_version() == "9").await;
        assert_eq!(drain(&r), vec![("ns/o1".into(), DeltaType::Updated, false)]);
        task.abort();
    }

    #[tokio::test]
    async fn clean_close_rewatches_from_last_rv_without_relisting() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        r.fake.modify(obj("a", 2));
        r.fake.add(obj("b", 3));
        until(|| r.reflector.last_sync_resource_version() == "3").await;
        r.fake.close_watches();
        until(|| r.fake.watch_calls().len() == 2).await;
        assert_eq!(r.fake.watch_calls()[1].resource_version, "3");
        assert_eq!(
            r.fake.list_calls().len(),
            1,
            "no relist after a clean close"
        );
        task.abort();
    }

    /// The counters follow a run through its first list and watch, events, a 410 on the
    /// open watch, the relist after it, and a watch that the server closes at once.
    #[tokio::test]
    async fn metrics_count_lists_watches_events_410s_and_relists() {
        let r = rig(|b| b);
        for i in 1..=3 {
            r.fake.add(obj(&format!("o{i}"), i));
        }
        assert_eq!(r.reflector.metrics(), ReflectorMetrics::default());
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.run().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let m = r.reflector.metrics();
        assert_eq!(
            (
                m.lists,
                m.items_listed,
                m.watches,
                m.events,
                m.gone,
                m.relists
            ),
            (1, 3, 1, 0, 0, 0)
        );
        r.fake.modify(obj("o1", 4));
        r.fake.bookmark_at(5);
        until(|| r.reflector.last_sync_resource_version() == "5").await;
        assert_eq!(r.reflector.metrics().events, 2, "bookmarks count");
        // 410 on the open watch: the cycle ends, `run` backs off, then relists.
        r.fake.inject_stream_error(WatchError::Gone);
        until(|| r.reflector.metrics().gone == 1).await;
        until(|| r.clock.has_sleepers()).await;
        r.clock.step(Duration::from_secs(2)); // past the first backoff (at most 1.6 s)
        until(|| r.fake.watch_calls().len() == 2).await;
        let m = r.reflector.metrics();
        assert_eq!((m.lists, m.watches, m.gone, m.relists), (2, 2, 1, 1));
        assert_eq!(m.items_listed, 6);
        assert_eq!(m.short_watches, 0);
        // A watch closed at once without an event is a short watch; the next goes at once.
        r.fake.close_watches();
        until(|| r.fake.watch_calls().len() == 3).await;
        let m = r.reflector.metrics();
        assert_eq!((m.short_watches, m.watches, m.relists), (1, 3, 1));
        task.abort();
    }

    /// A 410 answered to a list (the version the relist asks for is gone) counts too, and
    /// the list restarted at the newest state counts as a list of its own.
    #[tokio::test]
    async fn metrics_count_a_410_answered_to_a_list() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 1));
        r.fake.fail_next_lists(vec![WatchError::Gone]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let m = r.reflector.metrics();
        assert_eq!((m.lists, m.items_listed, m.gone, m.relists), (2, 1, 1, 0));
        task.abort();
    }

    /// As client-go: a relist the server answers with "too large resource version" (it is
    /// behind what this client saw, e.g. restarted) asks again at once for the newest state.
    #[tokio::test]
    async fn a_relist_ahead_of_the_server_asks_again_for_the_newest_state() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        r.fake.modify(obj("a", 2));
        until(|| r.reflector.last_sync_resource_version() == "2").await;
        r.fake.inject_stream_error(WatchError::Gone);
        assert_eq!(task.await.unwrap(), Ok(()));
        r.fake
            .fail_next_lists(vec![WatchError::TooLargeResourceVersion]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 2).await;
        let asked: Vec<String> = r
            .fake
            .list_calls()
            .iter()
            .map(|l| l.resource_version.clone())
            .collect();
        assert_eq!(asked, ["0", "2", ""]);
        assert_eq!(r.fake.watch_calls()[1].resource_version, "2");
        task.abort();
    }

    #[tokio::test]
    async fn gone_ends_the_cycle_and_relist_uses_last_rv() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        r.fake.modify(obj("a", 2));
        until(|| r.reflector.last_sync_resource_version() == "2").await;
        r.fake.inject_stream_error(WatchError::Gone);
        let res = task.await.unwrap();
        assert_eq!(res, Ok(()));
        // Next cycle relists at the last synced version.
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.list_calls().len() == 2).await;
        assert_eq!(r.fake.list_calls()[1].resource_version, "2");
        assert_eq!(
            r.fake.list_calls()[1].limit,
            None,
            "exact RV lists are not paged"
        );
        task.abort();
    }

    /// As client-go: only a paged list at "0" makes later relists paged. A relist at ""
    /// (after a 410) is paged by its limit, but a relist at a version after it must not be:
    /// a paged list at an explicit version is served at exactly that (old) version.
    #[tokio::test]
    async fn a_paged_list_at_the_newest_state_does_not_make_relists_paged() {
        let r = rig(|b| b.page_size(1));
        r.fake.set_whole_lists_at_zero(true);
        r.fake.set_paged_lists_at_exact_version(true);
        r.fake.add(obj("a", 1));
        r.fake.add(obj("b", 2));
        r.fake.fail_next_lists(vec![WatchError::Gone]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let lists = r.fake.list_calls();
        assert_eq!(
            (lists[1].resource_version.as_str(), lists.len()),
            ("", 3),
            "the list at \"\" after the 410 is paged: {lists:?}"
        );
        r.fake.modify(obj("a", 3));
        until(|| r.reflector.last_sync_resource_version() == "3").await;
        r.fake.inject_stream_error(WatchError::Gone);
        assert_eq!(task.await.unwrap(), Ok(()));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.list_calls().len() == 4).await;
        let relist = &r.fake.list_calls()[3];
        assert_eq!(
            (relist.resource_version.as_str(), relist.limit),
            ("3", None),
            "a relist at a version is not paged"
        );
        task.abort();
    }

    #[tokio::test]
    async fn a_watch_gone_at_the_version_just_listed_relists_at_the_newest_state() {
        // The livelock this prevents: a paged relist is served at exactly the old version
        // the reflector asks for, and a watch from there is gone again, forever.
        for in_stream in [true, false] {
            let r = rig(|b| b.page_size(1));
            r.fake.set_gone_as_stream_error(in_stream);
            r.fake.set_paged_lists_at_exact_version(true);
            r.fake.add(obj("a", 1));
            r.fake.add(obj("b", 2));
            let refl = r.reflector.clone();
            let task = tokio::spawn(async move { refl.list_and_watch().await });
            until(|| r.fake.watch_calls().len() == 1).await;
            task.abort();
            // History is lost behind the reflector's back.
            r.fake.modify(obj("a", 3));
            r.fake.compact();
            let refl = r.reflector.clone();
            assert_eq!(
                refl.list_and_watch().await,
                Ok(()),
                "in stream: {in_stream}"
            );
            let lists = r.fake.list_calls();
            let relist = lists
                .iter()
                .rev()
                .find(|l| l.continue_token.is_none())
                .unwrap();
            assert_eq!(
                relist.resource_version, "2",
                "first a relist at the last version"
            );
            // Its watch was gone at once: the next relist asks for the newest state.
            let refl = r.reflector.clone();
            let task = tokio::spawn(async move { refl.list_and_watch().await });
            until(|| r.fake.watch_calls().len() == 3).await;
            let lists = r.fake.list_calls();
            let relist = lists
                .iter()
                .rev()
                .find(|l| l.continue_token.is_none())
                .unwrap();
            assert_eq!(relist.resource_version, "", "in stream: {in_stream}");
            assert_eq!(r.fake.watch_calls()[2].resource_version, "3");
            task.abort();
        }
    }

    #[tokio::test]
    async fn a_broken_connection_rewatches_from_the_last_version_and_backs_off_when_it_repeats() {
        let clock = FakeClock::new();
        let r = rig_with(clock.clone(), |b| {
            b.backoff(Backoff::new(clock.shared()).jitter(0.0))
        });
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        r.fake.modify(obj("a", 2));
        until(|| r.reflector.last_sync_resource_version() == "2").await;
        // A reset after a working watch: watched again at once, from where it was.
        r.fake
            .inject_stream_error(WatchError::Transport("connection reset".into()));
        until(|| r.fake.watch_calls().len() == 2).await;
        assert_eq!(r.fake.watch_calls()[1].resource_version, "2");
        // Failing again at once (a GOAWAY, then a refused connection): now it waits.
        r.fake
            .inject_stream_error(WatchError::Transport("GOAWAY".into()));
        until(|| r.clock.has_sleepers()).await;
        assert_eq!(r.fake.watch_calls().len(), 2, "retried without a backoff");
        r.fake
            .fail_next_watches(vec![WatchError::ConnectionRefused]);
        r.clock.step(Duration::from_millis(800));
        until(|| r.fake.watch_calls().len() == 3).await;
        until(|| r.clock.has_sleepers()).await;
        r.clock.step(Duration::from_millis(1599));
        settle().await;
        assert_eq!(r.fake.watch_calls().len(), 3, "the backoff grows");
        r.clock.step(Duration::from_millis(1));
        until(|| r.fake.watch_calls().len() == 4).await;
        assert_eq!(r.fake.watch_calls()[3].resource_version, "2");
        r.fake.modify(obj("a", 5));
        until(|| r.reflector.last_sync_resource_version() == "5").await;
        assert_eq!(r.fake.list_calls().len(), 1, "never relisted");
        task.abort();
    }

    #[tokio::test]
    async fn initial_list_gone_retries_at_empty_rv() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 4));
        r.fake.fail_next_lists(vec![WatchError::Gone]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let rvs: Vec<String> = r
            .fake
            .list_calls()
            .into_iter()
            .map(|l| l.resource_version)
            .collect();
        assert_eq!(rvs, vec!["0", ""]);
        assert_eq!(r.reflector.last_sync_resource_version(), "4");
        task.abort();
    }

    #[tokio::test]
    async fn too_many_requests_backs_off_then_rewatches_from_last_rv() {
        let clock = FakeClock::new();
        let r = rig_with(clock.clone(), |b| {
            b.backoff(Backoff::new(clock.shared()).jitter(0.0))
        });
        r.fake.add(obj("a", 1));
        r.fake
            .fail_next_watches(vec![WatchError::TooManyRequests { retry_after: None }]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.clock.has_sleepers()).await;
        assert_eq!(r.fake.watch_calls().len(), 1);
        r.clock.step(Duration::from_millis(799));
        settle().await;
        assert_eq!(r.fake.watch_calls().len(), 1, "still backing off");
        r.clock.step(Duration::from_millis(1));
        until(|| r.fake.watch_calls().len() == 2).await;
        assert_eq!(r.fake.watch_calls()[1].resource_version, "1");
        assert_eq!(r.fake.list_calls().len(), 1);
        task.abort();
    }

    #[tokio::test]
    async fn other_watch_errors_end_the_cycle_with_the_error() {
        let r = rig(|b| b);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        r.reflector
            .set_watch_error_handler(Arc::new(move |e: &WatchError| s.lock().push(e.clone())));
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        let err = WatchError::Other("an undecodable event".into());
        r.fake.inject_stream_error(err.clone());
        assert_eq!(task.await.unwrap(), Err(err.clone()));
        assert_eq!(*seen.lock(), vec![err]);
    }

    #[tokio::test]
    async fn run_relists_after_list_failures_with_backoff() {
        let r = rig(|b| b);
        r.fake.add(obj("a", 1));
        r.fake.fail_next_lists(vec![
            WatchError::Transport("x".into()),
            WatchError::Transport("y".into()),
        ]);
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.run().await });
        until(|| r.fake.list_calls().len() == 1 && r.clock.has_sleepers()).await;
        r.clock.step(Duration::from_millis(1600)); // ≥ the first jittered delay
        until(|| r.fake.list_calls().len() == 2).await;
        r.clock.step(Duration::from_millis(3200));
        until(|| r.fake.watch_calls().len() == 1).await;
        assert_eq!(r.fake.list_calls().len(), 3);
        task.abort();
    }

    #[tokio::test]
    async fn resync_ticks_ask_the_hook() {
        let r = rig(|b| b.resync_period(Duration::from_secs(10)));
        let allow = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let a = allow.clone();
        r.reflector.set_should_resync(Arc::new(move || {
            a.load(std::sync::atomic::Ordering::SeqCst)
        }));
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.run().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        drain(&r);
        r.clock.step(Duration::from_secs(10));
        settle().await;
        assert!(r.fifo.is_empty(), "hook said no");
        allow.store(true, std::sync::atomic::Ordering::SeqCst);
        r.clock.step(Duration::from_secs(10));
        until(|| !r.fifo.is_empty()).await;
        assert_eq!(drain(&r), vec![("ns/a".into(), DeltaType::Sync, false)]);
        task.abort();
    }

    /// As client-go: a watch-list after the last version was found gone asks for the newest
    /// state (`""`), not for that version again.
    #[tokio::test]
    async fn a_watch_list_after_a_gone_version_asks_for_the_newest_state() {
        let r = rig(|b| b.watch_list(true));
        r.fake.add(obj("a", 1));
        r.fake.add(obj("b", 2));
        // The watch-list fails, the fallback list returns 2, and the watch from 2 is gone.
        r.fake.fail_next_watches(vec![
            WatchError::Other("no watch-list".into()),
            WatchError::Gone,
        ]);
        let refl = r.reflector.clone();
        assert_eq!(refl.list_and_watch().await, Ok(()));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 3).await;
        let third = &r.fake.watch_calls()[2];
        assert!(third.send_initial_events);
        assert_eq!(third.resource_version, "");
        task.abort();
    }

    #[tokio::test]
    async fn watch_list_mode_and_fallback() {
        let r = rig(|b| b.watch_list(true));
        r.fake.add(obj("a", 1));
        r.fake.add(obj("b", 2));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.reflector.last_sync_resource_version() == "2").await;
        assert!(r.fake.list_calls().is_empty(), "no list in watch-list mode");
        assert!(r.fake.watch_calls()[0].send_initial_events);
        let mut keys: Vec<_> = drain(&r).into_iter().map(|d| (d.0, d.1)).collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            keys,
            vec![
                ("ns/a".into(), DeltaType::Replaced),
                ("ns/b".into(), DeltaType::Replaced)
            ]
        );
        // The same stream keeps delivering.
        r.fake.add(obj("c", 3));
        until(|| r.reflector.last_sync_resource_version() == "3").await;
        assert_eq!(r.fake.watch_calls().len(), 1);
        task.abort();

        // A server without watch-list support: fall back to list + watch.
        let r = rig(|b| b.watch_list(true));
        r.fake.set_supports_watch_list(false);
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.calls().len() == 3).await;
        let calls = r.fake.calls();
        assert!(matches!(&calls[0], Call::Watch(w) if w.send_initial_events));
        assert!(matches!(&calls[1], Call::List(_)));
        assert!(
            matches!(&calls[2], Call::Watch(w) if !w.send_initial_events && w.resource_version == "1")
        );
        task.abort();
    }

    #[tokio::test]
    async fn transform_applies_before_queueing() {
        let r = rig(|b| {
            b.transform(|o: Arc<DynamicObject>| {
                let v = json!({"metadata": {"name": o.name(), "namespace": "ns",
                    "resourceVersion": o.resource_version().unwrap_or(""),
                    "labels": {"transformed": "yes"}}});
                Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
            })
        });
        r.fake.add(obj("a", 1));
        let refl = r.reflector.clone();
        let task = tokio::spawn(async move { refl.list_and_watch().await });
        until(|| r.fake.watch_calls().len() == 1).await;
        r.fake.add(obj("b", 2));
        until(|| r.fifo.len() == 2).await;
        drain(&r);
        for o in r.indexer.list() {
            assert_eq!(o.labels().unwrap().get("transformed"), Some("yes"));
        }
        task.abort();
    }

    /// Pages forever with the same continue token, counting the calls.
    struct RepeatingToken(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl ListerWatcher<DynamicObject> for RepeatingToken {
        async fn list(&self, _: ListRequest) -> Result<ListPage<DynamicObject>, WatchError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(ListPage {
                items: vec![obj("a", 1)],
                resource_version: "1".into(),
                continue_token: Some("same".into()),
            })
        }

        async fn watch(
            &self,
            _: WatchRequest,
        ) -> Result<Box<dyn EventSource<DynamicObject>>, WatchError> {
            Err(WatchError::Other("not reached".into()))
        }
    }

    #[tokio::test]
    async fn a_continue_token_given_twice_ends_the_list_with_an_error() {
        let lw = Arc::new(RepeatingToken(Default::default()));
        let fifo = Arc::new(DeltaFifo::<DynamicObject>::new());
        let reflector = Reflector::builder(lw.clone(), fifo).page_size(1).build();
        let e = tokio::time::timeout(Duration::from_secs(10), reflector.list_and_watch())
            .await
            .expect("the list ends")
            .unwrap_err();
        assert!(
            matches!(&e, WatchError::Other(m) if m.contains("repeated continue token")),
            "{e:?}"
        );
        assert_eq!(lw.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
