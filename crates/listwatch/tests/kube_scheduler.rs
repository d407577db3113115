//! The real kube-scheduler against `listwatch serve`, for the compatibility issue 7 asks for:
//! it lists and watches everything it needs over TLS in protobuf, binds the pods our node
//! agents then run, reports the pods it cannot place, and records its events through
//! `events.k8s.io/v1`.
//!
//! **Ignored by default**: none of the package registries this project builds from provides
//! a kube-scheduler, so CI cannot start one. To run them, point `LISTWATCH_KUBE_SCHEDULER`
//! at a kube-scheduler binary (1.24 or later), then:
//!
//! ```text
//! LISTWATCH_KUBE_SCHEDULER=/path/to/kube-scheduler \
//!     cargo test -p listwatch --test kube_scheduler -- --ignored
//! ```
//!
//! Each test starts its own server, three simulated nodes (`listwatch node-agent`), our node
//! lifecycle controller (new nodes carry the not-ready taint until it lifts it, as
//! kube-controller-manager's does) and a kube-scheduler without leader election or a serving
//! port. The scheduler's log is kept in the test's temporary directory and shown when a
//! check fails.

mod common;

use common::{tail, TestServer};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCHEDULER_VAR: &str = "LISTWATCH_KUBE_SCHEDULER";
const LIMIT: Duration = Duration::from_secs(60);

/// A child process, killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server, three Ready nodes and a kube-scheduler pointed at the server.
struct Cluster {
    srv: TestServer,
    log: PathBuf,
    _components: Vec<Process>,
}

/// `listwatch ARGS`, its output dropped.
fn listwatch(args: &[&str], kubeconfig: &Path) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning a listwatch component"),
    )
}

impl Cluster {
    fn start() -> Cluster {
        let binary = std::env::var_os(SCHEDULER_VAR)
            .unwrap_or_else(|| panic!("set {SCHEDULER_VAR} to a kube-scheduler binary"));
        let srv = TestServer::start();
        let kubeconfig = srv.tls_kubeconfig();
        let agents = listwatch(&["node-agent", "--nodes", "3"], &kubeconfig);
        let lifecycle = listwatch(
            &[
                "controller-manager",
                "--controllers",
                "nodelifecycle",
                "--leader-elect=false",
            ],
            &kubeconfig,
        );
        let log = srv.dir().join("kube-scheduler.log");
        let scheduler = Process(
            Command::new(&binary)
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args([
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    // No serving port: nothing here reads its health or metrics.
                    "--secure-port=0",
                    "-v=2",
                ])
                .arg(format!("--cert-dir={}", srv.dir().join("certs").display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("creating the scheduler's log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", Path::new(&binary).display())),
        );
        let cluster = Cluster {
            srv,
            log,
            _components: vec![agents, lifecycle, scheduler],
        };
        cluster.eventually("3 Ready nodes without the not-ready taint", || {
            let list = cluster.srv.kubectl_json(&["get", "nodes", "-o", "json"]);
            let ready = list["items"]
                .as_array()?
                .iter()
                .filter(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"))
                .filter(|n| {
                    !n["spec"]["taints"].as_array().is_some_and(|ts| {
                        ts.iter()
                            .any(|t| t["key"] == "node.kubernetes.io/not-ready")
                    })
                })
                .count();
            (ready == 3).then_some(())
        });
        cluster
    }

    /// What kube-scheduler logged so far.
    fn scheduler_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `probe` until it returns `Some`; panics with the scheduler's log after
    /// [`LIMIT`].
    fn eventually<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = probe() {
                return v;
            }
            assert!(
                start.elapsed() < LIMIT,
                "timed out after {LIMIT:?}: {what}\nkube-scheduler's log (tail):\n{}",
                tail(&self.scheduler_log(), 4000)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn pod(&self, name: &str) -> Value {
        self.srv.kubectl_json(&["get", "pod", name, "-o", "json"])
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[test]
#[ignore = "needs kube-scheduler 1.24: set LISTWATCH_KUBE_SCHEDULER to its binary"]
fn kube_scheduler_binds_pods_that_then_run() {
    let c = Cluster::start();
    let names: Vec<String> = (0..5).map(|i| format!("web-{i}")).collect();
    for name in &names {
        c.srv
            .kubectl_ok(&["run", name, "--image=nginx:1.27", "--labels=app=web"]);
    }
    for name in &names {
        let pod = c.eventually(&format!("{name} bound and Running"), || {
            let p = c.pod(name);
            (p["status"]["phase"] == "Running").then_some(p)
        });
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        assert!(node.starts_with("node-"), "{pod}");
        let scheduled = condition(&pod, "PodScheduled").expect("a PodScheduled condition");
        assert_eq!(scheduled["status"], "True", "{pod}");
    }
    // Its events, written through events.k8s.io/v1, read through both APIs.
    let events = c.srv.kubectl_json(&[
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        "reason=Scheduled",
        "-o",
        "json",
    ]);
    let mut regarding: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingController"] == "default-scheduler")
        .filter_map(|e| e["regarding"]["name"].as_str())
        .collect();
    regarding.sort_unstable();
    assert_eq!(regarding, names, "{events}");
    let node = c.pod("web-0")["spec"]["nodeName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let described = c.srv.kubectl_ok(&["describe", "pod", "web-0"]);
    let line = described
        .lines()
        .find(|l| l.contains("Scheduled") && l.contains("default-scheduler"))
        .unwrap_or_else(|| panic!("no Scheduled event in describe:\n{described}"));
    assert!(
        line.contains(&format!("Successfully assigned default/web-0 to {node}")),
        "{line}"
    );
    // It listed and watched every kind it needs: no reflector ever failed.
    let log = c.scheduler_log();
    for failure in ["Failed to watch", "failed to list"] {
        assert!(
            !log.contains(failure),
            "{failure} in:\n{}",
            tail(&log, 4000)
        );
    }
}

#[test]
#[ignore = "needs kube-scheduler 1.24: set LISTWATCH_KUBE_SCHEDULER to its binary"]
fn a_pod_no_node_fits_stays_pending_until_one_does() {
    let c = Cluster::start();
    c.srv.kubectl_ok(&[
        "run",
        "picky",
        "--image=nginx",
        "--overrides",
        r#"{"spec":{"nodeSelector":{"disk":"ssd"}}}"#,
    ]);
    let cond = c.eventually("picky Unschedulable", || {
        condition(&c.pod("picky"), "PodScheduled")
            .filter(|c| c["status"] == "False" && c["reason"] == "Unschedulable")
            .cloned()
    });
    let message = cond["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("0/3 nodes are available")
            && message.contains("didn't match Pod's node affinity/selector"),
        "{message}"
    );
    let pod = c.pod("picky");
    assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
    assert!(pod["spec"]["nodeName"].is_null(), "{pod}");
    let events = c.srv.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=picky",
    ]);
    assert!(events.contains("FailedScheduling"), "{events}");
    // A node that gets the label is seen through the node watch, and takes the pod.
    c.srv.kubectl_ok(&["label", "node", "node-1", "disk=ssd"]);
    c.eventually("picky bound to node-1 and Running", || {
        let p = c.pod("picky");
        (p["spec"]["nodeName"] == "node-1" && p["status"]["phase"] == "Running").then_some(())
    });
    let pod = c.pod("picky");
    assert_eq!(condition(&pod, "PodScheduled").unwrap()["status"], "True");
}
