//! A StatefulSet through kubectl 1.32 against `listwatch up` (server, scheduler, node
//! agents and controller-manager in one process): pods created in order on nodes with
//! their claims, `kubectl set image` rolled out from the highest ordinal down with
//! `rollout status`, `rollout history` and `rollout undo`, and a scale down from the top
//! whose claims go with the pods (`whenScaled: Delete`), each order checked by a `kubectl get pods --watch` running alongside.

mod common;

use common::TestServer;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// Polls `probe` (≤ `limit`) until it returns `Some`.
fn eventually<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One pod event a kubectl watcher printed.
#[derive(Debug, Clone)]
struct Seen {
    kind: String,
    name: String,
    ready: bool,
    terminating: bool,
    image: String,
    node: String,
}

/// `kubectl get pods --watch` in the default namespace, its events parsed as they come.
struct Watcher {
    child: Child,
    rx: Receiver<Value>,
    seen: Vec<Seen>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Watcher {
    fn start(srv: &TestServer) -> Watcher {
        let mut child = srv
            .kubectl_cmd(&[
                "get",
                "pods",
                "--watch",
                "-o",
                "json",
                "--output-watch-events",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            let mut buf = String::new();
            let mut depth = 0i32;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
                buf.push_str(&line);
                buf.push('\n');
                if depth == 0 && !buf.trim().is_empty() {
                    if let Ok(v) = serde_json::from_str::<Value>(&buf) {
                        let _ = tx.send(v);
                    }
                    buf.clear();
                }
            }
        });
        Watcher {
            child,
            rx,
            seen: Vec::new(),
        }
    }

    /// Reads events until one for pod `name` arrives (≤ `limit`).
    fn until_seen(&mut self, name: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            assert!(Instant::now() < deadline, "the watcher never showed {name}");
            self.drain(Duration::from_millis(200));
            if self.seen.iter().any(|s| s.name == name) {
                return;
            }
        }
    }

    /// Takes in what the watcher printed within `wait`.
    fn drain(&mut self, wait: Duration) {
        while let Ok(ev) = self.rx.recv_timeout(wait) {
            let o = &ev["object"];
            let ready = o["status"]["phase"] == "Running"
                && o["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            self.seen.push(Seen {
                kind: ev["type"].as_str().unwrap_or("").to_string(),
                name: o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                ready,
                terminating: o["metadata"]["deletionTimestamp"].is_string(),
                image: o["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                node: o["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            });
        }
    }

    fn position(&self, from: usize, f: impl Fn(&Seen) -> bool) -> Option<usize> {
        self.seen
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, s)| f(s))
            .map(|(i, _)| i)
    }
}

const MANIFEST: &str = "apiVersion: v1
kind: Service
metadata: {name: nginx}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, name: web}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: nginx
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.26
        volumeMounts: [{name: www, mountPath: /usr/share/nginx/html}]
  volumeClaimTemplates:
  - metadata: {name: www}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
";

fn rollout_status(srv: &TestServer) -> String {
    srv.kubectl_ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])
}

#[test]
fn a_statefulset_starts_rolls_back_and_scales_down_in_ordinal_order() {
    let srv = TestServer::start_up(2, &[]);
    // The watcher runs before the set exists: a pod of no set shows it is watching.
    srv.kubectl_ok(&["run", "marker", "--image=busybox", "--labels=app=marker"]);
    let mut w = Watcher::start(&srv);
    w.until_seen("marker", Duration::from_secs(30));

    let path = srv.write_file("web.yaml", MANIFEST);
    srv.kubectl_ok(&["apply", "-f", path.to_str().unwrap()]);
    let status = rollout_status(&srv);
    assert!(status.contains("roll out complete"), "{status}");
    w.drain(Duration::from_millis(500));

    // Created in order, each only once its predecessor ran Running and Ready, on a node.
    let added: Vec<&str> = w
        .seen
        .iter()
        .filter(|s| s.kind == "ADDED" && s.name.starts_with("web-"))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(added, ["web-0", "web-1", "web-2"], "{:#?}", w.seen);
    for i in 1..3 {
        let created = w
            .position(0, |s| s.kind == "ADDED" && s.name == format!("web-{i}"))
            .unwrap();
        let before_ready = w
            .position(0, |s| s.name == format!("web-{}", i - 1) && s.ready)
            .unwrap();
        assert!(before_ready < created, "web-{i} too early: {:#?}", w.seen);
        assert!(w.seen[before_ready].node.starts_with("node-"));
    }
    let pods = srv.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for p in items {
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        assert!(
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n.starts_with("node-")),
            "{p}"
        );
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_eq!(p["spec"]["hostname"], name);
        assert_eq!(p["spec"]["subdomain"], "nginx");
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            name
        );
    }
    let claims = srv.kubectl_json(&["get", "pvc", "-o", "json"]);
    let mut claim_names: Vec<&str> = claims["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    claim_names.sort();
    assert_eq!(claim_names, ["www-web-0", "www-web-1", "www-web-2"]);
    let table = srv.kubectl_ok(&["get", "statefulset", "web"]);
    assert!(table.contains("3/3"), "{table}");

    // kubectl set image: replaced from web-2 down to web-0, each once the one above is
    // back and ready; rollout status returns when all are.
    let from = w.seen.len();
    srv.kubectl_ok(&["set", "image", "statefulset/web", "nginx=nginx:1.27"]);
    let status = rollout_status(&srv);
    assert!(status.contains("roll out complete"), "{status}");
    w.drain(Duration::from_millis(500));
    let gone = |w: &Watcher, i: i32| {
        w.position(from, |s| s.name == format!("web-{i}") && s.terminating)
            .unwrap_or_else(|| panic!("web-{i} was not replaced: {:#?}", &w.seen[from..]))
    };
    let (g2, g1, g0) = (gone(&w, 2), gone(&w, 1), gone(&w, 0));
    assert!(g2 < g1 && g1 < g0, "{:#?}", &w.seen[from..]);
    for (i, at) in [(1, g1), (0, g0)] {
        let above = w
            .position(from, |s| {
                s.name == format!("web-{}", i + 1) && s.image == "nginx:1.27" && s.ready
            })
            .unwrap();
        assert!(above < at, "web-{i} went before web-{} was back", i + 1);
    }
    let sts = srv.kubectl_json(&["get", "statefulset", "web", "-o", "json"]);
    assert_eq!(
        sts["status"]["currentRevision"],
        sts["status"]["updateRevision"]
    );
    assert_eq!(sts["status"]["updatedReplicas"], 3);
    let history = srv.kubectl_ok(&["rollout", "history", "statefulset/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    // rollout undo: back to nginx:1.26, the first revision renumbered 3.
    srv.kubectl_ok(&["rollout", "undo", "statefulset/web"]);
    let status = rollout_status(&srv);
    assert!(status.contains("roll out complete"), "{status}");
    let images = srv.kubectl_ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(
        images.split_whitespace().collect::<Vec<_>>(),
        ["nginx:1.26"; 3]
    );
    let history = srv.kubectl_ok(&["rollout", "history", "statefulset/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["2", "3"], "{history}");

    // Scale to 1 with `whenScaled: Delete`: web-2 is gone entirely before web-1 starts
    // terminating; web-0 stays; the garbage collector deletes the claims of the two.
    srv.kubectl_ok(&[
        "patch",
        "statefulset",
        "web",
        "-p",
        r#"{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}"#,
    ]);
    w.drain(Duration::from_millis(200));
    let from = w.seen.len();
    srv.kubectl_ok(&["scale", "statefulset/web", "--replicas=1"]);
    eventually("one pod left", Duration::from_secs(120), || {
        let list = srv.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
        (list["items"].as_array()?.len() == 1).then_some(())
    });
    w.drain(Duration::from_millis(500));
    let two_deleted = w
        .position(from, |s| s.name == "web-2" && s.kind == "DELETED")
        .expect("web-2 deleted");
    let one_terminating = w
        .position(from, |s| {
            s.name == "web-1" && (s.terminating || s.kind == "DELETED")
        })
        .expect("web-1 deleted");
    assert!(two_deleted < one_terminating, "{:#?}", &w.seen[from..]);
    assert!(w
        .position(from, |s| s.name == "web-0" && s.terminating)
        .is_none());
    eventually(
        "the claims of web-1 and web-2 deleted",
        Duration::from_secs(60),
        || {
            let claims = srv.kubectl_json(&["get", "pvc", "-o", "json"]);
            let names: Vec<&str> = claims["items"]
                .as_array()?
                .iter()
                .filter_map(|c| c["metadata"]["name"].as_str())
                .collect();
            (names == ["www-web-0"]).then_some(())
        },
    );
    let left = srv.kubectl_json(&["get", "pod", "web-0", "-o", "json"]);
    assert!(!left["spec"]["nodeName"].as_str().unwrap_or("").is_empty());
}
