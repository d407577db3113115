//! Our client against a real kube-apiserver, for the wire compatibility issue 3 asks for:
//! typed REST calls and the `Status` errors they decode, paged JSON and protobuf lists, a
//! watch with bookmarks, a 410 for a version the server no longer holds, informers over JSON
//! and protobuf objects that follow the server, and watch-list mode on a server that may
//! not support it.
//!
//! **Ignored by default**: none of the package registries this project builds from provides
//! a kube-apiserver, so CI cannot start one. To run them, point
//! `LISTWATCH_KUBE_APISERVER_KUBECONFIG` at a kubeconfig whose user may do anything on a
//! kube-apiserver (1.24 or later), then:
//!
//! ```text
//! cargo test -p client --test kube_apiserver -- --ignored
//! ```
//!
//! `a_compacted_version_is_gone` waits for the server to compact its etcd, which it does
//! every 5 minutes unless started with a shorter `--etcd-compaction-interval`.
//!
//! The same tests pass against `listwatch serve` with its `kubeconfig`, if the server is
//! started with `--history-window 1`: by default its store keeps the last 100,000 revisions
//! whatever their age, so no version of a quiet server is compacted away.
//!
//! Each test works in a namespace of its own, named after the test and the time. The
//! namespaces are left behind: removing one takes kube-controller-manager's namespace
//! controller, which a bare kube-apiserver does not run.

mod common;

use client::cache::ConfigureReflector as _;
use client::cache::{
    object_key, ListerWatcher, RestListerWatcher, SharedIndexInformer, SharedInformerFactory,
    NAMESPACE_INDEX,
};
use client::object::{DynamicObject, KubeObject};
use client::protobuf_object::ProtobufObject;
use client::rest::resource::{ApiResource, CONFIGMAPS, NAMESPACES, PODS};
use client::rest::{
    Api, Client, Config, DeleteParams, ListParams, PatchParams, PatchType, PostParams, WatchEvent,
    WatchParams,
};
use common::{labels, pod, typed_pod_crud, until, Recorder};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const KUBECONFIG_VAR: &str = "LISTWATCH_KUBE_APISERVER_KUBECONFIG";
const LIMIT: Duration = Duration::from_secs(30);

/// A client for the kube-apiserver named by [`KUBECONFIG_VAR`].
fn client() -> Client {
    let path = std::env::var_os(KUBECONFIG_VAR)
        .unwrap_or_else(|| panic!("set {KUBECONFIG_VAR} to a kube-apiserver's kubeconfig"));
    let config = Config::from_kubeconfig_file(&path, None).expect("the kubeconfig loads");
    Client::new(config).expect("a client")
}

/// Creates a namespace named `{test}-{time}` with its `default` service account (pods are
/// admitted only with one, and no controller makes it here), and returns the name.
async fn namespace(client: &Client, test: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!("{test}-{millis}");
    let ns = Namespace {
        metadata: meta(&name),
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone(), NAMESPACES)
        .create(&PostParams::default(), &ns)
        .await
        .expect("the namespace is created");
    let sa = ServiceAccount {
        metadata: meta("default"),
        ..ServiceAccount::default()
    };
    let created = Api::<ServiceAccount>::namespaced(
        client.clone(),
        ApiResource::of::<ServiceAccount>(),
        &name,
    )
    .create(&PostParams::default(), &sa)
    .await;
    if let Err(e) = created {
        assert!(e.is_already_exists(), "{e}");
    }
    name
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    }
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

/// key → resourceVersion of every pod in `ns`, from a fresh JSON list.
async fn server_pods(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let api = Api::<()>::namespaced(client.clone(), PODS, ns);
    let list = api.list_all_raw(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .map(|raw| {
            let o = DynamicObject::from_slice(raw).unwrap();
            let rv = o.resource_version().unwrap_or_default().to_string();
            (object_key(&o), rv)
        })
        .collect()
}

fn cached<K: KubeObject>(informer: &SharedIndexInformer<K>) -> BTreeMap<String, String> {
    informer
        .indexer()
        .list()
        .iter()
        .map(|o| {
            let rv = o.resource_version().unwrap_or_default().to_string();
            (object_key(&**o), rv)
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG"]
async fn typed_crud_and_status_errors() {
    let client = client();
    let ns = namespace(&client, "crud").await;
    typed_pod_crud(&Api::for_type(client, &ns)).await;
}

#[tokio::test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG"]
async fn paged_lists_and_a_watch() {
    let client = client();
    let ns = namespace(&client, "lists").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CONFIGMAPS, &ns);
    let pp = PostParams::default();
    for i in 0..25 {
        cms.create(&pp, &configmap(&format!("cm-{i:02}"), "0"))
            .await
            .unwrap();
    }

    // JSON pages of ten: a continue token, the count of what remains, one snapshot.
    let first = cms.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.remaining_item_count, Some(15));
    let token = first.continue_token.clone().expect("a continue token");
    let second = cms
        .list(&ListParams::default().limit(10).continue_token(token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 10);
    assert_eq!(second.resource_version, first.resource_version);
    let all = cms
        .list_all(&ListParams::default().limit(10))
        .await
        .unwrap();
    let names: Vec<String> = all
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, want);

    // The same objects as protobuf, whole and streamed.
    let page = client
        .list_protobuf(&CONFIGMAPS, Some(&ns), &ListParams::default().limit(10))
        .await
        .unwrap();
    let pb_names: Vec<String> = page
        .items
        .iter()
        .map(|m| {
            ProtobufObject::from_message(m.clone())
                .unwrap()
                .name()
                .to_string()
        })
        .collect();
    assert_eq!(pb_names, want[..10]);
    assert_eq!(page.remaining_item_count, Some(15));
    let mut streamed = Vec::new();
    let meta = client
        .list_protobuf_streaming(
            &CONFIGMAPS,
            Some(&ns),
            &ListParams::default().limit(10),
            |m| {
                streamed.push(ProtobufObject::from_slice(m).unwrap().name().to_string());
                Ok(())
            },
        )
        .await
        .unwrap();
    assert_eq!(streamed, pb_names);
    assert!(meta.continue_token.is_some());
    let mut raw_streamed = 0;
    client
        .list_raw_streaming(&CONFIGMAPS, Some(&ns), &ListParams::default(), |item| {
            let o = DynamicObject::from_slice(item).unwrap();
            assert!(o.name().starts_with("cm-"));
            raw_streamed += 1;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(raw_streamed, 25);

    // A watch from the list's version, with bookmarks, sees the changes in order.
    let mut w = cms
        .watch(
            &WatchParams::default()
                .resource_version(all.resource_version.clone())
                .idle_timeout(LIMIT),
        )
        .await
        .unwrap();
    cms.create(&pp, &configmap("new", "1")).await.unwrap();
    cms.patch(
        "new",
        &PatchParams::default(),
        PatchType::Merge,
        &json!({"data": {"v": "2"}}),
    )
    .await
    .unwrap();
    cms.delete("new", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match w.next().await.expect("the watch ended early").unwrap() {
            WatchEvent::Bookmark { .. } => {}
            WatchEvent::Added(c) => seen.push(("ADDED", c.data.unwrap_or_default()["v"].clone())),
            WatchEvent::Modified(c) => {
                seen.push(("MODIFIED", c.data.unwrap_or_default()["v"].clone()))
            }
            WatchEvent::Deleted(c) => {
                seen.push(("DELETED", c.data.unwrap_or_default()["v"].clone()))
            }
            WatchEvent::Error(s) => panic!("ERROR event: {s:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "1".to_string()),
            ("MODIFIED", "2".to_string()),
            ("DELETED", "2".to_string())
        ]
    );
}

/// The most this waits for the server's periodic compaction of its etcd
/// (`--etcd-compaction-interval`, 5 minutes unless set).
const COMPACTION_LIMIT: Duration = Duration::from_secs(330);

#[tokio::test]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG"]
async fn a_compacted_version_is_gone() {
    let client = client();
    let ns = namespace(&client, "compacted").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CONFIGMAPS, &ns);
    let pp = PostParams::default();
    let old_rv = cms
        .create(&pp, &configmap("old", "0"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cms.create(&pp, &configmap("new", "0")).await.unwrap();
    // A list with a limit at a given version reads that snapshot from etcd: 410 once the
    // server has compacted past it.
    let at_old = ListParams::default().limit(1).resource_version(old_rv);
    let start = Instant::now();
    let gone = loop {
        match cms.list(&at_old).await {
            Err(e) => break e,
            Ok(page) => {
                assert_eq!(page.items.len(), 1);
                assert!(
                    start.elapsed() < COMPACTION_LIMIT,
                    "no compaction within {COMPACTION_LIMIT:?}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    assert!(gone.is_gone(), "{gone}");
    assert_eq!(gone.code(), Some(410));
    // The same answer read from a protobuf Status.
    let e = client
        .list_protobuf(&CONFIGMAPS, Some(&ns), &at_old)
        .await
        .unwrap_err();
    assert!(e.is_gone(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG"]
async fn informers_follow_the_server() {
    let client = client();
    let ns = namespace(&client, "informers").await;
    let pods: Api<Pod> = Api::for_type(client.clone(), &ns);
    let pp = PostParams::default();
    for i in 0..3 {
        pods.create(&pp, &pod(&format!("p{i}"), "web"))
            .await
            .unwrap();
    }

    // The seed scheduler's selection, over JSON; and the same pods over protobuf.
    let factory = SharedInformerFactory::builder()
        .client(client.clone())
        .namespace(&ns)
        .build();
    let json = factory.dynamic_informer(&PODS).unwrap();
    let typed = factory.informer::<Pod>().unwrap();
    let pb = factory.protobuf_informer(&PODS).unwrap();
    let (json_seen, pb_seen) = (Recorder::default(), Recorder::default());
    json.add_event_handler(json_seen.clone());
    pb.add_event_handler(pb_seen.clone());
    let unfinished = SharedIndexInformer::builder(Arc::new(
        RestListerWatcher::<DynamicObject>::new(client.clone(), PODS)
            .namespace(&ns)
            .fields("status.phase!=Succeeded,status.phase!=Failed"),
    ) as Arc<dyn ListerWatcher<DynamicObject>>)
    .name("unfinished pods")
    .build();
    factory.start();
    unfinished.start();
    let synced = factory.wait_for_cache_sync(LIMIT).await;
    assert!(synced.values().all(|s| *s), "not synced: {synced:?}");
    until("the selected informer synced", LIMIT, || {
        unfinished.has_synced()
    })
    .await;
    assert_eq!(cached(&unfinished).len(), 3);
    let in_ns = unfinished.indexer().by_index(NAMESPACE_INDEX, &ns).unwrap();
    assert_eq!(in_ns.len(), 3);

    pods.create(&pp, &pod("p3", "db")).await.unwrap();
    pods.patch(
        "p0",
        &PatchParams::default(),
        PatchType::Merge,
        &json!({"metadata": {"labels": {"app": "web2"}}}),
    )
    .await
    .unwrap();
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    let want = server_pods(&client, &ns).await;
    assert_eq!(want.len(), 3);
    until("the handlers see every change", LIMIT, || {
        json_seen.live() == want && pb_seen.live() == want
    })
    .await;
    let p1 = format!("{ns}/p1");
    assert_eq!(json_seen.0.lock().get(&p1), Some(&None));
    assert_eq!(pb_seen.0.lock().get(&p1), Some(&None));
    until("the caches follow", LIMIT, || {
        cached(&json) == want
            && cached(&typed) == want
            && cached(&pb) == want
            && cached(&unfinished) == want
    })
    .await;
    let typed_p0 = typed.lister().get(Some(&ns), "p0").expect("p0 cached");
    assert_eq!(labels(&typed_p0)["app"], "web2");
    let p0 = pb.lister().get(Some(&ns), "p0").expect("p0 cached");
    assert_eq!(p0.labels().unwrap().get("app"), Some("web2"));
    factory.shutdown().await;
    unfinished.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kube-apiserver: set LISTWATCH_KUBE_APISERVER_KUBECONFIG"]
async fn watch_list_mode_syncs_with_or_without_server_support() {
    let client = client();
    let ns = namespace(&client, "watchlist").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CONFIGMAPS, &ns);
    for i in 0..3 {
        cms.create(&PostParams::default(), &configmap(&format!("w{i}"), "0"))
            .await
            .unwrap();
    }
    // A kube-apiserver without the WatchList feature refuses the request (or ends the
    // stream without the initial-events-end bookmark): the reflector lists instead.
    let informer = SharedIndexInformer::builder(Arc::new(
        RestListerWatcher::<DynamicObject>::new(client.clone(), CONFIGMAPS).namespace(&ns),
    ) as Arc<dyn ListerWatcher<DynamicObject>>)
    .name("configmaps in watch-list mode")
    .watch_list(true)
    .build();
    informer.start();
    until("synced", LIMIT, || informer.has_synced()).await;
    let mut names: Vec<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["w0", "w1", "w2"]);
    cms.create(&PostParams::default(), &configmap("w3", "0"))
        .await
        .unwrap();
    until("the new object arrives", LIMIT, || {
        informer.indexer().list().len() == 4
    })
    .await;
    informer.shutdown().await;
}
