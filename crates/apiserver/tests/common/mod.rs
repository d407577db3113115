//! Shared helpers for the apiserver integration tests: server factories (one per storage
//! backend), in-process HTTP requests, and a watch-stream reader.
//!
//! Every request goes through `ApiServer::handle` with a real path and query string, so the
//! router, option parsing, handlers and cacher are all exercised; only the socket is skipped.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use apiserver::encoding::body::Body;
use apiserver::{ApiServer, ServerConfig};
use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use storage::memory::MemoryStorage;
use storage::Storage;

/// A running server plus whatever must live as long as it (e.g. a temporary directory).
pub struct Harness {
    /// The server under test.
    pub srv: Arc<ApiServer>,
    _dir: Option<tempfile::TempDir>,
    /// The etcd behind the server, for the etcd factory.
    _etcd: Option<storage_etcd::testing::EtcdServer>,
}

/// Builds a fresh server over a fresh, empty storage backend. The watch-semantics suite is
/// generic over this, so each backend (memory, embedded, etcd) runs the same checks.
pub trait Factory: Sync {
    /// A short name for messages.
    fn name(&self) -> &'static str;
    /// A new server with `cfg`, over empty storage.
    fn start(&self, cfg: ServerConfig) -> impl Future<Output = Harness> + Send;
}

/// [`MemoryStorage`] backend.
pub struct Memory;

impl Factory for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn start(&self, cfg: ServerConfig) -> Harness {
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let srv = ApiServer::new(storage, cfg).await.unwrap();
        Harness {
            srv,
            _dir: None,
            _etcd: None,
        }
    }
}

/// [`EmbeddedStorage`] backend in a temporary directory.
pub struct Embedded;

impl Factory for Embedded {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn start(&self, cfg: ServerConfig) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> =
            Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap());
        let srv = ApiServer::new(storage, cfg).await.unwrap();
        Harness {
            srv,
            _dir: Some(dir),
            _etcd: None,
        }
    }
}

/// A real single-member etcd (on free loopback ports, with a temporary data dir, progress
/// notifications every second), one per server; it is stopped when the harness is dropped.
pub struct Etcd;

impl Factory for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    async fn start(&self, cfg: ServerConfig) -> Harness {
        let etcd = storage_etcd::testing::EtcdServer::start().await;
        let storage: Arc<dyn Storage> = Arc::new(etcd.storage("").await);
        let srv = ApiServer::new(storage, cfg).await.unwrap();
        Harness {
            srv,
            _dir: None,
            _etcd: Some(etcd),
        }
    }
}

/// A server config with the given ring size and per-watcher queue.
pub fn config(watch_cache_size: usize, watcher_queue: usize) -> ServerConfig {
    let mut cfg = ServerConfig::default();
    cfg.cacher.watch_cache_size = watch_cache_size;
    cfg.cacher.watcher_queue = watcher_queue;
    cfg
}

/// Percent-encodes a query value.
pub fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Sends one request and returns the raw response (body not read).
pub async fn send(
    srv: &Arc<ApiServer>,
    method: Method,
    uri: &str,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> http::Response<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    let req = b.body(Full::new(body.into())).unwrap();
    srv.clone().handle(req).await
}

/// Sends one request and reads the whole response as JSON (`Value::Null` if not JSON).
pub async fn call(
    srv: &Arc<ApiServer>,
    method: Method,
    uri: &str,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> (StatusCode, Value) {
    let resp = send(srv, method, uri, content_type, body).await;
    let code = resp.status();
    let bytes = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{uri}: body did not complete"))
        .unwrap()
        .to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (code, v)
}

/// GET as JSON.
pub async fn get(srv: &Arc<ApiServer>, uri: &str) -> (StatusCode, Value) {
    call(srv, Method::GET, uri, None, Bytes::new()).await
}

/// POST a JSON object.
pub async fn post(srv: &Arc<ApiServer>, uri: &str, body: &Value) -> (StatusCode, Value) {
    call(
        srv,
        Method::POST,
        uri,
        Some("application/json"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// PUT a JSON object.
pub async fn put(srv: &Arc<ApiServer>, uri: &str, body: &Value) -> (StatusCode, Value) {
    call(
        srv,
        Method::PUT,
        uri,
        Some("application/json"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// PATCH with a merge patch.
pub async fn merge_patch(srv: &Arc<ApiServer>, uri: &str, body: &Value) -> (StatusCode, Value) {
    call(
        srv,
        Method::PATCH,
        uri,
        Some("application/merge-patch+json"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// DELETE.
pub async fn delete(srv: &Arc<ApiServer>, uri: &str) -> (StatusCode, Value) {
    call(srv, Method::DELETE, uri, None, Bytes::new()).await
}

/// Asserts a 2xx answer and returns the body.
pub fn ok(what: &str, (code, v): (StatusCode, Value)) -> Value {
    assert!(code.is_success(), "{what}: {code} {v}");
    v
}

/// The resourceVersion of an object (or list) as a number.
pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
        .parse()
        .unwrap()
}

/// The name of an object.
pub fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

/// A configmap body.
pub fn configmap(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": data})
}

/// A pod body on `node` ("" = unscheduled).
pub fn pod(name: &str, node: &str) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    if !node.is_empty() {
        spec["nodeName"] = json!(node);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// Creates namespace `ns`.
pub async fn create_namespace(srv: &Arc<ApiServer>, ns: &str) {
    ok(
        "create namespace",
        post(
            srv,
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await,
    );
}

/// The storage's current revision.
pub async fn storage_rev(srv: &Arc<ApiServer>) -> u64 {
    srv.storage().current_revision().await.unwrap()
}

/// The sum of every series of a counter in `/metrics`.
pub async fn metric_sum(srv: &Arc<ApiServer>, name: &str) -> f64 {
    let resp = send(srv, Method::GET, "/metrics", None, Bytes::new()).await;
    assert_eq!(resp.status(), 200);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(text.to_vec()).unwrap();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What reading a watch stream produced.
#[derive(Debug)]
pub enum Next {
    /// One event line, parsed.
    Event(Value),
    /// The stream ended.
    End,
    /// Nothing arrived in time.
    Timeout,
}

/// Reads a watch response line by line.
pub struct Watch {
    body: Body,
    buf: BytesMut,
    pending: VecDeque<Value>,
    ended: bool,
}

impl Watch {
    /// A reader over a watch response body.
    pub fn from_body(body: Body) -> Watch {
        Watch {
            body,
            buf: BytesMut::new(),
            pending: VecDeque::new(),
            ended: false,
        }
    }

    /// Reads the next event, waiting at most `wait`.
    pub async fn next(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(v) = self.pending.pop_front() {
                return Next::Event(v);
            }
            if self.ended {
                assert!(
                    self.buf.iter().all(u8::is_ascii_whitespace),
                    "stream ended inside a line: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Next::End;
            }
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Next::Timeout,
                Ok(f) => f,
            };
            match frame {
                None => self.ended = true,
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        assert!(
                            data.is_empty() || data.ends_with(b"\n"),
                            "a data frame must hold complete lines: {:?}",
                            String::from_utf8_lossy(&data)
                        );
                        self.buf.extend_from_slice(&data);
                        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                            let line = self.buf.split_to(pos + 1);
                            let line = &line[..pos];
                            if line.iter().all(u8::is_ascii_whitespace) {
                                continue;
                            }
                            let v: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
                                panic!("bad event line {:?}: {e}", String::from_utf8_lossy(line))
                            });
                            assert!(
                                v["type"].is_string() && v["object"].is_object(),
                                "event shape: {v}"
                            );
                            self.pending.push_back(v);
                        }
                    }
                }
                Some(Err(e)) => match e {},
            }
        }
    }

    /// The next event, failing the test on end or timeout.
    pub async fn expect(&mut self, wait: Duration) -> Value {
        match self.next(wait).await {
            Next::Event(v) => v,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// Asserts that the stream ends within `wait` without further events.
    pub async fn expect_end(&mut self, wait: Duration) {
        match self.next(wait).await {
            Next::End => {}
            other => panic!("expected the stream to end, got {other:?}"),
        }
    }

    /// Asserts nothing arrives for `wait` (stream still open).
    pub async fn expect_quiet(&mut self, wait: Duration) {
        match self.next(wait).await {
            Next::Timeout => {}
            other => panic!("expected no event, got {other:?}"),
        }
    }
}

/// Opens a watch; asserts HTTP 200 and `application/json`.
pub async fn watch(srv: &Arc<ApiServer>, uri: &str) -> Watch {
    let resp = send(srv, Method::GET, uri, None, Bytes::new()).await;
    let code = resp.status();
    if code != 200 {
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        panic!("watch {uri}: {code} {}", String::from_utf8_lossy(&body));
    }
    assert_eq!(
        resp.headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some("application/json"),
        "watch content type"
    );
    Watch {
        body: resp.into_body(),
        buf: BytesMut::new(),
        pending: VecDeque::new(),
        ended: false,
    }
}

/// Event type of an event line.
pub fn ev_type(ev: &Value) -> &str {
    ev["type"].as_str().unwrap_or("")
}

/// Asserts `v` is a `Status` with `code` and `reason`.
pub fn assert_status(what: &str, code: StatusCode, v: &Value, want_code: u16, reason: &str) {
    assert_eq!(code.as_u16(), want_code, "{what}: HTTP code; body {v}");
    assert_eq!(v["kind"], "Status", "{what}: {v}");
    assert_eq!(v["apiVersion"], "v1", "{what}: {v}");
    assert_eq!(v["status"], "Failure", "{what}: {v}");
    assert_eq!(v["code"], want_code, "{what}: {v}");
    assert_eq!(v["reason"], reason, "{what}: {v}");
    assert!(
        v["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: message: {v}"
    );
}

/// Seconds since `t`, for messages.
pub fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Serves `srv` with `opts` on a fresh loopback port for the rest of the test; its address.
pub async fn serve_on_loopback(
    srv: &Arc<ApiServer>,
    opts: apiserver::ServeOptions,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(apiserver::serve_with(
        listener,
        srv.clone(),
        opts,
        std::future::pending(),
    ));
    addr
}
