//! The chaos suite: the whole system under faults, then invariants.
//!
//! A `listwatch serve` (on the embedded store, or on a 3-member etcd cluster) with the
//! control plane as separate processes (controller-manager, scheduler, node agents for three
//! nodes, the components `listwatch up` runs in one process), three informers of our client
//! library, four raw watch streams and 64 concurrent writers. Between them and the server sit
//! fault-injecting TCP proxies. While a Deployment rolls out, the suite cuts every
//! connection, stalls them (bytes stop, sockets stay open) long enough for the watchers to
//! fall out of the server's small watch cache — a forced compaction, answered with 410 —,
//! refuses new connections, kills the API server with SIGKILL under the writers and starts it
//! again on the same data, and, on etcd, restarts a member and kills the leader. The
//! components are supervised as a node's init system would: one that exits (e.g. because it
//! lost its lease) is started again, and counted.
//!
//! At the end, with the faults over:
//! - every informer's store equals a fresh list (same keys, same resourceVersions);
//! - every acknowledged write is present, at its acknowledged resourceVersion or a later one;
//! - within every watch stream, resourceVersions strictly increase (bookmarks never go back);
//! - no pod is ever seen bound to two nodes;
//! - the Deployment's live pods never exceed replicas + maxSurge (on either of two
//!   independent pod streams: a surge both see is real, and their traces of the
//!   Deployment's pods and ReplicaSets are written beside the components' logs), and its
//!   rollout completes;
//! - at least one client saw a 410 and relisted (the forced compaction reached them).
//!
//! Each run prints its figures (faults, writes, relists, component restarts, time to
//! converge) on a `chaos:` line; RELIABILITY.md records them. The components' logs are kept
//! when a run fails, or always with `LISTWATCH_CHAOS_KEEP_LOGS` set.

mod common;

use client::cache::{RestListerWatcher, SharedIndexInformer};
use client::object::DynamicObject;
use client::rest::resource::{CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS};
use client::rest::{
    Api, ApiResource, Client, Config, ListParams, PatchParams, PatchType, PostParams, WatchEvent,
    WatchParams,
};
use common::{Component, TestServer};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use storage_etcd::testing::EtcdCluster;
use test_server::cached_versions;
use test_server::fault_proxy::FaultProxy;

/// The namespace of the writers' ConfigMaps and of the Deployment.
const NS: &str = "chaos";
const WRITERS: usize = 64;
/// Each writer's pause between writes: enough load to move the watch cache's window many
/// times over during a stall, without starving the control plane.
const WRITE_PACE: Duration = Duration::from_millis(15);
const REPLICAS: usize = 6;
const MAX_SURGE: usize = 2;
/// Events the server's watch cache keeps: a watcher stalled for a few seconds under the
/// writers falls behind it and must relist.
const WATCH_CACHE: &str = "150";
/// How long the end state may take to settle once the faults stop. An informer retries on
/// client-go's backoff: 800 ms doubling to 30 s, jittered up to twice that, and reset only
/// after two quiet minutes. Rounds of faults every 18 s keep it at the cap, so when they stop
/// an informer may be in a wait of up to 60 s, and then need one more cycle (a rewatch that
/// finds its version gone, then a relist) that waits as long again: 120 s of waits alone.
const CONVERGE_WITHIN: Duration = Duration::from_secs(180);

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("https://")
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("{url} is not http(s)://IP:PORT: {e}"))
}

fn rv_of(obj: &Value) -> Option<u64> {
    obj["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The API server and the proxies in front of it. Writers go through `writers` (which only
/// follows the server when it restarts); informers and watch streams through `clients`, the
/// control plane through `components` (TLS, passed through as bytes): those two get the
/// faults.
struct Plane {
    srv: Option<TestServer>,
    extra: Vec<String>,
    writers: FaultProxy,
    clients: FaultProxy,
    components: FaultProxy,
}

impl Plane {
    async fn start(extra: Vec<String>) -> Plane {
        let args: Vec<&str> = extra.iter().map(String::as_str).collect();
        let srv = tokio::task::block_in_place(|| {
            TestServer::start_in(tempfile::tempdir().expect("a temp dir"), &args)
        });
        let writers = FaultProxy::start(addr_of(&srv.url)).await;
        let clients = FaultProxy::start(addr_of(&srv.url)).await;
        let components = FaultProxy::start(addr_of(&srv.https_url)).await;
        Plane {
            srv: Some(srv),
            extra,
            writers,
            clients,
            components,
        }
    }

    fn srv(&self) -> &TestServer {
        self.srv.as_ref().expect("the server runs")
    }

    /// A kubeconfig for the control plane: the admin identity, through the TLS proxy.
    fn components_kubeconfig(&self) -> PathBuf {
        let path = self.srv().dir().join("kubeconfig-chaos");
        let url = format!(
            "https://{}",
            self.components.url().trim_start_matches("http://")
        );
        self.srv().write_admin_kubeconfig(&path, &url);
        path
    }

    /// SIGKILL, then a new server process on the same data (and, on etcd, the same cluster);
    /// every proxy follows it and drops what it had open.
    async fn kill9_and_restart(&mut self) {
        let dir = self.srv.take().expect("the server runs").kill9();
        let args: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let srv = tokio::task::block_in_place(|| TestServer::start_in(dir, &args));
        for p in [&self.writers, &self.clients] {
            p.set_target(addr_of(&srv.url));
            p.cut();
        }
        self.components.set_target(addr_of(&srv.https_url));
        self.components.cut();
        self.srv = Some(srv);
    }

    fn faulty(&self) -> [&FaultProxy; 2] {
        [&self.clients, &self.components]
    }
}

/// The control plane's processes, each started again when it exits.
struct Supervisor {
    stop: Arc<AtomicBool>,
    restarts: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    fn start(kubeconfig: &Path, logs: &Path) -> Supervisor {
        let kc = kubeconfig.to_str().expect("a UTF-8 path").to_string();
        let specs: Vec<(&'static str, Vec<String>)> = vec![
            ("controller-manager", vec!["controller-manager".into()]),
            ("scheduler", vec!["scheduler".into()]),
            (
                "node-agent",
                vec!["node-agent".into(), "--nodes".into(), "3".into()],
            ),
        ];
        let logs = logs.to_path_buf();
        let logs_for_spawn = logs.clone();
        let spawn = move |name: &str, args: &[String]| -> Component {
            let logs = &logs_for_spawn;
            let log = File::options()
                .create(true)
                .append(true)
                .open(logs.join(format!("{name}.log")))
                .expect("a component log");
            Component(
                Command::new(env!("CARGO_BIN_EXE_listwatch"))
                    .args(args)
                    .args(["--kubeconfig", &kc])
                    // Leader election's renewals at debug: why a component lost its lease.
                    .env(
                        "RUST_LOG",
                        "info,controllers::leader_election=debug,controllers::replicaset=debug,\
                         client::cache::reflector=debug",
                    )
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawning a listwatch component"),
            )
        };
        let stop = Arc::new(AtomicBool::new(false));
        let restarts = Arc::new(AtomicU64::new(0));
        let (s, r) = (stop.clone(), restarts.clone());
        let thread = std::thread::spawn(move || {
            let mut running: Vec<Component> =
                specs.iter().map(|(name, args)| spawn(name, args)).collect();
            while !s.load(Ordering::Relaxed) {
                for (i, (name, args)) in specs.iter().enumerate() {
                    if let Ok(Some(status)) = running[i].0.try_wait() {
                        r.fetch_add(1, Ordering::Relaxed);
                        // Why it ended is the last thing it logged: show it with the status.
                        let log = std::fs::read_to_string(logs.join(format!("{name}.log")))
                            .unwrap_or_default();
                        let last = log.lines().rev().find(|l| !l.trim().is_empty());
                        eprintln!(
                            "chaos: {name} exited ({status}); started again. Its last line: {}",
                            last.unwrap_or("(none)")
                        );
                        running[i] = spawn(name, args);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Supervisor {
            stop,
            restarts,
            thread: Some(thread),
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the writers had acknowledged.
#[derive(Default)]
struct Writes {
    /// ConfigMap name → the highest resourceVersion a 2xx answer to a create or patch gave it.
    acked: Mutex<HashMap<String, u64>>,
    /// Names whose delete was acknowledged (names are never reused).
    deleted: Mutex<BTreeSet<String>>,
    acknowledged: AtomicU64,
    failed: AtomicU64,
}

/// Each writer keeps about this many ConfigMaps: it deletes its oldest past it, so that a
/// long soak's state stays the same size.
const KEEP_PER_WRITER: usize = 20;

/// One writer: creates `w{w}-{i}`, merge-patches the ones it has, and deletes its oldest once
/// it has more than [`KEEP_PER_WRITER`].
async fn writer(client: Client, w: usize, stop: Arc<AtomicBool>, writes: Arc<Writes>) {
    let api: Api<Value> = Api::namespaced(client, CONFIGMAPS, NS);
    let mut created: std::collections::VecDeque<String> = Default::default();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let op = i % 4;
        let ok = if op == 0 || created.is_empty() || (op == 3 && created.len() <= KEEP_PER_WRITER) {
            let name = format!("w{w:02}-{i:06}");
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"seq": i.to_string()}});
            match api.create(&PostParams::default(), &cm).await {
                Ok(obj) => {
                    writes.ack(name.clone(), &obj);
                    created.push_back(name);
                    true
                }
                Err(_) => false,
            }
        } else if op == 3 {
            // The oldest goes; whatever the answer, nothing more is expected of it unless
            // the delete is acknowledged.
            let name = created.pop_front().expect("not empty");
            lock(&writes.acked).remove(&name);
            match api.delete(&name, &Default::default()).await {
                Ok(_) => {
                    lock(&writes.deleted).insert(name);
                    writes.acknowledged.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(_) => false,
            }
        } else {
            let name = created[(i * 7919) % created.len()].clone();
            let patch = json!({"data": {"seq": i.to_string()}});
            match api
                .patch(&name, &PatchParams::default(), PatchType::Merge, &patch)
                .await
            {
                Ok(obj) => {
                    writes.ack(name, &obj);
                    true
                }
                Err(_) => false,
            }
        };
        if !ok {
            // A fault: the write may or may not have landed; it was not acknowledged.
            writes.failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(WRITE_PACE).await;
    }
}

impl Writes {
    fn ack(&self, name: String, obj: &Value) {
        let rv = rv_of(obj).expect("an acknowledged write has a resourceVersion");
        let mut acked = lock(&self.acked);
        let e = acked.entry(name).or_default();
        *e = (*e).max(rv);
        self.acknowledged.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the raw watch streams saw.
#[derive(Default)]
struct StreamLog {
    streams: u64,
    events: u64,
    lists: u64,
    gone: u64,
    violations: Vec<String>,
    /// Pod UID → the node it was first seen bound to.
    bound: HashMap<String, String>,
    /// Live (not deleted, not terminating) pods of the Deployment.
    live_web: BTreeSet<String>,
    max_live_web: usize,
    /// What this log's pod stream saw of the Deployment's pods, in order (lists, watches,
    /// events, bookmarks, ends): printed when the surge invariant fails, to tell a real
    /// surge from a stream that missed an event.
    trace: Vec<String>,
    /// The live pods when the most were live.
    at_most: Vec<String>,
}

impl StreamLog {
    fn violation(&mut self, v: String) {
        if self.violations.len() < 20 {
            self.violations.push(v);
        }
    }

    /// Records one pod's state (`deleted`: its DELETED event).
    fn pod(&mut self, pod: &Value, deleted: bool) {
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            match self.bound.get(&uid) {
                Some(first) if first != node => {
                    let v = format!("pod {name} ({uid}) bound to {first}, then to {node}");
                    self.violation(v);
                }
                Some(_) => {}
                None => {
                    self.bound.insert(uid, node.to_string());
                }
            }
        }
        if pod["metadata"]["labels"]["app"] != "chaos-web" {
            return;
        }
        let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
        if deleted || terminating {
            self.live_web.remove(&name);
        } else {
            self.live_web.insert(name.clone());
        }
        self.note(format!(
            "{} {name} rv={} node={} terminating={terminating} deleted={deleted} live={}",
            pod["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or("-"),
            pod["metadata"]["resourceVersion"].as_str().unwrap_or("-"),
            pod["spec"]["nodeName"].as_str().unwrap_or("-"),
            self.live_web.len()
        ));
        if self.live_web.len() > self.max_live_web {
            self.max_live_web = self.live_web.len();
            self.at_most = self.live_web.iter().cloned().collect();
        }
    }

    /// Notes a ReplicaSet's sizes in the trace (the timeline of a surge).
    fn replica_set(&mut self, rs: &Value, deleted: bool) {
        let line = format!(
            "RS {} rv={} spec={} status={} deleted={deleted}",
            rs["metadata"]["name"].as_str().unwrap_or_default(),
            rs["metadata"]["resourceVersion"].as_str().unwrap_or("-"),
            rs["spec"]["replicas"],
            rs["status"]["replicas"],
        );
        self.note(line);
    }

    /// Appends to [`StreamLog::trace`] (bounded: a run sees a few hundred of these).
    fn note(&mut self, line: String) {
        if self.trace.len() < 20_000 {
            self.trace.push(line);
        }
    }
}

/// Lists, then watches from the list's version, resuming after every break from the last
/// version seen, relisting after a 410; checks that versions strictly increase within each
/// stream. `pods`: also feeds every pod to [`StreamLog::pod`].
async fn watch_stream(
    api: Api<Value>,
    what: &'static str,
    pods: bool,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<StreamLog>>,
) {
    let mut from: Option<u64> = None;
    while !stop.load(Ordering::Relaxed) {
        let start = match from {
            Some(rv) => rv,
            None => match api.list(&ListParams::default()).await {
                Ok(list) => {
                    let mut l = lock(&log);
                    l.lists += 1;
                    if pods {
                        l.live_web.clear();
                        l.note(format!("LIST at {}", list.resource_version));
                        for p in &list.items {
                            l.pod(p, false);
                        }
                    }
                    match list.resource_version.parse() {
                        Ok(rv) => rv,
                        Err(_) => {
                            l.violation(format!("{what}: a list without a numeric version"));
                            return;
                        }
                    }
                }
                Err(e) => {
                    lock(&log).gone += u64::from(e.is_gone());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        from = Some(start);
        let params = WatchParams {
            resource_version: Some(start.to_string()),
            idle_timeout: Some(Duration::from_secs(20)),
            ..WatchParams::default()
        };
        let mut stream = match api.watch(&params).await {
            Ok(s) => s,
            Err(e) => {
                if e.is_gone() {
                    lock(&log).gone += 1;
                    from = None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        {
            let mut l = lock(&log);
            l.streams += 1;
            if pods {
                l.note(format!("WATCH from {start}"));
            }
        }
        let mut last = start;
        while let Some(ev) = stream.next().await {
            let mut l = lock(&log);
            match ev {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    l.events += 1;
                    check_rv(&mut l, what, &o, &mut last);
                    if pods {
                        l.pod(&o, false);
                    } else if o["kind"] == "ReplicaSet" {
                        l.replica_set(&o, false);
                    }
                }
                Ok(WatchEvent::Deleted(o)) => {
                    l.events += 1;
                    check_rv(&mut l, what, &o, &mut last);
                    if pods {
                        l.pod(&o, true);
                    } else if o["kind"] == "ReplicaSet" {
                        l.replica_set(&o, true);
                    }
                }
                Ok(WatchEvent::Bookmark {
                    resource_version, ..
                }) => match resource_version.parse::<u64>() {
                    Ok(rv) if rv >= last => {
                        if pods {
                            l.note(format!("BOOKMARK at {rv}"));
                        }
                        last = rv;
                    }
                    _ => l.violation(format!(
                        "{what}: a bookmark at {resource_version} after {last}"
                    )),
                },
                Ok(WatchEvent::Error(status)) => {
                    if pods {
                        l.note(format!("ERROR event {}", status.code()));
                    }
                    if status.code() == 410 {
                        l.gone += 1;
                        from = None;
                    }
                    break;
                }
                Err(e) => {
                    if pods {
                        l.note(format!("ERROR {e}"));
                    }
                    if e.is_gone() {
                        l.gone += 1;
                        from = None;
                    }
                    break;
                }
            }
            if from.is_some() {
                from = Some(last);
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}

fn check_rv(l: &mut StreamLog, what: &str, obj: &Value, last: &mut u64) {
    match rv_of(obj) {
        Some(rv) if rv > *last => *last = rv,
        rv => l.violation(format!(
            "{what}: an event at {rv:?} after {last} in one stream: {}",
            obj["metadata"]["name"]
        )),
    }
}

fn informer(
    client: &Client,
    resource: ApiResource,
    ns: Option<&str>,
) -> SharedIndexInformer<DynamicObject> {
    let mut lw = RestListerWatcher::<DynamicObject>::new(client.clone(), resource);
    if let Some(ns) = ns {
        lw = lw.namespace(ns);
    }
    SharedIndexInformer::builder(Arc::new(lw)).build()
}

/// The same, from a fresh list of the server; `None` if the list failed.
async fn listed(api: &Api<Value>) -> Option<BTreeMap<String, String>> {
    let list = api.list_all(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                let key = match m["namespace"].as_str() {
                    Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap_or_default()),
                    None => m["name"].as_str().unwrap_or_default().to_string(),
                };
                (
                    key,
                    m["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect(),
    )
}

/// Whether the Deployment has rolled out `image` on all its replicas, and its pods run it.
async fn rolled_out(deployments: &Api<Value>, pods: &Api<Value>, image: &str) -> bool {
    let Ok(d) = deployments.get("chaos-web").await else {
        return false;
    };
    let st = &d["status"];
    let want = REPLICAS as i64;
    let done = d["metadata"]["generation"].as_i64() <= st["observedGeneration"].as_i64()
        && [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ]
        .iter()
        .all(|f| st[f].as_i64() == Some(want));
    if !done {
        return false;
    }
    let Ok(list) = pods
        .list(&ListParams::default().labels("app=chaos-web"))
        .await
    else {
        return false;
    };
    let running: Vec<&Value> = list
        .items
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    running.len() == REPLICAS
        && running.iter().all(|p| {
            p["status"]["phase"] == "Running" && p["spec"]["containers"][0]["image"] == image
        })
}

enum Store {
    Embedded,
    Etcd(EtcdCluster),
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Embedded => "embedded",
            Store::Etcd(_) => "etcd",
        }
    }
}

async fn pause(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The server's own figures from `/metrics`: resident bytes, open descriptors, live tasks.
#[derive(Debug, Clone, Copy)]
struct ProcessFigures {
    rss: f64,
    fds: f64,
    tasks: f64,
}

/// Everything that runs during a chaos run.
struct World {
    store: Store,
    plane: Plane,
    steady: Client,
    logs: tempfile::TempDir,
    supervisor: Supervisor,
    informers: Vec<(SharedIndexInformer<DynamicObject>, Api<Value>)>,
    streams: Vec<tokio::task::JoinHandle<()>>,
    churn: tokio::task::JoinHandle<()>,
    stop_streams: Arc<AtomicBool>,
    log: Arc<Mutex<StreamLog>>,
    /// The second pod stream's.
    second: Arc<Mutex<StreamLog>>,
    writes: Arc<Writes>,
    writer_tasks: Vec<tokio::task::JoinHandle<()>>,
    stop_writers: Arc<AtomicBool>,
    deployments: Api<Value>,
    pods: Api<Value>,
    image: &'static str,
    faults: u32,
    rounds: u32,
    /// Short watches opened (and dropped) by the churn task.
    churned: Arc<AtomicU64>,
}

const IMAGES: [&str; 2] = ["nginx:1.25", "nginx:1.27"];

impl World {
    /// The server, its proxies, the control plane, the clients, a rolled-out Deployment and
    /// the writers: everything running, no fault yet.
    async fn start(store: Store) -> World {
        let mut extra: Vec<String> = vec!["--watch-cache-size".into(), WATCH_CACHE.into()];
        if let Store::Etcd(cluster) = &store {
            extra.extend([
                "--etcd-servers".into(),
                cluster.endpoints().join(","),
                "--etcd-compaction-interval".into(),
                "2s".into(),
            ]);
        }
        let plane = Plane::start(extra).await;
        // `steady` goes through the writers' proxy, which follows the server across its
        // restart and injects no fault of its own.
        let steady =
            Client::new(Config::new(&plane.writers.url()).expect("a config")).expect("a client");
        Api::<Value>::all(steady.clone(), NAMESPACES)
            .create(
                &PostParams::default(),
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            )
            .await
            .expect("creating the namespace");
        let logs = tempfile::tempdir().expect("a temp dir for the component logs");
        let supervisor = Supervisor::start(&plane.components_kubeconfig(), logs.path());

        // The clients: three informers, two raw watch streams and short-lived watches,
        // through the faulty proxy.
        let clients =
            Client::new(Config::new(&plane.clients.url()).expect("a config")).expect("a client");
        let informers = vec![
            (
                informer(&clients, CONFIGMAPS, Some(NS)),
                Api::namespaced(steady.clone(), CONFIGMAPS, NS),
            ),
            (
                informer(&clients, PODS, None),
                Api::all(steady.clone(), PODS),
            ),
            (
                informer(&clients, REPLICASETS, None),
                Api::all(steady.clone(), REPLICASETS),
            ),
        ];
        for (inf, _) in &informers {
            inf.start();
        }
        let stop_streams = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(StreamLog::default()));
        let second = Arc::new(Mutex::new(StreamLog::default()));
        let streams = vec![
            tokio::spawn(watch_stream(
                Api::all(clients.clone(), PODS),
                "pods",
                true,
                stop_streams.clone(),
                log.clone(),
            )),
            // A second, independent pod stream: a surge both see is the Deployment's, one
            // only one sees is a stream that missed an event.
            tokio::spawn(watch_stream(
                Api::namespaced(clients.clone(), PODS, NS),
                "pods (second stream)",
                true,
                stop_streams.clone(),
                second.clone(),
            )),
            // The ReplicaSets' sizes, on the first stream's timeline.
            tokio::spawn(watch_stream(
                Api::namespaced(clients.clone(), REPLICASETS, NS),
                "replicasets",
                false,
                stop_streams.clone(),
                log.clone(),
            )),
            tokio::spawn(watch_stream(
                Api::namespaced(clients.clone(), CONFIGMAPS, NS),
                "configmaps",
                false,
                stop_streams.clone(),
                log.clone(),
            )),
        ];
        let churned = Arc::new(AtomicU64::new(0));
        let churn = tokio::spawn(churn(
            Api::namespaced(clients.clone(), CONFIGMAPS, NS),
            stop_streams.clone(),
            churned.clone(),
        ));

        // The Deployment, rolled out once before the faults.
        let deployments: Api<Value> = Api::namespaced(steady.clone(), DEPLOYMENTS, NS);
        let pods: Api<Value> = Api::namespaced(steady.clone(), PODS, NS);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "chaos-web"},
            "spec": {"replicas": REPLICAS,
                "selector": {"matchLabels": {"app": "chaos-web"}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": {"app": "chaos-web"}},
                    "spec": {"containers": [{"name": "web", "image": IMAGES[0]}]}}}});
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .expect("creating the Deployment");
        let started = Instant::now();
        while !rolled_out(&deployments, &pods, IMAGES[0]).await {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the Deployment did not roll out before the faults; components' logs in {}",
                logs.path().display()
            );
            pause(Duration::from_millis(250)).await;
        }

        let writes = Arc::new(Writes::default());
        let stop_writers = Arc::new(AtomicBool::new(false));
        let writer_tasks = (0..WRITERS)
            .map(|w| {
                tokio::spawn(writer(
                    steady.clone(),
                    w,
                    stop_writers.clone(),
                    writes.clone(),
                ))
            })
            .collect();
        pause(Duration::from_secs(2)).await;
        World {
            store,
            plane,
            steady,
            logs,
            supervisor,
            informers,
            streams,
            churn,
            stop_streams,
            log,
            second,
            writes,
            writer_tasks,
            stop_writers,
            deployments,
            pods,
            image: IMAGES[0],
            faults: 0,
            rounds: 0,
            churned,
        }
    }

    /// One round of faults while the Deployment rolls over to the other image: cuts,
    /// stalls past the watch cache's window, refused connections, with `kill9` a SIGKILL of
    /// the API server and a restart, and on etcd a member restarted and its leader killed.
    async fn round(&mut self, kill9: bool) {
        self.rounds += 1;
        // 1. Every connection cut.
        for p in self.plane.faulty() {
            p.cut();
        }
        self.faults += 1;
        pause(Duration::from_secs(2)).await;
        // 2. The rollout starts; then a stall long enough for the watchers to fall out of
        //    the watch cache (a forced compaction: they must see 410 and relist).
        self.image = if self.image == IMAGES[0] {
            IMAGES[1]
        } else {
            IMAGES[0]
        };
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": self.image}]}}}});
        let started = Instant::now();
        while let Err(e) = self
            .deployments
            .patch(
                "chaos-web",
                &PatchParams::default(),
                PatchType::Strategic,
                &patch,
            )
            .await
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "starting the rollout: {e}"
            );
            pause(Duration::from_millis(200)).await;
        }
        self.stall(Duration::from_secs(4)).await;
        pause(Duration::from_secs(2)).await;
        // 3. New connections refused for 2 s, open ones cut.
        for p in self.plane.faulty() {
            p.set_refusing(true);
            p.cut();
        }
        pause(Duration::from_secs(2)).await;
        for p in self.plane.faulty() {
            p.set_refusing(false);
        }
        self.faults += 1;
        pause(Duration::from_secs(2)).await;
        // 4. SIGKILL of the API server under the writers, and a new one on the same data.
        if kill9 {
            self.plane.kill9_and_restart().await;
            self.faults += 1;
            pause(Duration::from_secs(3)).await;
        }
        // 5. On etcd: a member restarted, then the leader killed and brought back.
        if let Store::Etcd(cluster) = &mut self.store {
            let leader = cluster
                .leader()
                .await
                .expect("the etcd cluster has a leader");
            let follower = (leader + 1) % 3;
            cluster.kill(follower);
            pause(Duration::from_secs(2)).await;
            cluster.restart(follower).await;
            self.faults += 1;
            pause(Duration::from_secs(2)).await;
            let leader = cluster
                .leader()
                .await
                .expect("the etcd cluster has a leader");
            cluster.kill(leader);
            let new_leader = cluster.leader().await.expect("a new etcd leader");
            assert_ne!(new_leader, leader, "the killed member still leads");
            pause(Duration::from_secs(2)).await;
            cluster.restart(leader).await;
            self.faults += 1;
            pause(Duration::from_secs(2)).await;
        }
        // 6. Another stall past the watch cache's window, then one more cut.
        self.stall(Duration::from_secs(4)).await;
        for p in self.plane.faulty() {
            p.cut();
        }
        self.faults += 1;
        pause(Duration::from_secs(2)).await;
    }

    async fn stall(&mut self, d: Duration) {
        for p in self.plane.faulty() {
            p.set_stalled(true);
        }
        pause(d).await;
        for p in self.plane.faulty() {
            p.set_stalled(false);
        }
        self.faults += 1;
    }

    /// The server's process figures, from its `/metrics`.
    async fn process_figures(&self) -> Option<ProcessFigures> {
        let url = format!("{}/metrics", self.plane.srv().url);
        let (code, body) = common::http_request(&common::http_client(), "GET", &url, None)
            .await
            .ok()?;
        let text = (code == 200).then(|| String::from_utf8_lossy(&body).into_owned())?;
        let get = |name: &str| test_server::metric_in(&text, name, &[]);
        Some(ProcessFigures {
            rss: get("process_resident_memory_bytes"),
            fds: get("process_open_fds"),
            tasks: get("tokio_alive_tasks"),
        })
    }

    /// How each informer differs from a fresh list: counts and a few keys of each kind, and
    /// its reflector's counters.
    async fn informer_differences(&self) -> String {
        let mut detail = String::new();
        for (inf, api) in &self.informers {
            let have = cached_versions(inf);
            let want = listed(api).await.unwrap_or_default();
            let missing: Vec<&String> = want.keys().filter(|k| !have.contains_key(*k)).collect();
            let extra: Vec<&String> = have.keys().filter(|k| !want.contains_key(*k)).collect();
            let stale: Vec<String> = want
                .iter()
                .filter_map(|(k, v)| {
                    let h = have.get(k)?;
                    (h != v).then(|| format!("{k} cached at {h}, stored at {v}"))
                })
                .collect();
            detail.push_str(&format!(
                "\n- {}: {} cached, {} listed, synced {}; {:?}\n  missing {} {:?}\n  \
                 extra {} {:?}\n  stale {} {:?}",
                api.resource().plural,
                have.len(),
                want.len(),
                inf.has_synced(),
                inf.reflector_metrics(),
                missing.len(),
                &missing[..missing.len().min(3)],
                extra.len(),
                &extra[..extra.len().min(3)],
                stale.len(),
                &stale[..stale.len().min(3)],
            ));
        }
        detail
    }

    /// Stops the load, waits for the system to settle, checks every invariant and prints
    /// the figures (`took`: how long the faults went on).
    async fn finish(mut self, took: Duration) {
        let backend = self.store.name();
        self.stop_writers.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.writer_tasks) {
            t.await.expect("a writer panicked");
        }
        let faults_over = Instant::now();

        // Convergence: the rollout completes and every informer equals a fresh list.
        let mut rollout_done = None;
        let mut informers_equal = None;
        let mut next_report = Duration::from_secs(10);
        loop {
            if rollout_done.is_none() && rolled_out(&self.deployments, &self.pods, self.image).await
            {
                rollout_done = Some(faults_over.elapsed());
            }
            if rollout_done.is_some() {
                let mut all = true;
                for (inf, api) in &self.informers {
                    all &= listed(api)
                        .await
                        .is_some_and(|want| cached_versions(inf) == want);
                }
                if all {
                    informers_equal = Some(faults_over.elapsed());
                    break;
                }
            }
            if faults_over.elapsed() > CONVERGE_WITHIN {
                break;
            }
            if faults_over.elapsed() >= next_report {
                next_report += Duration::from_secs(10);
                eprintln!(
                    "chaos: {backend}: not converged {:.0} s after the faults:{}",
                    faults_over.elapsed().as_secs_f64(),
                    self.informer_differences().await
                );
            }
            pause(Duration::from_millis(250)).await;
        }
        let Some(converged) = informers_equal else {
            let detail = self.informer_differences().await;
            let logs = self.logs.keep();
            panic!(
                "{backend}: not converged {CONVERGE_WITHIN:?} after the faults (rollout done: \
                 {rollout_done:?}):{detail}\ncomponents' logs: {}\nserver's log tail:\n{}",
                logs.display(),
                common::tail(&self.plane.srv().stderr(), 3000)
            )
        };

        // Every acknowledged write is there, at its version or a later one; every
        // acknowledged delete is gone.
        let stored: HashMap<String, u64> =
            Api::<Value>::namespaced(self.steady.clone(), CONFIGMAPS, NS)
                .list_all(&ListParams::default())
                .await
                .expect("listing the ConfigMaps")
                .items
                .iter()
                .filter_map(|c| Some((c["metadata"]["name"].as_str()?.to_string(), rv_of(c)?)))
                .collect();
        let acked = lock(&self.writes.acked).clone();
        let deleted = lock(&self.writes.deleted).clone();
        let mut lost: Vec<String> = acked
            .iter()
            .filter(|(name, rv)| stored.get(*name).is_none_or(|s| s < *rv))
            .map(|(name, rv)| format!("{name}@{rv} (stored: {:?})", stored.get(name)))
            .chain(
                deleted
                    .iter()
                    .filter(|name| stored.contains_key(*name))
                    .map(|name| format!("{name} deleted but still there")),
            )
            .collect();
        lost.sort();
        assert!(
            lost.is_empty(),
            "{backend}: {} of {} acknowledged writes are missing, older or undone: {:?}",
            lost.len(),
            acked.len() + deleted.len(),
            &lost[..lost.len().min(10)]
        );

        self.stop_streams.store(true, Ordering::Relaxed);
        // A stream may be waiting for its next event: give it a moment, then stop it.
        pause(Duration::from_millis(500)).await;
        for s in &self.streams {
            s.abort();
        }
        self.churn.abort();
        let l = lock(&self.log);
        let second = lock(&self.second);
        for log in [&*l, &*second] {
            assert!(
                log.violations.is_empty(),
                "{backend}: invariants broken: {:#?}",
                log.violations
            );
        }
        let surged = l.max_live_web.max(second.max_live_web) > REPLICAS + MAX_SURGE;
        let too_few = l.events == 0 || l.bound.len() < 2 * REPLICAS;
        if surged || too_few {
            let path = self.logs.keep().join("streams.trace");
            let text = format!(
                "first stream (with the ReplicaSets):\n{}\n\nsecond stream:\n{}\n",
                l.trace.join("\n"),
                second.trace.join("\n")
            );
            let _ = std::fs::write(&path, text);
            assert!(
                !too_few,
                "{backend}: the streams saw {} events, {} bound pods; their traces in {}",
                l.events,
                l.bound.len(),
                path.display()
            );
            panic!(
                "{backend}: the Deployment had {} live pods at once (replicas {REPLICAS} + \
                 maxSurge {MAX_SURGE}), {} on the second stream: {:?}, {:?}; the streams' \
                 traces in {}",
                l.max_live_web,
                second.max_live_web,
                l.at_most,
                second.at_most,
                path.display()
            );
        }
        let metrics: Vec<_> = self
            .informers
            .iter()
            .map(|(inf, _)| inf.reflector_metrics())
            .collect();
        let informer_gone: u64 = metrics.iter().map(|m| m.gone).sum();
        let informer_relists: u64 = metrics.iter().map(|m| m.relists).sum();
        assert!(
            informer_gone + l.gone > 0,
            "{backend}: no client saw a 410: the forced compaction did not reach them"
        );
        let acknowledged = self.writes.acknowledged.load(Ordering::Relaxed);
        assert!(
            acknowledged > 1000,
            "{backend}: only {acknowledged} writes were acknowledged"
        );
        eprintln!(
            "chaos: {backend}: {} rounds, {} faults in {:.1} s; {acknowledged} writes \
             acknowledged, {} failed under the faults; informers: {informer_relists} \
             relists, {informer_gone} 410s, {} watches; streams: {} watches, {} lists, {} \
             410s, {} events; {} short watches; component restarts: {}; pods bound: {}; most \
             live pods of the Deployment: {}; converged {:.1} s after the faults (rollout \
             done at {:.1} s)",
            self.rounds,
            self.faults,
            took.as_secs_f64(),
            self.writes.failed.load(Ordering::Relaxed),
            metrics.iter().map(|m| m.watches).sum::<u64>(),
            l.streams,
            l.lists,
            l.gone,
            l.events,
            self.churned.load(Ordering::Relaxed),
            self.supervisor.restarts.load(Ordering::Relaxed),
            l.bound.len(),
            l.max_live_web,
            converged.as_secs_f64(),
            rollout_done.unwrap_or_default().as_secs_f64(),
        );
        drop((l, second));
        for (inf, _) in &self.informers {
            inf.stop();
        }
        if std::env::var_os("LISTWATCH_CHAOS_KEEP_LOGS").is_some() {
            eprintln!(
                "chaos: components' logs kept in {}",
                self.logs.keep().display()
            );
        }
    }
}

/// Watchers coming and going: a watch opened every 100 ms, read for up to a second, then
/// dropped.
async fn churn(api: Api<Value>, stop: Arc<AtomicBool>, opened: Arc<AtomicU64>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let api = api.clone();
        let opened = opened.clone();
        tokio::spawn(async move {
            let read_for = Duration::from_millis(100 + (n * 379) % 900);
            let _ = tokio::time::timeout(read_for, async {
                if let Ok(mut w) = api.watch(&WatchParams::default()).await {
                    opened.fetch_add(1, Ordering::Relaxed);
                    while let Some(Ok(_)) = w.next().await {}
                }
            })
            .await;
        });
        pause(Duration::from_millis(100)).await;
    }
}

async fn chaos(store: Store) {
    let mut world = World::start(store).await;
    let started = Instant::now();
    world.round(true).await;
    world.finish(started.elapsed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_system_survives_chaos_on_the_embedded_store() {
    chaos(Store::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_system_survives_chaos_on_a_three_member_etcd_cluster() {
    let cluster = EtcdCluster::start(3).await;
    chaos(Store::Etcd(cluster)).await;
}

/// The soak: rounds of chaos for `LISTWATCH_SOAK_MINUTES` (default 60) on the store named by
/// `LISTWATCH_SOAK_STORE` (`embedded`, the default, or `etcd`), then every invariant. The
/// server is killed once, in the first round, so that the later rounds watch one process:
/// its resident memory, open descriptors and live tasks, sampled after each round, must stay
/// flat after the warm-up (the first quarter). Run it with `scripts/soak.sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "an hour long: run by scripts/soak.sh"]
async fn soak() {
    let minutes: u64 = std::env::var("LISTWATCH_SOAK_MINUTES")
        .ok()
        .map(|m| {
            m.parse()
                .expect("LISTWATCH_SOAK_MINUTES is a number of minutes")
        })
        .unwrap_or(60);
    let store = match std::env::var("LISTWATCH_SOAK_STORE").as_deref() {
        Ok("etcd") => Store::Etcd(EtcdCluster::start(3).await),
        Ok("embedded") | Err(_) => Store::Embedded,
        Ok(other) => panic!("LISTWATCH_SOAK_STORE={other}: embedded or etcd"),
    };
    let mut world = World::start(store).await;
    let started = Instant::now();
    let mut samples: Vec<(f64, ProcessFigures)> = Vec::new();
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        world.round(world.rounds == 0).await;
        if let Some(f) = world.process_figures().await {
            let at = started.elapsed().as_secs_f64();
            eprintln!(
                "soak: round {} at {:.0} s: rss {:.1} MiB, {} fds, {} tasks, {} writes, {} \
                 component restarts",
                world.rounds,
                at,
                f.rss / 1048576.0,
                f.fds,
                f.tasks,
                world.writes.acknowledged.load(Ordering::Relaxed),
                world.supervisor.restarts.load(Ordering::Relaxed)
            );
            samples.push((at, f));
        }
    }
    let took = started.elapsed();
    // Flat after the warm-up: the last quarter's highest within a bound of the second
    // quarter's highest (the first quarter warms the caches and pools).
    // The store's history is compacted in steps, so memory saws up and down over a few
    // rounds: each quarter needs enough rounds for its highest to be a fair one.
    assert!(
        samples.len() >= 20,
        "{} rounds are too few to judge flatness: a soak needs at least 20 (about 7 minutes)",
        samples.len()
    );
    let quarter = samples.len() / 4;
    let high = |s: &[(f64, ProcessFigures)], f: fn(&ProcessFigures) -> f64| {
        s.iter().map(|(_, x)| f(x)).fold(0.0, f64::max)
    };
    let warm = &samples[quarter..2 * quarter];
    let last = &samples[samples.len() - quarter..];
    for (name, f, slack) in [
        (
            "rss",
            (|x: &ProcessFigures| x.rss) as fn(&ProcessFigures) -> f64,
            1.25,
        ),
        ("fds", |x: &ProcessFigures| x.fds, 1.25),
        ("tasks", |x: &ProcessFigures| x.tasks, 1.25),
    ] {
        let (w, l) = (high(warm, f), high(last, f));
        eprintln!("soak: {name}: highest {w:.0} after the warm-up, {l:.0} in the last quarter");
        assert!(
            l <= w * slack + 64.0,
            "{name} grew from {w:.0} to {l:.0} over the soak"
        );
    }
    world.finish(took).await;
}
