//! Our control plane against a real kube-apiserver: `listwatch scheduler`, `listwatch
//! node-agent` and `listwatch controller-manager` are Kubernetes clients like any other, so
//! they must do their work against the real server as they do against ours (issue 7: "run
//! each part alone against any Kubernetes API server, a real kube-apiserver included"):
//! a Deployment rolled out, scaled and updated, then deleted in the foreground through our
//! garbage collector; an unschedulable pod bound once a node fits; a graceful deletion; a
//! Job run to completion and another failed by our Job controller.
//!
//! **Ignored by default**: no package registry this project builds from provides a
//! kube-apiserver, so CI cannot start one. To run them, point
//! `LISTWATCH_KUBE_APISERVER_KUBECONFIG` at a kubeconfig whose user may do anything on a
//! kube-apiserver (1.24 or later) that runs **no** scheduler, controller-manager or kubelet
//! of its own and has no nodes left from elsewhere (pods bound to a dead node never run) (`../shared/kubernetes-1.24/start.sh kas-plain` starts one, its kubeconfig in
//! `/tmp/kas/pki/kubeconfig`), then:
//!
//! ```text
//! cargo test -p listwatch --test kube_apiserver -- --ignored --test-threads 1
//! ```
//!
//! Each test registers nodes named after itself and the time, works in a namespace of its
//! own, and deletes its nodes at the end (a bare kube-apiserver runs no namespace
//! controller, so namespaces stay behind). The scheduler binds to any Ready node, so the
//! tests run one at a time.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const KUBECONFIG_VAR: &str = "LISTWATCH_KUBE_APISERVER_KUBECONFIG";
const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";

fn kubeconfig() -> PathBuf {
    std::env::var_os(KUBECONFIG_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("set {KUBECONFIG_VAR} to a kube-apiserver's kubeconfig"))
}

/// A unique name for this test's objects: `{test}-{seconds}`.
fn unique(test: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{test}-{}", secs % 1_000_000)
}

fn kubectl(args: &[&str]) -> Output {
    Command::new(KUBECTL)
        .env("KUBECONFIG", kubeconfig())
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running kubectl 1.32")
}

fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl_json(args: &[&str]) -> Value {
    let out = kubectl_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {out}"))
}

fn kubectl_apply(manifest: &Value) {
    let mut child = Command::new(KUBECTL)
        .env("KUBECONFIG", kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubectl 1.32");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("kubectl's stdin");
        stdin
            .write_all(manifest.to_string().as_bytes())
            .expect("writing to kubectl");
    }
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `probe` (≤ `limit`) until it returns `Some`.
fn eventually<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// A `listwatch` component process, killed on drop; its stderr is kept in a file so that
/// a failing test can show it.
struct Component {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Component {
    fn start(args: &[&str]) -> Component {
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let child = Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log.reopen().expect("the log file")))
            .spawn()
            .expect("spawning a listwatch component");
        Component { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deletes the test's nodes when dropped, even if the test failed.
struct Nodes(Vec<String>);

impl Drop for Nodes {
    fn drop(&mut self) {
        let mut args = vec!["delete", "node", "--ignore-not-found", "--wait=false"];
        args.extend(self.0.iter().map(String::as_str));
        let _ = kubectl(&args);
    }
}

fn ready_nodes(prefix: &str) -> usize {
    let list = kubectl_json(&["get", "nodes", "-o", "json"]);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|n| {
                    n["metadata"]["name"]
                        .as_str()
                        .is_some_and(|name| name.starts_with(prefix))
                        && condition(n, "Ready").is_some_and(|c| c["status"] == "True")
                        && !n["spec"]["taints"].as_array().is_some_and(|ts| {
                            ts.iter()
                                .any(|t| t["key"] == "node.kubernetes.io/not-ready")
                        })
                })
                .count()
        })
        .unwrap_or(0)
}

/// Creates the namespace and its `default` service account (kube-apiserver admits pods
/// only with one when its ServiceAccount admission is on, and no controller makes it here).
fn namespace(name: &str) {
    kubectl_ok(&["create", "namespace", name]);
    let _ = kubectl(&["create", "serviceaccount", "default", "-n", name]);
}

#[test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG (see the file's header)"]
fn a_deployment_runs_on_our_nodes_through_a_real_kube_apiserver() {
    let name = unique("lw-deploy");
    let prefix = format!("{name}-n");
    namespace(&name);
    let agents = Component::start(&["node-agent", "--nodes", "3", "--name-prefix", &prefix]);
    let _nodes = Nodes((0..3).map(|i| format!("{prefix}-{i}")).collect());
    let scheduler = Component::start(&["scheduler", "--leader-elect=false"]);
    let manager = Component::start(&["controller-manager", "--leader-elect=false"]);
    eventually("3 of our nodes Ready", Duration::from_secs(60), || {
        (ready_nodes(&prefix) == 3).then_some(())
    });
    // Each node is registered as a kubelet would: capacity, a Lease in kube-node-lease.
    let node = kubectl_json(&["get", "node", &format!("{prefix}-0"), "-o", "json"]);
    assert_eq!(node["status"]["capacity"]["pods"], "110", "{node}");
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        format!("{prefix}-0")
    );
    eventually("the node's Lease", Duration::from_secs(30), || {
        kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-node-lease",
            &format!("{prefix}-0"),
        ])
        .status
        .success()
        .then_some(())
    });

    kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        &name,
        "--image=nginx:1.27",
        "--replicas=4",
    ]);
    let out = kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        &name,
        "--timeout=90s",
    ]);
    assert!(
        out.status.success(),
        "rollout status: {}{}\nscheduler:\n{}\nmanager:\n{}\nagents:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        scheduler.log(),
        manager.log(),
        agents.log()
    );
    let pods = kubectl_json(&["get", "pods", "-n", &name, "-l", "app=web", "-o", "json"]);
    let items = pods["items"].as_array().expect("a pod list");
    assert_eq!(items.len(), 4, "{pods}");
    for p in items {
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        assert!(
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix)),
            "{p}"
        );
        assert!(p["status"]["podIP"].is_string(), "{p}");
        assert_eq!(condition(p, "Ready").expect("Ready")["status"], "True");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
    }
    // The events the real server stored: the scheduler's and the node agents'.
    let events = eventually(
        "Scheduled and Started events",
        Duration::from_secs(30),
        || {
            let list = kubectl_json(&["get", "events", "-n", &name, "-o", "json"]);
            let reasons: Vec<String> = list["items"]
                .as_array()?
                .iter()
                .filter_map(|e| e["reason"].as_str().map(str::to_string))
                .collect();
            [
                "Scheduled",
                "Pulled",
                "Created",
                "Started",
                "SuccessfulCreate",
            ]
            .iter()
            .all(|r| reasons.iter().any(|x| x == r))
            .then_some(reasons)
        },
    );
    assert!(
        !events.iter().any(|r| r == "FailedScheduling"),
        "{events:?}"
    );

    // Scale down: the ReplicaSet controller deletes, the node agents finish the graceful
    // deletions, and the pods go.
    kubectl_ok(&["scale", "deployment/web", "-n", &name, "--replicas=1"]);
    eventually("1 pod left", Duration::from_secs(60), || {
        let list = kubectl_json(&["get", "pods", "-n", &name, "-o", "json"]);
        (list["items"].as_array()?.len() == 1).then_some(())
    });
    // A rollout to a new image makes a second ReplicaSet and completes.
    kubectl_ok(&[
        "set",
        "image",
        "deployment/web",
        "-n",
        &name,
        "nginx=nginx:1.28",
    ]);
    kubectl_ok(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        &name,
        "--timeout=90s",
    ]);
    let rs = kubectl_json(&["get", "replicasets", "-n", &name, "-o", "json"]);
    assert_eq!(rs["items"].as_array().map(Vec::len), Some(2), "{rs}");

    // Our garbage collector on the real server: the Deployment deleted in the foreground
    // (the server holds it with its finalizer) goes only after its ReplicaSets and pods.
    let out = kubectl(&[
        "delete",
        "deployment",
        "web",
        "-n",
        &name,
        "--cascade=foreground",
        "--timeout=90s",
    ]);
    assert!(
        out.status.success(),
        "{}\nmanager:\n{}",
        String::from_utf8_lossy(&out.stderr),
        manager.log()
    );
    let left = |kind: &str| {
        kubectl_json(&["get", kind, "-n", &name, "-o", "json"])["items"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(left("replicasets"), 0);
    assert_eq!(left("pods"), 0);
}

#[test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG (see the file's header)"]
fn unschedulable_pods_wait_and_terminating_pods_finish_on_a_real_kube_apiserver() {
    let name = unique("lw-pods");
    let prefix = format!("{name}-n");
    namespace(&name);
    let _agents = Component::start(&["node-agent", "--nodes", "2", "--name-prefix", &prefix]);
    let _nodes = Nodes((0..2).map(|i| format!("{prefix}-{i}")).collect());
    let _scheduler = Component::start(&["scheduler", "--leader-elect=false"]);
    // kube-apiserver creates nodes with the not-ready taint; a node lifecycle controller
    // lifts it.
    let _lifecycle = Component::start(&[
        "controller-manager",
        "--controllers",
        "nodelifecycle",
        "--leader-elect=false",
    ]);
    eventually("2 of our nodes Ready", Duration::from_secs(60), || {
        (ready_nodes(&prefix) == 2).then_some(())
    });
    // A pod no node fits stays Pending with the scheduler's condition, and is bound once a
    // node gets the label it asks for.
    kubectl_apply(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "picky", "namespace": name},
        "spec": {"nodeSelector": {"disk": "ssd"},
                 "containers": [{"name": "c", "image": "nginx:1.27"}]}}));
    let pending = eventually("picky Unschedulable", Duration::from_secs(30), || {
        let p = kubectl_json(&["get", "pod", "picky", "-n", &name, "-o", "json"]);
        condition(&p, "PodScheduled")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "Unschedulable")
            .then_some(p)
    });
    assert_eq!(pending["status"]["phase"], "Pending");
    assert!(pending["spec"]["nodeName"].is_null(), "{pending}");
    let target = format!("{prefix}-1");
    kubectl_ok(&["label", "node", &target, "disk=ssd"]);
    let running = eventually("picky Running", Duration::from_secs(60), || {
        let p = kubectl_json(&["get", "pod", "picky", "-n", &name, "-o", "json"]);
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(running["spec"]["nodeName"], target.as_str());

    // Deleting a bound pod on the real server makes it Terminating; our node agent stops
    // its containers and finishes the deletion.
    let out = kubectl(&["delete", "pod", "picky", "-n", &name, "--timeout=60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = kubectl(&["get", "pod", "picky", "-n", &name]);
    assert!(!gone.status.success(), "picky still exists");
}

/// A Job whose pods exit `code` after a second, with `backoff_limit`.
fn exiting_job(name: &str, ns: &str, code: &str, backoff_limit: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"backoffLimit": backoff_limit, "template": {
            "metadata": {"annotations": {"listwatch.dev/exit-after": "1s",
                                         "listwatch.dev/exit-code": code}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}}})
}

#[test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG (see the file's header)"]
fn jobs_complete_and_fail_through_a_real_kube_apiserver() {
    let name = unique("lw-job");
    let prefix = format!("{name}-n");
    namespace(&name);
    let agents = Component::start(&["node-agent", "--nodes", "2", "--name-prefix", &prefix]);
    let _nodes = Nodes((0..2).map(|i| format!("{prefix}-{i}")).collect());
    let _scheduler = Component::start(&["scheduler", "--leader-elect=false"]);
    let manager = Component::start(&[
        "controller-manager",
        "--controllers",
        // The node lifecycle controller lifts the new nodes' not-ready taint.
        "job,nodelifecycle",
        "--leader-elect=false",
    ]);
    eventually("2 of our nodes Ready", Duration::from_secs(60), || {
        (ready_nodes(&prefix) == 2).then_some(())
    });

    // The server generated the selector (its own labels); our controller runs the pod,
    // counts it through the tracking finalizer and completes the Job.
    kubectl_apply(&exiting_job("ok", &name, "0", 6));
    let out = kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/ok",
        "-n",
        &name,
        "--timeout=90s",
    ]);
    assert!(
        out.status.success(),
        "kubectl wait: {}\nmanager:\n{}\nagents:\n{}",
        String::from_utf8_lossy(&out.stderr),
        manager.log(),
        agents.log()
    );
    let job = kubectl_json(&["get", "job", "ok", "-n", &name, "-o", "json"]);
    assert_eq!(job["status"]["succeeded"], 1, "{job}");
    assert!(job["status"]["completionTime"].is_string(), "{job}");
    let pods = kubectl_json(&[
        "get",
        "pods",
        "-n",
        &name,
        "-l",
        "job-name=ok",
        "-o",
        "json",
    ]);
    let items = pods["items"].as_array().expect("a pod list");
    assert_eq!(items.len(), 1, "{pods}");
    assert_eq!(items[0]["status"]["phase"], "Succeeded", "{pods}");
    assert!(
        items[0]["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "{pods}"
    );

    // backoffLimit 0: the first failed pod fails the Job.
    kubectl_apply(&exiting_job("bad", &name, "1", 0));
    let out = kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/bad",
        "-n",
        &name,
        "--timeout=90s",
    ]);
    assert!(
        out.status.success(),
        "kubectl wait: {}\nmanager:\n{}",
        String::from_utf8_lossy(&out.stderr),
        manager.log()
    );
    let job = kubectl_json(&["get", "job", "bad", "-n", &name, "-o", "json"]);
    assert_eq!(
        condition(&job, "Failed").unwrap()["reason"],
        "BackoffLimitExceeded",
        "{job}"
    );
    assert_eq!(job["status"]["failed"], 1, "{job}");
}
