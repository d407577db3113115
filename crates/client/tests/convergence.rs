//! The convergence test of issue 3, against a real `listwatch serve`.
//!
//! 10,000 random creates, updates and deletes of ConfigMaps come from 8 concurrent writers
//! over 300 names in 2 namespaces, against a server whose watch cache keeps only 50 events
//! per resource. Meanwhile every informer's watch connections are cut by a test adapter
//! after a random number of events, and re-opened after a random pause: the informer
//! resumes from its last resourceVersion, which the tiny history has usually dropped by
//! then — a 410, and a relist. Three JSON informers run: one across namespaces with a label
//! selector (objects move in and out of it as their labels change), and one per namespace.
//!
//! At the end (writers stopped, informers settled): every informer's cache equals a fresh
//! list with its selection (names and resourceVersions); every handler's last notification
//! per key equals that final state; every key a handler saw that no longer exists got a
//! delete notification (from the watch or as a relist's tombstone); handlers never saw an
//! update whose `old` was not their previous state. The test also checks that 410-driven
//! relists really happened, so it cannot pass without exercising them.
//!
//! A fourth informer watches one namespace in Kubernetes' protobuf encoding
//! (`ProtobufObject`), under the same cuts and 410s.

mod common;

use async_trait::async_trait;
use client::cache::backoff::SplitMix64;
use client::cache::ConfigureReflector as _;
use client::cache::{
    DeleteEvent, EventSource, ListPage, ListRequest, ListerWatcher, ResourceEventHandler,
    RestListerWatcher, SharedIndexInformer, WatchError, WatchEvent, WatchRequest,
};
use client::object::{DecodeObject, DynamicObject, KubeObject};
use client::protobuf_object::ProtobufObject;
use client::rest::resource::CONFIGMAPS;
use client::rest::{Client, DeleteParams, ListParams, PatchParams, PatchType, PostParams};
use common::{until, within, Server};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITES: usize = 10_000;
const WRITERS: usize = 8;
const NAMES_PER_NAMESPACE: usize = 150;
const NAMESPACES: [&str; 2] = ["conv-a", "conv-b"];
const SETTLE: Duration = Duration::from_secs(40);

/// Wraps a lister-watcher: counts lists, and ends every watch cleanly after a random number
/// of events (1..=40), re-opening watches only after a random pause (0..40 ms) so that the
/// server's small history moves on meanwhile.
struct CuttingListerWatcher<K> {
    inner: RestListerWatcher<K>,
    rng: Mutex<SplitMix64>,
    lists: AtomicUsize,
    watches: AtomicUsize,
}

#[async_trait]
impl<K: DecodeObject> ListerWatcher<K> for CuttingListerWatcher<K> {
    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError> {
        if request.continue_token.is_none() {
            self.lists.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.list(request).await
    }

    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        let (pause, budget) = {
            let mut rng = self.rng.lock();
            (rng.next_u64() % 40, 1 + (rng.next_u64() % 40) as usize)
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        self.watches.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.watch(request).await?;
        Ok(Box::new(CutAfter { inner, budget }))
    }
}

/// A watch that ends (dropping its connection) after `budget` events.
struct CutAfter<K> {
    inner: Box<dyn EventSource<K>>,
    budget: usize,
}

#[async_trait]
impl<K: KubeObject> EventSource<K> for CutAfter<K> {
    async fn next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        if self.budget == 0 {
            return None;
        }
        self.budget -= 1;
        self.inner.next().await
    }
}

/// What one handler saw, per key, and any broken promise.
#[derive(Default)]
struct Seen {
    /// `Some(rv)` after an add or update, `None` after a delete.
    last: BTreeMap<String, Option<String>>,
    /// Keys that got a delete notification, and how many were tombstones.
    deleted: BTreeSet<String>,
    tombstones: usize,
    notifications: usize,
    violations: Vec<String>,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Seen>>);

fn rv_of<K: KubeObject + ?Sized>(o: &K) -> String {
    o.resource_version().unwrap_or_default().to_string()
}

impl<K: KubeObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>, _initial: bool) {
        let key = client::cache::object_key(&**o);
        let mut s = self.0.lock();
        s.notifications += 1;
        if let Some(Some(prev)) = s.last.get(&key) {
            let v = format!("add of {key}@{} while it was present @{prev}", rv_of(&**o));
            s.violations.push(v);
        }
        s.last.insert(key, Some(rv_of(&**o)));
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        let key = client::cache::object_key(&**new);
        let mut s = self.0.lock();
        s.notifications += 1;
        match s.last.get(&key) {
            Some(Some(prev)) if *prev == rv_of(&**old) => {}
            other => {
                let v = format!(
                    "update of {key} from @{} but the handler last saw {other:?}",
                    rv_of(&**old)
                );
                s.violations.push(v);
            }
        }
        s.last.insert(key, Some(rv_of(&**new)));
    }
    fn on_delete(&self, d: &DeleteEvent<K>) {
        let key = match d {
            DeleteEvent::Object(o) => client::cache::object_key(&**o),
            DeleteEvent::DeletedFinalStateUnknown { key, .. } => key.clone(),
        };
        let mut s = self.0.lock();
        s.notifications += 1;
        if d.is_tombstone() {
            s.tombstones += 1;
        }
        if !matches!(s.last.get(&key), Some(Some(_))) {
            let v = format!("delete of {key}, which the handler did not have");
            s.violations.push(v);
        }
        s.deleted.insert(key.clone());
        s.last.insert(key, None);
    }
}

/// What the test reads from an informer, whatever its object type.
trait Probe: Send + Sync {
    fn start(&self);
    fn has_synced(&self) -> bool;
    fn last_sync_resource_version(&self) -> String;
    /// key → resourceVersion of every cached object.
    fn cache(&self) -> BTreeMap<String, String>;
    fn lists(&self) -> usize;
    fn watches(&self) -> usize;
    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// An informer and its cutting source.
struct Probed<K: KubeObject> {
    informer: SharedIndexInformer<K>,
    source: Arc<CuttingListerWatcher<K>>,
}

impl<K: DecodeObject> Probe for Probed<K> {
    fn start(&self) {
        self.informer.start();
    }
    fn has_synced(&self) -> bool {
        self.informer.has_synced()
    }
    fn last_sync_resource_version(&self) -> String {
        self.informer.last_sync_resource_version()
    }
    fn cache(&self) -> BTreeMap<String, String> {
        self.informer
            .indexer()
            .list()
            .iter()
            .map(|o| (client::cache::object_key(&**o), rv_of(&**o)))
            .collect()
    }
    fn lists(&self) -> usize {
        self.source.lists.load(Ordering::Relaxed)
    }
    fn watches(&self) -> usize {
        self.source.watches.load(Ordering::Relaxed)
    }
    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.informer.shutdown())
    }
}

/// One informer under test.
struct Subject {
    name: &'static str,
    informer: Box<dyn Probe>,
    seen: Recorder,
    gone: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    namespace: Option<&'static str>,
    labels: Option<&'static str>,
}

fn subject<K: DecodeObject>(
    client: &Client,
    name: &'static str,
    namespace: Option<&'static str>,
    labels: Option<&'static str>,
    seed: u64,
) -> Subject {
    let mut lw = RestListerWatcher::<K>::new(client.clone(), CONFIGMAPS);
    if let Some(ns) = namespace {
        lw = lw.namespace(ns);
    }
    if let Some(l) = labels {
        lw = lw.labels(l);
    }
    let source = Arc::new(CuttingListerWatcher {
        inner: lw,
        rng: Mutex::new(SplitMix64::with_seed(seed)),
        lists: AtomicUsize::new(0),
        watches: AtomicUsize::new(0),
    });
    let informer = SharedIndexInformer::builder(Arc::clone(&source) as Arc<dyn ListerWatcher<_>>)
        .name(name)
        .build();
    let seen = Recorder::default();
    informer.add_event_handler(seen.clone());
    let gone = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let (g, e) = (Arc::clone(&gone), Arc::clone(&errors));
    informer.set_watch_error_handler(move |err| match err {
        WatchError::Gone => {
            g.fetch_add(1, Ordering::Relaxed);
        }
        other => e.lock().push(other.to_string()),
    });
    Subject {
        name,
        informer: Box::new(Probed { informer, source }),
        seen,
        gone,
        errors,
        namespace,
        labels,
    }
}

fn configmap(name: &str, group: &str, value: u64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([("grp".to_string(), group.to_string())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

#[derive(Default)]
struct WriteStats {
    creates: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
    misses: AtomicU64,
}

/// One writer: `ops` random operations on random keys. Conflicts with other writers
/// (already exists, not found) are expected and counted as misses.
async fn writer(client: Client, seed: u64, ops: usize, stats: Arc<WriteStats>) {
    let mut rng = SplitMix64::with_seed(seed);
    let pp = PostParams::default();
    for i in 0..ops {
        let n = (rng.next_u64() % (2 * NAMES_PER_NAMESPACE as u64)) as usize;
        let ns = NAMESPACES[n / NAMES_PER_NAMESPACE];
        let name = format!("cm-{}", n % NAMES_PER_NAMESPACE);
        let group = if rng.next_u64().is_multiple_of(2) {
            "a"
        } else {
            "b"
        };
        let value = seed.wrapping_mul(100_000) + i as u64;
        let result = match rng.next_u64() % 10 {
            0..=3 => client
                .create::<ConfigMap>(&CONFIGMAPS, Some(ns), &pp, &configmap(&name, group, value))
                .await
                .map(|_| &stats.creates),
            4..=7 => client
                .patch::<ConfigMap, _>(
                    &CONFIGMAPS,
                    Some(ns),
                    &name,
                    &PatchParams::default(),
                    PatchType::Merge,
                    &json!({"metadata": {"labels": {"grp": group}}, "data": {"v": value.to_string()}}),
                )
                .await
                .map(|_| &stats.updates),
            _ => client
                .delete::<ConfigMap>(&CONFIGMAPS, Some(ns), &name, &DeleteParams::default())
                .await
                .map(|_| &stats.deletes),
        };
        match result {
            Ok(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.is_already_exists() || e.is_not_found() || e.is_conflict() => {
                stats.misses.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("writer {seed}: unexpected error: {e}"),
        }
    }
}

/// key → resourceVersion of a fresh (consistent) list with a subject's selection.
async fn fresh_list(client: &Client, s: &Subject) -> BTreeMap<String, String> {
    let mut params = ListParams::default();
    if let Some(l) = s.labels {
        params = params.labels(l);
    }
    let list = client
        .list_all_raw(&CONFIGMAPS, s.namespace, &params)
        .await
        .expect("fresh list");
    list.items
        .iter()
        .map(|raw| {
            let o = DynamicObject::from_slice(raw).unwrap();
            (client::cache::object_key(&o), rv_of(&o))
        })
        .collect()
}

fn cache_of(s: &Subject) -> BTreeMap<String, String> {
    s.informer.cache()
}

fn handler_view(s: &Subject) -> BTreeMap<String, String> {
    s.seen
        .0
        .lock()
        .last
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
        .collect()
}

fn rv_num(rv: &str) -> u64 {
    rv.parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_converge_under_churn_cut_watches_and_410s() {
    let started = Instant::now();
    let server = Server::start(&["--watch-cache-size", "50"]);
    server.namespaces(&NAMESPACES).await;
    let client = server.client();

    let subjects = vec![
        subject::<DynamicObject>(&client, "grp=a everywhere", None, Some("grp=a"), 1),
        subject::<DynamicObject>(&client, "namespace conv-a", Some(NAMESPACES[0]), None, 2),
        subject::<DynamicObject>(&client, "namespace conv-b", Some(NAMESPACES[1]), None, 3),
        subject::<ProtobufObject>(
            &client,
            "namespace conv-b, protobuf",
            Some(NAMESPACES[1]),
            None,
            4,
        ),
    ];
    for s in &subjects {
        s.informer.start();
    }
    for s in &subjects {
        until(
            &format!("{} synced", s.name),
            Duration::from_secs(20),
            || s.informer.has_synced(),
        )
        .await;
    }

    // The churn.
    let stats = Arc::new(WriteStats::default());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(writer(
                client.clone(),
                100 + w as u64,
                WRITES / WRITERS,
                Arc::clone(&stats),
            ))
        })
        .collect();
    for w in writers {
        within("writer", Duration::from_secs(60), w).await.unwrap();
    }
    let write_time = started.elapsed();

    // One last write in each namespace, inside every selection: once an informer has
    // seen it, it has seen everything before it.
    let mut marker_rv = BTreeMap::new();
    for ns in NAMESPACES {
        let cm = client
            .create::<ConfigMap>(
                &CONFIGMAPS,
                Some(ns),
                &PostParams::default(),
                &configmap("zz-marker", "a", 0),
            )
            .await
            .unwrap();
        marker_rv.insert(ns, rv_num(cm.metadata.resource_version.as_deref().unwrap()));
    }
    for s in &subjects {
        let want = match s.namespace {
            Some(ns) => marker_rv[ns],
            None => marker_rv.values().copied().max().unwrap_or(0),
        };
        until(
            &format!("{}: last synced resourceVersion reaches {want}", s.name),
            SETTLE,
            || rv_num(&s.informer.last_sync_resource_version()) >= want,
        )
        .await;
    }

    for s in &subjects {
        let fresh = fresh_list(&client, s).await;
        until(
            &format!("{}: cache equals a fresh list", s.name),
            SETTLE,
            || cache_of(s) == fresh,
        )
        .await;
        until(
            &format!(
                "{}: handler's last notifications equal the final state",
                s.name
            ),
            SETTLE,
            || handler_view(s) == fresh,
        )
        .await;
        let seen = s.seen.0.lock();
        assert!(
            seen.violations.is_empty(),
            "{}: broken handler contract: {:#?}",
            s.name,
            &seen.violations[..seen.violations.len().min(10)]
        );
        // Every key the handler knew that no longer exists got a delete notification.
        for (key, last) in &seen.last {
            if !fresh.contains_key(key) {
                assert!(
                    last.is_none() && seen.deleted.contains(key),
                    "{}: {key} is gone but its last notification is {last:?}",
                    s.name
                );
            }
        }
        let errors: Vec<String> = s.errors.lock().iter().take(5).cloned().collect();
        println!(
            "{}: {} objects, {} notifications ({} deletes, {} tombstones), {} lists, {} watches, {} x 410, other errors: {:?}",
            s.name,
            fresh.len(),
            seen.notifications,
            seen.deleted.len(),
            seen.tombstones,
            s.informer.lists(),
            s.informer.watches(),
            s.gone.load(Ordering::Relaxed),
            errors,
        );
    }

    let total = stats.creates.load(Ordering::Relaxed)
        + stats.updates.load(Ordering::Relaxed)
        + stats.deletes.load(Ordering::Relaxed);
    println!(
        "writes: {} creates, {} updates, {} deletes, {} misses in {write_time:?}; total {:?}",
        stats.creates.load(Ordering::Relaxed),
        stats.updates.load(Ordering::Relaxed),
        stats.deletes.load(Ordering::Relaxed),
        stats.misses.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(total > 3_000, "too few successful writes: {total}");
    assert!(stats.deletes.load(Ordering::Relaxed) > 100);
    // The scenario really happened: watches were cut and resumed from versions the server
    // had dropped, and the informers relisted.
    let gone: usize = subjects
        .iter()
        .map(|s| s.gone.load(Ordering::Relaxed))
        .sum();
    assert!(
        gone >= 3,
        "only {gone} 410s: the scenario did not exercise relists"
    );
    for s in &subjects {
        assert!(s.informer.lists() >= 2, "{}: never relisted", s.name);
    }
    // Every list is followed by a watch: more watches than lists means cut watches were
    // resumed from their versions without a relist. (One informer may, by the luck of its
    // random cuts and pauses, have found every resumed version already gone.)
    let resumed: usize = subjects
        .iter()
        .map(|s| s.informer.watches().saturating_sub(s.informer.lists()))
        .sum();
    assert!(resumed >= 3, "only {resumed} cut watches were resumed");
    for s in &subjects {
        within("shutdown", Duration::from_secs(10), s.informer.shutdown()).await;
    }
}
