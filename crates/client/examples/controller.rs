//! A small controller in the client-go style: a shared informer over ConfigMaps whose event
//! handlers only put keys on a rate-limited work queue, and two workers that take keys off
//! the queue and reconcile each one by reading the current object from a `Lister`.
//!
//! "Reconciling" here means recording the resourceVersion the controller has acted on per
//! key (and forgetting deleted keys); a ConfigMap with `data.fail = "N"` fails its first `N`
//! attempts, to show retries with `add_rate_limited`, `num_requeues` and `forget`.
//!
//! ```text
//! cargo run -p client --example controller -- [--server http://127.0.0.1:8080]
//!     [--namespace NS] [--seconds N]
//! ```
//!
//! Without `--server` the server comes from the kubeconfig (`KUBECONFIG`, `~/.kube/config`)
//! or the in-cluster service account. The integration tests include this file and run
//! [`Controller`] against a real `listwatch serve`.

use client::cache::ConfigureReflector as _;
use client::cache::{
    wait_for_cache_sync, DeleteEvent, Lister, ResourceEventHandlerFuncs, RestListerWatcher,
    SharedIndexInformer,
};
use client::object::KubeObject;
use client::rest::{Client, Config};
use client::workqueue::{InMemoryMetrics, QueueConfig, RateLimitingQueue, WorkQueue as _};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How many times a failing key is retried before the controller gives up on it (until the
/// object changes again).
pub const MAX_RETRIES: u32 = 5;

/// What the controller has done so far.
#[derive(Debug, Default)]
pub struct Stats {
    /// Successful reconciles.
    pub reconciled: AtomicU64,
    /// Failed reconciles put back with `add_rate_limited`.
    pub retried: AtomicU64,
    /// Keys given up on after [`MAX_RETRIES`] failures.
    pub gave_up: AtomicU64,
}

/// The controller: an informer, a work queue, and the state its workers keep.
pub struct Controller {
    informer: SharedIndexInformer<ConfigMap>,
    queue: RateLimitingQueue<String>,
    metrics: Arc<InMemoryMetrics>,
    /// key → the resourceVersion last reconciled; absent once the object is gone.
    observed: Arc<Mutex<BTreeMap<String, String>>>,
    stats: Arc<Stats>,
}

impl Controller {
    /// A controller over the ConfigMaps of `namespace` (all namespaces if `None`). Nothing
    /// runs until [`Controller::run`].
    pub fn new(client: Client, namespace: Option<&str>) -> Controller {
        let mut lw = RestListerWatcher::<ConfigMap>::for_type(client);
        if let Some(ns) = namespace {
            lw = lw.namespace(ns);
        }
        let informer = SharedIndexInformer::builder(Arc::new(lw))
            .name("configmaps")
            .build();
        let metrics = Arc::new(InMemoryMetrics::new("configmap-controller"));
        let queue = RateLimitingQueue::with_default_limiter(
            QueueConfig::new().metrics(Arc::clone(&metrics) as _),
        );
        // The handlers only enqueue keys: every change, deletions included, becomes "look
        // at this key again".
        let (q_add, q_update, q_delete) = (queue.clone(), queue.clone(), queue.clone());
        informer.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |cm: &Arc<ConfigMap>, _| q_add.add(key_of(&**cm)))
                .on_update(move |_, cm: &Arc<ConfigMap>| q_update.add(key_of(&**cm)))
                .on_delete(move |d: &DeleteEvent<ConfigMap>| match d {
                    DeleteEvent::Object(cm) => q_delete.add(key_of(&**cm)),
                    DeleteEvent::DeletedFinalStateUnknown { key, .. } => q_delete.add(key.clone()),
                }),
        );
        Controller {
            informer,
            queue,
            metrics,
            observed: Arc::new(Mutex::new(BTreeMap::new())),
            stats: Arc::new(Stats::default()),
        }
    }

    /// The informer (for `has_synced` and its lister).
    pub fn informer(&self) -> &SharedIndexInformer<ConfigMap> {
        &self.informer
    }

    /// key → resourceVersion of everything reconciled and still present.
    pub fn observed(&self) -> BTreeMap<String, String> {
        self.observed.lock().clone()
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The work queue's metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.metrics.metrics_text()
    }

    /// Starts the informer, waits for its cache (up to `sync_timeout`), runs `workers`
    /// workers until `stop` completes, then drains the queue and stops the informer.
    ///
    /// # Errors
    /// If the cache did not sync in time.
    pub async fn run(
        &self,
        workers: usize,
        sync_timeout: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), String> {
        self.informer.start();
        if !wait_for_cache_sync(&[&self.informer], sync_timeout).await {
            self.informer.shutdown().await;
            return Err(format!(
                "the ConfigMap cache did not sync within {sync_timeout:?}"
            ));
        }
        let mut tasks = Vec::new();
        for _ in 0..workers.max(1) {
            let worker = Worker {
                queue: self.queue.clone(),
                lister: self.informer.lister(),
                observed: Arc::clone(&self.observed),
                stats: Arc::clone(&self.stats),
            };
            tasks.push(tokio::spawn(worker.run()));
        }
        stop.await;
        self.informer.shutdown().await;
        self.queue.shut_down_with_drain().await;
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    }
}

/// The key of an object: `namespace/name`.
fn key_of(obj: &impl KubeObject) -> String {
    client::cache::object_key(obj)
}

/// One worker: takes keys and reconciles them.
struct Worker {
    queue: RateLimitingQueue<String>,
    lister: Lister<ConfigMap>,
    observed: Arc<Mutex<BTreeMap<String, String>>>,
    stats: Arc<Stats>,
}

impl Worker {
    async fn run(self) {
        // `None`: the queue was shut down and is empty.
        while let Some(key) = self.queue.get().await {
            match self.reconcile(&key) {
                Ok(()) => {
                    self.stats.reconciled.fetch_add(1, Ordering::Relaxed);
                    self.queue.forget(&key);
                }
                Err(why) if self.queue.num_requeues(&key) < MAX_RETRIES => {
                    eprintln!("reconcile {key} failed ({why}); retrying");
                    self.stats.retried.fetch_add(1, Ordering::Relaxed);
                    self.queue.add_rate_limited(key.clone());
                }
                Err(why) => {
                    eprintln!("reconcile {key} failed ({why}); giving up");
                    self.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                    self.queue.forget(&key);
                }
            }
            self.queue.done(&key);
        }
    }

    /// Brings the controller's view of `key` in line with the cache.
    fn reconcile(&self, key: &str) -> Result<(), String> {
        let (namespace, name) = match key.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, key),
        };
        let Some(cm) = self.lister.get(namespace, name) else {
            // Deleted: forget it.
            self.observed.lock().remove(key);
            return Ok(());
        };
        let failures_wanted: u32 = cm
            .data
            .as_ref()
            .and_then(|d| d.get("fail"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if self.queue.num_requeues(&key.to_string()) < failures_wanted {
            return Err(format!("asked to fail {failures_wanted} times"));
        }
        let rv = cm.resource_version().unwrap_or_default().to_string();
        self.observed.lock().insert(key.to_string(), rv);
        Ok(())
    }
}

/// `--name value` from the command line.
fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
        if let Some(v) = a.strip_prefix(&format!("{name}=")) {
            return Some(v.to_string());
        }
    }
    None
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = match arg("--server") {
        Some(url) => Config::new(&url)?,
        None => Config::infer()?,
    };
    let client = Client::new(config)?;
    let namespace = arg("--namespace");
    let seconds: Option<u64> = arg("--seconds").and_then(|s| s.parse().ok());
    let controller = Controller::new(client, namespace.as_deref());
    let stop = async move {
        match seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    controller.run(2, Duration::from_secs(60), stop).await?;
    let s = controller.stats();
    println!(
        "reconciled {} times, {} retries, gave up {} times; {} ConfigMaps observed",
        s.reconciled.load(Ordering::Relaxed),
        s.retried.load(Ordering::Relaxed),
        s.gave_up.load(Ordering::Relaxed),
        controller.observed().len()
    );
    print!("{}", controller.metrics_text());
    Ok(())
}
