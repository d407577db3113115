//! The Deployment and ReplicaSet controllers together against a real `listwatch serve`,
//! with a test-only kubelet ([`workloads::FakeKubelet`]) that marks pods Ready through
//! the status subresource: the new ReplicaSet and its pods, rolling updates within
//! `maxSurge`/`maxUnavailable` checked by watchers, Recreate, proportional scaling of a
//! stuck rollout and its progress deadline.

mod common;
mod workloads;

use client::rest::{Api, Client, ListParams, PostParams, WatchEvent, WatchParams};
use common::Server;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(60);
const HASH: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";

/// Watches the live pods (not marked for deletion) of a namespace and records the most
/// there were at once, and every pod-template-hash seen live together.
struct PodCensus {
    max: Arc<AtomicUsize>,
    mixed: Arc<Mutex<Vec<BTreeSet<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodCensus {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodCensus {
    async fn start(client: Client, ns: &str) -> PodCensus {
        let api = Api::<Pod>::for_type(client, ns);
        let list = api.list(&ListParams::default()).await.unwrap();
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        let hash = |p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HASH).cloned())
                .unwrap_or_default()
        };
        for p in &list.items {
            if p.metadata.deletion_timestamp.is_none() {
                live.insert(p.metadata.name.clone().unwrap(), hash(p));
            }
        }
        let max = Arc::new(AtomicUsize::new(live.len()));
        let mixed = Arc::new(Mutex::new(Vec::new()));
        let mut events = api
            .watch(&WatchParams::default().resource_version(list.resource_version))
            .await
            .unwrap();
        let (m, x) = (max.clone(), mixed.clone());
        let task = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                        let name = p.metadata.name.clone().unwrap();
                        if p.metadata.deletion_timestamp.is_none() {
                            live.insert(name, hash(&p));
                        } else {
                            live.remove(&name);
                        }
                    }
                    Ok(WatchEvent::Deleted(p)) => {
                        live.remove(p.metadata.name.as_deref().unwrap());
                    }
                    Ok(_) => continue,
                    Err(e) => panic!("the pod watch failed: {e}"),
                }
                m.fetch_max(live.len(), Ordering::SeqCst);
                let hashes: BTreeSet<String> = live.values().cloned().collect();
                if hashes.len() > 1 {
                    x.lock().push(hashes);
                }
            }
        });
        PodCensus { max, mixed, task }
    }
}

/// Watches the ReplicaSets of a namespace and records the largest sum of their
/// `spec.replicas`.
async fn replica_sum_watch(
    client: Client,
    ns: &str,
) -> (Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let api = Api::<ReplicaSet>::for_type(client, ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    let mut sizes: BTreeMap<String, i64> = list
        .items
        .iter()
        .map(|rs| {
            (
                rs.metadata.name.clone().unwrap(),
                i64::from(rs.spec.replicas.unwrap_or(1)),
            )
        })
        .collect();
    let max = Arc::new(AtomicI64::new(sizes.values().sum()));
    let mut events = api
        .watch(&WatchParams::default().resource_version(list.resource_version))
        .await
        .unwrap();
    let m = max.clone();
    let task = tokio::spawn(async move {
        while let Some(Ok(ev)) = events.next().await {
            match ev {
                WatchEvent::Added(rs) | WatchEvent::Modified(rs) => {
                    sizes.insert(
                        rs.metadata.name.clone().unwrap(),
                        i64::from(rs.spec.replicas.unwrap_or(1)),
                    );
                }
                WatchEvent::Deleted(rs) => {
                    sizes.remove(rs.metadata.name.as_deref().unwrap());
                }
                _ => continue,
            }
            m.fetch_max(sizes.values().sum(), Ordering::SeqCst);
        }
    });
    (max, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_gets_a_hashed_replica_set_and_pods() {
    let server = Server::start(&[]);
    server.namespaces(&["d1"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "d1");

    let mut d = deployment("web", "web", 3, IntOrString::Int(1), IntOrString::Int(0));
    d.metadata.annotations = Some(labels(&[("kubernetes.io/change-cause", "first")]));
    let d: Deployment = create(&client, "d1", &d).await;
    let uid = d.metadata.uid.clone().unwrap();
    eventually("rolled out", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d1", "web").await)
    })
    .await;

    let rss = owned_replica_sets(&client, "d1", &uid).await;
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs.metadata.labels.as_ref().unwrap()[HASH].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert!(!hash.is_empty() && hash.len() <= 10);
    assert_eq!(rs.spec.selector.match_labels.as_ref().unwrap()[HASH], hash);
    assert_eq!(
        rs.spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()[HASH],
        hash
    );
    assert_eq!(annotation(rs, REVISION).as_deref(), Some("1"));
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/desired-replicas").as_deref(),
        Some("3")
    );
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/max-replicas").as_deref(),
        Some("4")
    );
    assert_eq!(
        annotation(rs, "kubernetes.io/change-cause").as_deref(),
        Some("first")
    );
    let r = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (r.kind.as_str(), r.name.as_str(), r.controller),
        ("Deployment", "web", Some(true))
    );

    let pods = pods(&client, "d1", "app=web").await;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert_eq!(p.metadata.labels.as_ref().unwrap()[HASH], hash);
        assert_eq!(controller_uid(&p.metadata), rs.metadata.uid);
        assert!(p
            .metadata
            .name
            .as_ref()
            .unwrap()
            .starts_with(&format!("web-{hash}-")));
    }

    eventually("conditions", LIMIT, || async {
        let d: Deployment = get(&client, "d1", "web").await;
        condition(&d, "Available") == Some(("True".into(), "MinimumReplicasAvailable".into()))
            && condition(&d, "Progressing")
                == Some(("True".into(), "NewReplicaSetAvailable".into()))
            && d.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION))
                .map(String::as_str)
                == Some("1")
    })
    .await;
    let d: Deployment = get(&client, "d1", "web").await;
    let s = d.status.unwrap();
    assert_eq!(
        (
            s.observed_generation,
            s.unavailable_replicas,
            s.ready_replicas
        ),
        (Some(1), None, Some(3))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_rolls_out_within_max_surge() {
    let server = Server::start(&[]);
    server.namespaces(&["d2"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "d2");

    let d: Deployment = create(
        &client,
        "d2",
        &deployment("web", "web", 4, IntOrString::Int(1), IntOrString::Int(0)),
    )
    .await;
    let uid = d.metadata.uid.clone().unwrap();
    eventually("first rollout", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d2", "web").await)
    })
    .await;

    let census = PodCensus::start(server.client(), "d2").await;
    let (rs_sum, rs_task) = replica_sum_watch(server.client(), "d2").await;
    merge_patch::<Deployment>(
        &client,
        "d2",
        "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}),
    )
    .await;
    eventually("second rollout", LIMIT, || async {
        let d: Deployment = get(&client, "d2", "web").await;
        rolled_out(&d)
            && condition(&d, "Progressing").is_some_and(|c| c.1 == "NewReplicaSetAvailable")
    })
    .await;
    let rss = owned_replica_sets(&client, "d2", &uid).await;
    assert_eq!(rss.len(), 2);
    let revisions: Vec<_> = rss.iter().map(|rs| annotation(rs, REVISION)).collect();
    assert_eq!(revisions, [Some("1".to_string()), Some("2".to_string())]);
    assert_eq!(rss[0].spec.replicas, Some(0));
    assert_eq!(rss[1].spec.replicas, Some(4));
    let new_hash = rss[1].metadata.labels.as_ref().unwrap()[HASH].clone();
    assert_ne!(new_hash, rss[0].metadata.labels.as_ref().unwrap()[HASH]);
    eventually("only new pods", LIMIT, || async {
        let pods = pods(&client, "d2", "app=web").await;
        pods.len() == 4
            && pods
                .iter()
                .all(|p| p.metadata.labels.as_ref().unwrap()[HASH] == new_hash)
    })
    .await;
    let d: Deployment = get(&client, "d2", "web").await;
    assert_eq!(d.metadata.annotations.as_ref().unwrap()[REVISION], "2");
    // maxSurge 1: never more than 5 pods, nor 5 replicas over the ReplicaSets.
    assert!(
        census.max.load(Ordering::SeqCst) <= 5,
        "live pods peaked at {}",
        census.max.load(Ordering::SeqCst)
    );
    assert!(
        rs_sum.load(Ordering::SeqCst) <= 5,
        "replicas peaked at {}",
        rs_sum.load(Ordering::SeqCst)
    );
    assert!(
        !census.mixed.lock().is_empty(),
        "a rolling update has old and new pods together"
    );
    rs_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_removes_old_pods_before_new_ones_start() {
    let server = Server::start(&[]);
    server.namespaces(&["d3"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "d3");

    let mut d = deployment("db", "db", 3, IntOrString::Int(1), IntOrString::Int(0));
    d.spec.strategy = Some(DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    });
    let d: Deployment = create(&client, "d3", &d).await;
    let uid = d.metadata.uid.clone().unwrap();
    eventually("first rollout", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d3", "db").await)
    })
    .await;
    let census = PodCensus::start(server.client(), "d3").await;
    merge_patch::<Deployment>(
        &client,
        "d3",
        "db",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}),
    )
    .await;
    eventually("second rollout", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d3", "db").await)
    })
    .await;
    let rss = owned_replica_sets(&client, "d3", &uid).await;
    assert_eq!(
        rss.iter().map(|rs| rs.spec.replicas).collect::<Vec<_>>(),
        [Some(0), Some(3)]
    );
    assert!(
        census.mixed.lock().is_empty(),
        "old and new pods ran together: {:?}",
        census.mixed.lock()
    );
    assert!(census.max.load(Ordering::SeqCst) <= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_rollout_times_out_and_scales_proportionally() {
    let server = Server::start(&[]);
    server.namespaces(&["d4"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    // Pods of the broken image never become ready.
    let _kubelet = FakeKubelet::start_except(server.client(), "d4", Some("broken:1"));

    let mut d = deployment("web", "web", 10, IntOrString::Int(3), IntOrString::Int(2));
    d.spec.progress_deadline_seconds = Some(2);
    let d: Deployment = create(&client, "d4", &d).await;
    let uid = d.metadata.uid.clone().unwrap();
    eventually("first rollout", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d4", "web").await)
    })
    .await;
    merge_patch::<Deployment>(
        &client,
        "d4",
        "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "broken:1"}]}}}}),
    )
    .await;
    // 10 + 3 surge: the new ReplicaSet gets 3, old gives up the 2 it may, new grows to 5;
    // then nothing more can move while the new pods stay unavailable.
    let sizes = || async {
        owned_replica_sets(&client, "d4", &uid)
            .await
            .iter()
            .map(|rs| rs.spec.replicas.unwrap_or(0))
            .collect::<Vec<_>>()
    };
    eventually("stuck at 8 old and 5 new", LIMIT, || async {
        sizes().await == [8, 5]
    })
    .await;
    eventually("ProgressDeadlineExceeded", LIMIT, || async {
        let d: Deployment = get(&client, "d4", "web").await;
        condition(&d, "Progressing") == Some(("False".into(), "ProgressDeadlineExceeded".into()))
    })
    .await;
    let d: Deployment = get(&client, "d4", "web").await;
    assert_eq!(
        condition(&d, "Available").unwrap().0,
        "True",
        "8 of 10 available with 2 allowed away"
    );

    // Scaled to 20 mid-rollout: 23 in all, shared 14 : 9 as the ReplicaSets were 8 : 5.
    merge_patch::<Deployment>(&client, "d4", "web", json!({"spec": {"replicas": 20}})).await;
    eventually("proportional scale-up", LIMIT, || async {
        sizes().await == [14, 9]
    })
    .await;
    let rss = owned_replica_sets(&client, "d4", &uid).await;
    for rs in &rss {
        assert_eq!(
            annotation(rs, "deployment.kubernetes.io/desired-replicas").as_deref(),
            Some("20")
        );
        assert_eq!(
            annotation(rs, "deployment.kubernetes.io/max-replicas").as_deref(),
            Some("23")
        );
    }
    // And back down to 5 (8 in all): 5 : 3 by proportion; then, as 3 of 5 must stay
    // available, the rollout may take the 2 old pods maxUnavailable allows: 3 : 5, and no
    // further, however late the old ReplicaSet reports its removed pods.
    merge_patch::<Deployment>(&client, "d4", "web", json!({"spec": {"replicas": 5}})).await;
    eventually("scaled down, the rollout stuck again", LIMIT, || async {
        sizes().await == [3, 5]
    })
    .await;
    eventually("the old ReplicaSet reports its pods", LIMIT, || async {
        let rss = owned_replica_sets(&client, "d4", &uid).await;
        rss[0]
            .status
            .as_ref()
            .is_some_and(|s| s.replicas == 3 && s.available_replicas == Some(3))
    })
    .await;
    // The Deployment's status follows its ReplicaSets' on its controller's next pass.
    eventually("the Deployment reports 3 available", LIMIT, || async {
        let d: Deployment = get(&client, "d4", "web").await;
        d.status.is_some_and(|s| s.available_replicas == Some(3))
    })
    .await;
    assert_eq!(sizes().await, [3, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let server = Server::start(&[]);
    server.namespaces(&["d5"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "d5");

    let mut d = deployment("web", "web", 2, IntOrString::Int(1), IntOrString::Int(0));
    d.spec.revision_history_limit = Some(1);
    let d: Deployment = create(&client, "d5", &d).await;
    let uid = d.metadata.uid.clone().unwrap();
    for image in ["nginx:1.27", "nginx:1.28", "nginx:1.29"] {
        eventually("rolled out", LIMIT, || async {
            let d: Deployment = get(&client, "d5", "web").await;
            rolled_out(&d)
                && condition(&d, "Progressing").is_some_and(|c| c.1 == "NewReplicaSetAvailable")
        })
        .await;
        merge_patch::<Deployment>(
            &client,
            "d5",
            "web",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}}),
        )
        .await;
    }
    // The newest and one old revision remain.
    eventually("two replica sets: revisions 3 and 4", LIMIT, || async {
        let rss = owned_replica_sets(&client, "d5", &uid).await;
        let revs: BTreeSet<String> = rss
            .iter()
            .filter_map(|rs| annotation(rs, REVISION))
            .collect();
        revs == BTreeSet::from(["3".to_string(), "4".to_string()])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_by_another_template_raises_the_collision_count() {
    let server = Server::start(&[]);
    server.namespaces(&["d6"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "d6");

    // Paused, the Deployment creates no ReplicaSet: take its name first.
    let mut d = deployment("web", "web", 2, IntOrString::Int(1), IntOrString::Int(0));
    d.spec.paused = Some(true);
    let d: Deployment = create(&client, "d6", &d).await;
    let hash = controllers::controller_utils::compute_hash(&d.spec.template, None);
    let mut squatter = replica_set(&format!("web-{hash}"), "squat", 0);
    squatter.metadata.labels = Some(labels(&[("app", "squat")]));
    squatter
        .spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("busybox".into());
    create(&client, "d6", &squatter).await;
    merge_patch::<Deployment>(&client, "d6", "web", json!({"spec": {"paused": false}})).await;

    eventually("rolled out under another name", LIMIT, || async {
        rolled_out(&get::<Deployment>(&client, "d6", "web").await)
    })
    .await;
    let d: Deployment = get(&client, "d6", "web").await;
    assert_eq!(d.status.as_ref().unwrap().collision_count, Some(1));
    let rss = owned_replica_sets(&client, "d6", d.metadata.uid.as_deref().unwrap()).await;
    assert_eq!(rss.len(), 1);
    let name = rss[0].metadata.name.clone().unwrap();
    assert_ne!(name, format!("web-{hash}"));
    assert_eq!(
        name,
        format!(
            "web-{}",
            controllers::controller_utils::compute_hash(&d.spec.template, Some(1))
        )
    );
    let squatter: ReplicaSet = get(&client, "d6", &format!("web-{hash}")).await;
    assert_eq!(
        controller_uid(&squatter.metadata),
        None,
        "the squatter is left alone"
    );
}

/// A Deployment that would select every pod of its namespace is refused by the server, as
/// kube-apiserver refuses it, so no controller ever sees it. (The controller's own guard
/// for one stored before, which warns `SelectingAll` and does nothing, is
/// `controller_utils::selects_everything`, tested beside it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_selecting_everything_is_refused() {
    let server = Server::start(&[]);
    server.namespaces(&["d7"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());

    let mut d = deployment("all", "all", 2, IntOrString::Int(1), IntOrString::Int(0));
    d.spec.selector = Default::default();
    let err = Api::<Deployment>::for_type(client.clone(), "d7")
        .create(&PostParams::default(), &d)
        .await
        .expect_err("an empty selector is refused");
    assert!(
        err.to_string()
            .contains("empty selector is invalid for deployment"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pods(&client, "d7", "").await.is_empty());
}
