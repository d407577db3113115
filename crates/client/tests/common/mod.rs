//! Shared helpers of the client's integration tests: a real `listwatch serve` child on an
//! ephemeral port, deadline-bounded waiting, a test pod, a handler that records what it was
//! told, and the typed CRUD sequence run against both our server and a kube-apiserver.
//!
//! The server binary is expected at `<workspace>/target/debug/listwatch` (or under
//! `$CARGO_TARGET_DIR/debug/`); build it with `cargo build -p listwatch`.

#![allow(dead_code)]

use client::cache::{object_key, DeleteEvent, ResourceEventHandler};
use client::object::KubeObject;
use client::rest::{
    Api, Client, Config, DeleteOutcome, DeleteParams, PatchParams, PatchType, PostParams,
};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A `listwatch serve` child on a fresh data directory, serving plain HTTP on an ephemeral
/// loopback port; killed and cleaned up on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    extra: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn server_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let exe = target.join("debug").join("listwatch");
    assert!(
        exe.exists(),
        "the listwatch server binary is missing at {}: run `cargo build -p listwatch` first",
        exe.display()
    );
    exe
}

impl Server {
    /// Starts a server with `extra` arguments after the usual ones, and waits (≤ 30 s) for
    /// its "serving on" line.
    pub fn start(extra: &[&str]) -> Server {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "listwatch-client-it-{}-{stamp:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, url) = Self::spawn(&dir, &extra);
        Server {
            child,
            dir,
            url,
            extra,
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same data directory, with the
    /// same arguments; it comes back on a new port (`url` changes).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, url) = Self::spawn(&self.dir, &self.extra);
        self.child = child;
        self.url = url;
    }

    fn spawn(dir: &std::path::Path, extra: &[String]) -> (Child, String) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let mut child = Command::new(server_binary())
            .args([
                "serve",
                "--insecure-bind",
                "127.0.0.1:0",
                "--bind",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning listwatch serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "server did not start; log:\n{}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                )
            });
        let url = line
            .strip_prefix("listwatch serving on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim()
            .to_string();
        assert!(url.starts_with("http://"), "plain listener first: {line}");
        (child, url)
    }

    /// The `host:port` the plain listener is on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url
            .trim_start_matches("http://")
            .parse()
            .expect("the server URL is http://ADDR")
    }

    /// The server's counter or gauge `name` with every label in `labels`, summed over the
    /// other labels (0 if absent), read from its `/metrics`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, body) = self
            .client()
            .request_bytes(http::Method::GET, "/metrics", None)
            .await
            .expect("reading /metrics");
        metric_in(&String::from_utf8_lossy(&body), name, labels)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Creates the namespaces `names` (existing ones are fine).
    pub async fn namespaces(&self, names: &[&str]) {
        let client = self.client();
        for name in names {
            let ns = k8s_openapi::api::core::v1::Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match client
                .create::<k8s_openapi::api::core::v1::Namespace>(
                    &client::rest::resource::NAMESPACES,
                    None,
                    &client::rest::PostParams::default(),
                    &ns,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_already_exists() => {}
                Err(e) => panic!("creating namespace {name}: {e}"),
            }
        }
    }

    /// A client with a 20 s request timeout.
    pub fn client(&self) -> Client {
        let mut config = Config::new(&self.url).unwrap();
        config.timeout = Some(Duration::from_secs(20));
        Client::new(config).unwrap()
    }
}

/// A one-container pod `name` (image `nginx:1`) labelled `app=<app>`; its namespace is the
/// one it is created in.
pub fn pod(name: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("nginx:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// A pod's labels (empty if it has none).
pub fn labels(p: &Pod) -> BTreeMap<String, String> {
    p.metadata.labels.clone().unwrap_or_default()
}

/// Polls `cond` every 5 ms until it holds; fails the test with `what` after `limit`.
pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Awaits `fut` for at most `limit`; fails the test with `what` after that.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// An event handler that records, per key, the resourceVersion its last notification left
/// (`None` after a delete, direct or by tombstone).
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<BTreeMap<String, Option<String>>>>);

impl<K: KubeObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>, _initial: bool) {
        let rv = o.resource_version().map(str::to_string);
        self.0.lock().insert(object_key(&**o), rv);
    }
    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        let rv = new.resource_version().map(str::to_string);
        self.0.lock().insert(object_key(&**new), rv);
    }
    fn on_delete(&self, d: &DeleteEvent<K>) {
        let key = match d {
            DeleteEvent::Object(o) => object_key(&**o),
            DeleteEvent::Tombstone { key, .. } => key.clone(),
        };
        self.0.lock().insert(key, None);
    }
}

impl Recorder {
    /// key → resourceVersion of every key whose last notification was not a delete.
    pub fn live(&self) -> BTreeMap<String, String> {
        self.0
            .lock()
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect()
    }
}

/// Typed pod CRUD through `pods` (a namespace's pods, where no pod `web-1` or `bad` exists)
/// and the `Status` errors it meets: create (with the server's defaults), 409 AlreadyExists,
/// replace and a stale replace's 409 Conflict, the three patch formats, delete, 404s after
/// it, and a 422 for an invalid pod. Leaves no pod behind.
pub async fn typed_pod_crud(pods: &Api<Pod>) {
    let pp = PostParams::default();
    let created = pods.create(&pp, &pod("web-1", "web")).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(created.metadata.namespace.as_deref(), pods.namespace());
    assert!(created.metadata.uid.is_some());
    let phase = created.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"));
    let rv1 = created.metadata.resource_version.clone().unwrap();

    let got = pods.get("web-1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let e = pods.create(&pp, &pod("web-1", "web")).await.unwrap_err();
    assert!(e.is_already_exists(), "{e}");
    assert_eq!(e.code(), Some(409));

    let mut changed = got.clone();
    changed
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("tier".into(), "front".into());
    let replaced = pods.replace("web-1", &pp, &changed).await.unwrap();
    assert_eq!(labels(&replaced)["tier"], "front");
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    let e = pods.replace("web-1", &pp, &got).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(e.status().unwrap().details_name.as_deref(), Some("web-1"));

    let pa = PatchParams::default();
    let merged = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"m": "1"}}}),
        )
        .await
        .unwrap();
    assert_eq!(labels(&merged)["m"], "1");
    let jsonp = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Json,
            &json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"}]),
        )
        .await
        .unwrap();
    assert_eq!(labels(&jsonp)["j"], "2");
    let strategic = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Strategic,
            &json!({"metadata": {"labels": {"s": "3", "m": null}}}),
        )
        .await
        .unwrap();
    let l = labels(&strategic);
    assert_eq!(l["s"], "3");
    assert_eq!(l["j"], "2");
    assert!(!l.contains_key("m"));

    // A pod on no node is deleted at once: the object (or a success Status) comes back.
    match pods
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap()
    {
        DeleteOutcome::Object(p) => assert_eq!(p.metadata.name.as_deref(), Some("web-1")),
        DeleteOutcome::Status(s) => assert_eq!(s.status.as_deref(), Some("Success")),
    }
    let e = pods.get("web-1").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.code(), Some(404));
    let e = pods
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = pods
        .patch("nope", &pa, PatchType::Merge, &json!({}))
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");

    let mut bad = pod("bad", "web");
    bad.spec = Some(PodSpec::default());
    let e = pods.create(&pp, &bad).await.unwrap_err();
    assert!(e.is_invalid(), "{e}");
    assert_eq!(e.code(), Some(422));
}

/// The sum of the samples of `name` whose labels include all of `labels`, in a Prometheus
/// text exposition.
pub fn metric_in(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, rest)) => (m, rest),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
pub mod proxy;
