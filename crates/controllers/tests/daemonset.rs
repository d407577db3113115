//! The DaemonSet controller against a real `listwatch serve` (no scheduler or node agents:
//! nodes are plain objects, and a test kubelet marks pods ready where a test needs it):
//! one pod per eligible node pinned by node-name affinity, following node taints, labels
//! and additions; a rolling update through ControllerRevisions; a failed pod replaced.

mod common;
mod workloads;

use client::cache::SharedInformerFactory;
use client::rest::{Api, ListParams, PostParams};
use common::Server;
use controllers::daemonset::DaemonSetController;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(60);

/// The controller on a task, aborted when dropped.
struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn run(client: client::rest::Client) -> Running {
    let factory = SharedInformerFactory::new(client.clone());
    let controller = Arc::new(DaemonSetController::new(&factory, client, 2).unwrap());
    Running(tokio::spawn(async move { controller.run().await }))
}

async fn add_node(client: &client::rest::Client, name: &str, labels: serde_json::Value) {
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Node>::for_type(client.clone(), "")
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

async fn patch_node(client: &client::rest::Client, name: &str, patch: serde_json::Value) {
    merge_patch::<Node>(client, "", name, patch).await;
}

fn daemon_set(name: &str, spec_extra: serde_json::Value) -> DaemonSet {
    let mut pod_spec = json!({"containers": [{"name": "agent", "image": "busybox:1"}]});
    if let (Some(m), serde_json::Value::Object(e)) = (pod_spec.as_object_mut(), spec_extra) {
        m.extend(e);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}}))
    .unwrap()
}

/// The node each live (not terminating) pod is pinned to by its node-name affinity.
fn pinned_nodes(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(controllers::daemonset::eligibility::target_node_name)
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn ds_status(client: &client::rest::Client, ns: &str, name: &str) -> (DaemonSet, i64) {
    let ds: DaemonSet = get(client, ns, name).await;
    let gen = ds.metadata.generation.unwrap_or(0);
    (ds, gen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_per_eligible_node_following_taints_labels_and_new_nodes() {
    let server = Server::start(&[]);
    server.namespaces(&["ds1"]).await;
    let client = server.client();
    for n in ["n1", "n2", "n3"] {
        let role = if n == "n3" { "db" } else { "agent" };
        add_node(&client, n, json!({"role": role})).await;
    }
    let _running = run(client.clone());
    let ds: DaemonSet = create(
        &client,
        "ds1",
        &daemon_set("agent", json!({"nodeSelector": {"role": "agent"}})),
    )
    .await;

    // New nodes carry the not-ready NoSchedule taint, which DaemonSet pods do not tolerate:
    // the first sync observes the DaemonSet and finds no node for it.
    eventually("the first status", LIMIT, || async {
        let (ds, gen) = ds_status(&client, "ds1", "agent").await;
        ds.status
            .is_some_and(|s| s.observed_generation == Some(gen))
    })
    .await;
    let (synced, _) = ds_status(&client, "ds1", "agent").await;
    assert_eq!(synced.status.unwrap().desired_number_scheduled, 0);
    assert!(pods(&client, "ds1", "app=agent").await.is_empty());
    // It created its first revision.
    let revs = Api::<ControllerRevision>::for_type(client.clone(), "ds1")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(revs.len(), 1);
    assert_eq!(revs[0].revision, Some(1));
    assert_eq!(controller_uid(&revs[0].metadata), ds.metadata.uid.clone());
    let hash = revs[0].metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone();
    assert_eq!(revs[0].metadata.name, Some(format!("agent-{hash}")));

    // Ready nodes lose the taint: a pod for each node the selector matches.
    for n in ["n1", "n2", "n3"] {
        patch_node(&client, n, json!({"spec": {"taints": null}})).await;
    }
    eventually("pods on n1 and n2", LIMIT, || async {
        pinned_nodes(&pods(&client, "ds1", "app=agent").await) == set(&["n1", "n2"])
    })
    .await;
    for p in pods(&client, "ds1", "app=agent").await {
        let labels = p.metadata.labels.clone().unwrap();
        assert_eq!(labels["controller-revision-hash"], hash);
        assert_eq!(controller_uid(&p.metadata), ds.metadata.uid.clone());
        let spec = p.spec.unwrap();
        // Left for the scheduler to bind.
        assert_eq!(spec.node_name, None);
        let tolerations = spec.tolerations.unwrap_or_default();
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/unschedulable",
        ] {
            assert!(
                tolerations.iter().any(|t| t.key.as_deref() == Some(key)),
                "{key}: {tolerations:?}"
            );
        }
    }
    eventually("status: 2 desired, 2 current", LIMIT, || async {
        let (ds, _) = ds_status(&client, "ds1", "agent").await;
        ds.status
            .is_some_and(|s| (s.desired_number_scheduled, s.current_number_scheduled) == (2, 2))
    })
    .await;

    // A node added later that matches gets a pod; a node relabelled out of the selector and
    // one tainted NoExecute lose theirs.
    add_node(&client, "n4", json!({"role": "agent"})).await;
    patch_node(&client, "n4", json!({"spec": {"taints": null}})).await;
    patch_node(
        &client,
        "n1",
        json!({"metadata": {"labels": {"role": "db"}}}),
    )
    .await;
    patch_node(
        &client,
        "n2",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoExecute"}]}}),
    )
    .await;
    eventually("only n4 has a pod", LIMIT, || async {
        pinned_nodes(&pods(&client, "ds1", "app=agent").await) == set(&["n4"])
    })
    .await;
    eventually("status: 1 desired, 1 current", LIMIT, || async {
        let (ds, _) = ds_status(&client, "ds1", "agent").await;
        ds.status.is_some_and(|s| {
            (
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.number_misscheduled,
            ) == (1, 1, 0)
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_replaces_every_pod_and_keeps_two_revisions() {
    let server = Server::start(&[]);
    server.namespaces(&["ds2"]).await;
    let client = server.client();
    for n in ["n1", "n2", "n3"] {
        add_node(&client, n, json!({})).await;
        patch_node(&client, n, json!({"spec": {"taints": null}})).await;
    }
    let _kubelet = FakeKubelet::start(client.clone(), "ds2");
    let _running = run(client.clone());
    create(&client, "ds2", &daemon_set("web", json!({}))).await;
    let rolled_out = |image: &'static str| {
        let client = client.clone();
        async move {
            let (ds, gen) = ds_status(&client, "ds2", "web").await;
            let Some(s) = ds.status else { return false };
            let pods = pods(&client, "ds2", "app=web").await;
            s.observed_generation == Some(gen)
                && s.desired_number_scheduled == 3
                && s.updated_number_scheduled == Some(3)
                && s.number_available == Some(3)
                && pods.len() == 3
                && pods
                    .iter()
                    .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(image))
        }
    };
    eventually("three ready pods", LIMIT, || rolled_out("busybox:1")).await;
    let before: BTreeSet<String> = pods(&client, "ds2", "app=web")
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();

    merge_patch::<DaemonSet>(
        &client,
        "ds2",
        "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "busybox:2"}]}}}}),
    )
    .await;
    eventually("every pod replaced by a busybox:2 one", LIMIT, || {
        rolled_out("busybox:2")
    })
    .await;
    let after = pods(&client, "ds2", "app=web").await;
    assert!(
        after
            .iter()
            .all(|p| !before.contains(p.metadata.name.as_ref().unwrap())),
        "every pod is new"
    );
    assert_eq!(pinned_nodes(&after), set(&["n1", "n2", "n3"]));
    let mut revs = Api::<ControllerRevision>::for_type(client.clone(), "ds2")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    revs.sort_by_key(|r| r.revision);
    assert_eq!(
        revs.iter().map(|r| r.revision).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
    let new_hash = &revs[1].metadata.labels.as_ref().unwrap()["controller-revision-hash"];
    assert!(after
        .iter()
        .all(|p| { &p.metadata.labels.as_ref().unwrap()["controller-revision-hash"] == new_hash }));
    // The data of the newest revision restores the current template.
    assert_eq!(
        revs[1].data.0["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:2"
    );
    assert_eq!(revs[1].data.0["spec"]["template"]["$patch"], "replace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pod_is_replaced() {
    let server = Server::start(&[]);
    server.namespaces(&["ds3"]).await;
    let client = server.client();
    add_node(&client, "n1", json!({})).await;
    patch_node(&client, "n1", json!({"spec": {"taints": null}})).await;
    let _running = run(client.clone());
    create(&client, "ds3", &daemon_set("agent", json!({}))).await;
    eventually("a pod", LIMIT, || async {
        pods(&client, "ds3", "app=agent").await.len() == 1
    })
    .await;
    let first = pods(&client, "ds3", "app=agent").await.remove(0);
    let name = first.metadata.name.clone().unwrap();
    let mut failed = first.clone();
    failed.status = Some(serde_json::from_value(json!({"phase": "Failed"})).unwrap());
    client
        .request_bytes(
            http::Method::PUT,
            &format!("/api/v1/namespaces/ds3/pods/{name}/status"),
            Some((
                bytes::Bytes::from(serde_json::to_vec(&failed).unwrap()),
                "application/json",
            )),
        )
        .await
        .unwrap();
    eventually("a replacement", LIMIT, || async {
        let now = pods(&client, "ds3", "app=agent").await;
        now.len() == 1 && now[0].metadata.name.as_deref() != Some(name.as_str())
    })
    .await;
    let events = Api::<Event>::for_type(client.clone(), "ds3")
        .list(&ListParams::default().fields("reason=FailedDaemonPod"))
        .await
        .unwrap()
        .items;
    assert!(
        events
            .iter()
            .any(|e| e.message.as_deref().unwrap_or("").contains(&name)),
        "{events:?}"
    );
}

async fn three_ready_nodes(client: &client::rest::Client) {
    for n in ["n1", "n2", "n3"] {
        add_node(client, n, json!({})).await;
        patch_node(client, n, json!({"spec": {"taints": null}})).await;
    }
}

fn images(pods: &[Pod]) -> Vec<String> {
    let mut v: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            p.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap_or_default()
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_replaces_only_the_pods_that_are_deleted() {
    let server = Server::start(&[]);
    server.namespaces(&["ds4"]).await;
    let client = server.client();
    three_ready_nodes(&client).await;
    let _kubelet = FakeKubelet::start(client.clone(), "ds4");
    let _running = run(client.clone());
    let mut ds = daemon_set("agent", json!({}));
    ds.spec.update_strategy = Some(serde_json::from_value(json!({"type": "OnDelete"})).unwrap());
    create(&client, "ds4", &ds).await;
    eventually("three pods", LIMIT, || async {
        pods(&client, "ds4", "app=agent").await.len() == 3
    })
    .await;
    let ds: DaemonSet = merge_patch(
        &client,
        "ds4",
        "agent",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "busybox:2"}]}}}}),
    )
    .await;
    let gen = ds.metadata.generation;
    // Once the change is observed (a second revision exists and the status says so), no
    // pod was replaced: one updated out of three.
    eventually("the new generation observed", LIMIT, || async {
        let ds: DaemonSet = get(&client, "ds4", "agent").await;
        ds.status
            .is_some_and(|s| s.observed_generation == gen && s.number_available == Some(3))
    })
    .await;
    let ds: DaemonSet = get(&client, "ds4", "agent").await;
    assert_eq!(ds.status.unwrap().updated_number_scheduled, Some(0));
    assert_eq!(
        images(&pods(&client, "ds4", "app=agent").await),
        ["busybox:1"; 3]
    );
    let victim = pods(&client, "ds4", "app=agent").await.remove(0);
    Api::<Pod>::for_type(client.clone(), "ds4")
        .delete(
            victim.metadata.name.as_deref().unwrap(),
            &client::rest::DeleteParams::default(),
        )
        .await
        .unwrap();
    eventually(
        "the deleted pod replaced on the new template",
        LIMIT,
        || async {
            images(&pods(&client, "ds4", "app=agent").await)
                == ["busybox:1", "busybox:1", "busybox:2"]
        },
    )
    .await;
    eventually("one updated", LIMIT, || async {
        let ds: DaemonSet = get(&client, "ds4", "agent").await;
        ds.status
            .is_some_and(|s| s.updated_number_scheduled == Some(1) && s.number_available == Some(3))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surging_update_starts_new_pods_before_old_ones_go() {
    let server = Server::start(&[]);
    server.namespaces(&["ds5"]).await;
    let client = server.client();
    three_ready_nodes(&client).await;
    let _kubelet = FakeKubelet::start(client.clone(), "ds5");
    let _running = run(client.clone());
    let mut ds = daemon_set("agent", json!({}));
    ds.spec.update_strategy = Some(
        serde_json::from_value(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        )
        .unwrap(),
    );
    create(&client, "ds5", &ds).await;
    eventually("three available pods", LIMIT, || async {
        let ds: DaemonSet = get(&client, "ds5", "agent").await;
        ds.status.is_some_and(|s| s.number_available == Some(3))
    })
    .await;
    // Every pod change from here on, in order: with surge and no unavailability, each node
    // keeps its old pod until the new one beside it is ready, so it never has no live pod
    // and at some point has two.
    let api = Api::<Pod>::for_type(client.clone(), "ds5");
    let listed = api
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap();
    let mut live: std::collections::BTreeMap<String, (String, String)> = listed
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                (
                    controllers::daemonset::eligibility::target_node_name(p).unwrap(),
                    p.spec.as_ref().unwrap().containers[0]
                        .image
                        .clone()
                        .unwrap(),
                ),
            )
        })
        .collect();
    let mut events = api
        .watch(
            &client::rest::WatchParams::default()
                .labels("app=agent")
                .resource_version(listed.resource_version.clone()),
        )
        .await
        .unwrap();
    merge_patch::<DaemonSet>(
        &client,
        "ds5",
        "agent",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "busybox:2"}]}}}}),
    )
    .await;
    let mut most_on_a_node = 0;
    let replay = async {
        loop {
            let ev = events.next().await.expect("the watch ended").unwrap();
            use client::rest::WatchEvent;
            let (pod, gone) = match ev {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    let gone = p.metadata.deletion_timestamp.is_some();
                    (p, gone)
                }
                WatchEvent::Deleted(p) => (p, true),
                _ => continue,
            };
            let name = pod.metadata.name.clone().unwrap();
            if gone {
                live.remove(&name);
            } else {
                let node = controllers::daemonset::eligibility::target_node_name(&pod).unwrap();
                let image = pod.spec.as_ref().unwrap().containers[0]
                    .image
                    .clone()
                    .unwrap();
                live.insert(name, (node, image));
            }
            let mut per_node = std::collections::BTreeMap::<&str, usize>::new();
            for (node, _) in live.values() {
                *per_node.entry(node.as_str()).or_default() += 1;
            }
            assert_eq!(per_node.len(), 3, "a node without a live pod: {live:?}");
            most_on_a_node = most_on_a_node.max(per_node.values().copied().max().unwrap_or(0));
            if live.len() == 3 && live.values().all(|(_, image)| image == "busybox:2") {
                break;
            }
        }
    };
    tokio::time::timeout(LIMIT, replay)
        .await
        .expect("the update finished");
    assert_eq!(most_on_a_node, 2, "a new pod started beside an old one");
}
