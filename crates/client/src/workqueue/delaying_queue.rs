//! A work queue whose items can be added after a delay.
//!
//! One background task per queue keeps the delayed items ordered by the instant they become
//! ready and sleeps (on the queue's [`Clock`](crate::clock::Clock)) until the earliest one is
//! due, then adds it to the underlying [`Queue`]. With a
//! [`FakeClock`](crate::clock::FakeClock), nothing becomes ready until the test steps the
//! clock, which makes delay tests deterministic.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::queue::{Queue, QueueConfig, QueueItem};
use super::work_queue::WorkQueue;

/// How far in the future an item is parked when `now + delay` overflows `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A [`Queue`] plus [`add_after`](Self::add_after): items that become visible to workers only
/// once their delay has passed.
///
/// Contract (client-go's `DelayingInterface`):
/// - `add_after(item, d)` with `d == 0` is exactly `add(item)`.
/// - Otherwise the item is added at `now + d` as measured by the queue's clock; until then
///   it is invisible (`len` does not count it and `get` does not return it).
/// - If the same item is already waiting for its delay, the earlier of the two ready times
///   is kept; the later request is dropped.
/// - Items that become ready at the same instant are added in the order they were
///   requested.
/// - After shutdown, `add_after` is ignored and items still waiting for their delay are
///   discarded.
///
/// Delayed items are held by a background task that lives until the queue shuts down or
/// every `DelayingQueue` handle (clones included) is dropped.
///
/// Cloning yields another handle to the same queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use client::workqueue::{DelayingQueue, WorkQueue as _};
///
/// let queue: DelayingQueue<&str> = DelayingQueue::new();
/// queue.add_after("default/web", Duration::from_millis(20));
/// assert!(queue.is_empty(), "still waiting out its delay");
/// assert_eq!(queue.get().await, Some("default/web"));
/// queue.done(&"default/web");
/// # }
/// ```
pub struct DelayingQueue<T> {
    queue: Queue<T>,
    waiting_tx: mpsc::UnboundedSender<(T, Instant)>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        DelayingQueue {
            queue: self.queue.clone(),
            waiting_tx: self.waiting_tx.clone(),
        }
    }
}

impl<T> fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T: QueueItem> DelayingQueue<T> {
    /// A delaying queue with the real clock and no metrics.
    ///
    /// # Panics
    /// Like `tokio::spawn`, panics if called outside a Tokio runtime: the queue starts its
    /// background waiting task here.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A delaying queue using `config`'s clock and metrics.
    ///
    /// # Panics
    /// Like `tokio::spawn`, panics if called outside a Tokio runtime.
    pub fn with_config(config: QueueConfig) -> Self {
        let queue = Queue::with_config(config);
        let (waiting_tx, waiting_rx) = mpsc::unbounded_channel();
        tokio::spawn(waiting_loop(queue.clone(), waiting_rx));
        DelayingQueue { queue, waiting_tx }
    }

    /// Adds `item` once `delay` has passed on the queue's clock (see the type's contract).
    /// Counts as a retry in the metrics.
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.queue.shutting_down() {
            return;
        }
        self.queue.metrics().retried();
        if delay.is_zero() {
            self.queue.add(item);
            return;
        }
        let now = self.queue.clock().now();
        let Some(ready_at) = now
            .checked_add(delay)
            .or_else(|| now.checked_add(FAR_FUTURE))
        else {
            tracing::warn!(?delay, "work queue delay not representable; item dropped");
            return;
        };
        // Fails only if the waiting task has ended, i.e. after shutdown: dropping is right.
        let _ = self.waiting_tx.send((item, ready_at));
    }
}

impl<T: QueueItem> WorkQueue<T> for DelayingQueue<T> {
    /// The underlying queue (shared with this handle). Items still waiting for their delay
    /// are not in it yet, and are kept only while a `DelayingQueue` handle exists.
    fn queue(&self) -> &Queue<T> {
        &self.queue
    }
}

impl<T: QueueItem> Default for DelayingQueue<T> {
    /// Same as [`DelayingQueue::new`] (and panics likewise outside a Tokio runtime).
    fn default() -> Self {
        Self::new()
    }
}

/// Items waiting for their ready time. An ordered map keyed by `(ready_at, sequence)` serves
/// as the priority queue: it pops the earliest entry first, breaks ties in request order, and
/// lets an item's ready time be moved earlier without leaving stale entries behind.
struct Waiting<T> {
    by_time: BTreeMap<(Instant, u64), T>,
    known: HashMap<T, (Instant, u64)>,
    next_seq: u64,
}

impl<T: QueueItem> Waiting<T> {
    fn new() -> Self {
        Waiting {
            by_time: BTreeMap::new(),
            known: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Records that `item` should be added at `ready_at`, keeping the earlier time if the
    /// item is already waiting.
    fn insert(&mut self, item: T, ready_at: Instant) {
        if let Some(&(current, seq)) = self.known.get(&item) {
            if current <= ready_at {
                return;
            }
            self.by_time.remove(&(current, seq));
        }
        let key = (ready_at, self.next_seq);
        self.next_seq = self.next_seq.wrapping_add(1);
        self.known.insert(item.clone(), key);
        self.by_time.insert(key, item);
    }

    /// Removes and returns the earliest item if it is due at `now`.
    fn pop_ready(&mut self, now: Instant) -> Option<T> {
        let (&(ready_at, _), _) = self.by_time.first_key_value()?;
        if ready_at > now {
            return None;
        }
        let (_, item) = self.by_time.pop_first()?;
        self.known.remove(&item);
        Some(item)
    }

    fn next_ready_at(&self) -> Option<Instant> {
        self.by_time.keys().next().map(|(at, _)| *at)
    }
}

/// The background task: moves delayed items into `queue` when they are due. Ends when the
/// queue shuts down or every sender (every `DelayingQueue` handle) is gone.
async fn waiting_loop<T: QueueItem>(
    queue: Queue<T>,
    mut requests: mpsc::UnboundedReceiver<(T, Instant)>,
) {
    let clock = queue.clock().clone();
    let mut waiting = Waiting::new();
    loop {
        let now = clock.now();
        while let Some(item) = waiting.pop_ready(now) {
            queue.add(item);
        }
        let timer = waiting
            .next_ready_at()
            .map(|deadline| clock.sleep_until(deadline));
        tokio::select! {
            biased;
            () = queue.closed() => return,
            request = requests.recv() => {
                let Some((item, ready_at)) = request else { return };
                waiting.insert(item, ready_at);
                while let Ok((item, ready_at)) = requests.try_recv() {
                    waiting.insert(item, ready_at);
                }
            }
            () = async { match timer { Some(t) => t.await, None => std::future::pending().await } } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::FakeClock;
    use crate::workqueue::metrics::InMemoryMetrics;

    fn fake_queue() -> (FakeClock, DelayingQueue<&'static str>) {
        let clock = FakeClock::new();
        let q = DelayingQueue::with_config(QueueConfig::new().clock(clock.shared()));
        (clock, q)
    }

    /// Lets the background task run (virtual time; the fake clock does not move).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    async fn blocks(q: &DelayingQueue<&'static str>) -> bool {
        tokio::time::timeout(Duration::from_secs(60), q.get())
            .await
            .is_err()
    }

    #[test]
    fn waiting_keeps_earliest_time_and_request_order() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Waiting::new();
        w.insert("late", t0 + s(5));
        w.insert("x", t0 + s(3));
        w.insert("y", t0 + s(3));
        w.insert("late", t0 + s(1)); // moved earlier
        w.insert("x", t0 + s(9)); // later: ignored
        assert_eq!(w.next_ready_at(), Some(t0 + s(1)));
        assert_eq!(w.pop_ready(t0), None);
        assert_eq!(w.pop_ready(t0 + s(10)), Some("late"));
        assert_eq!(w.pop_ready(t0 + s(10)), Some("x"));
        assert_eq!(w.pop_ready(t0 + s(10)), Some("y"));
        assert_eq!(w.pop_ready(t0 + s(10)), None);
        assert!(w.known.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn items_appear_in_ready_order_as_the_clock_moves() {
        let (clock, q) = fake_queue();
        q.add_after("a", Duration::from_secs(3));
        q.add_after("b", Duration::from_secs(1));
        q.add_after("c", Duration::from_secs(2));
        settle().await;
        assert_eq!(q.len(), 0);
        assert!(blocks(&q).await);

        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("b"));
        settle().await;
        assert_eq!(q.len(), 0);

        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("c"));
        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn everything_due_at_once_comes_out_in_time_order() {
        let (clock, q) = fake_queue();
        q.add_after("third", Duration::from_millis(300));
        q.add_after("first", Duration::from_millis(100));
        q.add_after("second", Duration::from_millis(200));
        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("first"));
        assert_eq!(q.get().await, Some("second"));
        assert_eq!(q.get().await, Some("third"));
    }

    #[tokio::test(start_paused = true)]
    async fn earlier_of_two_delays_wins() {
        let (clock, q) = fake_queue();
        q.add_after("x", Duration::from_secs(10));
        q.add_after("x", Duration::from_secs(2));
        q.add_after("y", Duration::from_secs(1));
        q.add_after("y", Duration::from_secs(5));
        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("y"));
        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some("x"));
        q.done(&"x");
        q.done(&"y");
        // The superseded requests are gone: nothing more shows up later.
        clock.step(Duration::from_secs(20));
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_delay_adds_immediately() {
        let (_clock, q) = fake_queue();
        q.add_after("now", Duration::ZERO);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("now"));
    }

    #[tokio::test(start_paused = true)]
    async fn huge_delay_does_not_panic_and_never_fires() {
        let (clock, q) = fake_queue();
        q.add_after("never", Duration::MAX);
        clock.step(Duration::from_secs(3600));
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_item_is_deduplicated_with_waiting_item() {
        let (clock, q) = fake_queue();
        q.add("k");
        q.add_after("k", Duration::from_secs(1));
        clock.step(Duration::from_secs(1));
        settle().await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("k"));
        assert!(blocks(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_discards_delayed_items() {
        let (clock, q) = fake_queue();
        q.add_after("pending", Duration::from_secs(1));
        q.add("ready");
        settle().await;
        q.shut_down();
        q.add_after("after", Duration::ZERO);
        clock.step(Duration::from_secs(5));
        settle().await;
        assert_eq!(q.get().await, Some("ready"));
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn real_clock_delay_is_honoured() {
        let q = DelayingQueue::new();
        let start = tokio::time::Instant::now();
        q.add_after(1u32, Duration::from_millis(250));
        assert_eq!(q.get().await, Some(1));
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_millis(300), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_counts_retries() {
        let clock = FakeClock::new();
        let metrics = Arc::new(InMemoryMetrics::with_clock("d", clock.shared()));
        let q: DelayingQueue<u8> = DelayingQueue::with_config(
            QueueConfig::new()
                .clock(clock.shared())
                .metrics(metrics.clone()),
        );
        q.add_after(1, Duration::ZERO);
        q.add_after(2, Duration::from_secs(1));
        q.add(3);
        let s = metrics.snapshot();
        assert_eq!(s.retries_total, 2);
        assert_eq!(s.adds_total, 2);
        clock.step(Duration::from_secs(1));
        assert_eq!(q.get().await, Some(1));
        assert_eq!(q.get().await, Some(3));
        assert_eq!(q.get().await, Some(2));
        assert_eq!(metrics.snapshot().adds_total, 3);
    }
}
