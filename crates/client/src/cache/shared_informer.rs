//! `SharedIndexInformer`: one list-watched resource, one local indexed cache, many handlers.
//!
//! Pieces: a [`Reflector`] feeds a [`DeltaFifo`] (whose known objects are the informer's
//! [`Indexer`]); the process loop pops keys in batches (each key with all its deltas) and
//! applies them to the indexer, handing the matching notifications to the shared processor,
//! which queues them for every registered handler.
//!
//! What handlers may rely on:
//! - **Per-key order**: for one object key, notifications arrive in the order the changes
//!   reached the cache; `on_update(old, new)` always carries the state the cache held
//!   before as `old`.
//! - **The cache is at least as new as the notification**: when a handler runs, the indexer
//!   (and so any [`Lister`]) already holds the notified state or a newer one.
//! - **Deletions are not lost**: a deletion seen by the watch carries the final object; one
//!   found by a relist carries a [`DeltaObject::DeletedFinalStateUnknown`] tombstone with the
//!   last known state.
//! - **Resyncs** (if a handler asked for a period) re-deliver cached objects as
//!   `on_update(o, o)` only to handlers whose period is due; an update whose old and new
//!   resourceVersions are equal (a relist that found nothing new) is treated the same way.
//! - **Late handlers** get `on_add(o, true)` for exactly the objects in the cache at the
//!   moment they register, and then every later change — no gap, no duplicate.
//! - Objects are shared `Arc`s and read-only.

use crate::cache::delta_fifo::{DeltaFifo, DeltaObject, DeltaType, Deltas, KnownObjects, Popped};
use crate::cache::index::{namespace_indexers, Indexers};
use crate::cache::list_watch::{ListerWatcher, WatchError};
use crate::cache::lister::Lister;
use crate::cache::processor::{
    HandlerOptions, Listener, Notification, NotificationStream, Registration, ResourceEventHandler,
    SharedProcessor,
};
use crate::cache::reflector::Reflector;
use crate::cache::reflector_options::{ConfigureReflector, ReflectorOptions};
use crate::cache::store::{IndexError, Indexer};
use crate::clock::SharedClock;
use crate::object::KubeObject;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use crate::cache::processor::DeleteEvent;

/// Handler resync periods below this are raised to it.
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// The resync period a handler gets, as client-go's `determineResyncPeriod` decides it:
/// none if it asked for none or the informer checks for resyncs never (built with resync
/// zero: a handler cannot turn resync on), else at least the informer's check period.
fn determine_resync_period(informer: &str, desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        Duration::ZERO
    } else if check.is_zero() {
        tracing::warn!(
            informer,
            "handler resync period ignored: the informer was built without resync"
        );
        Duration::ZERO
    } else {
        desired.max(check)
    }
}

/// Errors of informer configuration calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InformerError {
    /// The call is only allowed before [`SharedIndexInformer::start`].
    #[error("informer has already started")]
    AlreadyStarted,
    /// The indexers could not be added.
    #[error(transparent)]
    Index(#[from] IndexError),
}

struct Inner<K: KubeObject> {
    name: String,
    indexer: Arc<Indexer<K>>,
    fifo: Arc<DeltaFifo<K>>,
    processor: Arc<SharedProcessor<K>>,
    reflector: Arc<Reflector<K>>,
    clock: SharedClock,
    /// Held while deltas are applied and while a late handler is registered, so the two
    /// never interleave.
    block_deltas: Mutex<()>,
    default_resync: Duration,
    resync_check_period: Mutex<Duration>,
    started: AtomicBool,
    stopped: AtomicBool,
    stop_notify: Notify,
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A shared informer over one resource. Cheap to clone (all clones are the same informer).
/// See the [module docs](self) for the guarantees.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use client::cache::{
///     wait_for_cache_sync, ConfigureReflector as _, FakeListerWatcher,
///     ResourceEventHandlerFuncs, SharedIndexInformer,
/// };
/// use client::object::{DynamicObject, KubeObject as _};
/// use client::LabelSelector;
///
/// // A scripted source; `RestListerWatcher` is the one that talks to a server.
/// let source = Arc::new(FakeListerWatcher::<DynamicObject>::new());
/// let web = br#"{"metadata":{"name":"web","namespace":"default","resourceVersion":"1",
///     "labels":{"app":"web"}}}"#;
/// source.add(Arc::new(DynamicObject::from_slice(web).expect("valid JSON")));
///
/// let informer = SharedIndexInformer::builder(source.clone()).name("pods").build();
/// informer.add_event_handler(
///     ResourceEventHandlerFuncs::<DynamicObject>::new()
///         .on_add(|pod, initial| println!("add {} (initial list: {initial})", pod.name())),
/// );
/// informer.start();
/// assert!(wait_for_cache_sync(&[&informer], Duration::from_secs(10)).await);
///
/// let selector = LabelSelector::parse("app=web").expect("valid selector");
/// assert_eq!(informer.lister().list(&selector).len(), 1);
/// assert_eq!(informer.reflector_metrics().lists, 1);
/// informer.shutdown().await;
/// # }
/// ```
pub struct SharedIndexInformer<K: KubeObject> {
    inner: Arc<Inner<K>>,
}

impl<K: KubeObject> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        SharedIndexInformer {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// Configures a [`SharedIndexInformer`]: its source, its indexers, and the
/// [`ReflectorOptions`] of its reflector — which also name the informer, give it its clock
/// and its handlers' default resync period — set through the [`ConfigureReflector`]
/// setters (`name`, `clock`, `page_size`, `watch_list`, `transform`, `resync_period`, ...,
/// or all at once with `reflector_options`). Unlike a bare reflector's, an informer's
/// reflector applies list backpressure unless told not to: its process loop always
/// consumes the queue.
#[must_use]
pub struct InformerBuilder<K: KubeObject> {
    lister_watcher: Arc<dyn ListerWatcher<K>>,
    indexers: Indexers<K>,
    options: ReflectorOptions<K>,
}

impl<K: KubeObject> ConfigureReflector<K> for InformerBuilder<K> {
    fn reflector_options_mut(&mut self) -> &mut ReflectorOptions<K> {
        &mut self.options
    }
}

impl<K: KubeObject> InformerBuilder<K> {
    /// Extra indexers, next to the namespace index that every informer has.
    pub fn indexers(mut self, indexers: Indexers<K>) -> Self {
        self.indexers.extend(indexers);
        self
    }
    /// Builds the informer; nothing runs until [`SharedIndexInformer::start`].
    pub fn build(self) -> SharedIndexInformer<K> {
        let InformerBuilder {
            lister_watcher,
            indexers,
            mut options,
        } = self;
        let name = options.name.clone();
        let clock = options.clock.clone();
        // Handlers registered without a period get this one; the reflector's own period
        // is the check period, set when the informer starts.
        let default_resync = options.resync_period;
        // The informer's process loop always consumes the queue.
        options.list_backpressure.get_or_insert(true);
        let indexer = Arc::new(Indexer::new(indexers));
        let fifo = Arc::new(DeltaFifo::with_known_objects(
            Arc::clone(&indexer) as Arc<dyn KnownObjects<K>>
        ));
        let reflector = Arc::new(
            Reflector::builder(lister_watcher, Arc::clone(&fifo))
                .reflector_options(options)
                .build(),
        );
        let processor = Arc::new(SharedProcessor::new());
        let p = Arc::downgrade(&processor);
        let resync_clock = clock.clone();
        reflector.set_should_resync(Arc::new(move || {
            p.upgrade()
                .is_some_and(|p| p.should_resync(resync_clock.now()))
        }));
        SharedIndexInformer {
            inner: Arc::new(Inner {
                name,
                indexer,
                fifo,
                processor,
                reflector,
                clock,
                block_deltas: Mutex::new(()),
                default_resync,
                resync_check_period: Mutex::new(default_resync),
                started: AtomicBool::new(false),
                stopped: AtomicBool::new(false),
                stop_notify: Notify::new(),
                runtime: Mutex::new(None),
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }
}

/// How many keys the process loop takes from the DeltaFIFO per wake-up.
const POP_BATCH: usize = 256;

impl<K: KubeObject> Inner<K> {
    /// The cached object under `key` if it is at `new`'s resourceVersion: the same object,
    /// as far as the server is concerned.
    fn unchanged(&self, key: &str, new: &K) -> Option<Arc<K>> {
        let cached = self.indexer.get_by_key(key)?;
        let same = cached.resource_version().is_some()
            && cached.resource_version() == new.resource_version();
        same.then_some(cached)
    }

    /// Applies one key's deltas to the indexer and appends the matching notifications (with
    /// their "is a resync" flag) to `out`, in order. A relisted object (`Replaced`) that the
    /// cache holds at the same resourceVersion is not stored again: the cached copy stays,
    /// and a resync notification carries it as both old and new.
    fn apply_deltas(
        &self,
        key: &str,
        deltas: Deltas<K>,
        is_in_initial_list: bool,
        out: &mut Vec<(Notification<K>, bool)>,
    ) {
        for d in deltas {
            match d.kind {
                DeltaType::Sync | DeltaType::Replaced | DeltaType::Added | DeltaType::Updated => {
                    let new = match d.object {
                        DeltaObject::Object(o) => o,
                        DeltaObject::DeletedFinalStateUnknown { last_known, .. } => last_known,
                    };
                    if d.kind == DeltaType::Replaced {
                        if let Some(cached) = self.unchanged(key, &new) {
                            // The cache keeps its copy and the listed one, identical, is
                            // dropped here. A relist of mostly unchanged objects then leaves
                            // nothing behind but its queue: no second copy of the cache
                            // builds up while the first is freed, which with per-thread
                            // heaps can raise the process's memory by much of the cache.
                            out.push((
                                Notification::Update {
                                    old: Arc::clone(&cached),
                                    new: cached,
                                },
                                true,
                            ));
                            continue;
                        }
                    }
                    match self.indexer.add_by_key(key, Arc::clone(&new)) {
                        Some(old) => {
                            // Only handlers due for a resync hear of a resync, and of a
                            // relisted object whose resourceVersion did not change (nothing
                            // happened to it on the server). Other kinds always carry a
                            // change, so the old object (long out of the CPU's caches) is not
                            // read for them.
                            let is_sync = match d.kind {
                                DeltaType::Sync => true,
                                DeltaType::Replaced => {
                                    old.resource_version() == new.resource_version()
                                }
                                _ => false,
                            };
                            out.push((Notification::Update { old, new }, is_sync));
                        }
                        None => out.push((
                            Notification::Add {
                                object: new,
                                is_in_initial_list,
                            },
                            false,
                        )),
                    }
                }
                DeltaType::Deleted => {
                    // A tombstone carries the same key as the object it stands for.
                    self.indexer.delete_by_key(key);
                    out.push((Notification::Delete(d.object), false));
                }
            }
        }
    }

    /// Applies a batch of keys' deltas (in pop order) to the indexer and hands the
    /// notifications to the processor, all under the deltas lock.
    fn handle_batch(&self, batch: Vec<Popped<K>>) {
        let _guard = self.block_deltas.lock();
        let mut notifications = Vec::with_capacity(batch.len());
        for p in batch {
            self.apply_deltas(&p.key, p.deltas, p.initial, &mut notifications);
        }
        self.processor.distribute_all(notifications);
    }

    async fn process_loop(self: Arc<Self>) {
        loop {
            let me = Arc::clone(&self);
            let max = self.processor.batch_limit(POP_BATCH);
            let popped = self
                .fifo
                .pop_batch(max, move |batch| me.handle_batch(batch))
                .await;
            if popped.is_err() {
                return;
            }
            self.processor.wait_for_space().await;
        }
    }
}

impl<K: KubeObject> SharedIndexInformer<K> {
    /// Starts configuring an informer over `lister_watcher`, named `"informer"`, with the
    /// namespace index and otherwise [`ReflectorOptions::default`] settings.
    pub fn builder(lister_watcher: Arc<dyn ListerWatcher<K>>) -> InformerBuilder<K> {
        InformerBuilder {
            lister_watcher,
            indexers: namespace_indexers(),
            options: ReflectorOptions::default().name("informer"),
        }
    }

    /// The informer's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The local cache. Read it freely; never write to it (the informer owns it).
    pub fn indexer(&self) -> &Arc<Indexer<K>> {
        &self.inner.indexer
    }

    /// A lister over the local cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(Arc::clone(&self.inner.indexer))
    }

    /// Adds indexers; only before [`SharedIndexInformer::start`].
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), InformerError> {
        if self.inner.started.load(Ordering::SeqCst) {
            return Err(InformerError::AlreadyStarted);
        }
        Ok(self.inner.indexer.add_indexers(indexers)?)
    }

    /// Sets the handler called with every list/watch error the reflector observes (410s,
    /// refused connections, ...). It runs on the reflector's task and must be quick.
    pub fn set_watch_error_handler(&self, handler: impl Fn(&WatchError) + Send + Sync + 'static) {
        self.inner
            .reflector
            .set_watch_error_handler(Arc::new(handler));
    }

    /// True once the initial list has been fully applied to the cache and distributed to
    /// the handlers' queues (it never becomes false again). It says nothing about whether
    /// handlers have processed it: see [`Registration::has_synced`].
    pub fn has_synced(&self) -> bool {
        self.inner.fifo.has_synced()
    }

    /// The resourceVersion of the newest state received from the server (`""` before the
    /// first list).
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.reflector.last_sync_resource_version()
    }

    /// What this informer's reflector has done so far: lists, items listed, watches,
    /// events, short watches, 410 Gone answers and relists (see
    /// [`ReflectorMetrics`](crate::cache::ReflectorMetrics)). A cheap copy of its counters;
    /// all zero before [`start`](Self::start).
    pub fn reflector_metrics(&self) -> crate::cache::ReflectorMetrics {
        self.inner.reflector.metrics()
    }

    /// The period at which the reflector checks whether handlers are due for a resync: the
    /// informer's default resync period, lowered (before start) by any handler that asks
    /// for a shorter one. Zero — an informer built without resync — means no handler is
    /// ever resynced, whatever period it asks for (as in client-go).
    pub fn resync_check_period(&self) -> Duration {
        *self.inner.resync_check_period.lock()
    }

    /// Registers `handler` with the informer's default resync period.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler<K>) -> Registration {
        self.add_event_handler_with_options(
            handler,
            HandlerOptions::default().resync_period(self.inner.default_resync),
        )
    }

    /// Registers `handler` with its own resync period.
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler<K>,
        period: Duration,
    ) -> Registration {
        self.add_event_handler_with_options(
            handler,
            HandlerOptions::default().resync_period(period),
        )
    }

    /// Registers `handler` with the given options. If the informer already holds objects,
    /// the handler first gets `on_add(o, true)` for each of them.
    pub fn add_event_handler_with_options(
        &self,
        handler: impl ResourceEventHandler<K>,
        options: HandlerOptions,
    ) -> Registration {
        let handler: Arc<dyn ResourceEventHandler<K>> = Arc::new(handler);
        let listener = self.register(Some(handler), options);
        if let Some(rt) = self.inner.runtime.lock().clone() {
            listener.spawn(&rt);
        }
        self.registration(&listener)
    }

    /// The stream style: a registration whose notifications are taken with
    /// [`NotificationStream::next`] (default resync period, unbounded queue).
    pub fn notifications(&self) -> NotificationStream<K> {
        self.notifications_with_options(
            HandlerOptions::default().resync_period(self.inner.default_resync),
        )
    }

    /// [`SharedIndexInformer::notifications`] with explicit options.
    pub fn notifications_with_options(&self, options: HandlerOptions) -> NotificationStream<K> {
        let listener = self.register(None, options);
        NotificationStream {
            registration: self.registration(&listener),
            listener,
            processor: Arc::downgrade(&self.inner.processor),
            last: None,
        }
    }

    fn registration(&self, listener: &Arc<Listener<K>>) -> Registration {
        let fifo = Arc::clone(&self.inner.fifo);
        Registration {
            id: listener.id,
            status: Arc::clone(listener) as Arc<dyn crate::cache::processor::RegistrationStatus>,
            informer_synced: Arc::new(move || fifo.has_synced()),
        }
    }

    fn register(
        &self,
        handler: Option<Arc<dyn ResourceEventHandler<K>>>,
        options: HandlerOptions,
    ) -> Arc<Listener<K>> {
        let mut period = options.resync_period;
        {
            let mut check = self.inner.resync_check_period.lock();
            if !period.is_zero() {
                period = period.max(MINIMUM_RESYNC_PERIOD);
                if period < *check {
                    if self.inner.started.load(Ordering::SeqCst) {
                        tracing::warn!(informer = %self.inner.name,
                            "resync period raised to the informer's check period");
                        period = *check;
                    } else {
                        *check = period;
                    }
                }
            }
            period = determine_resync_period(&self.inner.name, period, *check);
        }
        let listener = Arc::new(Listener::new(
            handler,
            period,
            options.capacity,
            self.inner.clock.now(),
        ));
        // Under the deltas lock: the synthetic adds and the later changes neither overlap
        // nor leave a gap.
        let _guard = self.inner.block_deltas.lock();
        self.inner.processor.add(Arc::clone(&listener));
        for obj in self.inner.indexer.list() {
            listener.queue_push_initial(obj);
        }
        listener
    }

    /// Unregisters a handler (or stream): once this returns it receives nothing more
    /// (queued notifications are discarded). Returns false if it was not registered here.
    pub fn remove_event_handler(&self, registration: &Registration) -> bool {
        self.inner.processor.remove(registration.id)
    }

    /// Starts the reflector, the process loop and the handlers' tasks on the current Tokio
    /// runtime. Idempotent; a no-op after [`SharedIndexInformer::stop`].
    ///
    /// # Panics
    /// Like `tokio::spawn`, when called outside a Tokio runtime.
    pub fn start(&self) {
        if self.inner.stopped.load(Ordering::SeqCst)
            || self.inner.started.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let rt = tokio::runtime::Handle::current();
        *self.inner.runtime.lock() = Some(rt.clone());
        self.inner
            .reflector
            .set_resync_period(*self.inner.resync_check_period.lock());
        for l in self.inner.processor.listeners() {
            l.spawn(&rt);
        }
        let reflector = Arc::clone(&self.inner.reflector);
        let r = rt.spawn(async move { reflector.run().await });
        let p = rt.spawn(Arc::clone(&self.inner).process_loop());
        self.inner.tasks.lock().extend([r, p]);
    }

    /// Starts (if needed) and waits until [`SharedIndexInformer::stop`] is called.
    pub async fn run(&self) {
        let stopped = self.inner.stop_notify.notified();
        let mut stopped = std::pin::pin!(stopped);
        stopped.as_mut().enable();
        self.start();
        if self.inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        stopped.await;
    }

    /// Whether [`SharedIndexInformer::start`] was called.
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    /// Whether [`SharedIndexInformer::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    /// Stops the reflector, the process loop and every handler (pending notifications are
    /// discarded; every `NotificationStream` ends). The cache keeps its last content.
    pub fn stop(&self) {
        if self.inner.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        for t in self.inner.tasks.lock().iter() {
            t.abort();
        }
        self.inner.fifo.close();
        self.inner.processor.stop_all();
        self.inner.stop_notify.notify_waiters();
    }

    /// [`SharedIndexInformer::stop`], then waits for the tasks to finish.
    pub async fn shutdown(&self) {
        self.stop();
        let tasks: Vec<_> = std::mem::take(&mut *self.inner.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl<K: KubeObject> Listener<K> {
    fn queue_push_initial(&self, obj: Arc<K>) {
        self.push(Notification::Add {
            object: obj,
            is_in_initial_list: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::fake_lister_watcher::FakeListerWatcher;
    use crate::cache::processor::ResourceEventHandlerFuncs;
    use crate::clock::FakeClock;
    use crate::object::DynamicObject;
    use serde_json::json;
    use std::time::Instant;

    fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
        let v = json!({"metadata": {"name": name, "namespace": "ns",
            "resourceVersion": rv.to_string()}});
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    fn rv(o: &DynamicObject) -> &str {
        o.resource_version().unwrap_or("")
    }

    /// A handler that logs what it receives as short strings.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock())
        }
        fn len(&self) -> usize {
            self.0.lock().len()
        }
    }

    impl ResourceEventHandler<DynamicObject> for Recorder {
        fn on_add(&self, o: &Arc<DynamicObject>, initial: bool) {
            let tag = if initial { " (initial)" } else { "" };
            self.0
                .lock()
                .push(format!("add {}@{}{tag}", o.name(), rv(o)));
        }
        fn on_update(&self, old: &Arc<DynamicObject>, new: &Arc<DynamicObject>) {
            self.0
                .lock()
                .push(format!("update {}@{}->{}", new.name(), rv(old), rv(new)));
        }
        fn on_delete(&self, d: &DeleteEvent<DynamicObject>) {
            let kind = if d.is_tombstone() {
                "tombstone"
            } else {
                "delete"
            };
            self.0
                .lock()
                .push(format!("{kind} {}@{}", d.object().name(), rv(d.object())));
        }
    }

    async fn until(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out: {what}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Awaits `fut` for at most 10 s of real time, failing the test with `what` after that.
    async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
        match tokio::time::timeout(Duration::from_secs(10), fut).await {
            Ok(v) => v,
            Err(_) => panic!("timed out after 10 s: {what}"),
        }
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    fn informer(
        fake: &Arc<FakeListerWatcher<DynamicObject>>,
        clock: &FakeClock,
    ) -> SharedIndexInformer<DynamicObject> {
        SharedIndexInformer::builder(Arc::clone(fake) as Arc<dyn ListerWatcher<DynamicObject>>)
            .clock(clock.shared())
            .build()
    }

    /// A started informer over `objects` with a [`Recorder`], synced, the recorder emptied.
    async fn synced_with(
        objects: &[Arc<DynamicObject>],
    ) -> (
        FakeClock,
        Arc<FakeListerWatcher<DynamicObject>>,
        SharedIndexInformer<DynamicObject>,
        Recorder,
    ) {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        for o in objects {
            fake.add(Arc::clone(o));
        }
        let inf = informer(&fake, &clock);
        let rec = Recorder::default();
        inf.add_event_handler(rec.clone());
        inf.start();
        until("synced", || rec.len() == objects.len()).await;
        rec.take();
        (clock, fake, inf, rec)
    }

    /// Fails the open watch with 410 and lets the reflector's backoff pass: it relists once.
    async fn relist_after_gone(clock: &FakeClock, fake: &FakeListerWatcher<DynamicObject>) {
        let lists = fake.list_calls().len();
        fake.inject_stream_error(WatchError::Gone);
        until("backing off", || clock.has_sleepers()).await;
        clock.step(Duration::from_secs(2));
        until("relisted", || fake.list_calls().len() == lists + 1).await;
    }

    #[tokio::test]
    async fn initial_list_then_events_and_has_synced() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        fake.add(obj("b", 2));
        let inf = informer(&fake, &clock);
        let rec = Recorder::default();
        let reg = inf.add_event_handler(rec.clone());
        assert!(!inf.has_synced() && !reg.has_synced());
        inf.start();
        until("synced", || reg.has_synced()).await;
        assert!(inf.has_synced());
        assert_eq!(
            sorted(rec.take()),
            vec!["add a@1 (initial)", "add b@2 (initial)"]
        );
        fake.modify(obj("a", 3));
        fake.add(obj("c", 4));
        fake.delete(obj("b", 5));
        until("3 events", || rec.len() == 3).await;
        assert_eq!(rec.take(), vec!["update a@1->3", "add c@4", "delete b@5"]);
        assert_eq!(inf.last_sync_resource_version(), "5");
        let mut keys = inf.indexer().list_keys();
        keys.sort();
        assert_eq!(keys, vec!["ns/a", "ns/c"]);
        within("shutdown", inf.shutdown()).await;
        assert!(reg.is_removed() && !reg.has_synced());
    }

    /// A notification as the [`Recorder`] writes it down.
    fn describe(n: &Notification<DynamicObject>) -> String {
        match n {
            Notification::Add {
                object,
                is_in_initial_list,
            } => {
                let tag = if *is_in_initial_list {
                    " (initial)"
                } else {
                    ""
                };
                format!("add {}@{}{tag}", object.name(), rv(object))
            }
            Notification::Update { old, new } => {
                format!("update {}@{}->{}", new.name(), rv(old), rv(new))
            }
            Notification::Delete(d) => format!("delete {}@{}", d.object().name(), rv(d.object())),
        }
    }

    /// The stream form of a registration yields what `next` would, composes with
    /// `StreamExt`, and ends when the informer shuts down.
    #[tokio::test]
    async fn notifications_compose_as_a_stream() {
        use futures::StreamExt as _;
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        fake.add(obj("b", 2));
        let inf = informer(&fake, &clock);
        let mut stream = inf.notifications().into_stream();
        let reg = stream.get_ref().unwrap().registration().clone();
        inf.start();
        let initial: Vec<String> = within(
            "initial adds",
            stream.by_ref().take(2).map(|n| describe(&n)).collect(),
        )
        .await;
        assert_eq!(
            sorted(initial),
            vec!["add a@1 (initial)", "add b@2 (initial)"]
        );
        until("watching", || fake.open_watches() == 1).await;
        fake.modify(obj("a", 3));
        fake.add(obj("c", 4));
        fake.modify(obj("c", 5));
        fake.delete(obj("b", 6));
        // Everything but the updates of `c`, as text, the first three.
        let got: Vec<String> = within(
            "three notifications",
            stream
                .by_ref()
                .map(|n| describe(&n))
                .filter(|d| std::future::ready(!d.starts_with("update c")))
                .take(3)
                .collect(),
        )
        .await;
        assert_eq!(got, ["update a@1->3", "add c@4", "delete b@6"]);
        // Taking the next notification counted the initial ones as processed.
        assert!(reg.has_synced());
        within("shutdown", inf.shutdown()).await;
        let rest: Vec<String> = within("end", stream.map(|n| describe(&n)).collect()).await;
        assert!(rest.is_empty(), "{rest:?}");
        assert!(reg.is_removed());
    }

    /// An open watch of a lister-watcher, boxed, composes with `StreamExt` too.
    #[tokio::test]
    async fn an_event_source_composes_as_a_stream() {
        use crate::cache::list_watch::{WatchEvent, WatchRequest};
        use futures::StreamExt as _;
        let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        fake.add(obj("a", 1));
        let source = fake
            .watch(WatchRequest {
                resource_version: "1".to_string(),
                allow_bookmarks: true,
                timeout_seconds: None,
                send_initial_events: false,
            })
            .await
            .unwrap();
        fake.modify(obj("a", 2));
        fake.add(obj("b", 3));
        fake.delete(obj("a", 4));
        let mut events = source.into_stream();
        let names: Vec<String> = within(
            "events",
            events
                .by_ref()
                .filter_map(|e| {
                    std::future::ready(match e {
                        Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                            Some(format!("{}@{}", o.name(), rv(&o)))
                        }
                        _ => None,
                    })
                })
                .take(2)
                .collect(),
        )
        .await;
        assert_eq!(names, ["a@2", "b@3"]);
        // A clean close ends the stream.
        fake.close_watches();
        within("the end", async { while events.next().await.is_some() {} }).await;
    }

    #[tokio::test]
    async fn relist_after_gone_delivers_tombstones() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("keep", 1));
        fake.add(obj("doomed", 2));
        let inf = informer(&fake, &clock);
        let rec = Recorder::default();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let e = errors.clone();
        inf.set_watch_error_handler(move |err| e.lock().push(err.clone()));
        inf.add_event_handler(rec.clone());
        inf.start();
        until("synced", || inf.has_synced() && rec.len() == 2).await;
        rec.take();
        // While the watch is down, "doomed" is deleted and the history compacted.
        fake.drop_next_events(1);
        fake.delete(obj("doomed", 3));
        fake.modify(obj("keep", 4));
        until("keep@4", || rec.len() == 1).await;
        fake.compact();
        fake.inject_stream_error(WatchError::Gone);
        until("backing off", || {
            clock.has_sleepers() && !fake.list_calls().is_empty()
        })
        .await;
        until("error seen", || !errors.lock().is_empty()).await;
        clock.step(Duration::from_secs(2)); // past the first backoff (≤ 1.6 s)
        until("relisted", || fake.list_calls().len() == 2).await;
        until("tombstone", || rec.len() == 2).await;
        assert_eq!(rec.take(), vec!["update keep@1->4", "tombstone doomed@2"]);
        assert_eq!(errors.lock()[0], WatchError::Gone);
        assert_eq!(fake.list_calls()[1].resource_version, "4");
        assert_eq!(inf.indexer().list_keys(), vec!["ns/keep"]);
        within("shutdown", inf.shutdown()).await;
    }

    /// The informer shows its reflector's counters: a 410 and the relist after it.
    #[tokio::test]
    async fn reflector_metrics_show_the_410_and_the_relist() {
        let (clock, fake, inf, _rec) = synced_with(&[obj("a", 1), obj("b", 2)]).await;
        let before = inf.reflector_metrics();
        assert_eq!(
            (
                before.lists,
                before.items_listed,
                before.gone,
                before.relists
            ),
            (1, 2, 0, 0)
        );
        relist_after_gone(&clock, &fake).await;
        let after = inf.reflector_metrics();
        assert_eq!((after.lists, after.gone, after.relists), (2, 1, 1));
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn relist_with_unchanged_objects_notifies_only_syncing_handlers() {
        let (clock, fake, inf, rec) = synced_with(&[obj("a", 1)]).await;
        relist_after_gone(&clock, &fake).await;
        until("fifo drained", || inf.inner.fifo.is_empty()).await;
        // The Replaced delta had the same resourceVersion: not a change, not delivered.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(rec.take().is_empty());
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn relist_keeps_the_cached_copy_of_an_unchanged_object() {
        let (clock, fake, inf, rec) = synced_with(&[obj("a", 1), obj("b", 2)]).await;
        let cached_a = inf.indexer().get_by_key("ns/a").unwrap();
        // Fresh copies on the server side: a unchanged, b changed while no watch was open.
        let listed_a = obj("a", 1);
        fake.set_silently(Arc::clone(&listed_a));
        fake.set_silently(obj("b", 3));
        relist_after_gone(&clock, &fake).await;
        until("b replaced", || {
            inf.indexer()
                .get_by_key("ns/b")
                .is_some_and(|b| rv(&b) == "3")
        })
        .await;
        // Only the test and the fake hold the listed copy of a once it has been applied.
        until("listed copy of a dropped", || {
            Arc::strong_count(&listed_a) == 2
        })
        .await;
        let now_a = inf.indexer().get_by_key("ns/a").unwrap();
        assert!(Arc::ptr_eq(&now_a, &cached_a), "the cached copy is kept");
        assert_eq!(rec.take(), vec!["update b@2->3"]);
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn resync_only_to_due_handlers_and_only_idle_keys() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        // Built with a default resync (client-go's defaultEventHandlerResyncPeriod), which
        // handlers asking for less lower before the start.
        let inf = SharedIndexInformer::builder(
            Arc::clone(&fake) as Arc<dyn ListerWatcher<DynamicObject>>
        )
        .clock(clock.shared())
        .resync_period(Duration::from_secs(60))
        .build();
        let fast = Recorder::default();
        let slow = Recorder::default();
        let none = Recorder::default();
        inf.add_event_handler_with_resync_period(fast.clone(), Duration::from_secs(10));
        inf.add_event_handler_with_resync_period(slow.clone(), Duration::from_secs(30));
        inf.add_event_handler_with_resync_period(none.clone(), Duration::ZERO);
        assert_eq!(inf.resync_check_period(), Duration::from_secs(10));
        inf.start();
        until("synced", || fast.len() + slow.len() + none.len() == 3).await;
        for r in [&fast, &slow, &none] {
            r.take();
        }
        for step in 1..=3 {
            clock.step(Duration::from_secs(10));
            until("fast resync", || fast.len() == 1).await;
            assert_eq!(fast.take(), vec!["update a@1->1"], "step {step}");
        }
        until("slow resync", || slow.len() == 1).await;
        assert_eq!(slow.take(), vec!["update a@1->1"]);
        assert!(none.take().is_empty());
        // A key with pending deltas is not resynced: its newer state comes anyway.
        inf.inner
            .reflector
            .set_resync_period(Duration::from_secs(10));
        inf.inner.fifo.update(obj("a", 9));
        inf.inner.fifo.resync();
        until("update", || fast.len() == 1).await;
        assert_eq!(fast.take(), vec!["update a@1->9"]);
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn an_informer_built_without_resync_never_resyncs_its_handlers() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        let inf = informer(&fake, &clock);
        let asks = Recorder::default();
        inf.add_event_handler_with_resync_period(asks.clone(), Duration::from_secs(10));
        assert_eq!(inf.resync_check_period(), Duration::ZERO);
        inf.start();
        until("synced", || asks.len() == 1).await;
        asks.take();
        for _ in 0..6 {
            clock.step(Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(asks.take().is_empty(), "a handler turned resync on");
        assert_eq!(inf.inner.reflector.resync_period(), Duration::ZERO);
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn no_resync_while_the_reflector_backs_off_or_relists() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        let inf = SharedIndexInformer::builder(
            Arc::clone(&fake) as Arc<dyn ListerWatcher<DynamicObject>>
        )
        .clock(clock.shared())
        .resync_period(Duration::from_secs(10))
        .build();
        let rec = Recorder::default();
        inf.add_event_handler(rec.clone());
        inf.start();
        until("synced", || rec.len() == 1).await;
        rec.take();
        // The watch fails with a server error: the cycle ends, the reflector backs off (at
        // least 800 ms) and its relists fail too, for far longer than the resync period.
        fake.fail_next_lists(vec![WatchError::Other("500".into()); 4]);
        fake.inject_stream_error(WatchError::Other("500".into()));
        for _ in 0..3 {
            clock.step(Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fake.list_calls().len() >= 3, "{:?}", fake.list_calls());
        assert!(
            fake.watch_calls().len() == 1,
            "the cycle never got to watch again"
        );
        assert!(
            rec.take().is_empty(),
            "resynced outside a list-and-watch cycle"
        );
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn late_handler_gets_exactly_the_cached_objects() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        for i in 1..=50 {
            fake.add(obj(&format!("o{i}"), i));
        }
        let inf = informer(&fake, &clock);
        inf.start();
        until("synced", || inf.has_synced()).await;
        // Changes keep flowing while the late handler registers.
        let writer = {
            let fake = fake.clone();
            tokio::spawn(async move {
                for i in 51..=100u64 {
                    if i % 2 == 0 {
                        fake.delete(obj(&format!("o{}", i - 50), i));
                    } else {
                        fake.add(obj(&format!("n{i}"), i));
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        tokio::task::yield_now().await;
        let rec = Recorder::default();
        let reg = inf.add_event_handler(rec.clone());
        within("writer", writer).await.unwrap();
        until("caught up", || inf.last_sync_resource_version() == "100").await;
        until("fifo drained", || inf.inner.fifo.is_empty()).await;
        until("handler drained", || reg.queue_depth() == 0).await;
        assert!(reg.has_synced());
        // Replaying the notifications yields exactly the cache: no gap, no duplicate.
        let mut state = std::collections::BTreeSet::new();
        for line in rec.take() {
            let name = line
                .split(' ')
                .nth(1)
                .unwrap()
                .split('@')
                .next()
                .unwrap()
                .to_string();
            if line.starts_with("add") {
                assert!(state.insert(name), "duplicate add: {line}");
            } else if line.starts_with("delete") {
                assert!(state.remove(&name), "delete of unknown: {line}");
            }
        }
        let cached: std::collections::BTreeSet<String> = inf
            .indexer()
            .list()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        assert_eq!(state, cached);
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn slow_handler_does_not_delay_others() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        let inf = informer(&fake, &clock);
        let slow_count = Arc::new(Mutex::new(0usize));
        let sc = slow_count.clone();
        inf.add_event_handler(ResourceEventHandlerFuncs::new().on_add(move |_, _| {
            std::thread::sleep(Duration::from_millis(50));
            *sc.lock() += 1;
        }));
        let fast = Recorder::default();
        inf.add_event_handler(fast.clone());
        inf.start();
        until("synced", || inf.has_synced()).await;
        let start = Instant::now();
        for i in 1..=20 {
            fake.add(obj(&format!("o{i}"), i));
        }
        until("fast got all", || fast.len() == 20).await;
        let fast_time = start.elapsed();
        let slow_done = *slow_count.lock();
        // The slow handler needs ≥ 1 s for 20 events; the fast one is not held back.
        assert!(
            fast_time < Duration::from_millis(500),
            "fast took {fast_time:?}"
        );
        assert!(slow_done < 20, "slow handler already done ({slow_done})");
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn removed_handler_gets_nothing_more() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        let inf = informer(&fake, &clock);
        let stays = Recorder::default();
        let goes = Recorder::default();
        inf.add_event_handler(stays.clone());
        let reg = inf.add_event_handler(goes.clone());
        inf.start();
        fake.add(obj("a", 1));
        until("both", || stays.len() == 1 && goes.len() == 1).await;
        assert!(inf.remove_event_handler(&reg));
        assert!(!inf.remove_event_handler(&reg));
        fake.add(obj("b", 2));
        until("stays", || stays.len() == 2).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(goes.len(), 1);
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registration_has_synced_waits_for_its_handler() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        let inf = informer(&fake, &clock);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        // Opens the gate however the test ends: a handler still blocked when the test
        // fails would occupy a runtime worker, and dropping a multi-thread runtime waits
        // for its workers forever (the test would hang instead of failing).
        struct OpenOnDrop(Arc<tokio::sync::Semaphore>);
        impl Drop for OpenOnDrop {
            fn drop(&mut self) {
                self.0.add_permits(1_000);
            }
        }
        let _open_on_drop = OpenOnDrop(gate.clone());
        let g = gate.clone();
        let reg = inf.add_event_handler(ResourceEventHandlerFuncs::new().on_add(move |_, _| {
            // Blocks until the test releases a permit, and never longer than 20 s.
            let deadline = Instant::now() + Duration::from_secs(20);
            while g.try_acquire().is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
        let mut stream = inf.notifications();
        inf.start();
        until("informer synced", || inf.has_synced()).await;
        assert!(
            !reg.has_synced(),
            "handler has not processed the initial add"
        );
        assert!(!stream.registration().has_synced());
        gate.add_permits(1);
        until("registration synced", || reg.has_synced()).await;
        // The stream counts an item as processed when the next one is asked for.
        match within("next notification", stream.next()).await.unwrap() {
            Notification::Add {
                object,
                is_in_initial_list,
            } => assert!(object.name() == "a" && is_in_initial_list),
            other => panic!("unexpected {other:?}"),
        }
        assert!(!stream.registration().has_synced());
        fake.modify(obj("a", 2));
        assert!(matches!(
            within("next notification", stream.next()).await,
            Some(Notification::Update { .. })
        ));
        assert!(stream.registration().has_synced());
        within("shutdown", inf.shutdown()).await;
        assert!(within("next notification", stream.next()).await.is_none());
    }

    #[tokio::test]
    async fn transform_is_applied_before_storing_and_indexers_before_start() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        fake.add(obj("a", 1));
        let inf = SharedIndexInformer::builder(fake.clone() as Arc<dyn ListerWatcher<_>>)
            .clock(clock.shared())
            .transform(|o: Arc<DynamicObject>| {
                let v = json!({"metadata": {"name": o.name(), "namespace": o.namespace(),
                    "resourceVersion": o.resource_version(), "labels": {"slim": "true"}}});
                Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
            })
            .build();
        let mut extra = Indexers::new();
        extra.insert("slim".into(), crate::cache::index::label_index_func("slim"));
        inf.add_indexers(extra).unwrap();
        inf.start();
        until("synced", || inf.has_synced()).await;
        assert_eq!(inf.lister().by_index("slim", "true").unwrap().len(), 1);
        let mut more = Indexers::new();
        more.insert("x".into(), crate::cache::index::label_index_func("x"));
        assert_eq!(inf.add_indexers(more), Err(InformerError::AlreadyStarted));
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn reflector_options_name_the_informer_and_reach_its_reflector() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        for i in 1..=3 {
            fake.add(obj(&format!("p{i}"), i));
        }
        let options = ReflectorOptions::default()
            .name("pods")
            .clock(clock.shared())
            .page_size(2)
            .resync_period(Duration::from_secs(30));
        let inf = SharedIndexInformer::builder(fake.clone() as Arc<dyn ListerWatcher<_>>)
            .page_size(100) // replaced whole by the options below
            .reflector_options(options)
            .build();
        assert_eq!(inf.name(), "pods");
        assert_eq!(inf.resync_check_period(), Duration::from_secs(30));
        inf.start();
        until("synced", || inf.has_synced()).await;
        assert_eq!(inf.indexer().len(), 3);
        assert_eq!(fake.list_calls()[0].limit, Some(2));
        within("shutdown", inf.shutdown()).await;
    }

    #[tokio::test]
    async fn bounded_queue_applies_back_pressure_without_loss() {
        let clock = FakeClock::new();
        let fake = Arc::new(FakeListerWatcher::new());
        let inf = informer(&fake, &clock);
        let mut stream = inf.notifications_with_options(HandlerOptions::default().capacity(2));
        inf.start();
        until("synced", || inf.has_synced()).await;
        for i in 1..=10 {
            fake.add(obj(&format!("o{i}"), i));
        }
        until("caught up", || inf.last_sync_resource_version() == "10").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(stream.registration().queue_depth() <= 3, "bounded");
        assert!(!inf.inner.fifo.is_empty(), "process loop waits");
        let mut got = 0;
        while got < 10 {
            assert!(matches!(
                within("next notification", stream.next()).await,
                Some(Notification::Add { .. })
            ));
            got += 1;
        }
        assert_eq!(stream.registration().delivered(), 10);
        within("shutdown", inf.shutdown()).await;
    }
}
