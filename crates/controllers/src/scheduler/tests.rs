//! The whole scheduler on fake sources: a fake "server" (pods and nodes behind three
//! `FakeListerWatcher`s, bindings applied to them), a recording event sink and a fake clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use client::cache::FakeListerWatcher;
use client::clock::FakeClock;
use serde_json::{json, Value};

use super::binder::BoxFuture;
use super::filters::test_support::{merge, node, pod};
use super::*;

/// The fake server: the pods and nodes, and what the scheduler wrote.
#[derive(Default)]
struct Cluster {
    unassigned: Arc<FakeListerWatcher<Pod>>,
    assigned: Arc<FakeListerWatcher<Pod>>,
    nodes: Arc<FakeListerWatcher<Node>>,
    pods: Mutex<BTreeMap<String, Arc<Pod>>>,
    rv: AtomicU64,
    bindings: Mutex<Vec<(String, String)>>,
    patches: Mutex<Vec<(String, Value)>>,
    /// Errors the next bindings of a pod (by name) get, in order.
    failures: Mutex<HashMap<String, VecDeque<WriteError>>>,
    /// When set, bindings wait for a permit.
    gate: Option<Arc<Semaphore>>,
    /// Whether accepted bindings show up in the assigned-pods watch.
    unconfirmed: std::sync::atomic::AtomicBool,
}

impl Cluster {
    fn stamp<T: serde::Serialize + serde::de::DeserializeOwned>(&self, obj: &T) -> T {
        let mut v = serde_json::to_value(obj).unwrap();
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        v["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        serde_json::from_value(v).unwrap()
    }

    fn create_pod(&self, p: Arc<Pod>) {
        let p = Arc::new(self.stamp(&*p));
        self.pods.lock().insert(pod_key(&p), Arc::clone(&p));
        if node_name(&p).is_some() {
            self.assigned.add(p);
        } else {
            self.unassigned.add(p);
        }
    }

    fn delete_pod(&self, key: &str) {
        let Some(p) = self.pods.lock().remove(key) else {
            return;
        };
        if node_name(&p).is_some() {
            self.assigned.delete(p);
        } else {
            self.unassigned.delete(p);
        }
    }

    fn add_node(&self, n: Arc<Node>) {
        self.nodes.add(Arc::new(self.stamp(&*n)));
    }

    fn modify_node(&self, n: Arc<Node>) {
        self.nodes.modify(Arc::new(self.stamp(&*n)));
    }

    fn fail_next_binding(&self, pod: &str, e: WriteError) {
        self.failures
            .lock()
            .entry(pod.to_string())
            .or_default()
            .push_back(e);
    }

    fn bound_to(&self, key: &str) -> Option<String> {
        self.bindings
            .lock()
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, n)| n.clone())
    }

    fn apply_binding(&self, t: &PodTarget, node: &str) -> Result<(), WriteError> {
        let key = format!("{}/{}", t.namespace, t.name);
        if let Some(e) = self
            .failures
            .lock()
            .get_mut(&t.name)
            .and_then(VecDeque::pop_front)
        {
            return Err(e);
        }
        let mut pods = self.pods.lock();
        let Some(current) = pods.get(&key).cloned() else {
            return Err(WriteError::NotFound(key));
        };
        if node_name(&current).is_some() {
            return Err(WriteError::Conflict(format!("{key} is already assigned")));
        }
        let mut bound = (*current).clone();
        bound.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        let bound = Arc::new(self.stamp(&bound));
        pods.insert(key.clone(), Arc::clone(&bound));
        drop(pods);
        self.bindings.lock().push((key, node.to_string()));
        // The pod leaves the unassigned selection and joins the assigned one.
        self.unassigned.delete(Arc::clone(&bound));
        if !self.unconfirmed.load(Ordering::SeqCst) {
            self.assigned.add(bound);
        }
        Ok(())
    }
}

struct FakeWriter(Arc<Cluster>);

impl PodWriter for FakeWriter {
    fn bind(&self, pod: &PodTarget, node: &str) -> BoxFuture<Result<(), WriteError>> {
        let cluster = Arc::clone(&self.0);
        let (pod, node) = (pod.clone(), node.to_string());
        Box::pin(async move {
            if let Some(gate) = &cluster.gate {
                gate.acquire().await.expect("gate open").forget();
            }
            cluster.apply_binding(&pod, &node)
        })
    }

    fn patch_status(&self, pod: &PodTarget, patch: Value) -> BoxFuture<Result<(), WriteError>> {
        let key = format!("{}/{}", pod.namespace, pod.name);
        let cluster = Arc::clone(&self.0);
        Box::pin(async move {
            let current = cluster.pods.lock().get(&key).cloned();
            let Some(current) = current else {
                return Err(WriteError::NotFound(key));
            };
            // Enough of a strategic merge for one condition: replace it by type.
            let mut v = serde_json::to_value(&*current).unwrap();
            let new = patch["status"]["conditions"][0].clone();
            let conditions = v["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut kept: Vec<Value> = conditions
                .into_iter()
                .filter(|c| c["type"] != new["type"])
                .collect();
            kept.push(new);
            merge(&mut v, json!({"status": {"conditions": kept}}));
            let updated: Pod = cluster.stamp(&serde_json::from_value::<Pod>(v).unwrap());
            let updated = Arc::new(updated);
            cluster
                .pods
                .lock()
                .insert(key.clone(), Arc::clone(&updated));
            cluster.unassigned.modify(updated);
            cluster.patches.lock().push((key, patch));
            Ok(())
        })
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String, String)>>);

impl EventSink for Events {
    fn pod_event(&self, pod: &Pod, _: EventType, reason: &str, message: String) {
        self.0
            .lock()
            .push((pod_key(pod), reason.to_string(), message));
    }
}

impl Events {
    fn of(&self, key: &str, reason: &str) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|(k, r, _)| k == key && r == reason)
            .map(|(_, _, m)| m.clone())
            .collect()
    }
}

struct Harness {
    cluster: Arc<Cluster>,
    events: Arc<Events>,
    clock: FakeClock,
    handle: SchedulerHandle,
    run: tokio::task::JoinHandle<()>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.run.abort();
    }
}

fn start(cluster: Cluster) -> Harness {
    let cluster = Arc::new(cluster);
    let events = Arc::new(Events::default());
    let clock = FakeClock::new();
    let informers = SchedulerInformers::from_sources(
        Arc::clone(&cluster.unassigned) as _,
        Arc::clone(&cluster.assigned) as _,
        Arc::clone(&cluster.nodes) as _,
        clock.shared(),
    );
    let scheduler = Scheduler::from_parts(
        informers,
        Arc::new(FakeWriter(Arc::clone(&cluster))),
        Arc::clone(&events) as _,
        clock.shared(),
        SchedulerConfig {
            seed: Some(1),
            ..SchedulerConfig::default()
        },
    );
    let handle = scheduler.handle();
    let run = tokio::spawn(scheduler.run());
    Harness {
        cluster,
        events,
        clock,
        handle,
        run,
    }
}

/// Waits (real time, generously) until `cond` holds; fails the test with `what` otherwise.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn pending(name: &str, cpu: &str, extra: Value) -> Arc<Pod> {
    pod(name, cpu, "1Gi", extra)
}

#[tokio::test]
async fn binds_pending_pods_and_reports_them_scheduled() {
    let h = start(Cluster::default());
    for i in 0..3 {
        h.cluster.add_node(node(&format!("node-{i}"), json!({})));
    }
    for i in 0..6 {
        h.cluster
            .create_pod(pending(&format!("p{i}"), "1", json!({})));
    }
    // A pod of another scheduler is left alone.
    h.cluster.create_pod(pending(
        "other",
        "1",
        json!({"spec": {"schedulerName": "someone-else"}}),
    ));
    eventually("six bindings", || h.cluster.bindings.lock().len() == 6).await;
    let mut per_node: HashMap<String, u32> = HashMap::new();
    for (_, n) in h.cluster.bindings.lock().iter() {
        *per_node.entry(n.clone()).or_default() += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "spread evenly"
    );
    let node_of_p0 = h.cluster.bound_to("ns/p0").unwrap();
    assert_eq!(
        h.events.of("ns/p0", "Scheduled"),
        [format!("Successfully assigned ns/p0 to {node_of_p0}")]
    );
    // The watch confirms every assumption.
    eventually("assumptions confirmed", || {
        let s = h.handle.stats();
        s.assumed_pods == 0 && s.cached_pods == 6
    })
    .await;
    let s = h.handle.stats();
    assert_eq!((s.bound, s.binding_failures, s.unschedulable), (6, 0, 0));
    assert_eq!(s.queue, QueueCounts::default());
    assert!(h.cluster.bound_to("ns/other").is_none());
}

#[tokio::test]
async fn an_unschedulable_pod_is_reported_then_bound_once_a_node_gets_the_label() {
    let h = start(Cluster::default());
    h.cluster.add_node(node("node-a", json!({})));
    h.cluster.add_node(node("node-b", json!({})));
    h.cluster.create_pod(pending(
        "picky",
        "1",
        json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
    ));
    let message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.";
    eventually("the condition patch", || {
        !h.cluster.patches.lock().is_empty()
    })
    .await;
    let (key, patch) = h.cluster.patches.lock()[0].clone();
    assert_eq!(key, "ns/picky");
    let condition = &patch["status"]["conditions"][0];
    assert_eq!(condition["type"], "PodScheduled");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "Unschedulable");
    assert_eq!(condition["message"], message);
    eventually("the FailedScheduling event", || {
        h.events.of("ns/picky", "FailedScheduling") == [message]
    })
    .await;
    eventually("parked as unschedulable", || {
        h.handle.stats().queue.unschedulable == 1
    })
    .await;
    // A heartbeat-like update changes nothing; the label does.
    h.cluster.modify_node(node(
        "node-b",
        json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2025-01-01T00:00:00Z"}]}}),
    ));
    h.cluster.modify_node(node(
        "node-b",
        json!({"metadata": {"labels": {"disk": "ssd"}}}),
    ));
    // Retried after its 1 s backoff (counted from the failure, on the fake clock).
    h.clock.step(Duration::from_secs(1));
    eventually("bound to the labelled node", || {
        h.cluster.bound_to("ns/picky").as_deref() == Some("node-b")
    })
    .await;
    assert_eq!(
        h.cluster.patches.lock().len(),
        1,
        "the condition was written once"
    );
}

#[tokio::test]
async fn no_nodes_then_a_node_added() {
    let h = start(Cluster::default());
    h.cluster.create_pod(pending("early", "1", json!({})));
    eventually("the event", || {
        h.events.of("ns/early", "FailedScheduling") == ["no nodes available to schedule pods"]
    })
    .await;
    eventually("parked", || h.handle.stats().queue.unschedulable == 1).await;
    h.clock.step(Duration::from_secs(1));
    h.cluster.add_node(node("late", json!({})));
    eventually("bound", || h.cluster.bound_to("ns/early").is_some()).await;
}

#[tokio::test]
async fn deleting_a_bound_pod_frees_room_for_an_unschedulable_one() {
    let h = start(Cluster::default());
    h.cluster.add_node(node(
        "small",
        json!({"status": {"allocatable": {"cpu": "1"}}}),
    ));
    h.cluster.create_pod(pending("first", "1", json!({})));
    eventually("first bound", || h.cluster.bound_to("ns/first").is_some()).await;
    h.cluster.create_pod(pending("second", "1", json!({})));
    eventually("second refused", || {
        h.events.of("ns/second", "FailedScheduling")
            == ["0/1 nodes are available: 1 Insufficient cpu."]
    })
    .await;
    eventually("parked", || h.handle.stats().queue.unschedulable == 1).await;
    // A label change is no reason to retry a pod short of CPU.
    h.cluster.modify_node(node(
        "small",
        json!({"metadata": {"labels": {"x": "y"}},
        "status": {"allocatable": {"cpu": "1"}}}),
    ));
    h.clock.step(Duration::from_secs(2));
    h.cluster.create_pod(pending("probe", "0", json!({})));
    eventually("probe bound", || h.cluster.bound_to("ns/probe").is_some()).await;
    assert_eq!(
        h.handle.stats().queue.unschedulable,
        1,
        "second still parked"
    );
    h.cluster.delete_pod("ns/first");
    eventually("second bound", || h.cluster.bound_to("ns/second").is_some()).await;
}

#[tokio::test]
async fn two_decisions_never_double_book_before_the_watch_confirms() {
    // Bindings are held, so nothing is confirmed; the node has room for two such pods.
    let gate = Arc::new(Semaphore::new(0));
    let h = start(Cluster {
        gate: Some(Arc::clone(&gate)),
        ..Cluster::default()
    });
    h.cluster.add_node(node("only", json!({})));
    for name in ["a", "b", "c"] {
        h.cluster.create_pod(pending(name, "2", json!({})));
    }
    eventually("two assumed, one refused", || {
        let s = h.handle.stats();
        s.assumed_pods == 2 && s.unschedulable == 1
    })
    .await;
    assert!(h.cluster.bindings.lock().is_empty(), "nothing bound yet");
    let refused: Vec<String> = ["ns/a", "ns/b", "ns/c"]
        .into_iter()
        .filter(|k| !h.events.of(k, "FailedScheduling").is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(
        h.events.of(&refused[0], "FailedScheduling"),
        ["0/1 nodes are available: 1 Insufficient cpu."]
    );
    gate.add_permits(2);
    eventually("both bound", || h.cluster.bindings.lock().len() == 2).await;
}

#[tokio::test]
async fn a_failed_binding_forgets_the_assumption_and_backs_off() {
    let h = start(Cluster::default());
    h.cluster.add_node(node("n", json!({})));
    h.cluster
        .fail_next_binding("flaky", WriteError::Other("etcd is down".into()));
    h.cluster.create_pod(pending("flaky", "1", json!({})));
    eventually("the failure reported", || {
        h.events.of("ns/flaky", "FailedScheduling") == ["binding rejected: etcd is down"]
    })
    .await;
    eventually("in backoff, nothing counted", || {
        let s = h.handle.stats();
        s.queue.backoff == 1 && s.cached_pods == 0 && s.binding_failures == 1
    })
    .await;
    eventually("condition patched", || !h.cluster.patches.lock().is_empty()).await;
    assert_eq!(
        h.cluster.patches.lock()[0].1["status"]["conditions"][0]["reason"],
        "SchedulerError"
    );
    h.clock.step(Duration::from_secs(1));
    eventually("bound on the retry", || {
        h.cluster.bound_to("ns/flaky").is_some()
    })
    .await;
}

#[tokio::test]
async fn conflicts_and_missing_pods_are_not_retried() {
    let h = start(Cluster::default());
    h.cluster.add_node(node("n", json!({})));
    h.cluster
        .fail_next_binding("taken", WriteError::Conflict("already assigned".into()));
    h.cluster.create_pod(pending("taken", "1", json!({})));
    eventually("the failure counted", || {
        h.handle.stats().binding_failures == 1
    })
    .await;
    eventually("nothing left", || {
        let s = h.handle.stats();
        s.cached_pods == 0 && s.queue == QueueCounts::default()
    })
    .await;
    h.clock.step(Duration::from_secs(60));
    h.cluster.create_pod(pending("later", "0", json!({})));
    eventually("a later pod is bound", || {
        h.cluster.bound_to("ns/later").is_some()
    })
    .await;
    assert!(
        h.cluster.bound_to("ns/taken").is_none(),
        "the refused pod was not retried"
    );
    assert!(h.events.of("ns/taken", "FailedScheduling").is_empty());
}

#[tokio::test]
async fn an_assumption_the_watch_never_confirms_expires() {
    let h = start(Cluster::default());
    h.cluster.unconfirmed.store(true, Ordering::SeqCst);
    h.cluster.add_node(node("n", json!({})));
    h.cluster.create_pod(pending("ghost", "1", json!({})));
    eventually("bound, still assumed", || {
        let s = h.handle.stats();
        s.bound == 1 && s.assumed_pods == 1
    })
    .await;
    // The TTL runs from the binding's success; the expiry task looks every second.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while h.handle.stats().cached_pods != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the assumption never expired"
        );
        h.clock.step(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(h.handle.stats().assumed_pods, 0);
}

#[test]
fn informers_from_a_shared_factory() {
    let client = Client::new(client::rest::Config::new("http://127.0.0.1:1").unwrap()).unwrap();
    let factory = SharedInformerFactory::new(client);
    let informers = SchedulerInformers::from_factory(&factory, "my-scheduler").unwrap();
    // The node informer is the factory's shared one; the pod informers are ours.
    let nodes = factory.informer::<Node>().unwrap();
    assert!(Arc::ptr_eq(nodes.indexer(), informers.nodes.indexer()));
    assert_eq!(
        informers.unassigned_pods.name(),
        "pods/v1 as Pod, unassigned for my-scheduler"
    );
    assert!(!Arc::ptr_eq(
        informers.unassigned_pods.indexer(),
        informers.assigned_pods.indexer()
    ));
    assert_eq!(
        unassigned_pods_selector("my-scheduler"),
        "spec.nodeName=,spec.schedulerName=my-scheduler,status.phase!=Succeeded,status.phase!=Failed"
    );
    assert!(SchedulerInformers::from_factory(&SharedInformerFactory::default(), "x").is_err());
}

#[tokio::test]
async fn dropping_the_run_future_stops_everything() {
    let h = start(Cluster::default());
    h.cluster.add_node(node("n", json!({})));
    h.cluster.create_pod(pending("p", "1", json!({})));
    eventually("bound", || h.cluster.bound_to("ns/p").is_some()).await;
    let fakes = [
        h.cluster.unassigned.open_watches(),
        h.cluster.assigned.open_watches(),
        h.cluster.nodes.open_watches(),
    ];
    assert_eq!(fakes, [1, 1, 1], "each informer watches");
    h.run.abort();
    eventually("every watch closed", || {
        h.cluster.unassigned.open_watches() == 0
            && h.cluster.assigned.open_watches() == 0
            && h.cluster.nodes.open_watches() == 0
    })
    .await;
}
