//! What state a list or a watch starts from, when the watch cache lags storage or has
//! restarted:
//! - a watch without a resourceVersion starts from a state at least as new as storage's
//!   current revision (as a consistent list does), even when the cache cannot catch up;
//! - a watch without a resourceVersion started from storage misses nothing the cache applied
//!   while storage was read;
//! - a relist of the cache while it serves never shows an older state, nor strands a watch;
//! - `resourceVersion=0` lists are served whole from the cache, whatever the limit;
//! - after a restart, watches resume from versions the previous process handed out.

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use storage::memory::MemoryStorage;
use storage::{
    KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, WatchMessage,
    WatchStream,
};
use tokio::sync::watch;

const CM: &str = "/api/v1/namespaces/default/configmaps";
const WAIT: Duration = Duration::from_secs(5);

/// Storage whose watch streams hold every message back while the gate is closed (the
/// cacher over it falls behind storage on demand), and which can end every open watch with
/// `Compacted`, as a compaction past a lagging watch does (the cacher then relists).
struct GatedStorage {
    inner: MemoryStorage,
    open: watch::Sender<bool>,
    breaks: watch::Sender<u64>,
    /// When set, the next read at an explicit revision waits for `range_open`.
    hold_next_read: std::sync::atomic::AtomicBool,
    read_held: tokio::sync::Notify,
    range_open: watch::Sender<bool>,
}

impl GatedStorage {
    fn new() -> Arc<GatedStorage> {
        Arc::new(GatedStorage {
            inner: MemoryStorage::new(),
            open: watch::channel(true).0,
            breaks: watch::channel(0).0,
            hold_next_read: Default::default(),
            read_held: Default::default(),
            range_open: watch::channel(false).0,
        })
    }

    /// Holds the next read at an explicit revision until [`GatedStorage::release_read`];
    /// returns once that read has started (and is held).
    fn hold_next_read(&self) -> impl std::future::Future<Output = ()> + '_ {
        self.range_open.send_replace(false);
        self.hold_next_read
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.read_held.notified()
    }

    fn release_read(&self) {
        self.range_open.send_replace(true);
    }

    fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }

    /// Ends every watch open now with `Compacted`.
    fn break_watches(&self) {
        self.breaks.send_modify(|n| *n += 1);
    }
}

#[async_trait]
impl Storage for GatedStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        if req.revision > 0
            && self
                .hold_next_read
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            let mut open = self.range_open.subscribe();
            self.read_held.notify_one();
            let _ = open.wait_for(|o| *o).await;
        }
        self.inner.range(req).await
    }
    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.inner.update(key, value, expected).await
    }
    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        let mut inner = self.inner.watch(prefix, after).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<WatchMessage, StorageError>>(1024);
        let mut open = self.open.subscribe();
        let mut breaks = self.breaks.subscribe();
        breaks.borrow_and_update();
        tokio::spawn(async move {
            let forward = async {
                while let Some(msg) = inner.next().await {
                    if open.wait_for(|o| *o).await.is_err() || tx.send(msg).await.is_err() {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = forward => {}
                Ok(()) = breaks.changed() => {
                    let compacted = StorageError::Compacted { requested: after, compacted: after };
                    let _ = tx.send(Err(compacted)).await;
                }
            }
        });
        Ok(WatchStream::new(rx))
    }
    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.inner.compact(revision).await
    }
    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        self.inner.request_progress(prefix).await
    }
    async fn current_revision(&self) -> Result<Revision, StorageError> {
        self.inner.current_revision().await
    }
    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        self.inner.compacted_revision().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_without_resource_version_starts_at_least_as_new_as_storage() {
    let gated = GatedStorage::new();
    let storage: Arc<dyn Storage> = gated.clone();
    let srv = apiserver::ApiServer::new(storage, apiserver::ServerConfig::default())
        .await
        .unwrap();
    let a = ok(
        "create a",
        post(&srv, CM, &configmap("a", json!({}), json!({}))).await,
    );
    // The cache stops hearing from storage; "b" is written behind its back.
    gated.set_open(false);
    let b = ok(
        "create b",
        post(&srv, CM, &configmap("b", json!({}), json!({}))).await,
    );
    let mut w = watch(&srv, &format!("{CM}?watch=true")).await;
    let mut initial = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "ADDED", "{ev}");
        initial.insert(name_of(&ev["object"]).to_string(), rv_of(&ev["object"]));
    }
    assert_eq!(
        initial,
        [("a".to_string(), rv_of(&a)), ("b".to_string(), rv_of(&b))].into(),
        "the initial state misses what storage already had"
    );
    // The cache catches up: "b" is not announced twice, and later changes follow.
    gated.set_open(true);
    let c = ok(
        "create c",
        post(&srv, CM, &configmap("c", json!({}), json!({}))).await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!(
        (ev_type(&ev), name_of(&ev["object"])),
        ("ADDED", "c"),
        "{ev}"
    );
    assert_eq!(rv_of(&ev["object"]), rv_of(&c));
}

/// A watch without a resourceVersion whose cache is behind starts from a list read from
/// storage; if the cache catches up past that list's revision while it is read, the events
/// it dispatched meanwhile (before the watcher existed) must still reach the watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_started_from_storage_misses_nothing_the_cache_applied_meanwhile() {
    let gated = GatedStorage::new();
    let storage: Arc<dyn Storage> = gated.clone();
    let srv = apiserver::ApiServer::new(storage, config(1_000, 100))
        .await
        .unwrap();
    ok(
        "create a",
        post(&srv, CM, &configmap("a", json!({}), json!({}))).await,
    );
    // The cache stops hearing from storage and "b" is written: a watch without a version
    // cannot be served from the cache, so it reads storage (held here, at b's revision).
    gated.set_open(false);
    ok(
        "create b",
        post(&srv, CM, &configmap("b", json!({}), json!({}))).await,
    );
    let held = gated.hold_next_read();
    let srv2 = srv.clone();
    let opening = tokio::spawn(async move { watch(&srv2, &format!("{CM}?watch=true")).await });
    tokio::time::timeout(WAIT, held)
        .await
        .expect("the watch did not read storage");
    // Meanwhile "c" is written and the cache catches up past the revision being read.
    let c = ok(
        "create c",
        post(&srv, CM, &configmap("c", json!({}), json!({}))).await,
    );
    gated.set_open(true);
    ok(
        "the cache has c",
        get(&srv, &format!("{CM}?resourceVersion={}", rv_of(&c))).await,
    );
    gated.release_read();
    let mut w = opening.await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 3 {
        match w.next(WAIT).await {
            Next::Event(ev) => {
                assert_eq!(ev_type(&ev), "ADDED", "{ev}");
                seen.insert(name_of(&ev["object"]).to_string());
            }
            other => panic!("the watch has {seen:?} and then {other:?}: it lost c"),
        }
    }
}

/// A relist of the watch cache (storage compacted past its watch) while it serves: no list
/// goes back to an older state or a half-replayed one, and a watch opened meanwhile either
/// gets every later change or ends so that its client resumes; it is never left registered
/// against a state whose events it will not be sent (a watch that stays silent forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_of_the_watch_cache_never_serves_an_older_state_or_strands_a_watch() {
    let gated = GatedStorage::new();
    let storage: Arc<dyn Storage> = gated.clone();
    let srv = apiserver::ApiServer::new(storage, config(1_000, 100))
        .await
        .unwrap();
    for name in ["a", "b"] {
        ok(
            "create",
            post(&srv, CM, &configmap(name, json!({}), json!({}))).await,
        );
    }
    let shown = rv_of(&ok("list", get(&srv, CM).await));
    // The cache stops hearing from storage, "c" is written behind its back, and its watch
    // ends as a compaction ends one that lags: it relists. Its replay of storage's history
    // is held back too, so the relist takes its longest path.
    gated.set_open(false);
    let c = ok(
        "create c",
        post(&srv, CM, &configmap("c", json!({}), json!({}))).await,
    );
    gated.break_watches();
    let mut opened_during = watch(&srv, &format!("{CM}?watch=true&resourceVersion={shown}")).await;
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let mut lists = 0;
    while std::time::Instant::now() < until {
        let list = ok("list", get(&srv, &format!("{CM}?resourceVersion=0")).await);
        let rv = rv_of(&list);
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(name_of)
            .collect();
        assert!(
            rv >= shown && names.contains(&"a") && names.contains(&"b"),
            "during a relist a list went back: {names:?} at {rv}, after a list at {shown}"
        );
        lists += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lists > 10, "only {lists} lists in 3 s");
    gated.set_open(true);
    match opened_during.next(WAIT).await {
        Next::Event(ev) => assert_eq!(
            (ev_type(&ev), name_of(&ev["object"]), rv_of(&ev["object"])),
            ("ADDED", "c", rv_of(&c)),
            "{ev}"
        ),
        Next::End => {}
        Next::Timeout => panic!(
            "a watch opened during a relist neither got the change after its version nor ended"
        ),
    }
    // Afterwards the cache holds everything, and later changes reach a new watch.
    let list = ok(
        "list",
        get(&srv, &format!("{CM}?resourceVersion={}", rv_of(&c))).await,
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list}");
    let mut w = watch(
        &srv,
        &format!("{CM}?watch=true&resourceVersion={}", rv_of(&list)),
    )
    .await;
    let d = ok(
        "create d",
        post(&srv, CM, &configmap("d", json!({}), json!({}))).await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!(
        (ev_type(&ev), name_of(&ev["object"]), rv_of(&ev["object"])),
        ("ADDED", "d", rv_of(&d)),
        "{ev}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_at_resource_version_0_is_whole_whatever_the_limit() {
    let h = Memory.start(config(10_000, 100)).await;
    let mut last = 0;
    for i in 0..7 {
        let o = ok(
            "create",
            post(
                &h.srv,
                CM,
                &configmap(&format!("c{i}"), json!({}), json!({})),
            )
            .await,
        );
        last = rv_of(&o);
    }
    // ("0" is any state: first make sure the cache has them all.)
    ok(
        "wait",
        get(&h.srv, &format!("{CM}?resourceVersion={last}")).await,
    );
    let list = ok(
        "list",
        get(&h.srv, &format!("{CM}?resourceVersion=0&limit=2")).await,
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 7, "{list}");
    assert!(list["metadata"].get("continue").is_none(), "{list}");
    // Without "0" the limit pages as before.
    let page = ok("page", get(&h.srv, &format!("{CM}?limit=2")).await);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert!(page["metadata"]["continue"].as_str().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_watches_resume_from_versions_the_previous_process_gave() {
    let dir = tempfile::tempdir().unwrap();
    // The previous server's tasks may hold the store for a moment after it is dropped.
    let open = || async {
        for _ in 0..100 {
            if let Ok(s) = storage::embedded::EmbeddedStorage::open(
                dir.path(),
                storage::embedded::EmbeddedOptions::default(),
            ) {
                return Arc::new(s) as Arc<dyn Storage>;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the store did not open again");
    };
    let mut expected = Vec::new();
    let from;
    {
        let srv = apiserver::ApiServer::new(open().await, config(1_000, 100))
            .await
            .unwrap();
        let first = ok(
            "create",
            post(&srv, CM, &configmap("r", json!({}), json!({"n": "0"}))).await,
        );
        from = rv_of(&first);
        for n in 1..=20 {
            let o = ok(
                "patch",
                merge_patch(
                    &srv,
                    &format!("{CM}/r"),
                    &json!({"data": {"n": n.to_string()}}),
                )
                .await,
            );
            expected.push(rv_of(&o));
        }
    }
    let srv = apiserver::ApiServer::new(open().await, config(1_000, 100))
        .await
        .unwrap();
    let mut w = watch(&srv, &format!("{CM}?watch=true&resourceVersion={from}")).await;
    let mut got = Vec::new();
    for _ in 0..expected.len() {
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
        got.push(rv_of(&ev["object"]));
    }
    assert_eq!(got, expected);
}
