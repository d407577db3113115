//! Scale-out: two `listwatch serve` processes over one 3-member etcd cluster behave as one
//! API server.
//!
//! (a) a watch on server A sees writes made through server B, in order;
//! (b) under a steady write load through B, SIGKILL one etcd member: writes (retrying 5xx a
//!     few times) and the watch on A continue;
//! (c) SIGKILL server A: a client that resumes its watch on server B from the last
//!     resourceVersion it saw on A gets every later event exactly once — no gap, no
//!     duplicate, no relist — because resourceVersions are etcd revisions.

mod common;

use bytes::Bytes;
use common::{http_client, http_request, tail, HttpClient};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use storage_etcd::testing::EtcdCluster;
use tokio::sync::mpsc;

const CM: &str = "/api/v1/namespaces/default/configmaps";
/// How long to wait for one expected watch event before failing.
const EVENT_WAIT: Duration = Duration::from_secs(20);

/// A `listwatch serve` process on etcd, serving plain HTTP on a loopback port.
struct Server {
    child: Child,
    url: String,
    stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `listwatch serve` on the etcd `endpoints`; waits for its plain-HTTP URL.
    fn start(name: &'static str, endpoints: &[String]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .arg("serve")
            .args(["--bind", "127.0.0.1:0", "--insecure-bind", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--etcd-servers")
            .arg(endpoints.join(","))
            .args(["--etcd-compaction-interval", "3s"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the listwatch binary");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std_mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listwatch serving on http://") {
                    let _ = tx.send(format!("http://{}", url.trim()));
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(u) => u,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server {name} did not print its plain-HTTP URL ({e}); stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Server {
            child,
            url,
            stderr,
            _dir: dir,
        }
    }

    fn stderr_tail(&self) -> String {
        tail(&self.stderr.lock().unwrap(), 4000).to_string()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One watch event: type, name, resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev {
    kind: String,
    name: String,
    rv: u64,
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {obj}"))
}

/// Opens a watch at `url` and forwards its events (parsed) on a channel that closes when the
/// stream ends. Panics unless the server answers 200.
async fn open_watch(url: &str) -> mpsc::UnboundedReceiver<Value> {
    let client = http_client();
    let req = http::Request::get(url)
        .header("accept", "application/json")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .unwrap_or_else(|_| panic!("watch {url}: no response headers within 20 s"))
        .unwrap_or_else(|e| panic!("watch {url}: {e}"));
    assert_eq!(resp.status(), 200, "watch {url}");
    let (tx, rx) = mpsc::unbounded_channel();
    let mut body = resp.into_body();
    tokio::spawn(async move {
        let _client = client;
        let mut buf: Vec<u8> = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let v: Value = match serde_json::from_slice(&line) {
                    Ok(v) => v,
                    Err(e) => panic!("bad watch line {:?}: {e}", String::from_utf8_lossy(&line)),
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The next event from `rx` as an [`Ev`]; `None` if the stream ended. Panics on an ERROR
/// event (e.g. 410: the test's point is that no relist is needed) or after [`EVENT_WAIT`].
async fn next_event(rx: &mut mpsc::UnboundedReceiver<Value>, ctx: &str) -> Option<Ev> {
    let v = tokio::time::timeout(EVENT_WAIT, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{ctx}: no watch event within {EVENT_WAIT:?}"))?;
    let kind = v["type"].as_str().unwrap_or("").to_string();
    assert_ne!(kind, "ERROR", "{ctx}: watch error event {v}");
    let obj = &v["object"];
    Some(Ev {
        kind,
        name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        rv: rv_of(obj),
    })
}

fn configmap(name: &str, i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name}, "data": {"i": i.to_string()}})
}

/// Creates configmap `name` through `base`, retrying transient failures (connection errors,
/// 5xx) up to 15 times. A retry answered 409 was applied by an earlier attempt: its
/// resourceVersion is read back. Returns the acknowledged resourceVersion, or `None` if every
/// attempt failed (then the write may or may not have been applied).
async fn create_retrying(client: &HttpClient, base: &str, name: &str, i: usize) -> Option<u64> {
    let body = configmap(name, i);
    let url = format!("{base}{CM}");
    for attempt in 0..15 {
        let r = tokio::time::timeout(
            Duration::from_secs(15),
            http_request(client, "POST", &url, Some(&body)),
        )
        .await;
        match r {
            Ok(Ok((201, bytes))) => {
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                return Some(rv_of(&v));
            }
            Ok(Ok((409, _))) if attempt > 0 => {
                let (code, bytes) = http_request(client, "GET", &format!("{url}/{name}"), None)
                    .await
                    .unwrap_or_else(|e| panic!("reading back {name}: {e}"));
                assert_eq!(code, 200, "reading back {name}");
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                return Some(rv_of(&v));
            }
            Ok(Ok((code, bytes))) if code >= 500 => {
                eprintln!(
                    "create {name}: {code} {} (retrying)",
                    String::from_utf8_lossy(&bytes)
                );
            }
            Ok(Ok((code, bytes))) => panic!(
                "create {name}: unexpected {code} {}",
                String::from_utf8_lossy(&bytes)
            ),
            Ok(Err(e)) => eprintln!("create {name}: {e} (retrying)"),
            Err(_) => eprintln!("create {name}: no answer within 15 s (retrying)"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_a_three_member_etcd_cluster_act_as_one() {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(3).await;
    let endpoints = cluster.endpoints();
    let mut a = Server::start("A", &endpoints);
    let b = Server::start("B", &endpoints);
    let client = http_client();

    // (a) A watch on A sees writes made through B, in order.
    let (code, bytes) = http_request(&client, "GET", &format!("{}{CM}", a.url), None)
        .await
        .unwrap();
    assert_eq!(code, 200, "list on A: {}", String::from_utf8_lossy(&bytes));
    let rv0 = rv_of(&serde_json::from_slice::<Value>(&bytes).unwrap());
    let mut on_a = open_watch(&format!(
        "{}{CM}?watch=true&resourceVersion={rv0}&timeoutSeconds=300",
        a.url
    ))
    .await;
    let mut acked: Vec<(String, u64)> = Vec::new();
    for i in 0..20 {
        let name = format!("warmup-{i:02}");
        let rv = create_retrying(&client, &b.url, &name, i)
            .await
            .unwrap_or_else(|| panic!("create {name} through B failed"));
        acked.push((name, rv));
    }
    let mut seen_on_a: Vec<Ev> = Vec::new();
    while seen_on_a.len() < acked.len() {
        let ev = next_event(&mut on_a, "watch on A (warm-up)")
            .await
            .unwrap_or_else(|| panic!("watch on A ended; A stderr:\n{}", a.stderr_tail()));
        seen_on_a.push(ev);
    }
    let got: Vec<(String, u64)> = seen_on_a.iter().map(|e| (e.name.clone(), e.rv)).collect();
    assert_eq!(got, acked, "A's watch shows B's writes, in order");
    assert!(seen_on_a.iter().all(|e| e.kind == "ADDED"));

    // (b) A steady write load through B (about 50 creates/s) from here on.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = client.clone();
        let base = b.url.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut unacked = Vec::new();
            let mut i = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                tick.tick().await;
                let name = format!("load-{i:05}");
                match create_retrying(&client, &base, &name, i).await {
                    Some(rv) => acked.push((name, rv)),
                    None => unacked.push(name),
                }
                i += 1;
            }
            (acked, unacked)
        })
    };
    // The watch on A is read concurrently, so that it keeps up with the load.
    let (a_tx, mut a_rx) = mpsc::unbounded_channel::<Ev>();
    let reader_a = tokio::spawn(async move {
        while let Some(ev) = next_event(&mut on_a, "watch on A (under load)").await {
            if a_tx.send(ev).is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    while let Ok(ev) = a_rx.try_recv() {
        seen_on_a.push(ev);
    }
    let before_kill = seen_on_a.len();
    // Kill the leader: the hardest case. Writes stall until the other two members elect a
    // new leader and etcd times out the requests it had forwarded to the dead one (about
    // 5 s + 2 election timeouts, as for Kubernetes), then go on.
    let leader = cluster.leader().await.expect("the cluster has a leader");
    cluster.kill(leader);
    let killed_at = Instant::now();
    // Events keep reaching A after the member died: 100 more within 25 s.
    let resumed = tokio::time::timeout(Duration::from_secs(25), async {
        while seen_on_a.len() < before_kill + 100 {
            match a_rx.recv().await {
                Some(ev) => seen_on_a.push(ev),
                None => return false,
            }
        }
        true
    })
    .await;
    assert!(
        resumed == Ok(true),
        "the watch on A did not keep receiving the load after the leader (member {leader}) was \
         killed ({} events in {:?}); A stderr:\n{}\nB stderr:\n{}",
        seen_on_a.len() - before_kill,
        killed_at.elapsed(),
        a.stderr_tail(),
        b.stderr_tail()
    );
    eprintln!(
        "scale-out: 100 events on A {:?} after killing the leader (member {leader})",
        killed_at.elapsed()
    );

    // (c) Kill server A; the client resumes on B from the last resourceVersion it saw on A.
    a.kill9();
    // Drain whatever A delivered before it died; the stream must then end.
    tokio::time::timeout(Duration::from_secs(10), reader_a)
        .await
        .expect("the watch on A ends when A is killed")
        .expect("reader task");
    while let Ok(ev) = a_rx.try_recv() {
        seen_on_a.push(ev);
    }
    let last_on_a = seen_on_a.last().map_or(rv0, |e| e.rv);
    let mut on_b = open_watch(&format!(
        "{}{CM}?watch=true&resourceVersion={last_on_a}&timeoutSeconds=300",
        b.url
    ))
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (load_acked, unacked) = writer.await.expect("writer task");
    assert!(
        load_acked.len() > 150,
        "the write load continued through the member kill: {} creates acknowledged, {} failed",
        load_acked.len(),
        unacked.len()
    );
    acked.extend(load_acked);
    // A create whose every attempt failed may still have been applied: ask B.
    for name in &unacked {
        let (code, bytes) = http_request(&client, "GET", &format!("{}{CM}/{name}", b.url), None)
            .await
            .unwrap();
        if code == 200 {
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            acked.push((name.clone(), rv_of(&v)));
        }
    }
    acked.sort_by_key(|(_, rv)| *rv);
    let last_rv = acked.last().map_or(0, |(_, rv)| *rv);

    let mut seen_on_b: Vec<Ev> = Vec::new();
    while seen_on_b.last().is_none_or(|e| e.rv < last_rv) {
        let ev = next_event(&mut on_b, "resumed watch on B")
            .await
            .unwrap_or_else(|| panic!("watch on B ended; B stderr:\n{}", b.stderr_tail()));
        seen_on_b.push(ev);
    }
    assert!(
        seen_on_b.iter().all(|e| e.rv > last_on_a),
        "the resumed watch starts strictly after {last_on_a}"
    );
    let all: Vec<(String, u64)> = seen_on_a
        .iter()
        .chain(&seen_on_b)
        .map(|e| (e.name.clone(), e.rv))
        .collect();
    let missing: Vec<&(String, u64)> = acked.iter().filter(|w| !all.contains(w)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged writes never seen by the client: {missing:?}"
    );
    assert_eq!(
        all.len(),
        acked.len(),
        "every write seen exactly once (A then B), nothing else"
    );
    assert_eq!(all, acked, "events in resourceVersion order, no duplicate");
    assert!(
        seen_on_a
            .iter()
            .chain(&seen_on_b)
            .all(|e| e.kind == "ADDED"),
        "only creates were made"
    );
    eprintln!(
        "scale-out: {} writes, {} seen on A, {} on B after resuming from {last_on_a}, {:?} in all",
        acked.len(),
        seen_on_a.len(),
        seen_on_b.len(),
        started.elapsed()
    );
    drop(b);
    drop(cluster);
}

/// Polls `url` through `client` until it answers `want`, for at most 20 s.
async fn until_status(client: &HttpClient, url: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let code = http_request(client, "GET", url, None)
            .await
            .map(|(c, _)| c)
            .unwrap_or(0);
        if code == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GET {url} still answers {code}, not {want}, after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_is_served_alike_by_every_server_over_one_etcd() {
    let cluster = EtcdCluster::start(1).await;
    let a = Server::start("A", &cluster.endpoints());
    let b = Server::start("B", &cluster.endpoints());
    let client = http_client();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer", "maximum": 5}}}}}}}]}
    });
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (code, body) = http_request(&client, "POST", &format!("{}{crds}", a.url), Some(&crd))
        .await
        .expect("create the CRD on A");
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    // B learns of it through etcd and serves it, schema included.
    let v1 = "/apis/example.com/v1/namespaces/default/gadgets";
    until_status(&client, &format!("{}{v1}", b.url), 200).await;
    let gadget = |name: &str, size: i64| {
        json!({"apiVersion": "example.com/v1", "kind": "Gadget",
               "metadata": {"name": name}, "spec": {"size": size}})
    };
    let (code, _) = http_request(
        &client,
        "POST",
        &format!("{}{v1}", b.url),
        Some(&gadget("g", 3)),
    )
    .await
    .expect("create through B");
    assert_eq!(code, 201, "B: {}", b.stderr_tail());
    let (code, _) = http_request(
        &client,
        "POST",
        &format!("{}{v1}", b.url),
        Some(&gadget("big", 9)),
    )
    .await
    .expect("a violation through B");
    assert_eq!(code, 422, "B applies the schema");
    let (code, got) = http_request(&client, "GET", &format!("{}{v1}/g", a.url), None)
        .await
        .expect("read through A");
    assert_eq!(code, 200);
    let got: Value = serde_json::from_slice(&got).expect("JSON");
    assert_eq!(got["spec"]["size"], 3);

    // A change made through A (a second served version) takes effect on B without a restart.
    let (_, current) = http_request(
        &client,
        "GET",
        &format!("{}{crds}/gadgets.example.com", a.url),
        None,
    )
    .await
    .expect("read the CRD");
    let mut changed: Value = serde_json::from_slice(&current).expect("JSON");
    let mut v2 = changed["spec"]["versions"][0].clone();
    v2["name"] = json!("v2");
    v2["storage"] = json!(false);
    changed["spec"]["versions"]
        .as_array_mut()
        .expect("versions")
        .push(v2);
    let (code, body) = http_request(
        &client,
        "PUT",
        &format!("{}{crds}/gadgets.example.com", a.url),
        Some(&changed),
    )
    .await
    .expect("update the CRD on A");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let v2_item = format!("{}/apis/example.com/v2/namespaces/default/gadgets/g", b.url);
    until_status(&client, &v2_item, 200).await;
    let (_, got) = http_request(&client, "GET", &v2_item, None)
        .await
        .expect("v2 read");
    let got: Value = serde_json::from_slice(&got).expect("JSON");
    assert_eq!(
        got["apiVersion"], "example.com/v2",
        "served at the version asked for"
    );
    let (_, group) = http_request(&client, "GET", &format!("{}/apis/example.com", b.url), None)
        .await
        .expect("the group's discovery");
    let group: Value = serde_json::from_slice(&group).expect("JSON");
    assert_eq!(
        group["preferredVersion"]["version"], "v2",
        "the higher version is preferred, as Kubernetes ranks them: {group}"
    );

    // Deleted through B: A stops serving it once its objects are gone.
    let (code, _) = http_request(
        &client,
        "DELETE",
        &format!("{}{crds}/gadgets.example.com", b.url),
        None,
    )
    .await
    .expect("delete the CRD on B");
    assert_eq!(code, 200);
    until_status(&client, &format!("{}{v1}", a.url), 404).await;
    until_status(
        &client,
        &format!("{}{crds}/gadgets.example.com", a.url),
        404,
    )
    .await;
}
