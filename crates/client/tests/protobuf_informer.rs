//! The protobuf encoding against a real `listwatch serve`: a factory's informer over
//! `ProtobufObject`s lists and watches pods in `application/vnd.kubernetes.protobuf`, its
//! cache follows the server, and its objects decode with the generated `k8s-pb` types; paged
//! protobuf lists and a 410 for a too-old resourceVersion read as they do in JSON; an
//! informer in watch-list mode syncs from a protobuf watch's initial events.

mod common;

use async_trait::async_trait;
use client::cache::ConfigureReflector as _;
use client::cache::{
    object_key, EventSource, ListPage, ListRequest, ListerWatcher, RestListerWatcher,
    SharedIndexInformer, SharedInformerFactory, WatchError, WatchRequest,
};
use client::object::{DynamicObject, KubeObject};
use client::protobuf_object::ProtobufObject;
use client::rest::resource::{CONFIGMAPS, PODS};
use client::rest::{
    Api, DeleteParams, ListParams, PatchParams, PatchType, PostParams, WatchEvent, WatchParams,
};
use common::{pod, until, within, Recorder, Server};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message as _;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// key → resourceVersion from a fresh JSON list.
async fn server_pods(api: &Api<Pod>) -> BTreeMap<String, String> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_informer_follows_the_server() {
    let server = Server::start(&[]);
    server.namespaces(&["alpha"]).await;
    let client = server.client();
    let pods: Api<Pod> = Api::for_type(client.clone(), "alpha");
    let pp = PostParams::default();
    pods.create(&pp, &pod("p1", "web")).await.unwrap();
    pods.create(&pp, &pod("p2", "db")).await.unwrap();

    let factory = SharedInformerFactory::builder()
        .client(client.clone())
        .namespace("alpha")
        .build();
    let informer = factory.protobuf_informer(&PODS).unwrap();
    assert_eq!(informer.name(), "pods/v1 as protobuf");
    let seen = Recorder::default();
    informer.add_event_handler(seen.clone());
    factory.start();
    let synced = factory.wait_for_cache_sync(LIMIT).await;
    assert!(synced.values().all(|s| *s), "not synced: {synced:?}");

    let p1 = informer
        .lister()
        .get(Some("alpha"), "p1")
        .expect("p1 cached");
    assert_eq!(p1.labels().unwrap().get("app"), Some("web"));
    assert!(p1.uid().is_some_and(|u| !u.is_empty()));
    // The cached bytes are the pod's protobuf message: the generated type reads it whole.
    let decoded = k8s_pb::api::core::v1::Pod::decode(p1.message()).unwrap();
    assert_eq!(
        decoded.spec.unwrap().containers[0].image.as_deref(),
        Some("nginx:1")
    );
    assert_eq!(
        decoded.metadata.unwrap().resource_version.as_deref(),
        p1.resource_version()
    );

    pods.create(&pp, &pod("p3", "web")).await.unwrap();
    pods.patch(
        "p1",
        &PatchParams::default(),
        PatchType::Merge,
        &json!({"metadata": {"labels": {"app": "web2"}}}),
    )
    .await
    .unwrap();
    pods.delete("p2", &DeleteParams::default()).await.unwrap();
    let want = server_pods(&pods).await;
    assert_eq!(want.len(), 2);
    until("the handler sees the changes", LIMIT, || {
        seen.live() == want
    })
    .await;
    assert_eq!(seen.0.lock().get("alpha/p2"), Some(&None), "p2 deleted");
    let cached: BTreeMap<String, String> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| {
            let rv = o.resource_version().unwrap_or_default().to_string();
            (object_key(&**o), rv)
        })
        .collect();
    assert_eq!(cached, want);
    let p1 = informer.lister().get(Some("alpha"), "p1").unwrap();
    assert_eq!(p1.labels().unwrap().get("app"), Some("web2"));
    within("shutdown", LIMIT, factory.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_lists_page_and_old_versions_expire() {
    let server = Server::start(&["--watch-cache-size", "5"]);
    server.namespaces(&["beta"]).await;
    let client = server.client();
    let pp = PostParams::default();
    let mut first_rv = None;
    for i in 0..12 {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("cm-{i:02}")),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("i".to_string(), i.to_string())])),
            ..ConfigMap::default()
        };
        let made = client
            .create::<ConfigMap>(&CONFIGMAPS, Some("beta"), &pp, &cm)
            .await
            .unwrap();
        first_rv.get_or_insert(made.metadata.resource_version.unwrap());
    }

    // One page of five, with a continue token and the count of what remains.
    let page = client
        .list_protobuf(
            &CONFIGMAPS,
            Some("beta"),
            &ListParams {
                limit: Some(5),
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    let names: Vec<String> = page
        .items
        .iter()
        .map(|m| {
            ProtobufObject::from_message(m.clone())
                .unwrap()
                .name()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["cm-00", "cm-01", "cm-02", "cm-03", "cm-04"]);
    assert!(page.continue_token.is_some());
    assert_eq!(page.remaining_item_count, Some(7));
    assert!(!page.resource_version.is_empty());

    // The same page cut into items while it arrives.
    let mut streamed = Vec::new();
    let meta = client
        .list_protobuf_streaming(
            &CONFIGMAPS,
            Some("beta"),
            &ListParams {
                limit: Some(5),
                ..ListParams::default()
            },
            |m| {
                streamed.push(ProtobufObject::from_slice(m).unwrap().name().to_string());
                Ok(())
            },
        )
        .await
        .unwrap();
    assert_eq!(streamed, names);
    assert!(meta.items.is_empty());
    assert_eq!(meta.resource_version, page.resource_version);
    assert_eq!(meta.continue_token, page.continue_token);
    assert_eq!(meta.remaining_item_count, Some(7));

    // The first write's version is long gone from a five-event history: 410, read from a
    // protobuf Status (an error response or an ERROR event, as the server chooses).
    let params = WatchParams::default().resource_version(first_rv.unwrap());
    match client
        .watch_objects::<ProtobufObject>(&CONFIGMAPS, Some("beta"), &params)
        .await
    {
        Err(e) => assert!(e.is_gone(), "{e}"),
        Ok(mut events) => match within("the ERROR event", LIMIT, events.next()).await {
            Some(Ok(WatchEvent::Error(status))) => {
                assert_eq!(status.code(), 410, "{status:?}");
                assert!(!status.message.is_empty());
            }
            other => panic!("expected a 410 ERROR event, got {other:?}"),
        },
    }
}

/// Counts the lists a lister-watcher is asked for.
struct CountLists {
    inner: RestListerWatcher<ProtobufObject>,
    lists: AtomicUsize,
}

#[async_trait]
impl ListerWatcher<ProtobufObject> for CountLists {
    async fn list(&self, request: ListRequest) -> Result<ListPage<ProtobufObject>, WatchError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(request).await
    }

    async fn watch(
        &self,
        request: WatchRequest,
    ) -> Result<Box<dyn EventSource<ProtobufObject>>, WatchError> {
        self.inner.watch(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_watch_list_syncs_from_the_initial_events() {
    let server = Server::start(&[]);
    server.namespaces(&["gamma"]).await;
    let client = server.client();
    let pods: Api<Pod> = Api::for_type(client.clone(), "gamma");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("w{i}"), "web"))
            .await
            .unwrap();
    }
    let source = Arc::new(CountLists {
        inner: RestListerWatcher::<ProtobufObject>::new(client.clone(), PODS).namespace("gamma"),
        lists: AtomicUsize::new(0),
    });
    let informer =
        SharedIndexInformer::builder(Arc::clone(&source) as Arc<dyn ListerWatcher<ProtobufObject>>)
            .name("pods-pb-watch-list")
            .watch_list(true)
            .build();
    informer.start();
    until("watch-list informer synced", LIMIT, || {
        informer.has_synced()
    })
    .await;
    // Synced from the watch's initial events, ended by the protobuf bookmark that carries
    // the initial-events-end annotation: no list was made.
    assert_eq!(source.lists.load(Ordering::SeqCst), 0);
    let mut names: Vec<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["w0", "w1", "w2"]);
    assert!(!informer.last_sync_resource_version().is_empty());
    within("shutdown", LIMIT, informer.shutdown()).await;
}
