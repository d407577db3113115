//! The ResourceQuota controller (kube-controller-manager's `resourcequota` controller):
//! every ResourceQuota's status says what it limits (`status.hard`, a copy of `spec.hard`)
//! and how much of that its namespace uses (`status.used`).
//!
//! The API server's quota admission charges each admitted create to `status.used` at once,
//! and refuses creates while a quota has no `status.hard`; this controller fills the status
//! in, releases what deleted and finished objects held, and recomputes everything
//! authoritatively from time to time.
//!
//! Data flow:
//! - **Which objects count.** Every name in `spec.hard` has a [`Source`] ([`source_of`]):
//!   pods for `pods`, `count/pods` and the compute names (`cpu`, `requests.*`, `limits.*`,
//!   …), services for `services*`, claims for `persistentvolumeclaims`, `requests.storage`
//!   and the per-storage-class names, and so on; `count/R[.G]` for any other resource is
//!   listed through the API, in the version discovery prefers (cached for 30 s).
//!   Pods, services, config maps, secrets, claims, replication controllers and quotas come
//!   from shared informers (config maps and secrets cached as metadata only).
//! - **Queueing.** The quota informer puts a quota's `namespace/name` in one of two
//!   rate-limited work queues: the *missing-usage* queue, served first in effect by its own
//!   workers, when the quota's status lacks its limits or a usage figure (a new quota),
//!   else the main queue — on an add, on a change of its spec, and when its `status.hard`
//!   differs from `spec.hard`. Its own status writes (and admission's) do not queue it.
//!   **Replenishment**: a pod deleted, or one that finished (phase `Succeeded`/`Failed`),
//!   and a service, config map, secret, claim, replication controller or quota deleted (or
//!   a service or claim whose usage changed) queues every quota of that namespace that
//!   limits something of that kind. Every `resync_period` all quotas are queued again.
//! - **Sync.** A worker reads the quota from the cache, sums [`api::quota::usage`] over
//!   the objects of each source in the namespace that [`api::quota::scopes_match`] admits,
//!   keeps the names of `spec.hard` ([`calculate_used`]; a name nothing uses is `0`), and,
//!   only when the status differs ([`status_outdated`], comparing quantities by value),
//!   writes `status: {hard: spec.hard, used}` through the `status` subresource with the
//!   cached resourceVersion. A conflict (admission charged something meanwhile) or any
//!   other failure puts the key back with the queue's per-key backoff. A source whose
//!   objects could not be listed keeps its previous figures and fails the sync after the
//!   others are written.
//!
//! Pods stuck terminating past their grace period no longer count, as in Kubernetes
//! ([`pod_charged`]).

use crate::controller_utils::{update_status, ControllerError, WallClock};
use crate::discovery::{parse_group_version, preferred_resource_lists, resource_entries};
use api::quota::{self, ResourceList};
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory,
};
use client::clock::RealClock;
use client::object::KubeObject;
use client::rest::resource::ApiResource;
use client::rest::{Api, Client, ListParams};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use client::LabelSelector;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Quotas synced at once per queue (kube-controller-manager's
/// `--concurrent-resource-quota-syncs` default).
pub const DEFAULT_WORKERS: usize = 5;

/// How often every quota is recomputed (kube-controller-manager's
/// `--resource-quota-sync-period` default).
pub const DEFAULT_RESYNC_PERIOD: Duration = Duration::from_secs(300);

/// How long discovery's answer is trusted before it is read again.
const DISCOVERY_TTL: Duration = Duration::from_secs(30);

/// How soon discovery is read again for a resource it did not name (one just installed).
const DISCOVERY_MISS_REFRESH: Duration = Duration::from_secs(5);

/// The name under which the config-map and secret informers keep metadata only.
const METADATA_ONLY: &str = "resource-quota-metadata-only";

/// How the controller runs, with kube-controller-manager's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceQuotaConfig {
    /// Quotas synced at once, for each of the two queues (`--concurrent-resource-quota-syncs`,
    /// 5); at least one.
    pub workers: usize,
    /// How often every quota is queued for a full recomputation
    /// (`--resource-quota-sync-period`, 5 min); zero turns the full resync off.
    pub resync_period: Duration,
}

impl Default for ResourceQuotaConfig {
    fn default() -> Self {
        ResourceQuotaConfig {
            workers: DEFAULT_WORKERS,
            resync_period: DEFAULT_RESYNC_PERIOD,
        }
    }
}

/// Where the usage of a quota resource name comes from: the kind of object whose
/// [`api::quota::usage`] carries it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Pods (`pods`, `count/pods`, `cpu`, `memory`, `ephemeral-storage`, `hugepages-*`,
    /// `requests.*` but storage, `limits.*`).
    Pods,
    /// Services (`services`, `services.loadbalancers`, `services.nodeports`,
    /// `count/services`).
    Services,
    /// ConfigMaps (`configmaps`, `count/configmaps`).
    ConfigMaps,
    /// Secrets (`secrets`, `count/secrets`).
    Secrets,
    /// PersistentVolumeClaims (`persistentvolumeclaims`, `count/persistentvolumeclaims`,
    /// `requests.storage`, `CLASS.storageclass.storage.k8s.io/…`).
    PersistentVolumeClaims,
    /// ReplicationControllers (`replicationcontrollers`, `count/replicationcontrollers`).
    ReplicationControllers,
    /// ResourceQuotas (`resourcequotas`, `count/resourcequotas`).
    ResourceQuotas,
    /// Any other resource, counted by `count/R` (core group) or `count/R.G`, listed
    /// through the API.
    Other {
        /// The API group (`""` for the core group).
        group: String,
        /// The resource (plural name).
        resource: String,
    },
}

impl Source {
    /// `(group, resource)` as [`api::quota::usage`] and [`api::quota::scopes_match`] take
    /// them.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Source::Pods => ("", "pods"),
            Source::Services => ("", "services"),
            Source::ConfigMaps => ("", "configmaps"),
            Source::Secrets => ("", "secrets"),
            Source::PersistentVolumeClaims => ("", "persistentvolumeclaims"),
            Source::ReplicationControllers => ("", "replicationcontrollers"),
            Source::ResourceQuotas => ("", "resourcequotas"),
            Source::Other { group, resource } => (group, resource),
        }
    }

    /// The core resource this controller has an informer for, by its plural name.
    fn cached(resource: &str) -> Option<Source> {
        Some(match resource {
            "pods" => Source::Pods,
            "services" => Source::Services,
            "configmaps" => Source::ConfigMaps,
            "secrets" => Source::Secrets,
            "persistentvolumeclaims" => Source::PersistentVolumeClaims,
            "replicationcontrollers" => Source::ReplicationControllers,
            "resourcequotas" => Source::ResourceQuotas,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Source {
    /// `resource` or `resource.group`, as Kubernetes names a group-resource.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group_resource() {
            ("", r) => f.write_str(r),
            (g, r) => write!(f, "{r}.{g}"),
        }
    }
}

/// The objects whose usage the quota resource `name` sums; `None` for a name no kind of
/// object carries (its usage is always zero).
pub fn source_of(name: &str) -> Option<Source> {
    if let Some(rest) = name.strip_prefix("count/") {
        let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
        if resource.is_empty() {
            return None;
        }
        if group.is_empty() {
            if let Some(s) = Source::cached(resource) {
                return Some(s);
            }
        }
        return Some(Source::Other {
            group: group.to_string(),
            resource: resource.to_string(),
        });
    }
    if let Some(s) = Source::cached(name) {
        return Some(s);
    }
    if name == "requests.storage" || name.contains(".storageclass.storage.k8s.io/") {
        return Some(Source::PersistentVolumeClaims);
    }
    if name == "services.loadbalancers" || name == "services.nodeports" {
        return Some(Source::Services);
    }
    if matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("requests.")
        || name.starts_with("limits.")
        || name.starts_with("hugepages-")
    {
        return Some(Source::Pods);
    }
    None
}

/// What `objects` (all of `source`, in one namespace) use against a quota with `spec`
/// (its JSON `spec`, for the scopes): the sum of [`api::quota::usage`] over the objects
/// [`api::quota::scopes_match`] admits, every name `usage` gives.
pub fn source_usage(spec: Option<&Value>, source: &Source, objects: &[Value]) -> ResourceList {
    let (group, resource) = source.group_resource();
    let mut total = ResourceList::new();
    for obj in objects {
        if quota::scopes_match(spec, group, resource, obj) {
            quota::add(&mut total, &quota::usage(group, resource, obj));
        }
    }
    total
}

/// `status.used` for the quota resource `names` (those of `spec.hard`), given the usage of
/// each source that could be read (`by_source`, from [`source_usage`]) and the quota's
/// current `status.used` (`previous`): each name takes the figure of its source (`0` when
/// nothing uses it, or no kind of object carries it); a name whose source could not be
/// read keeps its previous figure, or is left out if it had none.
pub fn calculate_used<'a>(
    names: impl IntoIterator<Item = &'a str>,
    by_source: &BTreeMap<Source, ResourceList>,
    previous: &ResourceList,
) -> ResourceList {
    let mut used = ResourceList::new();
    for name in names {
        let figure = match source_of(name) {
            None => Some(0),
            Some(source) => match by_source.get(&source) {
                Some(usage) => Some(usage.get(name).copied().unwrap_or(0)),
                None => previous.get(name).copied(),
            },
        };
        if let Some(figure) = figure {
            used.insert(name.to_string(), figure);
        }
    }
    used
}

/// A `{name: quantity}` map read as amounts ([`api::quota::amount`]); `None` if a quantity
/// does not parse.
fn amounts(map: &BTreeMap<String, Quantity>) -> Option<ResourceList> {
    map.iter()
        .map(|(k, v)| Some((k.clone(), quota::amount(k, &v.0)?)))
        .collect()
}

/// Whether two `{name: quantity}` maps say the same: the same names, each with the same
/// text or the same amount (`"1000m"` is `"1"`).
pub fn same_quantities(a: &BTreeMap<String, Quantity>, b: &BTreeMap<String, Quantity>) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, va)| {
            b.get(k).is_some_and(|vb| {
                va.0 == vb.0
                    || quota::amount(k, &va.0).is_some_and(|x| quota::amount(k, &vb.0) == Some(x))
            })
        })
}

/// Whether a quota whose status is `status` must be written to say `hard` (its
/// `spec.hard`) and `used`: its `status.hard` or `status.used` says something else
/// (compared by value; an absent map is an empty one).
pub fn status_outdated(
    status: Option<&ResourceQuotaStatus>,
    hard: &BTreeMap<String, Quantity>,
    used: &ResourceList,
) -> bool {
    let empty = BTreeMap::new();
    let status_hard = status.and_then(|s| s.hard.as_ref()).unwrap_or(&empty);
    let status_used = status.and_then(|s| s.used.as_ref()).unwrap_or(&empty);
    !same_quantities(status_hard, hard) || amounts(status_used).as_ref() != Some(used)
}

/// Whether a quota's status lacks what only this controller fills in: its `status.hard`
/// differs from its `spec.hard`, or a name of `spec.hard` has no `status.used` figure.
/// Such a quota goes to the missing-usage queue.
pub fn status_incomplete(rq: &ResourceQuota) -> bool {
    let empty = BTreeMap::new();
    let hard = spec_hard(rq).unwrap_or(&empty);
    let status = rq.status.as_ref();
    let status_hard = status.and_then(|s| s.hard.as_ref()).unwrap_or(&empty);
    let status_used = status.and_then(|s| s.used.as_ref()).unwrap_or(&empty);
    !same_quantities(hard, status_hard) || hard.keys().any(|k| !status_used.contains_key(k))
}

/// Whether `rq`'s `status.hard` differs from its `spec.hard`.
fn hard_outdated(rq: &ResourceQuota) -> bool {
    let empty = BTreeMap::new();
    let hard = spec_hard(rq).unwrap_or(&empty);
    let status_hard = rq
        .status
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .unwrap_or(&empty);
    !same_quantities(hard, status_hard)
}

fn spec_hard(rq: &ResourceQuota) -> Option<&BTreeMap<String, Quantity>> {
    rq.spec.as_ref().and_then(|s| s.hard.as_ref())
}

/// Whether a pod is charged to quota at `now`: it has not finished (phase `Succeeded` or
/// `Failed`), and it is not being deleted past its grace period (a pod stuck terminating,
/// say on a lost node, does not keep its owner from replacing it), as Kubernetes'
/// `QuotaV1Pod` decides.
pub fn pod_charged(pod: &Pod, now: Timestamp) -> bool {
    let meta = &pod.metadata;
    if let (Some(deleted), Some(grace)) =
        (&meta.deletion_timestamp, meta.deletion_grace_period_seconds)
    {
        let deadline = deleted
            .0
            .checked_add(SignedDuration::from_secs(grace))
            .unwrap_or(deleted.0);
        if now > deadline {
            return false;
        }
    }
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The namespaced resources that can be listed in `lists` (discovery documents, each
/// group in one version), by `(group, resource)`.
pub fn listable_resources(lists: &[Value]) -> HashMap<(String, String), ApiResource> {
    let mut out = HashMap::new();
    for list in lists {
        let Ok((group, version)) = parse_group_version(list["groupVersion"].as_str().unwrap_or(""))
        else {
            continue;
        };
        for r in resource_entries(list) {
            if r.plural.contains('/') || !r.namespaced || !r.verbs.contains(&"list") {
                continue;
            }
            out.entry((group.clone(), r.plural.to_string()))
                .or_insert_with(|| {
                    ApiResource::new(
                        group.clone(),
                        version.clone(),
                        r.plural.to_string(),
                        r.kind.to_string(),
                        true,
                    )
                });
        }
    }
    out
}

/// Why a quota could not be synced (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
enum SyncError {
    /// A request failed (409 Conflict when the quota changed since it was cached).
    #[error(transparent)]
    Api(#[from] client::rest::Error),
    /// The server's discovery could not say where a counted resource is served.
    #[error("discovering {0}: the group's resource list could not be read ({1})")]
    Discovery(String, String),
    /// Some sources could not be read (their figures were kept).
    #[error("calculating usage: {}", .0.join("; "))]
    Usage(Vec<String>),
}

/// One informer and the controller's handler on it.
trait Watched: Send + Sync {
    fn synced(&self) -> bool;
    fn unregister(&self);
}

struct Handled<K: KubeObject> {
    informer: SharedIndexInformer<K>,
    registration: Registration,
}

impl<K: KubeObject> Watched for Handled<K> {
    fn synced(&self) -> bool {
        self.informer.has_synced()
    }

    fn unregister(&self) {
        self.informer.remove_event_handler(&self.registration);
    }
}

fn watch<K: KubeObject>(
    informer: &SharedIndexInformer<K>,
    handler: ResourceEventHandlerFuncs<K>,
) -> Box<dyn Watched> {
    let registration = informer.add_event_handler(handler);
    Box::new(Handled {
        informer: informer.clone(),
        registration,
    })
}

/// The ResourceQuota controller. Build it before the informer factory starts, then await
/// [`ResourceQuotaController::run`]; dropping the controller unregisters its handlers and
/// shuts its queues down.
pub struct ResourceQuotaController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    watched: Vec<Box<dyn Watched>>,
    workers: usize,
    resync_period: Duration,
}

impl std::fmt::Debug for ResourceQuotaController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceQuotaController")
            .field("workers", &self.workers)
            .field("resync_period", &self.resync_period)
            .field("queue", &self.shared.queue.len())
            .field("missing_usage", &self.shared.missing_usage.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    quotas: Lister<ResourceQuota>,
    pods: Lister<Pod>,
    services: Lister<Service>,
    configmaps: Lister<ConfigMap>,
    secrets: Lister<Secret>,
    claims: Lister<PersistentVolumeClaim>,
    controllers: Lister<ReplicationController>,
    /// Quotas to recompute.
    queue: RateLimitingQueue<String>,
    /// Quotas whose status lacks limits or figures (new ones), so that admission can
    /// start charging them: served by workers of their own.
    missing_usage: RateLimitingQueue<String>,
    discovery: ResourceDiscovery,
    /// Wall time, for pods past their deletion grace.
    wall: WallClock,
}

impl ResourceQuotaController {
    /// A controller keeping quota statuses through `client` as `config` says, with its
    /// informers from `factory`.
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queues spawn tasks).
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        config: ResourceQuotaConfig,
    ) -> Result<ResourceQuotaController, ControllerError> {
        let quotas = factory.informer::<ResourceQuota>()?;
        let pods = factory.informer::<Pod>()?;
        let services = factory.informer::<Service>()?;
        let claims = factory.informer::<PersistentVolumeClaim>()?;
        let controllers = factory.informer::<ReplicationController>()?;
        // Only counted: their data is not worth caching.
        let configmaps = factory.informer_with::<ConfigMap>(
            factory
                .informer_options()
                .transform(METADATA_ONLY, |cm: Arc<ConfigMap>| {
                    Arc::new(ConfigMap {
                        metadata: cm.metadata.clone(),
                        ..Default::default()
                    })
                }),
        )?;
        let secrets = factory.informer_with::<Secret>(factory.informer_options().transform(
            METADATA_ONLY,
            |s: Arc<Secret>| {
                Arc::new(Secret {
                    metadata: s.metadata.clone(),
                    type_: s.type_.clone(),
                    ..Default::default()
                })
            },
        ))?;
        let shared = Arc::new(Shared {
            discovery: ResourceDiscovery::new(client.clone()),
            wall: WallClock::new(RealClock::shared()),
            client,
            quotas: quotas.lister(),
            pods: pods.lister(),
            services: services.lister(),
            configmaps: configmaps.lister(),
            secrets: secrets.lister(),
            claims: claims.lister(),
            controllers: controllers.lister(),
            queue: RateLimitingQueue::with_default_limiter(QueueConfig::new()),
            missing_usage: RateLimitingQueue::with_default_limiter(QueueConfig::new()),
        });
        let watched = vec![
            watch(&quotas, quota_handler(&shared)),
            watch(&pods, pod_handler(&shared)),
            watch(
                &services,
                usage_change_handler::<Service>(&shared, Source::Services),
            ),
            watch(
                &claims,
                usage_change_handler::<PersistentVolumeClaim>(
                    &shared,
                    Source::PersistentVolumeClaims,
                ),
            ),
            watch(&configmaps, delete_handler(&shared, Source::ConfigMaps)),
            watch(&secrets, delete_handler(&shared, Source::Secrets)),
            watch(
                &controllers,
                delete_handler(&shared, Source::ReplicationControllers),
            ),
        ];
        Ok(ResourceQuotaController {
            shared,
            factory: factory.clone(),
            watched,
            workers: config.workers.max(1),
            resync_period: config.resync_period,
        })
    }

    /// Starts the factory's informers (if not yet), waits for the controller's caches,
    /// then syncs quotas — `workers` workers on each queue, and every `resync_period` all
    /// quotas queued again — until the controller is dropped.
    pub async fn run(&self) {
        self.factory.start();
        let watched = &self.watched;
        let synced = || watched.iter().all(|w| w.synced());
        wait_for_cache_sync(&[&synced], Duration::MAX).await;
        tracing::info!(
            workers = self.workers,
            resync_period = ?self.resync_period,
            "starting the resourcequota controller"
        );
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            tasks.spawn(Arc::clone(&self.shared).worker(false));
            tasks.spawn(Arc::clone(&self.shared).worker(true));
        }
        if !self.resync_period.is_zero() {
            tasks.spawn(Arc::clone(&self.shared).resync(self.resync_period));
        }
        while tasks.join_next().await.is_some() {}
    }
}

impl Drop for ResourceQuotaController {
    fn drop(&mut self) {
        for w in &self.watched {
            w.unregister();
        }
        self.shared.queue.shut_down();
        self.shared.missing_usage.shut_down();
    }
}

/// Quotas: added, spec changed, or limits not yet in the status.
fn quota_handler(shared: &Arc<Shared>) -> ResourceEventHandlerFuncs<ResourceQuota> {
    let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
    ResourceEventHandlerFuncs::new()
        .on_add(move |rq: &Arc<ResourceQuota>, _| s1.enqueue_quota(rq))
        .on_update(move |old: &Arc<ResourceQuota>, cur: &Arc<ResourceQuota>| {
            // Status changes are this controller's or admission's own: not worth a full
            // recomputation (the periodic resync corrects drift).
            if old.spec != cur.spec || hard_outdated(cur) {
                s2.enqueue_quota(cur);
            }
        })
        .on_delete(move |d: &DeleteEvent<ResourceQuota>| {
            let rq = d.object();
            s3.queue.add(object_key(&**rq));
            s3.replenish(rq.metadata.namespace.as_deref(), &Source::ResourceQuotas);
        })
}

/// Pods: a pod deleted, or no longer charged (finished), releases its usage.
fn pod_handler(shared: &Arc<Shared>) -> ResourceEventHandlerFuncs<Pod> {
    let (s1, s2) = (shared.clone(), shared.clone());
    ResourceEventHandlerFuncs::new()
        .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| {
            let now = s1.wall.now_precise();
            if pod_charged(old, now) && !pod_charged(cur, now) {
                s1.replenish(cur.metadata.namespace.as_deref(), &Source::Pods);
            }
        })
        .on_delete(move |d: &DeleteEvent<Pod>| {
            s2.replenish(d.object().metadata.namespace.as_deref(), &Source::Pods);
        })
}

/// Services and claims: deleted, or updated so that they use something else (a service's
/// type, a claim's size or class).
fn usage_change_handler<K>(shared: &Arc<Shared>, source: Source) -> ResourceEventHandlerFuncs<K>
where
    K: KubeObject + serde::Serialize,
{
    let (s1, s2) = (shared.clone(), shared.clone());
    let (src1, src2) = (source.clone(), source);
    ResourceEventHandlerFuncs::new()
        .on_update(move |old: &Arc<K>, cur: &Arc<K>| {
            let (group, resource) = src1.group_resource();
            let usage = |o: &K| to_json(o).map(|v| quota::usage(group, resource, &v));
            if usage(old) != usage(cur) {
                s1.replenish(cur.namespace(), &src1);
            }
        })
        .on_delete(move |d: &DeleteEvent<K>| s2.replenish(d.object().namespace(), &src2))
}

/// Kinds that are only counted: a deletion releases one.
fn delete_handler<K: KubeObject>(
    shared: &Arc<Shared>,
    source: Source,
) -> ResourceEventHandlerFuncs<K> {
    let s = shared.clone();
    ResourceEventHandlerFuncs::new()
        .on_delete(move |d: &DeleteEvent<K>| s.replenish(d.object().namespace(), &source))
}

/// `obj` as JSON, as [`api::quota`] reads objects; `None` (logged) if it cannot be encoded.
fn to_json<T: serde::Serialize + ?Sized>(obj: &T) -> Option<Value> {
    match serde_json::to_value(obj) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "encoding an object for quota usage failed; not counted");
            None
        }
    }
}

/// The cached objects of `lister` in `namespace`, as JSON.
fn cached<K: KubeObject + serde::Serialize>(lister: &Lister<K>, namespace: &str) -> Vec<Value> {
    lister
        .namespaced(namespace)
        .list(&LabelSelector::everything())
        .iter()
        .filter_map(|o| to_json(&**o))
        .collect()
}

impl Shared {
    /// Queues `rq`: in the missing-usage queue if its status lacks limits or figures.
    fn enqueue_quota(&self, rq: &ResourceQuota) {
        let key = object_key(rq);
        if status_incomplete(rq) {
            self.missing_usage.add(key);
        } else {
            self.queue.add(key);
        }
    }

    /// Queues every quota of `namespace` that limits something `source` carries.
    fn replenish(&self, namespace: Option<&str>, source: &Source) {
        let Some(ns) = namespace.filter(|ns| !ns.is_empty()) else {
            return;
        };
        for rq in self
            .quotas
            .namespaced(ns)
            .list(&LabelSelector::everything())
        {
            let limits_it = spec_hard(&rq)
                .is_some_and(|hard| hard.keys().any(|n| source_of(n).as_ref() == Some(source)));
            if limits_it {
                tracing::debug!(quota = %object_key(&*rq), %source, "replenishing quota");
                self.queue.add(object_key(&*rq));
            }
        }
    }

    /// Queues every quota for a full recomputation every `period`, until the queue shuts
    /// down.
    async fn resync(self: Arc<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            if self.queue.shutting_down() {
                return;
            }
            let all = self.quotas.list(&LabelSelector::everything());
            tracing::debug!(
                quotas = all.len(),
                "queueing every resource quota for a full recalculation"
            );
            for rq in all {
                self.queue.add_rate_limited(object_key(&*rq));
            }
        }
    }

    async fn worker(self: Arc<Self>, missing_usage: bool) {
        let queue = if missing_usage {
            &self.missing_usage
        } else {
            &self.queue
        };
        while let Some(key) = queue.get().await {
            match self.sync(&key).await {
                Ok(()) => queue.forget(&key),
                Err(SyncError::Api(e)) if e.is_conflict() => {
                    tracing::debug!(%key, "the quota changed meanwhile; retrying with backoff");
                    queue.add_rate_limited(key.clone());
                }
                Err(e) => {
                    tracing::warn!(%key, error = %e, "syncing the resource quota failed; retrying with backoff");
                    queue.add_rate_limited(key.clone());
                }
            }
            queue.done(&key);
        }
    }

    /// Recomputes the usage of quota `key` and writes its status if it says something
    /// else.
    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        let (namespace, name) = match split_key(key) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(%key, error = %e, "dropping a malformed quota key");
                return Ok(());
            }
        };
        let Some(rq) = self.quotas.get(namespace, name) else {
            return Ok(());
        };
        let namespace = namespace.unwrap_or("");
        let spec = rq.spec.as_ref().and_then(to_json);
        let hard = spec_hard(&rq).cloned().unwrap_or_default();
        let sources: BTreeSet<Source> = hard.keys().filter_map(|n| source_of(n)).collect();
        let mut by_source = BTreeMap::new();
        let mut failures = Vec::new();
        for source in sources {
            match self.objects(&source, namespace).await {
                Ok(objects) => {
                    let usage = source_usage(spec.as_ref(), &source, &objects);
                    by_source.insert(source, usage);
                }
                Err(e) => failures.push(format!("{source}: {e}")),
            }
        }
        let previous = rq
            .status
            .as_ref()
            .and_then(|s| s.used.as_ref())
            .map(|used| {
                used.iter()
                    .filter_map(|(k, v)| Some((k.clone(), quota::amount(k, &v.0)?)))
                    .collect()
            })
            .unwrap_or_default();
        let used = calculate_used(hard.keys().map(String::as_str), &by_source, &previous);
        if status_outdated(rq.status.as_ref(), &hard, &used) {
            let mut updated = (*rq).clone();
            updated.status = Some(ResourceQuotaStatus {
                hard: Some(hard),
                used: Some(quantities(&used)),
            });
            match update_status(&self.client, &updated).await {
                Ok(_) => tracing::debug!(%key, "resource quota status updated"),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Usage(failures))
        }
    }

    /// The objects of `source` in `namespace`, as JSON: from the caches, or listed through
    /// the API for other resources (none if the server does not serve the resource).
    async fn objects(&self, source: &Source, namespace: &str) -> Result<Vec<Value>, SyncError> {
        Ok(match source {
            Source::Pods => {
                let now = self.wall.now_precise();
                self.pods
                    .namespaced(namespace)
                    .list(&LabelSelector::everything())
                    .iter()
                    .filter(|p| pod_charged(p, now))
                    .filter_map(|p| to_json(&**p))
                    .collect()
            }
            Source::Services => cached(&self.services, namespace),
            Source::ConfigMaps => cached(&self.configmaps, namespace),
            Source::Secrets => cached(&self.secrets, namespace),
            Source::PersistentVolumeClaims => cached(&self.claims, namespace),
            Source::ReplicationControllers => cached(&self.controllers, namespace),
            Source::ResourceQuotas => cached(&self.quotas, namespace),
            Source::Other { group, resource } => {
                let Some(served) = self.discovery.resolve(group, resource).await? else {
                    return Ok(Vec::new());
                };
                let api: Api<Value> = Api::namespaced(self.client.clone(), served, namespace);
                match api.list_all(&ListParams::default()).await {
                    Ok(list) => list.items,
                    // No longer served since discovery was read.
                    Err(e) if e.is_not_found() => Vec::new(),
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }
}

/// `used` as a status map, written by [`api::quota::format_list`].
fn quantities(used: &ResourceList) -> BTreeMap<String, Quantity> {
    match quota::format_list(used) {
        Value::Object(m) => m
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, Quantity(s))),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Where the server serves resources that are not cached, from its discovery documents,
/// read again once [`DISCOVERY_TTL`] old (or [`DISCOVERY_MISS_REFRESH`] old, for a
/// resource they did not name).
struct ResourceDiscovery {
    client: Client,
    cache: Mutex<Option<DiscoveryCache>>,
}

struct DiscoveryCache {
    read_at: Instant,
    resources: HashMap<(String, String), ApiResource>,
}

impl ResourceDiscovery {
    fn new(client: Client) -> ResourceDiscovery {
        ResourceDiscovery {
            client,
            cache: Mutex::new(None),
        }
    }

    /// Where `resource` of `group` is listed, in its group's preferred version; `None`
    /// if the server does not serve it (namespaced and listable).
    async fn resolve(&self, group: &str, resource: &str) -> Result<Option<ApiResource>, SyncError> {
        let key = (group.to_string(), resource.to_string());
        if let Some(cache) = &*self.cache.lock() {
            let age = cache.read_at.elapsed();
            if age < DISCOVERY_TTL {
                if let Some(found) = cache.resources.get(&key) {
                    return Ok(Some(found.clone()));
                }
                if age < DISCOVERY_MISS_REFRESH {
                    return Ok(None);
                }
            }
        }
        let read = preferred_resource_lists(&self.client).await?;
        let resources = listable_resources(&read.lists);
        let found = resources.get(&key).cloned();
        *self.cache.lock() = Some(DiscoveryCache {
            read_at: Instant::now(),
            resources,
        });
        if found.is_none() {
            // Not named: an error if its group's list could not be read, else not served.
            if let Some((gv, why)) = read
                .failed
                .iter()
                .find(|(gv, _)| parse_group_version(gv).is_ok_and(|(g, _)| g == group))
            {
                return Err(SyncError::Discovery(
                    format!("{resource} in {gv}"),
                    why.clone(),
                ));
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodStatus, ResourceQuotaSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    fn pod(cpu: Option<&str>, phase: Option<&str>) -> Value {
        let resources = match cpu {
            Some(c) => json!({"requests": {"cpu": c}}),
            None => json!({}),
        };
        let mut p = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}});
        if let Some(phase) = phase {
            p["status"] = json!({"phase": phase});
        }
        p
    }

    #[test]
    fn every_quota_name_has_the_kind_of_object_that_carries_it() {
        for name in [
            "pods",
            "count/pods",
            "cpu",
            "memory",
            "ephemeral-storage",
            "requests.cpu",
            "limits.memory",
            "requests.nvidia.com/gpu",
            "hugepages-2Mi",
        ] {
            assert_eq!(source_of(name), Some(Source::Pods), "{name}");
        }
        for name in [
            "services",
            "count/services",
            "services.nodeports",
            "services.loadbalancers",
        ] {
            assert_eq!(source_of(name), Some(Source::Services), "{name}");
        }
        for name in [
            "persistentvolumeclaims",
            "count/persistentvolumeclaims",
            "requests.storage",
            "fast.storageclass.storage.k8s.io/requests.storage",
            "fast.storageclass.storage.k8s.io/persistentvolumeclaims",
        ] {
            assert_eq!(
                source_of(name),
                Some(Source::PersistentVolumeClaims),
                "{name}"
            );
        }
        assert_eq!(source_of("count/configmaps"), Some(Source::ConfigMaps));
        assert_eq!(source_of("secrets"), Some(Source::Secrets));
        assert_eq!(
            source_of("replicationcontrollers"),
            Some(Source::ReplicationControllers)
        );
        assert_eq!(
            source_of("count/resourcequotas"),
            Some(Source::ResourceQuotas)
        );
        assert_eq!(
            source_of("count/deployments.apps"),
            Some(Source::Other {
                group: "apps".into(),
                resource: "deployments".into()
            })
        );
        assert_eq!(
            source_of("count/widgets.example.com"),
            Some(Source::Other {
                group: "example.com".into(),
                resource: "widgets".into()
            })
        );
        assert_eq!(
            source_of("count/endpoints"),
            Some(Source::Other {
                group: String::new(),
                resource: "endpoints".into()
            })
        );
        assert_eq!(source_of("count/"), None);
        assert_eq!(source_of("example.com/foo"), None);
        assert_eq!(
            Source::Other {
                group: "apps".into(),
                resource: "deployments".into()
            }
            .to_string(),
            "deployments.apps"
        );
    }

    #[test]
    fn used_sums_what_the_namespace_uses_of_every_hard_name() {
        let spec = json!({"hard": {"pods": "10", "requests.cpu": "2", "count/configmaps": "5",
                                   "services": "3", "example.com/foo": "1"}});
        let pods = vec![
            pod(Some("100m"), None),
            pod(Some("250m"), Some("Running")),
            // Finished: releases what it asked for.
            pod(Some("1"), Some("Succeeded")),
        ];
        let configmaps = vec![
            json!({"metadata": {"name": "a"}}),
            json!({"metadata": {"name": "b"}}),
        ];
        let mut by_source = BTreeMap::new();
        by_source.insert(
            Source::Pods,
            source_usage(Some(&spec), &Source::Pods, &pods),
        );
        by_source.insert(
            Source::ConfigMaps,
            source_usage(Some(&spec), &Source::ConfigMaps, &configmaps),
        );
        by_source.insert(
            Source::Services,
            source_usage(Some(&spec), &Source::Services, &[]),
        );
        let names = [
            "pods",
            "requests.cpu",
            "count/configmaps",
            "services",
            "example.com/foo",
        ];
        let used = calculate_used(names, &by_source, &ResourceList::new());
        assert_eq!(
            quota::format_list(&used),
            json!({"pods": "2", "requests.cpu": "350m", "count/configmaps": "2",
                   "services": "0", "example.com/foo": "0"})
        );
    }

    #[test]
    fn a_source_that_could_not_be_read_keeps_its_previous_figures() {
        let by_source = BTreeMap::from([(Source::Pods, ResourceList::from([("pods".into(), 1)]))]);
        let previous = ResourceList::from([("count/deployments.apps".into(), 4)]);
        let used = calculate_used(
            ["pods", "count/deployments.apps", "count/jobs.batch"],
            &by_source,
            &previous,
        );
        assert_eq!(
            used,
            ResourceList::from([("pods".into(), 1), ("count/deployments.apps".into(), 4)])
        );
    }

    #[test]
    fn scopes_select_which_pods_count() {
        let spec = json!({"hard": {"pods": "5"}, "scopes": ["BestEffort"]});
        let pods = vec![pod(None, None), pod(Some("100m"), None), pod(None, None)];
        let usage = source_usage(Some(&spec), &Source::Pods, &pods);
        assert_eq!(usage["pods"], 2);
        // Scopes select pods only.
        let cms = vec![json!({"metadata": {"name": "a"}})];
        assert!(source_usage(Some(&spec), &Source::ConfigMaps, &cms).is_empty());
    }

    #[test]
    fn the_status_is_written_only_when_it_says_something_else() {
        let hard = q(&[("pods", "10"), ("requests.cpu", "2")]);
        let used = ResourceList::from([("pods".into(), 2), ("requests.cpu".into(), 1000)]);
        assert!(status_outdated(None, &hard, &used));
        let same = ResourceQuotaStatus {
            hard: Some(q(&[("pods", "10"), ("requests.cpu", "2000m")])),
            used: Some(q(&[("pods", "2"), ("requests.cpu", "1")])),
        };
        assert!(!status_outdated(Some(&same), &hard, &used));
        let stale_used = ResourceQuotaStatus {
            used: Some(q(&[("pods", "3"), ("requests.cpu", "1")])),
            ..same.clone()
        };
        assert!(status_outdated(Some(&stale_used), &hard, &used));
        let extra_used = ResourceQuotaStatus {
            used: Some(q(&[("pods", "2"), ("requests.cpu", "1"), ("secrets", "0")])),
            ..same.clone()
        };
        assert!(status_outdated(Some(&extra_used), &hard, &used));
        let stale_hard = ResourceQuotaStatus {
            hard: Some(q(&[("pods", "5"), ("requests.cpu", "2")])),
            ..same
        };
        assert!(status_outdated(Some(&stale_hard), &hard, &used));
        // Nothing limited, nothing to say.
        assert!(!status_outdated(
            None,
            &BTreeMap::new(),
            &ResourceList::new()
        ));
    }

    #[test]
    fn a_quota_without_limits_or_figures_in_its_status_is_incomplete() {
        let mut rq = ResourceQuota {
            metadata: ObjectMeta {
                name: Some("q".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(ResourceQuotaSpec {
                hard: Some(q(&[("pods", "10")])),
                ..Default::default()
            }),
            status: None,
        };
        assert!(status_incomplete(&rq));
        assert!(hard_outdated(&rq));
        rq.status = Some(ResourceQuotaStatus {
            hard: Some(q(&[("pods", "10")])),
            used: None,
        });
        assert!(status_incomplete(&rq));
        assert!(!hard_outdated(&rq));
        rq.status = Some(ResourceQuotaStatus {
            hard: Some(q(&[("pods", "10")])),
            used: Some(q(&[("pods", "0")])),
        });
        assert!(!status_incomplete(&rq));
    }

    #[test]
    fn finished_pods_and_pods_past_their_deletion_grace_are_not_charged() {
        let now = Timestamp::from_second(1_000).unwrap();
        let mut p = Pod::default();
        assert!(pod_charged(&p, now));
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert!(!pod_charged(&p, now));
        p.status = None;
        p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(950).unwrap()));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert!(!pod_charged(&p, now));
        p.metadata.deletion_grace_period_seconds = Some(60);
        assert!(pod_charged(&p, now));
    }

    #[test]
    fn discovery_maps_group_and_resource_to_where_it_is_listed() {
        let lists = vec![
            json!({"groupVersion": "v1", "resources": [
                {"name": "endpoints", "kind": "Endpoints", "namespaced": true, "verbs": ["list", "get"]},
                {"name": "pods/status", "kind": "Pod", "namespaced": true, "verbs": ["get"]},
                {"name": "nodes", "kind": "Node", "namespaced": false, "verbs": ["list"]}]}),
            json!({"groupVersion": "apps/v1", "resources": [
                {"name": "deployments", "kind": "Deployment", "namespaced": true, "verbs": ["list"]},
                {"name": "nolist", "kind": "NoList", "namespaced": true, "verbs": ["get"]}]}),
        ];
        let found = listable_resources(&lists);
        assert_eq!(found.len(), 2, "{found:?}");
        let d = &found[&("apps".to_string(), "deployments".to_string())];
        assert_eq!(
            d.collection_path(Some("ns")),
            "/apis/apps/v1/namespaces/ns/deployments"
        );
        assert!(found.contains_key(&(String::new(), "endpoints".to_string())));
    }

    #[test]
    fn used_is_written_as_quantities() {
        let used = ResourceList::from([("requests.cpu".into(), 1500), ("pods".into(), 3)]);
        assert_eq!(
            quantities(&used),
            q(&[("requests.cpu", "1500m"), ("pods", "3")])
        );
    }
}
