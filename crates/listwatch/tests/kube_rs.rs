//! kube-rs (the Rust community's Kubernetes client) against a real `listwatch serve`, over
//! TLS with the kubeconfig `listwatch kubeconfig` writes: typed CRUD, patches (merge and
//! server-side apply), `Status` errors decoded as kube-rs decodes kube-apiserver's, and
//! kube-runtime's watcher feeding a reflector store — with list+watch and with streaming
//! lists (`sendInitialEvents`).

mod common;

use common::TestServer;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher, WatchStreamExt as _};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

async fn client(srv: &TestServer) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(srv.tls_kubeconfig()).expect("reading the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a kube-rs config from our kubeconfig");
    kube::Client::try_from(config).expect("a kube-rs client")
}

fn configmap(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"k": "v"}
    }))
    .expect("a ConfigMap")
}

/// Waits until `check` holds for the store's names, or fails after 10 s.
async fn until_store(
    store: &reflector::Store<ConfigMap>,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut names: Vec<String> = store
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        names.sort();
        if check(&names) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the store holds {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_crud_patches_and_errors() {
    let srv = TestServer::start();
    let client = client(&srv).await;
    let info = client.apiserver_version().await.expect("GET /version");
    assert!(!info.git_version.is_empty(), "{info:?}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &configmap("a", "web"))
        .await
        .expect("create");
    let rv: u64 = created
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion");
    assert!(created.metadata.uid.is_some());
    cms.create(&PostParams::default(), &configmap("b", "db"))
        .await
        .expect("create b");

    let got = cms.get("a").await.expect("get");
    assert_eq!(got.data, Some(BTreeMap::from([("k".into(), "v".into())])));
    let web = cms
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list by label");
    let names: Vec<_> = web
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["a"]);
    // Paged: one item per page, continue tokens followed by kube-rs.
    let page = cms
        .list(&ListParams::default().limit(1))
        .await
        .expect("first page");
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().expect("a continue token");
    let rest = cms
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .expect("second page");
    assert_eq!(rest.items.len(), 1);
    assert_ne!(rest.items[0].metadata.name, page.items[0].metadata.name);

    let patched = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        patched
            .data
            .as_ref()
            .and_then(|d| d.get("extra"))
            .map(String::as_str),
        Some("1")
    );
    let applied = cms
        .patch(
            "c",
            &PatchParams::apply("kube-rs-test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c"}, "data": {"owned": "yes"}
            })),
        )
        .await
        .expect("server-side apply creates");
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["kube-rs-test"]);

    // A stale resourceVersion is a 409 Conflict, decoded by kube-rs from our Status.
    let mut stale = created.clone();
    stale.metadata.resource_version = Some(rv.to_string());
    stale.data = Some(BTreeMap::from([("k".into(), "stale".into())]));
    match cms.replace("a", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}")
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    match cms.get("missing").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"), "{s:?}")
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    assert!(cms.get_opt("missing").await.expect("get_opt").is_none());

    cms.delete("b", &DeleteParams::default())
        .await
        .expect("delete");
    let left: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, vec!["a", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_watcher_feeds_a_reflector_store() {
    let srv = TestServer::start();
    let client = client(&srv).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("before", "web"))
        .await
        .expect("create");

    // Both of kube-runtime's initial modes: paged list then watch, and a streaming list
    // (a watch with sendInitialEvents that ends its initial state with a bookmark).
    for (mode, config) in [
        ("list+watch", watcher::Config::default()),
        (
            "streaming list",
            watcher::Config::default().streaming_lists(),
        ),
    ] {
        let (store, writer) = reflector::store::<ConfigMap>();
        let stream = watcher(cms.clone(), config)
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    panic!("watcher error: {e}");
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready())
            .await
            .unwrap_or_else(|_| panic!("{mode}: the store never became ready"))
            .expect("store ready");
        until_store(&store, mode, |n| n.contains(&"before".to_string())).await;

        let name = format!("during-{}", mode.len());
        cms.create(&PostParams::default(), &configmap(&name, "web"))
            .await
            .expect("create while watching");
        until_store(&store, mode, |n| n.contains(&name)).await;
        cms.delete(&name, &DeleteParams::default())
            .await
            .expect("delete while watching");
        until_store(&store, mode, |n| !n.contains(&name)).await;
        task.abort();
    }
}
