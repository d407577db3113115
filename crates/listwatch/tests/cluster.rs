//! A whole cluster in one command: kubectl 1.32 against `listwatch up` (the server, the
//! scheduler, the node lifecycle controller and node agents in one process, the components
//! talking to the server only through the client library).

mod common;

use common::{http_json, TestServer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
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

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[test]
fn pods_reach_nodes_and_run_through_list_watch_alone() {
    let srv = TestServer::start_up(3, &[]);
    // Three nodes register and are Ready.
    let nodes = eventually("3 Ready nodes", Duration::from_secs(30), || {
        let list = srv.kubectl_json(&["get", "nodes", "-o", "json"]);
        let ready = list["items"]
            .as_array()?
            .iter()
            .filter(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"))
            .count();
        (ready == 3).then_some(list)
    });
    assert!(nodes["items"][0]["status"]["allocatable"]["cpu"].is_string());

    // The controller-manager gave the namespace its default ServiceAccount.
    eventually(
        "the default ServiceAccount",
        Duration::from_secs(30),
        || {
            srv.kubectl_cmd(&["get", "serviceaccount", "default"])
                .output()
                .ok()?
                .status
                .success()
                .then_some(())
        },
    );
    // kubectl run: scheduled, Running on a node with an IP, Ready.
    srv.kubectl_ok(&["run", "web", "--image=nginx:1.27"]);
    let pod = eventually("web Running and Ready", Duration::from_secs(30), || {
        let p = srv.kubectl_json(&["get", "pod", "web", "-o", "json"]);
        (p["status"]["phase"] == "Running"
            && condition(&p, "Ready").is_some_and(|c| c["status"] == "True"))
        .then_some(p)
    });
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
    assert!(node.starts_with("node-"), "{pod}");
    assert!(pod["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("10.244.")));
    assert!(pod["status"]["hostIP"].as_str().is_some());
    assert_eq!(condition(&pod, "PodScheduled").unwrap()["status"], "True");
    let wide = srv.kubectl_ok(&["get", "pods", "-o", "wide"]);
    assert!(wide.contains("Running") && wide.contains(&node), "{wide}");
    // describe shows what the scheduler and the node agent reported.
    let described = eventually("events in describe", Duration::from_secs(15), || {
        let d = srv.kubectl_ok(&["describe", "pod", "web"]);
        ["Scheduled", "Pulled", "Created", "Started"]
            .iter()
            .all(|r| d.contains(r))
            .then_some(d)
    });
    assert!(
        described.contains(&format!("Successfully assigned default/web to {node}")),
        "{described}"
    );

    // Binding rules: a second binding is 409; moving the pod by patch is 422 and changes
    // nothing; an image change is allowed.
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "web"}, "target": {"kind": "Node", "name": "node-0"}});
    let (code, body) = http_json(
        "POST",
        &format!("{}/api/v1/namespaces/default/pods/web/binding", srv.url),
        Some(&binding),
    );
    assert_eq!(code, 409, "{body}");
    let other = if node == "node-1" { "node-0" } else { "node-1" };
    let move_it = format!(r#"{{"spec":{{"nodeName":"{other}"}}}}"#);
    let err = srv.kubectl_err(&["patch", "pod", "web", "--type=merge", "-p", &move_it]);
    assert!(err.contains("Invalid") || err.contains("invalid"), "{err}");
    let unchanged = srv.kubectl_json(&["get", "pod", "web", "-o", "json"]);
    assert_eq!(unchanged["spec"]["nodeName"], node.as_str());
    srv.kubectl_ok(&["set", "image", "pod/web", "web=nginx:1.28"]);
    let changed = srv.kubectl_json(&["get", "pod", "web", "-o", "json"]);
    assert_eq!(changed["spec"]["containers"][0]["image"], "nginx:1.28");

    // A pod no scheduler handles is bound by a Binding (201).
    let manual = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "manual"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, body) = http_json(
        "POST",
        &format!("{}/api/v1/namespaces/default/pods", srv.url),
        Some(&manual),
    );
    assert_eq!(code, 201, "{body}");
    let bind = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "manual"}, "target": {"kind": "Node", "name": "node-1"}});
    let (code, body) = http_json(
        "POST",
        &format!("{}/api/v1/namespaces/default/pods/manual/binding", srv.url),
        Some(&bind),
    );
    assert_eq!(code, 201, "{body}");

    // Delete: a watcher sees the pod Terminating (MODIFIED with a deletionTimestamp) before
    // it is DELETED, once the node agent has stopped its containers.
    let mut watch = srv
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
    let out = watch.stdout.take().unwrap();
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
    // kubectl lists before it watches: wait for the pod in its listing first.
    let listed = Instant::now();
    loop {
        assert!(
            listed.elapsed() < Duration::from_secs(20),
            "kubectl --watch printed nothing"
        );
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(200)) {
            if ev["object"]["metadata"]["name"] == "web" {
                break;
            }
        }
    }
    srv.kubectl_ok(&["delete", "pod", "web", "--wait=true"]);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Ok(ev) = rx.recv_timeout(Duration::from_millis(200)) else {
            if seen.iter().any(|(t, _): &(String, bool)| t == "DELETED") {
                break;
            }
            continue;
        };
        if ev["object"]["metadata"]["name"] == "web" {
            let terminating = ev["object"]["metadata"]["deletionTimestamp"].is_string();
            seen.push((ev["type"].as_str().unwrap_or("").to_string(), terminating));
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let terminating = seen.iter().position(|(t, term)| t == "MODIFIED" && *term);
    let deleted = seen.iter().position(|(t, _)| t == "DELETED");
    assert!(
        matches!((terminating, deleted), (Some(a), Some(b)) if a < b),
        "Terminating before DELETED: {seen:?}"
    );

    // An unschedulable pod stays Pending with its condition and event; a node that gets
    // the label takes it.
    srv.kubectl_ok(&[
        "run",
        "picky",
        "--image=nginx",
        "--overrides",
        r#"{"spec":{"nodeSelector":{"disk":"ssd"}}}"#,
    ]);
    let pending = eventually("picky unschedulable", Duration::from_secs(30), || {
        let p = srv.kubectl_json(&["get", "pod", "picky", "-o", "json"]);
        condition(&p, "PodScheduled")
            .filter(|c| c["status"] == "False" && c["reason"] == "Unschedulable")
            .cloned()
    });
    let message = pending["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("0/3 nodes are available:")
            && message.contains("node affinity/selector"),
        "{message}"
    );
    let events = srv.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=picky",
    ]);
    assert!(events.contains("FailedScheduling"), "{events}");
    srv.kubectl_ok(&["label", "node", "node-2", "disk=ssd"]);
    eventually(
        "picky bound to node-2 and Running",
        Duration::from_secs(30),
        || {
            let p = srv.kubectl_json(&["get", "pod", "picky", "-o", "json"]);
            (p["spec"]["nodeName"] == "node-2" && p["status"]["phase"] == "Running").then_some(())
        },
    );

    // Too much cpu: Insufficient cpu on every node.
    srv.kubectl_ok(&[
        "run", "huge", "--image=nginx", "--overrides",
        r#"{"spec":{"containers":[{"name":"huge","image":"nginx","resources":{"requests":{"cpu":"64"}}}]}}"#,
    ]);
    let huge = eventually("huge unschedulable", Duration::from_secs(30), || {
        let p = srv.kubectl_json(&["get", "pod", "huge", "-o", "json"]);
        condition(&p, "PodScheduled")
            .filter(|c| c["status"] == "False")
            .cloned()
    });
    assert!(
        huge["message"]
            .as_str()
            .is_some_and(|m| m.contains("3 Insufficient cpu")),
        "{huge}"
    );
}

#[test]
fn a_node_nobody_heartbeats_turns_unknown_and_tainted() {
    let srv = TestServer::start_up(
        1,
        &[
            "--node-monitor-grace-period",
            "3s",
            "--node-startup-grace-period",
            "3s",
        ],
    );
    eventually("node-0 Ready", Duration::from_secs(30), || {
        let n = srv.kubectl_json(&["get", "node", "node-0", "-o", "json"]);
        condition(&n, "Ready")
            .filter(|c| c["status"] == "True")
            .map(|_| ())
    });
    // A node registered by hand, whose lease nobody renews.
    let ghost = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "ghost", "labels": {"kubernetes.io/hostname": "ghost"}},
        "status": {"conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "reason": "KubeletReady", "message": "ready"}]}});
    let path = srv.write_file("ghost.json", &ghost.to_string());
    srv.kubectl_ok(&["create", "-f", path.to_str().unwrap()]);
    // After the (shortened) grace period the lifecycle controller marks it.
    let node = eventually("ghost Unknown and tainted", Duration::from_secs(60), || {
        let n = srv.kubectl_json(&["get", "node", "ghost", "-o", "json"]);
        let unknown = condition(&n, "Ready").is_some_and(|c| c["status"] == "Unknown");
        let effects: Vec<String> = n["spec"]["taints"]
            .as_array()?
            .iter()
            .filter(|t| t["key"] == "node.kubernetes.io/unreachable")
            .filter_map(|t| t["effect"].as_str().map(str::to_string))
            .collect();
        // NoSchedule at once; NoExecute as the eviction rate allows.
        let both =
            effects.iter().any(|e| e == "NoSchedule") && effects.iter().any(|e| e == "NoExecute");
        (unknown && both).then_some(n)
    });
    assert!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "Unknown"),
        "{node}"
    );
    // The live node stays Ready.
    let live = srv.kubectl_json(&["get", "node", "node-0", "-o", "json"]);
    assert_eq!(condition(&live, "Ready").unwrap()["status"], "True");
}

/// A `listwatch` component process, killed on drop.
struct Component(std::process::Child);

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn component(args: &[&str]) -> Component {
    Component(
        std::process::Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning a listwatch component"),
    )
}

fn create_pods(srv: &TestServer, prefix: &str, n: usize) {
    for i in 0..n {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{prefix}-{i}")},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let (code, body) = http_json(
            "POST",
            &format!("{}/api/v1/namespaces/default/pods", srv.url),
            Some(&pod),
        );
        assert_eq!(code, 201, "{body}");
    }
}

/// Names of the pods bound to a node.
fn bound(srv: &TestServer) -> Vec<String> {
    let list = srv.kubectl_json(&["get", "pods", "-o", "json"]);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|p| {
                    p["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                })
                .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_second_scheduler_takes_over_when_the_leader_stops_and_no_pod_is_bound_twice() {
    let srv = TestServer::start();
    let kc = srv.tls_kubeconfig();
    let kc = kc.to_str().unwrap();
    let _agents = component(&["node-agent", "--kubeconfig", kc, "--nodes", "2"]);
    // Nodes are created with the not-ready taint, which the node lifecycle controller lifts.
    let _lifecycle = component(&[
        "controller-manager",
        "--kubeconfig",
        kc,
        "--controllers",
        "nodelifecycle",
        "--leader-elect=false",
    ]);
    let mut first = Some(component(&["scheduler", "--kubeconfig", kc]));
    let lease = || {
        srv.kubectl_json(&[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "json",
        ])
    };
    let holder = eventually("the first scheduler leads", Duration::from_secs(30), || {
        let out = srv
            .kubectl_cmd(&["get", "lease", "-n", "kube-system", "kube-scheduler"])
            .output()
            .ok()?;
        out.status.success().then_some(())?;
        lease()["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_string)
    });
    let _second = component(&["scheduler", "--kubeconfig", kc]);
    create_pods(&srv, "a", 10);
    eventually(
        "the leader binds the first pods",
        Duration::from_secs(30),
        || (bound(&srv).len() == 10).then_some(()),
    );
    assert_eq!(
        lease()["spec"]["holderIdentity"],
        holder.as_str(),
        "the lease moved"
    );
    // The leader dies without releasing its lease: the second takes over once it expires
    // (15 s), and binds what came meanwhile.
    drop(first.take());
    let died = Instant::now();
    create_pods(&srv, "b", 10);
    eventually(
        "the second scheduler binds the rest",
        Duration::from_secs(40),
        || (bound(&srv).len() == 20).then_some(()),
    );
    let took = died.elapsed();
    let now = lease();
    assert_ne!(now["spec"]["holderIdentity"], holder.as_str());
    assert_eq!(now["spec"]["leaseTransitions"], 1);
    assert!(
        took < Duration::from_secs(15 + 10),
        "took over after {took:?}"
    );
    // Every pod was bound once: one Scheduled event each, and no binding conflict reported.
    let events = srv.kubectl_json(&["get", "events", "-o", "json"]);
    let mut scheduled = std::collections::BTreeMap::<String, i64>::new();
    for e in events["items"].as_array().unwrap() {
        if e["reason"] == "Scheduled" {
            let name = e["involvedObject"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            *scheduled.entry(name).or_default() += e["count"].as_i64().unwrap_or(1);
        }
        assert_ne!(e["reason"], "FailedScheduling", "{e}");
    }
    assert_eq!(scheduled.len(), 20, "{scheduled:?}");
    assert!(scheduled.values().all(|c| *c == 1), "{scheduled:?}");
}

/// Live and ready pods of one label selector, as a `kubectl get pods -w` watcher sees them:
/// the most live pods (not marked for deletion) and the fewest ready live pods at once.
struct PodWatch {
    child: std::process::Child,
    seen: std::sync::Arc<parking_lot::Mutex<PodWatchState>>,
}

#[derive(Default)]
struct PodWatchState {
    /// Live pods by name, with whether each is Ready.
    live: std::collections::BTreeMap<String, bool>,
    max_live: usize,
    min_ready: Option<usize>,
    events: usize,
    /// The stream could not be read as kubectl's watch output.
    broken: Option<String>,
}

impl PodWatch {
    fn start(srv: &TestServer, selector: &str) -> PodWatch {
        // No --request-timeout: it would end the watch.
        let mut child = std::process::Command::new(common::KUBECTL)
            .env("KUBECONFIG", srv.kubeconfig())
            .args([
                "get",
                "pods",
                "-l",
                selector,
                "-w",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning kubectl get -w");
        let stdout = child.stdout.take().expect("kubectl's stdout");
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(PodWatchState::default()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for ev in
                serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>()
            {
                let mut st = s.lock();
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        st.broken = Some(e.to_string());
                        return;
                    }
                };
                let pod = &ev["object"];
                let Some(name) = pod["metadata"]["name"].as_str() else {
                    st.broken = Some(format!("an event without a pod name: {ev}"));
                    return;
                };
                let live =
                    ev["type"] != "DELETED" && pod["metadata"]["deletionTimestamp"].is_null();
                if live {
                    let ready = condition(pod, "Ready").is_some_and(|c| c["status"] == "True");
                    st.live.insert(name.to_string(), ready);
                } else {
                    st.live.remove(name);
                }
                st.events += 1;
                st.max_live = st.max_live.max(st.live.len());
                let ready = st.live.values().filter(|r| **r).count();
                if st.min_ready.is_some() {
                    st.min_ready = st.min_ready.map(|m| m.min(ready));
                }
            }
        });
        PodWatch { child, seen }
    }

    /// Starts counting the fewest ready pods from now on.
    fn count_ready_from_now(&self) {
        let mut st = self.seen.lock();
        let ready = st.live.values().filter(|r| **r).count();
        st.min_ready = Some(ready);
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_rollout_left_midway_by_a_dead_leader_finishes_under_its_successor_within_max_surge() {
    let srv = TestServer::start();
    let kc = srv.tls_kubeconfig();
    let kc = kc.to_str().unwrap();
    let _agents = component(&["node-agent", "--kubeconfig", kc, "--nodes", "3"]);
    let _scheduler = component(&["scheduler", "--kubeconfig", kc, "--leader-elect=false"]);
    let mut first = Some(component(&["controller-manager", "--kubeconfig", kc]));
    let lease = || {
        let out = srv
            .kubectl_cmd(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "json",
            ])
            .output()
            .ok()?;
        out.status.success().then_some(())?;
        serde_json::from_slice::<Value>(&out.stdout).ok()
    };
    let holder = eventually(
        "the first controller-manager leads",
        Duration::from_secs(30),
        || {
            lease()?["spec"]["holderIdentity"]
                .as_str()
                .map(str::to_string)
        },
    );
    let _second = component(&["controller-manager", "--kubeconfig", kc]);

    // 10 replicas, at most 2 extra and none unavailable; each new pod must stay ready 2 s
    // before it counts, so the rollout takes several steps.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 10, "minReadySeconds": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}}});
    let (code, body) = http_json(
        "POST",
        &format!("{}/apis/apps/v1/namespaces/default/deployments", srv.url),
        Some(&deployment),
    );
    assert_eq!(code, 201, "{body}");
    let status = srv.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    assert!(status.contains("successfully rolled out"), "{status}");

    let watch = PodWatch::start(&srv, "app=web");
    eventually(
        "the watcher sees the 10 ready pods",
        Duration::from_secs(30),
        || {
            let st = watch.seen.lock();
            (st.live.len() == 10 && st.live.values().all(|r| *r)).then_some(())
        },
    );
    watch.count_ready_from_now();
    srv.kubectl_ok(&["set", "image", "deployment/web", "web=nginx:1.27"]);
    let new_rs = |srv: &TestServer| -> Option<Value> {
        let list = srv.kubectl_json(&["get", "rs", "-l", "app=web", "-o", "json"]);
        list["items"]
            .as_array()?
            .iter()
            .find(|rs| rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2")
            .cloned()
    };
    // The leader dies (SIGKILL, its lease not released) once the new ReplicaSet has grown.
    eventually("the new ReplicaSet grows", Duration::from_secs(60), || {
        let rs = new_rs(&srv)?;
        (rs["spec"]["replicas"].as_i64()? >= 2).then_some(())
    });
    drop(first.take());
    let at_death = new_rs(&srv).expect("the new ReplicaSet");
    let available = at_death["status"]["availableReplicas"]
        .as_i64()
        .unwrap_or(0);
    assert!(
        available < 10,
        "the rollout had finished before the leader died: {at_death}"
    );

    let status = srv.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    let now = lease().expect("the lease");
    assert_ne!(
        now["spec"]["holderIdentity"],
        holder.as_str(),
        "no handover"
    );
    assert_eq!(now["spec"]["leaseTransitions"], 1);
    // Only the new pods are left, all ready, and the deployment counts them.
    eventually("only the 10 new pods", Duration::from_secs(60), || {
        let st = watch.seen.lock();
        (st.live.len() == 10 && st.live.values().all(|r| *r)).then_some(())
    });
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    for field in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(d["status"][field], 10, "{field}: {}", d["status"]);
    }
    let pods = srv.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
    let hash = new_rs(&srv).expect("the new ReplicaSet")["metadata"]["labels"]["pod-template-hash"]
        .clone();
    for p in pods["items"].as_array().unwrap() {
        if p["metadata"]["deletionTimestamp"].is_null() {
            assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash, "{p}");
            assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1.27");
        }
    }
    let st = watch.seen.lock();
    assert!(st.broken.is_none(), "the pod watch broke: {:?}", st.broken);
    assert!(st.events > 20, "the watcher saw {} events", st.events);
    // maxSurge 2: never more than 12 live pods; maxUnavailable 0: never fewer than 10 ready.
    assert!(st.max_live <= 12, "live pods peaked at {}", st.max_live);
    assert_eq!(
        st.min_ready,
        Some(10),
        "ready pods fell to {:?}",
        st.min_ready
    );
}

#[test]
fn the_components_run_against_two_servers_over_one_etcd() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let etcd = rt.block_on(storage_etcd::testing::EtcdServer::start());
    let endpoint = etcd.endpoint();
    let etcd_args = ["--etcd-servers", endpoint.as_str()];
    let a = TestServer::start_in(tempfile::tempdir().unwrap(), &etcd_args);
    let b = TestServer::start_in(tempfile::tempdir().unwrap(), &etcd_args);
    // The scheduler and the controller-manager talk to A, the node agents to B.
    let (kc_a, kc_b) = (a.tls_kubeconfig(), b.tls_kubeconfig());
    let (kc_a, kc_b) = (kc_a.to_str().unwrap(), kc_b.to_str().unwrap());
    let _scheduler = component(&["scheduler", "--kubeconfig", kc_a]);
    let _manager = component(&["controller-manager", "--kubeconfig", kc_a]);
    let _agents = component(&["node-agent", "--kubeconfig", kc_b, "--nodes", "2"]);
    // A Deployment created through A runs on B's nodes, seen through either server.
    eventually(
        "2 nodes Ready, seen through A",
        Duration::from_secs(30),
        || {
            let list = a.kubectl_json(&["get", "nodes", "-o", "json"]);
            let ready = list["items"]
                .as_array()?
                .iter()
                .filter(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"))
                .count();
            (ready == 2).then_some(())
        },
    );
    a.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    ]);
    let pods = eventually(
        "3 pods Running, seen through B",
        Duration::from_secs(60),
        || {
            let list = b.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
            let items = list["items"].as_array()?.clone();
            (items.len() == 3 && items.iter().all(|p| p["status"]["phase"] == "Running"))
                .then_some(items)
        },
    );
    for p in &pods {
        assert!(p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("node-")));
        assert!(p["status"]["podIP"].is_string());
    }
    let status = a.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    drop(etcd);
}

#[test]
fn a_service_lists_the_ready_pods_it_selects() {
    let srv = TestServer::start_up(2, &[]);
    srv.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=2",
        "--port=8080",
    ]);
    srv.kubectl_ok(&[
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
    ]);
    let ips = |want: usize| {
        eventually(
            &format!("{want} ready addresses"),
            Duration::from_secs(60),
            || {
                let out = srv
                    .kubectl_cmd(&["get", "endpoints", "web", "-o", "json"])
                    .output()
                    .ok()?;
                let ep: Value = serde_json::from_slice(&out.stdout).ok()?;
                let subset = &ep["subsets"][0];
                let ips: Vec<String> = subset["addresses"]
                    .as_array()?
                    .iter()
                    .filter_map(|a| a["ip"].as_str().map(str::to_string))
                    .collect();
                (ips.len() == want && subset["ports"][0]["port"] == 8080).then_some(ips)
            },
        )
    };
    let two = ips(2);
    // They are the pods' addresses.
    let pods = srv.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
    let mut pod_ips: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_string))
        .collect();
    pod_ips.sort();
    assert_eq!(two, pod_ips);
    // Scaled, the list follows; kubectl's table shows it, and `describe service` (which reads
    // the EndpointSlices in kubectl 1.32) too.
    srv.kubectl_ok(&["scale", "deployment/web", "--replicas=3"]);
    let three = ips(3);
    let table = srv.kubectl_ok(&["get", "endpoints", "web"]);
    assert!(table.contains(&format!("{}:8080", three[0])), "{table}");
    let slice = eventually("an EndpointSlice of 3", Duration::from_secs(30), || {
        let list = srv.kubectl_json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ]);
        let items = list["items"].as_array()?.clone();
        (items.len() == 1 && items[0]["endpoints"].as_array()?.len() == 3).then(|| items[0].clone())
    });
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["ports"][0]["port"], 8080);
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert!(slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["conditions"]["ready"] == true));
    let described = srv.kubectl_ok(&["describe", "service", "web"]);
    assert!(
        described.contains(&format!("{}:8080", three[0])),
        "{described}"
    );
    // The Service gone, its Endpoints and EndpointSlices go too.
    srv.kubectl_ok(&["delete", "service", "web"]);
    eventually("the endpoints deleted", Duration::from_secs(30), || {
        (!srv
            .kubectl_cmd(&["get", "endpoints", "web"])
            .output()
            .ok()?
            .status
            .success())
        .then_some(())
    });
    eventually("the slices deleted", Duration::from_secs(30), || {
        let list = srv.kubectl_json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ]);
        list["items"].as_array()?.is_empty().then_some(())
    });
}

/// Names of the objects of `kind` whose names start with `prefix`.
fn names_of(srv: &TestServer, kind: &str, prefix: &str) -> Vec<String> {
    let list = srv.kubectl_json(&["get", kind, "-o", "json"]);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str())
                .filter(|n| n.starts_with(prefix))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn deletes_cascade_in_the_background_foreground_or_orphan_as_asked() {
    let srv = TestServer::start_up(2, &[]);
    let deploy = |name: &str| {
        srv.kubectl_ok(&[
            "create",
            "deployment",
            name,
            "--image=nginx",
            "--replicas=2",
        ]);
        let status = srv.kubectl_ok(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=60s",
        ]);
        assert!(status.contains("successfully rolled out"), "{status}");
    };
    // Background (kubectl's default): the Deployment goes, then its ReplicaSet and pods.
    deploy("bg");
    srv.kubectl_ok(&["delete", "deployment", "bg"]);
    eventually(
        "bg's ReplicaSet and pods gone",
        Duration::from_secs(60),
        || {
            (names_of(&srv, "replicasets", "bg-").is_empty()
                && names_of(&srv, "pods", "bg-").is_empty())
            .then_some(())
        },
    );

    // Orphan: the Deployment goes, its ReplicaSet stays without the reference, pods stay.
    deploy("orph");
    srv.kubectl_ok(&["delete", "deployment", "orph", "--cascade=orphan"]);
    let rs = eventually(
        "orph's ReplicaSet released",
        Duration::from_secs(30),
        || {
            let list = srv.kubectl_json(&["get", "replicasets", "-l", "app=orph", "-o", "json"]);
            let rs = list["items"].as_array()?.first()?.clone();
            rs["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(|o| o.is_empty())
                .then_some(rs)
        },
    );
    assert!(srv.kubectl(&["get", "deployment", "orph"]).status.code() != Some(0));
    assert_eq!(names_of(&srv, "pods", "orph-").len(), 2);

    // Foreground: the ReplicaSet waits, Terminating, until its pods are gone.
    let rs_name = rs["metadata"]["name"].as_str().unwrap().to_string();
    let out = srv.kubectl(&[
        "delete",
        "replicaset",
        &rs_name,
        "--cascade=foreground",
        "--timeout=60s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(names_of(&srv, "replicasets", "orph-").is_empty());
    assert!(
        names_of(&srv, "pods", "orph-").is_empty(),
        "the pods outlived their foreground-deleted owner"
    );

    // An object whose owner never existed is collected.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stray",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost",
            "uid": "00000000-0000-0000-0000-000000000000"}]}});
    let path = srv.write_file("stray.json", &cm.to_string());
    srv.kubectl_ok(&["create", "-f", path.to_str().unwrap()]);
    eventually(
        "the stray ConfigMap collected",
        Duration::from_secs(30),
        || {
            (!srv
                .kubectl_cmd(&["get", "configmap", "stray"])
                .output()
                .ok()?
                .status
                .success())
            .then_some(())
        },
    );
}

#[test]
fn a_deleted_namespace_waits_for_its_content_and_finalizers_then_goes() {
    let srv = TestServer::start_up(2, &[]);
    let n = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["-n", "shop"]);
        srv.kubectl_ok(&v)
    };
    srv.kubectl_ok(&["create", "namespace", "shop"]);
    n(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=2",
    ]);
    let status = n(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    n(&["create", "configmap", "plain", "--from-literal=k=v"]);
    let held = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held",
        "namespace": "shop", "finalizers": ["example.com/hold"]}, "data": {"k": "v"}});
    let path = srv.write_file("held.json", &held.to_string());
    srv.kubectl_ok(&["create", "-f", path.to_str().unwrap()]);

    // Without --wait=false kubectl would wait for the finalizer.
    let out = srv.kubectl_ok(&["delete", "namespace", "shop", "--wait=false"]);
    assert!(out.contains("namespace \"shop\" deleted"), "{out}");
    // The controller removes what it can; the finalizer keeps the ConfigMap, and with it
    // the namespace, Terminating.
    let ns = eventually(
        "only the held ConfigMap left",
        Duration::from_secs(90),
        || {
            let ns = srv.kubectl_json(&["get", "namespace", "shop", "-o", "json"]);
            let remaining = condition(&ns, "NamespaceContentRemaining")?;
            (remaining["message"]
                == "Some resources are remaining: configmaps. has 1 resource instances")
                .then_some(ns.clone())
        },
    );
    assert_eq!(ns["status"]["phase"], "Terminating");
    let remaining = condition(&ns, "NamespaceContentRemaining").unwrap();
    assert_eq!(
        (&remaining["status"], &remaining["reason"]),
        (&json!("True"), &json!("SomeResourcesRemain"))
    );
    let finalizers = condition(&ns, "NamespaceFinalizersRemaining").unwrap();
    assert_eq!(
        (&finalizers["status"], &finalizers["reason"], &finalizers["message"]),
        (
            &json!("True"),
            &json!("SomeFinalizersRemain"),
            &json!("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        )
    );
    let table = srv.kubectl_ok(&["get", "namespace", "shop"]);
    assert!(table.contains("Terminating"), "{table}");
    let left = n(&[
        "get",
        "deployments,replicasets,pods,configmaps",
        "-o",
        "name",
    ]);
    assert_eq!(left.trim(), "configmap/held", "{left}");

    // Nothing new goes in.
    let refused = srv.kubectl_err(&["create", "configmap", "late", "-n", "shop"]);
    assert!(
        refused.contains("configmaps \"late\" is forbidden: unable to create new content in namespace shop because it is being terminated"),
        "{refused}"
    );

    // The finalizer's owner lets go: the ConfigMap goes, then the namespace.
    n(&[
        "patch",
        "configmap",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    let out = srv.kubectl(&["wait", "--for=delete", "namespace/shop", "--timeout=90s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = srv.kubectl_err(&["get", "namespace", "shop"]);
    assert!(gone.contains("NotFound"), "{gone}");
}

/// The Running pods of DaemonSet `app`, as (node, image), sorted, leaving out pods being
/// deleted.
fn daemon_pods(srv: &TestServer, app: &str) -> Vec<(String, String)> {
    let list = srv.kubectl_json(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]);
    let mut out: Vec<(String, String)> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running"
        })
        .map(|p| {
            (
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                p["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Every pod of DaemonSet `app` (any phase, terminating ones too), by node name.
fn daemon_pod_nodes(srv: &TestServer, app: &str) -> Vec<String> {
    let list = srv.kubectl_json(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]);
    let mut out: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap_or("").to_string())
        .collect();
    out.sort();
    out
}

fn pairs(nodes: &[&str], image: &str) -> Vec<(String, String)> {
    nodes
        .iter()
        .map(|n| (n.to_string(), image.to_string()))
        .collect()
}

#[test]
fn a_daemon_set_follows_its_nodes_and_rolls_out_through_kubectl() {
    let srv = TestServer::start_up(2, &[]);
    let kc = srv.kubeconfig();
    let kc = kc.to_str().unwrap();
    let f = srv.write_file(
        "ds.yaml",
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      nodeSelector: {kubernetes.io/os: linux}\n      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions: [{key: agent-excluded, operator: DoesNotExist}]\n      containers: [{name: agent, image: 'busybox:1.36'}]\n",
    );
    srv.kubectl_ok(&["apply", "-f", f.to_str().unwrap()]);
    let limit = Duration::from_secs(90);
    // One Running pod on each node, placed by the scheduler through its node affinity.
    eventually("a Running pod on both nodes", limit, || {
        (daemon_pods(&srv, "agent") == pairs(&["node-0", "node-1"], "busybox:1.36")).then_some(())
    });
    let out = srv.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=90s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let out = srv.kubectl_ok(&["get", "ds", "agent"]);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    // NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE-SELECTOR
    assert_eq!(
        row[..7],
        ["agent", "2", "2", "2", "2", "2", "kubernetes.io/os=linux"],
        "{out}"
    );

    // A node registered later by a separate node agent gets its pod once it is Ready.
    let _late = component(&[
        "node-agent",
        "--kubeconfig",
        kc,
        "--nodes",
        "1",
        "--name-prefix",
        "late",
    ]);
    eventually("a Running pod on the new node", limit, || {
        (daemon_pods(&srv, "agent") == pairs(&["late-0", "node-0", "node-1"], "busybox:1.36"))
            .then_some(())
    });

    // A node whose labels stop matching loses its pod.
    srv.kubectl_ok(&["label", "node", "node-1", "agent-excluded=true"]);
    eventually("no pod left on node-1", limit, || {
        (daemon_pod_nodes(&srv, "agent") == ["late-0", "node-0"]).then_some(())
    });

    // A new image rolls every pod; rollout status waits for it.
    srv.kubectl_ok(&["set", "image", "ds/agent", "agent=busybox:1.37"]);
    let out = srv.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=90s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    eventually("both pods on the new image", limit, || {
        (daemon_pods(&srv, "agent") == pairs(&["late-0", "node-0"], "busybox:1.37")).then_some(())
    });
    let history = srv.kubectl_ok(&["rollout", "history", "ds/agent"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    let out = srv.kubectl_ok(&["get", "controllerrevisions", "-l", "app=agent"]);
    assert!(out.contains("daemonset.apps/agent"), "{out}");

    // Undo goes back to the first template as revision 3.
    srv.kubectl_ok(&["rollout", "undo", "ds/agent"]);
    let out = srv.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=90s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    eventually("both pods back on the old image", limit, || {
        (daemon_pods(&srv, "agent") == pairs(&["late-0", "node-0"], "busybox:1.36")).then_some(())
    });
    let history = srv.kubectl_ok(&["rollout", "history", "ds/agent"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["2", "3"], "{history}");
}
