//! The API server over a store that breaks its contract: the request fails with a
//! Kubernetes `Status` instead of looping or hanging.

mod common;

use apiserver::{ApiServer, ServerConfig};
use bytes::Bytes;
use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use storage::memory::MemoryStorage;
use storage::{
    KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, WatchStream,
};

/// A memory store whose ranges claim that more keys follow while returning none (once
/// `lying` is set) or the first key again whatever the start (once `repeat` is set).
struct EmptyPagesWithMore {
    inner: MemoryStorage,
    lying: AtomicBool,
    repeat: AtomicBool,
    /// Where the first read under `repeat` started: every later one starts there again.
    first_start: std::sync::Mutex<Option<Bytes>>,
}

#[async_trait::async_trait]
impl Storage for EmptyPagesWithMore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        if self.repeat.load(Ordering::SeqCst) {
            let first = self
                .first_start
                .lock()
                .unwrap()
                .get_or_insert_with(|| req.start.clone())
                .clone();
            let from_start = RangeRequest {
                start: first,
                ..req
            };
            let mut resp = self.inner.range(from_start).await?;
            resp.kvs.truncate(1);
            resp.more = true;
            return Ok(resp);
        }
        let mut resp = self.inner.range(req).await?;
        if self.lying.load(Ordering::SeqCst) {
            resp.kvs.clear();
            resp.more = true;
        }
        Ok(resp)
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
        self.inner.watch(prefix, after).await
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

#[tokio::test]
async fn a_page_that_does_not_move_past_its_start_yet_claims_more_is_an_error_not_a_loop() {
    let store = Arc::new(EmptyPagesWithMore {
        inner: MemoryStorage::new(),
        lying: AtomicBool::new(false),
        repeat: AtomicBool::new(false),
        first_start: std::sync::Mutex::new(None),
    });
    let srv = ApiServer::new(store.clone(), ServerConfig::default())
        .await
        .unwrap();
    let uri = "/api/v1/namespaces/default/configmaps";
    let created = ok(
        "create",
        post(&srv, uri, &configmap("a", json!({}), json!({"k": "v"}))).await,
    );
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Exact reads and paged reads at a resourceVersion go to storage.
    for (flag, query) in [
        (
            &store.lying,
            format!("resourceVersion={rv}&resourceVersionMatch=Exact"),
        ),
        (&store.lying, format!("resourceVersion={rv}&limit=10")),
        (
            &store.repeat,
            format!("resourceVersion={rv}&resourceVersionMatch=Exact"),
        ),
    ] {
        flag.store(true, Ordering::SeqCst);
        let (code, v) = tokio::time::timeout(
            Duration::from_secs(10),
            get(&srv, &format!("{uri}?{query}")),
        )
        .await
        .unwrap_or_else(|_| panic!("{query}: the list did not end"));
        flag.store(false, Ordering::SeqCst);
        assert_eq!(code.as_u16(), 500, "{query}: {v}");
        assert_eq!(v["kind"], "Status", "{query}: {v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap_or("")
                .contains("returned none"),
            "{query}: {v}"
        );
    }
    // The cache was not harmed: a list from it still has the object.
    let (code, v) = get(&srv, uri).await;
    assert_eq!(code.as_u16(), 200, "{v}");
    assert_eq!(v["items"][0]["metadata"]["name"], "a", "{v}");
}

/// The server over the embedded store on a disk that fills up: a create is a 500 Status and
/// is not stored, reads and watches are served throughout, and creates work again once
/// there is space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_with_a_status_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let faults = storage::disk_faults::DiskFaults::new();
    let store = storage::embedded::EmbeddedStorage::open_with_faults(
        dir.path(),
        storage::embedded::EmbeddedOptions::default(),
        faults.clone(),
    )
    .unwrap();
    let srv = ApiServer::new(Arc::new(store), ServerConfig::default())
        .await
        .unwrap();
    let uri = "/api/v1/namespaces/default/configmaps";
    let first = ok(
        "create",
        post(&srv, uri, &configmap("a", json!({}), json!({"k": "v"}))).await,
    );
    let mut w = watch(
        &srv,
        &format!("{uri}?watch=1&resourceVersion={}", rv_of(&first)),
    )
    .await;
    faults.set_full(true);
    let (code, v) = post(&srv, uri, &configmap("b", json!({}), json!({"k": "v"}))).await;
    assert_status("create on a full disk", code, &v, 500, "InternalError");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("No space left on device"),
        "{v}"
    );
    let (code, v) = get(&srv, &format!("{uri}/b")).await;
    assert_eq!(code, 404, "{v}");
    ok("read on a full disk", get(&srv, &format!("{uri}/a")).await);
    let list = ok("list on a full disk", get(&srv, uri).await);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
    faults.set_full(false);
    let b = ok(
        "create with space again",
        post(&srv, uri, &configmap("b", json!({}), json!({"k": "v"}))).await,
    );
    let ev = w.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "b");
    assert_eq!(rv_of(&ev["object"]), rv_of(&b));
    assert!(faults.injected() > 0);
}
