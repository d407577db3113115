//! The garbage collector (kube-controller-manager's `garbagecollector` controller): objects
//! whose owners are gone are deleted, and owners deleted in the foreground or with their
//! dependents orphaned are finished once the dependents are handled.
//!
//! Data flow: at start, the server's discovery documents name every resource that can be
//! listed, watched and deleted (events excepted); a dynamic informer per resource feeds the
//! **graph** (the graph builder): a node per object uid with its owner references, whether
//! it is being deleted and its finalizers, and the reverse index of each owner's dependents.
//! Graph changes put uids in a rate-limited work queue, and workers (after every informer
//! has synced, so the graph is whole) act through the API:
//! - **attempt to delete** an object with owners: an owner is *solid* if it exists (in the
//!   graph, or — when the graph has not seen it — as a read from the server says, matching
//!   uid), *waiting* if it is being deleted in the foreground, *dangling* otherwise. With a
//!   solid owner, references to dangling and waiting owners are removed; with waiting owners
//!   only, the object is deleted in the foreground; with dangling owners only, it is deleted
//!   (in the foreground or orphaning if it carries that finalizer, else in the background),
//!   always with its uid as a precondition;
//! - an owner being deleted with the `foregroundDeletion` finalizer has its dependents
//!   deleted in the foreground, and loses the finalizer (so the server removes it) once no
//!   dependent that blocks owner deletion is left;
//! - an owner being deleted with the `orphan` finalizer has its reference removed from every
//!   dependent, then loses the finalizer.
//!
//! The server sets those finalizers from a delete's `propagationPolicy` (Foreground, Orphan)
//! or `orphanDependents`; `Background` (kubectl's default) deletes the owner at once and
//! leaves its dependents to the first rule.

use crate::controller_utils::ControllerError;
use client::cache::{
    wait_for_cache_sync, DeleteEvent, HasSynced, ResourceEventHandlerFuncs, SharedIndexInformer,
    SharedInformerFactory,
};
use client::object::{DynamicObject, KubeObject};
use client::rest::resource::ApiResource;
use client::rest::{Client, DeleteParams, Preconditions, PropagationPolicy};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

pub use api::object::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};

/// Workers (kube-controller-manager's `--concurrent-gc-syncs` default).
pub const DEFAULT_WORKERS: usize = 20;

/// One object in the graph.
#[derive(Debug, Clone)]
struct Node {
    resource: Arc<ApiResource>,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

impl Node {
    fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    fn waiting_for_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND_FINALIZER)
    }
}

/// The ownership graph: nodes by uid, and each owner uid's dependents.
#[derive(Debug, Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

/// The metadata the graph needs from an object.
#[derive(Deserialize, Default)]
struct Partial {
    #[serde(default)]
    metadata: PartialMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PartialMeta {
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default)]
    deletion_timestamp: Option<String>,
}

/// What a work item asks.
fn attempt(uid: &str) -> String {
    format!("attempt/{uid}")
}

fn orphan(uid: &str) -> String {
    format!("orphan/{uid}")
}

/// The garbage collector. Build it, then await [`GarbageCollector::run`]; dropping the
/// `run` future stops it.
pub struct GarbageCollector {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    workers: usize,
}

impl std::fmt::Debug for GarbageCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollector")
            .field("workers", &self.workers)
            .field("nodes", &self.shared.graph.lock().nodes.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    graph: Mutex<Graph>,
    /// Every watched resource, to find an owner's from its apiVersion and kind.
    resources: Mutex<Vec<Arc<ApiResource>>>,
    queue: RateLimitingQueue<String>,
}

impl Drop for GarbageCollector {
    fn drop(&mut self) {
        self.shared.queue.shut_down();
    }
}

/// The resources the collector watches, from the server's discovery documents: every
/// resource (of each group's preferred version) that can be listed, watched and deleted,
/// subresources and events excepted.
async fn discover(client: &Client) -> Result<Vec<ApiResource>, DiscoveryError> {
    let read = crate::discovery::preferred_resource_lists(client).await?;
    if let Some((gv, why)) = read.failed.into_iter().next() {
        return Err(DiscoveryError::Group(gv, why));
    }
    let mut out = Vec::new();
    for list in &read.lists {
        let gv = list["groupVersion"].as_str().unwrap_or("");
        let Ok((group, version)) = crate::discovery::parse_group_version(gv) else {
            continue;
        };
        for r in crate::discovery::resource_entries(list) {
            let usable = ["list", "watch", "delete"]
                .iter()
                .all(|v| r.verbs.contains(v));
            if r.plural.contains('/') || !usable || r.plural == "events" {
                continue;
            }
            out.push(ApiResource::new(
                group.clone(),
                version.clone(),
                r.plural.to_string(),
                r.kind.to_string(),
                r.namespaced,
            ));
        }
    }
    Ok(out)
}

/// Why discovery gave no usable picture of the served resources.
#[derive(Debug, thiserror::Error)]
enum DiscoveryError {
    /// `/api/v1` or `/apis` could not be read.
    #[error(transparent)]
    Api(#[from] client::rest::Error),
    /// A group version's resource list could not be read.
    #[error("the resource list of {0}: {1}")]
    Group(String, String),
}

impl GarbageCollector {
    /// A collector acting with `workers` workers.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue spawns a task).
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> GarbageCollector {
        GarbageCollector {
            shared: Arc::new(Shared {
                client,
                graph: Mutex::default(),
                resources: Mutex::default(),
                queue: RateLimitingQueue::with_default_limiter(QueueConfig::new()),
            }),
            factory: factory.clone(),
            workers: workers.max(1),
        }
    }

    /// Discovers the resources, starts an informer on each, waits until all have synced,
    /// then collects until dropped.
    ///
    /// # Errors
    /// Discovery failed, or the factory cannot build informers.
    pub async fn run(&self) -> Result<(), ControllerError> {
        let resources = loop {
            match discover(&self.shared.client).await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(error = %e, "garbage collector: discovery failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut informers: Vec<SharedIndexInformer<DynamicObject>> = Vec::new();
        for r in resources {
            let resource = Arc::new(r);
            self.shared.resources.lock().push(resource.clone());
            let informer = self.factory.dynamic_informer(&resource)?;
            let (s1, s2, s3) = (
                self.shared.clone(),
                self.shared.clone(),
                self.shared.clone(),
            );
            let (r1, r2) = (resource.clone(), resource.clone());
            // The registration lives as long as the informer: the collector runs for good.
            let _registration = informer.add_event_handler(
                ResourceEventHandlerFuncs::new()
                    .on_add(move |o: &Arc<DynamicObject>, _| s1.observe(&r1, o))
                    .on_update(move |_: &Arc<DynamicObject>, o: &Arc<DynamicObject>| {
                        s2.observe(&r2, o)
                    })
                    .on_delete(move |d: &DeleteEvent<DynamicObject>| {
                        s3.forget(d.object().uid().unwrap_or(""))
                    }),
            );
            informers.push(informer);
        }
        self.factory.start();
        let synced: Vec<&dyn HasSynced> = informers.iter().map(|i| i as &dyn HasSynced).collect();
        wait_for_cache_sync(&synced, Duration::MAX).await;
        tracing::info!(
            resources = informers.len(),
            workers = self.workers,
            "starting the garbage collector"
        );
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
        Ok(())
    }
}

impl Shared {
    /// The graph builder's add/update: records the object and queues what it calls for.
    fn observe(&self, resource: &Arc<ApiResource>, obj: &DynamicObject) {
        let Some(uid) = obj.uid().map(str::to_string) else {
            return;
        };
        let meta = serde_json::from_slice::<Partial>(obj.json())
            .unwrap_or_default()
            .metadata;
        let node = Node {
            resource: resource.clone(),
            namespace: obj.namespace().map(str::to_string),
            name: obj.name().to_string(),
            owners: meta.owner_references,
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers,
        };
        let mut g = self.graph.lock();
        let old = g.nodes.insert(uid.clone(), node.clone());
        if let Some(old) = &old {
            for o in &old.owners {
                if let Some(set) = g.dependents.get_mut(&o.uid) {
                    set.remove(&uid);
                    if set.is_empty() {
                        g.dependents.remove(&o.uid);
                    }
                }
            }
        }
        for o in &node.owners {
            g.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.clone());
        }
        // An owner the graph does not hold, or one waiting for its dependents: look at it.
        let owners_changed = old.as_ref().is_none_or(|o| o.owners != node.owners);
        if owners_changed
            && node.owners.iter().any(|o| {
                g.nodes
                    .get(&o.uid)
                    .is_none_or(|owner| owner.waiting_for_dependents())
            })
        {
            self.queue.add(attempt(&uid));
        }
        if node.deleting {
            if node.has_finalizer(ORPHAN_FINALIZER) {
                self.queue.add(orphan(&uid));
            }
            if node.has_finalizer(FOREGROUND_FINALIZER) {
                self.queue.add(attempt(&uid));
                for d in g.dependents.get(&uid).into_iter().flatten() {
                    self.queue.add(attempt(d));
                }
            }
        }
    }

    /// The graph builder's delete: the object's dependents and waiting owners are looked at.
    fn forget(&self, uid: &str) {
        let mut g = self.graph.lock();
        let Some(node) = g.nodes.remove(uid) else {
            return;
        };
        for o in &node.owners {
            if let Some(set) = g.dependents.get_mut(&o.uid) {
                set.remove(uid);
                if set.is_empty() {
                    g.dependents.remove(&o.uid);
                }
            }
            if g.nodes
                .get(&o.uid)
                .is_some_and(Node::waiting_for_dependents)
            {
                self.queue.add(attempt(&o.uid));
            }
        }
        for d in g.dependents.remove(uid).into_iter().flatten() {
            self.queue.add(attempt(&d));
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(item) = self.queue.get().await {
            let result = match item.split_once('/') {
                Some(("attempt", uid)) => self.attempt_to_delete(uid).await,
                Some(("orphan", uid)) => self.orphan_dependents(uid).await,
                _ => Ok(()),
            };
            match result {
                Ok(()) => self.queue.forget(&item),
                Err(e) => {
                    tracing::warn!(item, error = %e, "garbage collection failed; retrying with backoff");
                    self.queue.add_rate_limited(item.clone());
                }
            }
            self.queue.done(&item);
        }
    }

    fn node(&self, uid: &str) -> Option<Node> {
        self.graph.lock().nodes.get(uid).cloned()
    }

    /// The resource of an owner reference, among the watched ones (same group and kind; the
    /// version may differ).
    fn owner_resource(&self, owner: &OwnerReference) -> Option<Arc<ApiResource>> {
        let group = owner
            .api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_string();
        self.resources
            .lock()
            .iter()
            .find(|r| r.group == group && r.kind == owner.kind)
            .cloned()
    }

    /// Whether `owner` of the object in `namespace` exists with its uid, asking the server
    /// when the graph does not know it.
    async fn owner_exists(
        &self,
        owner: &OwnerReference,
        namespace: Option<&str>,
    ) -> Result<bool, client::rest::Error> {
        let Some(resource) = self.owner_resource(owner) else {
            // A kind nobody serves: the owner cannot exist.
            return Ok(false);
        };
        let ns = if resource.namespaced { namespace } else { None };
        let path = resource.item_path(ns, &owner.name);
        match self.client.request_bytes(Method::GET, &path, None).await {
            Ok((_, body)) => {
                let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                Ok(v["metadata"]["uid"].as_str() == Some(owner.uid.as_str()))
            }
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn delete(
        &self,
        uid: &str,
        node: &Node,
        policy: PropagationPolicy,
    ) -> Result<(), client::rest::Error> {
        let params = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self
            .client
            .delete::<serde::de::IgnoredAny>(
                &node.resource,
                node.namespace.as_deref(),
                &node.name,
                &params,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads the object, lets `change` edit it (false: nothing to do), and writes it back;
    /// a conflict is an error, so the item is retried on a fresh read.
    async fn modify(
        &self,
        uid: &str,
        node: &Node,
        change: impl Fn(&mut Value) -> bool,
    ) -> Result<(), client::rest::Error> {
        let path = node
            .resource
            .item_path(node.namespace.as_deref(), &node.name);
        let mut obj: Value = match self.client.request_bytes(Method::GET, &path, None).await {
            Ok((_, body)) => serde_json::from_slice(&body).unwrap_or_default(),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        if obj["metadata"]["uid"].as_str() != Some(uid) || !change(&mut obj) {
            return Ok(());
        }
        let body = serde_json::to_vec(&obj).unwrap_or_default();
        match self
            .client
            .request_bytes(Method::PUT, &path, Some((body.into(), "application/json")))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn remove_finalizer(
        &self,
        uid: &str,
        node: &Node,
        finalizer: &str,
    ) -> Result<(), client::rest::Error> {
        self.modify(uid, node, |obj| {
            let Some(list) = obj["metadata"]["finalizers"].as_array_mut() else {
                return false;
            };
            let before = list.len();
            list.retain(|f| f.as_str() != Some(finalizer));
            list.len() != before
        })
        .await
    }

    async fn remove_owner_refs(
        &self,
        uid: &str,
        node: &Node,
        owners: &HashSet<String>,
    ) -> Result<(), client::rest::Error> {
        self.modify(uid, node, |obj| {
            let Some(list) = obj["metadata"]["ownerReferences"].as_array_mut() else {
                return false;
            };
            let before = list.len();
            list.retain(|o| !o["uid"].as_str().is_some_and(|u| owners.contains(u)));
            list.len() != before
        })
        .await
    }

    /// The dependents of `uid` in the graph, with whether each blocks its owner's deletion.
    fn dependents_of(&self, uid: &str) -> Vec<(String, Node, bool)> {
        let g = self.graph.lock();
        g.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| {
                let node = g.nodes.get(d)?.clone();
                let blocks = node
                    .owners
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion == Some(true));
                Some((d.clone(), node, blocks))
            })
            .collect()
    }

    async fn attempt_to_delete(&self, uid: &str) -> Result<(), client::rest::Error> {
        let Some(node) = self.node(uid) else {
            return Ok(());
        };
        if node.waiting_for_dependents() {
            let dependents = self.dependents_of(uid);
            for (d, dep, _) in &dependents {
                if !dep.deleting {
                    self.delete(d, dep, PropagationPolicy::Foreground).await?;
                }
            }
            if !dependents.iter().any(|(_, _, blocks)| *blocks) {
                self.remove_finalizer(uid, &node, FOREGROUND_FINALIZER)
                    .await?;
            }
            return Ok(());
        }
        if node.deleting || node.owners.is_empty() {
            return Ok(());
        }
        let (mut solid, mut waiting, mut dangling) = (0, HashSet::new(), HashSet::new());
        for owner in &node.owners {
            let known = self.node(&owner.uid);
            match known {
                Some(o) if o.waiting_for_dependents() => {
                    waiting.insert(owner.uid.clone());
                }
                Some(_) => solid += 1,
                None if self.owner_exists(owner, node.namespace.as_deref()).await? => solid += 1,
                None => {
                    dangling.insert(owner.uid.clone());
                }
            }
        }
        if solid > 0 {
            if waiting.is_empty() && dangling.is_empty() {
                return Ok(());
            }
            let gone: HashSet<String> = waiting.union(&dangling).cloned().collect();
            return self.remove_owner_refs(uid, &node, &gone).await;
        }
        let policy = if !waiting.is_empty() || node.has_finalizer(FOREGROUND_FINALIZER) {
            PropagationPolicy::Foreground
        } else if node.has_finalizer(ORPHAN_FINALIZER) {
            PropagationPolicy::Orphan
        } else {
            PropagationPolicy::Background
        };
        self.delete(uid, &node, policy).await
    }

    async fn orphan_dependents(&self, uid: &str) -> Result<(), client::rest::Error> {
        let Some(node) = self.node(uid) else {
            return Ok(());
        };
        if !(node.deleting && node.has_finalizer(ORPHAN_FINALIZER)) {
            return Ok(());
        }
        let owner: HashSet<String> = [uid.to_string()].into_iter().collect();
        for (d, dep, _) in self.dependents_of(uid) {
            self.remove_owner_refs(&d, &dep, &owner).await?;
        }
        self.remove_finalizer(uid, &node, ORPHAN_FINALIZER).await
    }
}
