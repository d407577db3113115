//! The scheduler against a real `listwatch serve`: nodes created through the API (no node
//! agents), pods bound through `pods/{name}/binding`, the `PodScheduled` condition and the
//! `FailedScheduling`/`Scheduled` events of kube-scheduler, retries on node and pod events.

mod common;

use client::rest::resource::{EVENTS, NODES, PODS};
use client::rest::{Api, Client, DeleteParams, ListParams, PatchParams, PatchType, PostParams};
use common::Server;
use controllers::scheduler::{Scheduler, SchedulerConfig};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

const NS: &str = "sched";
const WAIT: Duration = Duration::from_secs(30);

/// Creates a ready node with `cpu` CPUs, 8 GiB and room for 110 pods, and `labels`.
async fn create_node(client: &Client, name: &str, cpu: &str, labels: Value) {
    let nodes: Api<Node> = Api::all(client.clone(), NODES);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // The status goes through the status subresource, as a kubelet reports it.
    let status = json!({"status": {
        "allocatable": {"cpu": cpu, "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"},
        "capacity": {"cpu": cpu, "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }});
    let path = format!("{}/status", NODES.item_path(None, name));
    client
        .request_bytes(
            http::Method::PATCH,
            &path,
            Some((
                serde_json::to_vec(&status).unwrap().into(),
                "application/merge-patch+json",
            )),
        )
        .await
        .unwrap();
    // The server created it with the not-ready taint; the node lifecycle controller, which
    // does not run here, would remove it now that the node is Ready.
    let created: Node = nodes.get(name).await.unwrap();
    let taints = created.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/not-ready" && t.effect == "NoSchedule"),
        "{taints:?}"
    );
    client
        .request_bytes(
            http::Method::PATCH,
            &NODES.item_path(None, name),
            Some((
                br#"{"spec":{"taints":null}}"#.to_vec().into(),
                "application/merge-patch+json",
            )),
        )
        .await
        .unwrap();
}

async fn create_pod(client: &Client, name: &str, cpu: &str, extra_spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, NS);
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// A snapshot of the namespace's pods and events, refreshed by [`Snapshot::refresh`].
#[derive(Default)]
struct Snapshot {
    pods: HashMap<String, Pod>,
    events: Vec<Event>,
}

impl Snapshot {
    async fn refresh(client: &Client) -> Snapshot {
        let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, NS);
        let events: Api<Event> = Api::namespaced(client.clone(), EVENTS, NS);
        let pods = pods.list_all(&ListParams::default()).await.unwrap().items;
        let events = events.list_all(&ListParams::default()).await.unwrap().items;
        Snapshot {
            pods: pods
                .into_iter()
                .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
                .collect(),
            events,
        }
    }

    fn node_of(&self, pod: &str) -> Option<&str> {
        self.pods
            .get(pod)
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.as_deref())
    }

    fn scheduled_condition(&self, pod: &str) -> Option<(String, String, String)> {
        let c = self
            .pods
            .get(pod)?
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled")?
            .clone();
        Some((
            c.status,
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default(),
        ))
    }

    fn event_messages(&self, pod: &str, reason: &str) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(pod)
                    && e.reason.as_deref() == Some(reason)
            })
            .map(|e| e.message.clone().unwrap_or_default())
            .collect()
    }
}

/// Polls the server until `cond` holds on a fresh snapshot.
async fn wait_for(client: &Client, what: &str, cond: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let snap = Snapshot::refresh(client).await;
        if cond(&snap) {
            return snap;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_scheduler(server: &Server) -> tokio::task::JoinHandle<()> {
    let scheduler = Scheduler::new(server.client(), SchedulerConfig::default());
    tokio::spawn(scheduler.run())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_and_an_unschedulable_pod_waits_for_a_label() {
    let server = Server::start(&[]);
    server.namespaces(&[NS]).await;
    let client = server.client();
    for name in ["node-a", "node-b", "node-c"] {
        create_node(&client, name, "4", json!({"zone": "z1"})).await;
    }
    let run = start_scheduler(&server);

    // No node has the label: the condition and the event say why.
    create_pod(
        &client,
        "picky",
        "100m",
        json!({"nodeSelector": {"disk": "ssd"}}),
    )
    .await;
    let message = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.";
    let snap = wait_for(&client, "PodScheduled=False", |s| {
        s.scheduled_condition("picky")
            .is_some_and(|(status, ..)| status == "False")
    })
    .await;
    assert_eq!(
        snap.scheduled_condition("picky").unwrap(),
        (
            "False".to_string(),
            "Unschedulable".to_string(),
            message.to_string()
        )
    );
    wait_for(&client, "the FailedScheduling event", |s| {
        s.event_messages("picky", "FailedScheduling") == [message]
    })
    .await;
    assert!(snap.node_of("picky").is_none());

    for i in 0..6 {
        create_pod(&client, &format!("web-{i}"), "500m", json!({})).await;
    }
    // A pod for another scheduler is left alone.
    create_pod(
        &client,
        "foreign",
        "100m",
        json!({"schedulerName": "other-scheduler"}),
    )
    .await;
    let snap = wait_for(&client, "six pods bound", |s| {
        (0..6).all(|i| s.node_of(&format!("web-{i}")).is_some())
    })
    .await;
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for i in 0..6 {
        *per_node
            .entry(snap.node_of(&format!("web-{i}")).unwrap())
            .or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "spread over the nodes: {per_node:?}");
    let node = snap.node_of("web-0").unwrap().to_string();
    let snap = wait_for(&client, "the Scheduled event", |s| {
        !s.event_messages("web-0", "Scheduled").is_empty()
    })
    .await;
    assert_eq!(
        snap.event_messages("web-0", "Scheduled"),
        [format!("Successfully assigned {NS}/web-0 to {node}")]
    );
    assert!(snap.node_of("foreign").is_none());
    assert!(
        snap.node_of("picky").is_none(),
        "still no node with the label"
    );

    // A node gets the label: the pod is retried and bound there.
    let nodes: Api<Node> = Api::all(client.clone(), NODES);
    nodes
        .patch(
            "node-b",
            &PatchParams::default(),
            PatchType::Merge,
            &json!({"metadata": {"labels": {"disk": "ssd"}}}),
        )
        .await
        .unwrap();
    let snap = wait_for(&client, "picky bound", |s| s.node_of("picky").is_some()).await;
    assert_eq!(snap.node_of("picky"), Some("node-b"));
    // The binding turned the condition to True (the server does, with the node).
    assert_eq!(snap.scheduled_condition("picky").unwrap().0, "True");
    run.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_takes_the_next_pod_once_a_bound_one_is_deleted() {
    let server = Server::start(&[]);
    server.namespaces(&[NS]).await;
    let client = server.client();
    create_node(&client, "small", "1", json!({})).await;
    let run = start_scheduler(&server);
    create_pod(&client, "first", "600m", json!({})).await;
    wait_for(&client, "first bound", |s| {
        s.node_of("first") == Some("small")
    })
    .await;
    create_pod(&client, "second", "600m", json!({})).await;
    let message = "0/1 nodes are available: 1 Insufficient cpu.";
    wait_for(&client, "second refused", |s| {
        s.scheduled_condition("second")
            .is_some_and(|(status, reason, m)| {
                status == "False" && reason == "Unschedulable" && m == message
            })
    })
    .await;
    // The room is freed: the second pod gets it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, NS);
    pods.delete(
        "first",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    wait_for(&client, "second bound", |s| {
        s.node_of("second") == Some("small")
    })
    .await;
    run.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pods_are_bound_with_many_bindings_in_flight() {
    let server = Server::start(&[]);
    server.namespaces(&[NS]).await;
    let client = server.client();
    for i in 0..10 {
        create_node(&client, &format!("n{i}"), "16", json!({})).await;
    }
    let run = start_scheduler(&server);
    let creates: Vec<_> = (0..200)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(
                async move { create_pod(&client, &format!("p{i}"), "100m", json!({})).await },
            )
        })
        .collect();
    for c in creates {
        c.await.unwrap();
    }
    let snap = wait_for(&client, "all bound", |s| {
        (0..200).all(|i| s.node_of(&format!("p{i}")).is_some())
    })
    .await;
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for i in 0..200 {
        *per_node
            .entry(snap.node_of(&format!("p{i}")).unwrap())
            .or_default() += 1;
    }
    // Equal nodes, equal pods: least-allocated keeps them level (within a pod or two).
    let (min, max) = (
        per_node.values().min().copied().unwrap_or(0),
        per_node.values().max().copied().unwrap_or(0),
    );
    assert!(per_node.len() == 10 && max - min <= 2, "{per_node:?}");
    run.abort();
}
