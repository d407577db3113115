//! The shared processor: fans an informer's notifications out to its registered handlers,
//! each through a queue of its own.
//!
//! Every registration (a [`ResourceEventHandler`] or a [`NotificationStream`]) owns a
//! listener queue. The informer's process loop only appends to these queues, so a slow
//! handler delays nobody but itself (unless its queue is bounded, see
//! [`HandlerOptions::capacity`]). Each handler runs on a Tokio task of its own and sees, for
//! any one object key, the notifications in the order the informer applied them to its
//! cache. Objects are shared, read-only `Arc`s.

use crate::cache::delta_fifo::DeltaObject;
use crate::object::KubeObject;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a delete notification carries: the same type as the object of a
/// [`Delta`](crate::cache::Delta), [`DeltaObject`], so that a `Deleted` delta reaches the
/// handlers as it left the DeltaFIFO — the object's final state as the watch reported it
/// ([`DeltaObject::Object`]), or, for a deletion a relist noticed, a
/// [`DeltaObject::DeletedFinalStateUnknown`] tombstone with the newest state the cache had
/// (client-go's `DeletedFinalStateUnknown`). [`DeltaObject::object`] gives either;
/// [`DeltaObject::is_tombstone`] tells them apart.
pub type DeleteEvent<K> = DeltaObject<K>;

/// One notification to one handler.
pub enum Notification<K> {
    /// The object appeared in the cache. `is_in_initial_list` is true for objects of the
    /// informer's initial list and for the synthetic adds a late handler receives.
    Add {
        /// The object.
        object: Arc<K>,
        /// Part of the initial state rather than a later creation.
        is_in_initial_list: bool,
    },
    /// The object changed (or, with equal resourceVersions, was re-delivered by a resync
    /// or relist; then `old` and `new` may be the cached object itself, the same `Arc`).
    Update {
        /// The state the cache held before.
        old: Arc<K>,
        /// The new state.
        new: Arc<K>,
    },
    /// The object left the cache.
    Delete(DeleteEvent<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                object,
                is_in_initial_list,
            } => Notification::Add {
                object: Arc::clone(object),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Notification::Delete(d) => Notification::Delete(d.clone()),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Notification<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notification::Add {
                object,
                is_in_initial_list,
            } => f
                .debug_struct("Add")
                .field("object", object)
                .field("is_in_initial_list", is_in_initial_list)
                .finish(),
            Notification::Update { old, new } => f
                .debug_struct("Update")
                .field("old", old)
                .field("new", new)
                .finish(),
            Notification::Delete(d) => f.debug_tuple("Delete").field(d).finish(),
        }
    }
}

/// Receives an informer's notifications.
///
/// Contract: calls for one registration never overlap and arrive, per object key, in the
/// order of the changes; objects are shared and must be treated as read-only. Handlers run
/// on a Tokio task: they should be quick (typically: put the object's key on a work queue)
/// and must not block for long, or they occupy a runtime thread.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// An object was added to the cache.
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool);
    /// An object in the cache changed (or was re-delivered by a resync or an unchanged
    /// relist: then the two resourceVersions are equal, and `old` and `new` may be the same
    /// `Arc`).
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>);
    /// An object left the cache.
    fn on_delete(&self, obj: &DeleteEvent<K>);
}

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&DeleteEvent<K>) + Send + Sync>;

/// A [`ResourceEventHandler`] made of optional closures; missing ones ignore the event.
#[must_use]
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        ResourceEventHandlerFuncs {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// A handler that ignores everything until closures are set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the closure for `on_add`.
    pub fn on_add(mut self, f: impl Fn(&Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }
    /// Sets the closure for `on_update`.
    pub fn on_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }
    /// Sets the closure for `on_delete`.
    pub fn on_delete(mut self, f: impl Fn(&DeleteEvent<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list);
        }
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new);
        }
    }
    fn on_delete(&self, obj: &DeleteEvent<K>) {
        if let Some(f) = &self.delete {
            f(obj);
        }
    }
}

/// Per-registration options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct HandlerOptions {
    /// How often this handler wants to receive the whole cache again as `on_update(o, o)`
    /// (zero = never). Values below one second are raised to one second; once the informer
    /// runs, values below its resync check period are raised to that period.
    pub resync_period: Duration,
    /// Bounds the handler's queue: while it holds more than this many notifications, the
    /// informer's process loop stops popping new changes (back-pressure on the whole
    /// informer, never loss). `None` (the default) = unbounded.
    pub capacity: Option<usize>,
}

impl HandlerOptions {
    /// Sets [`HandlerOptions::resync_period`].
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync_period = period;
        self
    }
    /// Sets [`HandlerOptions::capacity`].
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }
}

struct QueueState<K> {
    items: VecDeque<Notification<K>>,
    closed: bool,
}

/// One registration's queue.
pub(crate) struct ListenerQueue<K> {
    state: Mutex<QueueState<K>>,
    readable: Notify,
    space: Notify,
    capacity: Option<usize>,
    /// Initial-list adds queued but not yet processed.
    pending_initial: AtomicUsize,
    delivered: AtomicU64,
    /// Mirrors `closed`, readable without the lock (checked between the items of a batch).
    is_closed: AtomicBool,
}

impl<K> ListenerQueue<K> {
    fn new(capacity: Option<usize>) -> Self {
        ListenerQueue {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                closed: false,
            }),
            readable: Notify::new(),
            space: Notify::new(),
            capacity,
            pending_initial: AtomicUsize::new(0),
            delivered: AtomicU64::new(0),
            is_closed: AtomicBool::new(false),
        }
    }

    fn push(&self, n: Notification<K>) {
        self.push_all(std::iter::once(n));
    }

    /// Appends notifications under one lock acquisition, waking the consumer once.
    fn push_all(&self, ns: impl IntoIterator<Item = Notification<K>>) {
        let mut st = self.state.lock();
        if st.closed {
            return;
        }
        let was_empty = st.items.is_empty();
        let mut initial = 0;
        for n in ns {
            if matches!(
                n,
                Notification::Add {
                    is_in_initial_list: true,
                    ..
                }
            ) {
                initial += 1;
            }
            st.items.push_back(n);
        }
        if initial > 0 {
            self.pending_initial.fetch_add(initial, Ordering::SeqCst);
        }
        let wake = was_empty && !st.items.is_empty();
        drop(st);
        // The single consumer only waits after finding the queue empty, and `notify_one`
        // keeps a permit when nobody waits yet, so waking on the empty → non-empty
        // transition is enough.
        if wake {
            self.readable.notify_one();
        }
    }

    /// The next notification; `None` once closed.
    async fn pop(&self) -> Option<Notification<K>> {
        loop {
            {
                let mut st = self.state.lock();
                if st.closed {
                    return None;
                }
                if let Some(n) = st.items.pop_front() {
                    drop(st);
                    self.delivered.fetch_add(1, Ordering::Relaxed);
                    self.notify_space();
                    return Some(n);
                }
            }
            self.readable.notified().await;
        }
    }

    /// Takes every queued notification at once (moving them into `into`, which must be
    /// empty); returns false once closed.
    async fn pop_all(&self, into: &mut VecDeque<Notification<K>>) -> bool {
        loop {
            {
                let mut st = self.state.lock();
                if st.closed {
                    return false;
                }
                if !st.items.is_empty() {
                    std::mem::swap(&mut st.items, into);
                    drop(st);
                    self.delivered
                        .fetch_add(into.len() as u64, Ordering::Relaxed);
                    self.notify_space();
                    return true;
                }
            }
            self.readable.notified().await;
        }
    }

    /// Wakes a process loop waiting for space (bounded queues only).
    fn notify_space(&self) {
        if self.capacity.is_some() {
            self.space.notify_waiters();
        }
    }

    fn finished(&self, n: &Notification<K>) {
        if matches!(
            n,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        ) {
            self.pending_initial.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        self.is_closed.store(true, Ordering::SeqCst);
        st.items.clear();
        drop(st);
        self.readable.notify_one();
        self.space.notify_waiters();
    }

    fn depth(&self) -> usize {
        self.state.lock().items.len()
    }

    async fn wait_for_space(&self) {
        let Some(cap) = self.capacity else { return };
        loop {
            let mut notified = pin!(self.space.notified());
            notified.as_mut().enable();
            {
                let st = self.state.lock();
                if st.closed || st.items.len() <= cap {
                    return;
                }
            }
            notified.await;
        }
    }
}

/// A registration's state as seen by [`Registration`].
pub(crate) trait RegistrationStatus: Send + Sync {
    fn initial_processed(&self) -> bool;
    fn depth(&self) -> usize;
    fn delivered(&self) -> u64;
    fn removed(&self) -> bool;
}

pub(crate) struct Listener<K> {
    pub(crate) id: u64,
    pub(crate) queue: Arc<ListenerQueue<K>>,
    resync_period: Duration,
    next_resync: Mutex<Instant>,
    syncing: AtomicBool,
    removed: AtomicBool,
    /// The handler, until its task is spawned (`None` for streams).
    pub(crate) handler: Mutex<Option<Arc<dyn ResourceEventHandler<K>>>>,
    pub(crate) task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl<K: KubeObject> RegistrationStatus for Listener<K> {
    fn initial_processed(&self) -> bool {
        self.queue.pending_initial.load(Ordering::SeqCst) == 0
    }
    fn depth(&self) -> usize {
        self.queue.depth()
    }
    fn delivered(&self) -> u64 {
        self.queue.delivered.load(Ordering::Relaxed)
    }
    fn removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl<K: KubeObject> Listener<K> {
    pub(crate) fn new(
        handler: Option<Arc<dyn ResourceEventHandler<K>>>,
        resync_period: Duration,
        capacity: Option<usize>,
        now: Instant,
    ) -> Listener<K> {
        Listener {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            queue: Arc::new(ListenerQueue::new(capacity)),
            resync_period,
            next_resync: Mutex::new(now + resync_period),
            syncing: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            handler: Mutex::new(handler),
            task: Mutex::new(None),
        }
    }

    /// Spawns the task running the handler, if this listener has one not yet running.
    pub(crate) fn spawn(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let Some(handler) = self.handler.lock().take() else {
            return;
        };
        let queue = Arc::clone(&self.queue);
        let task = runtime.spawn(async move {
            // Everything queued is taken per wake-up and handled in order.
            let mut batch = VecDeque::new();
            while queue.pop_all(&mut batch).await {
                while let Some(n) = batch.pop_front() {
                    // Removed meanwhile: what is left of the batch is discarded, as the
                    // queue's content is.
                    if queue.is_closed.load(Ordering::SeqCst) {
                        return;
                    }
                    match &n {
                        Notification::Add {
                            object,
                            is_in_initial_list,
                        } => handler.on_add(object, *is_in_initial_list),
                        Notification::Update { old, new } => handler.on_update(old, new),
                        Notification::Delete(d) => handler.on_delete(d),
                    }
                    queue.finished(&n);
                }
            }
        });
        *self.task.lock() = Some(task);
    }

    pub(crate) fn push(&self, n: Notification<K>) {
        self.queue.push(n);
    }

    fn stop(&self) {
        self.removed.store(true, Ordering::SeqCst);
        self.queue.close();
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// Distributes notifications to every listener (see the [module docs](self)).
pub(crate) struct SharedProcessor<K> {
    listeners: RwLock<Vec<Arc<Listener<K>>>>,
}

impl<K: KubeObject> SharedProcessor<K> {
    pub(crate) fn new() -> Self {
        SharedProcessor {
            listeners: RwLock::new(Vec::new()),
        }
    }

    pub(crate) fn add(&self, listener: Arc<Listener<K>>) {
        self.listeners.write().push(listener);
    }

    pub(crate) fn remove(&self, id: u64) -> bool {
        let removed = {
            let mut ls = self.listeners.write();
            let before = ls.len();
            let mut gone = None;
            ls.retain(|l| {
                if l.id == id {
                    gone = Some(Arc::clone(l));
                    false
                } else {
                    true
                }
            });
            debug_assert!(ls.len() + usize::from(gone.is_some()) == before);
            gone
        };
        match removed {
            Some(l) => {
                l.stop();
                true
            }
            None => false,
        }
    }

    pub(crate) fn listeners(&self) -> Vec<Arc<Listener<K>>> {
        self.listeners.read().clone()
    }

    /// Sends `n` to every listener; a sync notification only to those due for a resync.
    #[cfg(test)]
    pub(crate) fn distribute(&self, n: &Notification<K>, is_sync: bool) {
        for l in self.listeners.read().iter() {
            if is_sync && !l.syncing.load(Ordering::SeqCst) {
                continue;
            }
            l.queue.push(n.clone());
        }
    }

    /// Sends every notification of `ns` (in order) to every listener, skipping the ones
    /// flagged as resyncs for listeners not due; one queue lock per listener.
    pub(crate) fn distribute_all(&self, ns: Vec<(Notification<K>, bool)>) {
        if ns.is_empty() {
            return;
        }
        let listeners = self.listeners.read();
        let n = listeners.len();
        let mut ns = Some(ns);
        for (i, l) in listeners.iter().enumerate() {
            let syncing = l.syncing.load(Ordering::SeqCst);
            if i + 1 == n {
                // The last listener takes the notifications themselves.
                if let Some(ns) = ns.take() {
                    l.queue.push_all(
                        ns.into_iter()
                            .filter(|(_, is_sync)| syncing || !is_sync)
                            .map(|(n, _)| n),
                    );
                }
            } else if let Some(ns) = &ns {
                l.queue.push_all(
                    ns.iter()
                        .filter(|(_, is_sync)| syncing || !is_sync)
                        .map(|(n, _)| n.clone()),
                );
            }
        }
    }

    /// Marks the listeners whose resync period has elapsed as syncing (and schedules their
    /// next resync); returns whether any is.
    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let mut any = false;
        for l in self.listeners.read().iter() {
            let due = if l.resync_period.is_zero() {
                false
            } else {
                let mut next = l.next_resync.lock();
                if now >= *next {
                    *next = now + l.resync_period;
                    true
                } else {
                    false
                }
            };
            l.syncing.store(due, Ordering::SeqCst);
            any |= due;
        }
        any
    }

    /// How many keys the process loop may pop now: `max`, or less so that no bounded
    /// listener goes more than one key's notifications beyond its capacity (the bound
    /// of a one-key-at-a-time loop).
    pub(crate) fn batch_limit(&self, max: usize) -> usize {
        let mut limit = max;
        for l in self.listeners.read().iter() {
            if let Some(cap) = l.queue.capacity {
                let room = (cap + 1).saturating_sub(l.queue.depth());
                limit = limit.min(room);
            }
        }
        limit.max(1)
    }

    /// Waits until no bounded listener is over its capacity.
    pub(crate) async fn wait_for_space(&self) {
        for l in self.listeners() {
            l.queue.wait_for_space().await;
        }
    }

    pub(crate) fn stop_all(&self) {
        let all: Vec<_> = std::mem::take(&mut *self.listeners.write());
        for l in all {
            l.stop();
        }
    }
}

/// The handle of one registration, returned by
/// [`SharedIndexInformer::add_event_handler`](crate::cache::shared_informer::SharedIndexInformer::add_event_handler).
/// Pass it to `remove_event_handler` to unregister.
#[derive(Clone)]
pub struct Registration {
    pub(crate) id: u64,
    pub(crate) status: Arc<dyn RegistrationStatus>,
    pub(crate) informer_synced: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl Registration {
    /// True once the informer has synced (its initial list reached the cache) **and** this
    /// handler has processed every initial-list add it was given (for a handler added late:
    /// the synthetic adds for the cache's content). False after removal.
    pub fn has_synced(&self) -> bool {
        !self.status.removed() && (self.informer_synced)() && self.status.initial_processed()
    }

    /// The number of notifications queued for this handler and not yet taken (a gauge).
    pub fn queue_depth(&self) -> usize {
        self.status.depth()
    }

    /// How many notifications this handler has taken from its queue so far (a counter).
    pub fn delivered(&self) -> u64 {
        self.status.delivered()
    }

    /// Whether the registration was removed (or its informer shut down).
    pub fn is_removed(&self) -> bool {
        self.status.removed()
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .field("queue_depth", &self.queue_depth())
            .finish()
    }
}

/// The stream style of registration: the same notifications a handler would get, taken with
/// [`NotificationStream::next`]. Dropping the stream unregisters it.
pub struct NotificationStream<K: KubeObject> {
    pub(crate) listener: Arc<Listener<K>>,
    pub(crate) processor: std::sync::Weak<SharedProcessor<K>>,
    pub(crate) registration: Registration,
    pub(crate) last: Option<Notification<K>>,
}

impl<K: KubeObject> NotificationStream<K> {
    /// The next notification, in the informer's order; `None` once the informer shut down
    /// or the stream was unregistered. Taking the next notification counts the previous one
    /// as processed (for [`Registration::has_synced`]).
    pub async fn next(&mut self) -> Option<Notification<K>> {
        if let Some(prev) = self.last.take() {
            self.listener.queue.finished(&prev);
        }
        let n = self.listener.queue.pop().await?;
        self.last = Some(n.clone());
        Some(n)
    }

    /// This stream's registration (for `has_synced` and the queue depth).
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// This registration as a [`futures_core::Stream`] of its notifications, to compose with
    /// `futures::StreamExt`: the same notifications as [`next`](Self::next), in the same
    /// order, with the same accounting (taking a notification counts the one before as
    /// processed), ending when the informer shuts down. Dropping the stream unregisters.
    /// See [`NextStream`](crate::stream::NextStream).
    pub fn into_stream(self) -> Notifications<K> {
        crate::stream::NextStream::new(self, |mut stream| {
            Box::pin(async move {
                let notification = stream.next().await;
                (stream, notification)
            })
        })
    }
}

/// A [`NotificationStream`] as a [`futures_core::Stream`], from
/// [`NotificationStream::into_stream`].
pub type Notifications<K> = crate::stream::NextStream<NotificationStream<K>, Notification<K>>;

impl<K: KubeObject> Drop for NotificationStream<K> {
    fn drop(&mut self) {
        if let Some(p) = self.processor.upgrade() {
            p.remove(self.listener.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;

    fn obj(name: &str) -> Arc<DynamicObject> {
        Arc::new(
            DynamicObject::from_slice(format!(r#"{{"metadata":{{"name":"{name}"}}}}"#).as_bytes())
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn queue_counts_initial_adds_and_bounds() {
        let q: ListenerQueue<DynamicObject> = ListenerQueue::new(Some(1));
        q.push(Notification::Add {
            object: obj("a"),
            is_in_initial_list: true,
        });
        q.push(Notification::Add {
            object: obj("b"),
            is_in_initial_list: false,
        });
        assert_eq!(q.depth(), 2);
        assert_eq!(q.pending_initial.load(Ordering::SeqCst), 1);
        let n = q.pop().await.unwrap();
        q.finished(&n);
        assert_eq!(q.pending_initial.load(Ordering::SeqCst), 0);
        // At capacity (1) again: no waiting.
        tokio::time::timeout(Duration::from_secs(1), q.wait_for_space())
            .await
            .unwrap();
        q.close();
        assert!(q.pop().await.is_none());
    }

    #[test]
    fn resync_marks_only_due_listeners() {
        let p: SharedProcessor<DynamicObject> = SharedProcessor::new();
        let t0 = Instant::now();
        let fast = Arc::new(Listener::new(None, Duration::from_secs(10), None, t0));
        let slow = Arc::new(Listener::new(None, Duration::from_secs(30), None, t0));
        let never = Arc::new(Listener::new(None, Duration::ZERO, None, t0));
        p.add(fast.clone());
        p.add(slow.clone());
        p.add(never.clone());
        assert!(!p.should_resync(t0 + Duration::from_secs(5)));
        assert!(p.should_resync(t0 + Duration::from_secs(10)));
        let n = Notification::Update {
            old: obj("a"),
            new: obj("a"),
        };
        p.distribute(&n, true);
        assert_eq!(
            (fast.queue.depth(), slow.queue.depth(), never.queue.depth()),
            (1, 0, 0)
        );
        p.distribute(&n, false);
        assert_eq!(
            (fast.queue.depth(), slow.queue.depth(), never.queue.depth()),
            (2, 1, 1)
        );
        assert!(p.should_resync(t0 + Duration::from_secs(30)));
        assert!(fast.syncing.load(Ordering::SeqCst) && slow.syncing.load(Ordering::SeqCst));
        assert!(p.remove(fast.id));
        assert!(!p.remove(fast.id));
        assert_eq!(fast.queue.depth(), 0);
    }
}
