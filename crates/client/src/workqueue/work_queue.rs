//! The operations every work queue shares, written once.
//!
//! [`DelayingQueue`](super::DelayingQueue) and [`RateLimitingQueue`](super::RateLimitingQueue)
//! each wrap a base [`Queue`] and add to it; everything they do not add is the base queue's
//! behaviour. [`WorkQueue`] states that behaviour once: an implementor names its base queue
//! ([`WorkQueue::queue`]) and the provided methods hand each call to it.

use std::future::Future;

use super::queue::{Queue, QueueItem};
use crate::stream::NextStream;

/// A handle to a work queue: the calls a worker loop makes, the same on [`Queue`],
/// [`DelayingQueue`](super::DelayingQueue) and [`RateLimitingQueue`](super::RateLimitingQueue)
/// (client-go's `workqueue.Interface`).
///
/// An implementor provides only [`queue`](Self::queue), the base queue its handle shares;
/// every other method is provided and acts on that base queue, so its contract is the one
/// documented on the [`Queue`] method of the same name. What the wrappers add lives on them
/// ([`DelayingQueue::add_after`](super::DelayingQueue::add_after),
/// [`RateLimitingQueue::add_rate_limited`](super::RateLimitingQueue::add_rate_limited), …).
///
/// Bring the trait into scope (`use client::workqueue::WorkQueue;`) to call these methods on
/// a delaying or rate-limiting queue; [`Queue`] also has them as inherent methods. Generic
/// code can take any queue:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use client::workqueue::{DelayingQueue, Queue, QueueConfig, RateLimitingQueue, WorkQueue};
///
/// /// Takes every queued key, marking each done.
/// async fn drain<Q: WorkQueue<String>>(queue: &Q) -> Vec<String> {
///     queue.shut_down();
///     let mut keys = Vec::new();
///     while let Some(key) = queue.get().await {
///         queue.done(&key);
///         keys.push(key);
///     }
///     keys
/// }
///
/// let plain: Queue<String> = Queue::new();
/// let delaying: DelayingQueue<String> = DelayingQueue::new();
/// let limited: RateLimitingQueue<String> = RateLimitingQueue::with_default_limiter(QueueConfig::new());
/// plain.add("default/a".to_string());
/// delaying.add("default/b".to_string());
/// limited.add("default/c".to_string());
/// assert_eq!(drain(&plain).await, ["default/a"]);
/// assert_eq!(drain(&delaying).await, ["default/b"]);
/// assert_eq!(drain(&limited).await, ["default/c"]);
/// # }
/// ```
pub trait WorkQueue<T: QueueItem>: Clone + Send + Sync + 'static {
    /// The base queue this handle shares (its ready items, processing set and shutdown
    /// state). Items a delaying queue still holds for their delay are not in it yet.
    fn queue(&self) -> &Queue<T>;

    /// [`Queue::add`]: marks `item` as needing processing, now (de-duplicated with an item
    /// already waiting; held back until `done` if it is being processed; ignored after
    /// shutdown).
    fn add(&self, item: T) {
        self.queue().add(item);
    }

    /// [`Queue::get`]: waits for the next ready item, which the caller owns until it calls
    /// [`done`](Self::done); `None` once the queue is shut down and drained. Cancel-safe.
    fn get(&self) -> impl Future<Output = Option<T>> + Send + '_ {
        self.queue().get()
    }

    /// The items of [`get`](Self::get) as a [`futures_core::Stream`], to compose with
    /// `futures::StreamExt`: each item is handed out as `get` hands it out, so the caller owns
    /// it until it calls [`done`](Self::done); the stream ends once the queue is shut down
    /// and drained. It holds a clone of this handle; dropping it while it waits loses no
    /// item. See [`NextStream`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use futures::StreamExt as _;
    /// use client::workqueue::{RateLimitingQueue, WorkQueue as _};
    ///
    /// let queue: RateLimitingQueue<String> = RateLimitingQueue::with_default_limiter(Default::default());
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
    fn stream(&self) -> NextStream<Self, T> {
        NextStream::new(self.clone(), |queue: Self| {
            Box::pin(async move {
                let item = queue.get().await;
                (queue, item)
            })
        })
    }

    /// [`Queue::done`]: the worker has finished with `item` (whatever the outcome); if it was
    /// re-added meanwhile, it is queued again now.
    fn done(&self, item: &T) {
        self.queue().done(item);
    }

    /// [`Queue::len`]: items ready and waiting to be handed out (items re-added while being
    /// processed, and items still waiting for a delay, are excluded).
    fn len(&self) -> usize {
        self.queue().len()
    }

    /// [`Queue::is_empty`]: whether no ready item is waiting.
    fn is_empty(&self) -> bool {
        self.queue().is_empty()
    }

    /// [`Queue::processing_len`]: items handed out and not yet done.
    fn processing_len(&self) -> usize {
        self.queue().processing_len()
    }

    /// [`Queue::shut_down`]: later adds are ignored and `get` drains what is ready, then
    /// returns `None`. A delaying queue's waiting task stops too, discarding items still
    /// waiting for their delay. Does not wait for workers.
    fn shut_down(&self) {
        self.queue().shut_down();
    }

    /// [`Queue::shut_down_with_drain`]: [`shut_down`](Self::shut_down), then waits until
    /// every item handed out is marked done (returns early if `shut_down` is called
    /// meanwhile). Workers must keep calling `done`, or this never returns.
    fn shut_down_with_drain(&self) -> impl Future<Output = ()> + Send + '_ {
        self.queue().shut_down_with_drain()
    }

    /// [`Queue::shutting_down`]: whether shutdown has started.
    fn shutting_down(&self) -> bool {
        self.queue().shutting_down()
    }
}

impl<T: QueueItem> WorkQueue<T> for Queue<T> {
    /// The queue itself.
    fn queue(&self) -> &Queue<T> {
        self
    }
}
