//! The StatefulSet controller against a real `listwatch serve`, with a test-only kubelet
//! ([`workloads::FakeKubelet`]) that marks pods Running and Ready: ordered creation checked
//! by a watcher, identities and claims, scale down from the highest ordinal, rolling
//! updates by ordinal with a partition, revisions, failed pods recreated under their name,
//! and `Parallel` creation.

mod common;
mod workloads;

use client::cache::SharedInformerFactory;
use client::rest::{Api, Client, ListParams, WatchEvent, WatchParams};
use common::Server;
use controllers::statefulset::StatefulSetController;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use parking_lot::Mutex;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(60);

/// One pod event as a watcher saw it.
#[derive(Debug, Clone)]
struct Seen {
    kind: &'static str,
    name: String,
    uid: String,
    ready: bool,
    terminating: bool,
    revision: String,
}

/// Records every pod event of a namespace after its listing, in the server's order, until
/// dropped.
struct PodLog {
    events: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodLog {
    async fn start(client: Client, ns: &str) -> PodLog {
        let api = Api::<Pod>::for_type(client, ns);
        let list = api.list(&ListParams::default()).await.unwrap();
        let rv = list.resource_version.clone();
        let mut stream = api
            .watch(&WatchParams::default().resource_version(rv))
            .await
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let log = events.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(ev)) = stream.next().await {
                let (kind, pod) = match ev {
                    WatchEvent::Added(p) => ("ADDED", p),
                    WatchEvent::Modified(p) => ("MODIFIED", p),
                    WatchEvent::Deleted(p) => ("DELETED", p),
                    _ => continue,
                };
                log.lock().push(Seen {
                    kind,
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                    ready: running_and_ready(&pod),
                    terminating: pod.metadata.deletion_timestamp.is_some(),
                    revision: pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("controller-revision-hash").cloned())
                        .unwrap_or_default(),
                });
            }
        });
        PodLog { events, task }
    }

    fn events(&self) -> Vec<Seen> {
        self.events.lock().clone()
    }
}

fn running_and_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && is_ready(pod)
}

/// Index of the first event matching `f`.
fn first(events: &[Seen], f: impl Fn(&Seen) -> bool) -> Option<usize> {
    events.iter().position(f)
}

/// Index of the first event that shows pod `name` going away (terminating or deleted).
fn first_gone(events: &[Seen], name: &str, after: usize) -> Option<usize> {
    events
        .iter()
        .enumerate()
        .skip(after)
        .find(|(_, e)| e.name == name && (e.terminating || e.kind == "DELETED"))
        .map(|(i, _)| i)
}

struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn start_controller(client: Client) -> Running {
    let factory = SharedInformerFactory::new(client.clone());
    let controller = Arc::new(StatefulSetController::new(&factory, client, 2).unwrap());
    Running(tokio::spawn(async move { controller.run().await }))
}

fn stateful_set(name: &str, replicas: i32, policy: &str, claims: bool) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {
            "serviceName": "nginx",
            "replicas": replicas,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}
            }
        }
    });
    if claims {
        v["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "www", "mountPath": "/usr/share/nginx/html"}]);
        v["spec"]["volumeClaimTemplates"] = json!([{
            "metadata": {"name": "www"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        }]);
    }
    serde_json::from_value(v).unwrap()
}

async fn set_status(client: &Client, ns: &str, name: &str) -> StatefulSet {
    get::<StatefulSet>(client, ns, name).await
}

fn status_of(s: &StatefulSet) -> k8s_openapi::api::apps::v1::StatefulSetStatus {
    s.status.clone().unwrap_or_default()
}

/// Whether the controller has observed the set's spec and reports `ready` ready pods,
/// `replicas` in all, every one at the update revision, which is current.
fn settled(s: &StatefulSet, replicas: i32) -> bool {
    let st = status_of(s);
    st.observed_generation == s.metadata.generation
        && st.replicas == replicas
        && st.ready_replicas.unwrap_or(0) == replicas
        && st.updated_replicas.unwrap_or(0) == replicas
        && st.current_replicas.unwrap_or(0) == replicas
        && st.current_revision.is_some()
        && st.current_revision == st.update_revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_created_in_order_with_identities_and_claims_and_scaled_down_from_the_top() {
    let server = Server::start(&[]);
    server.namespaces(&["sts1"]).await;
    let client = server.client();
    let log = PodLog::start(client.clone(), "sts1").await;
    let _kubelet = FakeKubelet::start(server.client(), "sts1");
    let _controller = start_controller(client.clone());

    let set: StatefulSet = create(
        &client,
        "sts1",
        &stateful_set("web", 3, "OrderedReady", true),
    )
    .await;
    let uid = set.metadata.uid.clone().unwrap();
    eventually("three ready pods", LIMIT, || async {
        settled(&set_status(&client, "sts1", "web").await, 3)
    })
    .await;

    // Created in order, each only once its predecessor was Running and Ready.
    let events = log.events();
    let added: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "ADDED")
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(added, ["web-0", "web-1", "web-2"], "{events:#?}");
    for i in 1..3 {
        let created = first(&events, |e| {
            e.kind == "ADDED" && e.name == format!("web-{i}")
        })
        .unwrap();
        let predecessor_ready =
            first(&events, |e| e.name == format!("web-{}", i - 1) && e.ready).unwrap();
        assert!(
            predecessor_ready < created,
            "web-{i} was created before web-{} was Running and Ready: {events:#?}",
            i - 1
        );
    }

    // Identities, revisions and claims.
    let status = status_of(&set_status(&client, "sts1", "web").await);
    let revision = status.update_revision.clone().unwrap();
    assert!(revision.starts_with("web-"), "{revision}");
    assert_eq!(status.collision_count, Some(0));
    for i in 0..3 {
        let name = format!("web-{i}");
        let pod: Pod = get(&client, "sts1", &name).await;
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], name);
        assert_eq!(labels["apps.kubernetes.io/pod-index"], i.to_string());
        assert_eq!(labels["controller-revision-hash"], revision);
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let claim_name = format!("www-web-{i}");
        let volume = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "www")
            .unwrap();
        assert_eq!(
            volume.persistent_volume_claim.unwrap().claim_name,
            claim_name
        );
        assert_eq!(controller_uid(&pod.metadata).as_deref(), Some(uid.as_str()));
        let claim: PersistentVolumeClaim = get(&client, "sts1", &claim_name).await;
        assert_eq!(claim.metadata.labels.clone().unwrap()["app"], "web");
        let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.resource_version
                .as_deref()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let pod_created = events
            .iter()
            .find(|e| e.kind == "ADDED" && e.name == name)
            .map(|e| e.uid.clone())
            .unwrap();
        assert_eq!(pod_created, pod.metadata.uid.clone().unwrap());
        assert!(
            rv(&claim.metadata) < rv(&pod.metadata),
            "the claim of {name} exists before the pod"
        );
    }
    let revisions = Api::<ControllerRevision>::for_type(client.clone(), "sts1")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(revisions.len(), 1);
    assert_eq!(
        revisions[0].metadata.name.as_deref(),
        Some(revision.as_str())
    );
    assert_eq!(revisions[0].revision, Some(1));
    assert_eq!(
        controller_uid(&revisions[0].metadata).as_deref(),
        Some(uid.as_str())
    );

    // Scale to 1: web-2 goes first, web-1 only once web-2 is gone; the claims stay.
    let before = log.events().len();
    let _: StatefulSet =
        merge_patch(&client, "sts1", "web", json!({"spec": {"replicas": 1}})).await;
    eventually("one pod left", LIMIT, || async {
        settled(&set_status(&client, "sts1", "web").await, 1)
            && pods(&client, "sts1", "app=web").await.len() == 1
    })
    .await;
    let events = log.events();
    let two_gone = first_gone(&events, "web-2", before).expect("web-2 deleted");
    let two_deleted = first(&events, |e| e.name == "web-2" && e.kind == "DELETED").unwrap();
    let one_gone = first_gone(&events, "web-1", before).expect("web-1 deleted");
    assert!(
        two_gone < one_gone && two_deleted < one_gone,
        "web-2 is removed entirely before web-1 is touched: {:#?}",
        &events[before..]
    );
    assert!(first_gone(&events, "web-0", before).is_none());
    let claims = Api::<PersistentVolumeClaim>::for_type(client.clone(), "sts1")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 3, "claims are retained on scale down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_goes_from_the_highest_ordinal_down_and_stops_at_the_partition() {
    let server = Server::start(&[]);
    server.namespaces(&["sts2"]).await;
    let client = server.client();
    let _kubelet = FakeKubelet::start(server.client(), "sts2");
    let _controller = start_controller(client.clone());
    let _: StatefulSet = create(
        &client,
        "sts2",
        &stateful_set("db", 3, "OrderedReady", false),
    )
    .await;
    eventually("three ready pods", LIMIT, || async {
        settled(&set_status(&client, "sts2", "db").await, 3)
    })
    .await;
    let old = status_of(&set_status(&client, "sts2", "db").await)
        .current_revision
        .unwrap();
    // The log starts from now (after the pods it lists).
    let log = PodLog::start(client.clone(), "sts2").await;

    // A new image with partition 2: only db-2 is replaced.
    let _: StatefulSet = merge_patch(
        &client,
        "sts2",
        "db",
        json!({"spec": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
        }}),
    )
    .await;
    eventually("db-2 updated", LIMIT, || async {
        let s = set_status(&client, "sts2", "db").await;
        let st = status_of(&s);
        st.observed_generation == s.metadata.generation
            && st.updated_replicas == Some(1)
            && st.ready_replicas == Some(3)
            && st.current_replicas == Some(2)
    })
    .await;
    let s = status_of(&set_status(&client, "sts2", "db").await);
    let new = s.update_revision.clone().unwrap();
    assert_ne!(new, old);
    assert_eq!(s.current_revision.as_deref(), Some(old.as_str()));
    for (i, rev) in [(0, &old), (1, &old), (2, &new)] {
        let pod: Pod = get(&client, "sts2", &format!("db-{i}")).await;
        assert_eq!(
            &pod.metadata.labels.unwrap()["controller-revision-hash"],
            rev,
            "db-{i}"
        );
    }

    // Partition 0: db-1, then db-0, each once the one above is back and ready.
    let _: StatefulSet = merge_patch(
        &client,
        "sts2",
        "db",
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    )
    .await;
    eventually("all updated", LIMIT, || async {
        settled(&set_status(&client, "sts2", "db").await, 3)
    })
    .await;
    let s = status_of(&set_status(&client, "sts2", "db").await);
    assert_eq!(s.current_revision.as_deref(), Some(new.as_str()));
    let events = log.events();
    let gone: Vec<usize> = (0..3)
        .rev()
        .map(|i| first_gone(&events, &format!("db-{i}"), 0).expect("each pod replaced"))
        .collect();
    assert!(
        gone[0] < gone[1] && gone[1] < gone[2],
        "replaced from the highest ordinal down: {events:#?}"
    );
    for i in [1, 0] {
        let above_ready = first(&events, |e| {
            e.name == format!("db-{}", i + 1) && e.revision == new && e.ready
        })
        .unwrap();
        assert!(
            above_ready < gone[2 - i],
            "db-{i} replaced only once db-{} runs the new revision: {events:#?}",
            i + 1
        );
    }
    let revisions = Api::<ControllerRevision>::for_type(client.clone(), "sts2")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut names: Vec<_> = revisions
        .iter()
        .map(|r| (r.revision.unwrap_or(0), r.metadata.name.clone().unwrap()))
        .collect();
    names.sort();
    assert_eq!(names, [(1, old), (2, new)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pod_is_recreated_under_its_name_and_parallel_sets_do_not_wait() {
    let server = Server::start(&[]);
    server.namespaces(&["sts3", "sts4"]).await;
    let client = server.client();
    let _kubelet = FakeKubelet::start(server.client(), "sts3");
    let _controller = start_controller(client.clone());
    let _: StatefulSet = create(
        &client,
        "sts3",
        &stateful_set("web", 2, "OrderedReady", false),
    )
    .await;
    eventually("two ready pods", LIMIT, || async {
        settled(&set_status(&client, "sts3", "web").await, 2)
    })
    .await;
    let first_uid = get::<Pod>(&client, "sts3", "web-0")
        .await
        .metadata
        .uid
        .unwrap();
    let mut pod: Pod = get(&client, "sts3", "web-0").await;
    pod.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
    client
        .request_bytes(
            http::Method::PUT,
            "/api/v1/namespaces/sts3/pods/web-0/status",
            Some((serde_json::to_vec(&pod).unwrap().into(), "application/json")),
        )
        .await
        .unwrap();
    eventually("web-0 replaced", LIMIT, || async {
        let p = Api::<Pod>::for_type(client.clone(), "sts3")
            .get("web-0")
            .await;
        p.is_ok_and(|p| {
            p.metadata.uid.as_deref() != Some(first_uid.as_str()) && running_and_ready(&p)
        })
    })
    .await;

    // Parallel: all pods at once, though none is ever ready (no kubelet in sts4).
    let _: StatefulSet = create(&client, "sts4", &stateful_set("par", 3, "Parallel", false)).await;
    eventually("three pods", LIMIT, || async {
        pods(&client, "sts4", "app=par").await.len() == 3
    })
    .await;
    let all = pods(&client, "sts4", "app=par").await;
    assert!(all.iter().all(|p| !running_and_ready(p)));
    let mut names: Vec<_> = all
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["par-0", "par-1", "par-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_owned_as_the_retention_policy_says() {
    let server = Server::start(&[]);
    server.namespaces(&["sts5"]).await;
    let client = server.client();
    let _kubelet = FakeKubelet::start(server.client(), "sts5");
    let _controller = start_controller(client.clone());
    let mut spec = stateful_set("db", 2, "OrderedReady", true);
    spec.spec.persistent_volume_claim_retention_policy = Some(
        k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy {
            when_deleted: Some("Delete".into()),
            when_scaled: Some("Delete".into()),
        },
    );
    let set: StatefulSet = create(&client, "sts5", &spec).await;
    let set_uid = set.metadata.uid.clone().unwrap();
    eventually("two ready pods", LIMIT, || async {
        settled(&set_status(&client, "sts5", "db").await, 2)
    })
    .await;
    let owners = |c: &PersistentVolumeClaim| -> Vec<(String, String, Option<bool>)> {
        c.metadata
            .owner_references
            .iter()
            .flatten()
            .map(|r| (r.kind.clone(), r.uid.clone(), r.controller))
            .collect()
    };
    for i in 0..2 {
        let claim: PersistentVolumeClaim = get(&client, "sts5", &format!("www-db-{i}")).await;
        assert_eq!(
            owners(&claim),
            [("StatefulSet".to_string(), set_uid.clone(), Some(true))],
            "whenDeleted: Delete: the set owns the claims"
        );
    }
    // Scaled down, db-1's claim is handed to db-1 before it goes; db-0's stays the set's.
    let pod_uid = get::<Pod>(&client, "sts5", "db-1")
        .await
        .metadata
        .uid
        .unwrap();
    let _: StatefulSet = merge_patch(&client, "sts5", "db", json!({"spec": {"replicas": 1}})).await;
    eventually("db-1 gone", LIMIT, || async {
        settled(&set_status(&client, "sts5", "db").await, 1)
            && pods(&client, "sts5", "app=db").await.len() == 1
    })
    .await;
    let claim: PersistentVolumeClaim = get(&client, "sts5", "www-db-1").await;
    assert_eq!(
        owners(&claim),
        [("Pod".to_string(), pod_uid, Some(true))],
        "whenScaled: Delete: the condemned pod owns its claim"
    );
    let claim: PersistentVolumeClaim = get(&client, "sts5", "www-db-0").await;
    assert_eq!(
        owners(&claim),
        [("StatefulSet".to_string(), set_uid, Some(true))]
    );
}
