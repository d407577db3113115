//! Informers that hold objects without `metadata.managedFields`, against a real
//! `listwatch serve`: the listed and the watched objects both come without them, everything
//! else arrives, and writing a cached object back leaves the server's record intact.

mod common;

use client::cache::ConfigureReflector as _;
use client::cache::{RestListerWatcher, SharedIndexInformer, SharedInformerFactory};
use client::object::KubeObject;
use client::rest::resource::PODS;
use client::rest::{Api, PostParams};
use common::{pod, until, within, Server};
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

fn managers(p: &Pod) -> Vec<String> {
    let mut m: Vec<String> = p
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.manager.clone())
        .collect();
    m.sort();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimmed_informers_hold_no_managed_fields_and_writes_keep_the_servers() {
    let server = Server::start(&[]);
    server.namespaces(&["trim"]).await;
    let client = server.client();
    let pods: Api<Pod> = Api::for_type(client.clone(), "trim");
    let pp = PostParams::default();
    // Listed: created before the informers start.
    let listed = pods.create(&pp, &pod("listed", "web")).await.unwrap();
    assert!(
        !managers(&listed).is_empty(),
        "the server records a manager"
    );

    let trimmed = SharedIndexInformer::builder(Arc::new(
        RestListerWatcher::<Pod>::new(client.clone(), PODS)
            .namespace("trim")
            .strip_managed_fields(true),
    ))
    .name("trimmed")
    .build();
    let factory = SharedInformerFactory::builder()
        .client(client.clone())
        .namespace("trim")
        .strip_managed_fields(true)
        .build();
    let from_factory = factory.informer::<Pod>().unwrap();
    let untrimmed = SharedIndexInformer::builder(Arc::new(
        RestListerWatcher::<Pod>::new(client.clone(), PODS).namespace("trim"),
    ))
    .name("untrimmed")
    .build();
    trimmed.start();
    factory.start();
    untrimmed.start();
    assert!(
        client::cache::wait_for_cache_sync(&[&trimmed, &from_factory, &untrimmed], LIMIT).await
    );
    // Watched: created afterwards.
    pods.create(&pp, &pod("watched", "web")).await.unwrap();
    let all_there = |inf: &SharedIndexInformer<Pod>| inf.indexer().len() == 2;
    until("both pods in every informer", LIMIT, || {
        all_there(&trimmed) && all_there(&from_factory) && all_there(&untrimmed)
    })
    .await;
    for name in ["listed", "watched"] {
        let key = format!("trim/{name}");
        let kept = untrimmed.indexer().get_by_key(&key).unwrap();
        assert!(!managers(&kept).is_empty(), "{name}: untrimmed keeps them");
        for inf in [&trimmed, &from_factory] {
            let cut = inf.indexer().get_by_key(&key).unwrap();
            assert_eq!(cut.metadata.managed_fields, None, "{name}");
            // Nothing else is lost.
            let mut expected = (*kept).clone();
            expected.metadata.managed_fields = None;
            assert_eq!(*cut, expected, "{name}");
        }
    }

    // A cached object written back: the server's ownership record stays (and gains the
    // writer's change), as with kube-apiserver when a client sends no managedFields.
    let mut cached = (*trimmed.indexer().get_by_key("trim/listed").unwrap()).clone();
    cached
        .metadata
        .labels
        .get_or_insert_default()
        .insert("touched".into(), "yes".into());
    let written = pods.replace("listed", &pp, &cached).await.unwrap();
    assert_eq!(managers(&written), managers(&listed));
    until("the trimmed informer sees the write", LIMIT, || {
        trimmed
            .indexer()
            .get_by_key("trim/listed")
            .is_some_and(|p| p.resource_version() == written.resource_version())
    })
    .await;
    assert_eq!(
        trimmed
            .indexer()
            .get_by_key("trim/listed")
            .unwrap()
            .metadata
            .managed_fields,
        None
    );
    within("shutdown", LIMIT, async {
        trimmed.shutdown().await;
        untrimmed.shutdown().await;
        factory.shutdown().await;
    })
    .await;
}
