//! The ReplicaSet controller against a real `listwatch serve`: pods with controller
//! references, scale-down in Kubernetes' order, adoption and release, expectations while
//! the pod watch is stalled and cut, a create whose answer is lost, and a template the
//! server refuses.

mod common;
mod workloads;

use client::cache::{ListerWatcher, RestListerWatcher, SharedInformerFactory};
use client::clock::FakeClock;
use client::rest::{Api, Config, DeleteParams};
use common::Server;
use controllers::replicaset::{ReplicaSetController, ReplicaSetControllerOptions};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use test_server::fault_proxy::FaultProxy;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Starts `controller` on a task; the task is aborted when the guard drops.
struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn run(controller: Arc<ReplicaSetController>) -> Running {
    Running(tokio::spawn(async move { controller.run().await }))
}

/// A client of the server through `proxy`.
fn through(proxy: &FaultProxy) -> client::rest::Client {
    let mut config = Config::new(&proxy.url()).unwrap();
    config.timeout = Some(Duration::from_secs(20));
    client::rest::Client::new(config).unwrap()
}

/// An informer factory whose pod informer reads through `proxy` (the others go straight
/// to the server).
fn pods_through(server: &Server, proxy: &FaultProxy) -> SharedInformerFactory {
    let proxied = through(proxy);
    let factory = SharedInformerFactory::new(server.client());
    factory.informer_for::<Pod, _>("pods/v1 as Pod", move |opts| {
        Arc::new(RestListerWatcher::<Pod>::for_type(proxied).with_options(opts))
            as Arc<dyn ListerWatcher<Pod>>
    });
    factory
}

fn names(pods: &[Pod]) -> Vec<String> {
    let mut v: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_created_owned_and_scaled_down_in_kubernetes_order() {
    let server = Server::start(&[]);
    server.namespaces(&["rs1"]).await;
    let client = server.client();
    let factory = SharedInformerFactory::new(server.client());
    let controller = Arc::new(ReplicaSetController::new(&factory, client.clone(), 2).unwrap());
    let _running = run(controller.clone());

    let rs: ReplicaSet = create(&client, "rs1", &replica_set("web", "web", 3)).await;
    let uid = rs.metadata.uid.clone().unwrap();
    eventually("three pods", LIMIT, || async {
        pods(&client, "rs1", "app=web").await.len() == 3
    })
    .await;
    let created = pods(&client, "rs1", "app=web").await;
    for p in &created {
        let r = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.name.as_str(),
                r.uid.as_str(),
                r.api_version.as_str()
            ),
            ("ReplicaSet", "web", uid.as_str(), "apps/v1")
        );
        assert_eq!(
            (r.controller, r.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-"));
        assert!(p.metadata.name.as_ref().unwrap().starts_with("web-"));
    }
    eventually(
        "status: 3 replicas, generation 1 observed",
        LIMIT,
        || async {
            let rs: ReplicaSet = get(&client, "rs1", "web").await;
            let s = rs.status.unwrap_or_default();
            s.replicas == 3
                && s.observed_generation == Some(1)
                && s.fully_labeled_replicas == Some(3)
        },
    )
    .await;

    // Two pods become Running and Ready; the third stays Pending.
    let names_before = names(&created);
    for name in &names_before[..2] {
        mark_ready(&client, "rs1", name).await.unwrap();
    }
    eventually("two ready replicas", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs1", "web").await;
        let s = rs.status.unwrap_or_default();
        s.ready_replicas == Some(2) && s.available_replicas == Some(2)
    })
    .await;

    // Scaling down removes the pending pod first.
    merge_patch::<ReplicaSet>(&client, "rs1", "web", json!({"spec": {"replicas": 2}})).await;
    eventually("two pods", LIMIT, || async {
        pods(&client, "rs1", "app=web").await.len() == 2
    })
    .await;
    assert_eq!(
        names(&pods(&client, "rs1", "app=web").await),
        names_before[..2]
    );
    eventually("status follows", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs1", "web").await;
        let s = rs.status.unwrap_or_default();
        s.replicas == 2 && s.observed_generation == Some(2)
    })
    .await;

    // A deleted pod is replaced.
    Api::<Pod>::for_type(client.clone(), "rs1")
        .delete(&names_before[0], &DeleteParams::default())
        .await
        .unwrap();
    eventually("a replacement", LIMIT, || async {
        let now = pods(&client, "rs1", "app=web").await;
        now.len() == 2 && !names(&now).contains(&names_before[0])
    })
    .await;

    // Every creation was reported as an event on the ReplicaSet.
    eventually("SuccessfulCreate events", LIMIT, || async {
        let events = Api::<Event>::for_type(client.clone(), "rs1")
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        events.iter().any(|e| {
            e.reason.as_deref() == Some("SuccessfulCreate")
                && e.involved_object.name.as_deref() == Some("web")
                && e.involved_object.kind.as_deref() == Some("ReplicaSet")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Created pod: web-"))
                && e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("replicaset-controller")
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_adopted_and_pods_that_stop_matching_are_released() {
    let server = Server::start(&[]);
    server.namespaces(&["rs2"]).await;
    let client = server.client();
    // An orphan that the ReplicaSet's selector matches, there before the controller.
    let orphan = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("orphan".into()),
            labels: Some(labels(&[("app", "web")])),
            ..Default::default()
        },
        spec: template("web", "busybox").spec,
        status: None,
    };
    create(&client, "rs2", &orphan).await;
    let rs: ReplicaSet = create(&client, "rs2", &replica_set("web", "web", 2)).await;
    let uid = rs.metadata.uid.clone().unwrap();

    let factory = SharedInformerFactory::new(server.client());
    let controller = Arc::new(ReplicaSetController::new(&factory, client.clone(), 2).unwrap());
    let _running = run(controller.clone());

    eventually("the orphan adopted and one pod created", LIMIT, || async {
        let all = pods(&client, "rs2", "app=web").await;
        all.len() == 2
            && all
                .iter()
                .all(|p| controller_uid(&p.metadata).as_deref() == Some(uid.as_str()))
    })
    .await;
    let owned = pods(&client, "rs2", "app=web").await;
    assert!(
        names(&owned).contains(&"orphan".to_string()),
        "the orphan was kept: {:?}",
        names(&owned)
    );
    eventually("status counts the adopted pod", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs2", "web").await;
        rs.status.unwrap_or_default().replicas == 2
    })
    .await;

    // The orphan is relabelled away: it is released, and replaced.
    merge_patch::<Pod>(
        &client,
        "rs2",
        "orphan",
        json!({"metadata": {"labels": {"app": "other"}}}),
    )
    .await;
    eventually("released and replaced", LIMIT, || async {
        let released: Pod = get(&client, "rs2", "orphan").await;
        let matching = pods(&client, "rs2", "app=web").await;
        controller_uid(&released.metadata).is_none()
            && matching.len() == 2
            && matching
                .iter()
                .all(|p| controller_uid(&p.metadata).as_deref() == Some(uid.as_str()))
    })
    .await;
    let released: Pod = get(&client, "rs2", "orphan").await;
    assert!(
        released
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|r| r.is_empty()),
        "the reference is removed, not just its controller flag: {:?}",
        released.metadata.owner_references
    );
    // A pod controlled by another owner is never adopted.
    let mut foreign = orphan.clone();
    foreign.metadata.name = Some("foreign".into());
    foreign.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "someone-else".into(),
            uid: "not-this-one".into(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    create(&client, "rs2", &foreign).await;
    // Scale to 3 so the controller certainly syncs after seeing it: it must create a pod.
    merge_patch::<ReplicaSet>(&client, "rs2", "web", json!({"spec": {"replicas": 3}})).await;
    eventually("three own pods besides the foreign one", LIMIT, || async {
        let own = pods(&client, "rs2", "app=web")
            .await
            .into_iter()
            .filter(|p| controller_uid(&p.metadata).as_deref() == Some(uid.as_str()))
            .count();
        own == 3
    })
    .await;
    let foreign: Pod = get(&client, "rs2", "foreign").await;
    assert_eq!(
        controller_uid(&foreign.metadata).as_deref(),
        Some("not-this-one")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_extra_pods_while_the_pod_watch_is_stalled_or_cut() {
    let server = Server::start(&[]);
    server.namespaces(&["rs3"]).await;
    let client = server.client();
    // The pod informer reads through a proxy the test can stall and cut; the ReplicaSet
    // informer and every write go straight to the server.
    let proxy = FaultProxy::start(server.addr()).await;
    let factory = pods_through(&server, &proxy);
    let controller = Arc::new(ReplicaSetController::new(&factory, client.clone(), 2).unwrap());
    let _running = run(controller.clone());

    create(&client, "rs3", &replica_set("web", "web", 2)).await;
    eventually("two pods, seen by the controller", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs3", "web").await;
        rs.status.unwrap_or_default().replicas == 2
    })
    .await;

    // The controller no longer sees pods come and go.
    proxy.set_stalled(true);
    merge_patch::<ReplicaSet>(&client, "rs3", "web", json!({"spec": {"replicas": 5}})).await;
    eventually("five pods", LIMIT, || async {
        pods(&client, "rs3", "app=web").await.len() >= 5
    })
    .await;
    // Three more changes, each a sync on a cache that still shows two pods.
    let mut generation = 0;
    for seconds in 1..=3 {
        let rs: ReplicaSet = merge_patch(
            &client,
            "rs3",
            "web",
            json!({"spec": {"minReadySeconds": seconds}}),
        )
        .await;
        generation = rs.metadata.generation.unwrap();
    }
    eventually("the last change synced", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs3", "web").await;
        rs.status.unwrap_or_default().observed_generation == Some(generation)
    })
    .await;
    assert_eq!(
        pods(&client, "rs3", "app=web").await.len(),
        5,
        "the creations were expected, so no sync created more"
    );
    let (adds, _) = controller.expectations().get("rs3/web").unwrap();
    assert_eq!(adds, 3, "three creations still awaited");

    // The watch is cut and comes back: it resumes, sees the three pods, and nothing more
    // is created.
    proxy.cut();
    proxy.set_stalled(false);
    eventually("the controller sees five pods", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs3", "web").await;
        rs.status.unwrap_or_default().replicas == 5
    })
    .await;
    assert_eq!(
        controller.expectations().get("rs3/web").map(|e| e.0 <= 0),
        Some(true)
    );
    assert_eq!(pods(&client, "rs3", "app=web").await.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_server_refuses_are_reported_and_retried_with_backoff() {
    let server = Server::start(&[]);
    server.namespaces(&["rs4"]).await;
    let client = server.client();
    let factory = SharedInformerFactory::new(server.client());
    // The work queue runs on a fake clock: a retry happens only when the test moves it.
    let clock = FakeClock::new();
    let controller = Arc::new(
        ReplicaSetController::with_options(
            &factory,
            client.clone(),
            ReplicaSetControllerOptions {
                workers: 2,
                clock: clock.shared(),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let _running = run(controller.clone());

    // The server accepts the ReplicaSet but refuses its pods: a quota of no pods (which,
    // with no quota controller here, is also a quota of unknown usage) forbids them.
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}))
    .unwrap();
    create(&client, "rs4", &quota).await;
    let bad = replica_set("bad", "bad", 50);
    create(&client, "rs4", &bad).await;
    let refused = || async {
        server
            .metric(
                "apiserver_request_total",
                &[("verb", "POST"), ("code", "403")],
            )
            .await
    };
    eventually("a ReplicaFailure condition", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs4", "bad").await;
        rs.status
            .unwrap_or_default()
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_.as_deref() == Some("ReplicaFailure")
                    && c.status.as_deref() == Some("True")
                    && c.reason.as_deref() == Some("FailedCreate")
                    && c.message
                        .as_deref()
                        .is_some_and(|m| m.contains("quota: no-pods"))
            })
    })
    .await;
    // Quiet: nothing queued or in work, and every failed sync put its key back (with
    // backoff) exactly once.
    let quiet = || {
        let m = controller.metrics().snapshot();
        m.depth == 0 && m.in_flight == 0
    };
    // Two syncs fail: the first, and the one the status write (the condition) triggers.
    eventually("both failed syncs put back", LIMIT, || async {
        controller.metrics().snapshot().retries_total >= 2 && quiet()
    })
    .await;
    let retries = controller.metrics().snapshot().retries_total;
    let posts = refused().await as u64;
    // Slow start: each failed sync tried one pod, not 50.
    assert_eq!(posts, retries, "one create per failed sync");
    assert!(
        posts <= 3,
        "no hot retries while the clock stands still: {posts}"
    );

    // Once the backoff has passed, one more attempt is made, and again one pod only.
    clock.step(Duration::from_secs(1000));
    eventually("a retry after the backoff", LIMIT, || async {
        controller.metrics().snapshot().retries_total > retries && quiet()
    })
    .await;
    let retries = controller.metrics().snapshot().retries_total;
    assert_eq!(refused().await as u64, retries);
    assert!(pods(&client, "rs4", "app=bad").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_makes_no_second_pod() {
    let server = Server::start(&[]);
    server.namespaces(&["rs5"]).await;
    let client = server.client();
    // The pod informer reads through one proxy, the controller writes through another; the
    // ReplicaSet informer goes straight to the server.
    let watch_proxy = FaultProxy::start(server.addr()).await;
    let write_proxy = FaultProxy::start(server.addr()).await;
    let factory = pods_through(&server, &watch_proxy);
    let controller =
        Arc::new(ReplicaSetController::new(&factory, through(&write_proxy), 2).unwrap());
    let _running = run(controller.clone());

    create(&client, "rs5", &replica_set("web", "web", 1)).await;
    eventually("one pod, seen by the controller", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs5", "web").await;
        rs.status.unwrap_or_default().replicas == 1
    })
    .await;
    let first = names(&pods(&client, "rs5", "app=web").await);

    // The controller stops seeing pods, and stops hearing the answers to its writes.
    watch_proxy.set_stalled(true);
    write_proxy.hold(false, true);
    merge_patch::<ReplicaSet>(&client, "rs5", "web", json!({"spec": {"replicas": 2}})).await;
    eventually("the second pod, created", LIMIT, || async {
        pods(&client, "rs5", "app=web").await.len() == 2
    })
    .await;
    let second: Vec<String> = names(&pods(&client, "rs5", "app=web").await)
        .into_iter()
        .filter(|n| !first.contains(n))
        .collect();
    // Its answer never comes: the connection breaks. The controller's cache still shows one
    // pod, so it creates again — under the same name, which the server refuses.
    let conflicts = || async {
        server
            .metric(
                "apiserver_request_total",
                &[("verb", "POST"), ("resource", "pods"), ("code", "409")],
            )
            .await
    };
    write_proxy.cut();
    write_proxy.hold(false, false);
    eventually("the create retried under its name", LIMIT, || async {
        conflicts().await >= 1.0
    })
    .await;
    eventually(
        "the retry recorded as the creation it was",
        LIMIT,
        || async {
            let events = Api::<Event>::for_type(client.clone(), "rs5")
                .list(&Default::default())
                .await
                .unwrap()
                .items;
            events.iter().any(|e| {
                e.reason.as_deref() == Some("SuccessfulCreate")
                    && e.message.as_deref() == Some(&format!("Created pod: {}", second[0]))
            })
        },
    )
    .await;
    let now = pods(&client, "rs5", "app=web").await;
    assert_eq!(
        now.len(),
        2,
        "no second pod for one lost answer: {:?}",
        names(&now)
    );

    // The watch comes back: the controller sees both pods, expects nothing more, makes
    // nothing more.
    watch_proxy.cut();
    watch_proxy.set_stalled(false);
    eventually("the controller sees two pods", LIMIT, || async {
        let rs: ReplicaSet = get(&client, "rs5", "web").await;
        rs.status.unwrap_or_default().replicas == 2
            && controller
                .expectations()
                .get("rs5/web")
                .is_some_and(|(adds, _)| adds <= 0)
    })
    .await;
    assert_eq!(pods(&client, "rs5", "app=web").await.len(), 2);
}
