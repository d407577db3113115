//! The basic work queue: FIFO, de-duplicating, and never handing one item to two workers at
//! once.
//!
//! An item is in at most one of three states: *waiting* (in the FIFO and in the dirty set),
//! *processing* (handed out by [`Queue::get`] and not yet [`Queue::done`]), or *processing and
//! dirty* (re-added while a worker had it). The last state is what makes the queue "stingy":
//! the item is not handed out again until the worker calls `done`, and then it is queued once
//! no matter how many times it was re-added meanwhile.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::metrics::{NoopMetrics, QueueMetrics};
use crate::clock::{RealClock, SharedClock};

/// What a work queue can hold: usually a cheap key such as `"namespace/name"`.
///
/// Two items are "the same item" when they compare equal; the queue clones an item only to
/// keep it in its internal sets. Implemented for every type with the listed bounds.
pub trait QueueItem: Hash + Eq + Clone + Send + 'static {}

impl<T: Hash + Eq + Clone + Send + 'static> QueueItem for T {}

/// Construction options shared by [`Queue`], [`DelayingQueue`](super::DelayingQueue) and
/// [`RateLimitingQueue`](super::RateLimitingQueue).
///
/// Defaults: the real clock and no metrics.
#[derive(Clone)]
#[must_use]
pub struct QueueConfig {
    pub(crate) clock: SharedClock,
    pub(crate) metrics: Arc<dyn QueueMetrics>,
}

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("clock", &self.clock)
            .field("metrics", &self.metrics)
            .finish()
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            clock: RealClock::shared(),
            metrics: Arc::new(NoopMetrics),
        }
    }
}

impl QueueConfig {
    /// The default configuration (real clock, no metrics).
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `clock` for every timestamp and timer of the queue.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Reports the queue's events to `metrics`.
    pub fn metrics(mut self, metrics: Arc<dyn QueueMetrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

struct State<T> {
    /// Waiting items in hand-out order; each is also in `dirty` and not in `processing`.
    fifo: VecDeque<T>,
    /// Items that need processing, with the time they were accepted.
    dirty: HashMap<T, Instant>,
    /// Items handed out and not yet done, with the time they were handed out.
    processing: HashMap<T, Instant>,
    shutting_down: bool,
    /// Set by `shut_down_with_drain` while it waits for `processing` to empty.
    drain: bool,
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Signalled once per item pushed onto the FIFO, and broadcast on shutdown.
    item_ready: Notify,
    /// Broadcast when `processing` becomes empty or draining is cancelled.
    idle: Notify,
    /// Broadcast on shutdown.
    closed: Notify,
    clock: SharedClock,
    metrics: Arc<dyn QueueMetrics>,
}

/// A FIFO work queue with de-duplication, for any number of producers and workers.
///
/// Contract (client-go's `workqueue.Interface`):
/// - **Fair**: items are handed out in the order they were first added.
/// - **Stingy**: adding an item that is already waiting does nothing; an item is never
///   handed to two workers at once. If it is added while a worker is processing it, it is
///   handed out again only after that worker calls [`done`](Self::done), and only once
///   however many times it was added meanwhile.
/// - **Shutdown**: after [`shut_down`](Self::shut_down), adds are ignored, `get` keeps
///   handing out the items still waiting and then returns `None` to every caller.
///
/// Every item returned by [`get`](Self::get) must be passed to [`done`](Self::done) when
/// the worker has finished with it, success or failure; otherwise it is never handed out
/// again.
///
/// `Queue` is a cheap handle: clones share the same queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use client::workqueue::Queue;
///
/// let queue: Queue<String> = Queue::new();
/// queue.add("default/web".to_string());
/// queue.add("default/web".to_string()); // already waiting: de-duplicated
/// assert_eq!(queue.len(), 1);
///
/// let key = queue.get().await.expect("not shut down");
/// queue.add(key.clone()); // changed while a worker has it: held back...
/// assert_eq!(queue.len(), 0);
/// queue.done(&key); // ...and queued again once the worker is done
/// assert_eq!(queue.len(), 1);
/// # }
/// ```
pub struct Queue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("Queue")
            .field("waiting", &state.fifo.len())
            .field("dirty", &state.dirty.len())
            .field("processing", &state.processing.len())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

impl<T: QueueItem> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> Queue<T> {
    /// An empty queue with the real clock and no metrics.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// An empty queue using `config`'s clock and metrics.
    pub fn with_config(config: QueueConfig) -> Self {
        Queue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    fifo: VecDeque::new(),
                    dirty: HashMap::new(),
                    processing: HashMap::new(),
                    shutting_down: false,
                    drain: false,
                }),
                item_ready: Notify::new(),
                idle: Notify::new(),
                closed: Notify::new(),
                clock: config.clock,
                metrics: config.metrics,
            }),
        }
    }

    /// Marks `item` as needing processing.
    ///
    /// Does nothing if the queue is shutting down or the item is already waiting. If the
    /// item is being processed, it is remembered and queued when its worker calls
    /// [`done`](Self::done). Otherwise it joins the back of the queue and one waiting
    /// [`get`](Self::get) is woken.
    pub fn add(&self, item: T) {
        let inner = &*self.inner;
        {
            let mut state = inner.state.lock();
            if state.shutting_down || state.dirty.contains_key(&item) {
                return;
            }
            let now = inner.clock.now();
            state.dirty.insert(item.clone(), now);
            inner.metrics.added(state.dirty.len());
            if state.processing.contains_key(&item) {
                return;
            }
            state.fifo.push_back(item);
        }
        inner.item_ready.notify_one();
    }

    /// Waits for the next item and hands it to the caller, who now owns it until it calls
    /// [`done`](Self::done).
    ///
    /// Returns `None` once the queue is shutting down and no item is waiting. Cancel-safe:
    /// dropping the future before it completes loses no item.
    pub async fn get(&self) -> Option<T> {
        let inner = &*self.inner;
        loop {
            let notified = inner.item_ready.notified();
            tokio::pin!(notified);
            // Register before looking, so an add between the look and the await still wakes us.
            notified.as_mut().enable();
            {
                let mut state = inner.state.lock();
                if let Some(item) = state.fifo.pop_front() {
                    let now = inner.clock.now();
                    let queued_at = state.dirty.remove(&item).unwrap_or(now);
                    state.processing.insert(item.clone(), now);
                    inner.metrics.taken(state.dirty.len(), queued_at, now);
                    let more = !state.fifo.is_empty();
                    drop(state);
                    if more {
                        // Pass the baton: another waiter may take the next item.
                        inner.item_ready.notify_one();
                    }
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The items of [`get`](Self::get) as a [`futures_core::Stream`], to compose with
    /// `futures::StreamExt`: each item is handed out as `get` hands it out, so the caller owns
    /// it until it calls [`done`](Self::done); the stream ends once the queue is shut down
    /// and drained. It holds a clone of this handle; dropping it while it waits loses no
    /// item. See [`NextStream`](crate::stream::NextStream).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use futures::StreamExt as _;
    /// use client::workqueue::Queue;
    ///
    /// let queue: Queue<String> = Queue::new();
    /// for key in ["default/a", "default/b", "default/a"] {
    ///     queue.add(key.to_string()); // the second "default/a" is de-duplicated
    /// }
    /// queue.shut_down(); // the stream still drains what is queued
    /// let keys: Vec<String> = queue
    ///     .stream()
    ///     .inspect(|key| queue.done(key))
    ///     .collect()
    ///     .await;
    /// assert_eq!(keys, ["default/a", "default/b"]);
    /// # }
    /// ```
    pub fn stream(&self) -> crate::stream::NextStream<Queue<T>, T> {
        crate::stream::NextStream::new(self.clone(), |queue| {
            Box::pin(async move {
                let item = queue.get().await;
                (queue, item)
            })
        })
    }

    /// Tells the queue that the worker has finished with `item` (whatever the outcome).
    ///
    /// If the item was re-added while being processed, it is queued again now. Calling
    /// `done` for an item that is not being processed does nothing.
    pub fn done(&self, item: &T) {
        let inner = &*self.inner;
        let mut state = inner.state.lock();
        let Some(started) = state.processing.remove(item) else {
            return;
        };
        inner.metrics.done(started, inner.clock.now());
        let requeued = state.dirty.contains_key(item);
        if requeued {
            state.fifo.push_back(item.clone());
        }
        let idle = state.processing.is_empty();
        drop(state);
        if requeued {
            inner.item_ready.notify_one();
        }
        if idle {
            inner.idle.notify_waiters();
        }
    }

    /// Number of items waiting to be handed out (not counting items re-added while being
    /// processed, which wait for `done`).
    pub fn len(&self) -> usize {
        self.inner.state.lock().fifo.len()
    }

    /// Whether no item is waiting to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of items currently handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        self.inner.state.lock().processing.len()
    }

    /// Starts shutting down: later adds are ignored, `get` returns the items still waiting
    /// and then `None`, and every blocked `get` is woken. Does not wait for workers; cancels
    /// the wait of a concurrent [`shut_down_with_drain`](Self::shut_down_with_drain).
    pub fn shut_down(&self) {
        {
            let mut state = self.inner.state.lock();
            state.shutting_down = true;
            state.drain = false;
        }
        self.wake_all();
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every item handed out has been
    /// marked [`done`](Self::done). Returns early if `shut_down` is called meanwhile.
    ///
    /// Workers must keep calling `done`, or this never returns.
    pub async fn shut_down_with_drain(&self) {
        let inner = &*self.inner;
        {
            let mut state = inner.state.lock();
            state.shutting_down = true;
            state.drain = true;
        }
        self.wake_all();
        loop {
            let notified = inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = inner.state.lock();
                if state.processing.is_empty() || !state.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Whether shutdown has started.
    pub fn shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    fn wake_all(&self) {
        self.inner.item_ready.notify_waiters();
        self.inner.idle.notify_waiters();
        self.inner.closed.notify_waiters();
    }

    /// Completes once shutdown has started (immediately if it already has).
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.inner.closed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shutting_down() {
                return;
            }
            notified.await;
        }
    }

    /// The queue's clock.
    pub(crate) fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// The queue's metrics sink.
    pub(crate) fn metrics(&self) -> &Arc<dyn QueueMetrics> {
        &self.inner.metrics
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;
    use crate::workqueue::metrics::InMemoryMetrics;

    /// Whether `get` stays blocked for a long (virtual) while.
    async fn blocks<T: QueueItem>(q: &Queue<T>) -> bool {
        tokio::time::timeout(Duration::from_secs(60), q.get())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn fifo_order_and_dedup() {
        let q = Queue::new();
        q.add("a");
        q.add("b");
        q.add("a");
        q.add("c");
        q.add("b");
        assert_eq!(q.len(), 3);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.get().await, Some("c"));
        assert!(q.is_empty());
        assert_eq!(q.processing_len(), 3);
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn readd_while_processing_is_queued_once_on_done() {
        let q = Queue::new();
        q.add(1);
        assert_eq!(q.get().await, Some(1));
        q.add(1);
        q.add(1);
        q.add(1);
        // Not handed out again while a worker holds it.
        assert_eq!(q.len(), 0);
        assert!(blocks(&q).await);
        q.done(&1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some(1));
        q.done(&1);
        assert_eq!(q.len(), 0);
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_get_is_ignored() {
        let q = Queue::new();
        q.add("x");
        q.done(&"x");
        q.done(&"y");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("x"));
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn blocked_get_is_woken_by_add() {
        let q = Queue::new();
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!worker.is_finished());
        q.add(7);
        assert_eq!(worker.await.unwrap(), Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_drains_waiting_items_then_returns_none() {
        let q = Queue::new();
        let idle_worker = tokio::spawn({
            let q = q.clone();
            async move {
                let first = q.get().await;
                (first, q.get().await)
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.add("a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.add("b");
        q.add("c");
        q.shut_down();
        assert!(q.shutting_down());
        q.add("ignored");
        let (first, second) = idle_worker.await.unwrap();
        assert_eq!(first, Some("a"));
        assert_eq!(second, Some("b"));
        assert_eq!(q.get().await, Some("c"));
        assert_eq!(q.get().await, None);
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_every_blocked_worker() {
        let q: Queue<u32> = Queue::new();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.shut_down();
        for w in workers {
            assert_eq!(w.await.unwrap(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_processing_items() {
        let q = Queue::new();
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await, Some("a"));
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!drain.is_finished());
        // Waiting items are still handed out during the drain.
        assert_eq!(q.get().await, Some("b"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!drain.is_finished());
        q.done(&"b");
        drain.await.unwrap();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_cancels_a_drain() {
        let q = Queue::new();
        q.add(1);
        assert_eq!(q.get().await, Some(1));
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!drain.is_finished());
        q.shut_down();
        drain.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn drain_of_idle_queue_returns_at_once() {
        let q: Queue<u8> = Queue::new();
        q.shut_down_with_drain().await;
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_workers_never_share_an_item() {
        const WORKERS: usize = 8;
        const KEYS: u32 = 10;
        const ADDS: u32 = 2_000;
        let q: Queue<u32> = Queue::new();
        let in_flight = Arc::new(Mutex::new(HashSet::new()));
        let processed = Arc::new(AtomicUsize::new(0));
        let violations = Arc::new(AtomicUsize::new(0));

        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (q, in_flight, processed, violations) = (
                    q.clone(),
                    in_flight.clone(),
                    processed.clone(),
                    violations.clone(),
                );
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        if !in_flight.lock().insert(key) {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        for _ in 0..3 {
                            tokio::task::yield_now().await;
                        }
                        in_flight.lock().remove(&key);
                        processed.fetch_add(1, Ordering::SeqCst);
                        q.done(&key);
                    }
                })
            })
            .collect();

        let producers: Vec<_> = (0..4)
            .map(|p| {
                let q = q.clone();
                tokio::spawn(async move {
                    for i in 0..ADDS {
                        q.add((i * 7 + p) % KEYS);
                        if i % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.unwrap();
        }
        assert_eq!(violations.load(Ordering::SeqCst), 0);
        assert!(processed.load(Ordering::SeqCst) >= KEYS as usize);
        assert_eq!(q.processing_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_adds_gets_and_dones() {
        let clock = FakeClock::new();
        let metrics = Arc::new(InMemoryMetrics::with_clock("test", clock.shared()));
        let q = Queue::with_config(
            QueueConfig::new()
                .clock(clock.shared())
                .metrics(metrics.clone()),
        );
        q.add("a");
        q.add("b");
        q.add("a"); // duplicate: not counted
        let s = metrics.snapshot();
        assert_eq!((s.adds_total, s.depth), (2, 2));

        clock.step(Duration::from_secs(2));
        assert_eq!(q.get().await, Some("a"));
        let s = metrics.snapshot();
        assert_eq!(s.depth, 1);
        assert_eq!(s.queue_duration.count, 1);
        assert!((s.queue_duration.sum_seconds - 2.0).abs() < 1e-9);

        clock.step(Duration::from_secs(3));
        let s = metrics.snapshot();
        assert_eq!(s.unfinished_work, Duration::from_secs(3));
        assert_eq!(s.longest_running_processor, Duration::from_secs(3));

        q.add("a"); // re-added while processing: counts as an add and as depth
        let s = metrics.snapshot();
        assert_eq!((s.adds_total, s.depth), (3, 2));

        q.done(&"a");
        let s = metrics.snapshot();
        assert_eq!(s.work_duration.count, 1);
        assert!((s.work_duration.sum_seconds - 3.0).abs() < 1e-9);
        assert_eq!(s.in_flight, 0);
        assert_eq!(s.unfinished_work, Duration::ZERO);
        assert_eq!(q.len(), 2);
    }
}
