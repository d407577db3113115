//! The ServiceAccounts controller (kube-controller-manager's `serviceaccount` controller):
//! every active namespace has a `default` ServiceAccount.
//!
//! Data flow: the shared Namespace and ServiceAccount informers feed a rate-limited work
//! queue of namespace names — a namespace added or updated, or a ServiceAccount deleted
//! (its namespace) — and workers sync each name: a namespace that exists and is `Active`
//! and whose `default` ServiceAccount the lister does not hold gets one created through
//! the API. Terminating namespaces are left alone (the server refuses creates there), and a
//! create that finds the account already there counts as done. A failed create is retried
//! with the queue's per-key backoff.

use crate::controller_utils::{is_namespace_terminating, ControllerError};
use client::cache::{
    wait_for_cache_sync, DeleteEvent, Lister, Registration, ResourceEventHandlerFuncs,
    SharedIndexInformer, SharedInformerFactory,
};
use client::rest::resource::ApiResource;
use client::rest::{Api, Client, PostParams};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;
use std::time::Duration;

/// The ServiceAccounts every active namespace gets.
pub const SERVICE_ACCOUNTS_TO_ENSURE: &[&str] = &["default"];

/// The ServiceAccounts controller. Build it before the informer factory starts, then await
/// [`ServiceAccountsController::run`]; dropping the controller unregisters its handlers
/// and shuts its queue down.
pub struct ServiceAccountsController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    namespaces: SharedIndexInformer<Namespace>,
    accounts: SharedIndexInformer<ServiceAccount>,
    registrations: [Registration; 2],
    workers: usize,
}

impl std::fmt::Debug for ServiceAccountsController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountsController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    namespaces: Lister<Namespace>,
    accounts: Lister<ServiceAccount>,
    queue: RateLimitingQueue<String>,
}

impl ServiceAccountsController {
    /// A controller syncing namespaces with `workers` workers (kube-controller-manager
    /// runs one).
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue spawns a task).
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<ServiceAccountsController, ControllerError> {
        let namespaces = factory.informer::<Namespace>()?;
        let accounts = factory.informer::<ServiceAccount>()?;
        let queue = RateLimitingQueue::with_default_limiter(QueueConfig::new());
        let shared = Arc::new(Shared {
            client,
            namespaces: namespaces.lister(),
            accounts: accounts.lister(),
            queue,
        });
        let (n1, n2) = (shared.clone(), shared.clone());
        let ns_reg = namespaces.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |ns: &Arc<Namespace>, _| n1.enqueue_namespace(ns))
                .on_update(move |_: &Arc<Namespace>, ns: &Arc<Namespace>| n2.enqueue_namespace(ns)),
        );
        let s = shared.clone();
        let sa_reg = accounts.add_event_handler(ResourceEventHandlerFuncs::new().on_delete(
            move |d: &DeleteEvent<ServiceAccount>| {
                let sa = d.object();
                let name = sa.metadata.name.as_deref().unwrap_or("");
                if SERVICE_ACCOUNTS_TO_ENSURE.contains(&name) {
                    if let Some(ns) = &sa.metadata.namespace {
                        s.queue.add(ns.clone());
                    }
                }
            },
        ));
        Ok(ServiceAccountsController {
            shared,
            factory: factory.clone(),
            namespaces,
            accounts,
            registrations: [ns_reg, sa_reg],
            workers: workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the Namespace and
    /// ServiceAccount caches, then syncs namespaces until the controller is dropped.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.namespaces, &self.accounts], Duration::MAX).await;
        tracing::info!(
            workers = self.workers,
            "starting the serviceaccount controller"
        );
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }
}

impl Drop for ServiceAccountsController {
    fn drop(&mut self) {
        let [ns_reg, sa_reg] = &self.registrations;
        self.namespaces.remove_event_handler(ns_reg);
        self.accounts.remove_event_handler(sa_reg);
        self.shared.queue.shut_down();
    }
}

impl Shared {
    fn enqueue_namespace(&self, ns: &Namespace) {
        if let Some(name) = &ns.metadata.name {
            self.queue.add(name.clone());
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(ns) = self.queue.get().await {
            match self.sync(&ns).await {
                Ok(()) => self.queue.forget(&ns),
                Err(e) => {
                    tracing::warn!(namespace = %ns, error = %e, "ensuring service accounts failed; retrying with backoff");
                    self.queue.add_rate_limited(ns.clone());
                }
            }
            self.queue.done(&ns);
        }
    }

    /// Creates the missing accounts of namespace `name` if it is active.
    async fn sync(&self, name: &str) -> Result<(), client::rest::Error> {
        let Some(ns) = self.namespaces.get(None, name) else {
            return Ok(());
        };
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Active") || ns.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        for account in SERVICE_ACCOUNTS_TO_ENSURE {
            if self.accounts.get(Some(name), account).is_some() {
                continue;
            }
            let api: Api<ServiceAccount> = Api::namespaced(
                self.client.clone(),
                ApiResource::of::<ServiceAccount>(),
                name,
            );
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some((*account).to_string()),
                    namespace: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(e) if e.is_already_exists() || is_namespace_terminating(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
