//! A delaying work queue whose retries are paced by a [`RateLimiter`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::delaying_queue::DelayingQueue;
use super::queue::{Queue, QueueConfig, QueueItem};
use super::rate_limiter::{default_controller_rate_limiter_with_clock, RateLimiter};
use super::work_queue::WorkQueue;

/// A [`DelayingQueue`] plus a [`RateLimiter`]: the queue controllers use.
///
/// Contract (client-go's `RateLimitingInterface`):
/// - [`add_rate_limited`](Self::add_rate_limited)`(item)` is
///   `add_after(item, limiter.when(item))`: the limiter records the retry and decides the
///   delay.
/// - [`forget`](Self::forget)`(item)` clears the limiter's history for the item; call it when
///   the item was processed successfully (or you give up on it). It does not remove the item
///   from the queue.
/// - [`num_requeues`](Self::num_requeues)`(item)` is the limiter's retry count for the item.
/// - Everything else behaves as in [`DelayingQueue`] and [`Queue`].
///
/// Cloning yields another handle to the same queue and limiter.
///
/// A worker loop over one is shown in the [module docs](super); in short:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use client::workqueue::{QueueConfig, RateLimitingQueue, WorkQueue as _};
///
/// let queue: RateLimitingQueue<String> = RateLimitingQueue::with_default_limiter(QueueConfig::new());
/// queue.add("default/web".to_string());
/// let key = queue.get().await.expect("not shut down");
/// // The reconcile failed: retry after the limiter's delay (5 ms at first, then doubling).
/// queue.add_rate_limited(key.clone());
/// queue.done(&key);
/// assert_eq!(queue.num_requeues(&key), 1);
/// assert_eq!(queue.get().await.as_deref(), Some("default/web"));
/// queue.forget(&key); // it worked this time: clear its history
/// queue.done(&key);
/// assert_eq!(queue.num_requeues(&key), 0);
/// # }
/// ```
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        RateLimitingQueue {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T> fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<T: QueueItem> RateLimitingQueue<T> {
    /// A rate-limited queue with the real clock, no metrics, and `limiter`.
    ///
    /// # Panics
    /// Like `tokio::spawn`, panics if called outside a Tokio runtime (see
    /// [`DelayingQueue::new`]).
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_config(QueueConfig::default(), limiter)
    }

    /// A rate-limited queue using `config`'s clock and metrics, and `limiter`. The limiter
    /// keeps its own clock (give it the same one for deterministic tests).
    ///
    /// # Panics
    /// Like `tokio::spawn`, panics if called outside a Tokio runtime.
    pub fn with_config(config: QueueConfig, limiter: impl RateLimiter<T> + 'static) -> Self {
        RateLimitingQueue {
            queue: DelayingQueue::with_config(config),
            limiter: Arc::new(limiter),
        }
    }

    /// A rate-limited queue using `config`, with client-go's default controller limiter
    /// ([`default_controller_rate_limiter`](super::default_controller_rate_limiter)) running
    /// on the config's clock.
    ///
    /// # Panics
    /// Like `tokio::spawn`, panics if called outside a Tokio runtime.
    pub fn with_default_limiter(config: QueueConfig) -> Self {
        let limiter = default_controller_rate_limiter_with_clock(config.clock.clone());
        Self::with_config(config, limiter)
    }

    /// Adds `item` after the delay the rate limiter chooses for it (recording a retry).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Clears the limiter's retry history for `item` (it does not dequeue the item).
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` has been rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// [`DelayingQueue::add_after`]: adds `item` once `delay` has passed.
    pub fn add_after(&self, item: T, delay: Duration) {
        self.queue.add_after(item, delay);
    }

    /// The underlying delaying queue (shared with this handle).
    pub fn delaying_queue(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

impl<T: QueueItem> WorkQueue<T> for RateLimitingQueue<T> {
    /// The underlying base queue (shared with this handle).
    fn queue(&self) -> &Queue<T> {
        self.queue.queue()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;
    use crate::workqueue::metrics::InMemoryMetrics;
    use crate::workqueue::rate_limiter::ItemExponentialFailureRateLimiter;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    async fn blocks(q: &RateLimitingQueue<&'static str>) -> bool {
        tokio::time::timeout(Duration::from_secs(60), q.get())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_and_forget_resets() {
        let clock = FakeClock::new();
        let q = RateLimitingQueue::with_config(
            QueueConfig::new().clock(clock.shared()),
            ItemExponentialFailureRateLimiter::new(ms(5), Duration::from_secs(1000)),
        );

        q.add_rate_limited("a");
        assert_eq!(q.num_requeues(&"a"), 1);
        assert!(blocks(&q).await);
        clock.step(ms(5));
        assert_eq!(q.get().await, Some("a"));

        // Second failure: 10 ms.
        q.add_rate_limited("a");
        q.done(&"a");
        clock.step(ms(5));
        assert!(blocks(&q).await);
        clock.step(ms(5));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.num_requeues(&"a"), 2);

        // Success: forget, and the next failure starts over at 5 ms.
        q.forget(&"a");
        q.done(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        q.add_rate_limited("a");
        clock.step(ms(5));
        assert_eq!(q.get().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn worker_loop_retries_until_success() {
        let clock = FakeClock::new();
        let metrics = Arc::new(InMemoryMetrics::with_clock("controller", clock.shared()));
        let q: RateLimitingQueue<String> = RateLimitingQueue::with_default_limiter(
            QueueConfig::new()
                .clock(clock.shared())
                .metrics(metrics.clone()),
        );
        let worker = tokio::spawn({
            let q = q.clone();
            async move {
                let mut attempts = 0;
                while let Some(key) = q.get().await {
                    attempts += 1;
                    if attempts < 3 {
                        q.add_rate_limited(key.clone());
                    } else {
                        q.forget(&key);
                    }
                    q.done(&key);
                }
                attempts
            }
        });
        q.add("default/web".to_string());
        // Give each backoff (5 ms, then 10 ms) time to pass on the fake clock.
        for _ in 0..4 {
            tokio::time::sleep(ms(1)).await;
            clock.step(ms(10));
        }
        tokio::time::sleep(ms(1)).await;
        q.shut_down_with_drain().await;
        assert_eq!(worker.await.unwrap(), 3);
        assert_eq!(q.num_requeues(&"default/web".to_string()), 0);

        let s = metrics.snapshot();
        assert_eq!(s.retries_total, 2);
        assert_eq!(s.adds_total, 3);
        assert_eq!(s.queue_duration.count, 3);
        assert_eq!(s.work_duration.count, 3);
        assert_eq!(s.depth, 0);
        let text = metrics.metrics_text();
        assert!(text.contains("workqueue_retries_total{name=\"controller\"} 2\n"));
        assert!(text.contains("workqueue_adds_total{name=\"controller\"} 3\n"));
        assert!(text.contains("workqueue_work_duration_seconds_count{name=\"controller\"} 3\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn real_clock_default_queue_waits_the_backoff() {
        let q: RateLimitingQueue<u32> = RateLimitingQueue::with_default_limiter(QueueConfig::new());
        let start = tokio::time::Instant::now();
        q.add_rate_limited(9);
        q.add_rate_limited(9); // earlier pending delay (5 ms) wins over 10 ms
        assert_eq!(q.get().await, Some(9));
        let waited = start.elapsed();
        assert!(waited >= ms(5) && waited < ms(10), "{waited:?}");
        assert_eq!(q.num_requeues(&9), 2);
    }
}
