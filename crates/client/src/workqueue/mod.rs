//! Work queues for controllers, after client-go's `util/workqueue`.
//!
//! An informer's event handlers should not do the work themselves: they push a *key* (for
//! example `"namespace/name"`) onto a work queue, and a few worker tasks take keys off it,
//! read the current object from a lister and reconcile. The queue guarantees that:
//!
//! - **keys are de-duplicated**: a key added ten times before a worker takes it is processed
//!   once, with the newest state read from the cache;
//! - **a key is never processed by two workers at once**: if it changes while a worker has
//!   it, it is queued again once that worker calls `done`;
//! - **failures are retried with backoff**: `add_rate_limited` re-adds a key after a delay
//!   chosen by a [`RateLimiter`], growing per key and bounded overall;
//! - **shutdown is orderly**: `get` returns `None` once the queue is shut down and drained.
//!
//! Three layers, each adding to the one before:
//!
//! | type | adds |
//! |---|---|
//! | [`Queue`] | `add`, `get`, `done`, `len`, `shut_down`, `shut_down_with_drain` |
//! | [`DelayingQueue`] | `add_after(item, delay)` |
//! | [`RateLimitingQueue`] | `add_rate_limited`, `forget`, `num_requeues` |
//!
//! What all three share (`add`, `get`, `stream`, `done`, `len`, `shut_down`, …) is the
//! [`WorkQueue`] trait, implemented once over each queue's base [`Queue`]; bring it into
//! scope to call those methods on a delaying or rate-limiting queue.
//!
//! All of them are cheap-to-clone handles. Time comes from a
//! [`Clock`](crate::clock::Clock) (set through [`QueueConfig`]), so tests can drive delays
//! with a [`FakeClock`](crate::clock::FakeClock). Metrics go to a [`QueueMetrics`]
//! implementation; [`InMemoryMetrics`] records them and renders them in the Prometheus text
//! format under client-go's names (`workqueue_depth`, `workqueue_adds_total`, …).
//!
//! # A worker loop
//!
//! ```
//! use std::sync::Arc;
//! use client::workqueue::{InMemoryMetrics, QueueConfig, RateLimitingQueue, WorkQueue as _};
//!
//! /// Brings the world in line with the object named by `key`.
//! async fn reconcile(key: &str) -> Result<(), String> {
//!     if key.is_empty() { Err("empty key".into()) } else { Ok(()) }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let metrics = Arc::new(InMemoryMetrics::new("web-controller"));
//! let queue: RateLimitingQueue<String> =
//!     RateLimitingQueue::with_default_limiter(QueueConfig::new().metrics(metrics.clone()));
//!
//! let worker = tokio::spawn({
//!     let queue = queue.clone();
//!     async move {
//!         // `None` means the queue was shut down and nothing is left.
//!         while let Some(key) = queue.get().await {
//!             match reconcile(&key).await {
//!                 // Success: clear the key's backoff history.
//!                 Ok(()) => queue.forget(&key),
//!                 // Transient failure: retry later, with growing delays.
//!                 Err(_) if queue.num_requeues(&key) < 5 => queue.add_rate_limited(key.clone()),
//!                 // Too many failures: give up on this key until it changes again.
//!                 Err(_) => queue.forget(&key),
//!             }
//!             // Always: lets the key be handed out again if it was re-added meanwhile.
//!             queue.done(&key);
//!         }
//!     }
//! });
//!
//! // An informer's event handler would do this on every add, update and delete.
//! queue.add("default/web".to_string());
//! queue.add("default/web".to_string()); // de-duplicated
//!
//! // Stop: workers finish what is queued, and we wait for in-flight keys.
//! queue.shut_down_with_drain().await;
//! worker.await.unwrap();
//! assert_eq!(metrics.snapshot().adds_total, 1);
//! assert!(metrics.metrics_text().contains("workqueue_adds_total{name=\"web-controller\"} 1"));
//! # }
//! ```

mod delaying_queue;
mod metrics;
mod queue;
mod rate_limiter;
mod rate_limiting_queue;
mod work_queue;

pub use delaying_queue::DelayingQueue;
pub use metrics::{
    render_prometheus, HistogramSnapshot, InMemoryMetrics, MetricsSnapshot, NoopMetrics,
    QueueMetrics, DURATION_BUCKETS,
};
pub use queue::{Queue, QueueConfig, QueueItem};
pub use rate_limiter::{
    default_controller_rate_limiter, default_controller_rate_limiter_with_clock, BucketRateLimiter,
    ItemExponentialFailureRateLimiter, MaxOfRateLimiter, RateLimiter, RateLimiterError,
    DEFAULT_BASE_DELAY, DEFAULT_BURST, DEFAULT_MAX_DELAY, DEFAULT_QPS,
};
pub use rate_limiting_queue::RateLimitingQueue;
pub use work_queue::WorkQueue;
