//! Informers against a real `listwatch serve` on an ephemeral port: dynamic and typed
//! informers through the factory, listers, late handlers, the scheduler's field selector,
//! and the `controller` example's logic.

mod common;

#[path = "../examples/controller.rs"]
#[allow(dead_code)]
mod controller_example;

use api::labels::LabelSelector;
use client::cache::ConfigureReflector as _;
use client::cache::{
    DeleteEvent, ResourceEventHandler, RestListerWatcher, SharedIndexInformer,
    SharedInformerFactory, NAMESPACE_INDEX,
};
use client::object::{DynamicObject, KubeObject};
use client::rest::resource::{CONFIGMAPS, PODS};
use client::rest::{Api, Client, DeleteParams, ListParams, PatchParams, PatchType, PostParams};
use common::{pod, until, within, Server};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// Per key, the state the last notification left: `Some(rv)` after an add or update,
/// `None` after a delete; plus whether the add was part of the initial list.
#[derive(Default)]
struct Seen {
    last: BTreeMap<String, Option<String>>,
    initial_adds: Vec<String>,
    deletes: Vec<String>,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Seen>>);

impl Recorder {
    fn last(&self) -> BTreeMap<String, Option<String>> {
        self.0.lock().last.clone()
    }
    fn live(&self) -> BTreeMap<String, String> {
        self.last()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }
}

impl<K: KubeObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>, initial: bool) {
        let key = client::cache::object_key(&**o);
        let mut s = self.0.lock();
        if initial {
            s.initial_adds.push(key.clone());
        }
        s.last.insert(key, o.resource_version().map(str::to_string));
    }
    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        self.on_add(new, false);
    }
    fn on_delete(&self, d: &DeleteEvent<K>) {
        let key = match d {
            DeleteEvent::Object(o) => client::cache::object_key(&**o),
            DeleteEvent::DeletedFinalStateUnknown { key, .. } => key.clone(),
        };
        let mut s = self.0.lock();
        s.deletes.push(key.clone());
        s.last.insert(key, None);
    }
}

/// key → resourceVersion of a fresh list of pods from the server.
async fn server_pods(client: &Client, params: &ListParams) -> BTreeMap<String, String> {
    let list = client
        .list_all_raw(&PODS, None, params)
        .await
        .expect("listing pods");
    list.items
        .iter()
        .map(|raw| {
            let o = DynamicObject::from_slice(raw).unwrap();
            (
                client::cache::object_key(&o),
                o.resource_version().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_and_typed_informers_follow_the_server() {
    let server = Server::start(&[]);
    server.namespaces(&["alpha", "beta"]).await;
    let client = server.client();
    let alpha: Api<Pod> = Api::for_type(client.clone(), "alpha");
    let beta: Api<Pod> = Api::for_type(client.clone(), "beta");
    let pp = PostParams::default();
    alpha.create(&pp, &pod("p1", "web")).await.unwrap();
    beta.create(&pp, &pod("p2", "db")).await.unwrap();

    let factory = SharedInformerFactory::new(client.clone());
    let dynamic = factory.dynamic_informer(&PODS).unwrap();
    let typed = factory.informer::<Pod>().unwrap();
    let dyn_seen = Recorder::default();
    let typed_seen = Recorder::default();
    dynamic.add_event_handler(dyn_seen.clone());
    typed.add_event_handler(typed_seen.clone());
    assert!(!dynamic.has_synced() && !typed.has_synced());
    factory.start();
    let synced = factory.wait_for_cache_sync(LIMIT).await;
    assert_eq!(synced.len(), 2, "{synced:?}");
    assert!(synced.values().all(|s| *s), "not synced: {synced:?}");
    assert!(dynamic.has_synced() && typed.has_synced());
    assert!(!dynamic.last_sync_resource_version().is_empty());

    // Listers over the initial state.
    let lister = dynamic.lister();
    let p1 = lister.get(Some("alpha"), "p1").expect("p1 cached");
    assert_eq!(p1.labels().unwrap().get("app"), Some("web"));
    assert_eq!(
        lister
            .namespaced("beta")
            .list(&LabelSelector::everything())
            .len(),
        1
    );
    assert_eq!(
        lister
            .list(&LabelSelector::parse("app=db").unwrap())
            .iter()
            .map(|o| o.name().to_string())
            .collect::<Vec<_>>(),
        vec!["p2"]
    );
    assert_eq!(lister.by_index(NAMESPACE_INDEX, "alpha").unwrap().len(), 1);
    let typed_p2 = typed.lister().get(Some("beta"), "p2").expect("typed p2");
    assert_eq!(
        typed_p2.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("nginx:1")
    );
    {
        let s = dyn_seen.0.lock();
        let mut initial = s.initial_adds.clone();
        initial.sort();
        assert_eq!(initial, vec!["alpha/p1", "beta/p2"]);
    }

    // Creates, updates, deletes.
    let p3 = alpha.create(&pp, &pod("p3", "web")).await.unwrap();
    let p1 = alpha
        .patch(
            "p1",
            &PatchParams::default(),
            PatchType::Merge,
            &json!({"metadata": {"labels": {"app": "web2"}}}),
        )
        .await
        .unwrap();
    beta.delete("p2", &DeleteParams::default()).await.unwrap();
    let want: BTreeMap<String, String> = [
        (
            "alpha/p1".to_string(),
            p1.metadata.resource_version.clone().unwrap(),
        ),
        (
            "alpha/p3".to_string(),
            p3.metadata.resource_version.clone().unwrap(),
        ),
    ]
    .into();
    for (name, seen) in [("dynamic", &dyn_seen), ("typed", &typed_seen)] {
        until(&format!("{name} handler sees the changes"), LIMIT, || {
            seen.live() == want
        })
        .await;
        assert_eq!(
            seen.last().get("beta/p2"),
            Some(&None),
            "{name}: p2 deleted"
        );
        assert_eq!(seen.0.lock().deletes, vec!["beta/p2"], "{name}: one delete");
    }
    assert_eq!(test_server::cached_versions(&dynamic), want);
    assert_eq!(test_server::cached_versions(&typed), want);
    assert_eq!(
        typed
            .lister()
            .get(Some("alpha"), "p1")
            .unwrap()
            .metadata
            .labels
            .as_ref()
            .unwrap()["app"],
        "web2"
    );
    assert!(lister
        .namespaced("beta")
        .list(&LabelSelector::everything())
        .is_empty());
    assert_eq!(server_pods(&client, &ListParams::default()).await, want);

    // A handler added late gets synthetic adds for exactly the cache, then live changes.
    let late = Recorder::default();
    let reg = dynamic.add_event_handler(late.clone());
    until("late handler synced", LIMIT, || reg.has_synced()).await;
    {
        let s = late.0.lock();
        let mut initial = s.initial_adds.clone();
        initial.sort();
        assert_eq!(initial, vec!["alpha/p1", "alpha/p3"]);
    }
    assert_eq!(late.live(), want);
    alpha.delete("p3", &DeleteParams::default()).await.unwrap();
    until("late handler sees the delete", LIMIT, || {
        late.last().get("alpha/p3") == Some(&None)
    })
    .await;

    within("factory shutdown", LIMIT, factory.shutdown()).await;
    assert!(dynamic.is_stopped() && typed.is_stopped());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_field_selector_drops_finished_pods() {
    let server = Server::start(&[]);
    server.namespaces(&["sched"]).await;
    let client = server.client();
    let pods: Api<Pod> = Api::for_type(client.clone(), "sched");
    let pp = PostParams::default();
    for name in ["a", "b", "c"] {
        pods.create(&pp, &pod(name, "web")).await.unwrap();
    }
    // The seed 001 scheduler's selection, and a label selector on top.
    let lw = RestListerWatcher::<DynamicObject>::new(client.clone(), PODS)
        .namespace("sched")
        .fields("status.phase!=Succeeded,status.phase!=Failed")
        .labels("app=web");
    let informer = SharedIndexInformer::builder(Arc::new(lw))
        .name("unfinished")
        .build();
    let seen = Recorder::default();
    informer.add_event_handler(seen.clone());
    informer.start();
    assert!(client::cache::wait_for_cache_sync(&[&informer], LIMIT).await);
    assert_eq!(informer.indexer().len(), 3);

    // "b" finishes: it leaves the selection, which the informer sees as a delete.
    let status = json!({"status": {"phase": "Succeeded"}});
    client
        .request_bytes(
            http::Method::PATCH,
            "/api/v1/namespaces/sched/pods/b/status",
            Some((
                bytes::Bytes::from(serde_json::to_vec(&status).unwrap()),
                "application/merge-patch+json",
            )),
        )
        .await
        .expect("patching pod status");
    // A pod with another label never shows up.
    pods.create(&pp, &pod("other", "db")).await.unwrap();
    pods.create(&pp, &pod("d", "web")).await.unwrap();
    until("b gone, d there", LIMIT, || {
        let l = seen.last();
        l.get("sched/b") == Some(&None) && l.contains_key("sched/d")
    })
    .await;
    let mut names: Vec<String> = informer
        .lister()
        .namespaced("sched")
        .list(&LabelSelector::everything())
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["a", "c", "d"]);
    assert!(!seen.last().contains_key("sched/other"));
    let fresh = server_pods(
        &client,
        &ListParams::default()
            .fields("status.phase!=Succeeded,status.phase!=Failed,metadata.namespace=sched")
            .labels("app=web"),
    )
    .await;
    assert_eq!(test_server::cached_versions(&informer), fresh);
    within("shutdown", LIMIT, informer.shutdown()).await;
}

fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// The `controller` example's logic against a real server: handlers feed the rate-limited
/// queue, two workers reconcile from the lister, failures are retried, and the controller's
/// view converges on the server's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_example_converges() {
    use controller_example::Controller;
    let server = Server::start(&[]);
    server.namespaces(&["ctl"]).await;
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CONFIGMAPS, "ctl");
    let pp = PostParams::default();
    for i in 0..5 {
        cms.create(&pp, &configmap(&format!("cm{i}"), &[("v", "0")]))
            .await
            .unwrap();
    }
    // Fails twice before it reconciles.
    cms.create(&pp, &configmap("flaky", &[("fail", "2")]))
        .await
        .unwrap();

    let controller = Arc::new(Controller::new(client.clone(), Some("ctl")));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let c = Arc::clone(&controller);
        async move {
            c.run(2, LIMIT, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    until("controller synced", LIMIT, || {
        controller.informer().has_synced()
    })
    .await;

    // Changes while the controller runs.
    for i in 0..5 {
        let name = format!("cm{i}");
        if i % 2 == 0 {
            cms.patch(
                &name,
                &PatchParams::default(),
                PatchType::Merge,
                &json!({"data": {"v": "1"}}),
            )
            .await
            .unwrap();
        } else {
            cms.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    }
    cms.create(&pp, &configmap("late", &[("v", "x")]))
        .await
        .unwrap();

    let want = {
        let list = cms.list_all(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .map(|cm| {
                (
                    format!("ctl/{}", cm.metadata.name.as_deref().unwrap_or("")),
                    cm.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(want.len(), 5, "cm0, cm2, cm4, flaky, late");
    until("controller view equals the server", LIMIT, || {
        controller.observed() == want
    })
    .await;
    let stats = controller.stats();
    assert!(stats.retried.load(Ordering::Relaxed) >= 2, "flaky retried");
    assert_eq!(stats.gave_up.load(Ordering::Relaxed), 0);
    assert!(controller
        .metrics_text()
        .contains("workqueue_retries_total{name=\"configmap-controller\"}"));

    let _ = stop_tx.send(());
    within("controller stops", LIMIT, run)
        .await
        .unwrap()
        .expect("controller run");
}

/// Two factory informers of pods with different label selectors each cache only their
/// pods, and a factory informer's transform is applied to what it caches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_informers_with_their_own_options() {
    let server = Server::start(&[]);
    server.namespaces(&["alpha"]).await;
    let client = server.client();
    let alpha: Api<Pod> = Api::for_type(client.clone(), "alpha");
    let pp = PostParams::default();
    for (name, app) in [("w1", "web"), ("w2", "web"), ("d1", "db")] {
        alpha.create(&pp, &pod(name, app)).await.unwrap();
    }

    let factory = SharedInformerFactory::new(client.clone());
    let web = factory
        .informer_with::<Pod>(factory.informer_options().labels("app=web"))
        .unwrap();
    let db = factory
        .informer_with::<Pod>(
            factory
                .informer_options()
                .labels("app=db")
                .page_size(1)
                .transform("mark", |p: Arc<Pod>| {
                    let mut p = (*p).clone();
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert("transformed".into(), "yes".into());
                    Arc::new(p)
                }),
        )
        .unwrap();
    let all = factory.informer::<Pod>().unwrap();
    factory.start();
    let synced = factory.wait_for_cache_sync(LIMIT).await;
    assert_eq!(synced.len(), 3, "{synced:?}");
    assert!(synced.values().all(|s| *s), "not synced: {synced:?}");

    let names = |i: &SharedIndexInformer<Pod>| {
        let mut keys: Vec<String> = i
            .indexer()
            .list()
            .iter()
            .map(|p| client::cache::object_key(&**p))
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(names(&web), ["alpha/w1", "alpha/w2"]);
    assert_eq!(names(&db), ["alpha/d1"]);
    assert_eq!(names(&all).len(), 3);

    // A later pod reaches only the informer whose selector it matches, transformed there.
    alpha.create(&pp, &pod("d2", "db")).await.unwrap();
    until("d2 in the db informer", LIMIT, || names(&db).len() == 2).await;
    until("d2 in the plain informer", LIMIT, || names(&all).len() == 4).await;
    assert_eq!(names(&web), ["alpha/w1", "alpha/w2"]);
    for p in db.indexer().list() {
        let marked = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("transformed"))
            .map(String::as_str);
        assert_eq!(marked, Some("yes"), "{:?}", p.metadata.name);
    }
    for p in web
        .indexer()
        .list()
        .iter()
        .chain(all.indexer().list().iter())
    {
        assert!(p.metadata.annotations.is_none(), "{:?}", p.metadata.name);
    }
    within("factory shutdown", LIMIT, factory.shutdown()).await;
}
