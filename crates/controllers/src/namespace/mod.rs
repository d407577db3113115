//! The namespace controller (kube-controller-manager's `namespace` controller): a deleted
//! namespace's content is deleted, then the namespace is released to the server.
//!
//! Since Kubernetes moved namespace deletion out of the API server, a `DELETE` of a
//! namespace only marks it (`deletionTimestamp`, phase Terminating, its `kubernetes`
//! finalizer kept in `spec.finalizers`); the namespace stays until this controller has
//! emptied it and removed that finalizer through `namespaces/{name}/finalize`.
//!
//! Data flow: the shared Namespace informer (resynced every 5 minutes) puts the name of each
//! namespace with a `deletionTimestamp` in a rate-limited work queue, after a short delay
//! (so that a create racing the delete has landed); workers run the
//! [`deleter::NamespacedResourcesDeleter`] on each. Content that should go by itself soon
//! (pods in their grace period, objects held by finalizers) brings the namespace back after
//! half the estimate plus a second; other failures after the queue's per-key backoff (5 ms
//! doubling to 60 s, under an overall 10 per second).

pub mod conditions;
pub mod deleter;
pub mod discovery;

use crate::controller_utils::ControllerError;
use client::cache::{
    wait_for_cache_sync, Lister, Registration, ResourceEventHandlerFuncs, SharedIndexInformer,
    SharedInformerFactory,
};
use client::rest::Client;
use client::workqueue::WorkQueue as _;
use client::workqueue::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, MaxOfRateLimiter, QueueConfig,
    RateLimitingQueue,
};
use deleter::{DeleteError, NamespacedResourcesDeleter};
use k8s_openapi::api::core::v1::Namespace;
use std::sync::Arc;
use std::time::Duration;

/// The finalizer the controller holds on every namespace (`spec.finalizers`).
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// How the controller runs, with kube-controller-manager's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Namespaces synced at once (`--concurrent-namespace-syncs`, 10).
    pub workers: usize,
    /// How often every namespace is looked at again (`--namespace-sync-period`, 5 min).
    pub resync: Duration,
    /// How long after a namespace is seen deleted its content is deleted (5 s): time for
    /// creates accepted just before the delete, through any API server, to be stored.
    pub deletion_delay: Duration,
}

impl Default for NamespaceConfig {
    fn default() -> Self {
        NamespaceConfig {
            workers: 10,
            resync: Duration::from_secs(300),
            deletion_delay: Duration::from_secs(5),
        }
    }
}

/// The namespace controller. Build it before the informer factory starts, then await
/// [`NamespaceController::run`]; dropping it unregisters its handler and shuts its queue
/// down.
pub struct NamespaceController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    namespaces: SharedIndexInformer<Namespace>,
    registration: Registration,
    workers: usize,
}

impl std::fmt::Debug for NamespaceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    namespaces: Lister<Namespace>,
    queue: RateLimitingQueue<String>,
    deleter: NamespacedResourcesDeleter,
    delay: Duration,
}

impl NamespaceController {
    /// A controller deleting namespaces through `client` as `config` says.
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue spawns a task).
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        config: NamespaceConfig,
    ) -> Result<NamespaceController, ControllerError> {
        let namespaces = factory.informer::<Namespace>()?;
        let queue = RateLimitingQueue::with_config(QueueConfig::new(), rate_limiter());
        let shared = Arc::new(Shared {
            namespaces: namespaces.lister(),
            queue,
            deleter: NamespacedResourcesDeleter::new(client, FINALIZER_KUBERNETES),
            delay: config.deletion_delay,
        });
        let (s1, s2) = (shared.clone(), shared.clone());
        let registration = namespaces.add_event_handler_with_resync_period(
            ResourceEventHandlerFuncs::new()
                .on_add(move |ns: &Arc<Namespace>, _| s1.enqueue(ns))
                .on_update(move |_: &Arc<Namespace>, ns: &Arc<Namespace>| s2.enqueue(ns)),
            config.resync,
        );
        Ok(NamespaceController {
            shared,
            factory: factory.clone(),
            namespaces,
            registration,
            workers: config.workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the Namespace cache, then
    /// syncs deleted namespaces until the controller is dropped.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.namespaces], Duration::MAX).await;
        tracing::info!(workers = self.workers, "starting the namespace controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }
}

impl Drop for NamespaceController {
    fn drop(&mut self) {
        self.namespaces.remove_event_handler(&self.registration);
        self.shared.queue.shut_down();
    }
}

/// Per-key exponential backoff (5 ms doubling to 60 s, so a namespace is retried at least
/// every minute) under an overall bucket of 10 per second, burst 100.
fn rate_limiter() -> MaxOfRateLimiter<String> {
    let mut limiters: Vec<Box<dyn client::workqueue::RateLimiter<String>>> = vec![Box::new(
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(60)),
    )];
    if let Ok(bucket) = BucketRateLimiter::new(10.0, 100) {
        limiters.push(Box::new(bucket));
    }
    MaxOfRateLimiter::new(limiters)
}

impl Shared {
    fn enqueue(&self, ns: &Namespace) {
        if ns.metadata.deletion_timestamp.is_none() {
            return;
        }
        if let Some(name) = &ns.metadata.name {
            self.queue.add_after(name.clone(), self.delay);
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(name) = self.queue.get().await {
            match self.sync(&name).await {
                Ok(()) => self.queue.forget(&name),
                Err(DeleteError::ContentRemaining { estimate }) => {
                    tracing::debug!(namespace = %name, estimate, "content remaining in the namespace");
                    self.queue
                        .add_after(name.clone(), deleter::requeue_after(estimate));
                }
                Err(e) => {
                    tracing::warn!(namespace = %name, error = %e, "deleting the namespace failed; retrying with backoff");
                    self.queue.add_rate_limited(name.clone());
                }
            }
            self.queue.done(&name);
        }
    }

    async fn sync(&self, name: &str) -> Result<(), DeleteError> {
        if self.namespaces.get(None, name).is_none() {
            return Ok(());
        }
        self.deleter.delete(name).await
    }
}
